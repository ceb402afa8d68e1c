//! One conversation on disk: a small state document `<id>.json` (atomically
//! replaced) beside an append-only transcript journal `<id>.jsonl`.
//!
//! The document is the commit point: it records how many journal items and
//! bytes belong to the conversation, so bytes past that (a crash between the
//! append and the document write) are cut off on load.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use agentx_shared::conversation::{Item, PendingCall, Usage};

use crate::durable;

pub const FORMAT: u32 = 1;

/// The state document. Small and bounded: it never holds the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversationDoc {
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
    /// `!command` transcripts run locally since the last message, by no
    /// client in particular (sent with anyone's next message).
    pub pending_shell: String,
    /// `!command` transcripts of one client each: sent with that client's
    /// next message, or with anyone's once that client is gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_shell_runs: Vec<ShellRun>,
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
    /// Backups of the rollbacks before the last one, oldest first: each
    /// `rollback --undo` pops one (see [`MAX_ROLLBACK_BACKUPS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub older_rollbacks: Vec<RollbackBackup>,
    /// A one-shot's branch point: the interactive transcript it continues.
    #[serde(default)]
    pub base: Option<BaseRef>,
    /// Rollbacks so far (each may cut and later rewrite the journal tail).
    #[serde(default)]
    pub rollbacks: u64,
    /// The conversation this one was forked from, and at which turn.
    #[serde(default)]
    pub forked_from: Option<super::fork::ForkOrigin>,
    /// How full the model's context is now (unknown for older documents:
    /// counted from the transcript when asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Fill>,
    /// The model chosen for this conversation (`/model`); `None`: the
    /// client's configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Which records of `<id>.calls.jsonl` belong to `pending_calls`
    /// (see `calls`): each save that folds the log in moves it on.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls_epoch: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How many tokens the model's context holds: the last response's reported
/// input plus output, or counted locally (`estimated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fill {
    pub tokens: u64,
    #[serde(default)]
    pub estimated: bool,
}

/// A `!command` transcript and the client process that ran it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellRun {
    pub pid: u32,
    /// The process's start time (clock ticks since boot, from
    /// `/proc/PID/stat`): a later process with the same pid is another client.
    pub started: u64,
    pub text: String,
}

impl ShellRun {
    /// Whether the client that ran it is `pid` (started at `started`).
    pub fn is_of(&self, pid: u32, started: Option<u64>) -> bool {
        self.pid == pid && started == Some(self.started)
    }

    /// Whether the client that ran it still runs.
    pub fn owner_alive(&self) -> bool {
        process_start(self.pid) == Some(self.started)
    }
}

/// When process `pid` started (clock ticks since boot), if it runs.
pub fn process_start(pid: u32) -> Option<u64> {
    agentx_shared::procfs::start_time(pid)
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Fill>,
    /// What made it besides a turn ("compacted: 142k → 18k tokens").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_short: Option<Marker>,
    pub checkpoints: Vec<Checkpoint>,
    /// The journal position the rollback went back to.
    pub rolled_back_to: u64,
    pub at: i64,
    /// The file (in the conversation's directory) holding the journal tail
    /// this rollback cut; `None`: `<id>.rollback.jsonl` (older backups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Fill>,
}

/// Rollbacks that can be undone one by one (the newest kept).
pub const MAX_ROLLBACK_BACKUPS: usize = MAX_CHECKPOINTS;

impl ConversationDoc {
    /// What the conversation looks like now, as one opaque token: a client
    /// that chose a checkpoint from a listing sends it back, and agentd
    /// refuses the rollback when the conversation moved since (a turn, a
    /// rollback or its undo by another client).
    pub fn head(&self) -> String {
        format!(
            "{}.{}.{}.{}.{}",
            self.rollbacks,
            self.journal_bytes,
            self.checkpoints.len(),
            self.checkpoints.last().map_or(0, |c| c.created_at),
            self.older_rollbacks.len() + usize::from(self.rollback.is_some()),
        )
    }
}

impl Checkpoint {
    /// A stable name for this checkpoint within its conversation.
    pub fn id(&self) -> String {
        format!("{}-{}", self.created_at, self.journal_bytes)
    }
}

