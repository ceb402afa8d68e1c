//! Undo and rewind: which message an undo takes back, the plans shown
//! first, and the restore itself after a pre-restore snapshot.

use super::*;

impl SnapshotStore {
    /// `session`'s messages not yet undone, newest first.
    pub(super) fn messages(
        &mut self,
        folder: &Path,
        session: &str,
    ) -> Result<Vec<Message>, SnapError> {
        let fs = self.folder(folder)?;
        let owned = |s: &Snap, phase: Phase| {
            s.owners
                .iter()
                .find(|o| o.session == session && o.phase == phase)
                .map(|o| o.pair.clone())
        };
        let snaps = &fs.timeline.snaps;
        Ok(snaps
            .iter()
            .rev()
            .filter(|s| !s.undone)
            .filter_map(|before| {
                let pair = owned(before, Phase::Before)?;
                let after = snaps
                    .iter()
                    .find(|s| owned(s, Phase::After).is_some_and(|p| p == pair))
                    .cloned();
                Some((before.clone(), after))
            })
            .collect())
    }

    /// The message an undo takes back, and the newer ones it passes over
    /// because they changed nothing (each undo walks one message back).
    pub(super) fn undo_target(
        &mut self,
        folder: &Path,
        session: &str,
    ) -> Result<(Message, Vec<Message>), SnapError> {
        let mut passed = Vec::new();
        for (before, after) in self.messages(folder, session)? {
            if let Some(a) = &after {
                let b = self.manifest_of(folder, &before)?;
                let am = self.manifest_of(folder, a)?;
                if restore::plan_undo(&b, &am, &am).is_empty() {
                    passed.push((before, after));
                    continue;
                }
            }
            return Ok(((before, after), passed));
        }
        Err(SnapError::NotFound(if passed.is_empty() {
            "no message of this conversation to undo (the last 50 snapshots have none)".into()
        } else {
            format!(
                "no message of this conversation to undo: the {} left changed nothing",
                passed.len()
            )
        }))
    }

    /// A scan of the folder as it is now, stored nowhere.
    pub(super) fn current(&mut self, folder: &Path) -> Result<Manifest, SnapError> {
        let latest = self.latest(folder)?;
        let base = latest.as_ref().map(|(id, _, _)| id.clone());
        let previous = latest.map(|(_, m, _)| m);
        let excludes = self.extra_excludes();
        let plan = self.watch.plan(folder, &excludes, base.as_deref());
        let mut pack = self.blobs.begin()?;
        let result = self.scan_folder(folder, &excludes, plan, previous.as_deref(), &mut pack);
        self.blobs.abandon(pack);
        Ok(result?.manifest)
    }

    pub(super) fn manifest_of(
        &mut self,
        folder: &Path,
        snap: &Snap,
    ) -> Result<Arc<Manifest>, SnapError> {
        let fs = self.folder(folder)?;
        if let Some((id, m, _)) = &fs.latest
            && *id == snap.manifest
        {
            return Ok(Arc::clone(m));
        }
        if let Some((_, m)) = fs.recent.iter().find(|(id, _)| *id == snap.manifest) {
            return Ok(Arc::clone(m));
        }
        let m = Arc::new(load_manifest(&fs.dir, &snap.manifest)?.0);
        remember(fs, &snap.manifest, &m);
        Ok(m)
    }

    /// What undoing `session`'s last message would change.
    pub fn plan_undo(&mut self, folder: &Path, session: &str) -> Result<Plan, SnapError> {
        let ((before, after), passed) = self.undo_target(folder, session)?;
        let current = Arc::new(self.current(folder)?);
        let b = self.manifest_of(folder, &before)?;
        let a = match &after {
            Some(s) => self.manifest_of(folder, s)?,
            None => Arc::clone(&current),
        };
        let ops = restore::plan_undo(&b, &a, &current);
        let (left, changes): (Vec<Op>, Vec<Op>) =
            ops.into_iter().partition(|o| o.left_alone.is_some());
        Ok(Plan {
            changes: restore::describe(&changes),
            left_alone: restore::describe(&left),
            message: describe_message(&before, session),
            passed: passed
                .iter()
                .map(|(b, _)| describe_message(b, session))
                .collect(),
            target_id: before.id.clone(),
        })
    }

