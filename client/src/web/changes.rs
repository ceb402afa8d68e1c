//! The web view's snapshot and checkpoint API: the folder's timeline, a
//! message's diff, undo/rewind (plan first, then confirm), fork, rollback.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use agentx_shared::proto::library_client::LibraryClient;
use agentx_shared::proto::sessions_client::SessionsClient;
use agentx_shared::proto::snapshots_client::SnapshotsClient;
use agentx_shared::proto::{
    ChangeKind, DiffRequest, ForkRequest, ListSnapshotsRequest, PlannedChange, RestoreRequest,
    RollbackRequest, diff_request, restore_request, rollback_request,
};

use super::Web;
use super::api::{Where, summary_json};
use super::reply::{ApiError, ApiResult, ok};

#[derive(Debug, Deserialize)]
pub struct ForkBody {
    id: String,
    /// 1 = the newest checkpoint.
    checkpoint: u32,
    #[serde(flatten)]
    at: Where,
}

/// A new conversation from a checkpoint; the original is untouched.
pub async fn fork(State(web): State<Arc<Web>>, Json(body): Json<ForkBody>) -> ApiResult {
    let forked = LibraryClient::new(web.channel())
        .fork(ForkRequest {
            scope: Some(body.at.scope(&web)),
            session_id: body.id,
            checkpoint: body.checkpoint,
        })
        .await
        .map_err(|s| ApiError::rpc("forking", &s))?
        .into_inner();
    ok(summary_json(&forked))
}

#[derive(Debug, Deserialize)]
pub struct RollbackBody {
    id: String,
    checkpoint_id: String,
    /// The listing's head: refused when the conversation moved since.
    #[serde(default)]
    head: String,
    #[serde(flatten)]
    at: Where,
}

/// Restores a checkpoint (no files touched), as `agentx rollback`.
pub async fn rollback(State(web): State<Arc<Web>>, Json(body): Json<RollbackBody>) -> ApiResult {
    let reply = SessionsClient::new(web.channel())
        .rollback(RollbackRequest {
            scope: Some(body.at.scope(&web)),
            session_id: body.id,
            target: Some(rollback_request::Target::CheckpointId(body.checkpoint_id)),
            expect_head: body.head,
            ..RollbackRequest::default()
        })
        .await
        .map_err(|s| ApiError::rpc("rolling back", &s))?
        .into_inner();
    let turns = reply.status.map_or(0, |s| s.turns);
    ok(json!({ "turns": turns }))
}

/// The folder's snapshot timeline, newest first.
pub async fn snapshots(State(web): State<Arc<Web>>, Query(at): Query<Where>) -> ApiResult {
    let scope = at.scope(&web);
    let reply = SnapshotsClient::new(web.channel())
        .list_snapshots(ListSnapshotsRequest {
            scope: Some(scope.clone()),
        })
        .await
        .map_err(|s| ApiError::rpc("listing snapshots", &s))?
        .into_inner();
    let list: Vec<Value> = reply
        .snapshots
        .iter()
        .map(|s| {
            json!({
                "index": s.index,
                "id": s.id,
                "created_ms": s.created_at.as_ref().map_or(0, |t| t.unix_ms),
                "label": s.label,
                "files": s.files,
                "bytes": s.bytes,
                "changed_files": s.changed_files,
                "phase": s.phase,
                "pair": s.pair,
            })
        })
        .collect();
    ok(json!({ "folder": scope.folder, "snapshots": list, "store_bytes": reply.store_bytes }))
}

#[derive(Debug, Deserialize)]
pub struct DiffQuery {
    /// A conversation: its message `message` (1 = the last).
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    message: Option<u32>,
    /// Or a snapshot against the folder now.
    #[serde(default)]
    since: Option<String>,
    #[serde(flatten)]
    at: Where,
}

