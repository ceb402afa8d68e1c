//! The `Snapshots` gRPC service: list, take, and plan or apply an undo or
//! a rewind, answered by the snapshot actor.

use std::path::PathBuf;

use tonic::{Request, Response, Status};

use agentx_shared::proto::snapshots_server::Snapshots as SnapshotsApi;
use agentx_shared::proto::{
    ChangeKind, DiffReply, DiffRequest, ListSnapshotsReply, ListSnapshotsRequest, PlannedChange,
    RestorePlan, RestoreReply, RestoreRequest, SnapshotInfo, TakeSnapshotRequest, Timestamp,
    diff_request, restore_request::Target,
};

use super::group_for;
use super::status::{bad_name, snap_status};
use crate::snapshot::restore::{Action, Planned};
use crate::snapshot::service::Snapshots;
use crate::snapshot::{Owner, Phase, RewindTo, Snap};
use crate::store::Store;

pub struct SnapshotsService {
    store: std::sync::Arc<Store>,
    snapshots: Snapshots,
}

impl SnapshotsService {
    pub fn new(store: std::sync::Arc<Store>, snapshots: Snapshots) -> Self {
        Self { store, snapshots }
    }
}

pub fn info(index: usize, s: &Snap) -> SnapshotInfo {
    SnapshotInfo {
        index: u32::try_from(index).unwrap_or(u32::MAX),
        id: s.id.clone(),
        created_at: Some(Timestamp {
            unix_ms: s.created_at,
        }),
        label: s.label(),
        files: s.files,
        bytes: s.bytes,
        changed_files: s.changed,
        skipped: s.skipped,
        skipped_why: s.skipped_why.clone(),
        phase: s
            .owners
            .first()
            .map(|o| match o.phase {
                Phase::Before => "before",
                Phase::After => "after",
                Phase::Manual => "manual",
                Phase::PreRestore => "pre-restore",
            })
            .unwrap_or_default()
            .to_owned(),
        pair: s.owners.first().map(|o| o.pair.clone()).unwrap_or_default(),
    }
}

fn planned(p: &[Planned]) -> Vec<PlannedChange> {
    p.iter()
        .map(|c| PlannedChange {
            path: c.path.clone(),
            kind: match c.action {
                Action::Remove => ChangeKind::Remove,
                Action::RestoreModified => ChangeKind::RestoreModified,
                Action::RestoreDeleted => ChangeKind::RestoreDeleted,
            } as i32,
            conflict: c.conflict,
            reason: c.reason.clone(),
        })
        .collect()
}

enum What {
    Undo(String),
    Rewind(RewindTo),
}

fn what(req: &RestoreRequest) -> Result<What, Status> {
    match &req.target {
        Some(Target::UndoSessionId(id)) => {
            agentx_shared::folder::check_component("session id", id).map_err(bad_name)?;
            Ok(What::Undo(id.clone()))
        }
        Some(Target::RewindIndex(n)) => Ok(What::Rewind(RewindTo::Index(*n as usize))),
        Some(Target::RewindId(id)) => {
            agentx_shared::folder::check_component("snapshot id", id).map_err(bad_name)?;
            Ok(What::Rewind(RewindTo::Id(id.clone())))
        }
        None => Err(Status::invalid_argument(
            "say what to restore: undo or rewind",
        )),
    }
}

/// What a diff request compares, checked at the edge.
fn diff_of(req: &DiffRequest) -> Result<crate::snapshot::diff::DiffOf, Status> {
    use crate::snapshot::diff::DiffOf;
    let id = |what: &'static str, id: &str| {
        agentx_shared::folder::check_component(what, id)
            .map(drop)
            .map_err(bad_name)
    };
    match &req.target {
        Some(diff_request::Target::SessionId(session)) => {
            id("session id", session)?;
            Ok(DiffOf::Message {
                session: session.clone(),
                n: req.message.max(1) as usize,
            })
        }
        Some(diff_request::Target::SinceIndex(n)) => {
            Ok(DiffOf::Since(RewindTo::Index(*n as usize)))
        }
        Some(diff_request::Target::SinceId(snap)) => {
            id("snapshot id", snap)?;
            Ok(DiffOf::Since(RewindTo::Id(snap.clone())))
        }
        None => Err(Status::invalid_argument(
            "say what to compare: a message or a snapshot",
        )),
    }
}

