//! Rolling a conversation back to a checkpoint (or undoing the last
//! rollback): the transcript cut, the backup kept, the shared checkpoint moved.

use super::Group;
use super::handle::{Expect, RollbackBy, RollbackTarget};
use crate::store::StoreError;
use crate::store::conversation::{
    Checkpoint, Conversation, ConversationDoc, MAX_ROLLBACK_BACKUPS, RollbackBackup,
};

impl Group {
    /// Rolls conversation `id` back to `target` (or undoes the last
    /// rollback), then indexes and shares its new state.
    pub(super) fn rollback(
        &mut self,
        folder: &str,
        id: &str,
        target: RollbackTarget,
        expect: &Expect,
        by: RollbackBy,
    ) -> Result<ConversationDoc, StoreError> {
        if by == RollbackBy::Client && self.running.contains(id) {
            return Err(StoreError::Invalid(
                "a turn is running on this conversation; wait for it or cancel it first".into(),
            ));
        }
        let now = agentx_shared::time::now_ms();
        let session = self.session(folder, id)?;
        if expect
            .head
            .as_ref()
            .is_some_and(|h| *h != session.doc.head())
        {
            return Err(StoreError::Moved(
                "the conversation moved since (another client went on, rolled back or undid a \
                 rollback): run `agentx checkpoints` again"
                    .into(),
            ));
        }
        if expect
            .unchanged_since
            .is_some_and(|since| session.doc.updated_at > since)
        {
            return Err(StoreError::Moved(
                "the conversation moved since this command started (another client went on, \
                 rolled back or undid a rollback): nothing was rolled back; run `agentx \
                 checkpoints` to see where it is now"
                    .into(),
            ));
        }
        // A failure past this point may leave memory ahead of the disk.
        let doc = self.durably(folder, id, |session| {
            match target {
                RollbackTarget::Undo => session.undo_rollback(now)?,
                _ => session.roll_back_to(target, now)?,
            }
            Ok(session.doc.clone())
        })?;
        self.index_hook(id);
        self.write_shared(&doc)?;
        Ok(doc)
    }
}

impl Conversation {
    /// How many checkpoints a rollback to `target` keeps, and the
    /// checkpoint it returns to (an empty one for the origin).
    fn rollback_checkpoint(
        &self,
        target: &RollbackTarget,
        now: i64,
    ) -> Result<(usize, Checkpoint), StoreError> {
        let count = self.doc.checkpoints.len();
        match target {
            &RollbackTarget::Index(n) if n == 0 || n as usize > count => Err(StoreError::NotFound(
                format!("no checkpoint {n}: this conversation has {count} (1 is the newest)"),
            )),
            &RollbackTarget::Index(n) => {
                let keep = count - n as usize + 1;
                Ok((keep, self.doc.checkpoints[keep - 1].clone()))
            }
            RollbackTarget::Id(id) => self
                .doc
                .checkpoints
                .iter()
                .position(|c| &c.id() == id)
                .map(|i| (i + 1, self.doc.checkpoints[i].clone()))
                .ok_or_else(|| {
                    StoreError::Moved(format!(
                        "checkpoint {id} is no longer in this conversation (it moved since): \
                         run `agentx checkpoints` again"
                    ))
                }),
            _ => Ok((
                0,
                ConversationDoc::new(String::new(), String::new(), String::new(), now)
                    .checkpoint(now),
            )),
        }
    }

    /// Cuts the transcript back to the checkpoint `target` names, keeping
    /// the cut tail and a backup of the state so the rollback can be undone.
    /// Earlier backups stay stacked below it while the conversation has not
    /// gone on since them, so each rollback can be undone in turn.
    fn roll_back_to(&mut self, target: RollbackTarget, now: i64) -> Result<(), StoreError> {
        let (keep, cp) = self.rollback_checkpoint(&target, now)?;
        let name = format!("{}.rollback-{}.jsonl", self.doc.id, self.doc.rollbacks + 1);
        let tail_path = self.paths.doc.with_file_name(&name);
        self.save_tail_from(cp.journal_bytes, &tail_path)?;
        let mut dropped = Vec::new();
        let doc = &mut self.doc;
        let mut backup = take_backup(doc, cp.journal_bytes, now);
        backup.tail = Some(name);
        if let Some(top) = doc.rollback.take() {
            if top.rolled_back_to == doc.journal_bytes {
                doc.older_rollbacks.push(*top);
            } else {
                // The conversation went on after it: none of them can be
                // undone any more.
                dropped.push(*top);
                dropped.append(&mut doc.older_rollbacks);
            }
        }
        let over = doc
            .older_rollbacks
            .len()
            .saturating_sub(MAX_ROLLBACK_BACKUPS - 1);
        dropped.extend(doc.older_rollbacks.drain(..over));
        doc.response_id = cp.response_id.clone();
        doc.usage = cp.usage;
        doc.last_user = cp.last_user.clone();
        doc.last_assistant = cp.last_assistant.clone();
        doc.turns = cp.turns;
        doc.context = cp.context;
        doc.journal_items = cp.journal_items;
        doc.journal_bytes = cp.journal_bytes;
        doc.checkpoints.truncate(keep);
        doc.rollback = Some(Box::new(backup));
        doc.rollbacks += 1;
        doc.updated_at = now.max(doc.updated_at);
        self.save()?;
        self.truncate_journal()?;
        for old in &dropped {
            let _ = std::fs::remove_file(self.paths.tail_of(old));
        }
        Ok(())
    }

