//! agentd lifecycle end to end: start/stop/status, profile and socket
//! permissions, the pid lock, stale sockets, the auto-start races, kill -9
//! recovery, version replacement, SIGTERM draining and unreachable errors.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::process::Stdio;
use std::time::{Duration, Instant};

use agentx_shared::proto::daemon_client::DaemonClient;
use agentx_shared::proto::{DaemonStatusRequest, PingRequest};
use agentx_tests::{TestEnv, assert_code, stderr, stdout, wait_pid_gone};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn status_json(env: &TestEnv) -> serde_json::Value {
    let out = env.run(["daemon", "status", "--json"]);
    assert_code(&out, 0);
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn status_never_starts_and_start_stop_do_what_they_say() {
    let env = TestEnv::new();
    let out = env.run(["daemon", "status"]);
    assert_code(&out, 3);
    assert!(stdout(&out).contains("not running"), "{}", stdout(&out));
    assert!(env.daemon_pids().is_empty(), "status started a daemon");

    assert_code(&env.run(["daemon", "start"]), 0);
    let pids = env.wait_daemons(1, Duration::from_secs(5));
    assert_eq!(pids.len(), 1);
    // start on a running daemon succeeds and starts nothing new
    let out = env.run(["daemon", "start"]);
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains(&format!("pid {}", pids[0])),
        "{}",
        stdout(&out)
    );
    assert_eq!(env.daemon_pids(), pids);

    let status = status_json(&env);
    assert_eq!(status["running"], true);
    assert_eq!(status["pid"], pids[0]);
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["socket"], env.socket().display().to_string());
    assert_eq!(status["profile"], env.home.display().to_string());
    assert!(status["uptime_ms"].is_u64());
    assert_eq!(status["remote"]["state"], "off", "{status}");
    let text = stdout(&env.run(["daemon", "status"]));
    assert!(text.contains("remote:   off"), "{text}");
    for field in ["pid:", "version:", "uptime:", "socket:", "profile:"] {
        assert!(text.contains(field), "{field} missing in {text}");
    }

    let out = env.run(["daemon", "restart"]);
    assert_code(&out, 0);
    let restarted = env.wait_daemons(1, Duration::from_secs(5));
    assert_eq!(restarted.len(), 1);
    assert_ne!(restarted, pids, "restart kept the old daemon");

    assert_code(&env.run(["daemon", "stop"]), 0);
    assert!(env.wait_daemons(0, Duration::from_secs(5)).is_empty());
    assert!(!env.socket().exists(), "socket left behind after stop");
    assert_code(&env.run(["daemon", "stop"]), 0);
    assert_code(&env.run(["daemon", "status"]), 3);
}

#[test]
fn any_other_command_starts_the_daemon() {
    let env = TestEnv::new();
    let out = env.run(["sessions"]);
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("no conversations"),
        "{}",
        stdout(&out)
    );
    assert_eq!(env.wait_daemons(1, Duration::from_secs(5)).len(), 1);
}

#[test]
fn profile_is_private_socket_is_0600_and_the_pid_lock_holds() {
    let env = TestEnv::new();
    assert_code(&env.run(["daemon", "start"]), 0);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&env.home), 0o700);
    assert_eq!(mode(&env.socket()), 0o600);
    let pid = env.wait_daemons(1, Duration::from_secs(5))[0];
    let pid_file = std::fs::read_to_string(env.home.join("agentd.pid")).unwrap();
    assert_eq!(pid_file.trim(), pid.to_string());

    // A second agentd by hand: refuses politely, exit 0, the first keeps serving.
    let out = env.agentd(["--log", "stderr"]).output().unwrap();
    assert_code(&out, 0);
    assert!(stderr(&out).contains("already running"), "{}", stderr(&out));
    assert_eq!(env.daemon_pids(), vec![pid]);
    assert_code(&env.run(["daemon", "status"]), 0);
}

