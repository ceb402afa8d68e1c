//! One conversation on disk: a small state document `<id>.json` (atomically
//! replaced) beside an append-only transcript journal `<id>.jsonl`.
//!
//! The document is the commit point: it records how many journal items and
//! bytes belong to the conversation, so bytes past that (a crash between the
//! append and the document write) are cut off on load.

use std::fs::File;
use std::io::{self, BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use agentx_shared::conversation::{CallState, Item, PendingCall, Usage};

use super::durable;

pub const FORMAT: u32 = 1;

/// The state document. Small and bounded: it never holds the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionDoc {
    pub format: u32,
    pub id: String,
    /// The real folder path; distinct folders can share a directory key.
    pub folder: String,
    pub agent: String,
    pub title: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub response_id: Option<String>,
    pub usage: Usage,
    pub last_user: String,
    pub last_assistant: String,
    /// `!command` transcripts run locally since the last message.
    pub pending_shell: String,
    pub pending_calls: Vec<PendingCall>,
    pub turns: u32,
    /// Tool calls approved for the rest of this conversation ("always").
    pub approve_all: bool,
    pub journal_items: u64,
    pub journal_bytes: u64,
    /// Items in the transcript no successful response has acknowledged yet:
    /// what a retry sends again.
    #[serde(default)]
    pub unsent: Vec<Item>,
    /// A turn is running; still set at load means agentd died during it.
    #[serde(default)]
    pub turn_open: bool,
    /// The last turn was cut short (Ctrl-C, a dead client or daemon).
    #[serde(default)]
    pub interrupted: Option<Marker>,
    /// The last turn failed after its retries.
    #[serde(default)]
    pub failed: Option<Marker>,
    /// The last answer was cut short by the model server (max_output_tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_short: Option<Marker>,
    /// Successful-response checkpoints, oldest first, at most [`MAX_CHECKPOINTS`].
    #[serde(default)]
    pub checkpoints: Vec<Checkpoint>,
    /// State before the last rollback, so it can be undone.
    #[serde(default)]
    pub rollback: Option<Box<RollbackBackup>>,
    /// A one-shot's branch point: the interactive transcript it continues.
    #[serde(default)]
    pub base: Option<BaseRef>,
    /// Rollbacks so far (each may cut and later rewrite the journal tail).
    #[serde(default)]
    pub rollbacks: u64,
    /// The conversation this one was forked from, and at which turn.
    #[serde(default)]
    pub forked_from: Option<super::fork::ForkOrigin>,
}

/// The committed prefix of another conversation's journal that this one
/// continues (read only when the whole context must be resent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseRef {
    pub journal: PathBuf,
    pub bytes: u64,
    pub items: u64,
    /// The base conversation's rollback count then: if it changed, the
    /// journal past an earlier checkpoint may have been rewritten.
    #[serde(default)]
    pub rollbacks: u64,
}

pub const MAX_CHECKPOINTS: usize = 20;

/// Why a turn did not complete, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub message: String,
    pub at: i64,
    #[serde(default)]
    pub retryable: bool,
}

/// The conversation as a successful turn left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub response_id: Option<String>,
    pub usage: Usage,
    pub last_user: String,
    pub last_assistant: String,
    pub turns: u32,
    pub journal_items: u64,
    pub journal_bytes: u64,
    pub created_at: i64,
}

/// What a rollback replaced. The journal tail it cut is kept in
/// `<id>.rollback.jsonl` until the backup is undone or replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RollbackBackup {
    pub response_id: Option<String>,
    pub usage: Usage,
    pub last_user: String,
    pub last_assistant: String,
    pub pending_calls: Vec<PendingCall>,
    pub turns: u32,
    pub journal_items: u64,
    pub journal_bytes: u64,
    pub unsent: Vec<Item>,
    pub interrupted: Option<Marker>,
    pub failed: Option<Marker>,
    pub checkpoints: Vec<Checkpoint>,
    /// The journal position the rollback went back to.
    pub rolled_back_to: u64,
    pub at: i64,
}