    /// Undoes the last rollback: appends the cut tail back and restores the
    /// backed-up state, if the conversation did not go on since. The backup
    /// of the rollback before it becomes the next one to undo.
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
        let tail_path = self.paths.tail_of(&backup);
        let tail = std::fs::read(&tail_path)?;
        if tail.len() as u64 != backup.journal_bytes - backup.rolled_back_to {
            return Err(StoreError::Damaged {
                message: format!(
                    "{} does not match the rollback it belongs to; it cannot be undone",
                    tail_path.display()
                ),
                path: tail_path,
            });
        }
        self.append_raw(&tail, backup.journal_items - self.doc.journal_items)?;
        let backup = *backup;
        let doc = &mut self.doc;
        doc.response_id = backup.response_id;
        doc.usage = backup.usage;
        doc.last_user = backup.last_user;
        doc.last_assistant = backup.last_assistant;
        doc.pending_calls = backup.pending_calls;
        doc.turns = backup.turns;
        doc.context = backup.context;
        doc.unsent = backup.unsent;
        doc.interrupted = backup.interrupted;
        doc.failed = backup.failed;
        doc.cut_short = backup.cut_short;
        doc.checkpoints = backup.checkpoints;
        doc.rollback = doc.older_rollbacks.pop().map(Box::new);
        doc.updated_at = now.max(doc.updated_at);
        self.save()?;
        let _ = std::fs::remove_file(&tail_path);
        Ok(())
    }
}

/// The backup of `doc`'s state before a rollback to `rolled_back_to`
/// (pending calls, unsent items and markers — interrupted, failed, cut
/// short — are moved into it: they describe the last turn, which it cuts).
fn take_backup(doc: &mut ConversationDoc, rolled_back_to: u64, now: i64) -> RollbackBackup {
    // Every field named (no `..`): a new one is placed here on purpose.
    let ConversationDoc {
        // Kept in the backup (some moved into it, see below).
        response_id: _,
        usage: _,
        last_user: _,
        last_assistant: _,
        pending_calls: _,
        turns: _,
        journal_items: _,
        journal_bytes: _,
        unsent: _,
        interrupted: _,
        failed: _,
        cut_short: _,
        checkpoints: _,
        context: _,
        // The conversation's own, unchanged by a rollback.
        format: _,
        id: _,
        folder: _,
        agent: _,
        title: _,
        created_at: _,
        updated_at: _,
        model: _,
        approve_all: _,
        base: _,
        forked_from: _,
        rollback: _,
        older_rollbacks: _,
        rollbacks: _,
        // The user's `!command` output waits for the next message whatever
        // the line; the calls log's epoch follows `pending_calls` on save.
        pending_shell: _,
        pending_shell_runs: _,
        calls_epoch: _,
        turn_open: _,
    } = &*doc;
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
        cut_short: doc.cut_short.take(),
        checkpoints: doc.checkpoints.clone(),
        rolled_back_to,
        at: now,
        tail: None,
        context: doc.context,
    }
}

#[cfg(test)]
mod tests {
    use agentx_shared::conversation::Item;

    use super::*;
    use crate::store::conversation::Marker;

    #[test]
    fn a_rollback_clears_the_cut_answer_mark_and_its_undo_brings_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let doc = ConversationDoc::new("19a0b1c2d3e-abcdef".into(), "/f".into(), "a".into(), 1);
        let mut c = Conversation::create(dir.path(), doc).unwrap();
        let turn = |c: &mut Conversation, n: u32, now| {
            c.append(
                &[Item::User {
                    text: format!("q{n}"),
                }],
                now,
            )
            .unwrap();
            c.doc.turns = n;
            let cp = c.doc.checkpoint(now);
            c.doc.checkpoints.push(cp);
            c.save().unwrap();
        };
        turn(&mut c, 1, 2);
        turn(&mut c, 2, 3);
        let mark = Marker {
            message: "the answer was cut short".into(),
            at: 3,
            retryable: false,
        };
        c.doc.cut_short = Some(mark.clone());
        c.roll_back_to(RollbackTarget::Index(2), 4).unwrap();
        assert_eq!(c.doc.turns, 1);
        assert_eq!(c.doc.cut_short, None, "the cut answer was rolled back");
        c.undo_rollback(5).unwrap();
        assert_eq!(c.doc.turns, 2);
        assert_eq!(c.doc.cut_short, Some(mark));
    }
}
