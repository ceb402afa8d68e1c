//! One turn from start to finish around the engine: the conversation leased, other machines'
//! turns pulled, the folder snapshotted before (tools wait for it) and after, one-shots settled.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use crate::shutdown::Shutdown;
use crate::snapshot::service::Snapshots;
use crate::snapshot::{Owner, Phase, SnapError};
use crate::store::oneshot::Oneshot;
use crate::store::{GroupHandle, Store, StoreError, TurnLease};
use crate::turn::{Engine, Event, Input, Io, Mode, Status, TurnSpec};

/// Room for events a slow client has not read yet.
const EVENT_BACKLOG: usize = 512;

/// Starts turns: owns what a turn needs beyond the engine.
#[derive(Clone)]
pub struct Runner {
    pub store: Arc<Store>,
    pub engine: Arc<Engine>,
    pub snapshots: Snapshots,
    /// The remote store, pulled from before each turn (`None`: off).
    pub remote: Option<Arc<crate::remote::Remote>>,
}

/// A turn, validated, ready to start.
pub struct Start {
    pub group: GroupHandle,
    /// The conversation to continue (`None`: the folder's current one).
    pub session: Option<String>,
    pub spec: TurnSpec,
    pub oneshot: Option<Oneshot>,
    /// Set (before the cancel) when the client went away rather than
    /// cancelling: what was cut short is recorded as such.
    pub client_gone: Arc<std::sync::atomic::AtomicBool>,
}

impl Runner {
    /// Runs the turn in the background. Its events come on the returned
    /// channel, `Finished` last (after the after-snapshot); an error means
    /// the turn could not begin. `cancel` ends it (as does agentd stopping).
    pub fn start(
        &self,
        start: Start,
        inputs: mpsc::Receiver<Input>,
        cancel: Arc<watch::Sender<bool>>,
    ) -> mpsc::Receiver<Result<Event, StoreError>> {
        let (out, rx) = mpsc::channel(EVENT_BACKLOG);
        // Subscribed before anything waits on the channel closing.
        let io = (inputs, cancel.subscribe());
        tokio::spawn(end_on_stop(
            self.engine.shutdown.clone(),
            Arc::clone(&cancel),
        ));
        tokio::spawn(self.clone().run(start, io, cancel, out));
        rx
    }

    async fn run(
        self,
        start: Start,
        (inputs, cancelled): (mpsc::Receiver<Input>, watch::Receiver<bool>),
        cancel: Arc<watch::Sender<bool>>,
        out: mpsc::Sender<Result<Event, StoreError>>,
    ) {
        let Start {
            group,
            session,
            spec,
            oneshot,
            client_gone,
        } = start;
        // Counted from here to its end: a client of another version does
        // not replace agentd under it.
        let _held = self.engine.shutdown.turn();
        let Some(lease) = self.lease(&group, session, oneshot.as_ref(), &out).await else {
            return;
        };
        // Cancelled (or its client gone) while it waited for another turn
        // of the conversation: it never began, and leaves everything as it
        // was — no marker, no snapshot pair, nothing for `retry`.
        if *cancelled.borrow() {
            drop(lease);
            if let Some(o) = &oneshot {
                self.store.finish_oneshot(o, false).await;
            }
            let _ = out.send(Ok(never_began())).await;
            return;
        }
        // Other machines' turns first (remote store); may continue a fork.
        let (lease, notes) = match &self.remote {
            Some(remote) => crate::remote::pull::before_turn(remote, &group, lease).await,
            None => (lease, Vec::new()),
        };
        for note in notes {
            let _ = out.send(Ok(Event::Notice(note))).await;
        }
        let folder = spec.folder.clone();
        let session_id = lease.doc.id.clone();
        // Restores of this folder refuse until the turn (and its "after"
        // snapshot) is over.
        let _busy = self
            .snapshots
            .busy()
            .enter(&folder, busy_with(oneshot.as_ref(), &session_id));
        let owner = owners(session_id, &spec.mode);
        let (events, mut engine_events) = mpsc::channel::<Event>(EVENT_BACKLOG);
        // The model call does not touch the folder, so it starts at once;
        // only tools wait until the "before" snapshot is durable.
        let (gate_tx, gate_rx) = watch::channel(false);
        // A compaction changes no file: no snapshot pair for it.
        let before = if matches!(spec.mode, Mode::Compact(..)) {
            let _ = gate_tx.send(true);
            tokio::spawn(async { false })
        } else {
            tokio::spawn(snapshot_before(
                self.snapshots.clone(),
                folder.clone(),
                owner(Phase::Before),
                events.clone(),
                gate_tx,
            ))
        };
        let io = Io {
            events,
            inputs,
            cancel: cancelled,
            client_gone: Arc::clone(&client_gone),
            tools_gate: Some(gate_rx),
            live: crate::turn::live::LiveBytes::default(),
        };
        let (finished, ()) = tokio::join!(
            self.engine.run(group, lease, spec, io),
            forward(&mut engine_events, &out, &cancel, &client_gone)
        );
        // After the turn, whatever its outcome: what the message changed.
        if before.await.unwrap_or(false)
            && let Err(e) = self.snapshots.take(&folder, owner(Phase::After)).await
        {
            tracing::warn!("snapshot after the turn failed: {e}");
        }
        if let Some(o) = &oneshot {
            self.store.finish_oneshot(o, completed(&finished)).await;
        }
        let _ = out.send(Ok(finished)).await;
    }