    /// Puts back what `session`'s last message changed (conflicts skipped
    /// unless `force`), after a pre-restore snapshot. The message counts as
    /// undone only when every path it changed was put back (paths that are
    /// left alone by rule excepted); newer messages that changed nothing
    /// are passed over and marked undone with it.
    pub fn undo(
        &mut self,
        folder: &Path,
        session: &str,
        force: bool,
    ) -> Result<RestoreReport, SnapError> {
        let ((before, after), passed) = self.undo_target(folder, session)?;
        let pre = self.take(
            folder,
            vec![Owner {
                session: session.to_owned(),
                phase: Phase::PreRestore,
                pair: String::new(),
                label: "before undo".into(),
            }],
        )?;
        let current = self.manifest_of(folder, &pre)?;
        let b = self.manifest_of(folder, &before)?;
        let a = match &after {
            Some(s) => self.manifest_of(folder, s)?,
            None => Arc::clone(&current),
        };
        let ops = restore::plan_undo(&b, &a, &current);
        let mut report = self.run_restore(folder, &before.manifest, ops, force, pre.id)?;
        report.undone = report.skipped.is_empty() && report.errors.is_empty();
        report.message = describe_message(&before, session);
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
            if let Some(a) = &after {
                mark.push(&a.id);
            }
        }
        let fs = self.folder(folder)?;
        for s in fs.timeline.snaps.iter_mut() {
            if mark.contains(&s.id.as_str()) {
                s.undone = true;
            }
        }
        save_timeline(&fs.dir, &fs.timeline)?;
        Ok(report)
    }

    /// What rewinding to a snapshot would change.
    pub fn plan_rewind(&mut self, folder: &Path, to: &RewindTo) -> Result<Plan, SnapError> {
        let target = self.rewind_target(folder, to)?;
        let t = self.manifest_of(folder, &target)?;
        let current = self.current(folder)?;
        let (left, changes): (Vec<Op>, Vec<Op>) = restore::plan_rewind(&t, &current)
            .into_iter()
            .partition(|o| o.left_alone.is_some());
        Ok(Plan {
            changes: restore::describe(&changes),
            left_alone: restore::describe(&left),
            target_id: target.id,
            ..Plan::default()
        })
    }

    /// Puts the whole folder back as a snapshot had it.
    pub fn rewind(&mut self, folder: &Path, to: &RewindTo) -> Result<RestoreReport, SnapError> {
        let target = self.rewind_target(folder, to)?;
        let pre = self.take(
            folder,
            vec![Owner {
                session: String::new(),
                phase: Phase::PreRestore,
                pair: String::new(),
                label: format!("before rewind to {}", target.id),
            }],
        )?;
        let t = self.manifest_of(folder, &target)?;
        let current = self.manifest_of(folder, &pre)?;
        let ops = restore::plan_rewind(&t, &current);
        self.run_restore(folder, &target.manifest, ops, true, pre.id)
    }

    pub(super) fn rewind_target(
        &mut self,
        folder: &Path,
        to: &RewindTo,
    ) -> Result<Snap, SnapError> {
        let snaps = &self.folder(folder)?.timeline.snaps;
        match to {
            RewindTo::Index(n) => {
                if *n == 0 || *n > snaps.len() {
                    return Err(SnapError::NotFound(format!(
                        "no snapshot {n}: this folder has {} (1 is the newest)",
                        snaps.len()
                    )));
                }
                Ok(snaps[snaps.len() - n].clone())
            }
            RewindTo::Id(id) => snaps.iter().find(|s| s.id == *id).cloned().ok_or_else(|| {
                SnapError::NotFound(format!(
                    "no snapshot {id} in this folder (`agentx snapshots` lists them)"
                ))
            }),
        }
    }

    pub(super) fn run_restore(
        &mut self,
        folder: &Path,
        want_manifest: &str,
        ops: Vec<Op>,
        force: bool,
        pre_restore: String,
    ) -> Result<RestoreReport, SnapError> {
        let (left, ops): (Vec<Op>, Vec<Op>) = ops.into_iter().partition(|o| o.left_alone.is_some());
        let (apply, skipped): (Vec<Op>, Vec<Op>) =
            ops.into_iter().partition(|o| force || !o.conflict);
        let fs = self.folder(folder)?;
        let journal = RestoreJournal {
            want_manifest: want_manifest.to_owned(),
            paths: apply.iter().map(|o| o.path.clone()).collect(),
        };
        let journal_path = fs.dir.join("restore.json");
        let dir = fs.dir.clone();
        durable::write_atomic(
            &journal_path,
            &serde_json::to_vec(&journal).map_err(std::io::Error::other)?,
        )?;
        let failed = restore::apply(folder, &apply, &self.blobs);
        std::fs::remove_file(&journal_path)?;
        durable::fsync_dir(&dir)?;
        let failed_paths: HashSet<&[u8]> = failed.iter().map(|(p, _)| p.as_slice()).collect();
        let done: Vec<Op> = apply
            .iter()
            .filter(|o| !failed_paths.contains(o.path.as_slice()))
            .cloned()
            .collect();
        Ok(RestoreReport {
            applied: restore::describe(&done),
            skipped: restore::describe(&skipped),
            left_alone: restore::describe(&left),
            errors: failed
                .iter()
                .map(|(p, e)| format!("{}: {e}", restore::escape(p)))
                .collect(),
            pre_restore,
            ..RestoreReport::default()
        })
    }
}
