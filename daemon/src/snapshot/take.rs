//! Taking a snapshot: scan (in full or what the watcher saw change), write
//! the manifest, append to the timeline, and drop what retention lets go.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::blobs::{Known, PackWriter};
use super::incremental::Scanned;
use super::manifest::{Hash, Manifest, Stored};
use super::timeline::{chains, next_id, remember, save_timeline};
use super::watch::{Filled, Filler};
use super::{
    COMPACT_DEPTH, MAX_DELTA_DEPTH, Owner, Snap, SnapError, SnapshotStore, scan, summary, watch,
};
use crate::durable;

/// How a snapshot begun by [`SnapshotStore::begin_take`] goes on.
pub enum Begun {
    /// Taken already (nothing or little to scan).
    Done(Snap),
    /// A full scan: run it anywhere (it only reads the folder and writes
    /// its own pack), then hand it to [`SnapshotStore::finish_take`].
    Away(Box<AwayScan>),
}

/// A full scan of one folder, cut loose from the store so the store's
/// thread serves other folders meanwhile: the first snapshot of a big tree
/// takes seconds.
pub struct AwayScan {
    folder: PathBuf,
    owners: Vec<Owner>,
    excludes: scan::Excludes,
    latest: Option<(String, Arc<Manifest>, u32)>,
    known: Known,
    pack: PackWriter,
    filler: Option<Filler>,
    started: Instant,
    root: Option<[u64; 2]>,
    /// The folder's snapshot directory, where the manifest is written.
    dir: PathBuf,
    /// The new snapshot's id and time, given when it began (nothing else
    /// is added to the folder's timeline meanwhile).
    id: String,
    now: i64,
    /// The folder's newest snapshot when it began.
    newest: Option<Snap>,
    outcome: Option<Result<Prepared, SnapError>>,
    filled: Option<Filled>,
}

/// A scanned tree made ready to be a folder's newest snapshot, wherever the
/// scan ran: counted against the newest snapshot, its manifest written and
/// synced unless the tree is the same.
pub struct Prepared {
    sum: summary::Summary,
    /// The manifest the snapshot points at.
    manifest: String,
    /// The manifest written for it (`None`: the newest one serves).
    written: Option<Written>,
}

/// A manifest file written and synced, not yet the folder's newest.
struct Written {
    tree: Manifest,
    hashes: HashSet<Hash>,
    depth: u32,
}

/// Counts `scanned` against `newest` and, unless the tree is the same,
/// writes its manifest as `id` in `dir`: a delta against `latest` while
/// the chain is short, else the whole tree.
fn prepare(
    dir: &Path,
    id: &str,
    scanned: Scanned,
    latest: Option<(String, Arc<Manifest>, u32)>,
    newest: Option<&Snap>,
) -> Result<Prepared, SnapError> {
    let previous = latest.as_ref().map(|(_, m, _)| m.as_ref());
    let sum = summary::summarize(previous.zip(newest), &scanned);
    if let Some(newest) = newest.filter(|_| sum.same) {
        return Ok(Prepared {
            sum,
            manifest: newest.manifest.clone(),
            written: None,
        });
    }
    let started = Instant::now();
    let Scanned {
        manifest, delta, ..
    } = scanned;
    let (encoded, hashes, depth) = match latest {
        Some((base, prev, depth)) if depth < MAX_DELTA_DEPTH => {
            let (upserts, removed) = delta.unwrap_or_else(|| manifest.delta_from(&prev));
            let stored = Stored::Delta {
                base,
                upserts,
                removed,
            };
            (stored.encode()?, stored.own_hashes(), depth + 1)
        }
        _ => (Stored::encode_full(&manifest)?, manifest.file_hashes(), 0),
    };
    durable::write_atomic(&dir.join("manifests").join(format!("{id}.zst")), &encoded)?;
    tracing::debug!(
        depth,
        bytes = encoded.len(),
        write_us = started.elapsed().as_micros(),
        "manifest written"
    );
    Ok(Prepared {
        sum,
        manifest: id.to_owned(),
        written: Some(Written {
            tree: manifest,
            hashes,
            depth,
        }),
    })
}

