//! A restore in three steps: planned, checked and journaled on the store's
//! thread; written away from it ([`AwayRestore::run`]); finished on it.
//!
//! The writes are most of a restore's time (250 ms for 4,000 files), and
//! no other folder's snapshot waits for them; the folder's own requests do.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::blobs::Reader;
use super::restore::{self, NotDone, Op};
use super::timeline::save_timeline;
use super::{Message, RestoreJournal, RestoreReport, SnapError, SnapshotStore, describe_message};
use crate::durable;

/// A journaled restore whose writes have not run yet (or just ran).
pub struct AwayRestore {
    folder: PathBuf,
    /// The folder's snapshot directory, where its journal is.
    dir: PathBuf,
    apply: Vec<Op>,
    skipped: Vec<Op>,
    left: Vec<Op>,
    token: String,
    excluded: Vec<String>,
    blobs: Reader,
    pre_restore: String,
    then: Then,
    not_done: Option<NotDone>,
}

/// What the finish does besides reporting.
pub(super) enum Then {
    Rewind,
    /// Marks the message (and those passed over) undone when every path
    /// was put back.
    Undo(Box<UndoneMessage>),
}

/// The message an undo takes back, and those it passes over.
pub(super) struct UndoneMessage {
    pub session: String,
    pub message: Message,
    pub passed: Vec<Message>,
}

impl AwayRestore {
    /// The folder being restored.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Writes every planned path (each compared with the plan right before
    /// it is replaced) and makes them durable.
    pub fn run(&mut self) {
        let how = restore::Writing {
            token: &self.token,
            recheck: true,
            excluded: &self.excluded,
        };
        let started = std::time::Instant::now();
        self.not_done = Some(restore::apply(&self.folder, &self.apply, &self.blobs, &how));
        tracing::debug!(
            paths = self.apply.len(),
            us = started.elapsed().as_micros(),
            "restore written"
        );
    }
}

impl SnapshotStore {
    /// Journals a restore of `ops` (the manifest `want_manifest` for each
    /// path) for [`AwayRestore::run`]: conflicts not forced and paths
    /// found changed are skipped, paths left alone by rule are reported.
    pub(super) fn begin_restore(
        &mut self,
        folder: &Path,
        want_manifest: &str,
        ops: Vec<Op>,
        force: bool,
        pre_restore: String,
        then: Then,
    ) -> Result<AwayRestore, SnapError> {
        let (left, ops): (Vec<Op>, Vec<Op>) = ops.into_iter().partition(|o| o.left_alone.is_some());
        let (apply, skipped): (Vec<Op>, Vec<Op>) = ops
            .into_iter()
            .partition(|o| o.live.is_none() && (force || !o.conflict));
        let dir = self.folder(folder)?.dir.clone();
        let journal = RestoreJournal {
            want_manifest: want_manifest.to_owned(),
            paths: apply.iter().map(|o| o.path.clone()).collect(),
            token: restore::new_token(),
        };
        journal.write(&dir)?;
        self.away += 1;
        Ok(AwayRestore {
            folder: folder.to_path_buf(),
            dir,
            apply,
            skipped,
            left,
            token: journal.token,
            excluded: self.extra_excludes().names,
            blobs: self.blobs.reader(),
            pre_restore,
            then,
            not_done: None,
        })
    }

    /// Ends a restore: its journal removed (before the folder's state is
    /// touched, which would replay it), the report made, an undo's
    /// messages marked.
    pub fn finish_restore(&mut self, mut away: AwayRestore) -> Result<RestoreReport, SnapError> {
        if away.not_done.is_none() {
            away.run(); // never ran (a caller that does it all here)
        }
        self.end_away();
        let not_done = away.not_done.take().unwrap_or_default();
        let journal_path = RestoreJournal::path(&away.dir);
        std::fs::remove_file(&journal_path)?;
        durable::fsync_dir(&away.dir)?;
        let mut report = report(&away, not_done);
        if let Then::Undo(undone) = &away.then {
            let UndoneMessage {
                session,
                message: (before, after),
                passed,
            } = &**undone;
            report.undone = report.skipped.is_empty() && report.errors.is_empty();
            report.message = describe_message(before, session);
            report.passed = passed
                .iter()
                .map(|(b, _)| describe_message(b, session))
                .collect();
            let mut mark: Vec<&str> = passed
                .iter()
                .flat_map(|(b, a)| {
                    std::iter::once(b.id.as_str()).chain(a.iter().map(|a| a.id.as_str()))
                })
                .collect();
            if report.undone {
                mark.push(&before.id);
                if let Some(a) = after {
                    mark.push(&a.id);
                }
            }
            let fs = self.folder(&away.folder)?;
            for s in fs.timeline.snaps.iter_mut() {
                if mark.contains(&s.id.as_str()) {
                    s.undone = true;
                }
            }
            save_timeline(&fs.dir, &fs.timeline)?;
        }
        Ok(report)
    }
}

/// What a restore did: the paths written, those kept as the user has them
/// (conflicts, and paths saved while it ran), those it could not write.
fn report(away: &AwayRestore, not_done: NotDone) -> RestoreReport {
    let failed = not_done.failed;
    let moved: HashMap<&[u8], &str> = not_done
        .moved
        .iter()
        .map(|(p, why)| (p.as_slice(), why.as_str()))
        .collect();
    let failed_paths: HashSet<&[u8]> = failed.iter().map(|(p, _)| p.as_slice()).collect();
    let done: Vec<Op> = away
        .apply
        .iter()
        .filter(|o| !failed_paths.contains(o.path.as_slice()))
        .filter(|o| !moved.contains_key(o.path.as_slice()))
        .cloned()
        .collect();
    let mut skipped = away.skipped.clone();
    skipped.extend(away.apply.iter().filter_map(|o| {
        let why = moved.get(o.path.as_slice())?;
        let mut o = o.clone();
        o.live = Some((*why).to_owned());
        o.conflict = true;
        Some(o)
    }));
    RestoreReport {
        applied: restore::describe(&done),
        skipped: restore::describe(&skipped),
        left_alone: restore::describe(&away.left),
        errors: failed
            .iter()
            .map(|(p, e)| format!("{}: {e}", restore::escape(p)))
            .collect(),
        pre_restore: away.pre_restore.clone(),
        ..RestoreReport::default()
    }
}
