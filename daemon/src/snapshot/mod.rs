//! Folder snapshots on agentd's own content-addressed store: per-folder
//! timelines of manifests over a shared, deduplicated blob store; undo and
//! rewind with conflict detection; retention and garbage collection.
//!
//! Layout under `<profile>/checkpoints/`: `packs/` (blobs), and per folder
//! `folders/<key>-<hash>/` with `timeline.json`, `manifests/` and, while a
//! restore runs, `restore.json` (finished by the next operation if agentd dies).
//! A manifest file is a full tree or a delta on the one before it (chains of
//! at most [`MAX_DELTA_DEPTH`]); a manifest stays while the timeline uses it
//! or a delta it keeps builds on it. An unchanged watched folder's snapshot
//! points at the previous manifest: only the timeline is written.

mod blobs;
mod incremental;
pub mod manifest;
pub mod restore;
mod scan;
pub mod service;
mod summary;
#[cfg(test)]
mod tests;
mod timeline;
mod undo;
pub mod watch;
#[cfg(test)]
mod watch_tests;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::store::durable;
use blobs::Blobs;
pub(crate) use blobs::parse_index;
#[cfg(test)]
pub(crate) use blobs::{Loc, encode_index};
#[cfg(test)]
use manifest::{Hash, Kind};
use manifest::{Manifest, Stored};
use restore::{Action, Op, Planned};
pub(crate) use timeline::parse_timeline;
use timeline::*;

/// Message snapshots (before/after a message, before a restore) kept per folder.
pub const KEEP: usize = 50;
/// Manual snapshots (`agentx snapshot`) kept per folder, on their own.
pub const KEEP_MANUAL: usize = 20;

/// Longest chain of delta manifests before a full one is written.
const MAX_DELTA_DEPTH: u32 = 16;

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
}

