//! `agentx sessions`: this folder's conversations (with the remote store's),
//! numbered newest first, as a fork tree, or as JSON documents.

use serde_json::Value;

use crate::context::Ctx;
use crate::error::CliResult;
use crate::render::{self, human, json};

pub async fn run(ctx: &Ctx, as_json: bool, tree: bool) -> CliResult<()> {
    let reply = ctx.rpc().list_sessions(!tree).await?;
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
        render::print(human::list(&sessions, &ctx.scope.folder));
        if more > 0 {
            println!("     {}", human::more_line(more));
        }
    }
    Ok(())
}
