//! `agentx sessions`, `status` and `clear`: conversation listings and state,
//! as text or as the JSON documents of DESIGN §7.

use serde_json::{Value, json};

use agentx_shared::conversation::PendingCall;
use agentx_shared::proto::{
    ClearSessionRequest, GetStatusRequest, ListSessionsRequest, RemoteState, SessionStatus,
    SessionSummary, SyncRemoteRequest, open_session_request::Target,
};
use agentx_shared::time::rfc3339_wire;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::show::visible;

/// Where conversation `s` lives as seen from folder `here`: `None` when
/// here, else a relative path (another checkout: `../other`).
pub fn kept_in(s: &SessionSummary, here: &str) -> Option<String> {
    (s.location != "remote" && !s.folder.is_empty() && s.folder != here)
        .then(|| agentx_shared::folder::relative(here, &s.folder))
}

/// `s` as JSON; `in`: its folder relative to `here` when this machine
/// keeps it in another folder (another checkout of the project).
pub fn summary_json(s: &SessionSummary, here: &str) -> Value {
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
        "where": if s.location.is_empty() { "local" } else { s.location.as_str() },
        "machine": if s.machine.is_empty() { Value::Null } else { json!(s.machine) },
    })
}

/// This folder's conversations merged with the remote store's (when one
/// is configured), and the line to show when the remote was not reached.
pub async fn list_with_remote(ctx: &Ctx) -> CliResult<(Vec<SessionSummary>, String)> {
    let (list, note, _more) = list_with_remote_more(ctx).await?;
    Ok((list, note))
}

/// [`list_with_remote`], and how many older remote conversations it does
/// not hold (a listing holds the remote's newest 1,000).
pub async fn list_with_remote_more(ctx: &Ctx) -> CliResult<(Vec<SessionSummary>, String, u64)> {
    let reply = ctx
        .sessions()
        .list_sessions(ListSessionsRequest {
            scope: ctx.scope(),
            include_remote: true,
        })
        .await
        .map_err(|s| CliError::from_status("listing conversations", &s))?
        .into_inner();
    Ok((reply.sessions, reply.remote_note, reply.remote_more))
}

/// The line saying that `more` older remote conversations are not listed.
pub fn more_line(more: u64) -> String {
    format!(
        "and {more} more remote conversation(s), older, not listed (agentx search finds them; agentx resume ID opens one)"
    )
}

/// The conversation numbered `n` (1 = newest) in the list `agentx
/// sessions` shows: this machine's and the remote store's.
pub async fn nth(ctx: &Ctx, n: u32) -> CliResult<Target> {
    if n == 0 {
        return Err(CliError::usage(
            "conversation numbers start at 1 (the newest)",
        ));
    }
    let (list, note) = list_with_remote(ctx).await?;
    if !note.is_empty() {
        eprintln!("agentx: {note}");
    }
    let count = list.len();
    list.into_iter()
        .nth(n as usize - 1)
        .map(|s| Target::Id(s.id))
        .ok_or_else(|| {
            CliError::failed(format!(
                "no conversation {n}: this folder has {count} (1 is the newest)"
            ))
        })
}

/// The conversation `text` names: a number in the merged list (1 =
/// newest) or an id, as every list and search prints them.
pub async fn named(ctx: &Ctx, text: &str) -> CliResult<Target> {
    match text.trim().parse::<u32>() {
        Ok(n) => nth(ctx, n).await,
        Err(_) => Ok(Target::Id(text.trim().to_owned())),
    }
}