    /// Leases the conversation for the turn; when that fails, settles the
    /// one-shot and tells the client why.
    async fn lease(
        &self,
        group: &GroupHandle,
        session: Option<String>,
        oneshot: Option<&Oneshot>,
        out: &mpsc::Sender<Result<Event, StoreError>>,
    ) -> Option<TurnLease> {
        match group.begin_turn(session).await {
            Ok(lease) => Some(lease),
            Err(e) => {
                if let Some(o) = oneshot {
                    self.store.finish_oneshot(o, false).await;
                }
                let _ = out.send(Err(e)).await;
                None
            }
        }
    }
}

/// The owner of the turn's snapshot in each phase: the two make one pair,
/// labelled after the message.
fn owners(session_id: String, mode: &Mode) -> impl Fn(Phase) -> Owner + use<> {
    let pair = format!(
        "{session_id}-{}",
        agentx_shared::time::unix_ms(std::time::SystemTime::now())
    );
    let label = label(mode);
    move |phase| Owner {
        session: session_id.clone(),
        phase,
        pair: pair.clone(),
        label: label.clone(),
    }
}

/// What keeps the folder busy, as restores refusing meanwhile tell it.
fn busy_with(oneshot: Option<&Oneshot>, session_id: &str) -> String {
    match oneshot {
        None => format!("a turn of conversation {session_id}"),
        Some(o) => format!("one-shot {}", o.id),
    }
}

/// Passes the engine's events on to the client until the engine is done;
/// a client that went away cancels the turn.
async fn forward(
    engine_events: &mut mpsc::Receiver<Event>,
    out: &mpsc::Sender<Result<Event, StoreError>>,
    cancel: &watch::Sender<bool>,
    client_gone: &std::sync::atomic::AtomicBool,
) {
    while let Some(event) = engine_events.recv().await {
        if out.send(Ok(event)).await.is_err() {
            went_away(cancel, client_gone);
        }
    }
}

/// The client went away: cancels the turn, marked as gone unless the user
/// had cancelled it already.
pub fn went_away(cancel: &watch::Sender<bool>, client_gone: &std::sync::atomic::AtomicBool) {
    if !*cancel.borrow() {
        client_gone.store(true, std::sync::atomic::Ordering::SeqCst);
        tracing::info!("a turn's client went away; the turn is cancelled");
    }
    let _ = cancel.send(true);
}

/// The end of a turn cancelled before it began: nothing was sent or kept.
fn never_began() -> Event {
    Event::Finished {
        status: Status::Interrupted,
        text: String::new(),
        error: "cancelled while it waited for another turn of this conversation; nothing was \
                sent or changed"
            .to_owned(),
        response_id: String::new(),
        usage: Default::default(),
        cut_short: None,
        context: None,
    }
}

/// Whether the turn's last event says it completed.
fn completed(finished: &Event) -> bool {
    matches!(
        finished,
        Event::Finished {
            status: Status::Completed,
            ..
        }
    )
}

/// Takes the "before" snapshot, then opens the tools' gate whatever came
/// of it (a failure is one notice: undo will not cover this message).
/// Whether there is a snapshot to pair an "after" one with.
async fn snapshot_before(
    snapshots: Snapshots,
    folder: std::path::PathBuf,
    owner: Owner,
    events: mpsc::Sender<Event>,
    gate: watch::Sender<bool>,
) -> bool {
    let result = snapshots.take(&folder, owner).await;
    if let Err(e) = &result
        && !matches!(**e, SnapError::Home(_))
    {
        let notice = format!("no snapshot before this message (undo will not cover it): {e}");
        let _ = events.send(Event::Notice(notice)).await;
    }
    let _ = gate.send(true);
    result.is_ok()
}

/// A graceful stop of agentd ends the turn as a cancel does, at once: its
/// tool is killed, the turn recorded, the after-snapshot taken.
async fn end_on_stop(shutdown: Shutdown, cancel: Arc<watch::Sender<bool>>) {
    tokio::select! {
        () = shutdown.wait_stopping() => {
            let _ = cancel.send(true);
        }
        () = cancel.closed() => {}
    }
}

/// How the turn's snapshots are labelled in `agentx snapshots`.
fn label(mode: &Mode) -> String {
    match mode {
        Mode::Message(m) => m.lines().next().unwrap_or("").chars().take(60).collect(),
        Mode::RetryRequest | Mode::NewChain => "retry".to_owned(),
        Mode::RetryMessage => "retry of the last message".to_owned(),
        Mode::Continue => "continue the interrupted turn".to_owned(),
        Mode::Compact(..) => "compaction".to_owned(),
    }
}
