//! Connections of their own for listing, search, pull and the pusher, so one slow
//! query never holds up the others; each statement bounded on the server and cancelled there.
//!
//! A lane keeps one idle connection. A caller takes it for itself (another
//! caller meanwhile opens a second one) and gives it back when done. Every
//! statement but a push is bounded by the server (`statement_timeout`), and a caller
//! that stops waiting (its timeout fired and its future was dropped) does not
//! leave its query running: the query is cancelled with the connection's
//! cancel key and the connection closed — at once for callers that say when
//! they are done (listing, search), after a one-second check that the
//! connection is idle for those that do not (pull).

use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_postgres::{Client, NoTls};

use super::tls::{RustlsConnect, Tls};
use super::url::RemoteUrl;
use super::{Remote, RemoteError};
use crate::environment::Environment;

/// What a connection is used for; each lane has its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lane {
    /// `agentx sessions` and the resume pickers.
    List,
    /// `agentx search` and `/search`.
    Search,
    /// Opening a remote-only conversation, the pre-turn pull, settling.
    Pull,
    /// The background pusher.
    Push,
}

impl Lane {
    fn index(self) -> usize {
        match self {
            Lane::List => 0,
            Lane::Search => 1,
            Lane::Pull => 2,
            Lane::Push => 3,
        }
    }

    /// The longest one statement may run on the server: a few times what
    /// its caller waits, so only a query its caller gave up on is stopped.
    /// A push has no bound: nobody waits on it, and a large message must
    /// go through however slow the server.
    fn statement_bound(self, waits: &Waits) -> Option<Duration> {
        let usual = match self {
            Lane::List | Lane::Search => Duration::from_secs(5),
            Lane::Pull => Duration::from_secs(60),
            Lane::Push => return None,
        };
        Some(waits.statement.unwrap_or(usual))
    }
}

/// How long the remote is waited for, from agentd's environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    /// How long listing and search wait for the remote before answering
    /// with this machine's conversations only (`AGENTX_REMOTE_WAIT_MS`,
    /// default 900 ms).
    pub list: Duration,
    /// Every lane's statement bound (`AGENTX_REMOTE_STATEMENT_MS`; unset:
    /// each lane's own, see [`Lane::statement_bound`]).
    statement: Option<Duration>,
    /// How long a push may go without an answer before a heartbeat asks
    /// whether the server is still there (`AGENTX_REMOTE_STALL_MS`, 30 s);
    /// also the heartbeat's own bound.
    pub stall: Duration,
}

impl Waits {
    /// The waits `env` sets, the defaults for the rest.
    pub fn from_environment(env: &Environment) -> Self {
        let ms = |name: &str| {
            env.var(name)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_millis)
        };
        Self {
            list: ms("AGENTX_REMOTE_WAIT_MS").unwrap_or(Duration::from_millis(900)),
            statement: ms("AGENTX_REMOTE_STATEMENT_MS"),
            stall: ms("AGENTX_REMOTE_STALL_MS")
                .filter(|d| !d.is_zero())
                .unwrap_or(Duration::from_secs(30)),
        }
    }
}

/// How long a connection given back unmarked may take to show it is idle
/// (its last query done) before that query is cancelled.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The idle connection of each lane.
#[derive(Default)]
pub(super) struct Lanes {
    idle: [Mutex<Option<Arc<Client>>>; 4],
}

impl Lanes {
    fn take(&self, lane: Lane) -> Option<Arc<Client>> {
        let slot = self.idle.get(lane.index())?;
        slot.lock()
            .ok()
            .and_then(|mut c| c.take())
            .filter(|c| !c.is_closed())
    }

    fn put(&self, lane: Lane, client: Arc<Client>) {
        if client.is_closed() {
            return;
        }
        if let Some(Ok(mut slot)) = self.idle.get(lane.index()).map(Mutex::lock)
            && slot.is_none()
        {
            *slot = Some(client);
        }
    }

    /// Closes every idle connection (the next use connects again and checks
    /// the schema then).
    pub(super) fn clear(&self) {
        for slot in &self.idle {
            if let Ok(mut slot) = slot.lock() {
                *slot = None;
            }
        }
    }
}

/// Whether the holder of a [`LaneClient`] says when its work is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// It calls [`LaneClient::done`]: dropped before that, a query of its
    /// is still running and is cancelled at once.
    Marked,
    /// It does not: dropped, the connection is checked for a query still
    /// running (cancelled after [`IDLE_CHECK`]) before it is used again.
    Unmarked,
    /// Done: the connection goes back to its lane.
    Done,
    /// Not to be used again: closed, with no query to cancel.
    Discarded,
}

/// A lane's connection, held by one caller at a time.
pub(super) struct LaneClient {
    client: Arc<Client>,
    lanes: Arc<Lanes>,
    lane: Lane,
    tls: Tls,
    ending: Ending,
    /// Taken from the lane, not connected (so not migrated) just now.
    reused: bool,
}

impl LaneClient {
    /// The caller's work finished (its queries answered): the connection
    /// goes back to its lane for the next caller.
    pub(super) fn done(mut self) {
        self.ending = Ending::Done;
    }

    /// The connection must not be used again (it is idle): it is closed.
    pub(super) fn discard(mut self) {
        self.ending = Ending::Discarded;
    }

