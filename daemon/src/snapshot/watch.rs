//! The folder watcher: one inotify instance per recently used folder, a watch
//! per (non-excluded) directory, and the set of directories with events since
//! the last snapshot — or the reason that set cannot be trusted (full scan).
//!
//! Exactness rests on two kernel facts: a watch added before a directory is
//! listed reports every later change in it, and the events of a completed
//! system call are queued when it returns, so draining the descriptor until
//! `EAGAIN` before a snapshot sees every change made before that snapshot.
//! Anything that breaks the chain (queue overflow, watch limit, a watch that
//! cannot be added, the folder itself moved, an unmount) drops the watch: the
//! next snapshot is a full scan, taken after a fresh set of watches is in place.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use super::scan::{Excludes, excluded};

/// Limits and knobs, read from agentd's environment at start.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// `AGENTX_WATCH=off` turns the watcher off (every snapshot scans).
    pub enabled: bool,
    /// Folders watched at once; the least recently used is released.
    pub max_folders: usize,
    /// Directories watched per folder; a larger folder is scanned instead.
    pub max_dirs: usize,
    /// A folder without snapshots this long is released.
    pub idle: Duration,
    /// Every Nth watcher-based snapshot is checked against a full scan.
    pub verify_every: u32,
    /// Tests: treat every file system as one inotify cannot follow.
    #[cfg(test)]
    pub assume_remote_fs: bool,
}

impl WatchConfig {
    pub fn from_env() -> Self {
        let num = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        // Leave most of the user's inotify watches to editors and tools.
        let system = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(8192);
        Self {
            enabled: !matches!(
                std::env::var("AGENTX_WATCH").as_deref(),
                Ok("off" | "0" | "false" | "no")
            ),
            max_folders: num("AGENTX_WATCH_MAX_FOLDERS").map_or(16, |n| n as usize),
            max_dirs: num("AGENTX_WATCH_MAX_DIRS").map_or(system / 4, |n| n as usize),
            idle: Duration::from_secs(num("AGENTX_WATCH_IDLE_SECS").unwrap_or(30 * 60)),
            verify_every: num("AGENTX_WATCH_VERIFY_EVERY")
                .map_or(20, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            #[cfg(test)]
            assume_remote_fs: false,
        }
    }
}

/// How the next snapshot of a folder must be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Scan the whole folder; the reason is shown by `agentx status`.
    Full(String),
    /// Re-stat only these directories ("" is the folder itself), reusing
    /// the base manifest for the rest; `verify` also runs a full scan.
    Dirty {
        dirs: BTreeSet<Vec<u8>>,
        verify: bool,
    },
}

const MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MODIFY)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR)
    .union(AddWatchFlags::IN_DONT_FOLLOW);

/// File systems whose changes inotify does not see in full (changes made by
/// other clients or by the server): NFS, SMB/CIFS, FUSE, 9p, Ceph, AFS, Coda.
const REMOTE_FS: &[i64] = &[
    0x6969,      // NFS
    0x517B,      // SMB
    0xFF53_4D42, // CIFS
    0xFE53_4D42, // SMB2
    0x6573_5546, // FUSE
    0x0102_1997, // 9p
    0x00C3_6400, // Ceph
    0x5346_414F, // AFS
    0x7375_7245, // Coda
];

/// One watched folder.
struct FolderWatch {
    inotify: Inotify,
    root: PathBuf,
    names: Vec<String>,
    paths: Vec<PathBuf>,
    dirs: HashMap<WatchDescriptor, Vec<u8>>,
    wds: BTreeMap<Vec<u8>, WatchDescriptor>,
    dirty: BTreeSet<Vec<u8>>,
    /// Set when the dirty set stopped being trustworthy.
    broken: Option<String>,
    /// The manifest the dirty set is relative to.
    base: Option<String>,
    last_used: Instant,
    /// Watcher-based snapshots since the last verification.
    since_verify: u32,
    /// Directories the last snapshot re-statted (None: it was a full scan).
    last_dirty: Option<usize>,
    max_dirs: usize,
    /// The breakage was a resource limit (watch count, watch limit).
    hit_limit: bool,
}

fn join(root: &Path, rel: &[u8]) -> PathBuf {
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(OsStr::from_bytes(rel))
    }
}

