//! `agentx snapshots`, `snapshot`, `undo` and `rewind`: the folder's
//! snapshots, and putting files back after showing what will change.

use std::io::IsTerminal as _;

use serde_json::{Value, json};

use agentx_shared::proto::snapshots_client::SnapshotsClient;
use agentx_shared::proto::{
    ChangeKind, ListSnapshotsRequest, PlannedChange, RestoreRequest, TakeSnapshotRequest,
    restore_request::Target,
};
use agentx_shared::time::rfc3339_wire;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};

fn client(ctx: &Ctx) -> SnapshotsClient<tonic::transport::Channel> {
    SnapshotsClient::new(ctx.channel())
}

pub async fn list(ctx: &Ctx, as_json: bool) -> CliResult<()> {
    let reply = client(ctx)
        .list_snapshots(ListSnapshotsRequest { scope: ctx.scope() })
        .await
        .map_err(|s| CliError::from_status("listing snapshots", &s))?
        .into_inner();
    if as_json {
        let docs: Vec<Value> = reply
            .snapshots
            .iter()
            .map(|s| {
                json!({"index": s.index, "id": s.id, "created_at": rfc3339_wire(s.created_at.as_ref()),
                    "label": s.label, "files": s.files, "bytes": s.bytes, "changed_files": s.changed_files})
            })
            .collect();
        println!("{}", Value::Array(docs));
        return Ok(());
    }
    if reply.snapshots.is_empty() {
        println!("no snapshots of this folder yet: one is taken before every message");
    }
    for s in &reply.snapshots {
        println!(
            "{:>3}  {}  {:>4} changed  {:>6} files  {}",
            s.index,
            rfc3339_wire(s.created_at.as_ref()),
            s.changed_files,
            s.files,
            s.label
        );
    }
    println!("store: {} bytes on disk", reply.store_bytes);
    Ok(())
}

pub async fn take(ctx: &Ctx, label: Option<String>) -> CliResult<()> {
    let snap = client(ctx)
        .take_snapshot(TakeSnapshotRequest {
            scope: ctx.scope(),
            label: label.unwrap_or_default(),
        })
        .await
        .map_err(|s| CliError::from_status("snapshot", &s))?
        .into_inner();
    println!(
        "snapshot {} taken: {} files, {} changed since the previous one",
        snap.id, snap.files, snap.changed_files
    );
    Ok(())
}

fn show(changes: &[PlannedChange]) {
    for c in changes {
        let what = match ChangeKind::try_from(c.kind) {
            Ok(ChangeKind::Remove) => "created  → remove ",
            Ok(ChangeKind::RestoreModified) => "modified → restore",
            Ok(ChangeKind::RestoreDeleted) => "deleted  → restore",
            _ => "?",
        };
        let conflict = if c.conflict {
            "   (changed since: conflict, skipped unless --force)"
        } else {
            ""
        };
        eprintln!("  {what}  {}{conflict}", c.path);
    }
}

/// What to restore.
pub enum Restore {
    /// The last message of this conversation.
    Undo(String),
    /// The Nth newest snapshot.
    Rewind(u32),
}

/// Shows the plan, asks (unless `yes`), then restores.
pub async fn restore(ctx: &Ctx, what: Restore, yes: bool, force: bool) -> CliResult<()> {
    let target = match &what {
        Restore::Undo(session) => Target::UndoSessionId(session.clone()),
        Restore::Rewind(n) => Target::RewindIndex(*n),
    };
    let request = RestoreRequest {
        scope: ctx.scope(),
        target: Some(target),
        force,
    };
    let plan = client(ctx)
        .plan_restore(request.clone())
        .await
        .map_err(|s| CliError::from_status("planning the restore", &s))?
        .into_inner();
    if plan.changes.is_empty() {
        println!("nothing to change: the folder already matches");
        return Ok(());
    }
    let verb = match what {
        Restore::Undo(_) => "undo",
        Restore::Rewind(_) => "rewind",
    };
    eprintln!("{verb} will change {} path(s):", plan.changes.len());
    show(&plan.changes);
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(CliError::usage(format!(
                "{verb} needs --yes when not run from a terminal"
            )));
        }
        if !crate::confirm(&format!("{verb} these changes?"))? {
            println!("nothing changed");
            return Ok(());
        }
    }
    let reply = client(ctx)
        .restore(request)
        .await
        .map_err(|s| CliError::from_status(verb, &s))?
        .into_inner();
    println!(
        "{verb}: {} path(s) restored, {} skipped (snapshot {} holds the state before; `agentx rewind 1` returns to it)",
        reply.applied.len(),
        reply.skipped.len(),
        reply.pre_restore_snapshot_id
    );
    if !reply.skipped.is_empty() {
        eprintln!("skipped (changed since; --force restores them too):");
        show(&reply.skipped);
    }
    if !reply.errors.is_empty() {
        for e in &reply.errors {
            eprintln!("  not restored: {e}");
        }
        return Err(CliError::failed(format!(
            "{} path(s) could not be restored",
            reply.errors.len()
        )));
    }
    Ok(())
}

/// `agentx undo`: the current conversation's last message.
pub async fn undo(ctx: &Ctx, yes: bool, force: bool) -> CliResult<()> {
    let status = crate::commands::sessions::fetch_status(ctx, "").await?;
    if status.session_id.is_empty() {
        return Err(CliError::failed("this folder has no conversation to undo"));
    }
    restore(ctx, Restore::Undo(status.session_id), yes, force).await
}

/// `agentx rewind [N]`: without N, the list to choose from.
pub async fn rewind(ctx: &Ctx, index: Option<u32>, yes: bool, force: bool) -> CliResult<()> {
    match index {
        None => {
            list(ctx, false).await?;
            println!("`agentx rewind N` puts the folder back as snapshot N had it");
            Ok(())
        }
        Some(n) => restore(ctx, Restore::Rewind(n), yes, force).await,
    }
}
