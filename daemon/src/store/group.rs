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
use super::session::{LoadError, Session, SessionDoc};

fn now_ms() -> i64 {
    agentx_shared::time::unix_ms(SystemTime::now())
}

/// A fresh conversation id: time-ordered, unique, safe as a file name.
fn new_id() -> String {
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
        Change,
        oneshot::Sender<Result<SessionDoc, StoreError>>,
    ),
    Transcript(String, oneshot::Sender<Result<Vec<Item>, StoreError>>),
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
        self.ask(|tx| Msg::Commit(session.to_owned(), change, tx))
            .await?
    }

    /// The committed local transcript.
    pub async fn transcript(&self, session: &str) -> Result<Vec<Item>, StoreError> {
        self.ask(|tx| Msg::Transcript(session.to_owned(), tx))
            .await?
    }
}

pub fn spawn(dir: PathBuf, folder: String, agent: String) -> GroupHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let actor = Group {
        dir,
        folder,
        agent,
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

struct Group {
    dir: PathBuf,
    folder: String,
    agent: String,
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
                let _ = reply.send(self.commit(&id, change));
            }
            Msg::Transcript(id, reply) => {
                let result = self
                    .session(&id)
                    .and_then(|s| s.transcript().map_err(|e| StoreError::Io(e.to_string())));
                let _ = reply.send(result);
            }
        }
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
            if !name.ends_with(".json") || name == "current.json" || name.starts_with('.') {
                continue;
            }
            match Session::load(&path) {
                Ok(session) if session.doc.folder == self.folder => {
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
        doc.updated_at = now.max(doc.updated_at);
        session.save()?;
        Ok(session.doc.clone())
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
