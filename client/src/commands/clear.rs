//! `agentx clear`: delete the current conversation (here, and its copy on
//! the remote store) and start a fresh one, asking first.

use agentx_shared::proto::SessionSummary;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::human;

/// Clears a conversation: the fresh one and the line saying what went
/// (here, and on the remote store when it kept a copy).
pub async fn clear(ctx: &Ctx, session_id: &str) -> CliResult<(SessionSummary, String)> {
    let reply = ctx.rpc().clear(session_id).await?;
    let fresh = reply
        .session
        .clone()
        .ok_or_else(|| CliError::failed("agentd returned no conversation"))?;
    let line = human::cleared(session_id, &reply, &fresh);
    Ok((fresh, line))
}

/// `agentx clear`: asks first unless --yes (and refuses to guess without a terminal).
pub async fn run(ctx: &Ctx, yes: bool) -> CliResult<()> {
    let s = ctx.status("").await?;
    if s.session_id.is_empty() {
        println!("no conversation to clear");
        return Ok(());
    }
    if !yes && !crate::ui::confirm(&human::clear_question(&s))? {
        println!("nothing changed");
        return Ok(());
    }
    let (_, line) = clear(ctx, &s.session_id).await?;
    println!("{line}");
    Ok(())
}