fn child(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    if !dir.is_empty() {
        p.extend_from_slice(dir);
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

impl FolderWatch {
    /// Watches every directory of `root` (excluded ones left out); the
    /// watches are in place before this returns, so a scan that follows
    /// misses nothing later events would not report.
    fn start(root: &Path, ex: &Excludes, cfg: &WatchConfig) -> Result<Self, String> {
        let fs = nix::sys::statfs::statfs(root).map_err(|e| format!("statfs failed: {e}"))?;
        #[allow(clippy::unnecessary_cast)] // f_type's width differs by target
        let fs_type = fs.filesystem_type().0 as i64;
        #[cfg(test)]
        let fs_type = if cfg.assume_remote_fs {
            0x6969
        } else {
            fs_type
        };
        if REMOTE_FS.contains(&fs_type) {
            return Err(format!(
                "it is on a network or FUSE file system (type {fs_type:#x}), where inotify misses changes"
            ));
        }
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| format!("inotify_init failed: {e}"))?;
        let mut w = Self {
            inotify,
            root: root.to_path_buf(),
            names: ex.names.clone(),
            paths: ex.paths.clone(),
            dirs: HashMap::new(),
            wds: BTreeMap::new(),
            dirty: BTreeSet::new(),
            broken: None,
            base: None,
            last_used: Instant::now(),
            since_verify: 0,
            last_dirty: None,
            max_dirs: cfg.max_dirs,
            hit_limit: false,
        };
        w.add_tree(Vec::new());
        match w.broken.take() {
            Some(reason) => Err(reason),
            None => Ok(w),
        }
    }

    fn same_excludes(&self, ex: &Excludes) -> bool {
        self.names == ex.names && self.paths == ex.paths
    }

    fn is_excluded(&self, rel: &[u8], name: &[u8]) -> bool {
        excluded(name, &self.names) || self.paths.iter().any(|p| *p == join(&self.root, rel))
    }

    /// Watches `rel` and every directory below it, marking each dirty.
    fn add_tree(&mut self, rel: Vec<u8>) {
        let mut stack = vec![rel];
        while let Some(dir) = stack.pop() {
            if self.broken.is_some() {
                return;
            }
            if self.wds.len() >= self.max_dirs {
                self.broken = Some(format!(
                    "it has more than {} directories (AGENTX_WATCH_MAX_DIRS)",
                    self.max_dirs
                ));
                self.hit_limit = true;
                return;
            }
            let path = join(&self.root, &dir);
            match self.inotify.add_watch(&path, MASK) {
                Ok(wd) => {
                    // Already watched under another name: it was renamed
                    // after the event being handled (events are read late).
                    // The rename's own events, still queued, follow.
                    if let Some(other) = self.dirs.get(&wd)
                        && *other != dir
                        && self.wds.get(other) == Some(&wd)
                    {
                        self.wds.remove(&other.clone());
                    }
                    self.dirs.insert(wd, dir.clone());
                    self.wds.insert(dir.clone(), wd);
                }
                // Gone or replaced since it was listed: its parent's events
                // (already queued) cover it.
                Err(Errno::ENOENT | Errno::ENOTDIR) => continue,
                Err(Errno::ENOSPC) => {
                    self.broken = Some(
                        "the inotify watch limit was reached (fs.inotify.max_user_watches)".into(),
                    );
                    self.hit_limit = true;
                    return;
                }
                Err(e) => {
                    self.broken = Some(format!("cannot watch {}: {e}", path.display()));
                    return;
                }
            }
            self.dirty.insert(dir.clone());
            let Ok(read) = std::fs::read_dir(&path) else {
                continue;
            };
            for entry in read.flatten() {
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let name = entry.file_name();
                let sub = child(&dir, name.as_bytes());
                if !self.is_excluded(&sub, name.as_bytes()) {
                    stack.push(sub);
                }
            }
        }
    }

    /// Stops watching `rel` and everything below it.
    fn remove_tree(&mut self, rel: &[u8]) {
        let mut prefix = rel.to_vec();
        prefix.push(b'/');
        let below: Vec<Vec<u8>> = self
            .wds
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .map(|(p, _)| p.clone())
            .chain(self.wds.contains_key(rel).then(|| rel.to_vec()))
            .collect();
        for p in below {
            if let Some(wd) = self.wds.remove(&p) {
                self.dirs.remove(&wd);
                let _ = self.inotify.rm_watch(wd);
            }
        }
    }

    /// Reads every queued event (until `EAGAIN`) into the dirty set.
    fn drain(&mut self) {
        loop {
            if self.broken.is_some() {
                return;
            }
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EAGAIN) => return,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    self.broken = Some(format!("reading inotify events failed: {e}"));
                    return;
                }
            };
            for ev in events {
                self.event(ev.wd, ev.mask, ev.name.as_deref().map(OsStr::as_bytes));
            }
        }
    }

    fn event(&mut self, wd: WatchDescriptor, mask: AddWatchFlags, name: Option<&[u8]>) {
        use AddWatchFlags as F;
        if mask.contains(F::IN_Q_OVERFLOW) {
            self.broken = Some("the inotify event queue overflowed".into());
            return;
        }
        if mask.contains(F::IN_UNMOUNT) {
            self.broken = Some("a file system in it was unmounted".into());
            return;
        }
        // Events of watches already removed (their parent's events cover them).
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return;
        };
        if mask.contains(F::IN_IGNORED) {
            self.dirs.remove(&wd);
            if self.wds.get(&dir) == Some(&wd) {
                self.wds.remove(&dir);
            }
            if dir.is_empty() {
                self.broken = Some("the folder itself was moved or deleted".into());
            }
            return;
        }
        match name {
            Some(name) => {
                self.dirty.insert(dir.clone());
                if mask.contains(F::IN_ISDIR) {
                    let sub = child(&dir, name);
                    if mask.intersects(F::IN_DELETE | F::IN_MOVED_FROM) {
                        self.remove_tree(&sub);
                    }
                    if mask.intersects(F::IN_CREATE | F::IN_MOVED_TO) {
                        self.remove_tree(&sub);
                        if !self.is_excluded(&sub, name) {
                            self.add_tree(sub);
                        }
                    }
                }
            }
            None => {
                if dir.is_empty() && mask.intersects(F::IN_DELETE_SELF | F::IN_MOVE_SELF) {
                    self.broken = Some("the folder itself was moved or deleted".into());
                    return;
                }
                // The directory's own stat data changed: it is re-statted
                // with its contents.
                self.dirty.insert(dir);
            }
        }
    }
}

