//! The actor that owns one group directory `<folder-key>/<agent>`: loads
//! its conversations, applies every change durably before replying, and
//! runs one turn at a time per conversation (later turns wait their turn).
//!
//! Real folders whose keys collide (`/a/b-c`, `/a/b/c`) share the directory
//! and so share this one actor: it is the only writer of the directory's
//! `current.json` and `shared.json` (both are read-modify-written, per real
//! folder inside), which is simpler than locking files across actors. Every
//! request names its real folder and only ever sees that folder's
//! conversations.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use agentx_shared::conversation::{Item, PendingCall, Usage};

use super::StoreError;
use super::durable;
use super::session::{
    Checkpoint, LoadError, MAX_CHECKPOINTS, Marker, RollbackBackup, Session, SessionDoc, title_from,
};

fn now_ms() -> i64 {
    agentx_shared::time::unix_ms(SystemTime::now())
}

/// A fresh conversation id: time-ordered, unique, safe as a file name.
pub(super) fn new_id() -> String {
    use std::hash::{BuildHasher as _, RandomState};
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let salt = RandomState::new().hash_one((nanos, std::process::id()));
    format!("{:011x}-{:06x}", now_ms(), salt & 0xff_ffff)
}

pub enum OpenTarget {
    Latest,
    /// 1 is the newest.
    Index(u32),
    Id(String),
    New,
}

/// What opening a conversation returns.
pub struct Opened {
    pub doc: SessionDoc,
    /// The last few (user, assistant) exchanges, oldest first.
    pub recent: Vec<(String, String)>,
    pub notices: Vec<String>,
}

/// A set of field updates applied (and made durable) in one step.
#[derive(Default, Debug)]
pub struct Change {
    pub append: Vec<Item>,
    pub response_id: Option<Option<String>>,
    pub add_usage: Option<Usage>,
    pub last_user: Option<String>,
    pub last_assistant: Option<String>,
    pub pending_calls: Option<Vec<PendingCall>>,
    pub clear_pending_shell: bool,
    pub add_pending_shell: Option<String>,
    pub turn_completed: bool,
    pub approve_all: Option<bool>,
    pub unsent: Option<Vec<Item>>,
    pub turn_open: Option<bool>,
    pub interrupted: Option<Option<Marker>>,
    pub failed: Option<Option<Marker>>,
    /// The answer was (Some) or was not (None) cut short by the server.
    pub cut_short: Option<Option<Marker>>,
    /// Record a checkpoint of the resulting state (a successful turn) and
    /// make it the folder+agent's shared checkpoint.
    pub checkpoint: bool,
    /// A new title (a rename; does not move the conversation in the list).
    pub title: Option<String>,
}

pub enum RollbackTarget {
    /// 1 is the newest checkpoint.
    Index(u32),
    /// Back to before the first message (used to retry a first turn).
    Origin,
    Undo,
}

/// The branch point one-shots start from: a successful interactive turn or
/// a rollback of this folder+agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedCheckpoint {
    pub session_id: String,
    pub response_id: Option<String>,
    pub journal_items: u64,
    pub journal_bytes: u64,
    /// The conversation's rollback count when this was recorded.
    #[serde(default)]
    pub rollbacks: u64,
    pub at: i64,
}

pub(super) enum Msg {
    List(oneshot::Sender<Vec<SessionDoc>>),
    Open(OpenTarget, oneshot::Sender<Result<Opened, StoreError>>),
    Get(
        Option<String>,
        oneshot::Sender<Result<Option<SessionDoc>, StoreError>>,
    ),
    Clear(
        Option<String>,
        oneshot::Sender<Result<SessionDoc, StoreError>>,
    ),
    BeginTurn(
        Option<String>,
        oneshot::Sender<Result<SessionDoc, StoreError>>,
    ),
    EndTurn(String),
    Commit(
        String,
        Box<Change>,
        oneshot::Sender<Result<SessionDoc, StoreError>>,
    ),
    Transcript(String, oneshot::Sender<Result<Vec<Item>, StoreError>>),
    Checkpoints(
        Option<String>,
        oneshot::Sender<Result<Vec<Checkpoint>, StoreError>>,
    ),
    /// The bool: asked by the turn that holds the conversation.
    Rollback(
        Option<String>,
        RollbackTarget,
        bool,
        oneshot::Sender<Result<SessionDoc, StoreError>>,
    ),
    Shared(oneshot::Sender<Option<SharedCheckpoint>>),
    Adopt(Box<SessionDoc>, oneshot::Sender<Result<(), StoreError>>),
    /// Like `BeginTurn` for one conversation, but never waits: `None` when
    /// a turn runs on it.
    TryBeginTurn(
        String,
        oneshot::Sender<Result<Option<SessionDoc>, StoreError>>,
    ),
    /// Makes a conversation equal the remote's copy (asked under its lease).
    Absorb(
        String,
        Box<super::pulled::Pulled>,
        oneshot::Sender<Result<SessionDoc, StoreError>>,
    ),
    /// Makes `to` current where `from` is.
    Repoint(String, String, oneshot::Sender<Result<(), StoreError>>),
}

