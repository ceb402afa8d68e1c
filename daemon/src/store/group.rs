//! The actor that owns one group directory `<folder-key>/<agent>`: loads its
//! conversations and applies every change durably before replying.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use agentx_shared::conversation::Item;

use super::StoreError;
use super::commits::Commits;
use super::conversation::{Conversation, ConversationDoc, LoadError, MAX_CHECKPOINTS};
use crate::durable;

mod change;
mod files;
mod handle;
mod rollback;
#[cfg(test)]
pub(super) mod seams;
mod sessions;
mod turns;
mod view;

pub use change::{
    AccountingChange, Change, NewCheckpoint, SettingsChange, ShellChange, TranscriptChange,
    TurnChange, Update,
};
pub use handle::*;

/// What a group actor keeps.
pub(super) enum Keeps {
    /// A folder's conversations: changes are announced on the store's
    /// `Commits`, and successful turns and rollbacks move the
    /// folder+agent's shared checkpoint.
    Conversations(Commits),
    /// A one-shot's private state: neither.
    OneshotState,
}

/// Starts the actor for `dir` and returns its mailbox.
/// `exclusive`: held for the actor's whole life before it touches a file,
/// so an actor started for a directory whose previous actor is still
/// finishing its last request (its caller went away) waits for it.
pub(super) fn spawn(
    dir: PathBuf,
    agent: String,
    keeps: Keeps,
    exclusive: Option<Arc<tokio::sync::Mutex<()>>>,
) -> Mailbox {
    let (shares_checkpoint, commits) = match keeps {
        Keeps::Conversations(commits) => (true, commits),
        Keeps::OneshotState => (false, Commits::default()),
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let panic = panic_note();
    let view = Arc::new(view::View::new());
    let actor = Group {
        panic: panic.clone(),
        view: Arc::clone(&view),
        dir,
        agent,
        shares_checkpoint,
        commits,
        loaded: false,
        sessions: sessions::Sessions::default(),
        current: HashMap::new(),
        notices: Vec::new(),
        running: HashSet::new(),
        openers: HashMap::new(),
        waiting: HashMap::new(),
    };
    tokio::spawn(async move {
        let _only_writer = match exclusive {
            Some(lock) => Some(lock.lock_owned().await),
            None => None,
        };
        actor.run(rx).await;
    });
    Mailbox { tx, panic, view }
}

/// An actor of its own for `dir` (a one-shot's private state).
pub fn spawn_private(dir: PathBuf, folder: String, agent: String) -> GroupHandle {
    GroupHandle::new(spawn(dir, agent, Keeps::OneshotState, None), folder)
}

fn not_in_folder(id: &str) -> StoreError {
    StoreError::NotFound(format!("no conversation {id} in this folder"))
}

/// A conversation nothing was said in yet, with nothing waiting in it.
fn is_empty(doc: &ConversationDoc) -> bool {
    doc.journal_items == 0
        && doc.title.is_empty()
        && doc.base.is_none()
        && doc.forked_from.is_none()
        && doc.pending_shell.is_empty()
        && doc.unsent.is_empty()
        && doc.rollback.is_none()
        && doc.older_rollbacks.is_empty()
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

/// The actor's state. Real folders whose keys collide (`/a/b-c`, `/a/b/c`)
/// share the directory and so share this one actor: it is the only writer of
/// the directory's `current.json` and `shared.json` (both are
/// read-modify-written, per real folder inside), which is simpler than
/// locking files across actors. Every request names its real folder and only
/// ever sees that folder's conversations.
struct Group {
    dir: PathBuf,
    agent: String,
    shares_checkpoint: bool,
    /// Where its changes are announced (nowhere for a one-shot's state).
    commits: Commits,
    loaded: bool,
    /// Every conversation of the directory, whatever its real folder.
    sessions: sessions::Sessions,
    /// The current conversation per real folder.
    current: HashMap<String, String>,
    /// Notices for the next open: (real folder, or every folder; text).
    notices: Vec<(Option<String>, String)>,
    running: HashSet<String>,
    /// The client process that opened each conversation (see `sweep_empty`).
    openers: HashMap<String, Opener>,
    waiting: HashMap<String, VecDeque<oneshot::Sender<Result<ConversationDoc, StoreError>>>>,
    /// Where a caught panic's message goes for the request that hit it.
    panic: PanicNote,
    /// What status reads, published after each request.
    view: Arc<view::View>,
}

impl Group {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Envelope>) {
        while let Some((folder, msg, seq)) = rx.recv().await {
            // File I/O here is short and bounded (one document, one append);
            // block_in_place keeps the runtime's other workers free meanwhile.
            tokio::task::block_in_place(|| {
                self.supervised(&folder, msg, seq);
                #[cfg(test)]
                seams::maybe_hold(&folder, seams::Hold::Publishing);
                self.publish(seq);
            });
        }
        // Every handle is gone: the conversations are released (they hold
        // no open file; the next request loads them again).
    }

    /// Handles one request; a panic (a bug) fails only that request: it is
    /// logged with the folder and agent, its caller gets INTERNAL naming
    /// the cause, and what the actor had loaded is read again from disk
    /// (every change is durable before its reply). Turns that hold a lease
    /// keep it.
    fn supervised(&mut self, folder: &str, msg: Msg, seq: u64) {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            #[cfg(test)]
            seams::maybe_panic(folder);
            #[cfg(test)]
            seams::maybe_hold(folder, seams::Hold::Handling);
            self.handle(folder, msg)
        }));
        let Err(payload) = caught else {
            return;
        };
        let cause = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        tracing::error!(
            folder,
            agent = %self.agent,
            dir = %self.dir.display(),
            "a conversation request panicked ({cause}); reloading the folder's conversations from disk"
        );
        self.panic.send_replace((seq, cause));
        self.loaded = false;
        self.sessions.clear();
        self.current.clear();
    }

    /// Publishes what request `seq` left for [`GroupHandle::peek`].
    fn publish(&mut self, seq: u64) {
        let touched = self.sessions.take_touched();
        let sessions = &self.sessions;
        self.view
            .publish(seq, self.loaded, &self.current, &touched, |id| {
                sessions.get(id).map(|s| &s.doc)
            });
    }

    /// Applies one request for `folder` and sends its reply.
    fn handle(&mut self, folder: &str, msg: Msg) {
        if !self.loaded {
            self.load(folder);
        }
        match msg {
            Msg::List(reply) => {
                let _ = reply.send(self.newest_first(folder).into_iter().cloned().collect());
            }
            Msg::Open(target, opener, reply) => {
                let _ = reply.send(self.open(folder, target, opener));
            }
            Msg::Get(session, reply) => {
                let _ = reply.send(self.get(folder, session));
            }
            Msg::Clear(session, reply) => {
                let _ = reply.send(self.clear(folder, session));
            }
            Msg::BeginTurn(session, reply) => self.begin_turn(folder, session, reply),
            Msg::EndTurn(id) => self.end_turn(&id),
            Msg::Commit(id, change, reply) => {
                let _ = reply.send(self.commit(folder, &id, *change));
            }
            Msg::UpdateCall(id, index, call, reply) => {
                let result = self.durably(folder, &id, |s| Ok(s.update_call(index, *call)?));
                let _ = reply.send(result);
            }
            Msg::Transcript(id, reply) => {
                let result = self.session(folder, &id).and_then(|s| {
                    s.transcript().map_err(|e| match e {
                        LoadError::Branch(why) => StoreError::Moved(why),
                        e => StoreError::unreadable(e),
                    })
                });
                let _ = reply.send(result);
            }
            Msg::TranscriptTail(id, enough, reply) => {
                let result = self.session(folder, &id).and_then(|s| {
                    s.transcript_tail(|read| enough(read)).map_err(|e| match e {
                        LoadError::Branch(why) => StoreError::Moved(why),
                        e => StoreError::unreadable(e),
                    })
                });
                let _ = reply.send(result);
            }
            Msg::Checkpoints(session, reply) => {
                let result = self.resolve(folder, session).and_then(|id| {
                    let doc = &self.session(folder, &id)?.doc;
                    Ok((doc.checkpoints.clone(), doc.head()))
                });
                let _ = reply.send(result);
            }
            Msg::Rollback(session, target, expect, by, reply) => {
                let result = self
                    .resolve(folder, session)
                    .and_then(|id| self.rollback(folder, &id, target, &expect, by));
                let _ = reply.send(result);
            }
            Msg::Shared(reply) => {
                let _ = reply.send(self.read_shared(folder));
            }
            Msg::TryBeginTurn(id, reply) => {
                let _ = reply.send(self.try_begin_turn(folder, id));
            }
            Msg::Absorb(id, pulled, reply) => {
                let _ = reply.send(self.absorb(folder, &id, *pulled));
            }
            Msg::Repoint(from, to, reply) => {
                let _ = reply.send(self.repoint(folder, &from, &to));
            }
            Msg::Adopt(doc, reply) => {
                let _ = reply.send(self.adopt(folder, *doc));
            }
        }
    }

    /// The named conversation's state, or the current one's (`None` when
    /// the folder has no current conversation).
    fn get(
        &mut self,
        folder: &str,
        session: Option<String>,
    ) -> Result<Option<ConversationDoc>, StoreError> {
        match session {
            Some(id) => self.session_ref(folder, &id).map(|s| Some(s.doc.clone())),
            None => Ok(self
                .current_id(folder)
                .and_then(|id| self.sessions.get(&id))
                .map(|s| s.doc.clone())),
        }
    }

    /// Makes conversation `id` equal the remote's copy `pulled`.
    fn absorb(
        &mut self,
        folder: &str,
        id: &str,
        pulled: super::pulled::Pulled,
    ) -> Result<ConversationDoc, StoreError> {
        let doc = self.durably(folder, id, |s| {
            super::pulled::apply(s, pulled)?;
            Ok(s.doc.clone())
        })?;
        self.index_hook(id);
        Ok(doc)
    }

    /// Makes `to` current where `from` is.
    fn repoint(&mut self, folder: &str, from: &str, to: &str) -> Result<(), StoreError> {
        if self.current_id(folder).as_deref() != Some(from) {
            return Ok(());
        }
        self.session(folder, to)?;
        self.set_current(folder, to)
    }

    /// When this group's writes reach the disk: a one-shot's state (never
    /// shared, deleted when the one-shot succeeds) waits until it is kept
    /// ([`crate::store::Store::finish_oneshot`]).
    fn sync(&self) -> durable::Sync {
        if self.shares_checkpoint {
            durable::Sync::Now
        } else {
            durable::Sync::Later
        }
    }

    /// Takes in `doc` as a new conversation of `folder`.
    fn adopt(&mut self, folder: &str, doc: ConversationDoc) -> Result<(), StoreError> {
        if doc.folder != folder {
            return Err(StoreError::Invalid(format!(
                "conversation {} belongs to {}, not {folder}",
                doc.id, doc.folder
            )));
        }
        let session = agentx_shared::profile::create_private_dir(&self.dir)
            .and_then(|()| Conversation::create_as(&self.dir, doc, self.sync()))?;
        let id = session.doc.id.clone();
        self.sessions.insert(id.clone(), session);
        self.index_hook(&id);
        Ok(())
    }

    /// The named conversation or the current one.
    fn resolve(&self, folder: &str, session: Option<String>) -> Result<String, StoreError> {
        session
            .or_else(|| self.current_id(folder))
            .ok_or_else(|| StoreError::NotFound("this folder has no conversation yet".into()))
    }

    /// Announces that a conversation changed (to the search indexer and
    /// the remote pusher, never waiting on either).
    fn index_hook(&self, id: &str) {
        self.commits.announce(&self.dir, id);
    }

    /// `folder`'s conversations, newest first.
    /// `folder`'s conversations, newest first; an empty one only while it
    /// is the folder's current one (`/new` and `/clear` leave none behind).
    fn newest_first(&self, folder: &str) -> Vec<&ConversationDoc> {
        let current = self.current.get(folder);
        let mut docs: Vec<&ConversationDoc> = self
            .sessions
            .values()
            .map(|s| &s.doc)
            .filter(|d| d.folder == folder)
            .filter(|d| !is_empty(d) || current == Some(&d.id))
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
    fn session(&mut self, folder: &str, id: &str) -> Result<&mut Conversation, StoreError> {
        self.sessions
            .get_mut(id)
            .filter(|s| s.doc.folder == folder)
            .ok_or_else(|| not_in_folder(id))
    }

    /// [`Group::session`] to read (not counted as a change).
    fn session_ref(&self, folder: &str, id: &str) -> Result<&Conversation, StoreError> {
        self.sessions
            .get(id)
            .filter(|s| s.doc.folder == folder)
            .ok_or_else(|| not_in_folder(id))
    }

    /// Runs `f`, a change to conversation `id` of `folder`. When it fails
    /// the conversation is read again from disk: a change that could not be
    /// made durable (a full disk, say) may have moved memory on — a journal
    /// append counted, a document edited but not saved, a rollback half
    /// done, a call's state — and memory must be what the files say, which
    /// is what the next request is built from.
    fn durably<T>(
        &mut self,
        folder: &str,
        id: &str,
        f: impl FnOnce(&mut Conversation) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let result = f(self.session(folder, id)?);
        if result.is_err() {
            self.reload(id);
        }
        result
    }

    /// Reads conversation `id` again from its files; when that fails too,
    /// the whole directory is read again at the next request.
    fn reload(&mut self, id: &str) {
        let sync = self.sync();
        let Some(session) = self.sessions.get_mut(id) else {
            return;
        };
        match Conversation::load(&session.paths.doc) {
            Ok(mut fresh) => {
                fresh.set_sync(sync);
                *session = fresh;
            }
            Err(e) => {
                tracing::error!(
                    dir = %self.dir.display(),
                    "conversation {id} cannot be read again after a failed write ({e}); \
                     reloading the folder's conversations"
                );
                self.loaded = false;
                self.sessions.clear();
                self.current.clear();
            }
        }
    }

    fn set_current(&mut self, folder: &str, id: &str) -> Result<(), StoreError> {
        // On disk first: a failed write leaves the pointer as it was.
        self.write_current(folder, id)?;
        self.current.insert(folder.to_owned(), id.to_owned());
        // Conversations left behind go if nothing was ever said in them.
        self.sweep_empty(folder);
        Ok(())
    }

    /// Removes `folder`'s conversations in which nothing was ever said,
    /// except the current one, one a turn holds, and one a client that
    /// still runs opened (two `agentx new` in one folder both keep theirs);
    /// a failure only leaves one (unlisted) where it was.
    fn sweep_empty(&mut self, folder: &str) {
        let current = self.current.get(folder);
        let gone: Vec<String> = self
            .sessions
            .iter()
            .filter(|(id, s)| {
                s.doc.folder == folder
                    && is_empty(&s.doc)
                    && current != Some(*id)
                    && !self.running.contains(*id)
                    && !self.openers.get(*id).is_some_and(Opener::alive)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.drop_empty(&id);
        }
    }

    fn drop_empty(&mut self, id: &str) {
        self.openers.remove(id);
        let Some(gone) = self.sessions.remove(id) else {
            return;
        };
        for path in [&gone.paths.doc, &gone.paths.journal] {
            if let Err(e) = std::fs::remove_file(path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!("cannot remove empty conversation {id}: {e}");
            }
        }
        let _ = durable::fsync_dir(&self.dir);
        self.index_hook(id);
    }

    /// Writes `current.json` saying `id` is `folder`'s current conversation.
    fn write_current(&mut self, folder: &str, id: &str) -> Result<(), StoreError> {
        let mut file: CurrentFile = self.read_pointer("current.json")?;
        if file.current.get(folder).map(String::as_str) == Some(id) {
            return Ok(());
        }
        file.current.insert(folder.to_owned(), id.to_owned());
        let bytes = serde_json::to_vec(&file).map_err(StoreError::encode)?;
        durable::write_atomic(&self.dir.join("current.json"), &bytes)?;
        Ok(())
    }

    fn create(&mut self, folder: &str) -> Result<String, StoreError> {
        agentx_shared::profile::create_private_dir(&self.dir)?;
        let mut id = new_id();
        while self.sessions.contains_key(&id) {
            id = new_id();
        }
        let doc = ConversationDoc::new(
            id.clone(),
            folder.to_owned(),
            self.agent.clone(),
            agentx_shared::time::now_ms(),
        );
        let session = Conversation::create_as(&self.dir, doc, self.sync())?;
        self.sessions.insert(id.clone(), session);
        Ok(id)
    }

    fn open(
        &mut self,
        folder: &str,
        target: OpenTarget,
        opener: Option<Opener>,
    ) -> Result<Opened, StoreError> {
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
        if let Some(opener) = opener {
            self.openers.insert(id.clone(), opener);
        }
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

    fn clear(
        &mut self,
        folder: &str,
        session: Option<String>,
    ) -> Result<ConversationDoc, StoreError> {
        let id = session.or_else(|| self.current_id(folder)).ok_or_else(|| {
            StoreError::NotFound("this folder has no conversation to clear".into())
        })?;
        if self.running.contains(&id) {
            return Err(StoreError::Invalid(
                "a turn is running on this conversation; wait for it or cancel it first".into(),
            ));
        }
        // Kept in memory until its files are gone: a failure on the way
        // leaves memory as the disk has it.
        self.session(folder, &id)?;
        let removed = self
            .sessions
            .get(&id)
            .ok_or_else(|| StoreError::NotFound(format!("no conversation {id} in this folder")))?;
        let mut paths = vec![removed.paths.doc.clone(), removed.paths.journal.clone()];
        paths.push(removed.paths.rollback_tail.clone());
        paths.push(removed.paths.calls.clone());
        let backups = removed.doc.rollback.iter().map(|b| &**b);
        paths.extend(
            backups
                .chain(&removed.doc.older_rollbacks)
                .map(|b| removed.paths.tail_of(b)),
        );
        let prefix = format!("{id}.rollback-");
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            paths.extend(entries.flatten().map(|e| e.path()).filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".jsonl"))
            }));
        }
        let doc_path = removed.paths.doc.clone();
        // The folder's branch point must not name it any more: one-shots
        // would go on sending its turns (by response id) to the model.
        self.forget_shared(&id)?;
        for path in &paths {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    if !doc_path.exists() {
                        self.sessions.remove(&id);
                    }
                    return Err(e.into());
                }
            }
        }
        self.sessions.remove(&id);
        durable::fsync_dir(&self.dir)?;
        self.index_hook(&id);
        let fresh = self.create(folder)?;
        self.set_current(folder, &fresh)?;
        Ok(self.session(folder, &fresh)?.doc.clone())
    }

    fn commit(
        &mut self,
        folder: &str,
        id: &str,
        change: Change,
    ) -> Result<ConversationDoc, StoreError> {
        let now = agentx_shared::time::now_ms();
        let rename_only = change.renames_only();
        let (doc, checkpointed) = self.durably(folder, id, |session| {
            session.append(&change.transcript.append, now)?;
            let doc = &mut session.doc;
            let checkpoint = change::apply(change, doc);
            let checkpointed = checkpoint.is_some();
            if let Some(NewCheckpoint { note }) = checkpoint {
                let mut cp = doc.checkpoint(now);
                cp.note = note;
                doc.checkpoints.push(cp);
                let excess = doc.checkpoints.len().saturating_sub(MAX_CHECKPOINTS);
                doc.checkpoints.drain(..excess);
            }
            if !rename_only {
                doc.updated_at = now.max(doc.updated_at);
            }
            session.save()?;
            Ok((session.doc.clone(), checkpointed))
        })?;
        self.index_hook(id);
        if checkpointed {
            self.write_shared(&doc)?;
        }
        Ok(doc)
    }
}