    /// Whether the connection was kept from an earlier caller rather than
    /// made (and its schema migrated and checked) for this one.
    pub(super) fn reused(&self) -> bool {
        self.reused
    }

    /// The connection for statements that need it to themselves (a
    /// transaction). Its holder is its only user, so it always is.
    pub(super) fn exclusive(&mut self) -> Result<&mut Client, RemoteError> {
        Arc::get_mut(&mut self.client)
            .ok_or_else(|| RemoteError::local("the remote connection is shared"))
    }
}

impl Deref for LaneClient {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Drop for LaneClient {
    fn drop(&mut self) {
        let client = Arc::clone(&self.client);
        if client.is_closed() || self.ending == Ending::Discarded {
            return;
        }
        if self.ending == Ending::Done {
            self.lanes.put(self.lane, client);
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (lanes, lane, tls, ending) = (
            Arc::clone(&self.lanes),
            self.lane,
            self.tls.clone(),
            self.ending,
        );
        runtime.spawn(async move {
            if ending == Ending::Unmarked {
                // Answered at once unless a query its holder gave up on
                // is still running ahead of it.
                let idle = tokio::time::timeout(IDLE_CHECK, client.simple_query(""))
                    .await
                    .is_ok_and(|r| r.is_ok());
                if idle {
                    lanes.put(lane, client);
                    return;
                }
            }
            // Bounded: over a link that drops packets the cancel request
            // gets no answer either.
            let _ = tokio::time::timeout(super::CONNECT_WAIT, cancel(&client, &tls)).await;
            // Dropping the client closes the connection.
        });
    }
}

/// Asks the server to cancel what `client`'s connection runs now.
async fn cancel(client: &Client, tls: &Tls) {
    let token = client.cancel_token();
    let sent = match tls {
        Tls::Off => token.cancel_query(NoTls).await.map_err(|e| e.to_string()),
        Tls::On { verify, roots } => match RustlsConnect::new(*verify, roots.as_deref()) {
            Ok(connector) => token
                .cancel_query(connector)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        },
    };
    match sent {
        Ok(()) => tracing::debug!("remote: cancelled a query its caller stopped waiting for"),
        Err(e) => {
            tracing::warn!("remote: cannot cancel a query its caller stopped waiting for: {e}")
        }
    }
}

impl Remote {
    /// `lane`'s connection, (re)made when needed. Call [`LaneClient::done`]
    /// once its queries answered; dropped before, its query is cancelled.
    pub(super) async fn lane(&self, lane: Lane) -> Result<LaneClient, RemoteError> {
        self.lane_client(lane, Ending::Marked).await
    }

    /// Like [`Remote::lane`], for callers that do not say when they are
    /// done: the connection is checked for a query still running when it
    /// is given back.
    pub(super) async fn lane_unmarked(&self, lane: Lane) -> Result<LaneClient, RemoteError> {
        self.lane_client(lane, Ending::Unmarked).await
    }

    async fn lane_client(&self, lane: Lane, ending: Ending) -> Result<LaneClient, RemoteError> {
        let url = self
            .url
            .as_ref()
            .map_err(|e| RemoteError::Config(e.clone()))?;
        let (client, reused) = match self.lanes.take(lane) {
            Some(c) => (c, true),
            None => (Arc::new(open(url, lane, &self.waits).await?), false),
        };
        Ok(LaneClient {
            client,
            lanes: Arc::clone(&self.lanes),
            lane,
            tls: url.tls.clone(),
            ending,
            reused,
        })
    }
}

/// A new connection for `lane`, its statements bounded on the server
/// (when the lane has a bound).
async fn open(url: &RemoteUrl, lane: Lane, waits: &Waits) -> Result<Client, RemoteError> {
    let client = Remote::connect(url).await?;
    if let Some(bound) = lane.statement_bound(waits) {
        client
            .batch_execute(&format!("SET statement_timeout = {}", bound.as_millis()))
            .await
            .map_err(|e| RemoteError::db(e).redacted(url))?;
    }
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_parsed_once_from_the_environment_given() {
        let env = Environment::from_pairs([
            ("AGENTX_REMOTE_WAIT_MS", " 40 "),
            ("AGENTX_REMOTE_STATEMENT_MS", "700"),
        ]);
        let waits = Waits::from_environment(&env);
        assert_eq!(waits.list, Duration::from_millis(40));
        for lane in [Lane::List, Lane::Search, Lane::Pull] {
            assert_eq!(
                lane.statement_bound(&waits),
                Some(Duration::from_millis(700))
            );
        }
        let env = Environment::from_pairs([("AGENTX_REMOTE_WAIT_MS", "soon")]);
        let defaults = Waits::from_environment(&env);
        assert_eq!(defaults.list, Duration::from_millis(900));
        assert_eq!(
            Lane::List.statement_bound(&defaults),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            Lane::Pull.statement_bound(&defaults),
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn only_a_push_has_no_statement_bound() {
        let env = Environment::from_pairs([("AGENTX_REMOTE_STATEMENT_MS", "700")]);
        let unset = Environment::from_pairs([("HOME", "/home/someone")]);
        for waits in [
            Waits::from_environment(&env),
            Waits::from_environment(&unset),
        ] {
            assert_eq!(Lane::Push.statement_bound(&waits), None);
            for lane in [Lane::List, Lane::Search, Lane::Pull] {
                assert!(lane.statement_bound(&waits).is_some(), "{lane:?}");
            }
        }
    }
}
