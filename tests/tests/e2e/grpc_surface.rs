//! What a generic gRPC client sees on agentd's socket: reflection lists every
//! service, health answers SERVING, not-yet-built RPCs answer UNIMPLEMENTED,
//! and a client running as another user is refused on every RPC.

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use agentx_shared::proto::sessions_client::SessionsClient;
use agentx_shared::proto::snapshots_client::SnapshotsClient;
use agentx_shared::proto::{ListSessionsRequest, ListSnapshotsRequest, Scope};
use agentx_tests::{TestEnv, agentx_bin, assert_code, channel, stderr, stdout};
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

/// Python's grpcio-reflection, Postman and older grpcurl speak only
/// v1alpha: it lists the same services.
#[tokio::test]
async fn reflection_v1alpha_is_served_too() {
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
    let env = TestEnv::new();
    assert_code(&env.run(["daemon", "start"]), 0);
    let channel = channel(&env.socket()).await;
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let reply = stream.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
        panic!("unexpected reflection reply: {reply:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for expected in [
        "agentx.v1.Turns",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
}

#[tokio::test]
async fn reflection_lists_every_service_and_health_is_serving() {
    let env = TestEnv::new();
    assert_code(&env.run(["daemon", "start"]), 0);
    let channel = channel(&env.socket()).await;

    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = ServerReflectionClient::new(channel.clone())
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let reply = stream.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
        panic!("unexpected reflection reply: {reply:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for expected in [
        "agentx.v1.Daemon",
        "agentx.v1.Sessions",
        "agentx.v1.Turns",
        "agentx.v1.Oneshots",
        "agentx.v1.Snapshots",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }

    let health = tonic_health::pb::health_client::HealthClient::new(channel.clone())
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        health.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // A malformed request is refused clearly and the daemon keeps serving.
    let err = SessionsClient::new(channel.clone())
        .list_sessions(ListSessionsRequest {
            scope: None,
            include_remote: false,
            ..ListSessionsRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = SessionsClient::new(channel.clone())
        .list_sessions(ListSessionsRequest {
            scope: Some(Scope {
                folder: env.work.display().to_string(),
                agent: "../up".into(),
            }),
            include_remote: false,
            ..ListSessionsRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    let err = SnapshotsClient::new(channel)
        .list_snapshots(ListSnapshotsRequest {
            scope: Some(Scope {
                folder: "relative/path".into(),
                agent: String::new(),
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert_code(&env.run(["daemon", "status"]), 0);
}

/// Runs agentx as `nobody` against our daemon. The socket is opened up on
/// purpose so that only the SO_PEERCRED check stands in the way.
#[test]
fn a_client_of_another_uid_is_refused_with_permission_denied() {
    if !agentx_tests::is_root() {
        return agentx_tests::skip("switching to uid 65534 needs root");
    }
    let env = TestEnv::new();
    env.open_root_for_others();
    let shared = env.root().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = shared.join("agentd.sock");

    let out = env
        .agentx(["daemon", "start"])
        .env("AGENTX_SOCKET", &socket)
        .output()
        .unwrap();
    assert_code(&out, 0);
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();

    // nobody needs its own profile and a copy of the binary it can execute.
    let nobody_home = shared.join("nobody-profile");
    std::fs::create_dir(&nobody_home).unwrap();
    std::fs::set_permissions(&nobody_home, std::fs::Permissions::from_mode(0o700)).unwrap();
    nix::unistd::chown(&nobody_home, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let bin = shared.join("agentx");
    std::fs::copy(agentx_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();

    for args in [&["daemon", "status"][..], &["sessions"]] {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&bin)
            .args(args)
            .env_clear()
            .env("AGENTX_HOME", &nobody_home)
            .env("AGENTX_SOCKET", &socket)
            .current_dir(&shared)
            .output()
            .unwrap();
        assert_code(&out, 3);
        let err = stderr(&out);
        assert!(
            err.contains("refused") && err.contains("uid 65534"),
            "{args:?}: {err}"
        );
    }
    // Every service, health and reflection included, answers another uid
    // with PERMISSION_DENIED — the code, not just a message.
    let probe = shared.join("grpc-probe");
    std::fs::copy(agentx_tests::bin_dir().join("grpc-probe"), &probe).unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&probe)
        .arg(&socket)
        .env_clear()
        .current_dir(&shared)
        .output()
        .unwrap();
    assert_code(&out, 0);
    let lines: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 8, "{lines:?}");
    for line in &lines {
        assert!(line.ends_with(" PermissionDenied"), "{lines:?}");
    }
    // The same probe as the owner gets through the check.
    let out = std::process::Command::new(&probe)
        .arg(&socket)
        .output()
        .unwrap();
    assert_code(&out, 0);
    assert!(stdout(&out).contains("Daemon Ok"), "{}", stdout(&out));
    // The daemon kept serving its owner and started no second daemon.
    let out = env
        .agentx(["daemon", "status"])
        .env("AGENTX_SOCKET", &socket)
        .output()
        .unwrap();
    assert_code(&out, 0);
    assert_eq!(env.wait_daemons(1, Duration::from_secs(2)).len(), 1);
}
