//! The gRPC services: each converts wire types to domain calls on the store
//! or the turn engine and back. Nothing below this edge sees protobuf types.

mod checkouts;
pub mod daemon;
pub mod library;
pub mod oneshots;
pub mod sessions;
pub mod snapshots;
mod status;
pub mod turns;

use std::path::Path;

use tonic::Status;

use agentx_shared::proto::{self, SessionSummary};

use crate::store::conversation::ConversationDoc;
use crate::store::{GroupHandle, Store};
pub use status::status_of;

/// The remote store's state on the wire: "off" without one (`Default`
/// when its state cannot be read).
pub fn remote_state(remote: Option<&crate::remote::Remote>) -> proto::RemoteState {
    let Some(remote) = remote else {
        return proto::RemoteState {
            state: proto::RemoteSync::Off as i32,
            ..proto::RemoteState::default()
        };
    };
    let Some(s) = remote.state() else {
        return proto::RemoteState::default();
    };
    proto::RemoteState {
        state: match s.state {
            crate::remote::SyncState::Synced => proto::RemoteSync::Synced,
            crate::remote::SyncState::Pending => proto::RemoteSync::Pending,
            crate::remote::SyncState::Unreachable => proto::RemoteSync::Unreachable,
        } as i32,
        pending: s.pending,
        last_error: s.last_error.unwrap_or_default(),
        url: s.url,
        machine: s.machine,
        refused: s
            .refused
            .into_iter()
            .map(|(id, error)| proto::RemoteRefusal { id, error })
            .collect(),
    }
}

/// Runs blocking file-system or CPU-heavy work (reading every one-shot,
/// parsing a document, writing a journal) on tokio's blocking pool, so the
/// runtime's workers keep serving every other client; a panic in it is
/// INTERNAL.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Status::internal(format!("agentd hit an internal error: {e}")))
}

/// Runs `work` to its end even if the caller stops waiting (a client that
/// goes away mid-import must not leave half of what it made): the RPC waits
/// for it, but dropping the RPC does not cancel it.
pub(crate) async fn to_the_end<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, Status> {
    tokio::spawn(work)
        .await
        .map_err(|e| Status::internal(format!("agentd hit an internal error: {e}")))
}

/// The agent of a request that names none.
const DEFAULT_AGENT: &str = "default";

/// The agent a request names, or the default one.
pub fn agent_name(agent: &str) -> &str {
    if agent.is_empty() {
        DEFAULT_AGENT
    } else {
        agent
    }
}

/// A request's folder (absolute) and agent (the default one when unnamed),
/// validated once at the edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub folder: String,
    pub agent: String,
}

impl TryFrom<Option<&proto::Scope>> for Scope {
    type Error = Status;

    fn try_from(scope: Option<&proto::Scope>) -> Result<Self, Status> {
        let scope =
            scope.ok_or_else(|| Status::invalid_argument("missing scope (folder and agent)"))?;
        if !Path::new(&scope.folder).is_absolute() {
            return Err(Status::invalid_argument(format!(
                "folder {:?} must be an absolute path",
                scope.folder
            )));
        }
        Ok(Self {
            folder: scope.folder.clone(),
            agent: agent_name(&scope.agent).to_owned(),
        })
    }
}

/// How long a request waits to learn whether its folder exists: a folder
/// on a hung network or FUSE mount parks the thread that asks.
const STAT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether `folder` is a directory, asked on the blocking pool and bounded
/// by [`STAT_PATIENCE`] (a hung mount parks a blocking thread, never one of
/// the runtime's workers).
async fn folder_is_dir(folder: &str) -> Result<bool, Status> {
    let path = std::path::PathBuf::from(folder);
    match tokio::time::timeout(
        STAT_PATIENCE,
        tokio::task::spawn_blocking(move || path.is_dir()),
    )
    .await
    {
        Ok(Ok(is_dir)) => Ok(is_dir),
        Ok(Err(e)) => Err(status::task_failed(e)),
        Err(_) => Err(Status::unavailable(format!(
            "folder {folder} did not answer within {} s (a hung network or FUSE mount?)",
            STAT_PATIENCE.as_secs()
        ))),
    }
}

/// The group actor for a request's scope, after validating it.
pub async fn group_for(
    store: &Store,
    scope: Option<&proto::Scope>,
) -> Result<(GroupHandle, String), Status> {
    let scope = Scope::try_from(scope)?;
    if !folder_is_dir(&scope.folder).await? {
        return Err(Status::failed_precondition(format!(
            "folder {} does not exist",
            scope.folder
        )));
    }
    let group = store
        .group(&scope.folder, &scope.agent)
        .map_err(status_of)?;
    Ok((group, scope.folder))
}

/// Conversation ids in requests: empty means "current"; otherwise a safe name.
pub fn session_arg(id: &str) -> Result<Option<String>, Status> {
    if id.is_empty() {
        return Ok(None);
    }
    agentx_shared::folder::check_component("session id", id).map_err(status::bad_name)?;
    Ok(Some(id.to_owned()))
}

pub fn summary(doc: &ConversationDoc) -> SessionSummary {
    SessionSummary {
        id: doc.id.clone(),
        title: doc.title.clone(),
        folder: doc.folder.clone(),
        agent: doc.agent.clone(),
        created_at: Some(agentx_shared::proto::Timestamp {
            unix_ms: doc.created_at,
        }),
        updated_at: Some(agentx_shared::proto::Timestamp {
            unix_ms: doc.updated_at,
        }),
        turns: doc.turns,
        forked_from: doc
            .forked_from
            .as_ref()
            .map(|f| agentx_shared::proto::ForkOrigin {
                id: f.id.clone(),
                turn: f.turn,
            }),
        location: 0,
        machine: String::new(),
        model: doc.model.clone().unwrap_or_default(),
    }
}

/// The window, compaction and model choices a client forwarded.
pub fn prefs_of(provider: Option<&proto::ProviderSettings>) -> crate::turn::window::Prefs {
    use crate::turn::window::{DEFAULT_AUTO_COMPACT_AT, Prefs};
    let Some(p) = provider else {
        return Prefs::default();
    };
    let share = p.auto_compact_at;
    Prefs {
        window: (p.context_window > 0).then_some(p.context_window),
        model_windows: p.model_windows.clone().into_iter().collect(),
        auto_compact: !p.auto_compact_off,
        auto_compact_at: if share > 0.0 && share < 1.0 {
            share
        } else {
            DEFAULT_AUTO_COMPACT_AT
        },
        run_model: Some(p.run_model.clone()).filter(|m| !m.is_empty()),
        instruction_files: p.instruction_files.clone(),
    }
}
