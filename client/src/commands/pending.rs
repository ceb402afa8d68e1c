//! Commands whose daemon side is still being built: each one reaches (and
//! if needed starts) agentd and makes its real RPC, which answers
//! UNIMPLEMENTED until the daemon serves it.

use agentx_shared::proto::oneshots_client::OneshotsClient;
use agentx_shared::proto::snapshots_client::SnapshotsClient;
use agentx_shared::proto::{ListOneshotsRequest, ListSnapshotsRequest, Scope};

use crate::connect::Daemon;
use crate::error::{CliError, CliResult};

/// Which RPC stands for a command until its behaviour lands.
pub enum Call {
    Oneshot,
    Snapshots,
    Oneshots,
}

pub async fn run(daemon: &Daemon, scope: Scope, call: Call, what: &str) -> CliResult<()> {
    let channel = daemon.channel.clone();
    let scope = Some(scope);
    let result = match call {
        Call::Oneshot => OneshotsClient::new(channel)
            .list_oneshots(ListOneshotsRequest { scope })
            .await
            .map(drop),
        Call::Snapshots => SnapshotsClient::new(channel)
            .list_snapshots(ListSnapshotsRequest { scope })
            .await
            .map(drop),
        Call::Oneshots => OneshotsClient::new(channel)
            .list_oneshots(ListOneshotsRequest { scope })
            .await
            .map(drop),
    };
    result.map_err(|status| CliError::from_status(what, &status))
}
