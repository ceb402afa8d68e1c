//! The remote store: every conversation also kept in
//! PostgreSQL, pushed in the background, pulled and searched from elsewhere.
//!
//! It is on when `remote_url` (config.toml) or `AGENTX_REMOTE_URL` is
//! set. Local stays the truth: the store tells us when a conversation
//! committed (it announces each commit; see `store::Commits`) and a background pusher sends the new journal
//! records and the document's metadata, batched and idempotently (records
//! keyed by conversation id and sequence number), retrying with backoff
//! while the server is down. A turn never waits for it.
//!
//! The outbox is durable by construction: `<profile>/remote/pushed/<id>.json`
//! records what was last pushed of each conversation (a hash of its document,
//! its journal position and rollback count); at start every conversation
//! whose document differs is pending again, so nothing committed locally is
//! lost to a crash, and a record pushed twice is ignored by the server.
//!
//! What goes to the server: the transcript (what the user and the model said,
//! tool outputs included), title, usage, last response id, checkpoints as
//! transcript positions, the folder path and the machine's name. Never an
//! API key, the environment or file contents.

pub mod clear;
mod copy;
mod forks;
mod lanes;
mod line;
mod listen;
mod pgpass;
mod project;
pub mod pull;
mod pusher;
mod rule;
mod schema;
mod search;
mod tls;
mod url;
pub use url::redact_userinfo;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio_postgres::Client;

pub use project::{machine_name, project_key};
pub use search::RemoteHit;
use url::RemoteUrl;

use crate::environment::Environment;
use crate::store::Store;

/// A cause kept as an error's source.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why talking to the remote failed. Messages never hold the password.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// Neither this machine nor the remote keeps the conversation asked for
    /// (or the name is no conversation id): answer "not found".
    #[error("{0}")]
    NotFound(String),
    /// The remote keeps the conversation for another project or agent, or
    /// this machine keeps it in another folder: say where it belongs; it is
    /// not opened here.
    #[error("{0}")]
    WrongScope(String),
    /// `remote_url` is unusable, or the server's schema is newer than this
    /// agentd: the user must fix it (retrying does not help); agentd keeps
    /// working locally meanwhile.
    #[error("{0}")]
    Config(String),
    /// The server was not reached, failed, or sent something unreadable:
    /// retry later (with backoff); local work goes on meanwhile. Show
    /// `message` (redacted); `source` is the raw cause, never shown as is.
    #[error("{message}")]
    Server {
        message: String,
        #[source]
        source: Option<Cause>,
    },
    /// Something on this machine failed (a file, a task): report it; what
    /// was being pushed or pulled stays pending and is tried again later.
    #[error(transparent)]
    Local(Cause),
    /// The server answered a push with an error about that conversation
    /// (the connection is still usable): back off on that one; the others
    /// go on.
    #[error("{0}")]
    Refused(String),
}

impl RemoteError {
    /// The server failed, said in `message` (no cause to keep).
    pub fn server(message: impl Into<String>) -> Self {
        Self::Server {
            message: message.into(),
            source: None,
        }
    }

