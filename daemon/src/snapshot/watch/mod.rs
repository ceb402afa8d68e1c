//! The folder watcher: per recently used folder, the directories with events
//! since the last snapshot — or why that set cannot be trusted (full scan).
//!
//! One inotify instance per folder, a watch per (non-excluded) directory.
//!
//! Exactness rests on two kernel facts: a watch added before a directory is
//! listed reports every later change in it, and the events of a completed
//! system call are queued when it returns, so draining the descriptor until
//! `EAGAIN` before a snapshot sees every change made before that snapshot.
//! Anything that breaks the chain (queue overflow, watch limit, a watch that
//! cannot be added, the folder itself moved, an unmount) drops the watch: the
//! next snapshot is a full scan, whose walk puts a fresh set of watches in
//! place (each directory's just before the scan lists it).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::scan::Excludes;
use crate::environment::Environment;

mod folder;
mod mounts;

pub(crate) use mounts::mount_points;

use folder::FolderWatch;
pub use folder::{Filled, Filler};
use mounts::MountTable;

/// Limits and knobs, from agentd's environment as read at start.
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
    /// The settings `env` asks for (`AGENTX_WATCH`, `AGENTX_WATCH_MAX_FOLDERS`,
    /// `AGENTX_WATCH_MAX_DIRS`, `AGENTX_WATCH_IDLE_SECS`,
    /// `AGENTX_WATCH_VERIFY_EVERY`), the defaults for the rest.
    pub fn from_environment(env: &Environment) -> Self {
        let num = |name: &str| env.var(name).and_then(|v| v.trim().parse::<u64>().ok());
        // Leave most of the user's inotify watches to editors and tools.
        let system = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(8192);
        Self {
            enabled: !matches!(env.var("AGENTX_WATCH"), Some("off" | "0" | "false" | "no")),
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
    /// the base manifest for the rest; `verify` also runs a full scan (a
    /// verification overdue because the store was never idle: see [`Watchers::due`]).
    Dirty {
        dirs: BTreeSet<Vec<u8>>,
        verify: bool,
    },
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
    /// The mount table as last read (mounts send no inotify event).
    mounts: MountTable,
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
            mounts: MountTable::open(),
        }
    }

    /// Breaks the watch of every folder whose mounts changed since its
    /// watch started (the next snapshot of it scans in full).
    fn check_mounts(&mut self) {
        if !self.mounts.refresh() {
            return;
        }
        for w in self.folders.values_mut() {
            if w.broken.is_none() && self.mounts.inside(&w.root) != w.mounts {
                w.broken = Some("a file system was mounted or unmounted in it".into());
            }
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
    /// watch is started where possible, which that scan's walk fills (see
    /// [`Watchers::filler`]), so the scan is the new base — unless `dirs` (the directories `base` holds, counted only then) says
    /// the folder is over the watch cap: then no watch is tried at all, so a
    /// folder too large to watch costs no more than with the watcher off.
    pub fn plan(
        &mut self,
        folder: &Path,
        ex: &Excludes,
        base: Option<&str>,
        dirs: impl FnOnce() -> Option<usize>,
    ) -> Plan {
        if !self.cfg.enabled {
            return Plan::Full("the watcher is off (AGENTX_WATCH=off)".into());
        }
        if let Some(reason) = self.distrusted.get(folder) {
            return Plan::Full(reason.clone());
        }
        self.check_mounts();
        // A watch whose filling scan did not finish watches only part of
        // the tree: start again.
        if self.folders.get(folder).is_some_and(|w| !w.filled) {
            self.folders.remove(folder);
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
                // Verified while idle (`due`); here only if no idle moment came.
                let verify = w.since_verify >= self.cfg.verify_every.saturating_mul(2);
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
        if let Some(n) = dirs().filter(|n| *n > self.cfg.max_dirs) {
            let reason = format!(
                "it has more than {} directories (AGENTX_WATCH_MAX_DIRS; its last snapshot had {n})",
                self.cfg.max_dirs
            );
            self.note(folder, reason.clone(), false);
            return Plan::Full(reason);
        }
        self.release_lru();
        match FolderWatch::start(folder, ex, &self.cfg, &self.mounts) {
            Ok(w) => {
                self.folders.insert(folder.to_path_buf(), w);
                self.not_watched.remove(folder);
                Plan::Full(match previous {
                    Some((reason, ..)) => reason,
                    None => "not watched yet".into(),
                })
            }
            Err(why) => {
                let reason = why.to_string();
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

    /// The hook for the full scan about to run, when it is to put the
    /// folder's watches in place (a watch just started).
    pub fn filler(&self, folder: &Path) -> Option<Filler> {
        self.folders
            .get(folder)
            .filter(|w| !w.filled && w.broken.is_none())
            .map(FolderWatch::filler)
    }

    /// The scan [`Watchers::filler`] hooked ended: with what it found, or
    /// (None) it failed, and the watch starts over.
    pub fn filled(&mut self, folder: &Path, filled: Option<Filled>) {
        match filled {
            Some(f) => {
                if let Some(w) = self.folders.get_mut(folder) {
                    w.fill(f);
                    tracing::debug!(folder = %folder.display(), dirs = w.wds.len(), "watching");
                }
            }
            None => {
                self.folders.remove(folder);
            }
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

    /// Watched folders due for a verification scan whose tree has not
    /// changed since their newest snapshot (no event since): a full scan now
    /// must equal that snapshot's manifest `base`. Returns (folder, base).
    pub fn due(&mut self) -> Vec<(PathBuf, String)> {
        self.check_mounts();
        let every = self.cfg.verify_every;
        self.folders
            .iter_mut()
            .filter(|(_, w)| w.since_verify >= every)
            .filter_map(|(folder, w)| {
                w.drain();
                let quiet = w.broken.is_none() && w.dirty.is_empty();
                quiet
                    .then(|| w.base.clone().map(|b| (folder.clone(), b)))
                    .flatten()
            })
            .collect()
    }

    /// Whether `folder` is still watched with no event since its newest
    /// snapshot (a verification scan that raced a change proves nothing).
    pub fn still_quiet(&mut self, folder: &Path) -> bool {
        self.check_mounts();
        self.folders.get_mut(folder).is_some_and(|w| {
            w.drain();
            w.broken.is_none() && w.dirty.is_empty()
        })
    }

    /// A verification scan agreed with the watcher's view.
    pub fn verified(&mut self, folder: &Path) {
        if let Some(w) = self.folders.get_mut(folder) {
            w.since_verify = 0;
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
            // A watch being filled belongs to a scan still running.
            .filter(|(_, w)| w.filled && w.last_used.elapsed() >= idle)
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
        // Events of a watch still being filled are the filling scan's.
        for w in self.folders.values_mut().filter(|w| w.filled) {
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
                Some(n) => format!(
                    "the last snapshot re-read {}",
                    agentx_shared::plural::count(n as u64, "directory")
                ),
                None => "the last snapshot was a full scan".into(),
            };
            return format!(
                "watched ({}; {last})",
                agentx_shared::plural::count(w.wds.len() as u64, "directory")
            );
        }
        match self.not_watched.get(folder) {
            Some((reason, ..)) => format!("not watched: {reason}"),
            None => "not watched yet (watching starts with its next snapshot)".into(),
        }
    }

    /// Tests: drops the folder's pending events, as inotify does for a
    /// change it cannot see (a write through a shared mapping).
    #[cfg(test)]
    pub fn forget_events(&mut self, folder: &Path) {
        if let Some(w) = self.folders.get_mut(folder) {
            w.drain();
            w.dirty.clear();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_come_from_the_environment_given_not_the_process() {
        // Whatever the process's own environment says, only the snapshot
        // counts: off in one, on (the default) in an empty one.
        let env = Environment::from_pairs([
            ("AGENTX_WATCH", "off"),
            ("AGENTX_WATCH_MAX_FOLDERS", " 3 "),
            ("AGENTX_WATCH_IDLE_SECS", "7"),
            ("AGENTX_WATCH_VERIFY_EVERY", "not a number"),
        ]);
        let cfg = WatchConfig::from_environment(&env);
        assert!(!cfg.enabled);
        assert_eq!(cfg.max_folders, 3);
        assert_eq!(cfg.idle, Duration::from_secs(7));
        assert_eq!(cfg.verify_every, 20);
        let defaults = WatchConfig::from_environment(&Environment::default());
        assert!(defaults.enabled);
        assert_eq!(defaults.max_folders, 16);
        assert_eq!(defaults.idle, Duration::from_secs(30 * 60));
        for (value, enabled) in [("0", false), ("false", false), ("no", false), ("on", true)] {
            let env = Environment::from_pairs([("AGENTX_WATCH", value)]);
            assert_eq!(
                WatchConfig::from_environment(&env).enabled,
                enabled,
                "{value}"
            );
        }
    }
}
