//! New conversations made from others: forks (from a checkpoint of one in
//! the same group), exports and imports; the group actor adopts them.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use agentx_shared::conversation::Item;
use agentx_shared::export::{self, Document};

use super::conversation::{Checkpoint, ConversationDoc, ConversationPaths, read_journal};
use super::{GroupHandle, StoreError, group};
use crate::durable;

/// Where a fork came from: the parent's id and its turn count at the fork.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    pub id: String,
    pub turn: u32,
}

/// Runs file-system or CPU-heavy work (parsing a 100 MB export, copying a
/// journal) off the runtime's worker threads, at background priority so
/// every other client's requests go first.
async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    crate::priority::in_background("agentd-import", work).await?
}

/// Copies the first `bytes` of journal `from` to `to` (durably); `what`
/// names what says how long it is, for the error when it is shorter.
fn copy_prefix(
    from: PathBuf,
    to: PathBuf,
    bytes: u64,
    what: &'static str,
) -> Result<(), StoreError> {
    let mut prefix = Vec::new();
    if bytes > 0 {
        std::fs::File::open(&from)?
            .take(bytes)
            .read_to_end(&mut prefix)?;
    }
    if prefix.len() as u64 != bytes {
        return Err(StoreError::Damaged {
            message: format!("{} is shorter than {what}", from.display()),
            path: from,
        });
    }
    durable::write_atomic(&to, &prefix)?;
    Ok(())
}

/// A fresh id that names no file in `dir`.
fn free_id(dir: &Path) -> String {
    loop {
        let id = group::new_id();
        let paths = ConversationPaths::new(dir, &id);
        if !paths.doc.exists() && !paths.journal.exists() {
            return id;
        }
    }
}

/// Forks `session` (None: the current one) at checkpoint `n` (1 = newest).
pub async fn fork(
    group: &GroupHandle,
    dir: &Path,
    session: Option<String>,
    n: u32,
) -> Result<ConversationDoc, StoreError> {
    let parent = group
        .get(session)
        .await?
        .ok_or_else(|| StoreError::NotFound("this folder has no conversation to fork".into()))?;
    if parent.base.is_some() {
        return Err(StoreError::Invalid(
            "a one-shot's state cannot be forked".into(),
        ));
    }
    let count = parent.checkpoints.len();
    let n = n.max(1) as usize;
    if count == 0 {
        return Err(StoreError::NotFound(
            "this conversation has no checkpoint to fork from yet: finish a turn first".into(),
        ));
    }
    if n > count {
        return Err(StoreError::NotFound(format!(
            "no checkpoint {n}: this conversation has {count} (1 is the newest)"
        )));
    }
    let keep = count - n + 1;
    let cp = parent.checkpoints[keep - 1].clone();
    let id = free_id(dir);
    let from = ConversationPaths::new(dir, &parent.id).journal;
    let to = ConversationPaths::new(dir, &id);
    let (journal, bytes) = (to.journal.clone(), cp.journal_bytes);
    off_runtime(move || copy_prefix(from, journal, bytes, "its checkpoint")).await?;
    // A rollback while we copied may have rewritten the journal: start over.
    let again = group.get(Some(parent.id.clone())).await?;
    if again.is_none_or(|d| d.rollbacks != parent.rollbacks) {
        let _ = std::fs::remove_file(&to.journal);
        return Err(StoreError::Invalid(
            "the conversation was rolled back while forking; try again".into(),
        ));
    }
    let doc = super::carry::forked(&parent, &cp, keep, id, agentx_shared::time::now_ms());
    adopt(group, dir, doc).await
}

async fn adopt(
    group: &GroupHandle,
    dir: &Path,
    doc: ConversationDoc,
) -> Result<ConversationDoc, StoreError> {
    let id = doc.id.clone();
    if let Err(e) = group.adopt(doc.clone()).await {
        let _ = std::fs::remove_file(ConversationPaths::new(dir, &id).journal);
        return Err(e);
    }
    Ok(doc)
}

/// The export document of `session` (None: the current one).
pub async fn export(
    group: &GroupHandle,
    dir: &Path,
    session: Option<String>,
) -> Result<String, StoreError> {
    let doc = group
        .get(session)
        .await?
        .ok_or_else(|| StoreError::NotFound("this folder has no conversation to export".into()))?;
    let items = group.transcript(&doc.id).await?;
    let journal = ConversationPaths::new(dir, &doc.id).journal;
    off_runtime(move || export_document(&doc, items, &journal)).await
}

