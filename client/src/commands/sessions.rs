//! `agentx sessions`, `status` and `clear`: conversation listings and state,
//! as text or as the JSON documents of DESIGN §7.

use serde_json::{Value, json};

use agentx_shared::conversation::PendingCall;
use agentx_shared::proto::{
    ClearSessionRequest, GetStatusRequest, ListSessionsRequest, SessionStatus, SessionSummary,
};
use agentx_shared::time::rfc3339_wire;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};

pub fn summary_json(s: &SessionSummary) -> Value {
    json!({
        "id": s.id,
        "title": s.title,
        "folder": s.folder,
        "agent": s.agent,
        "created_at": rfc3339_wire(s.created_at.as_ref()),
        "updated_at": rfc3339_wire(s.updated_at.as_ref()),
        "turns": s.turns,
        "forked_from": s.forked_from.as_ref().map(|f| json!({"id": f.id, "turn": f.turn})),
    })
}

pub async fn list(ctx: &Ctx) -> CliResult<Vec<SessionSummary>> {
    Ok(ctx
        .sessions()
        .list_sessions(ListSessionsRequest { scope: ctx.scope() })
        .await
        .map_err(|s| CliError::from_status("listing conversations", &s))?
        .into_inner()
        .sessions)
}

/// One line of the list (without its number).
pub fn label(s: &SessionSummary) -> String {
    let title = if s.title.is_empty() {
        "(empty)"
    } else {
        s.title.as_str()
    };
    let origin = s
        .forked_from
        .as_ref()
        .map(|f| format!("  (fork of {} @turn {})", f.id, f.turn))
        .unwrap_or_default();
    format!(
        "{}  {}  {:>3} turn(s)  {title}{origin}",
        s.id,
        crate::when::human(s.updated_at.as_ref()),
        s.turns
    )
}

/// Numbered list, newest first (1 = newest).
pub fn print_list(sessions: &[SessionSummary]) {
    if sessions.is_empty() {
        println!("no conversations in this folder yet");
        return;
    }
    for (i, s) in sessions.iter().enumerate() {
        println!("{:>3}  {}", i + 1, label(s));
    }
}

pub async fn sessions(ctx: &Ctx, as_json: bool, tree: bool) -> CliResult<()> {
    let sessions = list(ctx).await?;
    if tree {
        crate::commands::library::print_tree(&sessions);
    } else if as_json {
        let docs: Vec<Value> = sessions.iter().map(summary_json).collect();
        println!("{}", Value::Array(docs));
    } else {
        print_list(&sessions);
    }
    Ok(())
}

pub async fn fetch_status(ctx: &Ctx, session_id: &str) -> CliResult<SessionStatus> {
    Ok(ctx
        .sessions()
        .get_status(GetStatusRequest {
            scope: ctx.scope(),
            session_id: session_id.to_owned(),
        })
        .await
        .map_err(|s| CliError::from_status("conversation status", &s))?
        .into_inner())
}

pub fn status_json(ctx: &Ctx, s: &SessionStatus) -> Value {
    let usage = s.usage.unwrap_or_default();
    let pending: Vec<Value> = s
        .pending_tool_calls
        .iter()
        .map(|c| {
            json!({
                "call_id": c.call_id,
                "name": c.name,
                "arguments": c.arguments,
                "state": PendingCall::state_name(c.state),
                "exit_code": c.exit_code,
                "output": c.output,
            })
        })
        .collect();
    let marker = |f: &agentx_shared::proto::FailedResponse| json!({"message": f.message, "at": rfc3339_wire(f.at.as_ref()), "retryable": f.retryable});
    let failed = s.failed.as_ref().map(marker);
    let interrupted = s.interrupted.as_ref().map(marker);
    let cut_short = s.cut_short.as_ref().map(marker);
    let backup = s
        .rollback_backup_at
        .as_ref()
        .filter(|_| s.has_rollback_backup)
        .map(|at| json!({"at": rfc3339_wire(Some(at))}));
    json!({
        "session_id": s.session_id,
        "response_id": if s.response_id.is_empty() { Value::Null } else { json!(s.response_id) },
        "folder": ctx.scope.folder,
        "agent": ctx.scope.agent,
        "title": s.title,
        "turns": s.turns,
        "usage": crate::usage::json(&usage),
        "checkpoints": s.checkpoints,
        "pending_tool_calls": pending,
        "pending_shell_transcript": s.has_pending_shell_transcript,
        "failed": failed,
        "interrupted": interrupted,
        "cut_short": cut_short,
        "rollback_backup": backup,
        "snapshots": s.snapshots,
        "snapshot_store_bytes": s.snapshot_store_bytes,
        "snapshot_watch": s.snapshot_watch,
        "transcript_items": s.transcript_items,
        "daemon": {"pid": ctx.hello().pid, "version": ctx.hello().daemon_version},
    })
}

