//! Calls one RPC of every service on an agentd socket and prints
//! `<service> <gRPC code>` per line: the peer-uid test runs it as another
//! user to prove every service (health and reflection too) refuses it.

use agentx_shared::proto::daemon_client::DaemonClient;
use agentx_shared::proto::library_client::LibraryClient;
use agentx_shared::proto::oneshots_client::OneshotsClient;
use agentx_shared::proto::sessions_client::SessionsClient;
use agentx_shared::proto::snapshots_client::SnapshotsClient;
use agentx_shared::proto::turns_client::TurnsClient;
use agentx_shared::proto::{
    ListOneshotsRequest, ListSessionsRequest, ListSnapshotsRequest, PingRequest, SearchRequest,
    TurnInput,
};

fn code<T>(result: Result<T, tonic::Status>) -> String {
    match result {
        Ok(_) => "Ok".to_owned(),
        Err(status) => format!("{:?}", status.code()),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let socket = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: grpc-probe SOCKET"))?;
    let channel = agentx_shared::transport::connect(std::path::Path::new(&socket)).await?;
    let ch = || channel.clone();
    let results = [
        (
            "Daemon",
            code(DaemonClient::new(ch()).ping(PingRequest::default()).await),
        ),
        (
            "Sessions",
            code(
                SessionsClient::new(ch())
                    .list_sessions(ListSessionsRequest::default())
                    .await,
            ),
        ),
        (
            "Turns",
            code(
                TurnsClient::new(ch())
                    .run_turn(tokio_stream::iter(Vec::<TurnInput>::new()))
                    .await,
            ),
        ),
        (
            "Oneshots",
            code(
                OneshotsClient::new(ch())
                    .list_oneshots(ListOneshotsRequest::default())
                    .await,
            ),
        ),
        (
            "Snapshots",
            code(
                SnapshotsClient::new(ch())
                    .list_snapshots(ListSnapshotsRequest::default())
                    .await,
            ),
        ),
        (
            "Library",
            code(
                LibraryClient::new(ch())
                    .search(SearchRequest::default())
                    .await,
            ),
        ),
        (
            "Health",
            code(
                tonic_health::pb::health_client::HealthClient::new(ch())
                    .check(tonic_health::pb::HealthCheckRequest::default())
                    .await,
            ),
        ),
        (
            "Reflection",
            code(
                tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(
                    ch(),
                )
                .server_reflection_info(tokio_stream::iter(Vec::new()))
                .await,
            ),
        ),
    ];
    for (service, code) in results {
        println!("{service} {code}");
    }
    Ok(())
}