    /// The server failed because of `source`, said in `message`.
    pub fn server_because(message: impl Into<String>, source: impl Into<Cause>) -> Self {
        Self::Server {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Something on this machine failed.
    pub fn local(source: impl Into<Cause>) -> Self {
        Self::Local(source.into())
    }

    fn db(e: tokio_postgres::Error) -> Self {
        Self::server_because(db_text(&e), e)
    }

    /// Like [`RemoteError::db`], but an error the server answered about the
    /// statement (not about the connection: SQLSTATE classes 08 and 57P) is
    /// [`RemoteError::Refused`].
    fn refused(e: tokio_postgres::Error) -> Self {
        let statement = e.as_db_error().is_some_and(|db| {
            let code = db.code().code();
            !(code.starts_with("08") || code.starts_with("57P"))
        });
        match Self::db(e) {
            Self::Server { message, .. } if statement => Self::Refused(message),
            other => other,
        }
    }

    /// Whether the server was not reached at all (no connection), as
    /// opposed to one that answered with an error.
    fn unreached(&self) -> bool {
        matches!(self, Self::Server { message, .. } if message.starts_with(UNREACHED))
    }

    /// This error with `url`'s secrets taken out of a server's message.
    fn redacted(self, url: &RemoteUrl) -> Self {
        match self {
            Self::Server { message, source } => Self::Server {
                message: url.redact(&message),
                source,
            },
            other => other,
        }
    }
}

/// A PostgreSQL error as one line: the error and what the server (or the
/// underlying cause) said.
fn db_text(e: &tokio_postgres::Error) -> String {
    let text = e.to_string();
    if let Some(db) = e.as_db_error() {
        format!("{text}: {}", db.message())
    } else if let Some(source) = std::error::Error::source(e) {
        format!("{text}: {source}")
    } else {
        text
    }
}

/// How long `agentx sync` waits by default.
const SYNC_WAIT: Duration = Duration::from_secs(10);
/// How a connection that reached no server starts its message.
const UNREACHED: &str = "cannot reach ";

/// How long one connection attempt may take.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// The most remote conversations a listing shows (the newest).
pub const LIST_MAX: i64 = 1000;

/// A listing of the remote's conversations: the newest [`LIST_MAX`], and
/// how many more there are.
pub struct RemoteList {
    pub rows: Vec<RemoteRow>,
    /// Older conversations not listed.
    pub more: u64,
    /// Rows skipped or shown in part, each named with why (one line each).
    pub notes: Vec<String>,
}

/// A remote conversation as listed.
pub struct RemoteRow {
    pub id: String,
    pub title: String,
    pub folder: String,
    pub machine: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub turns: u32,
    /// Why part of the row is not shown (an implausible count).
    pub note: Option<String>,
}

/// More turns than any conversation can hold: a count the server gives
/// beyond it is shown as implausible, not as a fact.
pub const MAX_PLAUSIBLE_TURNS: i64 = 10_000_000;

/// One listed row, or the line naming the row skipped and why: a value no
/// agentd writes (`infinity` for a time) skips only that row.
fn listed_row(row: &tokio_postgres::Row) -> Result<RemoteRow, String> {
    let id = row
        .try_get::<_, String>(0)
        .map_err(|e| format!("skipped a remote row whose id cannot be read: {e}"))?;
    let shown = agentx_shared::terminal::visible(&id);
    let skip = |what: &str| format!("skipped remote conversation {shown}: its {what}");
    let time = |i: usize, what: &str| -> Result<i64, String> {
        row.try_get::<_, Option<i64>>(i)
            .map_err(|e| skip(&format!("{what} cannot be read ({e})")))?
            .ok_or_else(|| skip(&format!("{what} is not a real time")))
    };
    let created_at = time(4, "creation time")?;
    let updated_at = time(5, "update time")?;
    let text = |i: usize, what: &str| -> Result<String, String> {
        row.try_get::<_, String>(i)
            .map_err(|e| skip(&format!("{what} cannot be read ({e})")))
    };
    let turns = row
        .try_get::<_, i32>(6)
        .map_err(|e| skip(&format!("turn count cannot be read ({e})")))?;
    let plausible = (0..=MAX_PLAUSIBLE_TURNS).contains(&i64::from(turns));
    Ok(RemoteRow {
        title: text(1, "title")?,
        folder: text(2, "folder")?,
        machine: text(3, "machine")?,
        created_at,
        updated_at,
        turns: if plausible {
            u32::try_from(turns).unwrap_or(0)
        } else {
            0
        },
        note: (!plausible).then(|| {
            format!(
                "remote conversation {shown} is listed without a turn count: the server says {turns} turns, which cannot be"
            )
        }),
        id,
    })
}

/// Where pushing stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncState {
    /// Changes wait to be pushed, or no pass finished yet.
    Pending,
    /// Everything is pushed.
    Synced,
    /// Nothing waits, but the last pass did not reach the server.
    Unreachable,
}

/// What `status` shows of the remote store.
#[derive(Debug, Clone)]
pub struct Standing {
    pub state: SyncState,
    /// Conversations with changes not pushed yet.
    pub pending: u64,
    pub last_error: Option<String>,
    /// The server, without its password.
    pub url: String,
    pub machine: String,
    /// Conversations the server refused: (id, why).
    pub refused: Vec<(String, String)>,
}

/// What one `agentx sync` pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Conversations and records pushed while it waited.
    pub pushed_conversations: u64,
    pub pushed_records: u64,
    /// The pass reached the server (within the wait).
    pub reached: bool,
    /// The wait ended before the pass did.
    pub timed_out: bool,
}

#[derive(Default)]
struct Inner {
    /// Documents with changes not pushed yet.
    pending: BTreeSet<PathBuf>,
    /// Passes started so far.
    started: u64,
    /// Whether any pass finished yet, and whether the last one reached
    /// the server.
    attempted: bool,
    reached: bool,
    /// The last pass could not reach the server at all (no connection, or
    /// a push that stopped moving and a heartbeat that got no answer).
    unreached: bool,
    last_error: Option<String>,
    pushed_conversations: u64,
    pushed_records: u64,
    /// Cleared conversations whose server copy is still to be deleted.
    deletions: BTreeSet<String>,
    /// Pending documents the server refused, each retried on its own
    /// backoff while the others are pushed.
    refused: BTreeMap<PathBuf, pusher::Refused>,
    /// Marks so far: a push may clear a document's pending mark only if
    /// none came while it looked at the document (outside this lock).
    marks: u64,
}

