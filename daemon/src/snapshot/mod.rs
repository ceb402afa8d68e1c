//! Folder snapshots on agentd's own content-addressed store: per-folder
//! timelines of manifests over shared blobs; undo, rewind, retention, GC.
//!
//! Layout under `<profile>/checkpoints/`: `packs/` (blobs), and per folder
//! `folders/<key>-<hash>/` with `timeline.json`, `manifests/` and, while a
//! restore runs, `restore.json` (finished by the next operation if agentd dies).
//! A manifest file is a full tree or a delta on the one before it; the
//! newest is rewritten whole when the store is idle once its chain reaches
//! [`COMPACT_DEPTH`] (at [`MAX_DELTA_DEPTH`] a snapshot does it itself); a
//! manifest stays while the timeline uses it or a delta it keeps builds on it. An unchanged watched folder's snapshot
//! points at the previous manifest: only the timeline is written.

mod blobs;
pub mod diff;
mod fair;
mod incremental;
pub mod manifest;
pub mod restore;
mod restoring;
mod scan;
#[cfg(test)]
pub(crate) mod seams;
pub mod service;
mod standing;
mod summary;
mod take;
#[cfg(test)]
mod tests;
mod timeline;
mod undo;
pub(crate) mod verify;
pub mod watch;

use std::collections::HashMap;
#[cfg(test)]
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::durable;
use crate::environment::Environment;
use blobs::Blobs;
pub(crate) use blobs::parse_index;
#[cfg(test)]
pub(crate) use blobs::{Loc, encode_index};
#[cfg(test)]
use manifest::{Hash, Kind};
use manifest::{Manifest, Stored};
use restore::{Action, Op, Planned};
pub(crate) use timeline::parse_timeline;
use timeline::{Timeline, chains, load_manifest, read_timeline};

/// Message snapshots (before and after each message) kept per folder.
pub const KEEP: usize = 50;
/// Manual snapshots (`agentx snapshot`) kept per folder, on their own.
pub const KEEP_MANUAL: usize = 20;
/// Snapshots taken before an undo or rewind kept per folder, on their own:
/// undoing never pushes out the messages it undoes.
pub const KEEP_PRE_RESTORE: usize = 20;

/// Delta chain length at which the newest manifest is rewritten whole
/// when the store is next idle (so no snapshot waits for it).
const COMPACT_DEPTH: u32 = 16;
/// Longest chain of delta manifests: a snapshot past it writes its
/// manifest whole (a store that is never idle).
const MAX_DELTA_DEPTH: u32 = 64;
/// Entries of newest manifests kept in memory across folders (about 180
/// bytes each): past it, the least recently used folders' are dropped and
/// read back from disk at their next snapshot. The folder in use keeps its
/// own whatever its size.
const RESIDENT_ENTRIES: usize = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum SnapError {
    #[error(
        "snapshots and undo are off in {0}: it is your home folder or above it (run agentx in a project folder)"
    )]
    Home(String),
    #[error("{0}")]
    NotFound(String),
    #[error("snapshot store: {0}")]
    Io(#[from] std::io::Error),
    #[error("agentd is shutting down")]
    Closed,
    #[error("{0}")]
    Busy(String),
    /// agentd hit a bug (`0` says where); logged, the store reopened.
    #[error("snapshot store: {0}")]
    Internal(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before a message.
    Before,
    /// After the turn of that message.
    After,
    /// Taken on request (`agentx snapshot`).
    Manual,
    /// Taken before an undo or rewind, so it can be undone.
    PreRestore,
}

/// Who a snapshot was taken for (concurrent requests share one snapshot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// Conversation id or one-shot id ("" for manual snapshots).
    pub session: String,
    pub phase: Phase,
    /// Pairs a `Before` with its `After`.
    pub pair: String,
    pub label: String,
}

