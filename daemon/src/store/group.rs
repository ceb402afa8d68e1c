//! The actor that owns one (folder, agent) group of conversations: loads
//! them, applies every change durably before replying, and runs one turn at
//! a time per conversation (later turns wait their turn).

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use agentx_shared::conversation::{Item, PendingCall, Usage};

use super::StoreError;
use super::durable;
use super::session::{
    Checkpoint, LoadError, MAX_CHECKPOINTS, Marker, RollbackBackup, Session, SessionDoc,
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

enum Msg {
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
}

/// Cheap, cloneable address of a group actor.
#[derive(Clone)]
pub struct GroupHandle {
    tx: mpsc::UnboundedSender<Msg>,
}

/// The right to run a turn on one conversation; dropping it lets the next
/// waiting turn start.
pub struct TurnLease {
    pub doc: SessionDoc,
    handle: GroupHandle,
}

impl Drop for TurnLease {
    fn drop(&mut self) {
        let _ = self.handle.tx.send(Msg::EndTurn(self.doc.id.clone()));
    }
}

impl GroupHandle {
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Msg) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).map_err(|_| StoreError::Closed)?;
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

    /// The shared checkpoint one-shots branch from, if any.
    pub async fn shared(&self) -> Result<Option<SharedCheckpoint>, StoreError> {
        self.ask(Msg::Shared).await
    }
}

/// Starts the actor for `dir`. `shares_checkpoint`: successful turns and
/// rollbacks here move the folder+agent's shared checkpoint (interactive
/// conversations do; one-shots never do).
pub fn spawn(dir: PathBuf, folder: String, agent: String, shares_checkpoint: bool) -> GroupHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let actor = Group {
        dir,
        folder,
        agent,
        shares_checkpoint,
        loaded: false,
        sessions: HashMap::new(),
        current: None,
        notices: Vec::new(),
        running: HashSet::new(),
        waiting: HashMap::new(),
    };
    tokio::spawn(actor.run(rx));
    GroupHandle { tx }
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
    folder: String,
    agent: String,
    shares_checkpoint: bool,
    loaded: bool,
    sessions: HashMap<String, Session>,
    current: Option<String>,
    notices: Vec<String>,
    running: HashSet<String>,
    waiting: HashMap<String, VecDeque<oneshot::Sender<Result<SessionDoc, StoreError>>>>,
}

