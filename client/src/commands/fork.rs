//! `agentx fork [N]`: continue in a new conversation from a checkpoint; the
//! fork becomes the folder's current conversation.

use agentx_shared::proto::open_session_request::Target;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::human;

/// `agentx fork [N]`: the fork becomes the folder's current conversation.
pub async fn run(ctx: &Ctx, n: Option<u32>) -> CliResult<()> {
    if n == Some(0) {
        return Err(CliError::usage(
            "there is no checkpoint 0: 1 is the newest".to_owned(),
        ));
    }
    let rpc = ctx.rpc();
    let forked = rpc.fork("", n.unwrap_or(0)).await?;
    rpc.open(Target::Id(forked.id.clone()))
        .await
        .map_err(|failed| failed.doing("opening the fork"))?;
    println!("{}", human::fork(&forked));
    Ok(())
}
