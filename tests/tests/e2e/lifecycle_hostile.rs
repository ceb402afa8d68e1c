//! agentd stays the single writer whatever happens around it: a deleted pid
//! file, a deleted profile, a deleted socket, a frozen daemon, a read-only
//! profile — and `daemon stop` means the process is gone.

use std::time::{Duration, Instant};

use agentx_tests::fake_model::{FakeModel, Reply};
use agentx_tests::{TestEnv, assert_code, stderr, stdout, wait_pid_gone};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn one_daemon(env: &TestEnv) -> i32 {
    let pids = env.wait_daemons(1, Duration::from_secs(10));
    assert_eq!(pids.len(), 1, "daemons: {pids:?}");
    pids[0]
}

fn alive(pid: i32) -> bool {
    !wait_pid_gone(pid, Duration::from_millis(1))
}

fn read_pid_file(env: &TestEnv) -> Option<i32> {
    std::fs::read_to_string(env.home.join("agentd.pid"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Polls `f` every 20 ms for up to 5 s.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_deleted_pid_file_is_recreated_and_restart_waits_for_the_process() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    assert_code(&env.run(["daemon", "start"]), 0);
    let old = one_daemon(&env);
    std::fs::remove_file(env.home.join("agentd.pid")).unwrap();
    // agentd notices and locks a new pid file: single instance holds again.
    assert!(
        eventually(|| read_pid_file(&env) == Some(old)),
        "pid file not re-created"
    );

    // A turn in flight, the pid file deleted again, then a restart.
    model.push(Reply::Stall(Duration::from_millis(1500)));
    let turn = env.chat_command(&model, ["--auto"], "slow message\n");
    assert!(model.wait_for_requests(1, Duration::from_secs(10)));
    std::fs::remove_file(env.home.join("agentd.pid")).unwrap();
    let out = env.run(["daemon", "restart"]);
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains(&format!("agentd stopped (pid {old})")),
        "{}",
        stdout(&out)
    );
    // "Stopped" meant the process was gone, and exactly one daemon serves.
    assert!(
        !alive(old),
        "restart said stopped while pid {old} still ran"
    );
    let new = one_daemon(&env);
    assert_ne!(new, old);
    let turn = turn.wait_with_output().unwrap();
    // The drained turn either finished or is kept as interrupted; either
    // way the conversation is intact and only the new daemon writes now.
    let out = env.chat(&model, ["--auto", "--on-pending", "new"], "after\n");
    assert_code(&out, 0);
    assert_eq!(one_daemon(&env), new, "{}", stderr(&turn));
}

#[test]
fn a_deleted_profile_makes_agentd_exit_without_touching_its_successor() {
    let env = TestEnv::new();
    assert_code(&env.run(["daemon", "start"]), 0);
    let old = one_daemon(&env);
    // As `rm -rf` would, again while agentd still adds a file under it.
    assert!(
        eventually(|| std::fs::remove_dir_all(&env.home).is_ok()),
        "the profile could not be removed"
    );
    // A new daemon starts on the new profile at once.
    assert_code(&env.run(["daemon", "start"]), 0);
    assert!(
        wait_pid_gone(old, Duration::from_secs(5)),
        "the old agentd kept running on a deleted profile"
    );
    // The old one never removed the new daemon's socket.
    assert!(env.socket().exists(), "the successor's socket was unlinked");
    let out = env.run(["daemon", "status"]);
    assert_code(&out, 0);
    assert_ne!(one_daemon(&env), old);
}

#[test]
fn a_deleted_socket_makes_agentd_step_aside_and_the_next_client_works() {
    let env = TestEnv::new();
    assert_code(&env.run(["daemon", "start"]), 0);
    let old = one_daemon(&env);
    std::fs::remove_file(env.socket()).unwrap();
    let started = Instant::now();
    let out = env.run(["sessions", "--json"]);
    assert_code(&out, 0);
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "the client waited out its start-up deadline"
    );
    assert!(wait_pid_gone(old, Duration::from_secs(5)));
    assert_ne!(one_daemon(&env), old);
    assert_code(&env.run(["daemon", "status"]), 0);
}

#[test]
fn a_frozen_daemon_is_named_not_waited_on_forever() {
    let env = TestEnv::new();
    assert_code(&env.run(["daemon", "start"]), 0);
    let pid = one_daemon(&env);
    kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
    let outs: Vec<_> = [&["daemon", "status"][..], &["sessions"]]
        .iter()
        .map(|args| env.run(*args))
        .collect();
    kill(Pid::from_raw(pid), Signal::SIGCONT).unwrap();
    for out in outs {
        assert_code(&out, 3);
        let err = stderr(&out);
        assert!(err.contains(&format!("pid {pid}")), "{err}");
        assert!(err.contains("did not answer"), "{err}");
    }
    // Thawed, it serves again.
    assert_code(&env.run(["daemon", "status"]), 0);
}