impl AwayScan {
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Runs the scan (on any thread), then makes its pack durable and
    /// writes its manifest there too (for a first snapshot of a big tree,
    /// tens of milliseconds the store's thread would spend); a panic in it
    /// is an error of this snapshot only.
    pub fn run(&mut self) {
        let previous = self.latest.as_ref().map(|(_, m, _)| Arc::clone(m));
        let hook = self.filler.as_ref().map(|f| f as &dyn scan::DirHook);
        let scanned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scan::scan_hooked(
                &self.folder,
                &self.excludes,
                previous.as_deref(),
                &self.known,
                &mut self.pack,
                hook,
            )
        }))
        .unwrap_or_else(|_| Err(std::io::Error::other("the scan hit an internal error")));
        self.filled = self.filler.take().map(Filler::finish);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let (manifest, stats) = scanned?;
            self.pack.seal()?;
            prepare(
                &self.dir,
                &self.id,
                Scanned::full(manifest, stats),
                self.latest.clone(),
                self.newest.as_ref(),
            )
        }))
        .unwrap_or_else(|_| {
            Err(SnapError::from(std::io::Error::other(
                "writing the snapshot hit an internal error",
            )))
        });
        self.outcome = Some(outcome);
    }
}

impl SnapshotStore {
    /// Scans the folder into a new snapshot for `owners`; returns it once
    /// durable. An unchanged tree reuses the previous manifest.
    pub fn take(&mut self, folder: &Path, owners: Vec<Owner>) -> Result<Snap, SnapError> {
        match self.begin_take(folder, owners)? {
            Begun::Done(snap) => Ok(snap),
            Begun::Away(mut away) => {
                away.run();
                self.finish_take(*away)
            }
        }
    }

    /// Starts a snapshot of `folder` for `owners`: done at once when the
    /// watcher knows what changed, else a full scan to run off this thread.
    /// Until [`Self::finish_take`], no garbage is collected (the scan may
    /// count on any stored blob) and nothing else may touch `folder`.
    pub fn begin_take(&mut self, folder: &Path, owners: Vec<Owner>) -> Result<Begun, SnapError> {
        let started = Instant::now();
        let root = scan::identity(folder);
        let latest = self.latest(folder)?;
        let excludes = self.extra_excludes();
        let base = latest.as_ref().map(|(id, _, _)| id.clone());
        let plan = self.watch.plan(folder, &excludes, base.as_deref(), || {
            latest.as_ref().map(|(_, m, _)| m.dir_count())
        });
        if let (
            watch::Plan::Dirty {
                dirs,
                verify: false,
            },
            Some(base),
        ) = (&plan, &base)
            && dirs.is_empty()
            && !self.has_outside_links(folder, base)?
        {
            return Ok(Begun::Done(
                self.take_unchanged(folder, owners, base, started, root)?,
            ));
        }
        if !matches!((&plan, &latest), (watch::Plan::Dirty { .. }, Some(_))) {
            let now = agentx_shared::time::now_ms();
            let fs = self.folder(folder)?;
            let (id, newest, dir) = (
                next_id(&fs.timeline, now),
                fs.timeline.snaps.last().cloned(),
                fs.dir.clone(),
            );
            let pack = self.blobs.begin()?;
            self.away += 1;
            return Ok(Begun::Away(Box::new(AwayScan {
                folder: folder.to_path_buf(),
                owners,
                excludes,
                latest,
                known: self.blobs.known().clone(),
                pack,
                filler: self.watch.filler(folder),
                started,
                root,
                dir,
                id,
                now,
                newest,
                outcome: None,
                filled: None,
            })));
        }
        let previous = latest.as_ref().map(|(_, m, _)| Arc::clone(m));
        let scanned = self.scan_durably(folder, &excludes, plan, previous.as_deref())?;
        Ok(Begun::Done(self.commit_scan(
            folder, owners, scanned, latest, started, root,
        )?))
    }

    /// Ends a snapshot whose full scan ran away from the store's thread.
    pub fn finish_take(&mut self, away: AwayScan) -> Result<Snap, SnapError> {
        let AwayScan {
            folder,
            owners,
            pack,
            started,
            root,
            id,
            now,
            outcome,
            filled,
            ..
        } = away;
        let outcome =
            outcome.unwrap_or_else(|| Err(std::io::Error::other("the scan never ran").into()));
        if let Some(f) = filled {
            self.watch.filled(&folder, outcome.is_ok().then_some(f));
        }
        let done = match outcome {
            Ok(prepared) => self
                .blobs
                .finish(pack)
                .map_err(SnapError::from)
                .and_then(|()| self.adopt(&folder, owners, prepared, (id, now), started, root)),
            Err(e) => {
                self.blobs.abandon(pack);
                Err(e)
            }
        };
        self.end_away();
        done
    }

    /// Counts `n` restores still writing, begun by the store this one
    /// replaced: garbage they may read waits for them.
    pub fn hold_for_away(&mut self, n: usize) {
        self.away += n;
    }

