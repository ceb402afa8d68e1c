//! Tests of the shell tool: output bounds, the caller's environment, kills
//! on cancel, timeout and stop, and the supervisor's death signal.

use super::output::{KEEP_HEAD, KEEP_TAIL};
use super::*;

fn no_cancel() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    std::mem::forget(tx);
    rx
}

/// Runs `command` in `dir` with agentd's own environment, not cancelled.
async fn sh(command: &str, dir: &Path, timeout: Duration) -> Outcome {
    run(command, dir, &Environment::default(), timeout, no_cancel())
        .await
        .unwrap()
}

#[tokio::test]
async fn captures_exit_code_and_interleaved_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = sh(
        "echo out; echo err >&2; exit 3",
        dir.path(),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(out.output, "out\nerr\n");
    let out = sh("pwd", dir.path(), Duration::from_secs(5)).await;
    assert_eq!(
        out.output.trim(),
        std::fs::canonicalize(dir.path()).unwrap().to_str().unwrap()
    );
}

#[tokio::test]
async fn runs_with_the_callers_environment_and_umask() {
    let dir = tempfile::tempdir().unwrap();
    let env = Environment::from_entries(
        vec![
            b"MYVAR=from terminal=yes".to_vec(),
            b"PATH=/opt/caller-bin:/usr/bin:/bin".to_vec(),
            b"no-equals-sign".to_vec(),
            b"=empty-name".to_vec(),
        ],
        Some(0o027),
    );
    assert_eq!(env.vars.as_ref().map(Vec::len), Some(2));
    let out = run(
        "echo \"[$MYVAR]\"; echo \"$PATH\"; umask; touch made.txt; env | wc -l",
        dir.path(),
        &env,
        Duration::from_secs(5),
        no_cancel(),
    )
    .await
    .unwrap();
    let lines: Vec<&str> = out.output.lines().collect();
    assert_eq!(lines[0], "[from terminal=yes]");
    assert_eq!(lines[1], "/opt/caller-bin:/usr/bin:/bin");
    assert_eq!(lines[2], "0027");
    // MYVAR, PATH, PWD, and what sh itself adds (SHLVL, _): nothing of agentd's.
    let count: usize = lines[3].trim().parse().unwrap();
    assert!(count <= 5, "{}", out.output);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.path().join("made.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
}

#[tokio::test]
async fn long_output_keeps_head_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    let out = sh("seq 1 100000", dir.path(), Duration::from_secs(10)).await;
    assert!(out.output.starts_with("1\n2\n3\n"));
    assert!(out.output.ends_with("99999\n100000\n"));
    assert!(out.output.contains("bytes omitted"));
    assert!(out.output.len() < KEEP_HEAD + KEEP_TAIL + 100);
}

#[test]
fn bounded_output_keeps_the_same_ends_whatever_the_piece_sizes() {
    let stream: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    for size in [
        1,
        7,
        4096,
        KEEP_TAIL - 1,
        KEEP_TAIL,
        KEEP_TAIL + 1,
        65_536,
        300_000,
    ] {
        let mut bounded = super::output::Bounded::new();
        for piece in stream.chunks(size) {
            bounded.push(piece);
        }
        let text = bounded.finish();
        let expected = format!(
            "{}\n… [{} bytes omitted] …\n{}",
            String::from_utf8_lossy(&stream[..KEEP_HEAD]),
            stream.len() - KEEP_HEAD - KEEP_TAIL,
            String::from_utf8_lossy(&stream[stream.len() - KEEP_TAIL..])
        );
        assert!(text == expected, "pieces of {size} bytes");
    }
}