/// A diff on the wire.
fn wire_diff(d: crate::snapshot::diff::Diff) -> DiffReply {
    DiffReply {
        from: d.from,
        to: d.to,
        files: d
            .files
            .into_iter()
            .map(|f| agentx_shared::proto::FileDiff {
                path: f.path,
                change: f.change.to_owned(),
                added_lines: f.added,
                removed_lines: f.removed,
                binary: f.binary,
                too_big: f.too_big,
                unified: f.unified,
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl SnapshotsApi for SnapshotsService {
    async fn diff(&self, request: Request<DiffRequest>) -> Result<Response<DiffReply>, Status> {
        let req = request.into_inner();
        let (_, folder) = group_for(&self.store, req.scope.as_ref()).await?;
        let folder = PathBuf::from(folder);
        let of = diff_of(&req)?;
        let diff = self
            .snapshots
            .call(&folder.clone(), move |s| s.diff(&folder, &of))
            .await
            .map_err(snap_status)?;
        Ok(Response::new(wire_diff(diff)))
    }

    async fn list_snapshots(
        &self,
        request: Request<ListSnapshotsRequest>,
    ) -> Result<Response<ListSnapshotsReply>, Status> {
        let (_, folder) = group_for(&self.store, request.get_ref().scope.as_ref()).await?;
        let folder = PathBuf::from(folder);
        let (snaps, bytes) = self
            .snapshots
            .call(&folder.clone(), move |s| {
                Ok((s.list(&folder)?, s.disk_bytes()))
            })
            .await
            .map_err(snap_status)?;
        Ok(Response::new(ListSnapshotsReply {
            snapshots: snaps
                .iter()
                .enumerate()
                .map(|(i, s)| info(i + 1, s))
                .collect(),
            store_bytes: bytes,
        }))
    }

    async fn take_snapshot(
        &self,
        request: Request<TakeSnapshotRequest>,
    ) -> Result<Response<SnapshotInfo>, Status> {
        let req = request.into_inner();
        let (_, folder) = group_for(&self.store, req.scope.as_ref()).await?;
        let label = if req.label.is_empty() {
            "manual".to_owned()
        } else {
            req.label
        };
        let owner = Owner {
            session: String::new(),
            phase: Phase::Manual,
            pair: String::new(),
            label,
        };
        let snap = self
            .snapshots
            .take(&PathBuf::from(folder), owner)
            .await
            .map_err(snap_status)?;
        Ok(Response::new(info(1, &snap)))
    }

    async fn plan_restore(
        &self,
        request: Request<RestoreRequest>,
    ) -> Result<Response<RestorePlan>, Status> {
        let req = request.into_inner();
        let (_, folder) = group_for(&self.store, req.scope.as_ref()).await?;
        let folder = PathBuf::from(folder);
        // Refused before any plan is made: a plan of a folder that a turn or
        // one-shot is still changing would show a state that is already gone
        // ("nothing to change" while a tool writes). `restore` checks again.
        self.snapshots
            .busy()
            .check(&folder)
            .map_err(|e| snap_status(e.into()))?;
        let plan = match what(&req)? {
            What::Undo(session) => {
                self.snapshots
                    .call(&folder.clone(), move |s| s.plan_undo(&folder, &session))
                    .await
            }
            What::Rewind(to) => {
                self.snapshots
                    .call(&folder.clone(), move |s| s.plan_rewind(&folder, &to))
                    .await
            }
        }
        .map_err(snap_status)?;
        Ok(Response::new(RestorePlan {
            changes: planned(&plan.changes),
            left_alone: planned(&plan.left_alone),
            message: plan.message,
            passed: plan.passed,
            target_id: plan.target_id,
        }))
    }

    async fn restore(
        &self,
        request: Request<RestoreRequest>,
    ) -> Result<Response<RestoreReply>, Status> {
        let req = request.into_inner();
        let (_, folder) = group_for(&self.store, req.scope.as_ref()).await?;
        let folder = PathBuf::from(folder);
        let force = req.force;
        // Checked on the snapshot actor's thread: a turn that registers
        // after this check queues its "before" snapshot (and so its tools)
        // behind this restore.
        let busy = self.snapshots.busy();
        let report = match what(&req)? {
            What::Undo(session) => {
                self.snapshots
                    .restore(&folder.clone(), move |s| {
                        busy.check(&folder)?;
                        s.begin_undo(&folder, &session, force)
                    })
                    .await
            }
            What::Rewind(to) => {
                // Numbered as the user saw the list: fixed before the
                // snapshot the restore takes ahead of itself.
                let to = match to {
                    RewindTo::Index(_) => {
                        let at = folder.clone();
                        let id = self
                            .snapshots
                            .call(&folder, move |s| Ok(s.rewind_target(&at, &to)?.id))
                            .await
                            .map_err(snap_status)?;
                        RewindTo::Id(id)
                    }
                    to => to,
                };
                self.snapshots
                    .restore(&folder.clone(), move |s| {
                        busy.check(&folder)?;
                        s.begin_rewind(&folder, &to)
                    })
                    .await
            }
        }
        .map_err(snap_status)?;
        if !report.errors.is_empty() {
            tracing::warn!(errors = ?report.errors, "restore finished with errors");
        }
        Ok(Response::new(RestoreReply {
            applied: planned(&report.applied),
            skipped: planned(&report.skipped),
            pre_restore_snapshot_id: report.pre_restore,
            errors: report.errors,
            left_alone: planned(&report.left_alone),
            message: report.message,
            passed: report.passed,
            undone: report.undone,
        }))
    }
}
