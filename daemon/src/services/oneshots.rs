//! The `Oneshots` gRPC service: retained one-shot states — list, show, prune.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use agentx_shared::proto::oneshots_server::Oneshots;
use agentx_shared::proto::{
    ListOneshotsReply, ListOneshotsRequest, OneshotStatus, OneshotSummary, PruneOneshotsReply,
    PruneOneshotsRequest, Scope, ShowOneshotReply, ShowOneshotRequest, Timestamp,
};

use super::{group_for, status_of};
use crate::store::Store;
use crate::store::oneshot::OneshotInfo;

pub struct OneshotsService {
    store: Arc<Store>,
}

impl OneshotsService {
    pub fn new(store: Arc<Store>) -> Self {
        Self { store }
    }
}

fn summary(info: &OneshotInfo) -> OneshotSummary {
    OneshotSummary {
        id: info.id.clone(),
        status: wire_status(info.status) as i32,
        reason: info.reason.clone(),
        created_at: Some(Timestamp {
            unix_ms: info.created_at,
        }),
        prompt: info.prompt.clone(),
    }
}

/// A one-shot's status (the store's word for it) on the wire.
fn wire_status(status: &str) -> OneshotStatus {
    match status {
        "running" => OneshotStatus::Running,
        "failed" => OneshotStatus::Failed,
        "interrupted" => OneshotStatus::Interrupted,
        "corrupt" => OneshotStatus::Corrupt,
        _ => OneshotStatus::Unspecified,
    }
}

/// Folder and agent of a request, validated.
async fn scope_of(store: &Store, scope: Option<&Scope>) -> Result<(String, String), Status> {
    let (_, folder) = group_for(store, scope).await?;
    Ok((folder, super::Scope::try_from(scope)?.agent))
}

#[tonic::async_trait]
impl Oneshots for OneshotsService {
    async fn list_oneshots(
        &self,
        request: Request<ListOneshotsRequest>,
    ) -> Result<Response<ListOneshotsReply>, Status> {
        let (folder, agent) = scope_of(&self.store, request.get_ref().scope.as_ref()).await?;
        let store = Arc::clone(&self.store);
        let list = super::blocking(move || store.list_oneshots(&folder, &agent))
            .await?
            .map_err(status_of)?;
        Ok(Response::new(ListOneshotsReply {
            oneshots: list.iter().map(summary).collect(),
        }))
    }

    async fn show_oneshot(
        &self,
        request: Request<ShowOneshotRequest>,
    ) -> Result<Response<ShowOneshotReply>, Status> {
        let req = request.into_inner();
        let (folder, agent) = scope_of(&self.store, req.scope.as_ref()).await?;
        let store = Arc::clone(&self.store);
        super::blocking(move || {
            let (info, transcript) = store
                .show_oneshot(&folder, &agent, &req.id)
                .map_err(status_of)?;
            let state = serde_json::json!({ "state": info.doc, "transcript": transcript });
            Ok(Response::new(ShowOneshotReply {
                oneshot: Some(summary(&info)),
                state_json: serde_json::to_string_pretty(&state).unwrap_or_default(),
            }))
        })
        .await?
    }

    async fn prune_oneshots(
        &self,
        request: Request<PruneOneshotsRequest>,
    ) -> Result<Response<PruneOneshotsReply>, Status> {
        let (folder, agent) = scope_of(&self.store, request.get_ref().scope.as_ref()).await?;
        let store = Arc::clone(&self.store);
        let removed = super::blocking(move || store.prune_oneshots(&folder, &agent))
            .await?
            .map_err(status_of)?;
        Ok(Response::new(PruneOneshotsReply { removed }))
    }
}