/// A request and the real folder it is about.
pub(super) type Envelope = (String, Msg);

/// The actor's mailbox; the registry in `Store` keeps weak ones.
pub(super) type Mailbox = mpsc::UnboundedSender<Envelope>;
pub(super) type WeakMailbox = mpsc::WeakUnboundedSender<Envelope>;

/// Cheap, cloneable address of a group actor, for one real folder. While
/// any handle lives the actor does; the last one dropped ends it.
#[derive(Clone)]
pub struct GroupHandle {
    tx: Mailbox,
    folder: String,
}

/// The right to run a turn on one conversation; dropping it lets the next
/// waiting turn start.
pub struct TurnLease {
    pub doc: SessionDoc,
    handle: GroupHandle,
}

impl Drop for TurnLease {
    fn drop(&mut self) {
        let _ = self.handle.send(Msg::EndTurn(self.doc.id.clone()));
    }
}

impl GroupHandle {
    pub(super) fn new(tx: Mailbox, folder: String) -> Self {
        Self { tx, folder }
    }

    fn send(&self, msg: Msg) -> Result<(), StoreError> {
        self.tx
            .send((self.folder.clone(), msg))
            .map_err(|_| StoreError::Closed)
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Msg) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx))?;
        rx.await.map_err(|_| StoreError::Closed)
    }

    /// Conversations of this folder and agent, newest first.
    pub async fn list(&self) -> Result<Vec<SessionDoc>, StoreError> {
        self.ask(Msg::List).await
    }

    pub async fn open(&self, target: OpenTarget) -> Result<Opened, StoreError> {
        self.ask(|tx| Msg::Open(target, tx)).await?
    }

    /// The named conversation, or the current one (`None` when there is none).
    pub async fn get(&self, session: Option<String>) -> Result<Option<SessionDoc>, StoreError> {
        self.ask(|tx| Msg::Get(session, tx)).await?
    }

    /// Deletes a conversation's files and returns the fresh one replacing it.
    pub async fn clear(&self, session: Option<String>) -> Result<SessionDoc, StoreError> {
        self.ask(|tx| Msg::Clear(session, tx)).await?
    }

    /// Waits until no other turn runs on the conversation, then holds it.
    pub async fn begin_turn(&self, session: Option<String>) -> Result<TurnLease, StoreError> {
        let doc = self.ask(|tx| Msg::BeginTurn(session, tx)).await??;
        Ok(TurnLease {
            doc,
            handle: self.clone(),
        })
    }

    /// Applies a change; returns once it is on disk.
    pub async fn commit(&self, session: &str, change: Change) -> Result<SessionDoc, StoreError> {
        self.ask(|tx| Msg::Commit(session.to_owned(), Box::new(change), tx))
            .await?
    }

    /// The committed local transcript.
    pub async fn transcript(&self, session: &str) -> Result<Vec<Item>, StoreError> {
        self.ask(|tx| Msg::Transcript(session.to_owned(), tx))
            .await?
    }

    /// Checkpoints, oldest first.
    pub async fn checkpoints(
        &self,
        session: Option<String>,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        self.ask(|tx| Msg::Checkpoints(session, tx)).await?
    }

    /// Restores a checkpoint (or undoes the last rollback); returns the new state.
    pub async fn rollback(
        &self,
        session: Option<String>,
        target: RollbackTarget,
    ) -> Result<SessionDoc, StoreError> {
        self.ask(|tx| Msg::Rollback(session, target, false, tx))
            .await?
    }

    /// A rollback by the turn that holds the conversation (a retry).
    pub async fn rollback_in_turn(
        &self,
        lease: &TurnLease,
        target: RollbackTarget,
    ) -> Result<SessionDoc, StoreError> {
        let id = Some(lease.doc.id.clone());
        self.ask(|tx| Msg::Rollback(id, target, true, tx)).await?
    }

    /// Makes a prepared conversation document durable in this group.
    pub async fn adopt(&self, doc: SessionDoc) -> Result<(), StoreError> {
        self.ask(|tx| Msg::Adopt(Box::new(doc), tx)).await?
    }

    /// The right to run on conversation `id` now, or `None` when a turn
    /// holds it (never waits).
    pub async fn try_begin_turn(&self, id: &str) -> Result<Option<TurnLease>, StoreError> {
        let doc = self
            .ask(|tx| Msg::TryBeginTurn(id.to_owned(), tx))
            .await??;
        Ok(doc.map(|doc| TurnLease {
            doc,
            handle: self.clone(),
        }))
    }

    /// Makes the leased conversation equal the remote's copy, durably.
    pub async fn absorb(
        &self,
        lease: &TurnLease,
        pulled: super::pulled::Pulled,
    ) -> Result<SessionDoc, StoreError> {
        let id = lease.doc.id.clone();
        self.ask(|tx| Msg::Absorb(id, Box::new(pulled), tx)).await?
    }

    /// Makes `to` the current conversation of this folder if `from` is.
    pub async fn repoint(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let (from, to) = (from.to_owned(), to.to_owned());
        self.ask(|tx| Msg::Repoint(from, to, tx)).await?
    }

    /// The shared checkpoint one-shots branch from, if any.
    pub async fn shared(&self) -> Result<Option<SharedCheckpoint>, StoreError> {
        self.ask(Msg::Shared).await
    }
}

