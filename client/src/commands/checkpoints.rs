//! `agentx checkpoints` and `agentx rollback`: list the conversation's
//! checkpoints, restore one (picker, number, or newest), undo a rollback.

use std::io::IsTerminal as _;

use serde_json::{Value, json};

use agentx_shared::proto::{
    Checkpoint, ListCheckpointsReply, RollbackRequest, SessionStatus, rollback_request,
};
use agentx_shared::time::rfc3339_wire;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};

pub async fn list(ctx: &Ctx, session_id: &str) -> CliResult<Vec<Checkpoint>> {
    Ok(list_with_head(ctx, session_id).await?.checkpoints)
}

/// The checkpoints and the conversation's head as listed.
async fn list_with_head(ctx: &Ctx, session_id: &str) -> CliResult<ListCheckpointsReply> {
    Ok(ctx.rpc().checkpoints(session_id).await?)
}

/// One aligned line per checkpoint: number, when, the message.
fn labels(cps: &[Checkpoint]) -> Vec<String> {
    let rows: Vec<Vec<String>> = cps
        .iter()
        .map(|cp| {
            vec![
                cp.index.to_string(),
                crate::when::human(cp.created_at.as_ref()),
                if cp.note.is_empty() {
                    crate::show::one_line(&cp.last_user_message, 60)
                } else {
                    format!("({})", cp.note)
                },
            ]
        })
        .collect();
    crate::show::table(&rows, &[true, false, false])
}

pub fn print_list(cps: &[Checkpoint]) {
    if cps.is_empty() {
        println!("no checkpoints yet: each successful turn adds one");
        return;
    }
    for line in labels(cps) {
        println!("{line}");
    }
}

pub async fn checkpoints(ctx: &Ctx, as_json: bool) -> CliResult<()> {
    let cps = list(ctx, "").await?;
    if as_json {
        let docs: Vec<Value> = cps
            .iter()
            .map(|cp| {
                let usage = cp.usage.unwrap_or_default();
                json!({
                    "index": cp.index,
                    "response_id": if cp.response_id.is_empty() { Value::Null } else { json!(cp.response_id) },
                    "created_at": rfc3339_wire(cp.created_at.as_ref()),
                    "last_user_message": cp.last_user_message,
                    "last_assistant_message": cp.last_assistant_message,
                    "transcript_len": cp.transcript_len,
                    "note": if cp.note.is_empty() { Value::Null } else { json!(cp.note) },
                    "usage": crate::usage::json(&usage),
                })
            })
            .collect();
        println!("{}", Value::Array(docs));
    } else {
        print_list(&cps);
    }
    Ok(())
}

/// Which checkpoint to restore.
pub enum Pick {
    Index(u32),
    /// Ask (a picker on a terminal; the newest otherwise).
    Choose,
    Undo,
}

/// Rolls back `session_id` ("" = current); returns the new state, or
/// `None` when the user backed out of the picker.
///
/// N is resolved here to the checkpoint it names in the listing, and that
/// listing's head travels with the request: agentd refuses when the
/// conversation moved since (two rollbacks at once never stack).
pub async fn rollback(ctx: &Ctx, session_id: &str, pick: Pick) -> CliResult<Option<SessionStatus>> {
    rollback_since(ctx, session_id, pick, 0).await
}

/// [`rollback`], refused unless the conversation stood still since
/// `since_ms` (0: no such check): a command line's start, when the user
/// chose N without a listing in front of them.
async fn rollback_since(
    ctx: &Ctx,
    session_id: &str,
    pick: Pick,
    since_ms: i64,
) -> CliResult<Option<SessionStatus>> {
    let listed = list_with_head(ctx, session_id).await?;
    let cps = &listed.checkpoints;
    let index = match pick {
        Pick::Index(n) => Some(n),
        Pick::Undo => None,
        Pick::Choose => {
            if cps.is_empty() {
                return Err(CliError::failed("no checkpoints to roll back to yet"));
            }
            match choose(cps)? {
                Some(n) => Some(n),
                None => return Ok(None),
            }
        }
    };
    let target = match index {
        None => rollback_request::Target::Undo(true),
        Some(n) => match cps.iter().find(|cp| cp.index == n) {
            Some(cp) => rollback_request::Target::CheckpointId(cp.id.clone()),
            None => {
                return Err(CliError::failed(format!(
                    "no checkpoint {n}: this conversation has {} (1 is the newest)",
                    cps.len()
                )));
            }
        },
    };
    let reply = ctx
        .sessions()
        .rollback(RollbackRequest {
            scope: ctx.scope(),
            session_id: session_id.to_owned(),
            target: Some(target),
            expect_head: listed.head,
            unchanged_since_ms: since_ms,
        })
        .await
        .map_err(|s| CliError::from_status("rollback", &s))?
        .into_inner();
    reply
        .status
        .map(Some)
        .ok_or_else(|| CliError::failed("agentd returned no state"))
}

/// Arrow keys, a typed number and Enter on a terminal (Enter alone picks the newest);
/// without a terminal, the newest.
fn choose(cps: &[Checkpoint]) -> CliResult<Option<u32>> {
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Ok(Some(1));
    }
    let items = labels(cps);
    let picked = crate::picker::pick(
        "roll back to (arrows or a number, Enter picks the marked one, Esc = cancel)",
        &items,
    )?;
    Ok(picked.and_then(|i| cps.get(i)).map(|cp| cp.index))
}

pub fn describe(status: &SessionStatus) -> String {
    let last = crate::show::one_line(&status.last_user_message, 60);
    if last.is_empty() {
        format!("rolled back to the start ({} turns)", status.turns)
    } else {
        format!("rolled back to after turn {}: {last}", status.turns)
    }
}

pub async fn rollback_command(ctx: &Ctx, index: Option<u32>, undo: bool) -> CliResult<()> {
    // N (or --undo) was chosen when the command was typed: the
    // conversation must not have moved since (a picker shows what it
    // chooses from, and its listing's head is checked instead).
    let started = *crate::STARTED_MS.get_or_init(agentx_shared::time::now_ms);
    let (pick, since) = match (index, undo) {
        (_, true) => (Pick::Undo, started),
        (Some(n), false) => (Pick::Index(n), started),
        (None, false) => (Pick::Choose, 0),
    };
    match rollback_since(ctx, "", pick, since).await? {
        None => println!("nothing changed"),
        Some(status) if undo => println!("rollback undone: back at turn {}", status.turns),
        Some(status) => {
            println!("{}", describe(&status));
            println!(
                "(files are untouched; `{}` reverts this)",
                crate::ui::how_either("rollback --undo", "rollback undo")
            );
        }
    }
    Ok(())
}
