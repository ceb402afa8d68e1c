//! Undo and rewind: which message an undo takes back, the plans shown
//! first, and the restore itself after a pre-restore snapshot.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use super::manifest::{self, Manifest};
use super::restore::{self, Op};
use super::restoring::{AwayRestore, Then, UndoneMessage};
use super::timeline::{load_manifest, remember};
use super::{
    Message, Owner, Phase, Plan, RewindTo, Snap, SnapError, SnapshotStore, describe_message, scan,
    watch,
};

/// Whether the directory at a relative path of `folder` is a mount point
/// now (the mount table is read once, when first asked).
fn mount_root_in(folder: &Path) -> impl Fn(&[u8]) -> bool + '_ {
    use std::os::unix::ffi::OsStrExt as _;
    let points = std::cell::OnceCell::new();
    move |rel: &[u8]| {
        points
            .get_or_init(watch::mount_points)
            .contains(&folder.join(std::ffi::OsStr::from_bytes(rel)))
    }
}

/// Where a message's before and after snapshots stand in the timeline.
type Span = (Option<usize>, Option<usize>);

/// Another directory stands at the folder's path than when `then` was
/// taken (a new checkout where a renamed one was): every path an undo
/// would touch is a conflict, for none of it is the message's.
fn mark_if_replaced(ops: &mut [Op], then: &Snap, now: Option<[u64; 2]>) {
    if then.root.is_some() && now.is_some() && then.root != now {
        for op in ops {
            op.conflict = true;
        }
    }
}

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
                if restore::plan_undo(&b, &am, &am, &restore::Suspects::none()).is_empty() {
                    passed.push((before, after));
                    continue;
                }
            }
            return Ok(((before, after), passed));
        }
        let why = if passed.is_empty() {
            format!(
                "no message of this conversation to undo among the snapshots kept (those of \
                 the newest {} messages of this folder)",
                super::KEEP / 2
            )
        } else {
            format!(
                "no message of this conversation to undo: the {} left changed nothing",
                agentx_shared::plural::count(passed.len(), "message")
            )
        };
        Err(SnapError::NotFound(match self.oneshot_change(folder)? {
            Some(hint) => format!("{why}; {hint}"),
            None => why,
        }))
    }

    /// When a one-shot changed the folder, which one and how to take its
    /// change back: one-shots have no undo of their own, a rewind to the
    /// snapshot before it does it.
    fn oneshot_change(&mut self, folder: &Path) -> Result<Option<String>, SnapError> {
        let snaps: Vec<Snap> = self.list(folder)?;
        for (n, before) in snaps.iter().enumerate() {
            let Some(owner) = before
                .owners
                .iter()
                .find(|o| o.phase == Phase::Before && o.session.starts_with("oneshot-"))
            else {
                continue;
            };
            let Some(after) = snaps.iter().find(|s| {
                s.owners
                    .iter()
                    .any(|o| o.phase == Phase::After && o.pair == owner.pair)
            }) else {
                continue;
            };
            let b = self.manifest_of(folder, before)?;
            let a = self.manifest_of(folder, after)?;
            if restore::plan_undo(&b, &a, &a, &restore::Suspects::none()).is_empty() {
                continue;
            }
            let index = n + 1;
            let label: String = owner.label.chars().take(60).collect();
            return Ok(Some(format!(
                "one-shot {} ({label:?}) changed the folder, and one-shots have no undo: \
                 rewind {index} (agentx rewind {index}, /rewind {index} in the chat) puts the \
                 folder back as it was before it",
                owner.session
            )));
        }
        Ok(None)
    }

    /// A scan of the folder as it is now, stored nowhere.
    pub(super) fn current(&mut self, folder: &Path) -> Result<Manifest, SnapError> {
        let latest = self.latest(folder)?;
        let base = latest.as_ref().map(|(id, _, _)| id.clone());
        let previous = latest.map(|(_, m, _)| m);
        let excludes = self.extra_excludes();
        let plan = self.watch.plan(folder, &excludes, base.as_deref(), || {
            previous.as_deref().map(Manifest::dir_count)
        });
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

    /// The paths that other conversations' and one-shots' messages changed
    /// while this message (`before` to `after`) ran too: with both writing
    /// in the folder at once, an undo cannot tell whose change a path is,
    /// so each of them is a conflict (listed, skipped unless forced).
    fn foreign_changes(
        &mut self,
        folder: &Path,
        session: &str,
        before: &Snap,
        after: Option<&Snap>,
    ) -> Result<HashSet<Vec<u8>>, SnapError> {
        let snaps = self.folder(folder)?.timeline.snaps.clone();
        let at = |id: &str| snaps.iter().position(|s| s.id == id);
        let (Some(mine_b), mine_a) = (at(&before.id), after.and_then(|a| at(&a.id))) else {
            return Ok(HashSet::new());
        };
        let mine_a = mine_a.unwrap_or(snaps.len());
        // Other messages: (session, pair) → (before index, after index).
        let mut others: HashMap<(&str, &str), Span> = HashMap::new();
        for (i, s) in snaps.iter().enumerate() {
            for o in s.owners.iter().filter(|o| o.session != session) {
                let slot = others.entry((&o.session, &o.pair)).or_default();
                match o.phase {
                    Phase::Before => slot.0 = Some(i),
                    Phase::After => slot.1 = Some(i),
                    _ => {}
                }
            }
        }
        // A message without an after snapshot (agentd died in it) is taken
        // to end at its conversation's next snapshot, if any.
        let ends_by = |sess: &str, b: usize| {
            (b + 1..snaps.len()).find(|&i| snaps[i].owners.iter().any(|o| o.session == sess))
        };
        let overlapping: Vec<(usize, usize)> = others
            .iter()
            .filter_map(|((sess, _), (b, a))| {
                let b = (*b)?;
                Some((b, a.or_else(|| ends_by(sess, b))?))
            })
            .filter(|(b, a)| *b < mine_a && *a > mine_b)
            .collect();
        let mut paths = HashSet::new();
        for (b, a) in overlapping {
            let from = self.manifest_of(folder, &snaps[b])?;
            let to = self.manifest_of(folder, &snaps[a])?;
            for (p, [x, y]) in manifest::aligned([&*from, &*to]) {
                let changed = match (x, y) {
                    (Some(x), Some(y)) => !x.same_content(y),
                    (None, None) => false,
                    _ => true,
                };
                if changed {
                    paths.insert(p.to_vec());
                }
            }
        }
        Ok(paths)
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
        let foreign = self.foreign_changes(folder, session, &before, after.as_ref())?;
        let mounted = mount_root_in(folder);
        let suspects = restore::Suspects {
            foreign: &foreign,
            mounted: &mounted,
        };
        let mut ops = restore::plan_undo(&b, &a, &current, &suspects);
        mark_if_replaced(
            &mut ops,
            after.as_ref().unwrap_or(&before),
            scan::identity(folder),
        );
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
    /// are passed over and marked undone with it. (agentd writes away from
    /// the store's thread: [`Self::begin_undo`].)
    #[cfg(test)]
    pub fn undo(
        &mut self,
        folder: &Path,
        session: &str,
        force: bool,
    ) -> Result<super::RestoreReport, SnapError> {
        let away = self.begin_undo(folder, session, force)?;
        self.finish_restore(away)
    }

    /// [`Self::undo`] up to its writes, which [`AwayRestore::run`] makes.
    pub fn begin_undo(
        &mut self,
        folder: &Path,
        session: &str,
        force: bool,
    ) -> Result<AwayRestore, SnapError> {
        let ((before, after), passed) = self.undo_target(folder, session)?;
        let b = self.manifest_of(folder, &before)?;
        let a = match &after {
            Some(s) => Some(self.manifest_of(folder, s)?),
            None => None,
        };
        let foreign = self.foreign_changes(folder, session, &before, after.as_ref())?;
        let owner = Owner {
            session: session.to_owned(),
            phase: Phase::PreRestore,
            pair: String::new(),
            label: "before undo".into(),
        };
        let mounted = mount_root_in(folder);
        let suspects = restore::Suspects {
            foreign: &foreign,
            mounted: &mounted,
        };
        let (pre, mut ops) = self.checked_plan(folder, &owner, |current| {
            restore::plan_undo(&b, a.as_deref().unwrap_or(current), current, &suspects)
        })?;
        // Another directory at the folder's path since the message (a new
        // checkout where a renamed one was): none of it is the message's.
        mark_if_replaced(&mut ops, after.as_ref().unwrap_or(&before), pre.root);
        let want = before.manifest.clone();
        let then = Then::Undo(Box::new(UndoneMessage {
            session: session.to_owned(),
            message: (before, after),
            passed,
        }));
        self.begin_restore(folder, &want, ops, force, pre.id, then)
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

    /// Puts the whole folder back as a snapshot had it. (agentd writes away
    /// from the store's thread: [`Self::begin_rewind`].)
    #[cfg(test)]
    pub fn rewind(
        &mut self,
        folder: &Path,
        to: &RewindTo,
    ) -> Result<super::RestoreReport, SnapError> {
        let away = self.begin_rewind(folder, to)?;
        self.finish_restore(away)
    }

    /// [`Self::rewind`] up to its writes, which [`AwayRestore::run`] makes.
    pub fn begin_rewind(&mut self, folder: &Path, to: &RewindTo) -> Result<AwayRestore, SnapError> {
        let target = self.rewind_target(folder, to)?;
        let t = self.manifest_of(folder, &target)?;
        let owner = Owner {
            session: String::new(),
            phase: Phase::PreRestore,
            pair: String::new(),
            label: format!("before rewind to {}", target.id),
        };
        let (pre, ops) =
            self.checked_plan(folder, &owner, |current| restore::plan_rewind(&t, current))?;
        self.begin_restore(folder, &target.manifest, ops, true, pre.id, Then::Rewind)
    }

    /// Takes the pre-restore snapshot, plans against it with `plan`, and
    /// checks each path the plan would touch against the live file. A difference means the snapshot missed a change (a
    /// watcher blind spot: a renamed ancestor, a mount, a write through an
    /// outside hard link or a shared mapping): the watcher is reset and the
    /// snapshot taken again by a full scan, so the pre-restore snapshot holds
    /// what is on disk and the plan sees it (a conflict, as any change since
    /// the message). A path that still differs (a writer racing the restore)
    /// is a conflict that is never written over, `--force` or not.
    fn checked_plan(
        &mut self,
        folder: &Path,
        owner: &Owner,
        plan: impl Fn(&Manifest) -> Vec<Op>,
    ) -> Result<(Snap, Vec<Op>), SnapError> {
        let mut rescanned = false;
        loop {
            let pre = self.take(folder, vec![owner.clone()])?;
            let current = self.manifest_of(folder, &pre)?;
            let mut ops = plan(&current);
            let started = std::time::Instant::now();
            let differ = restore::live::check(folder, &ops, &current);
            tracing::debug!(
                paths = ops.len(),
                differ = differ.len(),
                us = started.elapsed().as_micros(),
                "live check"
            );
            let Some((first, why)) = differ.first() else {
                return Ok((pre, ops));
            };
            if !rescanned {
                let why = format!(
                    "a restore found {} changed without an event, e.g. {}: {why}",
                    agentx_shared::plural::count(differ.len(), "path"),
                    restore::escape(first)
                );
                tracing::warn!(folder = %folder.display(), "{why}; rescanning in full");
                self.watch.reset(folder, &why);
                rescanned = true;
                continue;
            }
            let differ: HashMap<Vec<u8>, String> = differ.into_iter().collect();
            for op in &mut ops {
                if let Some(why) = differ.get(&op.path) {
                    op.live = Some(why.clone());
                }
            }
            return Ok((pre, ops));
        }
    }

    /// The snapshot `to` names in `folder`'s timeline.
    pub fn rewind_target(&mut self, folder: &Path, to: &RewindTo) -> Result<Snap, SnapError> {
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
}
