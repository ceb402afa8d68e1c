//! The `shell` tool: runs `sh -c COMMAND` in the conversation's folder with a
//! timeout, capturing combined output bounded to its head and tail. Every
//! command runs under a supervisor process (see `supervisor`) that kills
//! all it started when agentd dies, stops, or gives up on it.

mod supervisor;

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Stdio;
use std::sync::LazyLock;
use std::time::Duration;

use tokio::io::AsyncReadExt as _;
use tokio::sync::watch;

/// Output kept from each end of a long output.
const KEEP_HEAD: usize = 16 * 1024;
const KEEP_TAIL: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub exit_code: Option<i32>,
    pub output: String,
    pub timed_out: bool,
    pub cancelled: bool,
    /// Killed (or never started) because agentd is stopping; `cancelled` too.
    pub stopped: bool,
}

impl Outcome {
    /// What the model is told.
    pub fn for_model(&self) -> String {
        let status = if self.stopped {
            "killed: agentd stopped while it ran".to_owned()
        } else if self.timed_out {
            "timed out (killed)".to_owned()
        } else if self.cancelled {
            "cancelled by the user (killed)".to_owned()
        } else {
            match self.exit_code {
                Some(code) => format!("exit code {code}"),
                None => "killed by a signal".to_owned(),
            }
        };
        format!("{status}\n{}", self.output)
    }
}

/// The terminal a command runs as: the environment and umask of the
/// `agentx` that started the turn. Held in memory for the turn only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// Empty: agentd's own environment (a client that sent none).
    pub vars: Vec<(OsString, OsString)>,
    pub umask: Option<u32>,
}

impl Environment {
    /// Parses `NAME=value` entries; entries without `=` or with an empty
    /// name are dropped, as the kernel's own environment parsing would.
    pub fn from_entries(entries: Vec<Vec<u8>>, umask: Option<u32>) -> Self {
        use std::os::unix::ffi::OsStringExt as _;
        let vars = entries
            .into_iter()
            .filter_map(|mut entry| {
                let eq = entry.iter().position(|&b| b == b'=').filter(|&i| i > 0)?;
                let value = entry.split_off(eq + 1);
                entry.pop();
                Some((OsString::from_vec(entry), OsString::from_vec(value)))
            })
            .collect();
        Self {
            vars,
            umask: umask.map(|m| m & 0o777),
        }
    }
}

/// Keeps the first and last bytes of a stream, counting what it drops.
struct Bounded {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: usize,
}