/// At a terminal, the user picks one of the merged list (`None`: cancelled,
/// or no terminal; then the list is printed, then `hint`).
pub async fn pick(ctx: &Ctx, hint: &str) -> CliResult<Option<Target>> {
    use std::io::IsTerminal as _;
    let (list, note, more) = list_with_remote_more(ctx).await?;
    if !note.is_empty() {
        eprintln!("agentx: {note}");
    }
    if more > 0 {
        eprintln!("agentx: {}", more_line(more));
    }
    if list.is_empty() {
        println!("no conversations here yet");
        return Ok(None);
    }
    if !std::io::stdin().is_terminal() {
        print_list(&list, &ctx.scope.folder);
        println!("{hint}");
        return Ok(None);
    }
    let labels = labels(&list, &ctx.scope.folder);
    let picked = crate::picker::pick("resume (arrows or a number, Enter, Esc = cancel)", &labels)?;
    Ok(picked.map(|index| Target::Id(list[index].id.clone())))
}

pub async fn list(ctx: &Ctx) -> CliResult<Vec<SessionSummary>> {
    Ok(ctx
        .sessions()
        .list_sessions(ListSessionsRequest {
            scope: ctx.scope(),
            include_remote: false,
        })
        .await
        .map_err(|s| CliError::from_status("listing conversations", &s))?
        .into_inner()
        .sessions)
}

/// The list's cells of one conversation as seen from folder `here`
/// (without its number): where and id, when, turns, title and origin.
fn cells(s: &SessionSummary, here: &str) -> Vec<String> {
    let title = if s.title.is_empty() {
        "(empty)".into()
    } else {
        visible(&s.title)
    };
    let origin = s
        .forked_from
        .as_ref()
        .map(|f| format!("  (fork of {} @turn {})", f.id, f.turn))
        .unwrap_or_default();
    let remote = if s.location == "remote" {
        format!("remote: ({}) ", visible(&s.machine))
    } else if let Some(there) = kept_in(s, here) {
        format!("in {} ", visible(&there))
    } else {
        String::new()
    };
    vec![
        format!("{remote}{}", s.id),
        crate::when::human(s.updated_at.as_ref()),
        agentx_shared::plural::count(s.turns, "turn"),
        format!("{title}{origin}"),
    ]
}

/// One aligned line per conversation as seen from folder `here` (without
/// its number).
pub fn labels(sessions: &[SessionSummary], here: &str) -> Vec<String> {
    let rows: Vec<Vec<String>> = sessions.iter().map(|s| cells(s, here)).collect();
    crate::show::table(&rows, &[false, false, true, false])
}

/// Numbered list, newest first (1 = newest), its columns aligned.
pub fn print_list(sessions: &[SessionSummary], here: &str) {
    if sessions.is_empty() {
        println!("no conversations in this folder yet");
        return;
    }
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut row = vec![(i + 1).to_string()];
            row.extend(cells(s, here));
            row
        })
        .collect();
    for line in crate::show::table(&rows, &[true, false, false, true, false]) {
        println!("{line}");
    }
}

pub async fn sessions(ctx: &Ctx, as_json: bool, tree: bool) -> CliResult<()> {
    let (sessions, note, more) = if tree {
        (list(ctx).await?, String::new(), 0)
    } else {
        list_with_remote_more(ctx).await?
    };
    if !note.is_empty() {
        eprintln!("agentx: {note}");
    }
    if tree {
        crate::commands::library::print_tree(&sessions);
    } else if as_json {
        let here = ctx.scope.folder.as_str();
        let docs: Vec<Value> = sessions.iter().map(|s| summary_json(s, here)).collect();
        println!("{}", Value::Array(docs));
        if more > 0 {
            eprintln!("agentx: {}", more_line(more));
        }
    } else {
        print_list(&sessions, &ctx.scope.folder);
        if more > 0 {
            println!("     {}", more_line(more));
        }
    }
    Ok(())
}