/// The last `n` exchanges from the transcript, with the compaction lines
/// that fall among them: read from the journal's end, as far back as the
/// exchange before them (a resume costs what it shows).
fn recent_exchanges(session: &Conversation, n: usize) -> Vec<Recent> {
    let enough = |newest_first: &mut dyn Iterator<Item = &Item>| {
        newest_first
            .filter(|i| matches!(i, Item::User { .. }))
            .count()
            > n
    };
    let Ok(items) = session.transcript_tail(enough) else {
        return Vec::new();
    };
    let mut out: Vec<Recent> = Vec::new();
    for item in items {
        match item {
            Item::User { text } => out.push(Recent::Exchange {
                user: text,
                assistant: String::new(),
            }),
            Item::Assistant { text } => {
                if let Some(Recent::Exchange { assistant, .. }) = out.last_mut() {
                    if !assistant.is_empty() {
                        assistant.push('\n');
                    }
                    assistant.push_str(&text);
                }
            }
            Item::Compaction {
                tokens_before,
                tokens_after,
                ..
            } => out.push(Recent::Compacted(Item::compaction_line(
                tokens_before,
                tokens_after,
            ))),
            _ => {}
        }
    }
    let exchanges = out
        .iter()
        .filter(|r| matches!(r, Recent::Exchange { .. }))
        .count();
    let mut skip = exchanges.saturating_sub(n);
    let mut kept = Vec::new();
    for entry in out {
        if skip > 0 {
            if matches!(entry, Recent::Exchange { .. }) {
                skip -= 1;
            }
            continue;
        }
        kept.push(entry);
    }
    kept
}