impl Bounded {
    fn new() -> Self {
        Self {
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            dropped: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < KEEP_HEAD {
            let take = (KEEP_HEAD - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        self.tail.extend(bytes);
        let excess = self.tail.len().saturating_sub(KEEP_TAIL);
        if excess > 0 {
            self.tail.drain(..excess);
            self.dropped += excess;
        }
    }

    fn finish(self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!("\n… [{} bytes omitted] …\n", self.dropped));
        }
        let tail: Vec<u8> = self.tail.into_iter().collect();
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

/// Runs the command; a `true` on `cancel` kills it (and all it started).
///
/// When agentd stops ([`stop_all`]) the command and all it started are
/// killed at once and the outcome says `stopped` (a command asked to run
/// after that is not started): the turn records it and ends as interrupted.
pub async fn run(
    command: &str,
    cwd: &Path,
    env: &Environment,
    timeout: Duration,
    cancel: watch::Receiver<bool>,
) -> std::io::Result<Outcome> {
    TOOLS.run(command, cwd, env, timeout, cancel).await
}

/// Kills every running tool command of this agentd, with all it started,
/// and waits (at most `bound`) until they are gone; commands that would
/// start later end at once. `false` if some were still there at the bound.
pub async fn stop_all(bound: Duration) -> bool {
    TOOLS.stop_all(bound).await
}

/// This agentd's tool commands.
static TOOLS: LazyLock<Tools> = LazyLock::new(Tools::new);

/// Tool commands that one stop request ends: each command and each
/// supervisor still alive holds a receiver of `stop`.
pub struct Tools {
    stop: watch::Sender<bool>,
}

impl Default for Tools {
    fn default() -> Self {
        Self::new()
    }
}

impl Tools {
    pub fn new() -> Self {
        Self {
            stop: watch::Sender::new(false),
        }
    }

    pub async fn stop_all(&self, bound: Duration) -> bool {
        self.stop.send_replace(true);
        let deadline = tokio::time::Instant::now() + bound;
        while self.stop.receiver_count() > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    pub async fn run(
        &self,
        command: &str,
        cwd: &Path,
        env: &Environment,
        timeout: Duration,
        mut cancel: watch::Receiver<bool>,
    ) -> std::io::Result<Outcome> {
        let mut stop = self.stop.subscribe();
        if *stop.borrow_and_update() || crate::stopping::requested() {
            return Ok(Outcome {
                exit_code: None,
                output: "not run: agentd is stopping".to_owned(),
                timed_out: false,
                cancelled: true,
                stopped: true,
            });
        }
        let (reader, writer) = std::io::pipe()?;
        // The supervisor (see `supervisor`) runs `/bin/sh -c COMMAND` by
        // absolute path: the caller's PATH must not decide which shell runs.
        // It gets the command's environment, umask and folder, and `sh`
        // inherits them: nothing of agentd's leaks in.
        let mut cmd = supervisor::command(command, std::process::id());
        if !env.vars.is_empty() {
            cmd.env_clear()
                .envs(env.vars.iter().cloned())
                .env("PWD", cwd);
        }
        if let Some(mask) = env.umask {
            let mask = nix::sys::stat::Mode::from_bits_truncate(mask as nix::libc::mode_t);
            // SAFETY: umask is async-signal-safe and only affects the child.
            unsafe {
                cmd.pre_exec(move || {
                    nix::sys::stat::umask(mask);
                    Ok(())
                });
            }
        }
        // SAFETY: prctl is async-signal-safe; it only sets a flag of the
        // child. The supervisor catches the signal and kills the command
        // with everything it started: nothing outlives a killed agentd.
        // (The "parent" is this runtime worker thread, which lives as long
        // as agentd does.)
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                    .map_err(std::io::Error::from)
            });
        }
        cmd.current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(writer))
            // Away from agentd's group: a Ctrl-C meant for agentd in a
            // terminal reaches the supervisor only through agentd.
            .process_group(0);
        let mut cmd = tokio::process::Command::from(cmd);
        let spawned = cmd.spawn();
        // The command keeps its copy of the pipe's write end: drop it, or
        // the output never ends.
        drop(cmd);
        let mut child = spawned?;
        let Some(mut status_pipe) = child.stdout.take() else {
            return Err(std::io::Error::other("the supervisor has no status pipe"));
        };
        let (kill_tx, kill_rx) = watch::channel(false);
        let mut kill = KillSwitch {
            tx: kill_tx,
            armed: true,
        };
        tokio::spawn(own(Supervisor(child), kill_rx, stop.clone()));
        let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())?;

        let mut output = Bounded::new();
        let mut buf = vec![0u8; 8192];
        let mut report = Vec::new();
        let mut report_buf = [0u8; 64];
        let deadline = tokio::time::Instant::now() + timeout;
        let mut timed_out = false;
        let mut cancelled = false;
        let mut stopped = false;
        let mut stop_open = true;
        let mut status: Option<Option<i32>> = None;
        let mut eof = false;
        while !(eof && status.is_some()) {
            tokio::select! {
                read = pipe.read(&mut buf), if !eof => match read {
                    Ok(0) | Err(_) => eof = true,
                    Ok(n) => output.push(&buf[..n]),
                },
                read = status_pipe.read(&mut report_buf), if status.is_none() => match read {
                    Ok(n) if n > 0 && report.len() < 64 => report.extend_from_slice(&report_buf[..n]),
                    Ok(n) if n > 0 => {}
                    _ => {
                        let exit_code = match parse_report(&report) {
                            Err(errno) => {
                                kill.armed = false;
                                return Err(std::io::Error::from_raw_os_error(errno));
                            }
                            Ok(code) => code,
                        };
                        status = Some(exit_code);
                        // Background children may hold the pipe open: give
                        // the output a moment to drain, then stop reading.
                        if !eof {
                            let grace = tokio::time::sleep(Duration::from_millis(200));
                            tokio::pin!(grace);
                            loop {
                                tokio::select! {
                                    read = pipe.read(&mut buf) => match read {
                                        Ok(0) | Err(_) => break,
                                        Ok(n) => output.push(&buf[..n]),
                                    },
                                    () = &mut grace => break,
                                }
                            }
                            eof = true;
                        }
                    }
                },
                () = tokio::time::sleep_until(deadline), if status.is_none() && !timed_out => {
                    timed_out = true;
                    kill.fire();
                },
                changed = cancel.changed(), if status.is_none() && !cancelled => {
                    if changed.is_err() || *cancel.borrow() {
                        cancelled = true;
                        kill.fire();
                    }
                },
                stopping = async { stop.wait_for(|s| *s).await.is_ok() }, if status.is_none() && !stopped && stop_open => {
                    if stopping {
                        stopped = true;
                        kill.fire();
                    } else {
                        stop_open = false;
                    }
                },
            }
        }
        // What the command left running in the background goes on, watched
        // by its supervisor.
        kill.armed = false;
        // The stop flag is set before anything is killed: a command whose
        // death (reported on the status pipe) won the race against seeing
        // the flag was killed by the stop all the same.
        let stopped = stopped || *stop.borrow() || crate::stopping::requested();
        // Let `stop_all` see this command gone.
        drop((stop, kill));
        Ok(Outcome {
            exit_code: status.flatten(),
            output: output.finish(),
            timed_out,
            cancelled: cancelled || stopped,
            stopped,
        })
    }
}