impl SessionDoc {
    pub fn new(id: String, folder: String, agent: String, now_ms: i64) -> Self {
        Self {
            format: FORMAT,
            id,
            folder,
            agent,
            title: String::new(),
            created_at: now_ms,
            updated_at: now_ms,
            response_id: None,
            usage: Usage::default(),
            last_user: String::new(),
            last_assistant: String::new(),
            pending_shell: String::new(),
            pending_calls: Vec::new(),
            turns: 0,
            approve_all: false,
            journal_items: 0,
            journal_bytes: 0,
            unsent: Vec::new(),
            turn_open: false,
            interrupted: None,
            failed: None,
            cut_short: None,
            checkpoints: Vec::new(),
            rollback: None,
            base: None,
            rollbacks: 0,
            forked_from: None,
        }
    }

    /// A checkpoint of the current state.
    pub fn checkpoint(&self, now_ms: i64) -> Checkpoint {
        Checkpoint {
            response_id: self.response_id.clone(),
            usage: self.usage,
            last_user: preview(&self.last_user),
            last_assistant: preview(&self.last_assistant),
            turns: self.turns,
            journal_items: self.journal_items,
            journal_bytes: self.journal_bytes,
            created_at: now_ms,
        }
    }
}

/// Messages kept in checkpoints are cut to this many characters.
const PREVIEW_CHARS: usize = 2000;

fn preview(text: &str) -> String {
    if text.chars().count() <= PREVIEW_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(PREVIEW_CHARS).collect();
    cut.push('…');
    cut
}

/// A journal line.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    at: i64,
    #[serde(flatten)]
    item: Item,
}

/// Paths of one conversation's files.
#[derive(Debug, Clone)]
pub struct SessionPaths {
    pub doc: PathBuf,
    pub journal: PathBuf,
    /// The journal tail cut by the last rollback.
    pub rollback_tail: PathBuf,
}

impl SessionPaths {
    pub fn new(dir: &Path, id: &str) -> Self {
        Self {
            doc: dir.join(format!("{id}.json")),
            journal: dir.join(format!("{id}.jsonl")),
            rollback_tail: dir.join(format!("{id}.rollback.jsonl")),
        }
    }
}

/// Conversations loaded in memory right now (see [`open_sessions`]).
static OPEN_SESSIONS: AtomicUsize = AtomicUsize::new(0);

/// How many conversations agentd holds loaded now. They hold no file open:
/// the journal is opened for each append and closed again, so idle
/// conversations cost memory only, and their group actors are released
/// when idle (see `Store::group`).
pub fn open_sessions() -> usize {
    OPEN_SESSIONS.load(Ordering::Relaxed)
}

/// Counts one loaded conversation for as long as it lives.
struct OpenGuard;

impl OpenGuard {
    fn new() -> Self {
        OPEN_SESSIONS.fetch_add(1, Ordering::Relaxed);
        Self
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        OPEN_SESSIONS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A loaded conversation. Its journal is opened only while appending.
pub struct Session {
    pub doc: SessionDoc,
    pub paths: SessionPaths,
    _open: OpenGuard,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

impl Session {
    /// Creates a new conversation and makes it durable.
    pub fn create(dir: &Path, doc: SessionDoc) -> io::Result<Self> {
        let paths = SessionPaths::new(dir, &doc.id);
        let mut session = Self {
            doc,
            paths,
            _open: OpenGuard::new(),
        };
        session.save()?;
        Ok(session)
    }

    /// Reads `<id>.json`; a document that does not parse is `Corrupt`.
    pub fn load(doc_path: &Path) -> Result<Self, LoadError> {
        let bytes = std::fs::read(doc_path)?;
        let (doc, paths) = parse_doc(&bytes, doc_path)?;
        let journal_len = match std::fs::metadata(&paths.journal) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e.into()),
        };
        if journal_len < doc.journal_bytes {
            return Err(LoadError::Corrupt {
                path: paths.journal.clone(),
                reason: format!(
                    "transcript has {journal_len} bytes, {} were committed",
                    doc.journal_bytes
                ),
            });
        }
        Ok(Self {
            doc,
            paths,
            _open: OpenGuard::new(),
        })
    }

    /// Writes the state document atomically.
    pub fn save(&mut self) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(&self.doc).map_err(io::Error::other)?;
        durable::write_atomic(&self.paths.doc, &bytes)
    }

