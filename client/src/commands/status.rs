//! `agentx status`: the current conversation's state (model, context,
//! usage, what waits, snapshots, the remote store), as text or JSON.

use crate::context::Ctx;
use crate::error::CliResult;
use crate::render::{self, human, json};

pub async fn run(ctx: &Ctx, as_json: bool, verbose: bool) -> CliResult<()> {
    let s = ctx.status("").await?;
    if as_json {
        println!("{}", json::status(&ctx.local(), &s));
    } else {
        render::print(human::status(&ctx.local(), &s, verbose));
    }
    Ok(())
}