/// The export document of `doc` whose transcript is `items` (its journal,
/// at `journal`, gives each item's time).
fn export_document(
    doc: &ConversationDoc,
    items: Vec<Item>,
    journal: &Path,
) -> Result<String, StoreError> {
    // Times per item come from the journal lines (the parent's, for a base).
    let times = journal_times(journal, doc.journal_bytes);
    let skip = items.len().saturating_sub(times.len());
    let transcript = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| export::Entry {
            at: export::time_of(
                i.checked_sub(skip)
                    .and_then(|j| times.get(j).copied())
                    .unwrap_or(doc.created_at),
            ),
            item,
        })
        .collect();
    let document = Document {
        format: export::FORMAT_NAME.into(),
        version: export::VERSION,
        exported_at: export::time_of(agentx_shared::time::now_ms()),
        exported_by: agentx_shared::version::VERSION.to_owned(),
        conversation: export::Conversation {
            id: doc.id.clone(),
            title: doc.title.clone(),
            folder: doc.folder.clone(),
            agent: doc.agent.clone(),
            created_at: export::time_of(doc.created_at),
            updated_at: export::time_of(doc.updated_at),
            response_id: doc.response_id.clone(),
            usage: doc.usage,
            turns: doc.turns,
            forked_from: doc.forked_from.as_ref().map(|f| export::ForkRef {
                id: f.id.clone(),
                turn: f.turn,
            }),
            checkpoints: doc
                .checkpoints
                .iter()
                .map(|cp| export::Checkpoint {
                    response_id: cp.response_id.clone(),
                    usage: cp.usage,
                    last_user_message: cp.last_user.clone(),
                    last_assistant_message: cp.last_assistant.clone(),
                    turns: cp.turns,
                    transcript_items: cp.journal_items,
                    created_at: export::time_of(cp.created_at),
                })
                .collect(),
            transcript,
        },
    };
    serde_json::to_string_pretty(&document).map_err(StoreError::encode)
}

/// The `at` of each committed journal line, up to a damaged one (the
/// items after it are given the conversation's start time).
fn journal_times(path: &Path, committed: u64) -> Vec<i64> {
    #[derive(Deserialize)]
    struct At {
        at: i64,
    }
    let (records, bad) = super::journal::read_until_bad::<At>(path, 0, committed);
    if let Some(e) = bad {
        tracing::warn!("export: item times stop at {e}");
    }
    records.into_iter().map(|r| r.value.at).collect()
}

/// Imports an export document into the group; returns the new conversation
/// and, when its id was taken, the id in the file.
pub async fn import(
    group: &GroupHandle,
    dir: &Path,
    folder: &str,
    agent: &str,
    text: String,
) -> Result<(ConversationDoc, Option<String>), StoreError> {
    let at = dir.to_path_buf();
    let c = off_runtime(move || {
        let document = Document::parse(&text).map_err(|e| StoreError::Invalid(e.to_string()))?;
        drop(text);
        agentx_shared::profile::create_private_dir(&at)?;
        Ok(document.conversation)
    })
    .await?;
    let (id, renamed_from) = import_id(group, dir, &c.id).await?;
    let (at, folder, agent) = (dir.to_path_buf(), folder.to_owned(), agent.to_owned());
    let doc = off_runtime(move || {
        let (journal, offsets) = journal_of(&c.transcript)?;
        let doc = imported_doc(&c, id, &folder, &agent, journal.len() as u64, &offsets);
        drop(c);
        write_imported_journal(&at, &doc, &journal, &offsets)?;
        Ok(doc)
    })
    .await?;
    let doc = adopt(group, dir, doc).await?;
    Ok((doc, renamed_from))
}

/// The id an imported conversation gets: the file's own unless it is not
/// shaped as agentd's ids ([`super::is_conversation_id`]) or is taken (then a fresh one, and the file's id as second).
async fn import_id(
    group: &GroupHandle,
    dir: &Path,
    wanted: &str,
) -> Result<(String, Option<String>), StoreError> {
    let taken =
        !super::is_conversation_id(wanted) || group.get(Some(wanted.to_owned())).await.is_ok();
    let (dir, wanted) = (dir.to_path_buf(), wanted.to_owned());
    off_runtime(move || {
        let taken = taken
            || ConversationPaths::new(&dir, &wanted).doc.exists()
            || ConversationPaths::new(&dir, &wanted).journal.exists()
            || super::elsewhere::kept_beside(&dir, &wanted);
        Ok(if taken {
            (free_id(&dir), Some(wanted))
        } else {
            (wanted, None)
        })
    })
    .await
}

/// The journal of an exported transcript, in the store's line format, and
/// the byte offset after each item (the first is 0).
pub(crate) fn journal_of(transcript: &[export::Entry]) -> Result<(Vec<u8>, Vec<u64>), StoreError> {
    let mut journal = Vec::new();
    let mut offsets = vec![0u64];
    for entry in transcript {
        let mut line = serde_json::to_value(&entry.item).map_err(StoreError::encode)?;
        if let Some(obj) = line.as_object_mut() {
            obj.insert("at".into(), export::ms_of(&entry.at).unwrap_or(0).into());
        }
        serde_json::to_writer(&mut journal, &line).map_err(StoreError::encode)?;
        journal.push(b'\n');
        offsets.push(journal.len() as u64);
    }
    Ok((journal, offsets))
}

