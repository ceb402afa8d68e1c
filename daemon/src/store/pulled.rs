//! Another machine's copy of a conversation brought into the local one
//! (the remote store): the local journal cut back to what both share,
//! the other machine's records appended, its metadata taken.

use agentx_shared::conversation::Usage;

use super::conversation::{Checkpoint, Conversation, ConversationDoc};

/// What to make of a local conversation so it equals the remote's copy.
#[derive(Debug, Clone, Default)]
pub struct Pulled {
    /// Committed journal items and bytes both copies share (the rest of the
    /// local journal is dropped: the caller kept it elsewhere first).
    pub keep_items: u64,
    pub keep_bytes: u64,
    /// Journal lines to append (each ending in `\n`) and how many.
    pub lines: Vec<u8>,
    pub items: u64,
    pub meta: PulledMeta,
}

/// The remote copy's metadata.
#[derive(Debug, Clone, Default)]
pub struct PulledMeta {
    pub title: String,
    pub response_id: Option<String>,
    pub usage: Usage,
    pub turns: u32,
    pub checkpoints: Vec<Checkpoint>,
    pub last_user: String,
    pub last_assistant: String,
    pub updated_at: i64,
}

impl PulledMeta {
    /// Puts this metadata on `doc`; the latest of both update times stays.
    pub fn apply_to(self, doc: &mut ConversationDoc) {
        doc.title = self.title;
        doc.response_id = self.response_id;
        doc.usage = self.usage;
        doc.turns = self.turns;
        doc.checkpoints = self.checkpoints;
        doc.last_user = self.last_user;
        doc.last_assistant = self.last_assistant;
        doc.updated_at = doc.updated_at.max(self.updated_at);
    }
}

/// Applies `pulled` to `session` durably: the document is saved with the
/// shorter length before the journal is cut, as a rollback does, so a crash
/// at any point leaves a consistent conversation.
pub(super) fn apply(session: &mut Conversation, pulled: Pulled) -> std::io::Result<()> {
    if pulled.keep_bytes < session.doc.journal_bytes {
        let doc = &mut session.doc;
        doc.journal_bytes = pulled.keep_bytes;
        doc.journal_items = pulled.keep_items;
        // The journal is rewritten: the pusher starts this one over, and an
        // older rollback backup no longer fits it.
        doc.rollbacks += 1;
        let mut stale: Vec<_> = doc.rollback.take().map(|b| *b).into_iter().collect();
        stale.append(&mut doc.older_rollbacks);
        session.save()?;
        session.truncate_journal()?;
        for backup in &stale {
            let _ = std::fs::remove_file(session.paths.tail_of(backup));
        }
    }
    session.append_raw(&pulled.lines, pulled.items)?;
    let doc = &mut session.doc;
    pulled.meta.apply_to(doc);
    // What was pending here belonged to the local line (kept elsewhere
    // when it differed); the remote copy ended at a finished turn.
    doc.pending_calls.clear();
    doc.unsent.clear();
    doc.interrupted = None;
    doc.failed = None;
    doc.cut_short = None;
    session.save()
}
