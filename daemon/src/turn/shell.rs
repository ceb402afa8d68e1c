//! The `shell` tool: runs `sh -c COMMAND` in the conversation's folder with a
//! timeout, capturing combined output bounded to its head and tail.
//!
//! Every command runs under a supervisor process (see `supervisor`) that kills
//! all it started when agentd dies, stops, or gives up on it.

mod output;
pub mod sandbox;
use crate::supervisor;

use output::Bounded;
pub use output::{Environment, Outcome};

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt as _;
use tokio::sync::watch;

use crate::shutdown::{Shutdown, ToolStop};

/// The tool's name, as the model calls it.
pub const NAME: &str = "shell";

/// What the model is told the tool does.
pub const DESCRIPTION: &str = "Run a shell command (sh -c) in the user's folder and return its \
exit code and combined stdout/stderr (long output is cut in the middle).";

/// The tool's JSON Schema parameters, the same for every provider.
pub fn parameters() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command line to run."}
        },
        "required": ["command"],
        "additionalProperties": false
    })
}

/// Runs the command; a `true` on `cancel` kills it (and all it started).
///
/// When agentd stops ([`Shutdown::begin_stopping`]) the command and all it started are
/// killed at once and the outcome says `stopped` (a command asked to run
/// after that is not started): the turn records it and ends as interrupted.
#[cfg(test)]
pub async fn run(
    command: &str,
    cwd: &Path,
    env: &Environment,
    timeout: Duration,
    cancel: watch::Receiver<bool>,
) -> std::io::Result<Outcome> {
    Tools::new(Shutdown::default())
        .run(command, cwd, env, timeout, cancel)
        .await
}

/// Tool commands of one agentd: each command and each supervisor still
/// alive holds a [`ToolStop`] of its shutdown, which ends them.
pub struct Tools {
    shutdown: Shutdown,
}

impl Tools {
    pub fn new(shutdown: Shutdown) -> Self {
        Self { shutdown }
    }

    /// Kills every running tool command, with all it started, and waits
    /// (at most `bound`) until they are gone; commands that would start
    /// later end at once. `false` if some were still there at the bound.
    #[cfg(test)]
    pub async fn stop_all(&self, bound: Duration) -> bool {
        self.shutdown.begin_stopping();
        self.shutdown.tools_gone(bound).await
    }

    #[cfg(test)]
    pub async fn run(
        &self,
        command: &str,
        cwd: &Path,
        env: &Environment,
        timeout: Duration,
        cancel: watch::Receiver<bool>,
    ) -> std::io::Result<Outcome> {
        self.run_with(
            command,
            cwd,
            env,
            &Confine::default(),
            (timeout, cancel),
            None,
        )
        .await
    }

