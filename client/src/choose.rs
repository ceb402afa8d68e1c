//! Which conversation an argument names: a number in a listing (1 = newest)
//! or an id; at a terminal without one, the picker.

use std::io::IsTerminal as _;

use agentx_shared::proto::open_session_request::Target;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::{self, human};

/// The conversation numbered `n` (1 = newest) in the list `agentx
/// sessions` shows: this machine's and the remote store's.
pub async fn nth(ctx: &Ctx, n: u32) -> CliResult<Target> {
    if n == 0 {
        return Err(CliError::usage(
            "conversation numbers start at 1 (the newest)",
        ));
    }
    let reply = ctx.rpc().list_sessions(true).await?;
    let (list, note) = (reply.sessions, reply.remote_note);
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
    let reply = ctx.rpc().list_sessions(true).await?;
    let (list, note, more) = (reply.sessions, reply.remote_note, reply.remote_more);
    if !note.is_empty() {
        eprintln!("agentx: {note}");
    }
    if more > 0 {
        eprintln!("agentx: {}", human::more_line(more));
    }
    if list.is_empty() {
        println!("no conversations here yet");
        return Ok(None);
    }
    if !std::io::stdin().is_terminal() {
        render::print(human::list(&list, &ctx.scope.folder));
        println!("{hint}");
        return Ok(None);
    }
    // Numbered as `/resume N` takes them (1 = newest).
    let width = list.len().to_string().len();
    let labels: Vec<String> = human::labels(&list, &ctx.scope.folder)
        .into_iter()
        .enumerate()
        .map(|(i, label)| format!("{:>width$}  {label}", i + 1))
        .collect();
    let picked = crate::picker::pick("resume (arrows or a number, Enter, Esc = cancel)", &labels)?;
    Ok(picked.map(|index| Target::Id(list[index].id.clone())))
}

/// `N` (1 = newest, this machine's list) or an id → a conversation id;
/// `None` → "" (the current one).
pub async fn resolve(ctx: &Ctx, target: Option<&str>) -> CliResult<String> {
    let Some(target) = target else {
        return Ok(String::new());
    };
    match target.parse::<usize>() {
        Ok(n) => {
            let list = ctx.rpc().list_sessions(false).await?.sessions;
            n.checked_sub(1)
                .and_then(|i| list.get(i))
                .map(|s| s.id.clone())
                .ok_or_else(|| {
                    CliError::failed(format!(
                        "no conversation {n}: this folder has {} (1 is the newest)",
                        list.len()
                    ))
                })
        }
        Err(_) => Ok(target.to_owned()),
    }
}

/// Whether `id` is one of this machine's conversations of the folder.
pub async fn is_listed(ctx: &Ctx, id: &str) -> CliResult<bool> {
    let list = ctx.rpc().list_sessions(false).await?.sessions;
    Ok(list.iter().any(|s| s.id == id))
}
