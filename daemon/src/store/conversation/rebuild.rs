//! A state document rebuilt from its journal when `<id>.json` is
//! unreadable: what the transcript still tells, and the torn tail kept aside.

use std::io;
use std::path::{Path, PathBuf};

use agentx_shared::conversation::{CallState, Item, PendingCall};

use super::{
    CallsLog, Conversation, ConversationDoc, ConversationPaths, Entry, LoadError, MAX_CHECKPOINTS,
    Marker, OpenGuard, title_from,
};
use crate::durable;

/// The header a turn puts before the user's message when `!command`
/// transcripts ran since the last one (see the turn engine).
pub(super) const SHELL_HEADER: &str = "Commands I ran in my terminal since my last message:\n```\n";

/// The user's own words in a journal `User` item (without the shell
/// transcript a turn may have put before them).
fn user_words(text: &str) -> &str {
    match text.strip_prefix(SHELL_HEADER) {
        Some(rest) => rest.split_once("\n```\n\n").map_or(text, |(_, msg)| msg),
        None => text,
    }
}

/// A conversation rebuilt from its journal by [`Conversation::rebuild`].
pub struct Rebuilt {
    pub session: Conversation,
    /// Journal bytes past the last good record (cut off; the caller keeps
    /// them aside with [`Rebuilt::keep_cut_tail`]).
    pub cut_tail: Vec<u8>,
}

impl Rebuilt {
    /// Keeps the journal bytes that were cut as
    /// `<id>.jsonl.corrupt-<unix_ms>` (nothing is deleted unseen).
    pub fn keep_cut_tail(&self, now_ms: i64) -> io::Result<Option<PathBuf>> {
        if self.cut_tail.is_empty() {
            return Ok(None);
        }
        let name = self
            .session
            .paths
            .journal
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let target = self
            .session
            .paths
            .journal
            .with_file_name(format!("{name}.corrupt-{now_ms}"));
        durable::write_atomic(&target, &self.cut_tail)?;
        Ok(Some(target))
    }
}

impl Conversation {
    /// Rebuilds the state document of conversation `id` in `dir` from its
    /// journal, for when `<id>.json` is unreadable but the transcript is not.
    ///
    /// The journal is read up to its last good record: a torn or garbled
    /// record ends it, and the bytes from there on are returned in
    /// [`Rebuilt::cut_tail`] (the document's committed length excludes
    /// them, so the next append cuts them off the file). A journal without
    /// a single good record is `Corrupt`: then there is nothing to rebuild.
    ///
    /// Rebuilt from the journal: the title (first line of the first user
    /// message), created/updated times (the first and last records), the
    /// last user and assistant messages, the turn count and a checkpoint at
    /// every turn boundary (a reply with no tool call left unanswered,
    /// the last [`MAX_CHECKPOINTS`] kept), and the pending state of an
    /// unfinished last turn: tool calls without output become pending calls
    /// in the `running` state (so continuing asks before running them
    /// again), user messages and tool outputs no reply followed become
    /// `unsent`, and the turn is marked interrupted. Folder and agent come
    /// from the caller (the group).
    ///
    /// Lost: usage totals (the journal does not record them; they restart
    /// at zero), the server response id of the conversation and of each
    /// checkpoint (the next request resends the whole local transcript and
    /// starts a new chain), a pending `!command` transcript not yet sent,
    /// "always approve", the rollback backup, the failed-response marker
    /// and the fork origin. A turn that ended with a reply without text is
    /// not recognised as a boundary (it merges with the next one).
    /// `rollbacks` is the caller's best knowledge of the rollback count
    /// (one-shots branched from this conversation compare it).
    pub fn rebuild(
        dir: &Path,
        id: &str,
        folder: &str,
        agent: &str,
        rollbacks: u64,
    ) -> Result<Rebuilt, LoadError> {
        let paths = ConversationPaths::new(dir, id);
        let bytes = match std::fs::read(&paths.journal) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let (records, offset) = good_records(&bytes);
        if records.is_empty() {
            return Err(LoadError::Corrupt {
                path: paths.journal.clone(),
                reason: "the transcript has no readable record".into(),
            });
        }
        let cut_tail = bytes[offset..].to_vec();

        let first_at = records.first().map_or(0, |r| r.0);
        let last_at = records.last().map_or(0, |r| r.0);
        let mut doc =
            ConversationDoc::new(id.to_owned(), folder.to_owned(), agent.to_owned(), first_at);
        doc.updated_at = last_at.max(first_at);
        doc.rollbacks = rollbacks;
        doc.journal_items = records.len() as u64;
        doc.journal_bytes = offset as u64;

        let replay = replay(&mut doc, &records);
        let excess = doc.checkpoints.len().saturating_sub(MAX_CHECKPOINTS);
        doc.checkpoints.drain(..excess);
        doc.journal_items = records.len() as u64;
        doc.journal_bytes = offset as u64;
        if replay.boundary < records.len() {
            mark_unfinished(&mut doc, &records, replay, last_at);
        }
        Ok(Rebuilt {
            session: Self {
                doc,
                paths,
                // A log left beside the damaged document is cut at the
                // first append (its length is checked then).
                calls: CallsLog::default(),
                sync: durable::Sync::Now,
                _open: OpenGuard::new(),
            },
            cut_tail,
        })
    }
}

