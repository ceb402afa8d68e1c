//! Commands whose daemon side is still being built: each one reaches (and
//! if needed starts) agentd and makes its real RPC, which answers
//! UNIMPLEMENTED until the daemon serves it.

use agentx_shared::proto::ListSnapshotsRequest;
use agentx_shared::proto::snapshots_client::SnapshotsClient;

use crate::context::Ctx;
use crate::error::{CliError, CliResult};

/// The snapshot commands: `snapshots`, `snapshot`, `undo`, `rewind`.
pub async fn snapshots(ctx: &Ctx) -> CliResult<()> {
    SnapshotsClient::new(ctx.channel())
        .list_snapshots(ListSnapshotsRequest { scope: ctx.scope() })
        .await
        .map(drop)
        .map_err(|status| CliError::from_status("snapshots", &status))
}