/// Every watched folder of agentd, with the bounds of [`WatchConfig`].
pub struct Watchers {
    cfg: WatchConfig,
    folders: HashMap<PathBuf, FolderWatch>,
    /// Why a folder is not watched (bounded), since when, and whether
    /// watching may be tried again at once (else after [`RETRY`]).
    not_watched: HashMap<PathBuf, (String, Instant, bool)>,
    /// Folders whose verification failed: full scans until agentd restarts.
    distrusted: HashMap<PathBuf, String>,
}

/// A folder whose watch could not be set up is tried again after this long.
const RETRY: Duration = Duration::from_secs(10 * 60);
/// Reasons remembered for `agentx status`.
const MAX_REASONS: usize = 256;

impl Watchers {
    pub fn new(cfg: WatchConfig) -> Self {
        Self {
            cfg,
            folders: HashMap::new(),
            not_watched: HashMap::new(),
            distrusted: HashMap::new(),
        }
    }

    #[cfg(test)]
    pub fn config_mut(&mut self) -> &mut WatchConfig {
        &mut self.cfg
    }

    fn note(&mut self, folder: &Path, reason: String, retry_now: bool) {
        if self.not_watched.len() >= MAX_REASONS {
            self.not_watched.clear();
        }
        tracing::info!(folder = %folder.display(), "not watching: {reason}");
        self.not_watched
            .insert(folder.to_path_buf(), (reason, Instant::now(), retry_now));
    }

    /// Drains the folder's events and says how to snapshot it against the
    /// manifest `base` (its newest). When the answer is a full scan, a fresh
    /// watch is put in place first where possible, so the scan is the new base.
    pub fn plan(&mut self, folder: &Path, ex: &Excludes, base: Option<&str>) -> Plan {
        if !self.cfg.enabled {
            return Plan::Full("the watcher is off (AGENTX_WATCH=off)".into());
        }
        if let Some(reason) = self.distrusted.get(folder) {
            return Plan::Full(reason.clone());
        }
        let reason = match self.folders.get_mut(folder) {
            Some(w) => {
                w.last_used = Instant::now();
                w.drain();
                match (&w.broken, &w.base) {
                    (Some(reason), _) => Some(reason.clone()),
                    _ if !w.same_excludes(ex) => Some("the excluded directories changed".into()),
                    (None, Some(b)) if base == Some(b.as_str()) => None,
                    _ => Some("no snapshot since the watch started".into()),
                }
            }
            None => None,
        };
        match (reason, self.folders.get_mut(folder)) {
            (None, Some(w)) => {
                w.since_verify += 1;
                let verify = w.since_verify >= self.cfg.verify_every;
                if verify {
                    w.since_verify = 0;
                }
                w.last_dirty = Some(w.dirty.len());
                return Plan::Dirty {
                    dirs: w.dirty.clone(),
                    verify,
                };
            }
            (Some(reason), Some(w)) if w.broken.is_some() || !w.same_excludes(ex) => {
                // Start over: the old watches cannot be trusted. Limits are
                // not tried again at once.
                let retry_now = !w.hit_limit;
                self.folders.remove(folder);
                self.note(folder, reason, retry_now);
            }
            (Some(reason), Some(w)) => {
                w.last_dirty = None;
                return Plan::Full(reason);
            }
            _ => {}
        }
        let previous = self.not_watched.get(folder).cloned();
        if let Some((reason, since, false)) = &previous
            && since.elapsed() < RETRY
        {
            return Plan::Full(reason.clone());
        }
        self.release_lru();
        match FolderWatch::start(folder, ex, &self.cfg) {
            Ok(w) => {
                tracing::debug!(folder = %folder.display(), dirs = w.wds.len(), "watching");
                self.folders.insert(folder.to_path_buf(), w);
                self.not_watched.remove(folder);
                Plan::Full(match previous {
                    Some((reason, ..)) => reason,
                    None => "not watched yet".into(),
                })
            }
            Err(reason) => {
                self.note(folder, reason.clone(), false);
                Plan::Full(reason)
            }
        }
    }