    /// Appends items to the journal durably and advances the committed
    /// counters in memory; the caller saves the document afterwards.
    pub fn append(&mut self, items: &[Item], now_ms: i64) -> io::Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        for item in items {
            serde_json::to_writer(
                &mut buf,
                &Entry {
                    at: now_ms,
                    item: item.clone(),
                },
            )
            .map_err(io::Error::other)?;
            buf.push(b'\n');
        }
        let mut journal = self.open_journal()?;
        durable::append_durable(&mut journal, &buf)?;
        self.doc.journal_items += items.len() as u64;
        self.doc.journal_bytes += buf.len() as u64;
        Ok(())
    }

    /// Opens the journal for appending, with uncommitted bytes cut off. The
    /// caller closes it when done (idle conversations hold no file open).
    fn open_journal(&self) -> io::Result<File> {
        let file = durable::open_append(&self.paths.journal)?;
        if file.metadata()?.len() > self.doc.journal_bytes {
            file.set_len(self.doc.journal_bytes)?;
            file.sync_data()?;
        }
        if self.doc.journal_bytes == 0
            && let Some(dir) = self.paths.journal.parent()
        {
            durable::fsync_dir(dir)?;
        }
        Ok(file)
    }

    /// Moves the committed journal end back to `bytes`/`items`, saving the
    /// cut tail to the rollback file first. The document must be saved by
    /// the caller before [`Session::truncate_journal`] runs.
    pub fn save_tail_from(&mut self, bytes: u64) -> io::Result<()> {
        let tail = if self.doc.journal_bytes > bytes {
            let mut file = File::open(&self.paths.journal)?;
            io::Seek::seek(&mut file, io::SeekFrom::Start(bytes))?;
            let mut tail = Vec::new();
            io::Read::read_to_end(
                &mut io::Read::take(file, self.doc.journal_bytes - bytes),
                &mut tail,
            )?;
            tail
        } else {
            Vec::new()
        };
        durable::write_atomic(&self.paths.rollback_tail, &tail)
    }

    /// Cuts the journal file to the committed length (after a rollback
    /// lowered it; the document must already be saved).
    pub fn truncate_journal(&mut self) -> io::Result<()> {
        self.open_journal().map(drop)
    }

    /// Appends raw journal bytes durably (a restored rollback tail).
    pub fn append_raw(&mut self, bytes: &[u8], items: u64) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut journal = self.open_journal()?;
        durable::append_durable(&mut journal, bytes)?;
        self.doc.journal_items += items;
        self.doc.journal_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Reads the committed transcript, after the base it branched from.
    pub fn transcript(&self) -> Result<Vec<Item>, LoadError> {
        let mut items = match &self.doc.base {
            Some(base) => {
                let base_doc: Option<SessionDoc> =
                    std::fs::read(base.journal.with_extension("json"))
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok());
                if base_doc.is_none_or(|d| d.rollbacks != base.rollbacks) {
                    return Err(LoadError::Corrupt {
                        path: base.journal.clone(),
                        reason: "the conversation this one-shot branched from was rolled back or \
                                 cleared since, so its earlier turns cannot be resent"
                            .into(),
                    });
                }
                let prefix = read_journal(&base.journal, base.bytes)?;
                if prefix.len() as u64 != base.items {
                    return Err(LoadError::Corrupt {
                        path: base.journal.clone(),
                        reason: "the conversation this one-shot branched from changed".into(),
                    });
                }
                prefix
            }
            None => Vec::new(),
        };
        items.extend(read_journal(&self.paths.journal, self.doc.journal_bytes)?);
        Ok(items)
    }
}