/// The remote store of this agentd.
pub struct Remote {
    url: Result<RemoteUrl, String>,
    machine: String,
    sessions_dir: PathBuf,
    /// `<profile>/remote/pushed`.
    pushed_dir: PathBuf,
    inner: Mutex<Inner>,
    /// New work for the pusher.
    wake: Notify,
    /// `agentx sync`: push now, skipping any backoff.
    now: Notify,
    /// The start number of the last finished pass.
    passes: watch::Sender<u64>,
    /// The store's announcements, and the number of the last one marked
    /// pending here: `agentx sync` waits for every commit made before it.
    commits: crate::store::Commits,
    marked: watch::Sender<u64>,
    /// The connections listing, search, pull and the pusher use, one each.
    lanes: Arc<lanes::Lanes>,
    /// How long listing, search and each statement wait for the server.
    waits: lanes::Waits,
    /// Which conversations other agentds changed (LISTEN/NOTIFY).
    listener: listen::Listener,
    /// The conversation store pulls write into.
    store: Arc<Store>,
    /// Held while one conversation is pushed or pulled, so the pusher and
    /// a pull never work on the same conversation at once.
    sync: tokio::sync::Mutex<()>,
    /// Forks made here that the user has not been told of yet.
    forks: forks::Forks,
}

impl Remote {
    /// Reads `remote_url` and starts the pusher, which pushes what
    /// `commits` announces of `store`. `None`: remote keeping is off. A URL that cannot be used is reported by [`Remote::state`] and
    /// logged (redacted); agentd goes on locally. `env` (agentd's
    /// environment) gives `AGENTX_REMOTE_URL`, libpq's variables, the
    /// machine's name and the waits.
    pub fn start(
        profile_dir: &Path,
        (store, sessions_dir): (Arc<Store>, PathBuf),
        config_file: &Path,
        commits: &crate::store::Commits,
        env: &Environment,
    ) -> Option<Arc<Self>> {
        let var = |k: &str| env.var(k).map(str::to_owned);
        let raw = match agentx_shared::config::remote_url(config_file, var) {
            Ok(Some(raw)) => raw,
            Ok(None) => return None,
            Err(e) => {
                // config.toml does not parse: the client says so on every
                // command; here the remote simply stays off.
                tracing::warn!("remote store off: {}", url::redact_text(&e.to_string()));
                return None;
            }
        };
        let url =
            RemoteUrl::parse(&raw, url::Env::from_environment(env)).map_err(|e| e.to_string());
        let (changes, from) = commits.subscribe_counted();
        let remote = Arc::new(Self {
            url,
            machine: project::machine_name(env),
            waits: lanes::Waits::from_environment(env),
            sessions_dir,
            pushed_dir: profile_dir.join("remote").join("pushed"),
            inner: Mutex::new(Inner::default()),
            wake: Notify::new(),
            now: Notify::new(),
            passes: watch::Sender::new(0),
            commits: commits.clone(),
            marked: watch::Sender::new(from),
            lanes: Arc::default(),
            listener: listen::Listener::default(),
            store,
            sync: tokio::sync::Mutex::const_new(()),
            forks: forks::Forks::load(profile_dir.join("remote").join("forks.json")),
        });
        match &remote.url {
            Ok(url) => {
                tracing::info!(url = %url.shown, machine = %remote.machine, "remote store on");
                tokio::spawn(pusher::run(Arc::clone(&remote), changes));
                tokio::spawn(listen::run(url.clone(), remote.listener.clone()));
            }
            Err(e) => {
                tracing::error!("remote store not used: {e}");
                if let Ok(mut inner) = remote.inner.lock() {
                    inner.attempted = true;
                    inner.last_error = Some(e.clone());
                }
            }
        }
        Some(remote)
    }

    pub fn machine(&self) -> &str {
        &self.machine
    }

