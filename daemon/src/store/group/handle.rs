//! The request side of a group actor: what callers send (`Msg`,
//! targets), the handle that sends it, and the lease a running turn holds.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use agentx_shared::conversation::{Item, PendingCall};

use super::change::Change;
use crate::store::StoreError;
use crate::store::conversation::{Checkpoint, ConversationDoc};

/// A fresh conversation id: time-ordered, unique, safe as a file name.
pub(in crate::store) fn new_id() -> String {
    use std::hash::{BuildHasher as _, RandomState};
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let salt = RandomState::new().hash_one((nanos, std::process::id()));
    format!(
        "{:011x}-{:06x}",
        agentx_shared::time::now_ms(),
        salt & 0xff_ffff
    )
}

/// A client process that opened a conversation, told apart from a later
/// process with the same pid by its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opener {
    pid: u32,
    started: u64,
}

impl Opener {
    /// Process `pid`, if it runs.
    pub fn of(pid: u32) -> Option<Self> {
        crate::store::conversation::process_start(pid).map(|started| Self { pid, started })
    }

    pub fn alive(&self) -> bool {
        crate::store::conversation::process_start(self.pid) == Some(self.started)
    }
}

pub enum OpenTarget {
    Latest,
    /// 1 is the newest.
    Index(u32),
    Id(String),
    New,
}

/// One entry of a resumed conversation's replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recent {
    Exchange {
        user: String,
        assistant: String,
    },
    /// The context was compacted here: the line that says so.
    Compacted(String),
}

/// What opening a conversation returns.
pub struct Opened {
    pub doc: ConversationDoc,
    /// The last few exchanges (and compaction lines among them), oldest first.
    pub recent: Vec<Recent>,
    pub notices: Vec<String>,
}

/// What a rollback's caller saw of the conversation: refused (as moved)
/// when it no longer holds. A compare and swap, so rollbacks started
/// together never stack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expect {
    /// The head of the listing the caller chose from.
    pub head: Option<String>,
    /// The conversation's line has not moved (a turn, a rollback) since
    /// this instant (ms): a command line's start.
    pub unchanged_since: Option<i64>,
}

pub enum RollbackTarget {
    /// 1 is the newest checkpoint.
    Index(u32),
    /// The checkpoint with this id (see `Checkpoint::id`).
    Id(String),
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

/// Who asks for a rollback: a client (refused while a turn holds the
/// conversation) or the turn that holds it (a retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollbackBy {
    Client,
    HoldingTurn,
}

/// Says, of the transcript items read so far (newest first), whether they
/// are enough.
pub type Enough = Box<dyn Fn(&mut dyn Iterator<Item = &Item>) -> bool + Send>;

pub(in crate::store) enum Msg {
    List(oneshot::Sender<Vec<ConversationDoc>>),
    /// With the client process that opens it, if known.
    Open(
        OpenTarget,
        Option<Opener>,
        oneshot::Sender<Result<Opened, StoreError>>,
    ),
    Get(
        Option<String>,
        oneshot::Sender<Result<Option<ConversationDoc>, StoreError>>,
    ),
    Clear(
        Option<String>,
        oneshot::Sender<Result<ConversationDoc, StoreError>>,
    ),
    BeginTurn(
        Option<String>,
        oneshot::Sender<Result<ConversationDoc, StoreError>>,
    ),
    EndTurn(String),
    Commit(
        String,
        Box<Change>,
        oneshot::Sender<Result<ConversationDoc, StoreError>>,
    ),
    /// Where one pending tool call stands now (one append, not a save).
    UpdateCall(
        String,
        usize,
        Box<PendingCall>,
        oneshot::Sender<Result<(), StoreError>>,
    ),
    Transcript(String, oneshot::Sender<Result<Vec<Item>, StoreError>>),
    TranscriptTail(
        String,
        Enough,
        oneshot::Sender<Result<Vec<Item>, StoreError>>,
    ),
    /// The checkpoints and the conversation's head (`ConversationDoc::head`).
    Checkpoints(
        Option<String>,
        oneshot::Sender<Result<(Vec<Checkpoint>, String), StoreError>>,
    ),
    /// What the caller expects of the conversation (refused when it
    /// moved), and who asks.
    Rollback(
        Option<String>,
        RollbackTarget,
        Expect,
        RollbackBy,
        oneshot::Sender<Result<ConversationDoc, StoreError>>,
    ),
    Shared(oneshot::Sender<Option<SharedCheckpoint>>),
    Adopt(
        Box<ConversationDoc>,
        oneshot::Sender<Result<(), StoreError>>,
    ),
    /// Like `BeginTurn` for one conversation, but never waits: `None` when
    /// a turn runs on it.
    TryBeginTurn(
        String,
        oneshot::Sender<Result<Option<ConversationDoc>, StoreError>>,
    ),
    /// Makes a conversation equal the remote's copy (asked under its lease).
    Absorb(
        String,
        Box<crate::store::pulled::Pulled>,
        oneshot::Sender<Result<ConversationDoc, StoreError>>,
    ),
    /// Makes `to` current where `from` is.
    Repoint(String, String, oneshot::Sender<Result<(), StoreError>>),
}

