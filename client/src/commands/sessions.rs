//! `agentx sessions`: this folder's conversations (with the remote store's),
//! numbered newest first, as a fork tree, or as JSON documents.

use serde_json::Value;

use crate::context::Ctx;
use crate::error::CliResult;
use crate::render::{self, human, json};

/// `paging`: at most `limit` (`None`: all), the `page`th such page.
pub async fn run(
    ctx: &Ctx,
    as_json: bool,
    tree: bool,
    (limit, page): (Option<u32>, Option<u32>),
) -> CliResult<()> {
    let limit = limit.unwrap_or(0);
    let offset = page.unwrap_or(1).saturating_sub(1).saturating_mul(limit);
    let reply = ctx.rpc().list_sessions_page(!tree, offset, limit).await?;
    let total = reply.total;
    let (sessions, note, more) = if tree {
        (reply.sessions, String::new(), 0)
    } else {
        (reply.sessions, reply.remote_note, reply.remote_more)
    };
    if !note.is_empty() {
        eprintln!("agentx: {note}");
    }
    if tree {
        render::print(human::tree(&sessions));
    } else if as_json {
        let here = ctx.scope.folder.as_str();
        let docs: Vec<Value> = sessions.iter().map(|s| json::summary(s, here)).collect();
        println!("{}", Value::Array(docs));
        if more > 0 {
            eprintln!("agentx: {}", human::more_line(more));
        }
    } else {
        render::print(human::list_from(
            &sessions,
            &ctx.scope.folder,
            offset as usize + 1,
        ));
        if more > 0 {
            println!("     {}", human::more_line(more));
        }
        let shown = offset as u64 + sessions.len() as u64;
        if limit > 0 && shown < total {
            println!(
                "     {} of {total} shown; --page {} for the next {limit}",
                shown,
                page.unwrap_or(1) + 1
            );
        }
    }
    Ok(())
}