/// The state document of imported conversation `c` under `id`, whose
/// journal is `journal_bytes` long with item offsets `offsets`.
pub(crate) fn imported_doc(
    c: &export::Conversation,
    id: String,
    folder: &str,
    agent: &str,
    journal_bytes: u64,
    offsets: &[u64],
) -> ConversationDoc {
    let offset = |items: u64| offsets.get(items as usize).copied().unwrap_or(0);
    let ms = |t: &str| export::ms_of(t).unwrap_or(0);
    let mut doc = ConversationDoc::new(id, folder.to_owned(), agent.to_owned(), ms(&c.created_at));
    doc.updated_at = agentx_shared::time::now_ms();
    doc.title = imported_title(c);
    // The server-side chain may not exist for this profile: the first turn
    // resends the local transcript.
    doc.response_id = None;
    doc.usage = c.usage;
    doc.turns = c.turns;
    doc.journal_items = c.transcript.len() as u64;
    doc.journal_bytes = journal_bytes;
    doc.forked_from = c.forked_from.as_ref().map(|f| ForkOrigin {
        id: f.id.clone(),
        turn: f.turn,
    });
    let last = |want_user: bool| {
        c.transcript
            .iter()
            .rev()
            .find_map(|e| match (&e.item, want_user) {
                (Item::User { text }, true) | (Item::Assistant { text }, false) => {
                    Some(text.clone())
                }
                _ => None,
            })
    };
    doc.last_user = last(true).unwrap_or_default();
    doc.last_assistant = last(false).unwrap_or_default();
    doc.checkpoints = c
        .checkpoints
        .iter()
        .map(|cp| Checkpoint {
            response_id: None,
            usage: cp.usage,
            last_user: cp.last_user_message.clone(),
            last_assistant: cp.last_assistant_message.clone(),
            turns: cp.turns,
            journal_items: cp.transcript_items,
            journal_bytes: offset(cp.transcript_items),
            created_at: ms(&cp.created_at),
            context: None,
            note: None,
        })
        .collect();
    doc
}

/// Longest title kept, in characters (as rename).
pub const MAX_TITLE: usize = 200;

/// An imported title under rename's rules: one line of single spaces, at
/// most [`MAX_TITLE`] characters (cut with `…`), never empty (then the
/// first user message's first line, or "imported conversation").
fn imported_title(c: &export::Conversation) -> String {
    let one_line = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut title = one_line(&c.title);
    if title.is_empty() {
        title = c
            .transcript
            .iter()
            .find_map(|e| match &e.item {
                Item::User { text } => text.lines().map(one_line).find(|l| !l.is_empty()),
                _ => None,
            })
            .unwrap_or_else(|| "imported conversation".to_owned());
    }
    if title.chars().count() > MAX_TITLE {
        title = title.chars().take(MAX_TITLE - 1).collect::<String>() + "…";
    }
    title
}

/// Writes the imported `journal` for `doc` and checks it reads back as the
/// `items` transcript items it came from (else removes it).
fn write_imported_journal(
    dir: &Path,
    doc: &ConversationDoc,
    journal: &[u8],
    offsets: &[u64],
) -> Result<(), StoreError> {
    let to = ConversationPaths::new(dir, &doc.id);
    durable::write_atomic(&to.journal, journal)?;
    let back = read_journal(&to.journal, doc.journal_bytes).map_err(StoreError::unreadable)?;
    if back.len() + 1 != offsets.len() {
        let _ = std::fs::remove_file(&to.journal);
        return Err(StoreError::Damaged {
            message: "the imported transcript did not read back".into(),
            path: to.journal,
        });
    }
    Ok(())
}

/// Keeps the whole local line of `parent` as a new conversation forked at
/// `turn` and titled `title` (its own turns went elsewhere on another
/// machine meanwhile). Asked under the parent's lease, so its journal
/// stands still. A fork already made of exactly this line (a crash before
/// the parent was replaced) is returned instead of a second one.
pub async fn keep_as_fork(
    group: &GroupHandle,
    dir: &Path,
    parent: &ConversationDoc,
    turn: u32,
    title: String,
) -> Result<ConversationDoc, StoreError> {
    let made = group.list().await?.into_iter().find(|d| {
        d.forked_from.as_ref().is_some_and(|f| f.id == parent.id)
            && d.title == title
            && d.journal_items == parent.journal_items
            && d.journal_bytes == parent.journal_bytes
    });
    if let Some(doc) = made {
        return Ok(doc);
    }
    let id = free_id(dir);
    let from = ConversationPaths::new(dir, &parent.id).journal;
    let to = ConversationPaths::new(dir, &id).journal;
    let bytes = parent.journal_bytes;
    off_runtime(move || copy_prefix(from, to, bytes, "its document says")).await?;
    let doc = super::carry::kept_line(parent, id, title, turn, agentx_shared::time::now_ms());
    adopt(group, dir, doc).await
}