/// The state document read from `doc_path`, checked against its file name
/// (the part of [`Session::load`] that does not touch the disk).
pub fn parse_doc(bytes: &[u8], doc_path: &Path) -> Result<(SessionDoc, SessionPaths), LoadError> {
    let doc: SessionDoc = serde_json::from_slice(bytes).map_err(|e| LoadError::Corrupt {
        path: doc_path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let dir = doc_path.parent().unwrap_or(Path::new("."));
    let paths = SessionPaths::new(dir, &doc.id);
    if paths.doc != doc_path {
        return Err(LoadError::Corrupt {
            path: doc_path.to_path_buf(),
            reason: format!("its id {:?} does not match the file name", doc.id),
        });
    }
    Ok((doc, paths))
}

/// Reads the first `committed` bytes of a journal as items.
pub fn read_journal(path: &Path, committed: u64) -> Result<Vec<Item>, LoadError> {
    if committed == 0 {
        return Ok(Vec::new());
    }
    parse_journal(File::open(path)?, committed, path)
}

/// The first `committed` bytes of journal contents as items; `path` only
/// names the journal in errors.
pub fn parse_journal(
    journal: impl io::Read,
    committed: u64,
    path: &Path,
) -> Result<Vec<Item>, LoadError> {
    let reader = BufReader::new(io::Read::take(journal, committed));
    let mut items = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line?;
        let entry: Entry = serde_json::from_str(&line).map_err(|e| LoadError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("line {}: {e}", n + 1),
        })?;
        items.push(entry.item);
    }
    Ok(items)
}

/// A one-line title from the first message.
pub fn title_from(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut title: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        title.push('…');
    }
    title
}

/// The header a turn puts before the user's message when `!command`
/// transcripts ran since the last one (see the turn engine).
const SHELL_HEADER: &str = "Commands I ran in my terminal since my last message:\n```\n";

/// The user's own words in a journal `User` item (without the shell
/// transcript a turn may have put before them).
fn user_words(text: &str) -> &str {
    match text.strip_prefix(SHELL_HEADER) {
        Some(rest) => rest.split_once("\n```\n\n").map_or(text, |(_, msg)| msg),
        None => text,
    }
}

/// A conversation rebuilt from its journal by [`Session::rebuild`].
pub struct Rebuilt {
    pub session: Session,
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

impl Session {
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
        let paths = SessionPaths::new(dir, id);
        let bytes = match std::fs::read(&paths.journal) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        // Good records: (at, item, end offset).
        let mut records: Vec<(i64, Item, u64)> = Vec::new();
        let mut offset = 0usize;
        while let Some(len) = bytes[offset..].iter().position(|b| *b == b'\n') {
            let line = &bytes[offset..offset + len];
            let Ok(entry) = serde_json::from_slice::<Entry>(line) else {
                break;
            };
            offset += len + 1;
            records.push((entry.at, entry.item, offset as u64));
        }
        if records.is_empty() {
            return Err(LoadError::Corrupt {
                path: paths.journal.clone(),
                reason: "the transcript has no readable record".into(),
            });
        }
        let cut_tail = bytes[offset..].to_vec();

        let first_at = records.first().map_or(0, |r| r.0);
        let last_at = records.last().map_or(0, |r| r.0);
        let mut doc = SessionDoc::new(id.to_owned(), folder.to_owned(), agent.to_owned(), first_at);
        doc.updated_at = last_at.max(first_at);
        doc.rollbacks = rollbacks;
        doc.journal_items = records.len() as u64;
        doc.journal_bytes = offset as u64;