    /// How long listing and search wait for the remote before answering
    /// with this machine's conversations only.
    pub fn list_wait(&self) -> Duration {
        self.waits.list
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> Option<T> {
        self.inner.lock().ok().map(|mut inner| f(&mut inner))
    }

    fn mark(&self, doc: PathBuf) {
        self.with(|inner| {
            inner.marks += 1;
            inner.pending.insert(doc)
        });
        self.wake.notify_one();
    }

    /// What `status` shows (`None`: the state cannot be read).
    pub fn state(&self) -> Option<Standing> {
        let url = self
            .url
            .as_ref()
            .map(|u| u.shown.clone())
            .unwrap_or_default();
        self.with(|inner| {
            let waiting = inner.pending.len() + inner.deletions.len();
            let state = if inner.attempted && !inner.reached && inner.unreached {
                SyncState::Unreachable
            } else if waiting == 0 && inner.attempted {
                if inner.reached {
                    SyncState::Synced
                } else {
                    SyncState::Unreachable
                }
            } else {
                SyncState::Pending
            };
            Standing {
                state,
                pending: waiting as u64,
                last_error: inner.last_error.clone(),
                url: url.clone(),
                machine: self.machine.clone(),
                refused: inner
                    .refused
                    .values()
                    .map(|r| (r.id.clone(), r.error.clone()))
                    .collect(),
            }
        })
    }

    /// Pushes now and waits (bounded) for that pass.
    pub async fn sync(&self, wait: Option<Duration>) -> SyncReport {
        let Some((convs, records)) = self.with(|i| (i.pushed_conversations, i.pushed_records))
        else {
            return SyncReport::default();
        };
        if self.url.is_err() {
            return SyncReport::default();
        }
        // Every commit announced before now is pending before the pass
        // starts (the announcements travel to the pusher on a channel).
        let announced = self.commits.announced();
        let mut marked = self.marked.subscribe();
        let _ = tokio::time::timeout(
            wait.unwrap_or(SYNC_WAIT),
            marked.wait_for(|m| *m >= announced),
        )
        .await;
        let Some(started) = self.with(|i| i.started) else {
            return SyncReport::default();
        };
        let mut passes = self.passes.subscribe();
        self.now.notify_one();
        let timed_out = tokio::time::timeout(
            wait.unwrap_or(SYNC_WAIT),
            passes.wait_for(|done| *done > started),
        )
        .await
        .is_err();
        self.with(|i| SyncReport {
            pushed_conversations: i.pushed_conversations - convs,
            pushed_records: i.pushed_records - records,
            reached: i.reached && !timed_out,
            timed_out,
        })
        .unwrap_or(SyncReport {
            timed_out,
            ..SyncReport::default()
        })
    }

    async fn connect(url: &RemoteUrl) -> Result<Client, RemoteError> {
        let connecting = tls::connect(&url.config, &url.tls);
        let (mut client, connection) = match tokio::time::timeout(CONNECT_WAIT, connecting).await {
            Ok(Err(setup)) => {
                return Err(RemoteError::Config(
                    url.redact(&format!("remote_url {}: {setup}", url.shown)),
                ));
            }
            Ok(Ok(Ok(pair))) => pair,
            Ok(Ok(Err(e))) => {
                let message = format!("{UNREACHED}{}: {}", url.shown, db_text(&e));
                return Err(RemoteError::server_because(url.redact(&message), e));
            }
            Err(_) => {
                return Err(RemoteError::server(format!(
                    "{UNREACHED}{}: no answer within {CONNECT_WAIT:?}",
                    url.shown
                )));
            }
        };
        let shown = url.shown.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(url = %shown, "remote connection ended: {}", RemoteError::db(e));
            }
        });
        schema::migrate(&mut client)
            .await
            .map_err(|e| RemoteError::server_because(url.redact(&e.to_string()), e))?;
        Ok(client)
    }

    /// The conversations the remote keeps for `project` and `agent`, newest
    /// first, at most [`LIST_MAX`] (and how many more). The caller bounds
    /// the wait.
    pub async fn list(&self, project: &str, agent: &str) -> Result<RemoteList, RemoteError> {
        let url = self
            .url
            .as_ref()
            .map_err(|e| RemoteError::Config(e.clone()))?;
        let client = self.lane(lanes::Lane::List).await?;
        let rows = client
            .query(
                "SELECT id, title, folder, machine,
                        CASE WHEN isfinite(created_at)
                             THEN (extract(epoch FROM created_at) * 1000)::int8 END,
                        CASE WHEN isfinite(updated_at)
                             THEN (extract(epoch FROM updated_at) * 1000)::int8 END,
                        turns, count(*) OVER ()
                   FROM conversations
                  WHERE project = $1 AND agent = $2
                  ORDER BY updated_at DESC
                  LIMIT $3",
                &[&project, &agent, &LIST_MAX],
            )
            .await
            .map_err(|e| RemoteError::db(e).redacted(url))?;
        client.done();
        let total = match rows.first() {
            Some(row) => row.try_get::<_, i64>(7).map_err(RemoteError::db)?,
            None => 0,
        };
        let more = u64::try_from(total)
            .unwrap_or(0)
            .saturating_sub(rows.len() as u64);
        let mut notes = Vec::new();
        let rows = rows
            .iter()
            .filter_map(|row| match listed_row(row) {
                Ok(listed) => {
                    notes.extend(listed.note.clone());
                    Some(listed)
                }
                Err(note) => {
                    notes.push(note);
                    None
                }
            })
            // A row no agentd made (its id could name one of a group
            // directory's own files) is not listed.
            .filter(|r| crate::store::is_conversation_id(&r.id))
            .collect();
        Ok(RemoteList { rows, more, notes })
    }
}
