//! `agentx status`: the current conversation's state (model, context,
//! usage, what waits, snapshots, the remote store), as text or JSON.

use crate::context::Ctx;
use crate::error::CliResult;
use crate::render::{self, human, json};

pub async fn run(ctx: &Ctx, as_json: bool, verbose: bool) -> CliResult<()> {
    let s = ctx.status("").await?;
    // The MCP servers, when agentd can tell (an older agentd cannot).
    let mcp = super::mcp::states(ctx).await.ok();
    if as_json {
        let mut doc = json::status(&ctx.local(), &s);
        if let Some(states) = &mcp {
            doc["mcp_servers"] = states.iter().map(super::mcp::state_json).collect();
        }
        println!("{doc}");
    } else {
        render::print(human::status(&ctx.local(), &s, verbose));
        print_mcp(mcp.as_deref());
    }
    Ok(())
}

/// The MCP servers' lines of a status, if any are configured.
pub fn print_mcp(states: Option<&[agentx_shared::proto::McpServerState]>) {
    for (i, line) in super::mcp::lines(states.unwrap_or_default())
        .iter()
        .enumerate()
    {
        let label = if i == 0 { "mcp:" } else { "" };
        println!("{label:<10}{line}");
    }
}