pub fn print_status(ctx: &Ctx, s: &SessionStatus) {
    if s.session_id.is_empty() {
        println!(
            "no conversation in {} yet (agent {})",
            ctx.scope.folder, ctx.scope.agent
        );
        return;
    }
    let u = s.usage.unwrap_or_default();
    println!("conversation  {}  {}", s.session_id, s.title);
    println!(
        "folder        {} (agent {})",
        ctx.scope.folder, ctx.scope.agent
    );
    let response = if s.response_id.is_empty() {
        "-"
    } else {
        s.response_id.as_str()
    };
    println!("response id   {response}");
    println!(
        "turns         {} ({} transcript items)",
        s.turns, s.transcript_items
    );
    println!("usage         {}", crate::usage::line(&u));
    println!("checkpoints   {}", s.checkpoints);
    if !s.pending_tool_calls.is_empty() {
        println!(
            "pending       {} tool call(s) from an interrupted turn",
            s.pending_tool_calls.len()
        );
        for c in &s.pending_tool_calls {
            println!(
                "              {} {} {}",
                c.call_id,
                PendingCall::state_name(c.state),
                c.arguments
            );
        }
    }
    if s.has_pending_shell_transcript {
        println!("local shell   output of !commands waits to be sent with the next message");
    }
    if let Some(f) = &s.failed {
        println!(
            "failed        {} ({}) — agentx retry [--new-chain], rollback or clear",
            f.message,
            crate::when::human(f.at.as_ref())
        );
    }
    if let Some(i) = &s.interrupted {
        println!(
            "interrupted   {} ({})",
            i.message,
            crate::when::human(i.at.as_ref())
        );
    }
    if s.has_rollback_backup {
        println!(
            "rollback      backup from {} (agentx rollback --undo restores it)",
            crate::when::human(s.rollback_backup_at.as_ref())
        );
    }
    println!(
        "snapshots     {} ({} bytes stored)",
        s.snapshots, s.snapshot_store_bytes
    );
    if !s.snapshot_watch.is_empty() {
        println!("watch         {}", s.snapshot_watch);
    }
    println!(
        "daemon        pid {}, version {}",
        ctx.hello().pid,
        ctx.hello().daemon_version
    );
}

pub async fn status(ctx: &Ctx, as_json: bool) -> CliResult<()> {
    let s = fetch_status(ctx, "").await?;
    if as_json {
        println!("{}", status_json(ctx, &s));
    } else {
        print_status(ctx, &s);
    }
    Ok(())
}

pub async fn clear(ctx: &Ctx, session_id: &str) -> CliResult<SessionSummary> {
    ctx.sessions()
        .clear_session(ClearSessionRequest {
            scope: ctx.scope(),
            session_id: session_id.to_owned(),
        })
        .await
        .map_err(|s| CliError::from_status("clearing the conversation", &s))?
        .into_inner()
        .session
        .ok_or_else(|| CliError::failed("agentd returned no conversation"))
}

/// `agentx clear`: asks first unless --yes (and refuses to guess without a terminal).
pub async fn clear_command(ctx: &Ctx, yes: bool) -> CliResult<()> {
    let s = fetch_status(ctx, "").await?;
    if s.session_id.is_empty() {
        println!("no conversation to clear");
        return Ok(());
    }
    if !yes
        && !crate::confirm(&format!(
            "delete conversation {} ({} turns)?",
            s.session_id, s.turns
        ))?
    {
        println!("nothing changed");
        return Ok(());
    }
    let fresh = clear(ctx, &s.session_id).await?;
    println!("cleared {}; new conversation {}", s.session_id, fresh.id);
    Ok(())
}
