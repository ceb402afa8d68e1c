//! The `--json` documents of conversations, status, the remote store and
//! search hits (the documented --json contract): one function per document.

use serde_json::{Value, json};

use agentx_shared::conversation::PendingCall;
use agentx_shared::proto::{
    ContextMeter, FailedResponse, RemoteState, RemoteSync, SearchHit, SessionStatus,
    SessionSummary, SyncRemoteReply,
};
use agentx_shared::time::rfc3339_wire;

use super::Local;
use super::human::kept_in;

/// `s` as JSON; `in`: its folder relative to `here` when this machine
/// keeps it in another folder (another checkout of the project).
pub fn summary(s: &SessionSummary, here: &str) -> Value {
    json!({
        "in": kept_in(s, here),
        "id": s.id,
        "title": s.title,
        "folder": s.folder,
        "agent": s.agent,
        "created_at": rfc3339_wire(s.created_at.as_ref()),
        "updated_at": rfc3339_wire(s.updated_at.as_ref()),
        "turns": s.turns,
        "forked_from": s.forked_from.as_ref().map(|f| json!({"id": f.id, "turn": f.turn})),
        "where": super::location(s.location()),
        "machine": if s.machine.is_empty() { Value::Null } else { json!(s.machine) },
    })
}

/// `agentx status --json`.
pub fn status(local: &Local, s: &SessionStatus) -> Value {
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
    let marker = |f: &FailedResponse| json!({"message": f.message, "at": rfc3339_wire(f.at.as_ref()), "retryable": f.retryable, "resendable": f.resendable});
    let failed = s.failed.as_ref().map(marker);
    let interrupted = s.interrupted.as_ref().map(marker);
    let cut_short = s.cut_short.as_ref().map(marker);
    let backup = s
        .rollback_backup_at
        .as_ref()
        .filter(|_| s.has_rollback_backup)
        .map(|at| json!({"at": rfc3339_wire(Some(at))}));
    let setup = local.setup.as_ref();
    let opt = |v: &str| (!v.is_empty()).then(|| v.to_owned());
    json!({
        "session_id": s.session_id,
        "model": opt(&s.model).or_else(|| setup.map(|s| s.model.clone())),
        "conversation_model": opt(&s.conversation_model),
        "provider": opt(&s.provider).or_else(|| setup.map(|s| s.provider.clone())),
        "context": s.context.as_ref().map(context),
        "instruction_files": s.instruction_files,
        "instruction_files_skipped": s.instruction_files_skipped,
        "base_url": setup.map(|s| s.base_url.clone()),
        "approval": setup.map(|s| s.approval),
        "shell_environment": setup.map(|s| shell_environment(&s.shell_environment)),
        "sandbox": setup.map(sandbox),
        "response_id": if s.response_id.is_empty() { Value::Null } else { json!(s.response_id) },
        "folder": local.folder,
        "agent": local.agent,
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
        "daemon": {"pid": local.daemon_pid, "version": local.daemon_version},
        "remote": remote(s.remote.as_ref()),
        "remote_copy": s.remote_copy,
    })
}

/// `{used_tokens, window_tokens, percent, estimated, auto_compact_at,
/// window_source}`; `auto_compact_at` is a percent of the window, null when
/// automatic compaction is off.
pub fn context(c: &ContextMeter) -> Value {
    json!({
        "used_tokens": c.used_tokens,
        "window_tokens": c.window_tokens,
        "percent": (c.percent * 10.0).round() / 10.0,
        "estimated": c.estimated,
        "auto_compact_at": if c.auto_compact_at > 0.0 { json!(c.auto_compact_at.round()) } else { Value::Null },
        "window_source": c.window_source,
    })
}

/// `{state, pending, last_error, url, machine, refused}`; `state` is "off"
/// when no remote store is configured. `refused`: `[{id, error}]`, the
/// conversations the server refused to take.
pub fn remote(r: Option<&RemoteState>) -> Value {
    let Some(r) = r.filter(|r| r.state() != RemoteSync::Unspecified) else {
        return json!({"state": "off", "pending": 0, "last_error": null, "refused": []});
    };
    let opt = |s: &str| if s.is_empty() { Value::Null } else { json!(s) };
    json!({
        "state": super::remote_sync(r.state()),
        "pending": r.pending,
        "last_error": opt(&r.last_error),
        "url": opt(&r.url),
        "machine": opt(&r.machine),
        "refused": r.refused.iter().map(|f| json!({"id": f.id, "error": f.error})).collect::<Vec<_>>(),
    })
}

/// `agentx sync --json`.
pub fn sync(reply: &SyncRemoteReply, remote_state: &RemoteState) -> Value {
    json!({
        "reached": reply.reached,
        "timed_out": reply.timed_out,
        "pushed_conversations": reply.pushed_conversations,
        "pushed_records": reply.pushed_records,
        "remote": remote(Some(remote_state)),
        "forks": reply.forks.iter().map(|f| json!({
            "id": f.id,
            "fork_id": f.fork_id,
            "title": f.title,
            "machine": f.machine,
        })).collect::<Vec<_>>(),
    })
}

/// One search hit of `agentx search --json`.
pub fn hit(h: &SearchHit) -> Value {
    json!({
        "session_id": h.session_id,
        "folder": h.folder,
        "agent": h.agent,
        "title": h.title,
        "turn": h.turn,
        "at": rfc3339_wire(h.at.as_ref()),
        "snippet": h.snippet,
        "highlights": h.highlights.iter().map(|r| json!([r.start, r.end])).collect::<Vec<_>>(),
        "score": h.score,
        "where": super::location(h.r#where()),
        "machine": if h.machine.is_empty() { Value::Null } else { json!(h.machine) },
    })
}

/// The tool environment policy in force (`set` by name only: its values
/// may be secrets the user chose to give tools, not to print).
/// `{mode, enforced, network, writable_roots, landlock_abi, reason}`:
/// `enforced` is false for danger-full-access and where the kernel cannot
/// confine commands (`reason` says why).
fn sandbox(setup: &crate::context::Setup) -> Value {
    use agentx_shared::sandbox::Enforcement;
    let p = &setup.sandbox;
    let enforcement = p.enforcement(setup.landlock_abi);
    json!({
        "mode": p.mode.as_str(),
        "enforced": enforcement == Enforcement::Enforced,
        "network": p.network || enforcement == Enforcement::Unconfined,
        "writable_roots": p.writable_roots,
        "landlock_abi": setup.landlock_abi,
        "reason": match enforcement {
            Enforcement::Unavailable(why) => Some(why),
            _ => None,
        },
    })
}

fn shell_environment(p: &agentx_shared::shell_env::ShellEnvironment) -> Value {
    json!({
        "inherit": p.inherit.as_str(),
        "default_excludes": if p.ignore_default_excludes {
            Value::Null
        } else {
            json!(agentx_shared::shell_env::DEFAULT_EXCLUDES)
        },
        "exclude": p.exclude,
        "include_only": p.include_only,
        "set": p.set.keys().collect::<Vec<_>>(),
        "provider_key": "never",
    })
}