impl Group {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        while let Some(msg) = rx.recv().await {
            // File I/O here is short and bounded (one document, one append);
            // block_in_place keeps the runtime's other workers free meanwhile.
            tokio::task::block_in_place(|| self.handle(msg));
        }
    }

    fn handle(&mut self, msg: Msg) {
        if !self.loaded {
            self.load();
        }
        match msg {
            Msg::List(reply) => {
                let _ = reply.send(self.newest_first().into_iter().cloned().collect());
            }
            Msg::Open(target, reply) => {
                let _ = reply.send(self.open(target));
            }
            Msg::Get(session, reply) => {
                let result = match session {
                    Some(id) => self.session(&id).map(|s| Some(s.doc.clone())),
                    None => Ok(self
                        .current_id()
                        .and_then(|id| self.sessions.get(&id))
                        .map(|s| s.doc.clone())),
                };
                let _ = reply.send(result);
            }
            Msg::Clear(session, reply) => {
                let _ = reply.send(self.clear(session));
            }
            Msg::BeginTurn(session, reply) => self.begin_turn(session, reply),
            Msg::EndTurn(id) => self.end_turn(&id),
            Msg::Commit(id, change, reply) => {
                let _ = reply.send(self.commit(&id, *change));
            }
            Msg::Transcript(id, reply) => {
                let result = self
                    .session(&id)
                    .and_then(|s| s.transcript().map_err(|e| StoreError::Io(e.to_string())));
                let _ = reply.send(result);
            }
            Msg::Checkpoints(session, reply) => {
                let result = self
                    .resolve(session)
                    .and_then(|id| Ok(self.session(&id)?.doc.checkpoints.clone()));
                let _ = reply.send(result);
            }
            Msg::Rollback(session, target, in_turn, reply) => {
                let result = self
                    .resolve(session)
                    .and_then(|id| self.rollback(&id, target, in_turn));
                let _ = reply.send(result);
            }
            Msg::Shared(reply) => {
                let _ = reply.send(self.read_shared());
            }
            Msg::Adopt(doc, reply) => {
                let result = agentx_shared::profile::create_private_dir(&self.dir)
                    .and_then(|()| Session::create(&self.dir, *doc))
                    .map(|session| {
                        self.sessions.insert(session.doc.id.clone(), session);
                    })
                    .map_err(StoreError::from);
                let _ = reply.send(result);
            }
        }
    }

    /// The named conversation or the current one.
    fn resolve(&self, session: Option<String>) -> Result<String, StoreError> {
        session
            .or_else(|| self.current_id())
            .ok_or_else(|| StoreError::NotFound("this folder has no conversation yet".into()))
    }

    fn rollback(
        &mut self,
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
        let session = self.session(id)?;
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

    /// Tells the search indexer a conversation changed (never waits on it).
    fn index_hook(&self, id: &str) {
        if self.shares_checkpoint {
            crate::search::touched(&self.dir, id);
        }
    }

    fn read_shared_file(&self) -> SharedFile {
        std::fs::read(self.dir.join("shared.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn read_shared(&self) -> Option<SharedCheckpoint> {
        self.read_shared_file().shared.get(&self.folder).cloned()
    }

    /// Makes `doc`'s current state the folder+agent's shared checkpoint.
    fn write_shared(&self, doc: &SessionDoc) -> Result<(), StoreError> {
        if !self.shares_checkpoint {
            return Ok(());
        }
        let mut file = self.read_shared_file();
        file.shared.insert(
            self.folder.clone(),
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

    /// Reads every conversation of this folder; quarantines unreadable ones.
    fn load(&mut self) {
        self.loaded = true;
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                self.notices
                    .push(format!("cannot read {}: {e}", self.dir.display()));
                return;
            }
        };
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
                Ok(mut session) if session.doc.folder == self.folder => {
                    if session.doc.turn_open {
                        // agentd died during this turn: what it recorded stands.
                        session.doc.turn_open = false;
                        session.doc.interrupted = Some(Marker {
                            message: "agentd stopped during the turn".into(),
                            at: now_ms(),
                            retryable: true,
                        });
                        if let Err(e) = session.save() {
                            self.notices
                                .push(format!("cannot update {}: {e}", path.display()));
                        }
                    }
                    self.sessions.insert(session.doc.id.clone(), session);
                }
                Ok(_) => {} // another folder with the same key
                Err(LoadError::Corrupt { path: bad, reason }) => {
                    self.quarantine(&path, &bad, &reason)
                }
                Err(LoadError::Io(e)) => {
                    self.notices
                        .push(format!("cannot read {}: {e}", path.display()));
                }
            }
        }
        let current: CurrentFile = std::fs::read(self.dir.join("current.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        self.current = current
            .current
            .get(&self.folder)
            .filter(|id| self.sessions.contains_key(*id))
            .cloned();
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
        self.notices.push(format!(
            "a conversation file was unreadable ({}: {reason}); it was moved aside to {} and a fresh \
             conversation continues",
            bad.display(),
            moved.join(", ")
        ));
    }

    fn newest_first(&self) -> Vec<&SessionDoc> {
        let mut docs: Vec<&SessionDoc> = self.sessions.values().map(|s| &s.doc).collect();
        docs.sort_by(|a, b| {
            b.updated_at
                .cmp(&a.updated_at)
                .then(b.created_at.cmp(&a.created_at))
        });
        docs
    }

    fn current_id(&self) -> Option<String> {
        self.current
            .clone()
            .or_else(|| self.newest_first().first().map(|d| d.id.clone()))
    }

    fn session(&mut self, id: &str) -> Result<&mut Session, StoreError> {
        self.sessions
            .get_mut(id)
            .ok_or_else(|| StoreError::NotFound(format!("no conversation {id} in this folder")))
    }

    fn set_current(&mut self, id: &str) -> Result<(), StoreError> {
        self.current = Some(id.to_owned());
        let path = self.dir.join("current.json");
        let mut file: CurrentFile = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        if file.current.get(&self.folder).map(String::as_str) == Some(id) {
            return Ok(());
        }
        file.current.insert(self.folder.clone(), id.to_owned());
        let bytes = serde_json::to_vec(&file).map_err(|e| StoreError::Io(e.to_string()))?;
        durable::write_atomic(&path, &bytes)?;
        Ok(())
    }

    fn create(&mut self) -> Result<String, StoreError> {
        agentx_shared::profile::create_private_dir(&self.dir)?;
        let id = new_id();
        let doc = SessionDoc::new(
            id.clone(),
            self.folder.clone(),
            self.agent.clone(),
            now_ms(),
        );
        let session = Session::create(&self.dir, doc)?;
        self.sessions.insert(id.clone(), session);
        Ok(id)
    }

    fn open(&mut self, target: OpenTarget) -> Result<Opened, StoreError> {
        let id = match target {
            OpenTarget::Latest => match self.current_id() {
                Some(id) => id,
                None => self.create()?,
            },
            OpenTarget::New => self.create()?,
            OpenTarget::Id(id) => {
                self.session(&id)?;
                id
            }
            OpenTarget::Index(n) => {
                let docs = self.newest_first();
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
        self.set_current(&id)?;
        let notices = std::mem::take(&mut self.notices);
        let session = self.session(&id)?;
        let recent = recent_exchanges(session, 3);
        Ok(Opened {
            doc: session.doc.clone(),
            recent,
            notices,
        })
    }

    fn clear(&mut self, session: Option<String>) -> Result<SessionDoc, StoreError> {
        let id = session.or_else(|| self.current_id()).ok_or_else(|| {
            StoreError::NotFound("this folder has no conversation to clear".into())
        })?;
        if self.running.contains(&id) {
            return Err(StoreError::Invalid(
                "a turn is running on this conversation; wait for it or cancel it first".into(),
            ));
        }
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
        let fresh = self.create()?;
        self.set_current(&fresh)?;
        Ok(self.session(&fresh)?.doc.clone())
    }

    fn begin_turn(
        &mut self,
        session: Option<String>,
        reply: oneshot::Sender<Result<SessionDoc, StoreError>>,
    ) {
        let id = match session.or_else(|| self.current_id()) {
            Some(id) => id,
            None => match self
                .create()
                .and_then(|id| self.set_current(&id).map(|()| id))
            {
                Ok(id) => id,
                Err(e) => {
                    let _ = reply.send(Err(e));
                    return;
                }
            },
        };
        let doc = match self.session(&id) {
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

    fn commit(&mut self, id: &str, change: Change) -> Result<SessionDoc, StoreError> {
        let now = now_ms();
        let session = self.session(id)?;
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

/// A one-line title from the first message.
fn title_from(text: &str) -> String {
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