#[test]
fn profile_owned_by_another_user_or_open_to_others_is_refused() {
    let env = TestEnv::new();
    std::fs::create_dir(&env.home).unwrap();
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o755)).unwrap();

    let out = env.agentd(["--log", "stderr"]).output().unwrap();
    assert_code(&out, 1);
    assert!(stderr(&out).contains("chmod 700"), "{}", stderr(&out));
    let out = env.run(["daemon", "start"]);
    assert_code(&out, 3);
    assert!(stderr(&out).contains("chmod 700"), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));

    if !agentx_tests::is_root() {
        return agentx_tests::skip("the other-owner half: chown needs root");
    }
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    nix::unistd::chown(&env.home, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let out = env.agentd(["--log", "stderr"]).output().unwrap();
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("owned by uid 65534"),
        "{}",
        stderr(&out)
    );
    let out = env.run(["daemon", "start"]);
    assert_code(&out, 3);
    assert!(stderr(&out).contains("not by you"), "{}", stderr(&out));
    assert!(env.daemon_pids().is_empty());
    let me = nix::unistd::geteuid();
    nix::unistd::chown(&env.home, Some(me), None).unwrap();
}

#[test]
fn a_stale_socket_is_replaced() {
    let env = TestEnv::new();
    std::fs::create_dir(&env.home).unwrap();
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Bind and drop: the file stays, nobody listens — what kill -9 leaves.
    drop(std::os::unix::net::UnixListener::bind(env.socket()).unwrap());
    assert!(env.socket().exists());
    let out = env.run(["daemon", "start"]);
    assert_code(&out, 0);
    assert_eq!(env.wait_daemons(1, Duration::from_secs(5)).len(), 1);
    assert_code(&env.run(["daemon", "status"]), 0);
}