    /// One piece of work that ran away from the store's thread (a scan, a
    /// restore's writes) ended: garbage it held off is collected once none
    /// runs.
    pub(super) fn end_away(&mut self) {
        self.away = self.away.saturating_sub(1);
        if self.away == 0 && self.gc_deferred {
            self.gc_deferred = false;
            if let Err(e) = self.blobs.collect_garbage(false) {
                tracing::warn!("collecting unused snapshot content failed: {e}");
            }
        }
    }

    /// Writes what a scan found as the folder's newest snapshot.
    fn commit_scan(
        &mut self,
        folder: &Path,
        owners: Vec<Owner>,
        scanned: Scanned,
        latest: Option<(String, Arc<Manifest>, u32)>,
        started: Instant,
        root: Option<[u64; 2]>,
    ) -> Result<Snap, SnapError> {
        let now = agentx_shared::time::now_ms();
        let fs = self.folder(folder)?;
        let id = next_id(&fs.timeline, now);
        let newest = fs.timeline.snaps.last().cloned();
        let dir = fs.dir.clone();
        let prepared = prepare(&dir, &id, scanned, latest, newest.as_ref())?;
        self.adopt(folder, owners, prepared, (id, now), started, root)
    }

    /// Makes `prepared` the folder's newest snapshot `id` (taken at `now`):
    /// its manifest, if new, the latest and its blobs referenced; the
    /// timeline saved.
    fn adopt(
        &mut self,
        folder: &Path,
        owners: Vec<Owner>,
        prepared: Prepared,
        (id, now): (String, i64),
        started: Instant,
        root: Option<[u64; 2]>,
    ) -> Result<Snap, SnapError> {
        let Prepared {
            sum,
            manifest,
            written,
        } = prepared;
        if let Some(w) = written {
            let fs = self.folder(folder)?;
            let tree = Arc::new(w.tree);
            remember(fs, &manifest, &tree);
            fs.latest = Some((manifest.clone(), tree, w.depth));
            self.blobs.add_refs(w.hashes.iter());
            self.keep_resident(folder);
        }
        let snap = Snap {
            id,
            manifest,
            created_at: now,
            files: sum.files,
            bytes: sum.bytes,
            changed: sum.changed,
            owners,
            undone: false,
            skipped: sum.skipped,
            skipped_why: sum.skipped_why,
            root,
        };
        self.record(folder, snap, started)
    }

    /// Scans `folder` as `plan` says, its new blobs written and synced.
    fn scan_durably(
        &mut self,
        folder: &Path,
        excludes: &scan::Excludes,
        plan: watch::Plan,
        previous: Option<&Manifest>,
    ) -> Result<Scanned, SnapError> {
        let started = Instant::now();
        let mut pack = self.blobs.begin()?;
        let scanned = match self.scan_folder(folder, excludes, plan, previous, &mut pack) {
            Ok(ok) => ok,
            Err(e) => {
                self.blobs.abandon(pack);
                return Err(e);
            }
        };
        self.blobs.finish(pack)?;
        tracing::debug!(
            folder = %folder.display(),
            hashed = scanned.stats.hashed,
            new_blobs = scanned.stats.new_blobs,
            spliced = scanned.delta.is_some(),
            scan_us = started.elapsed().as_micros(),
            "snapshot scanned"
        );
        Ok(scanned)
    }

