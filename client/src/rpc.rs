//! The calls to agentd that commands and the web view share: one method per
//! call, building the request for a scope and naming what failed.

use tonic::transport::Channel;

use agentx_shared::proto::library_client::LibraryClient;
use agentx_shared::proto::sessions_client::SessionsClient;
use agentx_shared::proto::snapshots_client::SnapshotsClient;
use agentx_shared::proto::{
    ClearSessionReply, ClearSessionRequest, DiffReply, DiffRequest, ExportRequest, ForkRequest,
    GetStatusRequest, ListCheckpointsReply, ListCheckpointsRequest, ListSessionsReply,
    ListSessionsRequest, ListSnapshotsReply, ListSnapshotsRequest, OpenSessionReply,
    OpenSessionRequest, ProviderSettings, RenameRequest, Scope, SearchReply, SearchRequest,
    SessionStatus, SessionSummary, SyncRemoteReply, SyncRemoteRequest, diff_request,
    open_session_request::Target,
};

use crate::error::CliError;

/// A call that failed.
#[derive(Debug)]
pub enum Failed {
    /// agentd answered with an error while doing `doing` ("listing
    /// conversations"): the caller maps the status to its own error.
    Status {
        doing: &'static str,
        status: tonic::Status,
    },
    /// agentd answered with something unusable; the text says what.
    Garbled(&'static str),
}

impl Failed {
    /// The same failure, said to have happened while doing `doing`.
    pub fn doing(self, doing: &'static str) -> Self {
        match self {
            Self::Status { status, .. } => Self::Status { doing, status },
            garbled => garbled,
        }
    }
}

impl From<Failed> for CliError {
    fn from(failed: Failed) -> Self {
        match failed {
            Failed::Status { doing, status } => CliError::from_status(doing, &status),
            Failed::Garbled(what) => CliError::failed(what),
        }
    }
}

pub type RpcResult<T> = Result<T, Failed>;

/// The status of a call as a [`Failed`] naming what it was doing.
fn failed(doing: &'static str) -> impl FnOnce(tonic::Status) -> Failed {
    move |status| Failed::Status { doing, status }
}

/// What to compare in a diff.
pub enum DiffOf {
    /// Message N of the conversation (1 = its last).
    Message(u32),
    /// Snapshot N (1 = newest) or ID against the folder now.
    Since(String),
}

/// agentd, asked about one folder and agent.
pub struct Rpc {
    channel: Channel,
    scope: Scope,
}

impl Rpc {
    pub fn new(channel: Channel, scope: Scope) -> Self {
        Self { channel, scope }
    }

    fn sessions(&self) -> SessionsClient<Channel> {
        SessionsClient::new(self.channel.clone())
    }

    fn library(&self) -> LibraryClient<Channel> {
        LibraryClient::new(self.channel.clone())
    }

    fn snapshots(&self) -> SnapshotsClient<Channel> {
        SnapshotsClient::new(self.channel.clone())
    }

    fn scope(&self) -> Option<Scope> {
        Some(self.scope.clone())
    }

    /// The folder's conversations, newest first; with the remote store's
    /// when `include_remote` (and one is configured).
    pub async fn list_sessions(&self, include_remote: bool) -> RpcResult<ListSessionsReply> {
        self.list_sessions_page(include_remote, 0, 0).await
    }

