//! `agentx snapshots`, `snapshot`, `undo` and `rewind`: the folder's
//! snapshots, and putting files back after showing what will change.

use std::io::IsTerminal as _;

use serde_json::{Value, json};

use agentx_shared::proto::snapshots_client::SnapshotsClient;
use agentx_shared::proto::{
    ChangeKind, PlannedChange, RestorePlan, RestoreReply, RestoreRequest, TakeSnapshotRequest,
    restore_request::Target,
};
use agentx_shared::time::rfc3339_wire;

pub mod rewind_to;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::diff::Format;
use crate::rpc::DiffOf;

fn client(ctx: &Ctx) -> SnapshotsClient<tonic::transport::Channel> {
    SnapshotsClient::new(ctx.channel())
}

pub async fn list(ctx: &Ctx, as_json: bool) -> CliResult<()> {
    let reply = ctx.rpc().snapshots_list().await?;
    if as_json {
        let docs: Vec<Value> = reply
            .snapshots
            .iter()
            .map(|s| {
                json!({"index": s.index, "id": s.id, "created_at": rfc3339_wire(s.created_at.as_ref()),
                    "label": s.label, "files": s.files, "bytes": s.bytes, "changed_files": s.changed_files,
                    "skipped": s.skipped, "skipped_why": s.skipped_why,
                    "phase": if s.phase.is_empty() { Value::Null } else { json!(s.phase) }})
            })
            .collect();
        println!("{}", Value::Array(docs));
        return Ok(());
    }
    if reply.snapshots.is_empty() {
        println!("no snapshots of this folder yet: one is taken before every message");
    }
    let rows = rows(&reply.snapshots);
    for line in crate::show::table(&rows, &[true, false, true, true, false]) {
        println!("{line}");
    }
    println!("store: {} bytes on disk", reply.store_bytes);
    Ok(())
}

/// How many snapshots this folder has (what `/rewind N` may name).
pub async fn count(ctx: &Ctx) -> CliResult<usize> {
    Ok(ctx.rpc().snapshots_list().await?.snapshots.len())
}

/// One row per snapshot, except a message's after and before snapshots
/// (listed next to each other, newest first), which share one: `2→1`, what
/// the message changed, its label.
fn rows(snaps: &[agentx_shared::proto::SnapshotInfo]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut i = 0;
    while let Some(s) = snaps.get(i) {
        let before = snaps.get(i + 1).filter(|b| {
            s.phase == "after" && b.phase == "before" && !s.pair.is_empty() && b.pair == s.pair
        });
        let index = match before {
            Some(b) => format!("{}→{}", b.index, s.index),
            None => s.index.to_string(),
        };
        let what = match s.phase.as_str() {
            "pre-restore" => "before a restore: ",
            _ => "",
        };
        rows.push(vec![
            index,
            crate::when::human(s.created_at.as_ref()),
            format!("{} changed", s.changed_files),
            agentx_shared::plural::count(s.files, "file"),
            format!("{what}{}", crate::show::visible(&s.label)),
        ]);
        i += if before.is_some() { 2 } else { 1 };
    }
    rows
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
    if snap.skipped > 0 {
        eprintln!(
            "{} not captured ({}): restores leave them alone",
            agentx_shared::plural::count(snap.skipped, "path"),
            snap.skipped_why
        );
    }
    Ok(())
}

/// Prints planned changes, one path a line, on stderr.
fn show(changes: &[PlannedChange]) {
    for c in changes {
        let what = match ChangeKind::try_from(c.kind) {
            Ok(ChangeKind::Remove) => "created  → remove ",
            Ok(ChangeKind::RestoreModified) => "modified → restore",
            Ok(ChangeKind::RestoreDeleted) => "deleted  → restore",
            _ => "?",
        };
        let note = if !c.reason.is_empty() {
            format!("   ({})", c.reason)
        } else if c.conflict {
            "   (changed since: conflict, skipped unless --force)".to_owned()
        } else {
            String::new()
        };
        // Paths come escaped from agentd (no raw newline or tab).
        eprintln!("  {what}  {}{note}", c.path);
    }
}