    /// A snapshot of a folder the watcher saw no change in since its newest
    /// manifest `base` was scanned: it points at that manifest, nothing is
    /// listed, hashed or written but the timeline. Entries flagged racy in
    /// `base` need no re-check here: a write to one after that scan's drain
    /// would have queued an event for its directory. A restore's own
    /// pre-restore snapshot takes the place of the one taken ahead of it
    /// ([`Owner::ahead_of_restore`]) instead of adding a second.
    fn take_unchanged(
        &mut self,
        folder: &Path,
        owners: Vec<Owner>,
        base: &str,
        started: Instant,
        root: Option<[u64; 2]>,
    ) -> Result<Snap, SnapError> {
        let now = agentx_shared::time::now_ms();
        let fs = self.folder(folder)?;
        if let Some(ahead) = fs.timeline.snaps.last_mut()
            && ahead.manifest == base
            && ahead.owners == [Owner::ahead_of_restore()]
            && !owners.is_empty()
            && owners.iter().all(|o| o.phase == super::Phase::PreRestore)
        {
            ahead.owners = owners;
            let snap = ahead.clone();
            super::timeline::save_timeline(&fs.dir, &fs.timeline)?;
            return Ok(snap);
        }
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
            root,
        };
        self.record(folder, snap, started)
    }

    /// Appends `snap` to the folder's timeline, applies retention and saves
    /// it; the watcher's dirty set starts again from its manifest.
    fn record(&mut self, folder: &Path, snap: Snap, started: Instant) -> Result<Snap, SnapError> {
        let fs = self.folder(folder)?;
        fs.timeline.snaps.push(snap.clone());
        // Message, manual and pre-restore snapshots are retained on
        // separate caps, so neither `agentx snapshot` nor an undo ever
        // pushes a message out. A message's "after" goes with its "before"
        // (alone it undoes nothing).
        let mut counts = [0usize; 3];
        let mut keep = vec![true; fs.timeline.snaps.len()];
        for (i, s) in fs.timeline.snaps.iter().enumerate().rev() {
            let (class, cap) = s.cap();
            counts[class] += 1;
            keep[i] = counts[class] <= cap;
        }
        let dropped_pairs: HashSet<String> = fs
            .timeline
            .snaps
            .iter()
            .zip(&keep)
            .filter(|(_, kept)| !**kept)
            .flat_map(|(s, _)| s.owners.iter())
            .filter(|o| o.phase == super::Phase::Before)
            .map(|o| o.pair.clone())
            .collect();
        for (s, kept) in fs.timeline.snaps.iter().zip(keep.iter_mut()) {
            if *kept
                && s.owners
                    .iter()
                    .all(|o| o.phase == super::Phase::After && dropped_pairs.contains(&o.pair))
                && !s.owners.is_empty()
            {
                *kept = false;
            }
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
        super::seams::after_timeline_save()?;
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
        let started = Instant::now();
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
        let dropped_us = started.elapsed().as_micros();
        if self.away > 0 {
            // A scan running elsewhere may count on a blob that died here.
            self.gc_deferred = true;
            return Ok(());
        }
        let gc = self.blobs.collect_garbage(false)?;
        tracing::debug!(
            manifests = gone.len(),
            dropped_us,
            gc_us = started.elapsed().as_micros() - dropped_us,
            blobs = gc.blobs,
            packs_removed = gc.packs_removed,
            "released"
        );
        Ok(())
    }

    /// Upkeep while no request waits: the watches drained (idle ones
    /// released), long manifest chains compacted; the verification scans
    /// due are returned, to run away from the store's thread.
    pub fn idle_tick(&mut self) -> (bool, Vec<super::verify::AwayVerify>) {
        self.watch.tick();
        if self.idle_paused_until.is_some_and(|t| Instant::now() < t) {
            return (false, Vec::new());
        }
        let verify = self.begin_verify();
        let mut heavy = !verify.is_empty() || std::mem::take(&mut self.dropped_resident);
        let long: Vec<String> = self
            .folders
            .iter()
            .filter(|(_, fs)| fs.latest.as_ref().is_some_and(|l| l.2 >= COMPACT_DEPTH))
            .map(|(key, _)| key.clone())
            .collect();
        for key in long {
            heavy = true;
            if let Err(e) = self.compact(&key) {
                tracing::warn!(folder = %key, "rewriting the newest manifest whole failed: {e}");
                self.pause_idle_work();
            }
        }
        (heavy, verify)
    }

    /// [`Self::idle_tick`] with its verification scans run here.
    #[cfg(test)]
    pub fn idle_tick_inline(&mut self) -> bool {
        let (heavy, verify) = self.idle_tick();
        for mut away in verify {
            away.run();
            self.finish_verify(away);
        }
        heavy
    }

    /// Stops idle work for a minute after a failure (it would fail again).
    pub(super) fn pause_idle_work(&mut self) {
        self.idle_paused_until = Some(Instant::now() + std::time::Duration::from_secs(60));
    }

    /// Rewrites folder `key`'s newest manifest file whole, under the same
    /// id: the same tree, so deltas built on it stay valid, and the bases it
    /// no longer needs go with their own snapshots. A crash leaves either
    /// file, both exact.
    fn compact(&mut self, key: &str) -> Result<(), SnapError> {
        let Some(fs) = self.folders.get_mut(key) else {
            return Ok(());
        };
        let Some((id, tree, _)) = fs.latest.clone() else {
            return Ok(());
        };
        let started = Instant::now();
        let path = fs.dir.join("manifests").join(format!("{id}.zst"));
        let old = Stored::decode(&std::fs::read(&path)?)?;
        durable::write_atomic(&path, &Stored::encode_full(&tree)?)?;
        fs.bases.insert(id.clone(), None);
        fs.latest = Some((id, Arc::clone(&tree), 0));
        // The whole file's references first, so no blob both list drops.
        self.blobs.add_refs(tree.file_hashes().iter());
        self.blobs.drop_refs(old.own_hashes().iter());
        tracing::debug!(folder = %key, took_us = started.elapsed().as_micros(), "manifest rewritten whole");
        Ok(())
    }
}
