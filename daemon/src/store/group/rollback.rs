//! Rolling a conversation back to a checkpoint (or undoing the last
//! rollback): the transcript cut, the backup kept, the shared checkpoint moved.

use super::*;

impl Group {
    /// Rolls conversation `id` back to `target` (or undoes the last
    /// rollback), then indexes and shares its new state.
    pub(super) fn rollback(
        &mut self,
        folder: &str,
        id: &str,
        target: RollbackTarget,
        in_turn: bool,
    ) -> Result<SessionDoc, StoreError> {
        if !in_turn && self.running.contains(id) {
            return Err(StoreError::Invalid(
                "a turn is running on this conversation; wait for it or cancel it first".into(),
            ));
        }
        let now = now_ms();
        let session = self.session(folder, id)?;
        match target {
            RollbackTarget::Index(_) | RollbackTarget::Origin => {
                session.roll_back_to(target, now)?
            }
            RollbackTarget::Undo => session.undo_rollback(now)?,
        }
        let doc = session.doc.clone();
        self.index_hook(id);
        self.write_shared(&doc)?;
        Ok(doc)
    }
}

impl Session {
    /// How many checkpoints a rollback to `target` keeps, and the
    /// checkpoint it returns to (an empty one for the origin).
    fn rollback_checkpoint(
        &self,
        target: RollbackTarget,
        now: i64,
    ) -> Result<(usize, Checkpoint), StoreError> {
        let count = self.doc.checkpoints.len();
        match target {
            RollbackTarget::Index(n) if n == 0 || n as usize > count => Err(StoreError::NotFound(
                format!("no checkpoint {n}: this conversation has {count} (1 is the newest)"),
            )),
            RollbackTarget::Index(n) => {
                let keep = count - n as usize + 1;
                Ok((keep, self.doc.checkpoints[keep - 1].clone()))
            }
            _ => Ok((
                0,
                SessionDoc::new(String::new(), String::new(), String::new(), now).checkpoint(now),
            )),
        }
    }

    /// Cuts the transcript back to the checkpoint `target` names, keeping
    /// the cut tail and a backup of the state so the rollback can be undone.
    fn roll_back_to(&mut self, target: RollbackTarget, now: i64) -> Result<(), StoreError> {
        let (keep, cp) = self.rollback_checkpoint(target, now)?;
        self.save_tail_from(cp.journal_bytes)?;
        let doc = &mut self.doc;
        let backup = take_backup(doc, cp.journal_bytes, now);
        doc.response_id = cp.response_id.clone();
        doc.usage = cp.usage;
        doc.last_user = cp.last_user.clone();
        doc.last_assistant = cp.last_assistant.clone();
        doc.turns = cp.turns;
        doc.journal_items = cp.journal_items;
        doc.journal_bytes = cp.journal_bytes;
        doc.checkpoints.truncate(keep);
        doc.rollback = Some(Box::new(backup));
        doc.rollbacks += 1;
        doc.updated_at = now.max(doc.updated_at);
        self.save()?;
        self.truncate_journal()?;
        Ok(())
    }

    /// Undoes the last rollback: appends the cut tail back and restores the
    /// backed-up state, if the conversation did not go on since.
    fn undo_rollback(&mut self, now: i64) -> Result<(), StoreError> {
        let Some(backup) = self.doc.rollback.clone() else {
            return Err(StoreError::NotFound("there is no rollback to undo".into()));
        };
        if self.doc.journal_bytes != backup.rolled_back_to {
            return Err(StoreError::Invalid(
                "the conversation went on after the rollback, so undoing it would lose \
                 those turns; roll back to a checkpoint instead"
                    .into(),
            ));
        }
        let tail = std::fs::read(&self.paths.rollback_tail)?;
        if tail.len() as u64 != backup.journal_bytes - backup.rolled_back_to {
            return Err(StoreError::Io(format!(
                "{} does not match the rollback it belongs to; it cannot be undone",
                self.paths.rollback_tail.display()
            )));
        }
        self.append_raw(&tail, backup.journal_items - self.doc.journal_items)?;
        let doc = &mut self.doc;
        doc.response_id = backup.response_id;
        doc.usage = backup.usage;
        doc.last_user = backup.last_user;
        doc.last_assistant = backup.last_assistant;
        doc.pending_calls = backup.pending_calls;
        doc.turns = backup.turns;
        doc.unsent = backup.unsent;
        doc.interrupted = backup.interrupted;
        doc.failed = backup.failed;
        doc.checkpoints = backup.checkpoints;
        doc.rollback = None;
        doc.updated_at = now.max(doc.updated_at);
        self.save()?;
        let _ = std::fs::remove_file(&self.paths.rollback_tail);
        Ok(())
    }
}

/// The backup of `doc`'s state before a rollback to `rolled_back_to`
/// (pending calls, unsent items and markers are moved into it).
fn take_backup(doc: &mut SessionDoc, rolled_back_to: u64, now: i64) -> RollbackBackup {
    RollbackBackup {
        response_id: doc.response_id.clone(),
        usage: doc.usage,
        last_user: doc.last_user.clone(),
        last_assistant: doc.last_assistant.clone(),
        pending_calls: std::mem::take(&mut doc.pending_calls),
        turns: doc.turns,
        journal_items: doc.journal_items,
        journal_bytes: doc.journal_bytes,
        unsent: std::mem::take(&mut doc.unsent),
        interrupted: doc.interrupted.take(),
        failed: doc.failed.take(),
        checkpoints: doc.checkpoints.clone(),
        rolled_back_to,
        at: now,
    }
}
