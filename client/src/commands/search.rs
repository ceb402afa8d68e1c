//! `agentx search TEXT`: this folder's conversations (or every folder's)
//! by message, tool output and title, best first.

use std::io::IsTerminal as _;

use serde_json::Value;

use agentx_shared::proto::SearchHit;

use crate::context::Ctx;
use crate::error::CliResult;
use crate::render::{self, human, json};

/// Searches, saying on stderr when the index or the remote store may
/// leave hits out.
pub async fn search(ctx: &Ctx, text: &str, all: bool, limit: u32) -> CliResult<Vec<SearchHit>> {
    let reply = ctx.rpc().search(text, all, limit).await?;
    if reply.indexing {
        eprintln!("agentx: the search index is still catching up; results may be incomplete");
    }
    if !reply.remote_note.is_empty() {
        eprintln!("agentx: {}", reply.remote_note);
    }
    Ok(reply.hits)
}

/// Prints hits for people, highlights in bold on a terminal.
pub fn print_hits(ctx: &Ctx, hits: &[SearchHit]) {
    let marks = if std::io::stdout().is_terminal() {
        ("\x1b[1;33m", "\x1b[0m")
    } else {
        ("**", "**")
    };
    render::print(human::hits(&ctx.local(), hits, marks));
}

pub async fn run(
    ctx: &Ctx,
    text: &[String],
    all: bool,
    as_json: bool,
    limit: u32,
) -> CliResult<()> {
    let hits = search(ctx, &text.join(" "), all, limit).await?;
    if as_json {
        println!("{}", Value::Array(hits.iter().map(json::hit).collect()));
    } else {
        print_hits(ctx, &hits);
    }
    Ok(())
}
