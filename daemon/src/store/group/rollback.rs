//! Rolling a conversation back to a checkpoint (or undoing the last
//! rollback): the transcript cut, the backup kept, the shared checkpoint moved.

use super::*;

impl Group {
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
                let count = session.doc.checkpoints.len();
                let (keep, cp) = match target {
                    RollbackTarget::Index(n) if n == 0 || n as usize > count => {
                        return Err(StoreError::NotFound(format!(
                            "no checkpoint {n}: this conversation has {count} (1 is the newest)"
                        )));
                    }
                    RollbackTarget::Index(n) => {
                        let keep = count - n as usize + 1;
                        (keep, session.doc.checkpoints[keep - 1].clone())
                    }
                    _ => (
                        0,
                        SessionDoc::new(String::new(), String::new(), String::new(), now)
                            .checkpoint(now),
                    ),
                };
                session.save_tail_from(cp.journal_bytes)?;
                let doc = &mut session.doc;
                let backup = RollbackBackup {
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
                    rolled_back_to: cp.journal_bytes,
                    at: now,
                };
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
                session.save()?;
                session.truncate_journal()?;
            }
            RollbackTarget::Undo => {
                let Some(backup) = session.doc.rollback.clone() else {
                    return Err(StoreError::NotFound("there is no rollback to undo".into()));
                };
                if session.doc.journal_bytes != backup.rolled_back_to {
                    return Err(StoreError::Invalid(
                        "the conversation went on after the rollback, so undoing it would lose \
                         those turns; roll back to a checkpoint instead"
                            .into(),
                    ));
                }
                let tail = std::fs::read(&session.paths.rollback_tail)?;
                if tail.len() as u64 != backup.journal_bytes - backup.rolled_back_to {
                    return Err(StoreError::Io(format!(
                        "{} does not match the rollback it belongs to; it cannot be undone",
                        session.paths.rollback_tail.display()
                    )));
                }
                session.append_raw(&tail, backup.journal_items - session.doc.journal_items)?;
                let doc = &mut session.doc;
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
                session.save()?;
                let _ = std::fs::remove_file(&session.paths.rollback_tail);
            }
        }
        let doc = session.doc.clone();
        self.index_hook(id);
        self.write_shared(&doc)?;
        Ok(doc)
    }
}
