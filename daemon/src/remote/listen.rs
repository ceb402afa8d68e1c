//! LISTEN/NOTIFY for the pre-turn pull: pushes and clears announce the
//! conversation they changed, so a turn asks the server only when another agentd did.
//!
//! Each push (and each clear that deleted rows) runs `pg_notify` on
//! [`CHANNEL`] inside its transaction, with the conversation id and this
//! agentd's instance nonce (random per start, so an agentd ignores its own
//! pushes). A task keeps one connection listening, reconnecting with
//! backoff and checking it with a heartbeat. Its state is a generation
//! (0: not listening; a new one on every successful LISTEN) and the ids
//! notified since their last pull. A conversation is clean when it was
//! pulled at the current generation and not notified since; a turn on a
//! clean conversation skips the query. While not listening, or after the
//! connection was lost, nothing is clean: every turn queries as before.
//! A payload without an id (`NOTIFY agentx_conversations` by hand after
//! editing rows) makes everything dirty.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::sync::oneshot;
use tokio_postgres::AsyncMessage;

use super::RemoteError;
use super::tls;
use super::url::RemoteUrl;

/// The notification channel.
pub const CHANNEL: &str = "agentx_conversations";
/// The statement that listens on [`CHANNEL`].
const LISTEN: &str = "LISTEN agentx_conversations";
/// `application_name` of the listening connection (in `pg_stat_activity`).
pub const APPLICATION: &str = "agentd listen";
const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often the listening connection is checked, and how long it may take
/// to answer: a connection that went silent (a partition) is lost.
const HEARTBEAT: Duration = Duration::from_secs(10);
const HEARTBEAT_WAIT: Duration = Duration::from_secs(5);
const HEARTBEAT_SQL: &str = "SELECT 1";
/// More dirty ids than this: everything is dirty instead (bounded memory;
/// every conversation of the database is announced to every agentd).
const DIRTY_MAX: usize = 10_000;

/// This agentd's instance nonce: random per start.
pub(super) fn nonce() -> &'static str {
    static NONCE: OnceLock<String> = OnceLock::new();
    NONCE.get_or_init(|| {
        use std::hash::{BuildHasher as _, RandomState};
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let pid = std::process::id();
        format!(
            "{:016x}{:016x}",
            RandomState::new().hash_one((nanos, pid)),
            RandomState::new().hash_one((pid, nanos))
        )
    })
}

/// What a push or clear of conversation `id` announces.
pub(super) fn payload(id: &str) -> String {
    format!("{} {id}", nonce())
}

/// Announces a change of conversation `id`, inside the push's transaction
/// (delivered when it commits, never when it rolls back).
pub(super) async fn notify(
    tx: &tokio_postgres::Transaction<'_>,
    id: &str,
) -> Result<(), RemoteError> {
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload(id)])
        .await
        .map_err(RemoteError::refused)?;
    Ok(())
}

#[derive(Default)]
struct State {
    /// 0: not listening; else the generation of the current LISTEN.
    generation: u64,
    /// The last generation given out (a new LISTEN never reuses one).
    given: u64,
    /// Ids notified since their check began.
    dirty: HashSet<String>,
    /// Ids pulled at a generation and not notified since.
    clean: HashMap<String, u64>,
}

impl State {
    /// Forgets every clean id: each must be pulled again.
    fn all_dirty(&mut self) {
        self.dirty.clear();
        self.clean.clear();
    }

    fn listening(&mut self) {
        self.given += 1;
        self.generation = self.given;
        self.all_dirty();
    }

    fn lost(&mut self) {
        self.generation = 0;
        self.all_dirty();
    }

    fn notified(&mut self, payload: &str) {
        let Some((from, id)) = payload.split_once(' ') else {
            // Not one of ours (someone changed rows by hand): a new
            // generation, so that no check under way records clean.
            tracing::debug!("remote: notified without an id: everything is pulled again");
            if self.generation != 0 {
                self.listening();
            }
            return;
        };
        if from == nonce() {
            return;
        }
        self.clean.remove(id);
        if self.dirty.len() >= DIRTY_MAX {
            self.listening();
        } else {
            self.dirty.insert(id.to_owned());
        }
    }
}