impl Snap {
    /// Taken only on request (`agentx snapshot`): retained on its own cap.
    fn manual(&self) -> bool {
        !self.owners.is_empty() && self.owners.iter().all(|o| o.phase == Phase::Manual)
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
    let secs = (now_ms() - before.created_at).max(0) / 1000;
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
    config: PathBuf,
    watch: watch::Watchers,
}

fn now_ms() -> i64 {
    agentx_shared::time::unix_ms(SystemTime::now())
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
    pub fn open(root: &Path, home: Option<PathBuf>, config: PathBuf) -> Result<Self, SnapError> {
        agentx_shared::profile::create_private_dir(&root.join("folders"))?;
        Ok(Self {
            root: root.to_path_buf(),
            blobs: Blobs::open(&root.join("packs"))?,
            folders: HashMap::new(),
            refs_loaded: false,
            home,
            config,
            watch: watch::Watchers::new(watch::WatchConfig::from_env()),
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
        // Real paths: HOME or the folder may be reached through a symlink.
        let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let real_folder = real(folder);
        let at_or_above_home = self
            .home
            .as_ref()
            .is_some_and(|h| h.starts_with(folder) || real(h).starts_with(&real_folder));
        if at_or_above_home || real_folder == Path::new("/") {
            return Err(SnapError::Home(folder.display().to_string()));
        }
        Ok(())
    }

    /// The folder's state, loaded on first use; a restore that was cut
    /// short is finished first.
    fn folder(&mut self, folder: &Path) -> Result<&mut FolderState, SnapError> {
        self.guard(folder)?;
        self.ensure_loaded()?;
        let key = folder.display().to_string();
        if !self.folders.contains_key(&key) {
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
                },
            );
            self.finish_interrupted_restore(folder)?;
        }
        self.folders
            .get_mut(&key)
            .ok_or_else(|| SnapError::NotFound("folder state vanished".into()))
    }

    fn finish_interrupted_restore(&mut self, folder: &Path) -> Result<(), SnapError> {
        let key = folder.display().to_string();
        let Some(fs) = self.folders.get(&key) else {
            return Ok(());
        };
        let journal_path = fs.dir.join("restore.json");
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
                    }
                })
                .collect();
            let errors = restore::apply(folder, &ops, &self.blobs);
            for (path, e) in errors {
                tracing::warn!("finishing restore: {}: {e}", restore::escape(&path));
            }
            restore::remove_temps(folder, &journal.paths);
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
        Ok(fs.latest.clone())
    }

    /// Scans the folder into a new snapshot for `owners`; returns it once
    /// durable. An unchanged tree reuses the previous manifest.
    pub fn take(&mut self, folder: &Path, owners: Vec<Owner>) -> Result<Snap, SnapError> {
        let started = std::time::Instant::now();
        let latest = self.latest(folder)?;
        let excludes = self.extra_excludes();
        let base = latest.as_ref().map(|(id, _, _)| id.clone());
        let plan = self.watch.plan(folder, &excludes, base.as_deref());
        let t_plan = started.elapsed();
        if let (
            watch::Plan::Dirty {
                dirs,
                verify: false,
            },
            Some(base),
        ) = (&plan, &base)
            && dirs.is_empty()
        {
            return self.take_unchanged(folder, owners, base, started);
        }
        let previous = latest.as_ref().map(|(_, m, _)| Arc::clone(m));
        let mut pack = self.blobs.begin()?;
        let scanned = self.scan_folder(folder, &excludes, plan, previous.as_deref(), &mut pack);
        let scanned = match scanned {
            Ok(ok) => ok,
            Err(e) => {
                self.blobs.abandon(pack);
                return Err(e);
            }
        };
        let t_scan = started.elapsed();
        self.blobs.finish(pack)?;
        let t_pack = started.elapsed();
        tracing::debug!(
            folder = %folder.display(),
            hashed = scanned.stats.hashed,
            new_blobs = scanned.stats.new_blobs,
            spliced = scanned.delta.is_some(),
            scan_ms = started.elapsed().as_millis(),
            "snapshot scanned"
        );
        let newest = self.folder(folder)?.timeline.snaps.last().cloned();
        let sum = summary::summarize(previous.as_deref().zip(newest.as_ref()), &scanned);
        let summary::Summary {
            same,
            changed,
            files,
            bytes,
            skipped,
            skipped_why,
        } = sum;
        let incremental::Scanned {
            manifest, delta, ..
        } = scanned;
        let t_sum = started.elapsed();
        let now = now_ms();
        let fs = self.folder(folder)?;
        let id = next_id(&fs.timeline, now);
        let reuse = same
            .then(|| fs.timeline.snaps.last().map(|s| s.manifest.clone()))
            .flatten();
        let manifest_id = match reuse {
            Some(m) => m,
            None => {
                // A delta against the previous manifest while the chain is
                // short, else the whole tree.
                let (encoded, hashes, depth) = match &latest {
                    Some((base, prev, depth)) if *depth < MAX_DELTA_DEPTH => {
                        let (upserts, removed) = delta.unwrap_or_else(|| manifest.delta_from(prev));
                        let stored = Stored::Delta {
                            base: base.clone(),
                            upserts,
                            removed,
                        };
                        (stored.encode()?, stored.own_hashes(), depth + 1)
                    }
                    _ => (Stored::encode_full(&manifest)?, manifest.file_hashes(), 0),
                };
                durable::write_atomic(
                    &fs.dir.join("manifests").join(format!("{id}.zst")),
                    &encoded,
                )?;
                let tree = Arc::new(manifest);
                remember(fs, &id, &tree);
                fs.latest = Some((id.clone(), tree, depth));
                self.blobs.add_refs(hashes.iter());
                id.clone()
            }
        };
        let t_manifest = started.elapsed();
        tracing::debug!(
            plan_us = t_plan.as_micros(),
            scan_us = (t_scan - t_plan).as_micros(),
            pack_us = (t_pack - t_scan).as_micros(),
            summary_us = (t_sum - t_pack).as_micros(),
            manifest_us = (t_manifest - t_sum).as_micros(),
            "snapshot phases"
        );
        let snap = Snap {
            id,
            manifest: manifest_id,
            created_at: now,
            files,
            bytes,
            changed,
            owners,
            undone: false,
            skipped,
            skipped_why,
        };
        self.record(folder, snap, started)
    }

    /// A snapshot of a folder the watcher saw no change in since its newest
    /// manifest `base` was scanned: it points at that manifest, nothing is
    /// listed, hashed or written but the timeline. Entries flagged racy in
    /// `base` need no re-check here: a write to one after that scan's drain
    /// would have queued an event for its directory.
    fn take_unchanged(
        &mut self,
        folder: &Path,
        owners: Vec<Owner>,
        base: &str,
        started: std::time::Instant,
    ) -> Result<Snap, SnapError> {
        let now = now_ms();
        let fs = self.folder(folder)?;
        let id = next_id(&fs.timeline, now);
        let newest = fs
            .timeline
            .snaps
            .last()
            .filter(|s| s.manifest == base)
            .ok_or_else(|| SnapError::NotFound("the newest snapshot changed".into()))?;
        let snap = Snap {
            id,
            manifest: base.to_owned(),
            created_at: now,
            files: newest.files,
            bytes: newest.bytes,
            changed: 0,
            owners,
            undone: false,
            skipped: newest.skipped,
            skipped_why: newest.skipped_why.clone(),
        };
        self.record(folder, snap, started)
    }

    /// Appends `snap` to the folder's timeline, applies retention and saves
    /// it; the watcher's dirty set starts again from its manifest.
    fn record(
        &mut self,
        folder: &Path,
        snap: Snap,
        started: std::time::Instant,
    ) -> Result<Snap, SnapError> {
        let fs = self.folder(folder)?;
        fs.timeline.snaps.push(snap.clone());
        // Message and manual snapshots are retained on separate caps, so
        // `agentx snapshot` never pushes a message out.
        let (mut messages, mut manual) = (0, 0);
        let mut keep = vec![true; fs.timeline.snaps.len()];
        for (i, s) in fs.timeline.snaps.iter().enumerate().rev() {
            let (count, cap) = if s.manual() {
                (&mut manual, KEEP_MANUAL)
            } else {
                (&mut messages, KEEP)
            };
            *count += 1;
            keep[i] = *count <= cap;
        }
        let mut dropped = Vec::new();
        let mut flags = keep.into_iter();
        fs.timeline.snaps.retain(|s| {
            let kept = flags.next().unwrap_or(true);
            if !kept {
                dropped.push(s.clone());
            }
            kept
        });
        // A dropped manifest that a retained delta builds on stays (the
        // chain ends at the next full manifest); a restart keeps the same
        // chains, so a kill -9 at any instant leaves every delta its base.
        let fs = self.folder(folder)?;
        save_timeline(&fs.dir, &fs.timeline)?;
        #[cfg(test)]
        if tests::CRASH_AFTER_TIMELINE_SAVE.get() {
            return Err(SnapError::NotFound("simulated crash".into()));
        }
        self.watch.scanned(folder, &snap.manifest);
        if !dropped.is_empty() {
            self.release(folder, &dropped)?;
        }
        tracing::debug!(total_us = started.elapsed().as_micros(), "snapshot taken");
        Ok(snap)
    }

    /// The manifests of `dropped` (and their delta chains) that no
    /// retained snapshot uses, directly or as the base of its delta.
    fn gone_manifests(
        &mut self,
        folder: &Path,
        dropped: &[Snap],
    ) -> Result<HashSet<String>, SnapError> {
        let fs = self.folder(folder)?;
        let used: Vec<String> = fs
            .timeline
            .snaps
            .iter()
            .map(|s| s.manifest.clone())
            .collect();
        let needed = chains(&fs.dir, used, &mut fs.bases)?;
        let dropped: Vec<String> = dropped.iter().map(|s| s.manifest.clone()).collect();
        let candidates = chains(&fs.dir, dropped, &mut fs.bases)?;
        Ok(candidates.difference(&needed).cloned().collect())
    }

    /// Deletes manifests no retained snapshot needs and collects their
    /// blobs (after the timeline's save).
    fn release(&mut self, folder: &Path, dropped: &[Snap]) -> Result<(), SnapError> {
        let gone = self.gone_manifests(folder, dropped)?;
        if gone.is_empty() {
            return Ok(());
        }
        let fs = self.folder(folder)?;
        for id in &gone {
            fs.bases.remove(id);
        }
        let manifests = fs.dir.join("manifests");
        let file = |id: &str| manifests.join(format!("{id}.zst"));
        for id in &gone {
            if let Ok(m) = std::fs::read(file(id)).and_then(|b| Stored::decode(&b)) {
                self.blobs.drop_refs(m.own_hashes().iter());
            }
            let _ = std::fs::remove_file(file(id));
        }
        durable::fsync_dir(&manifests)?;
        self.blobs.collect_garbage(false)?;
        Ok(())
    }

    /// Snapshots newest first.
    pub fn list(&mut self, folder: &Path) -> Result<Vec<Snap>, SnapError> {
        let fs = self.folder(folder)?;
        Ok(fs.timeline.snaps.iter().rev().cloned().collect())
    }

    pub fn count(&mut self, folder: &Path) -> Result<usize, SnapError> {
        Ok(self.folder(folder)?.timeline.snaps.len())
    }

    /// Bytes the whole store takes on disk (blobs and manifests).
    pub fn disk_bytes(&self) -> u64 {
        let manifests: u64 = std::fs::read_dir(self.root.join("folders"))
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
            .sum();
        self.blobs.disk_bytes() + manifests
    }
}

impl SnapshotStore {
    /// What scans leave out: `snapshot_exclude` names from config.toml
    /// (read at each scan, so an edit applies at once) and agentd's profile.
    fn extra_excludes(&self) -> scan::Excludes {
        let names = agentx_shared::config::Config::load(&self.config)
            .map(|c| c.snapshot_exclude)
            .unwrap_or_default();
        let paths = self
            .root
            .parent()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .into_iter()
            .collect();
        scan::Excludes { names, paths }
    }
}

/// Paths added, removed or changed in content between two sorted manifests.
fn count_changes(a: &Manifest, b: &Manifest) -> u64 {
    manifest::aligned([a, b])
        .filter(|(_, row)| match row {
            [Some(p), Some(q)] => !p.same_content(q),
            _ => true,
        })
        .count() as u64
}