impl Owner {
    /// The snapshot a restore takes ahead of planning, so that a full scan
    /// it needs runs off the store's thread; the restore's own pre-restore
    /// snapshot then takes its place (see `take_unchanged`).
    pub fn ahead_of_restore() -> Self {
        Self {
            session: String::new(),
            phase: Phase::PreRestore,
            pair: String::new(),
            label: "before restore".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snap {
    pub id: String,
    pub manifest: String,
    pub created_at: i64,
    pub files: u64,
    pub bytes: u64,
    /// Paths that differ from the snapshot before it.
    pub changed: u64,
    pub owners: Vec<Owner>,
    #[serde(default)]
    pub undone: bool,
    /// Paths present but not captured (unreadable, over 10 MB, changing
    /// while read), and the reasons summed up.
    #[serde(default)]
    pub skipped: u64,
    #[serde(default)]
    pub skipped_why: String,
    /// The folder's (device, inode) when it was taken: another directory
    /// at the same path later (a new checkout) is not the same folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<[u64; 2]>,
}

impl Snap {
    /// Taken only for `phase` (and for someone): retained on that phase's cap.
    fn only(&self, phase: Phase) -> bool {
        !self.owners.is_empty() && self.owners.iter().all(|o| o.phase == phase)
    }

    /// How many snapshots of this one's kind a folder keeps: message
    /// snapshots, manual ones and those before a restore each have their
    /// own cap, so neither of the others ever pushes a message out.
    fn cap(&self) -> (usize, usize) {
        if self.only(Phase::Manual) {
            (1, KEEP_MANUAL)
        } else if self.only(Phase::PreRestore) {
            (2, KEEP_PRE_RESTORE)
        } else {
            (0, KEEP)
        }
    }
}

impl Snap {
    pub fn label(&self) -> String {
        let labels: Vec<&str> = self.owners.iter().map(|o| o.label.as_str()).collect();
        match labels.len() {
            0 => String::new(),
            1 => labels[0].to_owned(),
            n => format!("{} (+{} more)", labels[0], n - 1),
        }
    }
}

/// A restore in progress: the manifest whose state the paths are being
/// given. Replayed (idempotently) if agentd died half-way.
#[derive(Debug, Serialize, Deserialize)]
struct RestoreJournal {
    want_manifest: String,
    paths: Vec<Vec<u8>>,
    /// Names the restore's temp files (see `restore::remove_temps`); empty
    /// in a journal of an older agentd.
    #[serde(default)]
    token: String,
}

impl RestoreJournal {
    /// Where a folder's journal is kept, in its snapshot directory.
    fn path(dir: &Path) -> PathBuf {
        dir.join("restore.json")
    }

    /// Makes the journal durable before the first path is touched.
    fn write(&self, dir: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        durable::write_atomic(&Self::path(dir), &bytes)
    }
}

struct FolderState {
    dir: PathBuf,
    timeline: Timeline,
    /// Newest manifest (id, tree, delta depth), kept in memory as the stat cache.
    latest: Option<(String, Arc<Manifest>, u32)>,
    /// A few recently used manifests (an undo's "before" was recently newest).
    recent: Vec<(String, Arc<Manifest>)>,
    /// The base of each delta manifest read so far (None: a full one).
    bases: HashMap<String, Option<String>>,
    /// Whether a manifest (by id) holds files linked from outside.
    outside_links: Option<(String, bool)>,
    /// When the folder was last used ([`SnapshotStore::clock`]'s reading).
    used: u64,
}

/// What an undo or rewind did.
#[derive(Debug, Default)]
pub struct RestoreReport {
    pub applied: Vec<Planned>,
    /// Conflicts not forced.
    pub skipped: Vec<Planned>,
    /// Paths a restore never touches (not captured now or then), with why.
    pub left_alone: Vec<Planned>,
    /// `path: why` of paths that failed.
    pub errors: Vec<String>,
    pub pre_restore: String,
    /// The message undone (first line, how long ago); empty for a rewind.
    pub message: String,
    /// Messages passed over because they changed nothing.
    pub passed: Vec<String>,
    /// Whether the message now counts as undone (every path restored).
    pub undone: bool,
}

/// What an undo or rewind would do.
#[derive(Debug, Default)]
pub struct Plan {
    pub changes: Vec<Planned>,
    pub left_alone: Vec<Planned>,
    pub message: String,
    pub passed: Vec<String>,
    /// The snapshot a rewind goes back to (restore by this id to be sure
    /// of the one listed).
    pub target_id: String,
}

/// Which snapshot a rewind goes back to.
#[derive(Debug, Clone)]
pub enum RewindTo {
    /// 1 = newest.
    Index(usize),
    Id(String),
}

/// A message of a conversation: its before snapshot and (once the turn
/// ended) its after snapshot.
type Message = (Snap, Option<Snap>);

/// "“first line” (3 min ago)".
fn describe_message(before: &Snap, session: &str) -> String {
    let label = before
        .owners
        .iter()
        .find(|o| o.session == session && o.phase == Phase::Before)
        .map(|o| o.label.clone())
        .unwrap_or_default();
    let secs = (agentx_shared::time::now_ms() - before.created_at).max(0) / 1000;
    let ago = match secs {
        0..=4 => "just now".to_owned(),
        5..=59 => format!("{secs} s ago"),
        60..=3599 => format!("{} min ago", secs / 60),
        3600..=86399 => format!("{} h ago", secs / 3600),
        _ => format!("{} days ago", secs / 86400),
    };
    format!(
        "\u{201c}{}\u{201d} ({ago})",
        restore::escape(label.as_bytes())
    )
}

pub struct SnapshotStore {
    root: PathBuf,
    blobs: Blobs,
    folders: HashMap<String, FolderState>,
    refs_loaded: bool,
    home: Option<PathBuf>,
    /// agentd's profile, resolved: scans leave it out.
    profile: Option<PathBuf>,
    config: PathBuf,
    /// agentd's environment, which overlays `config` as it does for agentx.
    env: Arc<Environment>,
    watch: watch::Watchers,
    /// After idle work failed (a full disk, say): none before this instant,
    /// so a failure costs one attempt a minute, not one a second.
    idle_paused_until: Option<std::time::Instant>,
    /// Full scans running off the store's thread (see `begin_take`).
    away: usize,
    /// Folders whose verification scan runs off the store's thread.
    verifying: std::collections::HashSet<PathBuf>,
    /// Garbage left for when no scan runs away.
    gc_deferred: bool,
    /// Counts uses of folders (orders them for [`Self::keep_resident`]).
    clock: u64,
    /// Entries of manifests kept in memory ([`RESIDENT_ENTRIES`]).
    resident_entries: usize,
    /// Manifests were dropped from memory since the last idle tick.
    dropped_resident: bool,
}

#[cfg(test)]
fn unique_hashes(m: &Manifest) -> HashSet<Hash> {
    m.iter()
        .filter(|e| e.kind == Kind::File)
        .map(|e| e.hash)
        .collect()
}

fn folder_dir_name(folder: &str) -> String {
    let hash = blake3::hash(folder.as_bytes()).to_hex();
    format!(
        "{}-{}",
        agentx_shared::folder::folder_key(Path::new(folder)),
        &hash.as_str()[..12]
    )
}

impl SnapshotStore {
    /// The store in `root`, scanning with the excludes of `config` and the
    /// home directory and watcher settings `env` gives.
    pub fn open(root: &Path, config: PathBuf, env: Arc<Environment>) -> Result<Self, SnapError> {
        agentx_shared::profile::create_private_dir(&root.join("folders"))?;
        Ok(Self {
            root: root.to_path_buf(),
            blobs: Blobs::open(&root.join("packs"))?,
            folders: HashMap::new(),
            refs_loaded: false,
            home: env.path("HOME"),
            profile: root.parent().and_then(|p| std::fs::canonicalize(p).ok()),
            config,
            watch: watch::Watchers::new(watch::WatchConfig::from_environment(&env)),
            env,
            idle_paused_until: None,
            away: 0,
            verifying: std::collections::HashSet::new(),
            gc_deferred: false,
            clock: 0,
            resident_entries: RESIDENT_ENTRIES,
            dropped_resident: false,
        })
    }

    /// Counts blob references from every retained manifest (once), deletes
    /// manifests no timeline uses, and collects unreferenced blobs — what a
    /// run killed half-way left behind.
    fn ensure_loaded(&mut self) -> Result<(), SnapError> {
        if self.refs_loaded {
            return Ok(());
        }
        let folders_dir = self.root.join("folders");
        for entry in std::fs::read_dir(&folders_dir)?.flatten() {
            let dir = entry.path();
            let Some(timeline) = read_timeline(&dir) else {
                continue;
            };
            // What the timeline uses, with the bases their deltas build on.
            let ids = timeline.snaps.iter().map(|s| s.manifest.clone()).collect();
            // (None: a header could not be read; then nothing is deleted.)
            let used = chains(&dir, ids, &mut HashMap::new())
                .inspect_err(|e| tracing::warn!("manifests of {}: {e}", dir.display()))
                .ok();
            for file in std::fs::read_dir(dir.join("manifests"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = file.file_name().to_string_lossy().into_owned();
                let Some(id) = name.strip_suffix(".zst") else {
                    continue;
                };
                if used.as_ref().is_some_and(|u| !u.contains(id)) {
                    let _ = std::fs::remove_file(file.path());
                    continue;
                }
                match std::fs::read(file.path()).and_then(|b| Stored::decode(&b)) {
                    Ok(m) => self.blobs.add_refs(m.own_hashes().iter()),
                    Err(e) => tracing::warn!("unreadable manifest {}: {e}", file.path().display()),
                }
            }
        }
        self.refs_loaded = true;
        self.blobs.collect_garbage(true)?;
        Ok(())
    }

    fn guard(&self, folder: &Path) -> Result<(), SnapError> {
        if agentx_shared::folder::undo_off(folder, self.home.as_deref()) {
            return Err(SnapError::Home(folder.display().to_string()));
        }
        Ok(())
    }

    /// The folder's state, loaded on first use; a restore that was cut
    /// short is finished first. The guard runs when it is loaded (it
    /// resolves the folder and HOME, a dozen system calls), not at each use.
    fn folder(&mut self, folder: &Path) -> Result<&mut FolderState, SnapError> {
        let key = folder.display().to_string();
        let known = self.folders.contains_key(&key);
        if !known {
            self.guard(folder)?;
        }
        self.ensure_loaded()?;
        if !known {
            let dir = self.root.join("folders").join(folder_dir_name(&key));
            agentx_shared::profile::create_private_dir(&dir.join("manifests"))?;
            let timeline = read_timeline(&dir).unwrap_or_else(|| Timeline {
                folder: key.clone(),
                snaps: Vec::new(),
            });
            self.folders.insert(
                key.clone(),
                FolderState {
                    dir,
                    timeline,
                    latest: None,
                    recent: Vec::new(),
                    bases: HashMap::new(),
                    outside_links: None,
                    used: 0,
                },
            );
            self.finish_interrupted_restore(folder)?;
        }
        self.clock += 1;
        let clock = self.clock;
        let fs = self
            .folders
            .get_mut(&key)
            .ok_or_else(|| SnapError::NotFound("folder state vanished".into()))?;
        fs.used = clock;
        Ok(fs)
    }

    /// Drops the manifests kept in memory of the least recently used
    /// folders, all but `folder`'s, until those kept hold at most
    /// [`RESIDENT_ENTRIES`] entries. Without it agentd keeps the newest
    /// manifest of every folder it ever snapshotted (18 MB for 100,000
    /// files); a dropped one is read back from its file when needed.
    fn keep_resident(&mut self, folder: &Path) {
        let key = folder.display().to_string();
        let held = |fs: &FolderState| {
            let latest = fs.latest.as_ref().map(|(id, m, _)| (id.as_str(), m.len()));
            let recent: usize = fs
                .recent
                .iter()
                .filter(|(id, _)| latest.is_none_or(|(l, _)| l != id))
                .map(|(_, m)| m.len())
                .sum();
            latest.map_or(0, |(_, n)| n) + recent
        };
        let mut total: usize = self.folders.values().map(held).sum();
        if total <= self.resident_entries {
            return;
        }
        let mut others: Vec<(u64, String, usize)> = self
            .folders
            .iter()
            .filter(|(k, fs)| **k != key && held(fs) > 0)
            .map(|(k, fs)| (fs.used, k.clone(), held(fs)))
            .collect();
        others.sort_unstable();
        for (_, k, n) in others {
            if total <= self.resident_entries {
                break;
            }
            if let Some(fs) = self.folders.get_mut(&k) {
                fs.latest = None;
                fs.recent.clear();
                total -= n;
                self.dropped_resident = true;
                tracing::debug!(folder = %k, entries = n, "a manifest left memory");
            }
        }
    }

    fn finish_interrupted_restore(&mut self, folder: &Path) -> Result<(), SnapError> {
        let key = folder.display().to_string();
        let Some(fs) = self.folders.get(&key) else {
            return Ok(());
        };
        let journal_path = RestoreJournal::path(&fs.dir);
        let Ok(bytes) = std::fs::read(&journal_path) else {
            return Ok(());
        };
        let dir = fs.dir.clone();
        if let Ok(journal) = serde_json::from_slice::<RestoreJournal>(&bytes) {
            tracing::warn!(folder = %key, "finishing a restore that was interrupted");
            let (want, _) = load_manifest(&dir, &journal.want_manifest)?;
            let ops: Vec<Op> = journal
                .paths
                .iter()
                .map(|p| {
                    let want = want.find(p).cloned();
                    let action = if want.is_some() {
                        Action::RestoreModified
                    } else {
                        Action::Remove
                    };
                    Op {
                        path: p.clone(),
                        want,
                        action,
                        conflict: false,
                        left_alone: None,
                        now: None,
                        live: None,
                    }
                })
                .collect();
            // Its temp files first: a legacy journal's names are re-made.
            restore::remove_temps(folder, &journal.paths, &journal.token);
            let how = restore::Writing {
                token: &restore::new_token(),
                recheck: false,
                excluded: &[],
            };
            let not_done = restore::apply(folder, &ops, &self.blobs.reader(), &how);
            for (path, e) in not_done.failed.into_iter().chain(not_done.moved) {
                tracing::warn!("finishing restore: {}: {e}", restore::escape(&path));
            }
        }
        std::fs::remove_file(&journal_path)?;
        durable::fsync_dir(&dir)?;
        Ok(())
    }

    /// The newest manifest with its id and delta depth.
    fn latest(&mut self, folder: &Path) -> Result<Option<(String, Arc<Manifest>, u32)>, SnapError> {
        let fs = self.folder(folder)?;
        let Some(newest) = fs.timeline.snaps.last() else {
            return Ok(None);
        };
        if let Some(latest) = &fs.latest
            && latest.0 == newest.manifest
        {
            return Ok(Some(latest.clone()));
        }
        let id = newest.manifest.clone();
        let (m, depth) = load_manifest(&fs.dir, &id)?;
        fs.latest = Some((id, Arc::new(m), depth));
        let latest = fs.latest.clone();
        self.keep_resident(folder);
        Ok(latest)
    }

    /// Snapshots newest first.
    pub fn list(&mut self, folder: &Path) -> Result<Vec<Snap>, SnapError> {
        let fs = self.folder(folder)?;
        Ok(fs.timeline.snaps.iter().rev().cloned().collect())
    }

    pub fn count(&mut self, folder: &Path) -> Result<usize, SnapError> {
        Ok(self.folder(folder)?.timeline.snaps.len())
    }

    /// The folder's snapshot count when its timeline is in memory (never
    /// reads the disk).
    pub fn count_loaded(&self, folder: &Path) -> Option<usize> {
        self.folders
            .get(&folder.display().to_string())
            .map(|f| f.timeline.snaps.len())
    }

    /// Bytes the whole store takes on disk (blobs and manifests).
    pub fn disk_bytes(&self) -> u64 {
        self.blobs.disk_bytes() + self.manifest_bytes()
    }

    /// Bytes of the packs (kept in memory: no file is looked at).
    pub fn pack_bytes(&self) -> u64 {
        self.blobs.disk_bytes()
    }

    /// Bytes of every folder's manifests (each one's size is looked up).
    pub fn manifest_bytes(&self) -> u64 {
        std::fs::read_dir(self.root.join("folders"))
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|d| {
                std::fs::read_dir(d.path().join("manifests"))
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .filter_map(|f| f.metadata().ok().map(|m| m.len()))
            .sum()
    }
}

impl SnapshotStore {
    /// What scans leave out: `snapshot_exclude` names from config.toml
    /// (read at each scan, so an edit applies at once) and agentd's profile.
    fn extra_excludes(&self) -> scan::Excludes {
        let names =
            agentx_shared::config::Config::load_with(&self.config, |k| self.env.non_empty(k))
                .map(|c| c.snapshot_exclude)
                .unwrap_or_default();
        let paths = self.profile.iter().cloned().collect();
        scan::Excludes { names, paths }
    }
}