/// What a message changed, or what changed since a snapshot (the same
/// engine as `agentx diff`).
pub async fn diff(State(web): State<Arc<Web>>, Query(query): Query<DiffQuery>) -> ApiResult {
    let target = match (query.id, query.since) {
        (Some(id), None) => diff_request::Target::SessionId(id),
        (None, Some(since)) => diff_request::Target::SinceId(since),
        _ => return Err(ApiError::bad("diff needs a conversation or a snapshot")),
    };
    let reply = SnapshotsClient::new(web.channel())
        .diff(DiffRequest {
            scope: Some(query.at.scope(&web)),
            target: Some(target),
            message: query.message.unwrap_or(1),
        })
        .await
        .map_err(|s| ApiError::rpc("diff", &s))?
        .into_inner();
    let files: Vec<Value> = reply
        .files
        .iter()
        .map(|f| {
            json!({
                "path": f.path,
                "change": f.change,
                "added": f.added_lines,
                "removed": f.removed_lines,
                "binary": f.binary,
                "too_big": f.too_big,
                "unified": f.unified,
            })
        })
        .collect();
    ok(json!({ "from": reply.from, "to": reply.to, "files": files }))
}

#[derive(Debug, Deserialize)]
pub struct RestoreBody {
    /// Undo the last message of this conversation…
    #[serde(default)]
    undo: Option<String>,
    /// …or rewind the folder to this snapshot.
    #[serde(default)]
    rewind: Option<String>,
    #[serde(default)]
    force: bool,
    #[serde(flatten)]
    at: Where,
}

impl RestoreBody {
    fn request(self, web: &Web) -> Result<RestoreRequest, ApiError> {
        let target = match (self.undo, self.rewind) {
            (Some(id), None) => restore_request::Target::UndoSessionId(id),
            (None, Some(id)) => restore_request::Target::RewindId(id),
            _ => return Err(ApiError::bad("restore needs `undo` or `rewind`")),
        };
        Ok(RestoreRequest {
            scope: Some(self.at.scope(web)),
            target: Some(target),
            force: self.force,
        })
    }
}

fn change_json(c: &PlannedChange) -> Value {
    let kind = match ChangeKind::try_from(c.kind).unwrap_or(ChangeKind::Unspecified) {
        ChangeKind::Remove => "remove",
        ChangeKind::RestoreModified => "restore",
        ChangeKind::RestoreDeleted => "recreate",
        ChangeKind::Unspecified => "",
    };
    json!({ "path": c.path, "kind": kind, "conflict": c.conflict, "reason": c.reason })
}

fn changes_json(list: &[PlannedChange]) -> Vec<Value> {
    list.iter().map(change_json).collect()
}

/// What an undo or rewind would do, without doing it.
pub async fn plan_restore(State(web): State<Arc<Web>>, Json(body): Json<RestoreBody>) -> ApiResult {
    let request = body.request(&web)?;
    let plan = SnapshotsClient::new(web.channel())
        .plan_restore(request)
        .await
        .map_err(|s| ApiError::rpc("planning the restore", &s))?
        .into_inner();
    ok(json!({
        "changes": changes_json(&plan.changes),
        "left_alone": changes_json(&plan.left_alone),
        "message": plan.message,
        "passed": plan.passed,
        "target_id": plan.target_id,
    }))
}

/// The restore the CLI runs, conflicts included (skipped unless forced).
pub async fn restore(State(web): State<Arc<Web>>, Json(body): Json<RestoreBody>) -> ApiResult {
    let request = body.request(&web)?;
    let reply = SnapshotsClient::new(web.channel())
        .restore(request)
        .await
        .map_err(|s| ApiError::rpc("restoring", &s))?
        .into_inner();
    ok(json!({
        "applied": changes_json(&reply.applied),
        "skipped": changes_json(&reply.skipped),
        "left_alone": changes_json(&reply.left_alone),
        "errors": reply.errors,
        "message": reply.message,
        "undone": reply.undone,
        "pre_restore_snapshot_id": reply.pre_restore_snapshot_id,
    }))
}