/// Which conversations changed on the server since this agentd pulled them.
#[derive(Clone, Default)]
pub struct Listener {
    state: Arc<Mutex<State>>,
}

/// A pre-turn check under way: [`Ticket::pulled`] once it succeeded.
pub struct Ticket {
    state: Arc<Mutex<State>>,
    id: String,
    generation: u64,
}

impl Listener {
    /// Before a turn on conversation `id`: `None` when it is clean (no
    /// other agentd changed it since it was last pulled, and the
    /// notifications were heard all along): skip the query. Else the
    /// ticket to record a successful pull with.
    pub fn begin_check(&self, id: &str) -> Option<Ticket> {
        let state = Arc::clone(&self.state);
        let generation = match self.state.lock() {
            Ok(mut s) => {
                let g = s.generation;
                let notified = s.dirty.remove(id);
                if g != 0 && !notified && s.clean.get(id) == Some(&g) {
                    return None;
                }
                g
            }
            Err(_) => 0,
        };
        Some(Ticket {
            state,
            id: id.to_owned(),
            generation,
        })
    }

    fn with(&self, f: impl FnOnce(&mut State)) {
        if let Ok(mut s) = self.state.lock() {
            f(&mut s);
        }
    }
}

impl Ticket {
    /// The pull went through: the conversation is clean at the generation
    /// read when the check began, unless it was notified meanwhile or the
    /// connection was lost (it is then pulled again next time).
    pub fn pulled(self) {
        if self.generation == 0 {
            return;
        }
        if let Ok(mut s) = self.state.lock()
            && s.generation == self.generation
            && !s.dirty.contains(&self.id)
        {
            s.clean.insert(self.id, self.generation);
        }
    }
}

