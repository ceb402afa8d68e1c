//! The outbox: which conversations differ from what was last pushed (the
//! start-up scan, the per-conversation push state) and what to push of each.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::remote::project::project_key;
use crate::remote::{Remote, line};
use crate::store::conversation::{Checkpoint, ConversationDoc};

/// What was last pushed of one conversation (or pulled: what is known to
/// be on the server).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::remote) struct Pushed {
    /// blake3 of the document pushed.
    pub hash: String,
    pub items: u64,
    pub bytes: u64,
    pub rollbacks: u64,
    /// The chain of the first `items` records as the server holds them
    /// ("" when unknown: written before lines were hashed).
    #[serde(default)]
    pub head: String,
}

/// One conversation's push, read from its files.
pub(super) struct Push {
    pub(super) id: String,
    pub(super) hash: String,
    pub(super) doc: ConversationDoc,
    pub(super) project: String,
    /// Start over: the journal was rewritten (rollback) since the last push.
    pub(super) reset: bool,
    /// What the server held as last pushed or pulled (`None`: never).
    pub(super) known: Option<Pushed>,
    /// The first record pushed.
    pub(super) start: u64,
    /// Where the line pushed ends: after the last finished turn (records
    /// of a turn still running, failed or interrupted stay here until a
    /// later turn finishes).
    pub(super) end: Position,
    /// From the first unpushed record to `end`.
    pub(super) records: Vec<Record>,
    /// The chain of the line pushed (of all `end.items` records).
    pub(super) head: String,
}

/// A journal position: records and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    pub(super) items: u64,
    pub(super) bytes: u64,
}

/// One record pushed.
pub(super) struct Record {
    pub(super) seq: i64,
    /// Milliseconds.
    pub(super) at: i64,
    /// The item without `at`, as JSON.
    pub(super) item: String,
    /// The chain of the line up to and including it.
    pub(super) chain: String,
}

impl Push {
    /// The chain after record `items` of the line pushed, when this push
    /// holds it.
    pub(super) fn chain_at(&self, items: u64) -> Option<&str> {
        if items == self.start {
            return Some(self.base());
        }
        let at = items.checked_sub(self.start)?.checked_sub(1)?;
        self.records
            .get(usize::try_from(at).ok()?)
            .map(|r| r.chain.as_str())
    }

    /// The chain the records pushed continue.
    fn base(&self) -> &str {
        match &self.known {
            Some(k) if !self.reset => &k.head,
            _ => "",
        }
    }

    /// The checkpoints of the line pushed.
    pub(super) fn checkpoints(&self) -> impl Iterator<Item = &Checkpoint> {
        self.doc
            .checkpoints
            .iter()
            .filter(|cp| cp.journal_items <= self.end.items)
    }
}

/// Where the finished part of `doc`'s line ends: all of it, unless a turn
/// is running or was left unfinished; then its last checkpoint.
fn finished_end(doc: &ConversationDoc) -> Position {
    let all = Position {
        items: doc.journal_items,
        bytes: doc.journal_bytes,
    };
    let unfinished = doc.turn_open
        || !doc.pending_calls.is_empty()
        || !doc.unsent.is_empty()
        || doc.interrupted.is_some()
        || doc.failed.is_some()
        || doc.cut_short.is_some();
    if !unfinished {
        return all;
    }
    doc.checkpoints
        .iter()
        .rfind(|cp| cp.journal_items <= doc.journal_items)
        .map_or(Position { items: 0, bytes: 0 }, |cp| Position {
            items: cp.journal_items,
            bytes: cp.journal_bytes,
        })
}

/// The document changed under us (a rollback while reading): try again on
/// the next notification or pass.
pub(super) struct RetryLater;

pub(in crate::remote) fn current_hash(doc: &Path) -> Option<String> {
    std::fs::read(doc)
        .ok()
        .map(|b| blake3::hash(&b).to_hex().to_string())
}

pub(in crate::remote) fn load_pushed(dir: &Path, id: &str) -> Option<Pushed> {
    let bytes = std::fs::read(dir.join(format!("{id}.json"))).ok()?;
    serde_json::from_slice(&bytes).ok()
}

pub(in crate::remote) fn save_pushed(path: &Path, state: &Pushed) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        agentx_shared::profile::create_private_dir(dir)?;
    }
    let bytes = serde_json::to_vec(state).map_err(std::io::Error::other)?;
    crate::durable::write_atomic(path, &bytes)
}