/// The supervisor's one line: `Ok(exit code)` (`None`: a signal, or no
/// report), `Err(errno)` when `sh` could not start.
fn parse_report(report: &[u8]) -> Result<Option<i32>, i32> {
    let text = String::from_utf8_lossy(report);
    let mut words = text.split_whitespace();
    let (kind, value) = (
        words.next(),
        words.next().and_then(|v| v.parse::<i32>().ok()),
    );
    match (kind, value) {
        (Some("exit"), Some(code)) => Ok(Some(code)),
        (Some("error"), Some(errno)) => Err(errno),
        _ => Ok(None),
    }
}

/// Asks the supervisor to kill the command; also when the caller stops
/// waiting for it (its future dropped) before it finished.
struct KillSwitch {
    tx: watch::Sender<bool>,
    armed: bool,
}

impl KillSwitch {
    fn fire(&self) {
        let _ = self.tx.send(true);
    }
}

impl Drop for KillSwitch {
    fn drop(&mut self) {
        if self.armed {
            self.fire();
        }
    }
}

/// A running supervisor; dropped unreaped (the runtime shutting down), it
/// is told to kill its command.
struct Supervisor(tokio::process::Child);

impl Supervisor {
    fn terminate(&self) {
        // `id` is `None` once reaped: the pid can no longer be someone else's.
        if let Some(pid) = self.0.id().and_then(|id| i32::try_from(id).ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Waits for a supervisor to exit, telling it to kill its command on a
/// kill request or a stop; holds a receiver of the stop signal until then.
async fn own(
    mut supervisor: Supervisor,
    mut kill: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) {
    /// A supervisor kills its tree within 3 s; one that hangs is killed.
    const ESCALATE_AFTER: Duration = Duration::from_secs(5);
    let mut asked: Option<tokio::time::Instant> = None;
    let mut escalated = false;
    let (mut kill_open, mut stop_open) = (true, true);
    loop {
        let escalate = async {
            match asked {
                Some(at) if !escalated => tokio::time::sleep_until(at + ESCALATE_AFTER).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = supervisor.0.wait() => return,
            killing = async { kill.wait_for(|k| *k).await.is_ok() }, if asked.is_none() && kill_open => {
                if killing {
                    supervisor.terminate();
                    asked = Some(tokio::time::Instant::now());
                } else {
                    kill_open = false;
                }
            },
            stopping = async { stop.wait_for(|s| *s).await.is_ok() }, if asked.is_none() && stop_open => {
                if stopping {
                    supervisor.terminate();
                    asked = Some(tokio::time::Instant::now());
                } else {
                    stop_open = false;
                }
            },
            () = escalate => {
                escalated = true;
                let _ = supervisor.0.start_kill();
            },
        }
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(env.vars.len(), 2);
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

    /// Waits (at most `bound`) until `pid` is no more (a zombie counts:
    /// it runs nothing).
    fn gone_within(pid: i32, bound: Duration) -> bool {
        let deadline = std::time::Instant::now() + bound;
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            if stat.is_empty() || state == Some(Some('Z')) {
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
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", pids[1])).unwrap();
            // `pid (comm) state ppid pgrp session …`
            let (_, rest) = stat.rsplit_once(") ").unwrap();
            let session: i32 = rest.split_whitespace().nth(3).unwrap().parse().unwrap();
            if session == pids[1] {
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
        let tools = std::sync::Arc::new(Tools::new());
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
}