#[test]
fn a_read_only_profile_says_it_must_be_writable() {
    if !nix::unistd::geteuid().is_root() {
        agentx_tests::skip("mounting needs root");
        return;
    }
    let env = TestEnv::new();
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::set_permissions(
        &env.home,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let mount = |args: &[&str]| {
        std::process::Command::new("mount")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    let home = env.home.to_str().unwrap();
    if !mount(&["--bind", home, home]) {
        agentx_tests::skip("the bind mount failed");
        return;
    }
    struct Unmount(String);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .args(["-l", &self.0])
                .status();
        }
    }
    let _guard = Unmount(home.to_owned());
    assert!(mount(&["-o", "remount,ro,bind", home]));
    let out = env.run(["sessions"]);
    assert_code(&out, 3);
    let err = stderr(&out);
    assert!(err.contains("must be writable"), "{err}");
    assert!(err.contains("AGENTX_HOME"), "{err}");
}

/// An open REPL rides through `daemon restart` and `daemon stop`: its next
/// message reconnects (starting agentd when none runs) and is answered.
#[test]
fn an_open_repl_carries_on_after_restart_and_stop() {
    use std::io::{BufRead as _, BufReader, Write as _};
    let env = TestEnv::new();
    let model = FakeModel::start();
    let mut repl = env
        .agentx(["--auto"])
        .env("AGENTX_BASE_URL", model.base_url())
        .env("AGENTX_MODEL", "fake-model")
        .env("OPENAI_API_KEY", agentx_tests::TEST_KEY)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = repl.stdin.take().unwrap();
    let mut output = BufReader::new(repl.stdout.take().unwrap());
    let mut say = |text: &str| {
        writeln!(input, "{text}").unwrap();
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        line
    };
    assert!(say("one").starts_with("echo: one"));
    let first = one_daemon(&env);
    let started = Instant::now();
    assert_code(&env.run(["daemon", "restart"]), 0);
    // An idle REPL connection does not hold the stop for the whole drain.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "restart took {:?}",
        started.elapsed()
    );
    assert!(say("two").starts_with("echo: two [turns seen: 2]"));
    assert_ne!(one_daemon(&env), first);
    assert_code(&env.run(["daemon", "stop"]), 0);
    assert!(say("three").starts_with("echo: three [turns seen: 3]"));
    drop(input);
    let out = repl.wait_with_output().unwrap();
    assert_code(&out, 0);
}

/// A turn cut by the drain says what happened and what comes next, not a
/// transport error.
#[test]
fn a_turn_cut_by_a_stop_says_it_is_kept_as_interrupted() {
    let env = TestEnv::new();
    let model = FakeModel::start();
    // A tool that outlasts the stop's drain.
    let turn = env.chat_command(&model, ["--auto"], "CALL touch started; sleep 20\n");
    assert!(eventually(|| env.work.join("started").exists()));
    assert_code(&env.run(["daemon", "stop"]), 0);
    let out = turn.wait_with_output().unwrap();
    assert_code(&out, 3);
    let err = stderr(&out);
    assert!(err.contains("agentd stopped during the turn"), "{err}");
    assert!(!err.contains("h2 protocol"), "{err}");
    let status = env.run(["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(status["interrupted"].is_object(), "{status}");
}

#[test]
fn an_agentd_whose_pid_lock_another_took_exits_at_once_even_with_its_socket_intact() {
    // Its socket lives outside the profile, so deleting the profile leaves
    // it reachable: only the lost pid lock can tell it to stop writing.
    let mut env = TestEnv::new();
    let sockets = tempfile::tempdir().unwrap();
    let first = sockets.path().join("first.sock");
    env.extra_env
        .push(("AGENTX_SOCKET".into(), first.display().to_string()));
    assert_code(&env.run(["daemon", "start"]), 0);
    let old = read_pid_file(&env).expect("the first agentd's pid");
    assert!(
        eventually(|| std::fs::remove_dir_all(&env.home).is_ok()),
        "the profile could not be removed"
    );
    // A second agentd, on its own socket, takes the re-created profile.
    for (k, v) in &mut env.extra_env {
        if k == "AGENTX_SOCKET" {
            *v = sockets.path().join("second.sock").display().to_string();
        }
    }
    assert_code(&env.run(["daemon", "start"]), 0);
    let new = read_pid_file(&env).expect("the second agentd's pid");
    assert_ne!(new, old);
    assert!(first.exists(), "the first agentd's socket is still there");
    // Two writers must not last: the first one is gone within its guard's
    // period, without a client or its socket telling it.
    assert!(
        wait_pid_gone(old, Duration::from_secs(5)),
        "the first agentd kept running after another took its pid lock"
    );
    assert!(alive(new));
}
