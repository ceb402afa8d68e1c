//! The gRPC services: each converts wire types to domain calls on the store
//! or the turn engine and back. Nothing below this edge sees protobuf types.

pub mod daemon;
pub mod library;
pub mod oneshots;
pub mod sessions;
pub mod snapshots;
pub mod turns;

use std::path::Path;

use tonic::Status;

use agentx_shared::proto::{Scope, SessionSummary};

use crate::store::session::SessionDoc;
use crate::store::{GroupHandle, Store, StoreError};

pub fn status_of(e: StoreError) -> Status {
    match e {
        StoreError::NotFound(m) => Status::not_found(m),
        StoreError::Invalid(m) => Status::invalid_argument(m),
        StoreError::Io(m) => Status::internal(format!("storage error: {m}")),
        StoreError::Closed => Status::unavailable("agentd is shutting down"),
    }
}

/// The group actor for a request's scope, after validating it.
pub fn group_for(store: &Store, scope: Option<&Scope>) -> Result<(GroupHandle, String), Status> {
    let scope =
        scope.ok_or_else(|| Status::invalid_argument("missing scope (folder and agent)"))?;
    let agent = if scope.agent.is_empty() {
        "default"
    } else {
        scope.agent.as_str()
    };
    let folder = Path::new(&scope.folder);
    if !folder.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "folder {:?} must be an absolute path",
            scope.folder
        )));
    }
    if !folder.is_dir() {
        return Err(Status::failed_precondition(format!(
            "folder {} does not exist",
            scope.folder
        )));
    }
    let group = store.group(&scope.folder, agent).map_err(status_of)?;
    Ok((group, scope.folder.clone()))
}

/// Session ids in requests: empty means "current"; otherwise a safe name.
pub fn session_arg(id: &str) -> Result<Option<String>, Status> {
    if id.is_empty() {
        return Ok(None);
    }
    agentx_shared::folder::check_component("session id", id)
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok(Some(id.to_owned()))
}

pub fn summary(doc: &SessionDoc) -> SessionSummary {
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
        location: String::new(),
        machine: String::new(),
    }
}