/// What to restore.
pub enum Restore {
    /// The last message of this conversation.
    Undo(String),
    /// The Nth newest snapshot.
    Rewind(u32),
    /// The snapshot with this id.
    RewindId(String),
}

/// Shows the plan, asks (unless `yes`), then restores; `false` when the
/// user said no (nothing changed).
pub async fn restore(ctx: &Ctx, what: Restore, yes: bool, force: bool) -> CliResult<bool> {
    restore_saying(ctx, what, (yes, force), say_out).await
}

/// A line of a restore's outcome, for people: stdout.
fn say_out(line: &str) {
    println!("{line}");
}

/// A line of a restore's outcome when stdout carries JSON: stderr.
pub fn say_err(line: &str) {
    eprintln!("{line}");
}

/// [`restore`], its outcome lines given to `say`.
pub async fn restore_saying(
    ctx: &Ctx,
    what: Restore,
    (yes, force): (bool, bool),
    say: fn(&str),
) -> CliResult<bool> {
    let target = match &what {
        Restore::Undo(session) => Target::UndoSessionId(session.clone()),
        Restore::Rewind(n) => Target::RewindIndex(*n),
        Restore::RewindId(id) => Target::RewindId(id.clone()),
    };
    let mut request = RestoreRequest {
        scope: ctx.scope(),
        target: Some(target),
        force,
    };
    let plan = plan(ctx, request.clone()).await?;
    let undo = matches!(what, Restore::Undo(_));
    let verb = if undo { "undo" } else { "rewind" };
    if !undo && !plan.target_id.is_empty() {
        // Restore exactly the snapshot shown, even if another one is taken
        // meanwhile (N would then name a different one).
        request.target = Some(Target::RewindId(plan.target_id.clone()));
    }
    show_plan(&plan, undo);
    // What the user may look at first: the message's diff (undo), or what
    // changed since the snapshot (rewind).
    let (session, of) = match &what {
        Restore::Undo(session) => (
            session.clone(),
            DiffOf::Message(1 + plan.passed.len() as u32),
        ),
        _ => (String::new(), DiffOf::Since(plan.target_id.clone())),
    };
    if !go_ahead(ctx, &plan, (verb, undo, yes), (&session, &of), say).await? {
        return Ok(plan.changes.is_empty());
    }
    let reply = apply(ctx, request, verb).await?;
    report(&reply, verb, undo, say).map(|()| true)
}

/// Asks agentd what restoring `request` would change.
async fn plan(ctx: &Ctx, request: RestoreRequest) -> CliResult<RestorePlan> {
    let plan = client(ctx)
        .plan_restore(request)
        .await
        .map_err(|s| {
            let e = CliError::from_status("planning the restore", &s);
            if e.exit == crate::error::Exit::Unreachable {
                CliError::unreachable(
                    "agentd stopped while planning the restore; nothing was changed — run it again",
                )
            } else {
                e
            }
        })?
        .into_inner();
    Ok(plan)
}

/// Shows the messages passed over, the one undone and the paths left alone.
fn show_plan(plan: &RestorePlan, undo: bool) {
    for m in &plan.passed {
        eprintln!("passing over {m}: it changed nothing");
    }
    if undo {
        eprintln!("undoing {}", plan.message);
    }
    if !plan.left_alone.is_empty() {
        eprintln!(
            "left alone ({} agentx could not capture):",
            agentx_shared::plural::count(plan.left_alone.len() as u64, "path")
        );
        show(&plan.left_alone);
    }
}