/// What to push of the conversation whose document is `doc_path`: `None`
/// when nothing changed or it is gone (cleared; the remote copy stays).
pub(super) fn read_push(remote: &Remote, doc_path: &Path) -> Result<Option<Push>, RetryLater> {
    let Ok(bytes) = std::fs::read(doc_path) else {
        return Ok(None);
    };
    let hash = blake3::hash(&bytes).to_hex().to_string();
    let Ok(doc) = serde_json::from_slice::<ConversationDoc>(&bytes) else {
        tracing::warn!(
            "remote: {} is not a conversation document; not pushed",
            doc_path.display()
        );
        return Ok(None);
    };
    if doc.base.is_some() {
        return Ok(None); // a one-shot's state: one-shots stay local
    }
    let known = load_pushed(&remote.pushed_dir, &doc.id);
    let end = finished_end(&doc);
    if known.is_none() && end.items == 0 {
        return Ok(None); // nothing finished yet: listed elsewhere once it has
    }
    let prev = known.clone().unwrap_or_default();
    if prev.hash == hash {
        return Ok(None);
    }
    // The journal was rewritten (rollback, pull) since the last push, or
    // the push state predates hashed lines: the whole line goes again.
    let reset = prev.rollbacks != doc.rollbacks
        || prev.items > end.items
        || prev.bytes > end.bytes
        || (prev.items > 0 && prev.head.is_empty());
    let (from_items, from_bytes) = if reset {
        (0, 0)
    } else {
        (prev.items, prev.bytes)
    };
    let journal = doc_path.with_extension("jsonl");
    let base = if reset { "" } else { prev.head.as_str() };
    let records = match read_records(&journal, from_items, from_bytes, end.bytes, base) {
        Ok(records) => records,
        Err(e) => {
            tracing::warn!("remote: cannot read {}: {e}", journal.display());
            return Err(RetryLater);
        }
    };
    // A rollback between reading the document and the journal may have
    // rewritten what we read: check the document still says the same.
    match std::fs::read(doc_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<ConversationDoc>(&b).ok())
    {
        Some(now) if now.rollbacks == doc.rollbacks && now.journal_bytes >= end.bytes => {}
        _ => return Err(RetryLater),
    }
    if records.len() as u64 != end.items - from_items {
        // The document and its journal disagree: pushing part of a line
        // would put the server's copy out of step with every count here.
        tracing::warn!(
            "remote: {} holds {} records past {from_items}, its document says {}; not pushed",
            journal.display(),
            records.len(),
            end.items - from_items
        );
        return Err(RetryLater);
    }
    let head = records
        .last()
        .map_or_else(|| base.to_owned(), |r| r.chain.clone());
    let project = project_key(Path::new(&doc.folder), &remote.machine);
    Ok(Some(Push {
        id: doc.id.clone(),
        hash,
        doc,
        project,
        reset,
        known,
        start: from_items,
        end,
        records,
        head,
    }))
}

/// Journal lines (`{"at":…, …the item's fields}`) from byte `from` to
/// `to`, numbered from `first_seq`, chained on from `base`.
fn read_records(
    path: &Path,
    first_seq: u64,
    from: u64,
    to: u64,
    base: &str,
) -> std::io::Result<Vec<Record>> {
    let lines =
        crate::store::journal::read::<serde_json::Map<String, serde_json::Value>>(path, from, to)
            .map_err(std::io::Error::other)?;
    let mut out = Vec::new();
    let first = i64::try_from(first_seq).unwrap_or(i64::MAX);
    let mut chain = base.to_owned();
    for (seq, line) in (first..).zip(lines) {
        let mut item = line.value;
        let at = item.remove("at").and_then(|v| v.as_i64()).unwrap_or(0);
        let item = serde_json::Value::Object(item);
        chain = line::next(&chain, at, &item);
        out.push(Record {
            seq,
            at,
            item: item.to_string(),
            chain: chain.clone(),
        });
    }
    Ok(out)
}

/// Every conversation document under the sessions directory whose content
/// differs from what was last pushed (`<folder-key>/<agent>/<id>.json`).
pub(super) fn scan(remote: &Remote) -> Vec<PathBuf> {
    crate::store::tree::docs(&remote.sessions_dir)
        .into_iter()
        .filter(|path| {
            let pushed = crate::store::tree::doc_id(path)
                .and_then(|id| load_pushed(&remote.pushed_dir, id))
                .map(|p| p.hash);
            current_hash(path) != pushed
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_records_are_read_from_a_position_and_numbered() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("j.jsonl");
        let a = r#"{"at":5,"type":"user","text":"hi"}"#;
        let b = r#"{"at":6,"type":"assistant","text":"yo"}"#;
        std::fs::write(&path, format!("{a}\n{b}\n")).unwrap();
        let all = read_records(&path, 0, 0, (a.len() + b.len() + 2) as u64, "").unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!((all[1].seq, all[1].at), (1, 6));
        let tail = read_records(
            &path,
            1,
            (a.len() + 1) as u64,
            (a.len() + b.len() + 2) as u64,
            &all[0].chain,
        )
        .unwrap();
        assert_eq!(tail.len(), 1);
        assert_eq!(tail[0].seq, 1);
        assert_eq!(tail[0].item, r#"{"text":"yo","type":"assistant"}"#);
        // Chained on from the first record, the tail ends where the whole does.
        assert_eq!(tail[0].chain, all[1].chain);
        // Bytes past the committed end are not read.
        assert_eq!(
            read_records(&path, 0, 0, (a.len() + 1) as u64, "")
                .unwrap()
                .len(),
            1
        );
    }
}
