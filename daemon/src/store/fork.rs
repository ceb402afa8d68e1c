//! New conversations made from others: forks (from a checkpoint of one in
//! the same group), exports and imports; the group actor adopts them.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use agentx_shared::conversation::Item;
use agentx_shared::export::{self, Document};

use super::conversation::{Checkpoint, ConversationDoc, ConversationPaths};
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
/// and, when its id was taken, the id in the file. The transcript goes to
/// disk as it is parsed (a temp file, renamed once the id is known): what
/// the import holds beyond the document's text is one item at a time.
pub async fn import(
    group: &GroupHandle,
    dir: &Path,
    folder: &str,
    agent: &str,
    text: String,
) -> Result<(ConversationDoc, Option<String>), StoreError> {
    let at = dir.to_path_buf();
    let (c, journal) = off_runtime(move || {
        agentx_shared::profile::create_private_dir(&at)?;
        let mut journal = ImportedJournal::new(durable::Staged::create(&at, "import.jsonl")?);
        // A write that fails (a full disk) is agentd's error, not the file's.
        let mut unwritten = None;
        let parsed = Document::parse_each(&text, |entry| {
            journal.push(entry).map_err(|e| {
                let said = e.to_string();
                unwritten = Some(e);
                said
            })
        });
        if let Some(e) = unwritten {
            return Err(StoreError::from(e));
        }
        let document = parsed.map_err(|e| StoreError::Invalid(e.to_string()))?;
        Ok((document.conversation, journal))
    })
    .await?;
    let (id, renamed_from) = import_id(group, dir, &c.id).await?;
    let (at, folder, agent) = (dir.to_path_buf(), folder.to_owned(), agent.to_owned());
    let doc = off_runtime(move || {
        let doc = imported_doc(&c, &journal, id, &folder, &agent);
        let to = ConversationPaths::new(&at, &doc.id).journal;
        journal.out.commit(&to)?;
        // It must read back as the items it came from.
        let back = super::journal::count::<serde::de::IgnoredAny>(&to, doc.journal_bytes);
        if back.ok() != Some(doc.journal_items) {
            let _ = std::fs::remove_file(&to);
            return Err(StoreError::Damaged {
                message: "the imported transcript did not read back".into(),
                path: to,
            });
        }
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

/// An imported transcript on its way to a journal: each entry becomes a
/// line in the store's format as it is parsed, and what the state document
/// names of the transcript is kept on the way (not the transcript).
pub(crate) struct ImportedJournal<W> {
    pub out: W,
    /// The byte offset after each item (the first is 0).
    offsets: Vec<u64>,
    /// The first line of the first user message (a title when the file
    /// has none), and the last user and assistant texts.
    first_user_line: Option<String>,
    last_user: Option<String>,
    last_assistant: Option<String>,
}

impl<W: std::io::Write> ImportedJournal<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            offsets: vec![0],
            first_user_line: None,
            last_user: None,
            last_assistant: None,
        }
    }

    /// Writes `entry` as the next journal line.
    pub fn push(&mut self, entry: export::Entry) -> std::io::Result<()> {
        let mut line = serde_json::to_value(&entry.item).map_err(std::io::Error::other)?;
        if let Some(obj) = line.as_object_mut() {
            obj.insert("at".into(), export::ms_of(&entry.at).unwrap_or(0).into());
        }
        let mut bytes = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        self.out.write_all(&bytes)?;
        self.offsets.push(self.bytes() + bytes.len() as u64);
        match entry.item {
            Item::User { text } => {
                if self.first_user_line.is_none() {
                    self.first_user_line = text.lines().map(one_line).find(|l| !l.is_empty());
                }
                self.last_user = Some(text);
            }
            Item::Assistant { text } => self.last_assistant = Some(text),
            _ => {}
        }
        Ok(())
    }
}

