//! Indexing one conversation: a commit costs what it added, not the
//! conversation's length.
//!
//! A conversation is indexed as one `meta` document (title, stamp) and one
//! document per turn. The indexer remembers, in memory only, what it last
//! indexed of each conversation: the stamp's parts, where in the journal the
//! last indexed turn starts and that turn's number. A commit that only
//! appended to the journal (same rollback count, same title, the journal
//! not shorter) then re-reads the journal from that turn's start, replaces
//! that turn's document (it may have grown: a continued turn appends
//! without a new user message) and the meta document, and adds the turns
//! that follow. Anything else, or no memory of the conversation (after a
//! restart, a rebuild or a failed commit), re-indexes the conversation
//! whole. Either way the index holds the same documents.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use tantivy::{IndexWriter, TantivyDocument, Term};

use agentx_shared::conversation::Item;

use super::{DocHead, Fields, SearchIndex};

/// What was last indexed of one conversation.
#[derive(Debug, Clone)]
pub(super) struct Indexed {
    id: String,
    folder: String,
    agent: String,
    title: String,
    journal_bytes: u64,
    rollbacks: u64,
    /// Where the last indexed turn starts in the journal (0 when none).
    last_start: u64,
    /// The last indexed turn's number (0: none).
    last_turn: u64,
    /// Whether the meta document holds the title (see [`own_title`]).
    own_title: bool,
}

impl Indexed {
    /// Whether `head` only went on from what was indexed: its journal kept
    /// every byte indexed (no rollback since, not shorter) and every turn
    /// document's label (the title) still holds.
    fn continued_by(&self, head: &DocHead) -> bool {
        self.id == head.id
            && self.folder == head.folder
            && self.agent == head.agent
            && self.title == head.title
            && self.rollbacks == head.rollbacks
            && self.journal_bytes <= head.journal_bytes
    }
}

/// What the indexer remembers per conversation, by index key.
pub(super) type Memory = HashMap<String, Indexed>;

/// One turn of a transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Turn {
    /// Where its first line starts in the journal.
    pub start: u64,
    /// The time of its first line (the user message).
    pub at: i64,
    /// The text to index.
    pub text: String,
}

#[derive(Deserialize)]
struct Line {
    #[serde(default)]
    at: i64,
    #[serde(flatten)]
    item: Item,
}

/// What a tool call shows in search: a shell call as `$ command`, any
/// other as its arguments (JSON).
fn call_text(arguments: String) -> String {
    #[derive(Deserialize)]
    struct Shell {
        command: String,
    }
    match serde_json::from_str::<Shell>(&arguments) {
        Ok(shell) => format!("$ {}", shell.command),
        Err(_) => arguments,
    }
}

/// The turns of the journal's bytes `from..committed`; `from` must be where
/// a line starts. A turn starts at a user message, or at the first indexed
/// line when none came before; reading stops at a damaged line (as every
/// journal reader does, see `store::journal`).
pub(super) fn turns(journal: &Path, from: u64, committed: u64) -> Vec<Turn> {
    let (lines, bad) = crate::store::journal::read_until_bad::<Line>(journal, from, committed);
    if let Some(e) = bad {
        tracing::warn!("search: indexing stops at {e}");
    }
    let mut out: Vec<Turn> = Vec::new();
    for record in lines {
        let (start, line) = (record.start, record.value);
        let text = match line.item {
            Item::User { text } => {
                out.push(Turn {
                    start,
                    at: line.at,
                    text: String::new(),
                });
                text
            }
            Item::Assistant { text } => text,
            Item::FunctionCall { arguments, .. } => call_text(arguments),
            Item::FunctionOutput { output, .. } => output,
            // Its summary repeats what the transcript already holds.
            Item::Compaction { .. } => continue,
        };
        if out.is_empty() {
            out.push(Turn {
                start,
                at: line.at,
                text: String::new(),
            });
        }
        if let Some(last) = out.last_mut() {
            if !last.text.is_empty() {
                last.text.push('\n');
            }
            last.text.push_str(&text);
        }
    }
    out
}

/// Whether `title` is worth a hit of its own: the default title is the
/// first message's first line, which turn 1 (`first`) already holds.
fn own_title(title: &str, first: Option<&Turn>) -> bool {
    !first.is_some_and(|t| t.text.trim_start().starts_with(title.trim_end_matches('…')))
}