impl ConversationDoc {
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
            pending_shell_runs: Vec::new(),
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
            calls_epoch: 0,
            rollback: None,
            older_rollbacks: Vec::new(),
            base: None,
            rollbacks: 0,
            forked_from: None,
            context: None,
            model: None,
        }
    }

    /// A checkpoint of the current state.
    ///
    /// Names every field (no `..`): a new one must be placed here on purpose
    /// (as in `store::carry` for forks and in a rollback's backup).
    pub fn checkpoint(&self, now_ms: i64) -> Checkpoint {
        let Self {
            // What a rollback to it restores.
            response_id,
            usage,
            last_user,
            last_assistant,
            turns,
            journal_items,
            journal_bytes,
            context,
            // The conversation's, not one point's.
            format: _,
            id: _,
            folder: _,
            agent: _,
            title: _,
            created_at: _,
            updated_at: _,
            model: _,
            approve_all: _,
            checkpoints: _,
            rollback: _,
            older_rollbacks: _,
            rollbacks: _,
            base: _,
            forked_from: _,
            // Open work: a checkpoint is taken at a committed point.
            pending_shell: _,
            pending_shell_runs: _,
            pending_calls: _,
            calls_epoch: _,
            unsent: _,
            turn_open: _,
            interrupted: _,
            failed: _,
            cut_short: _,
        } = self;
        Checkpoint {
            response_id: response_id.clone(),
            usage: *usage,
            last_user: preview(last_user),
            last_assistant: preview(last_assistant),
            turns: *turns,
            journal_items: *journal_items,
            journal_bytes: *journal_bytes,
            created_at: now_ms,
            context: *context,
            note: None,
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
pub struct ConversationPaths {
    pub doc: PathBuf,
    pub journal: PathBuf,
    /// The journal tail cut by a rollback whose backup names no file.
    pub rollback_tail: PathBuf,
    /// Where tool calls stand since the document was last saved.
    pub calls: PathBuf,
}

impl ConversationPaths {
    /// Where `backup`'s cut journal tail is kept.
    pub fn tail_of(&self, backup: &RollbackBackup) -> PathBuf {
        match (&backup.tail, self.doc.parent()) {
            (Some(name), Some(dir)) => dir.join(name),
            _ => self.rollback_tail.clone(),
        }
    }
}

impl ConversationPaths {
    pub fn new(dir: &Path, id: &str) -> Self {
        Self {
            doc: dir.join(format!("{id}.json")),
            journal: dir.join(format!("{id}.jsonl")),
            rollback_tail: dir.join(format!("{id}.rollback.jsonl")),
            calls: dir.join(format!("{id}.calls.jsonl")),
        }
    }
}

/// Conversations loaded in memory right now (see [`open_conversations`]).
static OPEN_CONVERSATIONS: AtomicUsize = AtomicUsize::new(0);

/// How many conversations agentd holds loaded now. They hold no file open:
/// the journal is opened for each append and closed again, so idle
/// conversations cost memory only, and their group actors are released
/// when idle (see `Store::group`).
pub fn open_conversations() -> usize {
    OPEN_CONVERSATIONS.load(Ordering::Relaxed)
}

/// Counts one loaded conversation for as long as it lives.
struct OpenGuard;

impl OpenGuard {
    fn new() -> Self {
        OPEN_CONVERSATIONS.fetch_add(1, Ordering::Relaxed);
        Self
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        OPEN_CONVERSATIONS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A loaded conversation. Its journal is opened only while appending.
pub struct Conversation {
    pub doc: ConversationDoc,
    pub paths: ConversationPaths,
    calls: CallsLog,
    /// When its writes reach the disk: a one-shot's wait until it is kept.
    sync: durable::Sync,
    _open: OpenGuard,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// A one-shot's branch point can no longer be read back: nothing is
    /// damaged, the conversation it branched from moved on or is gone.
    #[error("{0}")]
    Branch(String),
}

impl Conversation {
    /// Creates a new conversation and makes it durable.
    pub fn create(dir: &Path, doc: ConversationDoc) -> io::Result<Self> {
        Self::create_as(dir, doc, durable::Sync::Now)
    }

    /// [`Conversation::create`], its writes on disk when `sync` says.
    pub fn create_as(dir: &Path, doc: ConversationDoc, sync: durable::Sync) -> io::Result<Self> {
        let paths = ConversationPaths::new(dir, &doc.id);
        let mut session = Self {
            doc,
            paths,
            calls: CallsLog::default(),
            sync,
            _open: OpenGuard::new(),
        };
        session.save()?;
        Ok(session)
    }

    /// Reads `<id>.json`; a document that does not parse is `Corrupt`.
    pub fn load(doc_path: &Path) -> Result<Self, LoadError> {
        let bytes = std::fs::read(doc_path)?;
        let (mut doc, paths) = parse_doc(&bytes, doc_path)?;
        let calls = CallsLog::fold(&paths.calls, &mut doc)?;
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
            calls,
            sync: durable::Sync::Now,
            _open: OpenGuard::new(),
        })
    }

    /// Writes from now on reach the disk when `sync` says.
    pub fn set_sync(&mut self, sync: durable::Sync) {
        self.sync = sync;
    }

    /// Writes the state document atomically (with every tool call's latest
    /// state folded in).
    pub fn save(&mut self) -> io::Result<()> {
        let folds = self.calls.in_use();
        if folds {
            self.doc.calls_epoch += 1;
        }
        let bytes = serde_json::to_vec_pretty(&self.doc).map_err(io::Error::other)?;
        #[cfg(test)]
        seams::check(&self.paths.doc)?;
        // On a failure the epoch stays moved on: whether the new document
        // reached the disk or not, each record says which one it belongs to.
        durable::write_atomic_as(&self.paths.doc, &bytes, self.sync)?;
        if folds {
            self.calls.saved(&self.paths.calls);
        }
        Ok(())
    }

    /// Records durably where pending call `index` stands now: one append,
    /// whatever the number of calls (the document is not rewritten).
    pub fn update_call(&mut self, index: usize, call: PendingCall) -> io::Result<()> {
        self.calls
            .update(&self.paths.calls, &mut self.doc, index, call, self.sync)
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
        durable::append_as(&mut journal, &buf, self.sync)?;
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
            durable::fsync_dir_as(dir, self.sync)?;
        }
        Ok(file)
    }

    /// Moves the committed journal end back to `bytes`/`items`, saving the
    /// cut tail to the rollback file first. The document must be saved by
    /// the caller before [`Conversation::truncate_journal`] runs.
    pub fn save_tail_from(&mut self, bytes: u64, to: &Path) -> io::Result<()> {
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
        durable::write_atomic(to, &tail)
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
        durable::append_as(&mut journal, bytes, self.sync)?;
        self.doc.journal_items += items;
        self.doc.journal_bytes += bytes.len() as u64;
        Ok(())
    }

    /// The end of the committed transcript, oldest first: read backwards
    /// until `enough` says so of what was read (newest first), so the cost
    /// is what is shown, not the conversation's length. A one-shot's
    /// branch (a base) is read whole.
    pub fn transcript_tail(
        &self,
        enough: impl Fn(&mut dyn Iterator<Item = &Item>) -> bool,
    ) -> Result<Vec<Item>, LoadError> {
        if self.doc.base.is_some() {
            return self.transcript();
        }
        let path = &self.paths.journal;
        let records = super::journal::read_back::<Entry>(path, self.doc.journal_bytes, |got| {
            enough(&mut got.iter().map(|r| &r.value.item))
        })
        .map_err(|e| load_error(path, e))?;
        Ok(records.into_iter().map(|r| r.value.item).collect())
    }

    /// Reads the committed transcript, after the base it branched from.
    pub fn transcript(&self) -> Result<Vec<Item>, LoadError> {
        let mut items = match &self.doc.base {
            Some(base) => {
                let base_doc: Option<ConversationDoc> =
                    std::fs::read(base.journal.with_extension("json"))
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok());
                let unusable = |what: &str| {
                    LoadError::Branch(format!(
                        "this one-shot's branch point is unusable: the conversation it branched \
                         from ({}) {what} since, and the model server no longer knows its chain, \
                         so its earlier turns cannot be resent; run the prompt again (a new \
                         one-shot branches from the folder's current state)",
                        base.journal.with_extension("").display()
                    ))
                };
                match &base_doc {
                    None => return Err(unusable("was cleared")),
                    Some(d) if d.rollbacks != base.rollbacks => {
                        return Err(unusable("was rolled back"));
                    }
                    Some(_) => {}
                }
                let prefix = read_journal(&base.journal, base.bytes)?;
                if prefix.len() as u64 != base.items {
                    return Err(unusable("changed"));
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
/// (the part of [`Conversation::load`] that does not touch the disk).
pub fn parse_doc(
    bytes: &[u8],
    doc_path: &Path,
) -> Result<(ConversationDoc, ConversationPaths), LoadError> {
    let doc: ConversationDoc = serde_json::from_slice(bytes).map_err(|e| LoadError::Corrupt {
        path: doc_path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let dir = doc_path.parent().unwrap_or(Path::new("."));
    let paths = ConversationPaths::new(dir, &doc.id);
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
/// names the journal in errors. A line that does not parse is damage (see
/// `store::journal`): the whole read fails, naming it.
pub fn parse_journal(
    journal: impl io::Read,
    committed: u64,
    path: &Path,
) -> Result<Vec<Item>, LoadError> {
    let records = super::journal::parse::<Entry>(journal, (0, committed), path)
        .map_err(|e| load_error(path, e))?;
    Ok(records.into_iter().map(|r| r.value.item).collect())
}

/// A journal read's failure as a load's: a bad line makes it corrupt.
fn load_error(path: &Path, e: super::journal::JournalError) -> LoadError {
    match e {
        super::journal::JournalError::Io(e) => LoadError::Io(e),
        super::journal::JournalError::Bad {
            line,
            offset,
            reason,
            ..
        } => LoadError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("{}: {reason}", super::journal::place(line, offset)),
        },
    }
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

mod calls;
mod rebuild;

/// Test seam: the document saves of chosen directories fail as on a full
/// disk (after the journal append, which a small one may still get).
#[cfg(test)]
pub mod seams {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    static FAILING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    /// Makes saves in `dir` fail (`fail`) or work again.
    pub fn fail_saves_in(dir: &Path, fail: bool) {
        if let Ok(mut dirs) = FAILING.lock() {
            dirs.retain(|d| d != dir);
            if fail {
                dirs.push(dir.to_path_buf());
            }
        }
    }

    pub(super) fn check(doc: &Path) -> std::io::Result<()> {
        let failing = FAILING
            .lock()
            .is_ok_and(|dirs| doc.parent().is_some_and(|p| dirs.iter().any(|d| d == p)));
        if failing {
            return Err(std::io::Error::from_raw_os_error(28));
        }
        Ok(())
    }
}

use calls::CallsLog;

#[cfg(test)]
mod tests;