/// Starts the actor for `dir` and returns its mailbox. `shares_checkpoint`:
/// successful turns and rollbacks here move the folder+agent's shared
/// checkpoint (interactive conversations do; one-shots never do).
/// `exclusive`: held for the actor's whole life before it touches a file,
/// so an actor started for a directory whose previous actor is still
/// finishing its last request (its caller went away) waits for it.
pub(super) fn spawn(
    dir: PathBuf,
    agent: String,
    shares_checkpoint: bool,
    exclusive: Option<Arc<tokio::sync::Mutex<()>>>,
) -> Mailbox {
    let (tx, rx) = mpsc::unbounded_channel();
    let actor = Group {
        dir,
        agent,
        shares_checkpoint,
        loaded: false,
        sessions: HashMap::new(),
        current: HashMap::new(),
        notices: Vec::new(),
        running: HashSet::new(),
        waiting: HashMap::new(),
    };
    tokio::spawn(async move {
        let _only_writer = match exclusive {
            Some(lock) => Some(lock.lock_owned().await),
            None => None,
        };
        actor.run(rx).await;
    });
    tx
}

/// An actor of its own for `dir` (a one-shot's private state).
pub fn spawn_private(dir: PathBuf, folder: String, agent: String) -> GroupHandle {
    GroupHandle::new(spawn(dir, agent, false, None), folder)
}

/// `current.json`: which conversation is current, per real folder (folders
/// whose keys collide share the directory, never the pointer).
#[derive(Default, Serialize, Deserialize)]
struct CurrentFile {
    current: HashMap<String, String>,
}

/// `shared.json`: the shared checkpoint per real folder.
#[derive(Default, Serialize, Deserialize)]
struct SharedFile {
    shared: HashMap<String, SharedCheckpoint>,
}

struct Group {
    dir: PathBuf,
    agent: String,
    shares_checkpoint: bool,
    loaded: bool,
    /// Every conversation of the directory, whatever its real folder.
    sessions: HashMap<String, Session>,
    /// The current conversation per real folder.
    current: HashMap<String, String>,
    /// Notices for the next open: (real folder, or every folder; text).
    notices: Vec<(Option<String>, String)>,
    running: HashSet<String>,
    waiting: HashMap<String, VecDeque<oneshot::Sender<Result<SessionDoc, StoreError>>>>,
}

