//! `agentx diff`: what a message changed (or what changed since a snapshot),
//! as unified diffs colored on a terminal and paged when long, or per-file counts.

use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::pager;
use crate::render::diff::Format;
use crate::rpc::DiffOf;

/// `agentx diff`: the current conversation's message, or since a snapshot.
pub async fn diff(ctx: &Ctx, of: DiffOf, format: Format) -> CliResult<()> {
    let status = ctx.status("").await?;
    if status.session_id.is_empty() && matches!(of, DiffOf::Message(_)) {
        return Err(CliError::failed(
            "no conversation here yet: nothing to diff",
        ));
    }
    let reply = ctx.rpc().diff(&status.session_id, &of).await?;
    pager::print_diff(&reply, format)
}