/// A request and the real folder it is about.
/// A request, the real folder it is about, and its number.
pub(in crate::store) type Envelope = (String, Msg, u64);

/// The actor's last caught panic: the number of the request it hit and its
/// message (a request whose reply was dropped while the actor lives on
/// waits here for its cause).
pub(in crate::store) type PanicNote = std::sync::Arc<tokio::sync::watch::Sender<(u64, String)>>;

/// A note no request has hit yet.
pub(in crate::store) fn panic_note() -> PanicNote {
    std::sync::Arc::new(tokio::sync::watch::Sender::new((0, String::new())))
}

/// The actor's mailbox; the registry in `Store` keeps weak ones.
#[derive(Clone)]
pub(in crate::store) struct Mailbox {
    pub(in crate::store) tx: mpsc::UnboundedSender<Envelope>,
    pub(in crate::store) panic: PanicNote,
    pub(in crate::store) view: std::sync::Arc<super::view::View>,
}

/// A mailbox that does not keep its actor alive.
pub(in crate::store) struct WeakMailbox {
    tx: mpsc::WeakUnboundedSender<Envelope>,
    panic: PanicNote,
    view: std::sync::Arc<super::view::View>,
}

impl Mailbox {
    pub(in crate::store) fn downgrade(&self) -> WeakMailbox {
        WeakMailbox {
            tx: self.tx.downgrade(),
            panic: self.panic.clone(),
            view: self.view.clone(),
        }
    }
}

impl WeakMailbox {
    /// The actor's mailbox, while the actor runs.
    pub(in crate::store) fn upgrade(&self) -> Option<Mailbox> {
        let tx = self.tx.upgrade().filter(|tx| !tx.is_closed())?;
        Some(Mailbox {
            tx,
            panic: self.panic.clone(),
            view: self.view.clone(),
        })
    }

    pub(in crate::store) fn strong_count(&self) -> usize {
        self.tx.strong_count()
    }
}

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
    pub doc: ConversationDoc,
    handle: GroupHandle,
}

impl Drop for TurnLease {
    fn drop(&mut self) {
        let _ = self.handle.send(Msg::EndTurn(self.doc.id.clone()));
    }
}

impl GroupHandle {
    pub(in crate::store) fn new(tx: Mailbox, folder: String) -> Self {
        Self { tx, folder }
    }