/// A good journal record: (at, item, end offset).
type Record = (i64, Item, u64);

/// The journal's records up to its last good one, and the offset just past
/// that record (a torn or garbled record ends the read).
fn good_records(bytes: &[u8]) -> (Vec<Record>, usize) {
    let mut records: Vec<Record> = Vec::new();
    let mut offset = 0usize;
    while let Some(len) = bytes[offset..].iter().position(|b| *b == b'\n') {
        let line = &bytes[offset..offset + len];
        let Ok(entry) = serde_json::from_slice::<Entry>(line) else {
            break;
        };
        offset += len + 1;
        records.push((entry.at, entry.item, offset as u64));
    }
    (records, offset)
}

/// What [`replay`] leaves of the last turn.
struct Replay {
    /// Tool calls without output yet.
    open_calls: Vec<PendingCall>,
    /// Index just past the last turn boundary.
    boundary: usize,
    /// Index just past the last reply (assistant message or tool call).
    after_reply: usize,
}

/// Replays `records` into `doc`: title, last messages, turn count and a
/// checkpoint at every turn boundary.
fn replay(doc: &mut ConversationDoc, records: &[Record]) -> Replay {
    let mut open_calls: Vec<PendingCall> = Vec::new();
    let mut boundary = 0usize;
    let mut after_reply = 0usize;
    for (i, (at, item, end)) in records.iter().enumerate() {
        match item {
            Item::User { text } => {
                let words = user_words(text);
                if doc.title.is_empty() {
                    doc.title = title_from(words);
                }
                doc.last_user = words.to_owned();
            }
            Item::Assistant { text } => {
                doc.last_assistant = text.clone();
                after_reply = i + 1;
            }
            Item::FunctionCall {
                call_id,
                name,
                arguments,
            } => {
                open_calls.push(PendingCall {
                    call_id: call_id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                    state: CallState::Running,
                    exit_code: None,
                    output: String::new(),
                    images: Vec::new(),
                });
                after_reply = i + 1;
            }
            Item::FunctionOutput { call_id, .. } => {
                open_calls.retain(|c| &c.call_id != call_id);
            }
            // A compaction between turns was a checkpoint; what it replaced
            // is never sent again.
            Item::Compaction { .. } => {
                after_reply = i + 1;
                if open_calls.is_empty() {
                    doc.journal_items = (i + 1) as u64;
                    doc.journal_bytes = *end;
                    let cp = doc.checkpoint(*at);
                    doc.checkpoints.push(cp);
                    boundary = i + 1;
                }
            }
        }
        let next_is_call = matches!(
            records.get(i + 1).map(|r| &r.1),
            Some(Item::FunctionCall { .. })
        );
        if matches!(item, Item::Assistant { .. }) && open_calls.is_empty() && !next_is_call {
            doc.turns += 1;
            doc.journal_items = (i + 1) as u64;
            doc.journal_bytes = *end;
            let cp = doc.checkpoint(*at);
            doc.checkpoints.push(cp);
            boundary = i + 1;
        }
    }
    Replay {
        open_calls,
        boundary,
        after_reply,
    }
}

/// Marks the unfinished last turn: its open calls pending, its unanswered
/// user messages and tool outputs unsent, the turn interrupted.
fn mark_unfinished(doc: &mut ConversationDoc, records: &[Record], replay: Replay, last_at: i64) {
    doc.pending_calls = replay.open_calls;
    doc.unsent = records[replay.after_reply.max(replay.boundary)..]
        .iter()
        .map(|r| r.1.clone())
        .filter(|item| matches!(item, Item::User { .. } | Item::FunctionOutput { .. }))
        .collect();
    doc.interrupted = Some(Marker {
        message: "the last turn did not finish (this conversation was rebuilt from its \
                  transcript)"
            .into(),
        at: last_at,
        retryable: true,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"{"at":1,"type":"user","text":"one"}"#;
    const TWO: &str = r#"{"at":2,"type":"assistant","text":"two"}"#;

    #[test]
    fn a_garbled_record_in_the_middle_ends_the_read_leaving_no_hole() {
        let bytes = format!("{ONE}\n{{garbled\n{TWO}\n");
        let (records, end) = good_records(bytes.as_bytes());
        assert_eq!(
            records.len(),
            1,
            "the record after the garbled one was kept"
        );
        assert_eq!(end, ONE.len() + 1);
        // What follows is the cut tail, kept aside, not read past.
        assert!(bytes[end..].starts_with("{garbled\n"));
    }

    #[test]
    fn a_garbled_last_record_ends_the_read_after_the_good_ones() {
        let bytes = format!("{ONE}\n{TWO}\n{{garbled\n");
        let (records, end) = good_records(bytes.as_bytes());
        assert_eq!(records.len(), 2);
        assert_eq!(end, ONE.len() + TWO.len() + 2);
        assert!(matches!(&records[1].1, Item::Assistant { text } if text == "two"));
    }
}