        let mut open_calls: Vec<PendingCall> = Vec::new();
        // Index just past the last turn boundary, and past the last reply.
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
                    });
                    after_reply = i + 1;
                }
                Item::FunctionOutput { call_id, .. } => {
                    open_calls.retain(|c| &c.call_id != call_id);
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
        let excess = doc.checkpoints.len().saturating_sub(MAX_CHECKPOINTS);
        doc.checkpoints.drain(..excess);
        doc.journal_items = records.len() as u64;
        doc.journal_bytes = offset as u64;
        if boundary < records.len() {
            // The last turn did not finish.
            doc.pending_calls = open_calls;
            doc.unsent = records[after_reply.max(boundary)..]
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
        Ok(Rebuilt {
            session: Self {
                doc,
                paths,
                _open: OpenGuard::new(),
            },
            cut_tail,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_session(dir: &Path) -> Session {
        Session::create(
            dir,
            SessionDoc::new("abc".into(), "/f".into(), "default".into(), 1),
        )
        .unwrap()
    }

    #[test]
    fn appended_items_survive_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = new_session(dir.path());
        s.append(
            &[
                Item::User { text: "hi".into() },
                Item::Assistant { text: "yo".into() },
            ],
            2,
        )
        .unwrap();
        s.save().unwrap();
        let loaded = Session::load(&s.paths.doc).unwrap();
        assert_eq!(loaded.doc.journal_items, 2);
        assert_eq!(
            loaded.transcript().unwrap(),
            vec![
                Item::User { text: "hi".into() },
                Item::Assistant { text: "yo".into() }
            ]
        );
    }

    #[test]
    fn bytes_appended_but_never_committed_are_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = new_session(dir.path());
        s.append(
            &[Item::User {
                text: "kept".into(),
            }],
            2,
        )
        .unwrap();
        s.save().unwrap();
        // A crash after this append but before the document write:
        s.append(
            &[Item::User {
                text: "lost".into(),
            }],
            3,
        )
        .unwrap();
        let mut loaded = Session::load(&s.paths.doc).unwrap();
        assert_eq!(
            loaded.transcript().unwrap(),
            vec![Item::User {
                text: "kept".into()
            }]
        );
        loaded
            .append(
                &[Item::Assistant {
                    text: "next".into(),
                }],
                4,
            )
            .unwrap();
        loaded.save().unwrap();
        let again = Session::load(&s.paths.doc).unwrap();
        assert_eq!(
            again.transcript().unwrap(),
            vec![
                Item::User {
                    text: "kept".into()
                },
                Item::Assistant {
                    text: "next".into()
                }
            ]
        );
    }

    #[test]
    fn a_branch_reads_its_base_until_the_base_is_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut base = new_session(dir.path());
        base.append(
            &[Item::User {
                text: "base".into(),
            }],
            2,
        )
        .unwrap();
        base.save().unwrap();
        let branch_dir = dir.path().join("oneshot");
        std::fs::create_dir(&branch_dir).unwrap();
        let mut doc = SessionDoc::new("branch".into(), "/f".into(), "default".into(), 3);
        doc.base = Some(BaseRef {
            journal: base.paths.journal.clone(),
            bytes: base.doc.journal_bytes,
            items: base.doc.journal_items,
            rollbacks: base.doc.rollbacks,
        });
        let mut branch = Session::create(&branch_dir, doc).unwrap();
        branch
            .append(&[Item::User { text: "own".into() }], 4)
            .unwrap();
        branch.save().unwrap();
        assert_eq!(
            branch.transcript().unwrap(),
            vec![
                Item::User {
                    text: "base".into()
                },
                Item::User { text: "own".into() }
            ]
        );
        // The base is rolled back (and could be rewritten): no silent resend.
        base.doc.rollbacks += 1;
        base.save().unwrap();
        let err = branch.transcript().unwrap_err();
        assert!(err.to_string().contains("rolled back"), "{err}");
    }

    #[test]
    fn a_document_is_rebuilt_from_the_journal_up_to_its_last_good_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = new_session(dir.path());
        let turn = |q: &str, a: &str| {
            vec![
                Item::User { text: q.into() },
                Item::Assistant { text: a.into() },
            ]
        };
        s.append(&turn("first line\nmore", "one"), 2).unwrap();
        s.append(
            &[
                Item::User {
                    text: format!("{SHELL_HEADER}$ ls\n```\n\nsecond"),
                },
                Item::Assistant {
                    text: "calling".into(),
                },
                Item::FunctionCall {
                    call_id: "c1".into(),
                    name: "shell".into(),
                    arguments: "{}".into(),
                },
            ],
            3,
        )
        .unwrap();
        s.append(
            &[
                Item::FunctionOutput {
                    call_id: "c1".into(),
                    output: "ok".into(),
                },
                Item::Assistant { text: "two".into() },
            ],
            4,
        )
        .unwrap();
        let complete = s.doc.journal_bytes;
        s.append(
            &[
                Item::User {
                    text: "third".into(),
                },
                Item::Assistant {
                    text: "calling again".into(),
                },
                Item::FunctionCall {
                    call_id: "c2".into(),
                    name: "shell".into(),
                    arguments: "{\"command\":\"make\"}".into(),
                },
            ],
            5,
        )
        .unwrap();
        let good = s.doc.journal_bytes;
        let mut bytes = std::fs::read(&s.paths.journal).unwrap();
        bytes.extend_from_slice(b"{\"at\":6,\"type\":\"function_out");
        std::fs::write(&s.paths.journal, &bytes).unwrap();

        let rebuilt = Session::rebuild(dir.path(), "abc", "/f", "default", 7).unwrap();
        let doc = &rebuilt.session.doc;
        assert_eq!(rebuilt.cut_tail, b"{\"at\":6,\"type\":\"function_out");
        assert_eq!(doc.title, "first line");
        assert_eq!(doc.last_user, "third");
        assert_eq!(doc.last_assistant, "calling again");
        assert_eq!((doc.created_at, doc.updated_at), (2, 5));
        assert_eq!(doc.turns, 2);
        assert_eq!(doc.journal_bytes, good);
        assert_eq!(doc.journal_items, 10);
        assert_eq!(doc.rollbacks, 7);
        let cps: Vec<(u32, u64)> = doc
            .checkpoints
            .iter()
            .map(|c| (c.turns, c.journal_items))
            .collect();
        assert_eq!(cps, vec![(1, 2), (2, 7)]);
        assert_eq!(doc.checkpoints[1].journal_bytes, complete);
        assert_eq!(doc.checkpoints[1].last_user, "second");
        assert_eq!(doc.pending_calls.len(), 1);
        assert_eq!(doc.pending_calls[0].call_id, "c2");
        assert_eq!(doc.pending_calls[0].state, CallState::Running);
        assert!(doc.unsent.is_empty());
        assert!(doc.interrupted.is_some());
        let kept = rebuilt.keep_cut_tail(9).unwrap().unwrap();
        assert_eq!(std::fs::read(kept).unwrap(), rebuilt.cut_tail);

        std::fs::write(&s.paths.journal, b"garbage\n").unwrap();
        assert!(matches!(
            Session::rebuild(dir.path(), "abc", "/f", "default", 0),
            Err(LoadError::Corrupt { .. })
        ));
    }

    #[test]
    fn garbage_and_truncated_files_are_reported_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = new_session(dir.path());
        s.append(&[Item::User { text: "hi".into() }], 2).unwrap();
        s.save().unwrap();
        std::fs::write(&s.paths.journal, b"").unwrap();
        assert!(matches!(
            Session::load(&s.paths.doc),
            Err(LoadError::Corrupt { .. })
        ));
        std::fs::write(&s.paths.doc, b"{\"format\":1,\"id\":").unwrap();
        assert!(matches!(
            Session::load(&s.paths.doc),
            Err(LoadError::Corrupt { .. })
        ));
    }
}