/// Starts `n` clients at once and waits for all of them.
fn run_concurrently(env: &TestEnv, n: usize, args: &[&str]) -> Vec<std::process::Output> {
    let children: Vec<_> = (0..n)
        .map(|_| {
            env.agentx(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

#[test]
fn fifty_clients_at_once_start_exactly_one_daemon() {
    let env = TestEnv::new();
    let outputs = run_concurrently(&env, 50, &["daemon", "start"]);
    for out in &outputs {
        assert_code(out, 0);
    }
    let pids = env.wait_daemons(1, Duration::from_secs(5));
    assert_eq!(pids.len(), 1, "daemons: {pids:?}");
    // Every client talked to that one daemon.
    for out in &outputs {
        assert!(
            stdout(out).contains(&format!("pid {}", pids[0])),
            "{}",
            stdout(out)
        );
    }
    // Every client has returned, so every agentd one of them spawned was
    // exec'd already (spawn returns after exec): a losing one is in /proc
    // now or gone, and exactly one ever served.
    assert_eq!(env.daemon_pids(), pids);
    assert_eq!(served(&env), 1, "more than one agentd served this profile");
}

/// How many agentd processes started serving this profile (each logs
/// that it listens once it serves; one that lost the pid lock never does).
fn served(env: &TestEnv) -> usize {
    std::fs::read_to_string(env.home.join("log").join("agentd.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("agentd::listener: listening"))
        .count()
}

#[test]
fn after_kill_9_twenty_concurrent_calls_start_exactly_one_new_daemon() {
    let env = TestEnv::new();
    assert_code(&env.run(["daemon", "start"]), 0);
    let old = env.wait_daemons(1, Duration::from_secs(5))[0];
    kill(Pid::from_raw(old), Signal::SIGKILL).unwrap();
    assert!(wait_pid_gone(old, Duration::from_secs(5)));
    assert!(
        env.socket().exists(),
        "kill -9 should leave the stale socket behind"
    );

    let outputs = run_concurrently(&env, 20, &["daemon", "start"]);
    for out in &outputs {
        assert_code(out, 0);
    }
    let pids = env.wait_daemons(1, Duration::from_secs(5));
    assert_eq!(pids.len(), 1, "daemons: {pids:?}");
    assert_ne!(pids[0], old);
    // (No wait needed: see fifty_clients_at_once_start_exactly_one_daemon.)
    assert_eq!(env.daemon_pids(), pids);
    assert_eq!(served(&env), 2, "the killed one and exactly one new one");
}

#[test]
fn a_daemon_of_another_version_is_replaced() {
    let env = TestEnv::new();
    assert_code(&env.run(["daemon", "start"]), 0);
    assert_code(&env.run(["daemon", "stop"]), 0);
    let mut old = env
        .agentd(["--log", "file", "--report-version", "0.0.0-old"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !status_json_running(&env) {
        assert!(Instant::now() < deadline, "old daemon never came up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = status_json(&env);
    assert_eq!(status["version"], "0.0.0-old");
    assert_eq!(status["compatible"], false);

    let out = env.run(["daemon", "start"]);
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("replacing agentd 0.0.0-old"),
        "{}",
        stderr(&out)
    );
    // The old one exited cleanly and a new one of our version serves.
    assert!(old.wait().unwrap().success());
    let status = status_json(&env);
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_ne!(status["pid"], old.id());
    assert_eq!(env.wait_daemons(1, Duration::from_secs(5)).len(), 1);
}

fn status_json_running(env: &TestEnv) -> bool {
    env.run(["daemon", "status"]).status.code() == Some(0)
}

/// The daemon's count of RPCs served, this status call included.
async fn rpcs_served(client: &mut DaemonClient<tonic::transport::Channel>) -> u64 {
    client
        .status(DaemonStatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .rpcs_served
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_in_flight_rpcs_removes_the_socket_and_exits_0() {
    let env = TestEnv::new();
    let mut daemon = env
        .agentd(["--log", "stderr"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let channel = loop {
        if let Ok(ch) = agentx_shared::transport::connect(&env.socket()).await {
            break ch;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut client = DaemonClient::new(channel.clone());
    let mut watcher = DaemonClient::new(channel);
    let before = rpcs_served(&mut watcher).await;
    let in_flight = tokio::spawn(async move {
        client
            .ping(PingRequest {
                payload: b"still here".to_vec(),
                delay_ms: 1500,
            })
            .await
    });
    // The ping is in flight once agentd has counted it: every status call
    // counts itself, so the count runs one ahead of the polls.
    let mut polls = 0;
    loop {
        polls += 1;
        if rpcs_served(&mut watcher).await - before - polls == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    let sent = Instant::now();
    kill(Pid::from_raw(daemon.id() as i32), Signal::SIGTERM).unwrap();

    // New connections are refused while it drains: the socket stops
    // answering before the in-flight ping ends.
    while agentx_shared::transport::connect(&env.socket())
        .await
        .is_ok()
    {
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "a stopping daemon kept accepting connections"
        );
        tokio::task::yield_now().await;
    }
    assert!(
        !in_flight.is_finished(),
        "the socket was refused only after the in-flight RPC ended"
    );
    let reply = in_flight.await.unwrap().expect("in-flight RPC was cut off");
    assert_eq!(reply.into_inner().payload, b"still here");

    let status = tokio::task::spawn_blocking(move || daemon.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "took {:?}",
        sent.elapsed()
    );
    assert!(!env.socket().exists(), "socket not removed");
}

/// `agentx daemon status | true`: the reader is gone before agentx writes;
/// agentx ends quietly (exit 0, no panic, no backtrace) as Unix tools do.
#[test]
fn a_closed_stdout_ends_output_quietly() {
    let env = TestEnv::new();
    assert_code(&env.run(["daemon", "start"]), 0);
    for args in [
        &["daemon", "status"][..],
        &["status", "--json"],
        &["sessions", "--json"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = env
            .agentx(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// A hang-up drains like SIGTERM: exit 0, socket removed — never a death
/// that leaves the socket behind.
#[test]
fn sighup_stops_cleanly_like_sigterm() {
    let env = TestEnv::new();
    assert_code(&env.run(["daemon", "start"]), 0);
    let pids = env.wait_daemons(1, Duration::from_secs(5));
    assert_eq!(pids.len(), 1);
    kill(Pid::from_raw(pids[0]), Signal::SIGHUP).unwrap();
    assert!(agentx_tests::wait_pid_gone(pids[0], Duration::from_secs(5)));
    assert!(!env.socket().exists(), "socket left behind after SIGHUP");
    let log = std::fs::read_to_string(env.home.join("log").join("agentd.log")).unwrap_or_default();
    assert!(log.contains("SIGHUP received"), "{log}");
    assert!(log.contains("agentd stopped"), "{log}");
}

#[test]
fn unreachable_daemon_exits_3_with_one_line_naming_the_fix() {
    let env = TestEnv::new();

    // Binary missing.
    let out = env
        .agentx(["daemon", "start"])
        .env("AGENTX_AGENTD", env.root().join("no-such-agentd"))
        .output()
        .unwrap();
    assert_code(&out, 3);
    assert!(stderr(&out).contains("AGENTX_AGENTD"), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1);

    // Profile unwritable: its parent is a regular file.
    let file = env.root().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = env
        .agentx(["sessions"])
        .env("AGENTX_HOME", file.join("profile"))
        .output()
        .unwrap();
    assert_code(&out, 3);
    assert!(stderr(&out).contains("AGENTX_HOME"), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1);

    // Socket path over the sun_path limit.
    let long = env.root().join("x".repeat(120)).join("agentd.sock");
    let out = env
        .agentx(["daemon", "start"])
        .env("AGENTX_SOCKET", &long)
        .output()
        .unwrap();
    assert_code(&out, 3);
    assert!(stderr(&out).contains("AGENTX_SOCKET"), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1);
    assert!(env.daemon_pids().is_empty());
}

#[test]
fn auto_started_daemon_logs_to_the_profile_log_dir_filtered_by_agentx_log() {
    let env = TestEnv::new();
    assert_code(&env.run(["daemon", "start"]), 0);
    let log = env.home.join("log").join("agentd.log");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("agentd ready"), "{text}");
    assert_eq!(std::fs::metadata(&log).unwrap().mode() & 0o777, 0o600);
    assert_code(&env.run(["daemon", "stop"]), 0);

    std::fs::remove_file(&log).unwrap();
    let out = env
        .agentx(["daemon", "start"])
        .env("AGENTX_LOG", "warn")
        .output()
        .unwrap();
    assert_code(&out, 0);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("agentd ready"),
        "info line passed a warn filter: {text}"
    );
}

/// A client of another version never replaces an agentd with turns in
/// flight: it says what is running and what to do, the turn finishes, and
/// once it has, the next client replaces agentd as usual.
#[test]
fn a_daemon_of_another_version_with_a_turn_in_flight_is_left_to_finish() {
    use agentx_shared::proto::{ApprovalPolicy, turn_event};
    let env = TestEnv::new();
    let model = agentx_tests::fake_model::FakeModel::start();
    assert_code(&env.run(["daemon", "start"]), 0);
    assert_code(&env.run(["daemon", "stop"]), 0);
    let mut old = env
        .agentd(["--log", "file", "--report-version", "0.0.0-old"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !status_json_running(&env) {
        assert!(Instant::now() < deadline, "old daemon never came up");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A turn of the old agentd's own clients: a tool that runs a while.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (events_tx, events_rx) = std::sync::mpsc::channel();
    let socket = env.socket();
    let start = env.turn_start(
        &model,
        "CALL touch started; sleep 2; echo done",
        ApprovalPolicy::Auto,
    );
    let turn = runtime.spawn(async move {
        let (_tx, mut events) = agentx_tests::open_turn(&socket, start).await;
        while let Ok(Some(event)) = events.message().await {
            if let Some(turn_event::Event::Finished(f)) = event.event {
                let _ = events_tx.send(f);
            }
        }
    });
    while !env.work.join("started").exists() {
        assert!(
            Instant::now() < deadline + Duration::from_secs(15),
            "the tool never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = env.run(["status"]);
    assert_code(&out, 3);
    let err = stderr(&out);
    assert!(
        err.contains("agentd 0.0.0-old") && err.contains("running 1 turn"),
        "{err}"
    );
    assert!(err.contains("agentx daemon restart"), "{err}");
    // The turn ran to its end, untouched.
    let finished = events_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(finished.error.is_empty(), "{finished:?}");
    runtime.block_on(turn).unwrap();
    // Now nothing runs: the next client replaces it.
    let out = env.run(["daemon", "start"]);
    assert_code(&out, 0);
    assert!(
        stderr(&out).contains("replacing agentd 0.0.0-old"),
        "{}",
        stderr(&out)
    );
    assert!(old.wait().unwrap().success());
}