/// Waits (at most `bound`) until `pid` is no more (a zombie counts:
/// it runs nothing).
fn gone_within(pid: i32, bound: Duration) -> bool {
    let deadline = std::time::Instant::now() + bound;
    loop {
        let stat = agentx_shared::procfs::stat(pid.cast_unsigned());
        if stat.is_none_or(|s| s.zombie()) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn alive(pid: i32) -> bool {
    !gone_within(pid, Duration::ZERO)
}

/// Reads the pid a command wrote to `name` in `dir`, waiting for it.
fn pid_in(dir: &Path, name: &str) -> i32 {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        if text.ends_with('\n')
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(std::time::Instant::now() < deadline, "no {name}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pids [`with_background`] wrote in `dir`, once the second one
/// runs in its own session (`setsid` may not have got there yet when
/// its pid is written).
fn background_pids(dir: &Path) -> [i32; 2] {
    let pids = [pid_in(dir, "bg1"), pid_in(dir, "bg2")];
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let stat = agentx_shared::procfs::stat(pids[1].cast_unsigned()).unwrap();
        if stat.session == pids[1] {
            return pids;
        }
        assert!(std::time::Instant::now() < deadline, "setsid never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A command that starts two background sleepers, one of them in a
/// session of its own (out of the process group), writes their pids to
/// `bg1` and `bg2`, and then `tail`s.
fn with_background(tail: &str) -> String {
    format!("sleep 30 & echo $! > bg1; setsid sleep 30 & echo $! > bg2; {tail}")
}

#[tokio::test]
async fn timeout_kills_everything_the_command_started() {
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let out = sh(
        &with_background("wait"),
        dir.path(),
        Duration::from_millis(1000),
    )
    .await;
    assert!(out.timed_out);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(out.for_model().starts_with("timed out"));
    for name in ["bg1", "bg2"] {
        let pid = pid_in(dir.path(), name);
        assert!(
            gone_within(pid, Duration::from_secs(2)),
            "{name} {pid} survived"
        );
    }
}

// Several threads: the test waits for pid files by blocking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_whose_caller_stops_waiting_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let (command, env) = (with_background("sleep 30"), Environment::default());
    let waiting = run(
        &command,
        dir.path(),
        &env,
        Duration::from_secs(60),
        no_cancel(),
    );
    // The caller gives up once both are running: its future is dropped.
    let folder = dir.path().to_path_buf();
    let pids = tokio::select! {
        out = waiting => panic!("the command ended by itself: {out:?}"),
        pids = tokio::task::spawn_blocking(move || background_pids(&folder)) => pids.unwrap(),
    };
    for (name, pid) in ["bg1", "bg2"].into_iter().zip(pids) {
        assert!(
            gone_within(pid, Duration::from_secs(5)),
            "{name} {pid} survived its caller"
        );
    }
}

// Several threads: the tests wait for pid files by blocking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_everything_the_command_started() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, rx) = watch::channel(false);
    let task = tokio::spawn({
        let dir = dir.path().to_path_buf();
        let command = with_background("sleep 30");
        async move {
            run(
                &command,
                &dir,
                &Environment::default(),
                Duration::from_secs(60),
                rx,
            )
            .await
        }
    });
    let pids = background_pids(dir.path());
    assert!(pids.iter().all(|&pid| alive(pid)));
    tx.send(true).unwrap();
    let out = task.await.unwrap().unwrap();
    assert!(out.cancelled);
    for pid in pids {
        assert!(gone_within(pid, Duration::from_secs(2)), "{pid} survived");
    }
}

// Several threads: the tests wait for pid files by blocking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_all_kills_running_and_lingering_commands_and_starts_no_more() {
    let tools = std::sync::Arc::new(Tools::new(Shutdown::default()));
    let done = tempfile::tempdir().unwrap();
    let running = tempfile::tempdir().unwrap();
    // Finished, but left two sleepers behind: they go on, supervised.
    let out = tools
        .run(
            &with_background("echo done"),
            done.path(),
            &Environment::default(),
            Duration::from_secs(10),
            no_cancel(),
        )
        .await
        .unwrap();
    assert_eq!((out.exit_code, out.output.as_str()), (Some(0), "done\n"));
    let lingering = background_pids(done.path());
    assert!(lingering.iter().all(|&pid| alive(pid)));
    let task = tokio::spawn({
        let tools = std::sync::Arc::clone(&tools);
        let dir = running.path().to_path_buf();
        let command = with_background("echo partial; sleep 30");
        async move {
            tools
                .run(
                    &command,
                    &dir,
                    &Environment::default(),
                    Duration::from_secs(60),
                    no_cancel(),
                )
                .await
        }
    });
    let running_pids = background_pids(running.path());

    assert!(tools.stop_all(Duration::from_secs(5)).await);
    for pid in lingering.into_iter().chain(running_pids) {
        assert!(!alive(pid), "{pid} survived the stop");
    }
    // The running call returns what it printed, marked as stopped.
    let out = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(out.stopped && out.cancelled, "{out:?}");
    assert_eq!(out.output, "partial\n");
    assert!(out.for_model().starts_with("killed: agentd stopped"));
    // Nothing starts after the stop.
    let later = tempfile::tempdir().unwrap();
    let never = tools
        .run(
            "touch ran",
            later.path(),
            &Environment::default(),
            Duration::from_secs(5),
            no_cancel(),
        )
        .await
        .unwrap();
    assert!(never.stopped && never.exit_code.is_none(), "{never:?}");
    assert!(!later.path().join("ran").exists());
}

/// The supervisor's death signal is agentd's death: here the thread
/// that started it ends (`PR_SET_PDEATHSIG` follows the spawning thread),
/// which the kernel reports exactly as it reports a `kill -9`'d agentd.
#[test]
fn the_supervisor_kills_everything_when_its_parent_dies() {
    let dir = tempfile::tempdir().unwrap();
    let command = with_background("sh -c 'sleep 30; touch late' & echo $! > bg3; sleep 30");
    let path = dir.path().to_path_buf();
    let supervisor = std::thread::spawn(move || {
        let mut cmd = supervisor::command(&command, std::process::id());
        // SAFETY: as in `Tools::run`.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                    .map_err(std::io::Error::from)
            });
        }
        let child = cmd
            .current_dir(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        background_pids(&path);
        pid_in(&path, "bg3");
        child
    })
    .join()
    .unwrap();
    let pids = ["bg1", "bg2", "bg3"].map(|name| pid_in(dir.path(), name));
    for pid in pids {
        assert!(gone_within(pid, Duration::from_secs(2)), "{pid} survived");
    }
    let mut supervisor = supervisor;
    let status = supervisor.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let mut report = String::new();
    std::io::Read::read_to_string(&mut supervisor.stdout.take().unwrap(), &mut report).unwrap();
    assert_eq!(report, "signal 9\n");
}

#[tokio::test]
async fn commands_start_with_a_clean_signal_state_and_report_start_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = sh(
        "grep -E '^Sig(Blk|Ign)' /proc/self/status; kill -TERM $$",
        dir.path(),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(out.exit_code, None, "{out:?}");
    let masks: Vec<u64> = out
        .output
        .lines()
        .map(|l| u64::from_str_radix(l.split_whitespace().nth(1).unwrap(), 16).unwrap())
        .collect();
    assert_eq!(masks.len(), 2, "{}", out.output);
    assert_eq!(masks[0], 0, "blocked signals: {}", out.output);
    assert_eq!(
        masks[1] & (1 << (13 - 1)),
        0,
        "SIGPIPE ignored: {}",
        out.output
    );

    let missing = dir.path().join("missing");
    let err = run(
        "true",
        &missing,
        &Environment::default(),
        Duration::from_secs(5),
        no_cancel(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
}

/// The thread that asks for a command may end while the command runs (a
/// tokio blocking thread retires after its idle time; `block_in_place`
/// hands workers to that pool): the command must not die with it, since a
/// death signal follows the thread that forked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_outlives_the_thread_that_asked_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Handle::current();
    let shutdown = Shutdown::default();
    let stop = shutdown.tool();
    let folder = dir.path().to_owned();
    let started = std::thread::spawn(move || {
        runtime.block_on(spawn_supervised(
            "sleep 1; echo SURVIVED",
            (&folder, &Environment::default(), &super::Confine::default()),
            stop,
        ))
    })
    .join()
    .unwrap();
    // The asking thread is gone now.
    let (status_pipe, pipe, mut kill) = started.unwrap();
    let mut stop = shutdown.tool();
    let ended = watch_command(
        (status_pipe, pipe),
        &mut kill,
        (no_cancel(), &mut stop),
        Duration::from_secs(20),
        None,
    )
    .await
    .unwrap();
    assert_eq!(ended.status, Some(Some(0)));
    assert_eq!(ended.output.finish(), "SURVIVED\n");
}

/// A command starts with no signal blocked and none ignored but what its
/// caller's shell would: the supervisor waits for signals with them
/// blocked, and none of that may reach the command (a `timeout` inside it
/// could not stop what it runs).
#[tokio::test]
async fn a_command_starts_with_no_signal_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let out = sh(
        "grep -E '^Sig(Blk|Ign)' /proc/self/status",
        dir.path(),
        Duration::from_secs(5),
    )
    .await;
    assert!(
        out.output.contains("SigBlk:\t0000000000000000"),
        "{}",
        out.output
    );
    // SIGPIPE (bit 13) is not ignored either.
    let ignored = out
        .output
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:\t"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap();
    assert_eq!(ignored & (1 << 12), 0, "{}", out.output);
}

/// Output still in the pipe when the command's end is reported (a short
/// command's whole output, often) is shown live as well as kept.
#[tokio::test]
async fn output_read_after_the_command_ended_is_shown_too() {
    use tokio::io::AsyncWriteExt as _;
    let (mut writer, pipe) = tokio::net::unix::pipe::pipe().unwrap();
    writer.write_all(b"streamed-out\n").await.unwrap();
    drop(writer);
    let (tap, mut taken) = crate::turn::live_tap::tap();
    let mut output = output::Bounded::new();
    drain_briefly(&pipe, (&mut output, Some(&tap))).await;
    drop(tap);
    assert_eq!(output.finish(), "streamed-out\n");
    let (shown, dropped) = taken.next().await.unwrap();
    assert_eq!((shown.as_slice(), dropped), (&b"streamed-out\n"[..], 0));
}

/// Commands read at once on one thread (sharing its read buffer) each keep
/// exactly their own output, every byte counted.
#[tokio::test]
async fn commands_read_at_once_on_one_thread_keep_their_own_output() {
    let dir = tempfile::tempdir().unwrap();
    let lines = 40_000;
    let commands: Vec<String> = (0..6)
        .map(|i| format!("yes line-of-{i} | head -n {lines}"))
        .collect();
    let runs = commands
        .iter()
        .map(|c| sh(c, dir.path(), Duration::from_secs(30)));
    let outs = futures_util::future::join_all(runs).await;
    for (i, out) in outs.iter().enumerate() {
        let line = format!("line-of-{i}\n");
        let (head, rest) = out.output.split_once("\n… [").unwrap();
        let (omitted, tail) = rest.split_once(" bytes omitted] …\n").unwrap();
        let omitted: usize = omitted.parse().unwrap();
        assert_eq!(head.len() + omitted + tail.len(), lines * line.len());
        let whole = line.repeat(lines);
        assert!(whole.starts_with(head), "command {i}'s head");
        assert!(whole.ends_with(tail), "command {i}'s tail");
    }
}