    /// Runs the command as `run` does (a `true` on `cancel` kills it, agentd
    /// stopping kills it), leaving each piece of output on `progress` as it
    /// arrives too (never waiting; the outcome holds the whole bounded
    /// output). The tap is dropped when the output has ended.
    pub async fn run_with(
        &self,
        command: &str,
        cwd: &Path,
        env: &Environment,
        confine: &Confine,
        (timeout, cancel): (Duration, watch::Receiver<bool>),
        progress: Option<crate::turn::live_tap::Tap>,
    ) -> std::io::Result<Outcome> {
        let run = run_supervised(
            self.shutdown.tool(),
            (
                command.to_owned(),
                cwd.to_owned(),
                env.clone(),
                confine.clone(),
            ),
            (timeout, cancel),
            progress,
        );
        // Dropped before it ends (the turn's future dropped), the task is
        // aborted on its runtime, and its kill switch kills the command.
        let mut task = AbortOnDrop(crate::priority::spawn_background(run));
        match (&mut task.0).await {
            Ok(outcome) => outcome,
            Err(e) => Err(std::io::Error::other(format!(
                "the command's watcher ended abnormally: {e}"
            ))),
        }
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `command` under its supervisor to its end (see [`Tools::run_with`]).
async fn run_supervised(
    mut stop: ToolStop,
    (command, cwd, env, confine): (String, std::path::PathBuf, Environment, Confine),
    (timeout, cancel): (Duration, watch::Receiver<bool>),
    progress: Option<crate::turn::live_tap::Tap>,
) -> std::io::Result<Outcome> {
    if stop.stopping() {
        return Ok(Outcome::not_run_stopping());
    }
    let (status_pipe, pipe, mut kill) =
        spawn_supervised(&command, (&cwd, &env, &confine), stop.clone()).await?;
    let ended = watch_command(
        (status_pipe, pipe),
        &mut kill,
        (cancel, &mut stop),
        timeout,
        progress,
    )
    .await?;
    // What the command left running in the background goes on, watched
    // by its supervisor.
    kill.armed = false;
    // The stop flag is set before anything is killed: a command whose
    // death (reported on the status pipe) won the race against seeing
    // the flag was killed by the stop all the same.
    let stopped = ended.stopped || stop.stopping();
    // Let the shutdown see this command gone.
    drop((stop, kill));
    Ok(Outcome {
        exit_code: ended.status.flatten(),
        output: ended.output.finish(),
        timed_out: ended.timed_out,
        cancelled: ended.cancelled || stopped,
        stopped,
    })
}

/// Where a command is confined: the sandbox's rules (none: unconfined)
/// and its private temporary directory (`TMPDIR`, `TMP`, `TEMP`).
#[derive(Debug, Default, Clone)]
pub struct Confine {
    pub rules: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    pub tmpdir: Option<std::path::PathBuf>,
}

/// How a command's watch ended, before the stop flag is looked at again.
struct Ended {
    /// `Some` once the supervisor reported; its exit code, if any.
    status: Option<Option<i32>>,
    output: Bounded,
    timed_out: bool,
    cancelled: bool,
    stopped: bool,
}

/// Reads the command's output until it has ended and its output is done,
/// firing `kill` on the timeout, a cancel or a stop; `Err` when `sh` could
/// not start (`kill` disarmed).
async fn watch_command(
    (mut status_pipe, pipe): (
        tokio::process::ChildStdout,
        tokio::net::unix::pipe::Receiver,
    ),
    kill: &mut KillSwitch,
    (mut cancel, stop): (watch::Receiver<bool>, &mut ToolStop),
    timeout: Duration,
    progress: Option<crate::turn::live_tap::Tap>,
) -> std::io::Result<Ended> {
    let mut output = Bounded::new();
    let mut report = Vec::new();
    let mut report_buf = [0u8; 64];
    let deadline = tokio::time::Instant::now() + timeout;
    let (mut timed_out, mut cancelled, mut stopped, mut stop_open) = (false, false, false, true);
    let mut status: Option<Option<i32>> = None;
    let mut eof = false;
    while !(eof && status.is_some()) {
        tokio::select! {
            ready = pipe.readable(), if !eof => {
                eof = read_ready(ready, &pipe, &mut output, progress.as_ref());
            },
            read = status_pipe.read(&mut report_buf), if status.is_none() => match read {
                Ok(n) if n > 0 && report.len() < 64 => report.extend_from_slice(&report_buf[..n]),
                Ok(n) if n > 0 => {}
                _ => {
                    let exit_code = match parse_report(&report) {
                        Err(Failed::Start(errno)) => {
                            kill.armed = false;
                            return Err(std::io::Error::from_raw_os_error(errno));
                        }
                        Err(Failed::Sandbox(errno)) => {
                            kill.armed = false;
                            return Err(std::io::Error::other(format!(
                                "the sandbox could not be set up ({}); nothing ran",
                                std::io::Error::from_raw_os_error(errno)
                            )));
                        }
                        Ok(code) => code,
                    };
                    status = Some(exit_code);
                    // Background children may hold the pipe open: give
                    // the output a moment to drain, then stop reading.
                    if !eof {
                        drain_briefly(&pipe, (&mut output, progress.as_ref())).await;
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
            stopping = stop.wait(), if status.is_none() && !stopped && stop_open => {
                if stopping {
                    stopped = true;
                    kill.fire();
                } else {
                    stop_open = false;
                }
            },
        }
    }
    Ok(Ended {
        status,
        output,
        timed_out,
        cancelled,
        stopped,
    })
}

/// Starts the command under its supervisor, which is then owned by a task
/// of its own: the supervisor's status pipe, the output pipe, and the
/// switch that kills the command.
async fn spawn_supervised(
    command: &str,
    (cwd, env, confine): (&Path, &Environment, &Confine),
    stop: ToolStop,
) -> std::io::Result<(
    tokio::process::ChildStdout,
    tokio::net::unix::pipe::Receiver,
    KillSwitch,
)> {
    let (reader, writer) = std::io::pipe()?;
    let mut cmd = spawn_command(command, cwd, env, writer);
    if let Some(ruleset) = &confine.rules {
        // Handed over as the supervisor's stdin: no descriptor of agentd's
        // is made inheritable, and no code runs between fork and exec.
        cmd.stdin(Stdio::from(ruleset.try_clone()?))
            .env(sandbox::ENV, "0")
            .arg0(agentx_shared::sandbox::CONFINED_SUPERVISOR);
    }
    if let Some(tmpdir) = &confine.tmpdir {
        for name in ["TMPDIR", "TMP", "TEMP"] {
            cmd.env(name, tmpdir);
        }
    }
    // Forked by the one thread that lives as long as agentd: the death
    // signal below is keyed to the forking thread, not to the process.
    let mut child = crate::spawner::spawn(cmd).await?;
    let Some(status_pipe) = child.stdout.take() else {
        return Err(std::io::Error::other("the supervisor has no status pipe"));
    };
    let (kill_tx, kill_rx) = watch::channel(false);
    let kill = KillSwitch {
        tx: kill_tx,
        armed: true,
    };
    tokio::spawn(own(Supervisor(child), kill_rx, stop));
    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())?;
    Ok((status_pipe, pipe, kill))
}

/// Keeps `bytes` of the command's output and shows them as they come
/// (never waited for: the tap drops what its reader has no room for).
/// Output read after the command's end is shown too: a short command's
/// whole output is often read only then.
fn received(output: &mut Bounded, progress: Option<&crate::turn::live_tap::Tap>, bytes: &[u8]) {
    output.push(bytes);
    if let Some(progress) = progress {
        progress.push(bytes);
    }
}

/// Reads what is left of the output for a moment: background children may
/// hold the pipe open long after the command itself is done.
async fn drain_briefly(
    pipe: &tokio::net::unix::pipe::Receiver,
    (output, progress): (&mut Bounded, Option<&crate::turn::live_tap::Tap>),
) {
    let grace = tokio::time::sleep(Duration::from_millis(200));
    tokio::pin!(grace);
    loop {
        tokio::select! {
            ready = pipe.readable() => if read_ready(ready, pipe, output, progress) {
                return;
            },
            () = &mut grace => return,
        }
    }
}

thread_local! {
    /// The buffer output is read into, one per thread and borrowed only
    /// between a pipe's readiness and its read, never across an await: 200
    /// commands running at once no longer hold 64 KiB each. A pipe's
    /// default capacity, so one read takes all a fast writer left.
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; 64 << 10]);
}

/// Reads what `pipe`, reported `ready`, holds now and keeps it (see
/// [`received`]); whether the output is done (its end, or an error).
fn read_ready(
    ready: std::io::Result<()>,
    pipe: &tokio::net::unix::pipe::Receiver,
    output: &mut Bounded,
    progress: Option<&crate::turn::live_tap::Tap>,
) -> bool {
    let read = ready.and_then(|()| {
        READ_BUFFER.with_borrow_mut(|buf| {
            let n = pipe.try_read(buf)?;
            if n > 0 {
                received(output, progress, &buf[..n]);
            }
            Ok(n)
        })
    });
    match read {
        Ok(0) => true,
        Ok(_) => false,
        // Readiness can be spurious: wait for the next.
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

/// The supervisor's command for `command`: in `cwd`, with the caller's
/// environment and umask, output to `writer`, and a death signal that
/// takes everything down with agentd.
fn spawn_command(
    command: &str,
    cwd: &Path,
    env: &Environment,
    writer: std::io::PipeWriter,
) -> std::process::Command {
    // The supervisor (see `supervisor`) runs `/bin/sh -c COMMAND` by
    // absolute path: the caller's PATH must not decide which shell runs.
    // It gets the command's environment, umask and folder, and `sh`
    // inherits them: nothing of agentd's leaks in.
    let mut cmd = supervisor::command(command, std::process::id());
    if let Some(vars) = &env.vars {
        cmd.env_clear().envs(vars.iter().cloned()).env("PWD", cwd);
    }
    // The supervisor's own variables come from agentd alone, never from
    // the caller's environment (the sandbox's is set after, when confined).
    cmd.env_remove(supervisor::UMASK_ENV)
        .env_remove(supervisor::SANDBOX_FD_ENV);
    if let Some(mask) = env.umask {
        cmd.env(supervisor::UMASK_ENV, format!("{mask:o}"));
    }
    // No `pre_exec`: std then starts the supervisor with posix_spawn
    // (vfork-like), not fork, which copies agentd's page tables and makes
    // its threads' next writes fault (`scripts/bench tools`: 0.9 ms less
    // per command). The supervisor sets its own death signal and umask.
    cmd.current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(writer))
        // Away from agentd's group: a Ctrl-C meant for agentd in a
        // terminal reaches the supervisor only through agentd.
        .process_group(0);
    cmd
}

/// Why a supervisor ran no command.
#[derive(Debug, PartialEq, Eq)]
enum Failed {
    /// `sh` could not start (errno).
    Start(i32),
    /// The sandbox could not be set up (errno).
    Sandbox(i32),
}

/// The supervisor's one line: `Ok(exit code)` (`None`: a signal, or no
/// report), `Err` when it ran nothing.
fn parse_report(report: &[u8]) -> Result<Option<i32>, Failed> {
    let text = String::from_utf8_lossy(report);
    let mut words = text.split_whitespace();
    let (kind, value) = (
        words.next(),
        words.next().and_then(|v| v.parse::<i32>().ok()),
    );
    match (kind, value) {
        (Some("exit"), Some(code)) => Ok(Some(code)),
        (Some("error"), Some(errno)) => Err(Failed::Start(errno)),
        (Some("sandbox"), Some(errno)) => Err(Failed::Sandbox(errno)),
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
/// kill request or a stop; holds its [`ToolStop`] until then.
async fn own(mut supervisor: Supervisor, mut kill: watch::Receiver<bool>, mut stop: ToolStop) {
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
            stopping = stop.wait(), if asked.is_none() && stop_open => {
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
mod tests;
