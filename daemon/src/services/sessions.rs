//! The `Sessions` gRPC service: list, open, status, clear and the local
//! shell transcript, answered by the folder's group actor.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use agentx_shared::proto::sessions_server::Sessions;
use agentx_shared::proto::{
    AppendShellTranscriptRequest, ClearSessionReply, ClearSessionRequest, Exchange,
    GetStatusRequest, ListSessionsReply, ListSessionsRequest, OpenSessionReply, OpenSessionRequest,
    SessionStatus, open_session_request::Target,
};

use super::{group_for, session_arg, status_of, summary};
use crate::store::session::SessionDoc;
use crate::store::{Change, OpenTarget, Store};

pub struct SessionsService {
    store: Arc<Store>,
}

impl SessionsService {
    pub fn new(store: Arc<Store>) -> Self {
        Self { store }
    }
}

/// Largest `!command` transcript kept between two messages.
const MAX_SHELL_TRANSCRIPT: usize = 64 * 1024;

pub fn session_status(doc: Option<&SessionDoc>) -> SessionStatus {
    let Some(doc) = doc else {
        return SessionStatus::default();
    };
    SessionStatus {
        session_id: doc.id.clone(),
        response_id: doc.response_id.clone().unwrap_or_default(),
        usage: Some(doc.usage.into()),
        pending_tool_calls: doc.pending_calls.iter().map(Into::into).collect(),
        turns: doc.turns,
        transcript_items: u32::try_from(doc.journal_items).unwrap_or(u32::MAX),
        has_pending_shell_transcript: !doc.pending_shell.is_empty(),
        folder: doc.folder.clone(),
        agent: doc.agent.clone(),
        title: doc.title.clone(),
        last_user_message: doc.last_user.clone(),
        last_assistant_message: doc.last_assistant.clone(),
        ..SessionStatus::default()
    }
}

#[tonic::async_trait]
impl Sessions for SessionsService {
    async fn list_sessions(
        &self,
        request: Request<ListSessionsRequest>,
    ) -> Result<Response<ListSessionsReply>, Status> {
        let (group, _) = group_for(&self.store, request.get_ref().scope.as_ref())?;
        let docs = group.list().await.map_err(status_of)?;
        Ok(Response::new(ListSessionsReply {
            sessions: docs.iter().map(summary).collect(),
        }))
    }

    async fn open_session(
        &self,
        request: Request<OpenSessionRequest>,
    ) -> Result<Response<OpenSessionReply>, Status> {
        let req = request.into_inner();
        let (group, _) = group_for(&self.store, req.scope.as_ref())?;
        let target = match req.target {
            None | Some(Target::Latest(_)) => OpenTarget::Latest,
            Some(Target::New(_)) => OpenTarget::New,
            Some(Target::Index(0)) => {
                return Err(Status::invalid_argument(
                    "conversation numbers start at 1 (the newest)",
                ));
            }
            Some(Target::Index(n)) => OpenTarget::Index(n),
            Some(Target::Id(id)) => OpenTarget::Id(
                session_arg(&id)?.ok_or_else(|| Status::invalid_argument("empty id"))?,
            ),
        };
        let opened = group.open(target).await.map_err(status_of)?;
        Ok(Response::new(OpenSessionReply {
            session: Some(summary(&opened.doc)),
            recent: opened
                .recent
                .into_iter()
                .map(|(user, assistant)| Exchange { user, assistant })
                .collect(),
            notices: opened.notices,
            pending_tool_calls: opened.doc.pending_calls.iter().map(Into::into).collect(),
        }))
    }

    async fn get_status(
        &self,
        request: Request<GetStatusRequest>,
    ) -> Result<Response<SessionStatus>, Status> {
        let req = request.into_inner();
        let (group, _) = group_for(&self.store, req.scope.as_ref())?;
        let doc = group
            .get(session_arg(&req.session_id)?)
            .await
            .map_err(status_of)?;
        Ok(Response::new(session_status(doc.as_ref())))
    }

    async fn clear_session(
        &self,
        request: Request<ClearSessionRequest>,
    ) -> Result<Response<ClearSessionReply>, Status> {
        let req = request.into_inner();
        let (group, _) = group_for(&self.store, req.scope.as_ref())?;
        let fresh = group
            .clear(session_arg(&req.session_id)?)
            .await
            .map_err(status_of)?;
        Ok(Response::new(ClearSessionReply {
            session: Some(summary(&fresh)),
        }))
    }

    async fn append_shell_transcript(
        &self,
        request: Request<AppendShellTranscriptRequest>,
    ) -> Result<Response<SessionStatus>, Status> {
        let req = request.into_inner();
        let (group, _) = group_for(&self.store, req.scope.as_ref())?;
        let id = session_arg(&req.session_id)?
            .ok_or_else(|| Status::invalid_argument("a session id is required"))?;
        let current = group
            .get(Some(id.clone()))
            .await
            .map_err(status_of)?
            .map(|d| d.pending_shell.len())
            .unwrap_or(0);
        if current + req.transcript.len() > MAX_SHELL_TRANSCRIPT {
            return Err(Status::resource_exhausted(format!(
                "the local shell transcript would exceed {} KiB; send a message first",
                MAX_SHELL_TRANSCRIPT / 1024
            )));
        }
        let doc = group
            .commit(
                &id,
                Change {
                    add_pending_shell: Some(req.transcript),
                    ..Change::default()
                },
            )
            .await
            .map_err(status_of)?;
        Ok(Response::new(session_status(Some(&doc))))
    }
}