/// Shows the planned changes and asks (unless `yes`); false: nothing is
/// to be done (nothing to change for a rewind, or the user said no).
async fn go_ahead(
    ctx: &Ctx,
    plan: &RestorePlan,
    (verb, undo, yes): (&str, bool, bool),
    (session, diff): (&str, &DiffOf),
    say: fn(&str),
) -> CliResult<bool> {
    if plan.changes.is_empty() {
        say("nothing to change: the folder already matches");
        // An undo still moves past this message (and any it passed over).
        return Ok(undo);
    }
    eprintln!(
        "{verb} will change {}:",
        agentx_shared::plural::count(plan.changes.len() as u64, "path")
    );
    show(&plan.changes);
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(CliError::usage(format!(
                "{verb} needs --yes when not run from a terminal"
            )));
        }
        loop {
            match crate::ui::ask(&format!("{verb} these changes? [y/N, d = show the diff]"))?
                .as_str()
            {
                "y" | "yes" => break,
                "d" | "diff" => {
                    let reply = ctx.rpc().diff(session, diff).await?;
                    crate::pager::print_diff(&reply, Format::Patch)?;
                }
                _ => {
                    println!("nothing changed");
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

/// Restores `request`; agentd going away midway is reported as unreachable.
async fn apply(ctx: &Ctx, request: RestoreRequest, verb: &str) -> CliResult<RestoreReply> {
    let reply = client(ctx).restore(request).await.map_err(|s| {
        if matches!(
            s.code(),
            tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown
        ) {
            CliError::unreachable(format!(
                "agentd stopped during the {verb}; it will be finished on the next command ({})",
                s.message()
            ))
        } else {
            CliError::from_status(verb, &s)
        }
    })?;
    Ok(reply.into_inner())
}

/// Prints what the restore did; fails when some path could not be restored.
fn report(reply: &RestoreReply, verb: &str, undo: bool, say: fn(&str)) -> CliResult<()> {
    say(&format!(
        "{verb}: {} restored, {} skipped, {} left alone, {} failed (snapshot {} holds the state before; `{}` returns to it)",
        reply.applied.len(),
        reply.skipped.len(),
        reply.left_alone.len(),
        reply.errors.len(),
        reply.pre_restore_snapshot_id,
        crate::ui::how(&format!("rewind {}", reply.pre_restore_snapshot_id))
    ));
    if !reply.skipped.is_empty() {
        eprintln!("skipped (changed since; --force restores them too):");
        show(&reply.skipped);
    }
    if !reply.left_alone.is_empty() {
        eprintln!("left alone:");
        show(&reply.left_alone);
    }
    for e in &reply.errors {
        eprintln!("  not restored: {e}");
    }
    if undo && !reply.undone {
        eprintln!(
            "{} stays the message to undo: run undo again (with --force for the skipped paths)",
            reply.message
        );
    }
    if !reply.errors.is_empty() {
        return Err(CliError::failed(format!(
            "{} could not be restored",
            agentx_shared::plural::count(reply.errors.len() as u64, "path")
        )));
    }
    Ok(())
}

/// Parses `N` (a position, 1 = newest) or a snapshot id.
pub fn rewind_target(arg: &str) -> Restore {
    match arg.parse::<u32>() {
        Ok(n) if arg.len() <= 4 => Restore::Rewind(n),
        _ => Restore::RewindId(arg.to_owned()),
    }
}

/// `agentx undo`: the current conversation's last message.
pub async fn undo(ctx: &Ctx, yes: bool, force: bool) -> CliResult<()> {
    let status = ctx.status("").await?;
    if status.session_id.is_empty() {
        return Err(CliError::failed("this folder has no conversation to undo"));
    }
    restore(ctx, Restore::Undo(status.session_id), yes, force)
        .await
        .map(drop)
}

/// `agentx rewind [N]`: without N, the list to choose from.
pub async fn rewind(ctx: &Ctx, index: Option<String>, yes: bool, force: bool) -> CliResult<()> {
    match index {
        None => {
            list(ctx, false).await?;
            println!(
                "`{}` (or `{}`) puts the folder back as that snapshot had it",
                crate::ui::how("rewind N"),
                crate::ui::how("rewind ID")
            );
            Ok(())
        }
        Some(n) => restore(ctx, rewind_target(&n), yes, force).await.map(drop),
    }
}