impl<W> ImportedJournal<W> {
    /// The journal's length so far.
    pub fn bytes(&self) -> u64 {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// Its items so far.
    pub fn items(&self) -> u64 {
        (self.offsets.len() as u64).saturating_sub(1)
    }
}

/// Text on one line of single spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The state document of imported conversation `c` under `id`, whose
/// transcript went to `journal`.
pub(crate) fn imported_doc<W>(
    c: &export::Conversation,
    journal: &ImportedJournal<W>,
    id: String,
    folder: &str,
    agent: &str,
) -> ConversationDoc {
    let offset = |items: u64| journal.offsets.get(items as usize).copied().unwrap_or(0);
    let ms = |t: &str| export::ms_of(t).unwrap_or(0);
    let mut doc = ConversationDoc::new(id, folder.to_owned(), agent.to_owned(), ms(&c.created_at));
    doc.updated_at = agentx_shared::time::now_ms();
    doc.title = imported_title(&c.title, journal.first_user_line.as_deref());
    // The server-side chain may not exist for this profile: the first turn
    // resends the local transcript.
    doc.response_id = None;
    doc.usage = c.usage;
    doc.turns = c.turns;
    doc.journal_items = journal.items();
    doc.journal_bytes = journal.bytes();
    doc.forked_from = c.forked_from.as_ref().map(|f| ForkOrigin {
        id: f.id.clone(),
        turn: f.turn,
    });
    doc.last_user = journal.last_user.clone().unwrap_or_default();
    doc.last_assistant = journal.last_assistant.clone().unwrap_or_default();
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
fn imported_title(title: &str, first_user_line: Option<&str>) -> String {
    let mut title = one_line(title);
    if title.is_empty() {
        title = first_user_line
            .unwrap_or("imported conversation")
            .to_owned();
    }
    if title.chars().count() > MAX_TITLE {
        title = title.chars().take(MAX_TITLE - 1).collect::<String>() + "…";
    }
    title
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Commits, DEFAULT_IDLE_GROUPS, Store};
    use agentx_shared::export::{Entry, FORMAT_NAME, VERSION};

    fn export_of(items: usize) -> serde_json::Value {
        let transcript: Vec<Entry> = (0..items)
            .map(|i| Entry {
                at: export::time_of(1000 + i as i64),
                item: if i % 2 == 0 {
                    Item::User {
                        text: format!("question {i}"),
                    }
                } else {
                    Item::Assistant {
                        text: format!("answer {i}"),
                    }
                },
            })
            .collect();
        serde_json::json!({
            "format": FORMAT_NAME,
            "version": VERSION,
            "exported_at": export::time_of(5000),
            "exported_by": "test",
            "conversation": {
                "id": "imported-one",
                "title": "",
                "folder": "/f",
                "agent": "default",
                "created_at": export::time_of(1000),
                "updated_at": export::time_of(4000),
                "turns": items.div_ceil(2),
                "transcript": transcript,
            }
        })
    }

    /// Names in `dir` other than conversations' own files.
    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The transcript streams to a temp file that becomes the journal;
    /// a document refused part way leaves neither behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_import_streams_its_journal_and_a_refused_one_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(
            root.path().join("sessions"),
            Commits::default(),
            DEFAULT_IDLE_GROUPS,
        );
        let folder = "/w/imports";
        let group = store.group(folder, "default").unwrap();
        let dir = store.group_dir(folder, "default");

        let (doc, _) = import(&group, &dir, folder, "default", export_of(5).to_string())
            .await
            .unwrap();
        assert_eq!(doc.journal_items, 5);
        assert_eq!(doc.title, "question 0");
        assert_eq!(
            (doc.last_user.as_str(), doc.last_assistant.as_str()),
            ("question 4", "answer 3")
        );
        let items = crate::store::conversation::read_journal(
            &ConversationPaths::new(&dir, &doc.id).journal,
            doc.journal_bytes,
        )
        .unwrap();
        assert_eq!(items.len(), 5);
        assert_eq!(
            items[3],
            Item::Assistant {
                text: "answer 3".into()
            }
        );
        assert_eq!(leftovers(&dir), Vec::<String>::new());

        // The fourth entry's time is not a time: refused after three
        // entries were already written.
        let mut bad = export_of(6);
        bad["conversation"]["id"] = "imported-two".into();
        bad["conversation"]["transcript"][3]["at"] = "soon".into();
        let refused = import(&group, &dir, folder, "default", bad.to_string()).await;
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "{refused:?}"
        );
        assert_eq!(leftovers(&dir), Vec::<String>::new());
        assert!(
            !ConversationPaths::new(&dir, "imported-two")
                .journal
                .exists()
        );
        assert_eq!(group.list().await.unwrap().len(), 1);
    }
}