    fn release_lru(&mut self) {
        while self.folders.len() >= self.cfg.max_folders.max(1) {
            let Some(oldest) = self
                .folders
                .iter()
                .min_by_key(|(_, w)| w.last_used)
                .map(|(p, _)| p.clone())
            else {
                return;
            };
            self.folders.remove(&oldest);
            self.note(
                &oldest,
                format!(
                    "released for a more recently used folder (at most {} are watched)",
                    self.cfg.max_folders
                ),
                true,
            );
        }
    }

    /// A snapshot of `folder` is now stored as manifest `id`: the dirty set
    /// starts again from it.
    pub fn scanned(&mut self, folder: &Path, id: &str) {
        if let Some(w) = self.folders.get_mut(folder)
            && w.broken.is_none()
        {
            w.dirty.clear();
            w.base = Some(id.to_owned());
        }
    }

    /// The watcher lost track (a change raced the listing): watch again.
    pub fn reset(&mut self, folder: &Path, why: &str) {
        self.folders.remove(folder);
        self.note(folder, format!("the watcher lost track ({why})"), true);
    }

    /// A verification found the watcher's view wrong: full scans from now on.
    pub fn distrust(&mut self, folder: &Path, detail: &str) {
        tracing::warn!(
            folder = %folder.display(),
            "watcher-based snapshot differs from a full scan ({detail}); scanning this folder in full from now on"
        );
        self.folders.remove(folder);
        self.distrusted.insert(
            folder.to_path_buf(),
            format!("a verification scan found a change inotify missed ({detail})"),
        );
    }

    /// Drains every watch (keeping kernel queues short) and releases
    /// folders idle for longer than the configured time.
    pub fn tick(&mut self) {
        let idle = self.cfg.idle;
        let expired: Vec<PathBuf> = self
            .folders
            .iter()
            .filter(|(_, w)| w.last_used.elapsed() >= idle)
            .map(|(p, _)| p.clone())
            .collect();
        for folder in expired {
            self.folders.remove(&folder);
            self.note(
                &folder,
                format!(
                    "released after {} min without snapshots",
                    idle.as_secs() / 60
                ),
                true,
            );
        }
        for w in self.folders.values_mut() {
            w.drain();
        }
    }

    /// One line for `agentx status`: watched or not, and why not.
    pub fn describe(&self, folder: &Path) -> String {
        if !self.cfg.enabled {
            return "not watched: the watcher is off (AGENTX_WATCH=off)".into();
        }
        if let Some(reason) = self.distrusted.get(folder) {
            return format!("not watched: {reason}");
        }
        if let Some(w) = self.folders.get(folder) {
            if let Some(reason) = &w.broken {
                return format!("not watched: {reason} (the next snapshot scans in full)");
            }
            let last = match w.last_dirty {
                Some(n) => format!("the last snapshot re-read {n} directories"),
                None => "the last snapshot was a full scan".into(),
            };
            return format!("watched ({} directories; {last})", w.wds.len());
        }
        match self.not_watched.get(folder) {
            Some((reason, ..)) => format!("not watched: {reason}"),
            None => "not watched yet (watching starts with its next snapshot)".into(),
        }
    }

    /// Whether the last snapshot of `folder` came from the watcher.
    #[cfg(test)]
    pub fn last_was_incremental(&self, folder: &Path) -> bool {
        self.folders
            .get(folder)
            .is_some_and(|w| w.last_dirty.is_some())
    }
}