pub async fn fetch_status(ctx: &Ctx, session_id: &str) -> CliResult<SessionStatus> {
    Ok(ctx
        .sessions()
        .get_status(GetStatusRequest {
            scope: ctx.scope(),
            session_id: session_id.to_owned(),
            provider: ctx.status_provider(),
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
    let setup = ctx.setup().ok();
    let opt = |v: &str| (!v.is_empty()).then(|| v.to_owned());
    json!({
        "session_id": s.session_id,
        "model": opt(&s.model).or_else(|| setup.as_ref().map(|s| s.model.clone())),
        "conversation_model": opt(&s.conversation_model),
        "provider": opt(&s.provider).or_else(|| setup.as_ref().map(|s| s.provider.clone())),
        "context": s.context.as_ref().map(context_json),
        "instruction_files": s.instruction_files,
        "base_url": setup.as_ref().map(|s| s.base_url.clone()),
        "approval": setup.as_ref().map(|s| s.approval),
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
        "remote": remote_json(s.remote.as_ref()),
        "remote_copy": s.remote_copy,
    })
}

/// `{used_tokens, window_tokens, percent, estimated, auto_compact_at,
/// window_source}`; `auto_compact_at` is a percent of the window, null when
/// automatic compaction is off.
pub fn context_json(c: &agentx_shared::proto::ContextMeter) -> Value {
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
pub fn remote_json(r: Option<&RemoteState>) -> Value {
    let Some(r) = r.filter(|r| !r.state.is_empty()) else {
        return json!({"state": "off", "pending": 0, "last_error": null, "refused": []});
    };
    let opt = |s: &str| if s.is_empty() { Value::Null } else { json!(s) };
    json!({
        "state": r.state,
        "pending": r.pending,
        "last_error": opt(&r.last_error),
        "url": opt(&r.url),
        "machine": opt(&r.machine),
        "refused": r.refused.iter().map(|f| json!({"id": f.id, "error": f.error})).collect::<Vec<_>>(),
    })
}

/// One line per conversation the server refused, each starting with `lead`.
pub fn refused_lines(r: &RemoteState, lead: &str) -> Vec<String> {
    r.refused
        .iter()
        .map(|f| format!("{lead}refused {}: {}", f.id, f.error))
        .collect()
}

/// `agentx sync`: push now, print what was pushed; exit 1 if the remote
/// was not reached.
pub async fn sync(ctx: &Ctx, as_json: bool, wait_ms: Option<u32>) -> CliResult<()> {
    let reply = ctx
        .sessions()
        .sync_remote(SyncRemoteRequest {
            wait_ms: wait_ms.unwrap_or(0),
        })
        .await
        .map_err(|s| CliError::from_status("syncing with the remote store", &s))?
        .into_inner();
    let remote = reply.remote.unwrap_or_default();
    if as_json {
        println!(
            "{}",
            json!({
                "reached": reply.reached,
                "timed_out": reply.timed_out,
                "pushed_conversations": reply.pushed_conversations,
                "pushed_records": reply.pushed_records,
                "remote": remote_json(Some(&remote)),
                "forks": reply.forks.iter().map(|f| json!({
                    "id": f.id,
                    "fork_id": f.fork_id,
                    "title": f.title,
                    "machine": f.machine,
                })).collect::<Vec<_>>(),
            })
        );
    }
    if remote.state == "off" || remote.state.is_empty() {
        if !as_json {
            println!("remote keeping is off (set remote_url in config.toml or AGENTX_REMOTE_URL)");
        }
        return Ok(());
    }
    for fork in &reply.forks {
        eprintln!("agentx: {}", fork.message);
    }
    if !as_json {
        println!(
            "pushed {}, {} to {}; {} pending",
            agentx_shared::plural::count(reply.pushed_conversations, "conversation"),
            agentx_shared::plural::count(reply.pushed_records, "record"),
            remote.url,
            remote.pending
        );
    }
    if reply.reached && !remote.refused.is_empty() {
        let ids: Vec<String> = remote
            .refused
            .iter()
            .map(|f| format!("{} ({})", f.id, f.error))
            .collect();
        Err(CliError::failed(format!(
            "the remote store refused {}, the others are synced: {}",
            agentx_shared::plural::count(ids.len() as u64, "conversation"),
            ids.join("; ")
        )))
    } else if reply.reached {
        Ok(())
    } else if reply.timed_out {
        Err(CliError::failed(format!(
            "the remote store did not finish within the wait ({} pending){}",
            remote.pending,
            if remote.last_error.is_empty() {
                String::new()
            } else {
                format!(": {}", remote.last_error)
            }
        )))
    } else {
        Err(CliError::failed(format!(
            "the remote store is unreachable: {}",
            if remote.last_error.is_empty() {
                "no answer"
            } else {
                remote.last_error.as_str()
            }
        )))
    }
}

/// Prints the current conversation's state as `agentx status` shows it;
/// `verbose` adds internals (the server's response id, the watch).
pub fn print_status(ctx: &Ctx, s: &SessionStatus, verbose: bool) {
    if s.session_id.is_empty() {
        println!(
            "no conversation in {} yet (agent {})",
            ctx.scope.folder, ctx.scope.agent
        );
        return;
    }
    print_conversation(ctx, s, verbose);
    print_pending(s);
    print_markers(s);
    print_snapshots_and_remote(s, verbose);
    println!(
        "daemon        pid {}, version {}",
        ctx.hello().pid,
        ctx.hello().daemon_version
    );
}

/// `/model`'s answer: the model in use, where it comes from, and the context.
pub fn print_model(s: &SessionStatus) {
    let from = if s.conversation_model.is_empty() {
        "the configured default (/model NAME picks one for this conversation)"
    } else {
        "chosen for this conversation (/model default goes back)"
    };
    println!("model {} ({}) — {from}", s.model, s.provider);
    if let Some(c) = &s.context {
        println!("{}", agentx_shared::context::Meter::from(c).line());
    }
}

/// The status lines naming the conversation and its transcript, usage and
/// checkpoints.
fn print_conversation(ctx: &Ctx, s: &SessionStatus, verbose: bool) {
    let u = s.usage.unwrap_or_default();
    println!("conversation  {}  {}", s.session_id, visible(&s.title));
    println!(
        "folder        {} (agent {})",
        ctx.scope.folder, ctx.scope.agent
    );
    if let Ok(setup) = ctx.setup() {
        let model = if s.model.is_empty() {
            &setup.model
        } else {
            &s.model
        };
        let chosen = if s.conversation_model.is_empty() {
            ""
        } else {
            " — chosen for this conversation with /model"
        };
        println!(
            "model         {model} ({}), approval {}{chosen}",
            setup.provider, setup.approval
        );
        if verbose {
            println!("server        {}", setup.base_url);
        }
    }
    if let Some(c) = &s.context {
        let meter = agentx_shared::context::Meter::from(c);
        let auto = match meter.auto_compact_at {
            Some(at) => format!("compacts automatically at {:.0}%", at * 100.0),
            None => "automatic compaction is off".to_owned(),
        };
        let est = if meter.estimated { ", estimated" } else { "" };
        println!(
            "context       {} ({} of {} tokens{est}; window from {}; {auto})",
            meter.line(),
            meter.used_tokens,
            meter.window_tokens,
            meter.window_source
        );
    }
    if !s.instruction_files.is_empty() {
        println!("instructions  {}", s.instruction_files.join(", "));
    }
    if verbose {
        let response = if s.response_id.is_empty() {
            "-"
        } else {
            s.response_id.as_str()
        };
        println!("response id   {response}");
    }
    println!(
        "turns         {} ({} transcript items)",
        s.turns, s.transcript_items
    );
    println!("usage         {}", crate::usage::line(&u));
    println!("checkpoints   {}", s.checkpoints);
}

/// The status lines for what waits: tool calls of an interrupted turn and
/// `!command` output not yet sent.
fn print_pending(s: &SessionStatus) {
    if !s.pending_tool_calls.is_empty() {
        println!(
            "pending       {} from an interrupted turn",
            agentx_shared::plural::count(s.pending_tool_calls.len() as u64, "tool call")
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
}

/// The status lines for a failed or interrupted turn and a rollback backup.
fn print_markers(s: &SessionStatus) {
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
            "rollback      backup from {} ({} restores it)",
            crate::when::human(s.rollback_backup_at.as_ref()),
            crate::ui::how_either("rollback --undo", "rollback undo")
        );
    }
}

/// The status lines for the folder's snapshots and the remote store (when on).
fn print_snapshots_and_remote(s: &SessionStatus, verbose: bool) {
    println!(
        "snapshots     {} ({} bytes stored)",
        s.snapshots, s.snapshot_store_bytes
    );
    if verbose && !s.snapshot_watch.is_empty() {
        println!("watch         {}", s.snapshot_watch);
    }
    if let Some(r) = s
        .remote
        .as_ref()
        .filter(|r| !r.state.is_empty() && r.state != "off")
    {
        let error = if r.last_error.is_empty() {
            String::new()
        } else {
            format!(" — {}", r.last_error)
        };
        println!(
            "remote        {} ({} pending) {}{error}",
            r.state, r.pending, r.url
        );
        for line in refused_lines(r, "              ") {
            println!("{line}");
        }
        if s.remote_copy {
            println!("              this conversation is kept there too");
        }
    }
}

pub async fn status(ctx: &Ctx, as_json: bool, verbose: bool) -> CliResult<()> {
    let s = fetch_status(ctx, "").await?;
    if as_json {
        println!("{}", status_json(ctx, &s));
    } else {
        print_status(ctx, &s, verbose);
    }
    Ok(())
}

/// Clears a conversation: the fresh one and the line saying what went
/// (here, and on the remote store when it kept a copy).
pub async fn clear(ctx: &Ctx, session_id: &str) -> CliResult<(SessionSummary, String)> {
    let reply = ctx
        .sessions()
        .clear_session(ClearSessionRequest {
            scope: ctx.scope(),
            session_id: session_id.to_owned(),
        })
        .await
        .map_err(|s| CliError::from_status("clearing the conversation", &s))?
        .into_inner();
    let fresh = reply
        .session
        .ok_or_else(|| CliError::failed("agentd returned no conversation"))?;
    let cleared = if session_id.is_empty() {
        "the conversation".to_owned()
    } else {
        session_id.to_owned()
    };
    let line = match reply.remote.as_str() {
        "deleted" => format!(
            "cleared {cleared} here and on the remote store; new conversation {}",
            fresh.id
        ),
        "later" => format!(
            "cleared {cleared} here; the remote store was not reached ({}), its copy is deleted \
             once it is back; new conversation {}",
            reply.remote_note, fresh.id
        ),
        _ => format!("cleared {cleared}; new conversation {}", fresh.id),
    };
    Ok((fresh, line))
}

/// `agentx clear`: asks first unless --yes (and refuses to guess without a terminal).
/// The question before a conversation is deleted: what goes (title, id,
/// turns) and where.
pub fn clear_question(s: &SessionStatus) -> String {
    let also = if s.remote_copy {
        " here and its copy on the remote store"
    } else {
        ""
    };
    let title = if s.title.is_empty() {
        String::new()
    } else {
        format!("{:?} ", visible(&s.title))
    };
    let turns = match s.turns {
        1 => "1 turn".to_owned(),
        n => format!("{n} turns"),
    };
    format!(
        "delete conversation {title}({}, {turns}){also}?",
        s.session_id
    )
}

pub async fn clear_command(ctx: &Ctx, yes: bool) -> CliResult<()> {
    let s = fetch_status(ctx, "").await?;
    if s.session_id.is_empty() {
        println!("no conversation to clear");
        return Ok(());
    }
    if !yes && !crate::ui::confirm(&clear_question(&s))? {
        println!("nothing changed");
        return Ok(());
    }
    let (_, line) = clear(ctx, &s.session_id).await?;
    println!("{line}");
    Ok(())
}