    /// [`Self::list_sessions`], at most `limit` (0: all) after the newest
    /// `offset`.
    pub async fn list_sessions_page(
        &self,
        include_remote: bool,
        offset: u32,
        limit: u32,
    ) -> RpcResult<ListSessionsReply> {
        self.sessions()
            .list_sessions(ListSessionsRequest {
                scope: self.scope(),
                include_remote,
                limit,
                offset,
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(failed("listing conversations"))
    }

    /// Conversation `session_id`'s state ("" = the current one).
    pub async fn status(
        &self,
        session_id: &str,
        provider: Option<ProviderSettings>,
    ) -> RpcResult<SessionStatus> {
        self.sessions()
            .get_status(GetStatusRequest {
                scope: self.scope(),
                session_id: session_id.to_owned(),
                provider,
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(failed("conversation status"))
    }

    /// Makes `target` the folder's current conversation.
    pub async fn open(&self, target: Target) -> RpcResult<OpenSessionReply> {
        self.sessions()
            .open_session(OpenSessionRequest {
                scope: self.scope(),
                target: Some(target),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(failed("opening the conversation"))
    }

    /// Deletes conversation `session_id` ("" = the current one).
    pub async fn clear(&self, session_id: &str) -> RpcResult<ClearSessionReply> {
        self.sessions()
            .clear_session(ClearSessionRequest {
                scope: self.scope(),
                session_id: session_id.to_owned(),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(failed("clearing the conversation"))
    }

    /// Pushes to the remote store now, waiting up to `wait_ms` (0: agentd's default).
    pub async fn sync(&self, wait_ms: u32) -> RpcResult<SyncRemoteReply> {
        self.sessions()
            .sync_remote(SyncRemoteRequest { wait_ms })
            .await
            .map(tonic::Response::into_inner)
            .map_err(failed("syncing with the remote store"))
    }

    /// Conversation `session_id`'s checkpoints and its head.
    pub async fn checkpoints(&self, session_id: &str) -> RpcResult<ListCheckpointsReply> {
        self.sessions()
            .list_checkpoints(ListCheckpointsRequest {
                scope: self.scope(),
                session_id: session_id.to_owned(),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(failed("listing checkpoints"))
    }

    /// Forks `session_id` ("" = current) at checkpoint `n` (0 = newest).
    pub async fn fork(&self, session_id: &str, n: u32) -> RpcResult<SessionSummary> {
        self.library()
            .fork(ForkRequest {
                scope: self.scope(),
                session_id: session_id.to_owned(),
                checkpoint: n,
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(failed("forking"))
    }

    pub async fn rename(&self, session_id: &str, title: &str) -> RpcResult<SessionSummary> {
        self.library()
            .rename(RenameRequest {
                scope: self.scope(),
                session_id: session_id.to_owned(),
                title: title.to_owned(),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(failed("renaming"))
    }

    /// Searches this folder's conversations (`all`: every folder's).
    pub async fn search(&self, query: &str, all: bool, limit: u32) -> RpcResult<SearchReply> {
        self.library()
            .search(SearchRequest {
                scope: self.scope(),
                query: query.to_owned(),
                all,
                limit,
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(failed("searching"))
    }

    /// Conversation `session_id`'s export document, whole.
    pub async fn export(&self, session_id: &str) -> RpcResult<String> {
        let mut pieces = self
            .library()
            .export(ExportRequest {
                scope: self.scope(),
                session_id: session_id.to_owned(),
            })
            .await
            .map_err(failed("exporting"))?
            .into_inner();
        let mut document = Vec::new();
        while let Some(piece) = pieces.message().await.map_err(failed("exporting"))? {
            document.extend_from_slice(&piece.chunk);
        }
        String::from_utf8(document)
            .map_err(|_| Failed::Garbled("agentd sent an export that is not UTF-8"))
    }

    /// The folder's snapshots, newest first.
    pub async fn snapshots_list(&self) -> RpcResult<ListSnapshotsReply> {
        self.snapshots()
            .list_snapshots(ListSnapshotsRequest {
                scope: self.scope(),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(failed("listing snapshots"))
    }

    /// What `of` changed, in conversation `session_id` for a message.
    pub async fn diff(&self, session_id: &str, of: &DiffOf) -> RpcResult<DiffReply> {
        let (target, message) = match of {
            DiffOf::Message(n) => (diff_request::Target::SessionId(session_id.to_owned()), *n),
            DiffOf::Since(s) => match s.parse::<u32>() {
                Ok(n) => (diff_request::Target::SinceIndex(n), 0),
                Err(_) => (diff_request::Target::SinceId(s.clone()), 0),
            },
        };
        self.snapshots()
            .diff(DiffRequest {
                scope: self.scope(),
                target: Some(target),
                message,
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(failed("diffing"))
    }
}