/// Keeps a connection listening on [`CHANNEL`] for as long as agentd runs.
pub(super) async fn run(url: RemoteUrl, listener: Listener) {
    let mut backoff = BACKOFF_MIN;
    let mut last_error = String::new();
    loop {
        let mut heard = false;
        let result = session(&url, &listener, &mut heard).await;
        listener.with(State::lost);
        if heard {
            backoff = BACKOFF_MIN;
        }
        if let Err(e) = result {
            let e = url.redact(&e.to_string());
            if e != last_error {
                tracing::warn!("remote: not listening for other machines' changes: {e}");
                last_error = e;
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One connection: connect, LISTEN, then hand notifications to `listener`
/// until the connection fails. `heard`: LISTEN went through.
async fn session(
    url: &RemoteUrl,
    listener: &Listener,
    heard: &mut bool,
) -> Result<(), RemoteError> {
    let mut config = url.config.clone();
    config.application_name(APPLICATION);
    let connecting = tls::connect_messages(&config, &url.tls);
    let (client, mut messages) = match tokio::time::timeout(super::CONNECT_WAIT, connecting).await {
        Ok(Err(setup)) => return Err(RemoteError::Config(setup)),
        Ok(Ok(Ok(pair))) => pair,
        Ok(Ok(Err(e))) => {
            let message = format!("cannot reach {}: {}", url.shown, super::db_text(&e));
            return Err(RemoteError::server_because(message, e));
        }
        Err(_) => {
            return Err(RemoteError::server(format!(
                "cannot reach {}: no answer within {:?}",
                url.shown,
                super::CONNECT_WAIT
            )));
        }
    };
    let client = Arc::new(client);
    // The connection answers only while it is driven: drive it while
    // LISTEN runs.
    let listen = client.batch_execute(LISTEN);
    tokio::pin!(listen);
    loop {
        tokio::select! {
            done = &mut listen => {
                done.map_err(RemoteError::db)?;
                break;
            }
            message = messages.next() => handle(listener, message)?,
        }
    }
    listener.with(State::listening);
    *heard = true;
    tracing::info!(url = %url.shown, "remote: listening for other machines' changes");
    let (lost_tx, mut lost) = oneshot::channel::<String>();
    let pinger = Arc::clone(&client);
    let heartbeat = tokio::spawn(async move {
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            let why = match tokio::time::timeout(HEARTBEAT_WAIT, pinger.simple_query(HEARTBEAT_SQL))
                .await
            {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => RemoteError::db(e).to_string(),
                Err(_) => format!("no answer to a heartbeat within {HEARTBEAT_WAIT:?}"),
            };
            let _ = lost_tx.send(why);
            return;
        }
    });
    let ended = loop {
        tokio::select! {
            message = messages.next() => {
                if let Err(e) = handle(listener, message) {
                    break e;
                }
            }
            why = &mut lost => {
                break RemoteError::server(why.unwrap_or_else(|_| "the heartbeat stopped".into()));
            }
        }
    };
    heartbeat.abort();
    Err(ended)
}

/// One message of the listening connection; an error when it ended.
fn handle(
    listener: &Listener,
    message: Option<Result<AsyncMessage, tokio_postgres::Error>>,
) -> Result<(), RemoteError> {
    match message {
        Some(Ok(AsyncMessage::Notification(n))) if n.channel() == CHANNEL => {
            listener.with(|s| s.notified(n.payload()));
            Ok(())
        }
        Some(Ok(_)) => Ok(()),
        Some(Err(e)) => Err(RemoteError::db(e)),
        None => Err(RemoteError::server("the connection closed")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening() -> Listener {
        let l = Listener::default();
        l.with(State::listening);
        l
    }

    fn other(id: &str) -> String {
        format!("someone-else {id}")
    }

    #[test]
    fn a_conversation_is_clean_once_pulled_while_listening() {
        let l = listening();
        l.begin_check("c1").expect("never pulled: check").pulled();
        assert!(l.begin_check("c1").is_none());
        assert!(l.begin_check("c2").is_some());
    }

    #[test]
    fn nothing_is_clean_while_not_listening() {
        let l = Listener::default();
        l.begin_check("c1").expect("not listening").pulled();
        assert!(l.begin_check("c1").is_some());
    }

    #[test]
    fn another_agentds_notification_makes_it_dirty_and_our_own_does_not() {
        let l = listening();
        l.begin_check("c1").expect("check").pulled();
        l.with(|s| s.notified(&payload("c1")));
        assert!(l.begin_check("c1").is_none(), "our own push");
        l.with(|s| s.notified(&other("c1")));
        l.begin_check("c1").expect("notified").pulled();
        assert!(l.begin_check("c1").is_none());
    }

    #[test]
    fn a_notification_during_the_pull_makes_the_next_turn_pull_again() {
        let l = listening();
        let ticket = l.begin_check("c1").expect("check");
        l.with(|s| s.notified(&other("c1")));
        ticket.pulled();
        assert!(l.begin_check("c1").is_some());
    }

    #[test]
    fn a_lost_connection_makes_everything_dirty_also_after_listening_again() {
        let l = listening();
        l.begin_check("c1").expect("check").pulled();
        let during = l.begin_check("c2").expect("check");
        l.with(State::lost);
        assert!(l.begin_check("c1").is_some());
        l.with(State::listening);
        during.pulled();
        assert!(l.begin_check("c1").is_some());
        assert!(l.begin_check("c2").is_some());
    }

    #[test]
    fn listen_names_the_channel() {
        assert_eq!(LISTEN, format!("LISTEN {CHANNEL}"));
    }

    #[test]
    fn a_payload_without_an_id_makes_everything_dirty() {
        let l = listening();
        l.begin_check("c1").expect("check").pulled();
        l.with(|s| s.notified(""));
        assert!(l.begin_check("c1").is_some());
    }
}