impl Group {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Envelope>) {
        while let Some((folder, msg)) = rx.recv().await {
            // File I/O here is short and bounded (one document, one append);
            // block_in_place keeps the runtime's other workers free meanwhile.
            tokio::task::block_in_place(|| self.handle(&folder, msg));
        }
        // Every handle is gone: the conversations are released (they hold
        // no open file; the next request loads them again).
    }

    fn handle(&mut self, folder: &str, msg: Msg) {
        if !self.loaded {
            self.load(folder);
        }
        match msg {
            Msg::List(reply) => {
                let _ = reply.send(self.newest_first(folder).into_iter().cloned().collect());
            }
            Msg::Open(target, reply) => {
                let _ = reply.send(self.open(folder, target));
            }
            Msg::Get(session, reply) => {
                let result = match session {
                    Some(id) => self.session(folder, &id).map(|s| Some(s.doc.clone())),
                    None => Ok(self
                        .current_id(folder)
                        .and_then(|id| self.sessions.get(&id))
                        .map(|s| s.doc.clone())),
                };
                let _ = reply.send(result);
            }
            Msg::Clear(session, reply) => {
                let _ = reply.send(self.clear(folder, session));
            }
            Msg::BeginTurn(session, reply) => self.begin_turn(folder, session, reply),
            Msg::EndTurn(id) => self.end_turn(&id),
            Msg::Commit(id, change, reply) => {
                let _ = reply.send(self.commit(folder, &id, *change));
            }
            Msg::Transcript(id, reply) => {
                let result = self
                    .session(folder, &id)
                    .and_then(|s| s.transcript().map_err(|e| StoreError::Io(e.to_string())));
                let _ = reply.send(result);
            }
            Msg::Checkpoints(session, reply) => {
                let result = self
                    .resolve(folder, session)
                    .and_then(|id| Ok(self.session(folder, &id)?.doc.checkpoints.clone()));
                let _ = reply.send(result);
            }
            Msg::Rollback(session, target, in_turn, reply) => {
                let result = self
                    .resolve(folder, session)
                    .and_then(|id| self.rollback(folder, &id, target, in_turn));
                let _ = reply.send(result);
            }
            Msg::Shared(reply) => {
                let _ = reply.send(self.read_shared(folder));
            }
            Msg::TryBeginTurn(id, reply) => {
                let result = self.session(folder, &id).map(|s| s.doc.clone());
                let result = match result {
                    Ok(_) if self.running.contains(&id) => Ok(None),
                    Ok(doc) => {
                        self.running.insert(id);
                        Ok(Some(doc))
                    }
                    Err(e) => Err(e),
                };
                let _ = reply.send(result);
            }
            Msg::Absorb(id, pulled, reply) => {
                let result = self.session(folder, &id).and_then(|s| {
                    super::pulled::apply(s, *pulled)?;
                    Ok(s.doc.clone())
                });
                if result.is_ok() {
                    self.index_hook(&id);
                }
                let _ = reply.send(result);
            }
            Msg::Repoint(from, to, reply) => {
                let result = if self.current_id(folder).as_deref() == Some(from.as_str()) {
                    self.session(folder, &to)
                        .map(drop)
                        .and_then(|()| self.set_current(folder, &to))
                } else {
                    Ok(())
                };
                let _ = reply.send(result);
            }
            Msg::Adopt(doc, reply) => {
                let result = if doc.folder != folder {
                    Err(StoreError::Invalid(format!(
                        "conversation {} belongs to {}, not {folder}",
                        doc.id, doc.folder
                    )))
                } else {
                    agentx_shared::profile::create_private_dir(&self.dir)
                        .and_then(|()| Session::create(&self.dir, *doc))
                        .map(|session| {
                            self.sessions.insert(session.doc.id.clone(), session);
                        })
                        .map_err(StoreError::from)
                };
                let _ = reply.send(result);
            }
        }
    }

    /// The named conversation or the current one.
    fn resolve(&self, folder: &str, session: Option<String>) -> Result<String, StoreError> {
        session
            .or_else(|| self.current_id(folder))
            .ok_or_else(|| StoreError::NotFound("this folder has no conversation yet".into()))
    }

    fn rollback(
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

    /// Tells the search indexer and the remote pusher a conversation
    /// changed (never waits on either).
    fn index_hook(&self, id: &str) {
        if self.shares_checkpoint {
            crate::search::touched(&self.dir, id);
            crate::remote::touched(&self.dir, id);
        }
    }

    /// Reads one of the directory's pointer files (`current.json`,
    /// `shared.json`). A missing file is empty; one that does not parse is
    /// quarantined (kept aside as `.corrupt-<ms>`), reported once, and read
    /// as empty, so the next write starts it afresh instead of failing or
    /// silently overwriting it. Any other read error is returned.
    fn read_pointer<T: serde::de::DeserializeOwned + Default>(
        &mut self,
        name: &str,
    ) -> Result<T, StoreError> {
        let path = self.dir.join(name);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(T::default()),
            Err(e) => return Err(e.into()),
        };
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(value),
            Err(reason) => {
                let moved = match durable::quarantine(&path) {
                    Ok(to) => format!("moved aside to {}", to.display()),
                    Err(e) => format!("could not be moved aside: {e}"),
                };
                tracing::warn!(file = %path.display(), %reason, "quarantined a corrupt pointer file");
                let what = if name == "shared.json" {
                    "one-shots branch from the current conversation's latest checkpoint until \
                     the next turn records a new one"
                } else {
                    "the newest conversation is current"
                };
                self.notices.push((
                    None,
                    format!(
                        "{} was unreadable ({reason}); it was {moved}, and {what}",
                        path.display()
                    ),
                ));
                Ok(T::default())
            }
        }
    }

    /// The shared checkpoint of `folder`. When none is recorded (never, or
    /// `shared.json` was lost to corruption) one-shots branch from the
    /// latest checkpoint of the folder's current conversation instead of
    /// starting with no context.
    fn read_shared(&mut self, folder: &str) -> Option<SharedCheckpoint> {
        if !self.shares_checkpoint {
            return None;
        }
        let file: SharedFile = match self.read_pointer("shared.json") {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!("cannot read {}/shared.json: {e}", self.dir.display());
                SharedFile::default()
            }
        };
        if let Some(shared) = file.shared.get(folder) {
            return Some(shared.clone());
        }
        let id = self.current_id(folder)?;
        let doc = &self.sessions.get(&id)?.doc;
        let cp = doc.checkpoints.last()?;
        Some(SharedCheckpoint {
            session_id: doc.id.clone(),
            response_id: cp.response_id.clone(),
            journal_items: cp.journal_items,
            journal_bytes: cp.journal_bytes,
            rollbacks: doc.rollbacks,
            at: cp.created_at,
        })
    }

    /// Makes `doc`'s current state its folder+agent's shared checkpoint.
    fn write_shared(&mut self, doc: &SessionDoc) -> Result<(), StoreError> {
        if !self.shares_checkpoint {
            return Ok(());
        }
        let mut file: SharedFile = self.read_pointer("shared.json")?;
        file.shared.insert(
            doc.folder.clone(),
            SharedCheckpoint {
                session_id: doc.id.clone(),
                response_id: doc.response_id.clone(),
                journal_items: doc.journal_items,
                journal_bytes: doc.journal_bytes,
                rollbacks: doc.rollbacks,
                at: now_ms(),
            },
        );
        let bytes = serde_json::to_vec(&file).map_err(|e| StoreError::Io(e.to_string()))?;
        durable::write_atomic(&self.dir.join("shared.json"), &bytes)?;
        Ok(())
    }

    /// Reads every conversation of the directory (all real folders of its
    /// key). A conversation whose state document is unreadable is rebuilt
    /// from its transcript when that is readable (see
    /// [`Session::rebuild`]); otherwise both files are quarantined.
    /// `requester`: the folder whose request caused the load.
    fn load(&mut self, requester: &str) {
        self.loaded = true;
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                self.notices
                    .push((None, format!("cannot read {}: {e}", self.dir.display())));
                return;
            }
        };
        let mut bad = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".json")
                || name == "current.json"
                || name == "shared.json"
                || name.starts_with('.')
            {
                continue;
            }
            match Session::load(&path) {
                Ok(mut session) => {
                    if session.doc.turn_open {
                        // agentd died during this turn: what it recorded stands.
                        session.doc.turn_open = false;
                        session.doc.interrupted = Some(Marker {
                            message: "agentd stopped during the turn".into(),
                            at: now_ms(),
                            retryable: true,
                        });
                        if let Err(e) = session.save() {
                            self.notices.push((
                                Some(session.doc.folder.clone()),
                                format!("cannot update {}: {e}", path.display()),
                            ));
                        }
                    }
                    self.sessions.insert(session.doc.id.clone(), session);
                }
                Err(LoadError::Corrupt {
                    path: bad_path,
                    reason,
                }) => {
                    bad.push((path, bad_path, reason));
                }
                Err(LoadError::Io(e)) => {
                    self.notices
                        .push((None, format!("cannot read {}: {e}", path.display())));
                }
            }
        }
        let current: CurrentFile = self.read_pointer("current.json").unwrap_or_else(|e| {
            tracing::warn!("cannot read {}/current.json: {e}", self.dir.display());
            CurrentFile::default()
        });
        let shared: SharedFile = if self.shares_checkpoint {
            self.read_pointer("shared.json").unwrap_or_default()
        } else {
            SharedFile::default()
        };
        for (doc_path, bad_path, reason) in bad {
            let id = doc_path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !self.shares_checkpoint || id.is_empty() || self.sessions.contains_key(&id) {
                self.quarantine(&doc_path, &bad_path, &reason);
                continue;
            }
            let folder = self.owner_of(&id, &current, &shared, requester);
            let rollbacks = shared
                .shared
                .values()
                .find(|s| s.session_id == id)
                .map_or(0, |s| s.rollbacks);
            match self.rebuild(&doc_path, &id, &folder, rollbacks, &reason) {
                Ok(session) => {
                    self.sessions.insert(id, session);
                }
                Err(why) => {
                    tracing::warn!(file = %doc_path.display(), %why, "cannot rebuild a conversation");
                    self.quarantine(&doc_path, &bad_path, &reason);
                }
            }
        }
        self.current = current
            .current
            .into_iter()
            .filter(|(folder, id)| {
                self.sessions
                    .get(id)
                    .is_some_and(|s| &s.doc.folder == folder)
            })
            .collect();
    }

    /// The real folder a conversation whose document is unreadable belongs
    /// to: the one a pointer file names it for, else the only real folder
    /// this directory is known to hold, else the folder asking.
    fn owner_of(
        &self,
        id: &str,
        current: &CurrentFile,
        shared: &SharedFile,
        requester: &str,
    ) -> String {
        let named = current
            .current
            .iter()
            .find(|(_, cur)| cur.as_str() == id)
            .map(|(folder, _)| folder)
            .or_else(|| {
                shared
                    .shared
                    .iter()
                    .find(|(_, s)| s.session_id == id)
                    .map(|(folder, _)| folder)
            });
        if let Some(folder) = named {
            return folder.clone();
        }
        let known: HashSet<&String> = self
            .sessions
            .values()
            .map(|s| &s.doc.folder)
            .chain(current.current.keys())
            .chain(shared.shared.keys())
            .collect();
        match known.into_iter().collect::<Vec<_>>().as_slice() {
            [only] => (*only).clone(),
            _ => requester.to_owned(),
        }
    }

    /// Rebuilds conversation `id` from its journal: keeps the unreadable
    /// document (and any cut journal tail) aside, writes the rebuilt one,
    /// and leaves one notice.
    fn rebuild(
        &mut self,
        doc_path: &std::path::Path,
        id: &str,
        folder: &str,
        rollbacks: u64,
        reason: &str,
    ) -> Result<Session, String> {
        let rebuilt = Session::rebuild(&self.dir, id, folder, &self.agent, rollbacks)
            .map_err(|e| e.to_string())?;
        // Copy first, then replace: a crash in between leaves the bad
        // document in place (rebuilt again next time), never no document.
        let kept = durable::quarantine_copy(doc_path).map_err(|e| e.to_string())?;
        let tail = rebuilt.keep_cut_tail(now_ms()).map_err(|e| e.to_string())?;
        let mut session = rebuilt.session;
        session.save().map_err(|e| e.to_string())?;
        tracing::warn!(file = %doc_path.display(), %reason, "rebuilt a conversation from its transcript");
        let tail_note = tail
            .map(|t| {
                format!(
                    "; its transcript's unreadable tail was cut and kept as {}",
                    t.display()
                )
            })
            .unwrap_or_default();
        self.notices.push((
            Some(folder.to_owned()),
            format!(
                "conversation {id} ({:?}) had an unreadable state file ({reason}); it was rebuilt \
                 from its transcript ({} turns) and the bad file kept as {}{tail_note}; its usage \
                 totals, server response chain, approvals and rollback backup were lost",
                session.doc.title,
                session.doc.turns,
                kept.display()
            ),
        ));
        Ok(session)
    }

    fn quarantine(&mut self, doc: &std::path::Path, bad: &std::path::Path, reason: &str) {
        let mut moved = Vec::new();
        for path in [doc.to_path_buf(), doc.with_extension("jsonl")] {
            if path.exists() {
                match durable::quarantine(&path) {
                    Ok(to) => moved.push(to.display().to_string()),
                    Err(e) => moved.push(format!("(could not move {}: {e})", path.display())),
                }
            }
        }
        tracing::warn!(file = %bad.display(), %reason, "quarantined a corrupt conversation");
        self.notices.push((
            None,
            format!(
                "a conversation file was unreadable ({}: {reason}); it was moved aside to {} and a \
                 fresh conversation continues",
                bad.display(),
                moved.join(", ")
            ),
        ));
    }

    /// `folder`'s conversations, newest first.
    fn newest_first(&self, folder: &str) -> Vec<&SessionDoc> {
        let mut docs: Vec<&SessionDoc> = self
            .sessions
            .values()
            .map(|s| &s.doc)
            .filter(|d| d.folder == folder)
            .collect();
        docs.sort_by(|a, b| {
            b.updated_at
                .cmp(&a.updated_at)
                .then(b.created_at.cmp(&a.created_at))
        });
        docs
    }

    fn current_id(&self, folder: &str) -> Option<String> {
        self.current
            .get(folder)
            .cloned()
            .or_else(|| self.newest_first(folder).first().map(|d| d.id.clone()))
    }

    /// Conversation `id` of `folder` (another real folder's is not found).
    fn session(&mut self, folder: &str, id: &str) -> Result<&mut Session, StoreError> {
        self.sessions
            .get_mut(id)
            .filter(|s| s.doc.folder == folder)
            .ok_or_else(|| StoreError::NotFound(format!("no conversation {id} in this folder")))
    }

    fn set_current(&mut self, folder: &str, id: &str) -> Result<(), StoreError> {
        self.current.insert(folder.to_owned(), id.to_owned());
        let mut file: CurrentFile = self.read_pointer("current.json")?;
        if file.current.get(folder).map(String::as_str) == Some(id) {
            return Ok(());
        }
        file.current.insert(folder.to_owned(), id.to_owned());
        let bytes = serde_json::to_vec(&file).map_err(|e| StoreError::Io(e.to_string()))?;
        durable::write_atomic(&self.dir.join("current.json"), &bytes)?;
        Ok(())
    }

    fn create(&mut self, folder: &str) -> Result<String, StoreError> {
        agentx_shared::profile::create_private_dir(&self.dir)?;
        let mut id = new_id();
        while self.sessions.contains_key(&id) {
            id = new_id();
        }
        let doc = SessionDoc::new(id.clone(), folder.to_owned(), self.agent.clone(), now_ms());
        let session = Session::create(&self.dir, doc)?;
        self.sessions.insert(id.clone(), session);
        Ok(id)
    }

    fn open(&mut self, folder: &str, target: OpenTarget) -> Result<Opened, StoreError> {
        let id = match target {
            OpenTarget::Latest => match self.current_id(folder) {
                Some(id) => id,
                None => self.create(folder)?,
            },
            OpenTarget::New => self.create(folder)?,
            OpenTarget::Id(id) => {
                self.session(folder, &id)?;
                id
            }
            OpenTarget::Index(n) => {
                let docs = self.newest_first(folder);
                let count = docs.len();
                docs.get((n as usize).wrapping_sub(1))
                    .map(|d| d.id.clone())
                    .ok_or_else(|| {
                        StoreError::NotFound(format!(
                            "no conversation {n}: this folder has {count} (1 is the newest)"
                        ))
                    })?
            }
        };
        self.set_current(folder, &id)?;
        let (notices, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.notices)
            .into_iter()
            .partition(|(about, _)| about.as_deref().is_none_or(|f| f == folder));
        self.notices = others;
        let notices = notices.into_iter().map(|(_, text)| text).collect();
        let session = self.session(folder, &id)?;
        let recent = recent_exchanges(session, 3);
        Ok(Opened {
            doc: session.doc.clone(),
            recent,
            notices,
        })
    }

    fn clear(&mut self, folder: &str, session: Option<String>) -> Result<SessionDoc, StoreError> {
        let id = session.or_else(|| self.current_id(folder)).ok_or_else(|| {
            StoreError::NotFound("this folder has no conversation to clear".into())
        })?;
        if self.running.contains(&id) {
            return Err(StoreError::Invalid(
                "a turn is running on this conversation; wait for it or cancel it first".into(),
            ));
        }
        self.session(folder, &id)?;
        let removed = self
            .sessions
            .remove(&id)
            .ok_or_else(|| StoreError::NotFound(format!("no conversation {id} in this folder")))?;
        for path in [&removed.paths.doc, &removed.paths.journal] {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        durable::fsync_dir(&self.dir)?;
        self.index_hook(&id);
        let fresh = self.create(folder)?;
        self.set_current(folder, &fresh)?;
        Ok(self.session(folder, &fresh)?.doc.clone())
    }

    fn begin_turn(
        &mut self,
        folder: &str,
        session: Option<String>,
        reply: oneshot::Sender<Result<SessionDoc, StoreError>>,
    ) {
        let id = match session.or_else(|| self.current_id(folder)) {
            Some(id) => id,
            None => match self
                .create(folder)
                .and_then(|id| self.set_current(folder, &id).map(|()| id))
            {
                Ok(id) => id,
                Err(e) => {
                    let _ = reply.send(Err(e));
                    return;
                }
            },
        };
        let doc = match self.session(folder, &id) {
            Ok(s) => s.doc.clone(),
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        if self.running.contains(&id) {
            self.waiting.entry(id).or_default().push_back(reply);
            return;
        }
        self.running.insert(id);
        let _ = reply.send(Ok(doc));
    }

    fn end_turn(&mut self, id: &str) {
        // Hand the conversation to the next live waiter, if any.
        while let Some(next) = self.waiting.get_mut(id).and_then(VecDeque::pop_front) {
            let doc = match self.sessions.get(id) {
                Some(s) => Ok(s.doc.clone()),
                None => Err(StoreError::NotFound(format!(
                    "conversation {id} was cleared"
                ))),
            };
            if next.send(doc).is_ok() {
                return;
            }
        }
        self.waiting.remove(id);
        self.running.remove(id);
    }

    fn commit(&mut self, folder: &str, id: &str, change: Change) -> Result<SessionDoc, StoreError> {
        let now = now_ms();
        let session = self.session(folder, id)?;
        session.append(&change.append, now)?;
        let doc = &mut session.doc;
        if let Some(response_id) = change.response_id {
            doc.response_id = response_id;
        }
        if let Some(usage) = change.add_usage {
            doc.usage.add(&usage);
        }
        if let Some(text) = change.last_user {
            if doc.title.is_empty() {
                doc.title = title_from(&text);
            }
            doc.last_user = text;
        }
        if let Some(text) = change.last_assistant {
            doc.last_assistant = text;
        }
        if let Some(calls) = change.pending_calls {
            doc.pending_calls = calls;
        }
        if change.clear_pending_shell {
            doc.pending_shell.clear();
        }
        if let Some(text) = change.add_pending_shell {
            doc.pending_shell.push_str(&text);
        }
        if change.turn_completed {
            doc.turns += 1;
        }
        if let Some(all) = change.approve_all {
            doc.approve_all = all;
        }
        if let Some(unsent) = change.unsent {
            doc.unsent = unsent;
        }
        if let Some(open) = change.turn_open {
            doc.turn_open = open;
        }
        if let Some(marker) = change.interrupted {
            doc.interrupted = marker;
        }
        if let Some(marker) = change.failed {
            doc.failed = marker;
        }
        if let Some(marker) = change.cut_short {
            doc.cut_short = marker;
        }
        if change.checkpoint {
            let cp = doc.checkpoint(now);
            doc.checkpoints.push(cp);
            let excess = doc.checkpoints.len().saturating_sub(MAX_CHECKPOINTS);
            doc.checkpoints.drain(..excess);
        }
        let rename_only = change.append.is_empty() && change.title.is_some();
        if let Some(title) = change.title {
            doc.title = title;
        }
        if !rename_only {
            doc.updated_at = now.max(doc.updated_at);
        }
        session.save()?;
        let doc = session.doc.clone();
        self.index_hook(id);
        if change.checkpoint {
            self.write_shared(&doc)?;
        }
        Ok(doc)
    }
}

/// The last `n` (user, assistant) exchanges from the transcript.
fn recent_exchanges(session: &Session, n: usize) -> Vec<(String, String)> {
    let Ok(items) = session.transcript() else {
        return Vec::new();
    };
    let mut exchanges: Vec<(String, String)> = Vec::new();
    for item in items {
        match item {
            Item::User { text } => exchanges.push((text, String::new())),
            Item::Assistant { text } => {
                if let Some(last) = exchanges.last_mut() {
                    if !last.1.is_empty() {
                        last.1.push('\n');
                    }
                    last.1.push_str(&text);
                }
            }
            _ => {}
        }
    }
    let skip = exchanges.len().saturating_sub(n);
    exchanges.into_iter().skip(skip).collect()
}
