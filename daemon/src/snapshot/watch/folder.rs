//! One watched folder: its inotify instance, a watch per directory, and
//! the directories with events since the last snapshot (or why not exact).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use super::WatchConfig;
use super::mounts::{Mount, MountTable};
use crate::snapshot::scan::{Excludes, excluded};

/// Why a folder cannot be watched: its snapshots fall back to full scans,
/// and the text says why in `agentx status`.
#[derive(Debug, thiserror::Error)]
pub enum Unwatchable {
    /// The folder itself cannot be read (gone, or no permission).
    #[error("the folder cannot be read")]
    Unreadable,
    /// A network or FUSE file system is mounted inside the folder.
    #[error(
        "a network or FUSE file system ({fstype}) is mounted in it at {point}, where inotify misses changes"
    )]
    RemoteMount { fstype: String, point: String },
    /// The folder is on a network or FUSE file system (type `0`).
    #[error("it is on a network or FUSE file system (type {0:#x}), where inotify misses changes")]
    RemoteFs(i64),
    /// The file system could not be asked its type.
    #[error("statfs failed: {0}")]
    Statfs(#[source] Errno),
    /// No inotify instance (the user's limit reached).
    #[error("inotify_init failed: {0}")]
    Inotify(#[source] Errno),
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

/// [`MASK`] for a watch added through `/proc/self/fd/N` (a magic link to
/// the directory the scan holds open, which must be followed).
const FD_MASK: AddWatchFlags = MASK.difference(AddWatchFlags::IN_DONT_FOLLOW);

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
pub(super) struct FolderWatch {
    pub(super) inotify: Arc<Inotify>,
    pub(super) root: PathBuf,
    pub(super) names: Vec<String>,
    pub(super) paths: Vec<PathBuf>,
    pub(super) dirs: HashMap<WatchDescriptor, Vec<u8>>,
    pub(super) wds: BTreeMap<Vec<u8>, WatchDescriptor>,
    pub(super) dirty: BTreeSet<Vec<u8>>,
    /// Set when the dirty set stopped being trustworthy.
    pub(super) broken: Option<String>,
    /// The manifest the dirty set is relative to.
    pub(super) base: Option<String>,
    pub(super) last_used: Instant,
    /// Watcher-based snapshots since the last verification.
    pub(super) since_verify: u32,
    /// Directories the last snapshot re-statted (None: it was a full scan).
    pub(super) last_dirty: Option<usize>,
    pub(super) max_dirs: usize,
    /// The breakage was a resource limit (watch count, watch limit).
    pub(super) hit_limit: bool,
    /// The folder's identity (device, inode) when the watch started: a path
    /// that leads elsewhere now (an ancestor renamed, a new checkout put in
    /// its place, a mount over it) sends no event to the old directory.
    pub(super) root_id: [u64; 2],
    /// The file systems mounted below the folder when the watch started.
    pub(super) mounts: Vec<Mount>,
    /// Its watches were put in place by a full scan's walk (until then it
    /// watches nothing: see [`Filler`]).
    pub(super) filled: bool,
}

/// Puts a watch on each directory a full scan enters, before the scan lists
/// it: the scan and the start of the watch are one walk of the tree. The
/// watch holds from the moment each directory is listed, as when the
/// watches were put in place by a walk of their own before the scan.
pub struct Filler {
    inotify: Arc<Inotify>,
    root: PathBuf,
    max_dirs: usize,
    found: Mutex<Vec<(WatchDescriptor, Vec<u8>)>>,
    /// Why the watch cannot be complete, and whether that is a limit.
    failed: Mutex<Option<(String, bool)>>,
}

/// What a [`Filler`] found: the watches, or why not.
pub struct Filled {
    found: Vec<(WatchDescriptor, Vec<u8>)>,
    failed: Option<(String, bool)>,
}

impl Filler {
    fn fail(&self, why: String, limit: bool) {
        if let Ok(mut f) = self.failed.lock() {
            f.get_or_insert((why, limit));
        }
    }

    pub fn finish(self) -> Filled {
        Filled {
            found: self.found.into_inner().unwrap_or_default(),
            failed: self
                .failed
                .into_inner()
                .unwrap_or_else(|_| Some(("the watch could not be set up".into(), false))),
        }
    }
}

impl crate::snapshot::scan::DirHook for Filler {
    fn entering(&self, dir: &OwnedFd, rel: &[u8]) {
        if self.failed.lock().map_or(true, |f| f.is_some()) {
            return;
        }
        let Ok(mut found) = self.found.lock() else {
            return;
        };
        if found.len() >= self.max_dirs {
            drop(found);
            self.fail(
                format!(
                    "it has more than {} directories (AGENTX_WATCH_MAX_DIRS)",
                    self.max_dirs
                ),
                true,
            );
            return;
        }
        let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
        match self.inotify.add_watch(path.as_str(), FD_MASK) {
            Ok(wd) => found.push((wd, rel.to_vec())),
            Err(Errno::ENOSPC) => {
                drop(found);
                self.fail(
                    "the inotify watch limit was reached (fs.inotify.max_user_watches)".into(),
                    true,
                );
            }
            Err(e) => {
                drop(found);
                self.fail(
                    format!("cannot watch {}: {e}", short(&join(&self.root, rel))),
                    false,
                );
            }
        }
    }
}

use crate::snapshot::scan::identity;

/// A path for a one-line reason: at most about 160 bytes, its head and tail.
pub(super) fn short(path: &Path) -> String {
    const KEEP: usize = 78;
    let s = path.display().to_string();
    if s.len() <= 2 * KEEP + 3 {
        return s;
    }
    let head = s
        .char_indices()
        .take_while(|(i, _)| *i < KEEP)
        .map(|(_, c)| c);
    let tail_start = s
        .char_indices()
        .map(|(i, _)| i)
        .find(|i| *i >= s.len() - KEEP)
        .unwrap_or(s.len());
    format!("{}...{}", head.collect::<String>(), &s[tail_start..])
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
    /// A watch of `root` with no directory watched yet: the full scan that
    /// follows puts them in place as it walks ([`FolderWatch::filler`]).
    /// Fails for a folder inotify cannot follow (network and FUSE file
    /// systems, at the folder or mounted in it).
    pub(super) fn start(
        root: &Path,
        ex: &Excludes,
        cfg: &WatchConfig,
        table: &MountTable,
    ) -> Result<Self, Unwatchable> {
        let root_id = identity(root).ok_or(Unwatchable::Unreadable)?;
        let mounts = table.inside(root);
        if let Some(m) = mounts.iter().find(|m| m.is_remote()) {
            return Err(Unwatchable::RemoteMount {
                fstype: m.fstype.clone(),
                point: short(&m.point),
            });
        }
        let fs = nix::sys::statfs::statfs(root).map_err(Unwatchable::Statfs)?;
        #[allow(clippy::unnecessary_cast)] // f_type's width differs by target
        let fs_type = fs.filesystem_type().0 as i64;
        #[cfg(test)]
        let fs_type = if cfg.assume_remote_fs {
            0x6969
        } else {
            fs_type
        };
        if REMOTE_FS.contains(&fs_type) {
            return Err(Unwatchable::RemoteFs(fs_type));
        }
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(Unwatchable::Inotify)?;
        let w = Self {
            inotify: Arc::new(inotify),
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
            root_id,
            mounts,
            filled: false,
        };
        Ok(w)
    }

    /// The hook of the full scan that fills this watch.
    pub(super) fn filler(&self) -> Filler {
        Filler {
            inotify: Arc::clone(&self.inotify),
            root: self.root.clone(),
            max_dirs: self.max_dirs,
            found: Mutex::new(Vec::new()),
            failed: Mutex::new(None),
        }
    }

    /// Takes the watches a full scan put in place (or why it could not).
    pub(super) fn fill(&mut self, filled: Filled) {
        self.filled = true;
        if let Some((why, limit)) = filled.failed {
            self.broken = Some(why);
            self.hit_limit = limit;
            return;
        }
        for (wd, dir) in filled.found {
            // Entered twice (renamed during the walk): the rename's events,
            // still queued, settle it, as in `add_tree`.
            if let Some(other) = self.dirs.get(&wd)
                && *other != dir
                && self.wds.get(other) == Some(&wd)
            {
                self.wds.remove(&other.clone());
            }
            self.dirs.insert(wd, dir.clone());
            self.wds.insert(dir, wd);
        }
    }

    pub(super) fn same_excludes(&self, ex: &Excludes) -> bool {
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
                    self.broken = Some(format!("cannot watch {}: {e}", short(&path)));
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

    /// Reads every queued event (until `EAGAIN`) into the dirty set, after
    /// checking that the folder's path still leads to the watched directory.
    pub(super) fn drain(&mut self) {
        if self.broken.is_none() && identity(&self.root) != Some(self.root_id) {
            self.broken = Some(
                "the folder's path leads to another directory now (renamed or replaced)".into(),
            );
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_path_in_a_reason_keeps_its_head_and_tail() {
        let long: String = (0..900).map(|i| format!("d{i}/")).collect::<String>() + "end";
        let s = short(Path::new(&format!("/start/{long}")));
        assert!(s.len() < 170, "{}", s.len());
        assert!(s.starts_with("/start/d0/") && s.ends_with("/end") && s.contains("..."));
        assert_eq!(short(Path::new("/a/b")), "/a/b");
        // Multibyte characters are never cut in half.
        let wide = "é".repeat(200);
        assert!(short(Path::new(&wide)).contains("..."));
    }
}