/// The term naming turn `n` of the conversation `key` (0: its meta document).
pub(super) fn turn_key(f: Fields, key: &str, n: u64) -> Term {
    Term::from_field_text(f.turnkey, &format!("{key}#{n}"))
}

impl SearchIndex {
    /// Brings the index in line with the conversation whose document is
    /// `path`: only what its last commit added when the indexer remembers
    /// how far it was indexed, else all of it (nothing when it is gone).
    /// Returns how many documents it added.
    pub(super) fn index_conversation(
        &self,
        writer: &IndexWriter<TantivyDocument>,
        path: &Path,
    ) -> usize {
        let mut memory = self.memory();
        let f = self.f;
        let key = path.to_string_lossy().into_owned();
        let before = memory.remove(&key);
        let Some(head) = DocHead::read(path) else {
            // Cleared: nothing to index.
            writer.delete_term(Term::from_field_text(f.key, &key));
            return 0;
        };
        if head.base.is_some() {
            writer.delete_term(Term::from_field_text(f.key, &key));
            return 0;
        }
        let journal = path.with_extension("jsonl");
        let reread = before
            .as_ref()
            .filter(|b| b.continued_by(&head))
            .and_then(|b| {
                let again = turns(&journal, b.last_start, head.journal_bytes);
                // What was indexed must read back the same: its last turn
                // starts where it did (else the journal is not what it was).
                let first = again.first()?;
                (b.last_turn == 0 || first.start == b.last_start).then_some((b, again))
            });
        let (first_turn, turns, own) = match reread {
            Some((before, again)) => {
                writer.delete_term(turn_key(f, &key, 0));
                if before.last_turn > 0 {
                    writer.delete_term(turn_key(f, &key, before.last_turn));
                }
                let first_turn = before.last_turn.max(1);
                let own = if first_turn == 1 {
                    own_title(&head.title, again.first())
                } else {
                    before.own_title
                };
                (first_turn, again, own)
            }
            None => {
                writer.delete_term(Term::from_field_text(f.key, &key));
                let all = turns(&journal, 0, head.journal_bytes);
                let own = own_title(&head.title, all.first());
                (1, all, own)
            }
        };
        let common = |kind: &str, n: u64| {
            let mut d = TantivyDocument::default();
            d.add_text(f.key, &key);
            d.add_text(f.turnkey, format!("{key}#{n}"));
            d.add_text(f.sid, &head.id);
            d.add_text(f.folder, &head.folder);
            d.add_text(f.agent, &head.agent);
            d.add_text(f.kind, kind);
            d
        };
        let mut meta = common("meta", 0);
        meta.add_u64(f.turn, 0);
        meta.add_i64(f.at, head.updated_at);
        if own {
            meta.add_text(f.title, &head.title);
        }
        meta.add_text(f.stamp, head.stamp());
        let mut docs = vec![meta];
        let mut last = (0, 0);
        for (n, turn) in (first_turn..).zip(&turns) {
            let mut d = common("turn", n);
            d.add_u64(f.turn, n);
            d.add_i64(f.at, turn.at);
            d.add_text(f.label, &head.title);
            d.add_text(f.body, &turn.text);
            docs.push(d);
            last = (turn.start, n);
        }
        let added = docs.len();
        for d in docs {
            if let Err(e) = writer.add_document(d) {
                tracing::warn!("cannot index {key}: {e}");
                // Whatever happens next, the next commit indexes it whole.
                return 0;
            }
        }
        memory.insert(
            key,
            Indexed {
                id: head.id.clone(),
                folder: head.folder.clone(),
                agent: head.agent.clone(),
                title: head.title.clone(),
                journal_bytes: head.journal_bytes,
                rollbacks: head.rollbacks,
                last_start: last.0,
                last_turn: last.1,
                own_title: own,
            },
        );
        added
    }
}

#[cfg(test)]
mod call_text_tests {
    #[test]
    fn a_shell_call_is_indexed_as_its_command_not_its_json() {
        assert_eq!(
            super::call_text(r#"{"command":"cargo test -p x"}"#.into()),
            "$ cargo test -p x"
        );
        assert_eq!(
            super::call_text(r#"{"path":"a"}"#.into()),
            r#"{"path":"a"}"#
        );
    }
}