    /// Sends `msg`; returns its number (numbers reach the actor in
    /// increasing order).
    fn send(&self, msg: Msg) -> Result<u64, StoreError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        self.tx.view.in_order(|| {
            let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.tx
                .tx
                .send((self.folder.clone(), msg, seq))
                .map_err(|_| StoreError::Closed)?;
            Ok(seq)
        })
    }

    /// Sends a request and waits for its answer, and for the actor to
    /// publish what it changed: a read through [`GroupHandle::peek`] made
    /// after this returns sees it.
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Msg) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        let seq = self.send(make(tx))?;
        match rx.await {
            Ok(answer) => {
                self.tx.view.published(seq, self.tx.tx.closed()).await;
                Ok(answer)
            }
            Err(_) => Err(self.why_unanswered(seq).await),
        }
    }

    /// Request `seq` went unanswered: the actor ended (agentd stops), or it
    /// caught a panic handling this request and lives on (its reply is
    /// dropped while unwinding, a moment before the cause is noted).
    async fn why_unanswered(&self, seq: u64) -> StoreError {
        if self.tx.tx.is_closed() {
            return StoreError::Closed;
        }
        let mut note = self.tx.panic.subscribe();
        let noted = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            note.wait_for(|(hit, _)| *hit == seq),
        )
        .await;
        match noted {
            Ok(Ok(cause)) => StoreError::Panicked(cause.1.clone()),
            _ if self.tx.tx.is_closed() => StoreError::Closed,
            _ => StoreError::Panicked("an internal error (see agentd's log)".to_owned()),
        }
    }

    /// Conversations of this folder and agent, newest first.
    pub async fn list(&self) -> Result<Vec<ConversationDoc>, StoreError> {
        self.ask(Msg::List).await
    }

    pub async fn open(&self, target: OpenTarget) -> Result<Opened, StoreError> {
        self.open_for(target, None).await
    }

    /// Opens a conversation for client process `pid`: while it runs, the
    /// conversation is never removed for being empty (another client's
    /// `new` in the same folder leaves it alone).
    pub async fn open_for(
        &self,
        target: OpenTarget,
        pid: Option<u32>,
    ) -> Result<Opened, StoreError> {
        let opener = pid.and_then(Opener::of);
        self.ask(|tx| Msg::Open(target, opener, tx)).await?
    }

    /// The named conversation, or the current one (`None` when there is none).
    pub async fn get(
        &self,
        session: Option<String>,
    ) -> Result<Option<ConversationDoc>, StoreError> {
        self.ask(|tx| Msg::Get(session, tx)).await?
    }

    /// [`GroupHandle::get`] without waiting behind a request the actor is
    /// handling (another client's commit and its fsyncs): the conversation
    /// as the last finished request left it — on disk, since every change
    /// is durable before its request finishes, and including every change
    /// whose request returned to its caller. The first read of a
    /// conversation asks the actor.
    pub async fn peek(
        &self,
        session: Option<String>,
    ) -> Result<Option<ConversationDoc>, StoreError> {
        match self.tx.view.peek(&self.folder, session.as_deref()) {
            Some(found) => Ok(found),
            None => self.get(session).await,
        }
    }

    /// Deletes a conversation's files and returns the fresh one replacing it.
    pub async fn clear(&self, session: Option<String>) -> Result<ConversationDoc, StoreError> {
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
    pub async fn commit(
        &self,
        session: &str,
        change: Change,
    ) -> Result<ConversationDoc, StoreError> {
        self.ask(|tx| Msg::Commit(session.to_owned(), Box::new(change), tx))
            .await?
    }

    /// Records durably where pending call `index` stands now; costs one
    /// append whatever the number of pending calls.
    pub async fn update_call(
        &self,
        session: &str,
        index: usize,
        call: PendingCall,
    ) -> Result<(), StoreError> {
        self.ask(|tx| Msg::UpdateCall(session.to_owned(), index, Box::new(call), tx))
            .await?
    }

    /// The committed local transcript.
    pub async fn transcript(&self, session: &str) -> Result<Vec<Item>, StoreError> {
        self.ask(|tx| Msg::Transcript(session.to_owned(), tx))
            .await?
    }

    /// The end of the committed local transcript, oldest first: read
    /// backwards until `enough` says so of what was read (newest first).
    pub async fn transcript_tail(
        &self,
        session: &str,
        enough: Enough,
    ) -> Result<Vec<Item>, StoreError> {
        self.ask(|tx| Msg::TranscriptTail(session.to_owned(), enough, tx))
            .await?
    }

    /// Checkpoints, oldest first, and the conversation's head then.
    pub async fn checkpoints(
        &self,
        session: Option<String>,
    ) -> Result<(Vec<Checkpoint>, String), StoreError> {
        self.ask(|tx| Msg::Checkpoints(session, tx)).await?
    }

    /// Restores a checkpoint (or undoes the last rollback); returns the new state.
    pub async fn rollback(
        &self,
        session: Option<String>,
        target: RollbackTarget,
        expect: Expect,
    ) -> Result<ConversationDoc, StoreError> {
        self.ask(|tx| Msg::Rollback(session, target, expect, RollbackBy::Client, tx))
            .await?
    }

    /// A rollback by the turn that holds the conversation (a retry).
    pub async fn rollback_in_turn(
        &self,
        lease: &TurnLease,
        target: RollbackTarget,
    ) -> Result<ConversationDoc, StoreError> {
        let id = Some(lease.doc.id.clone());
        self.ask(|tx| Msg::Rollback(id, target, Expect::default(), RollbackBy::HoldingTurn, tx))
            .await?
    }

    /// Makes a prepared conversation document durable in this group.
    pub async fn adopt(&self, doc: ConversationDoc) -> Result<(), StoreError> {
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
        pulled: crate::store::pulled::Pulled,
    ) -> Result<ConversationDoc, StoreError> {
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
