//! Reaching agentd: connect over the profile's Unix socket, check versions,
//! and start the daemon when none runs — race-free across many clients.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tonic::transport::Channel;

use agentx_shared::profile::{Profile, create_private_dir};
use agentx_shared::proto::daemon_client::DaemonClient;
use agentx_shared::proto::{HelloReply, HelloRequest, ShutdownRequest};
use agentx_shared::transport;
use agentx_shared::version::{PROTOCOL, VERSION};

use crate::error::{CliError, CliResult};

/// How long a start may take before we give up.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stopping daemon may take to release its lock.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);
/// A daemon that accepted the connection answers the handshake within this.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// A live, version-checked connection to agentd.
pub struct Daemon {
    pub channel: Channel,
    pub hello: HelloReply,
}

/// Connects without starting anything. `Ok(None)`: no daemon runs.
pub async fn probe(profile: &Profile) -> CliResult<Option<Channel>> {
    match transport::connect(&profile.socket).await {
        Ok(channel) => Ok(Some(channel)),
        Err(err) if transport::is_not_running(&err) => Ok(None),
        Err(err) => Err(CliError::unreachable(format!(
            "cannot connect to agentd at {}: {err}",
            profile.socket.display()
        ))),
    }
}

/// The handshake every session with the daemon starts with.
async fn hello_status(channel: &Channel) -> Result<HelloReply, tonic::Status> {
    DaemonClient::new(channel.clone())
        .hello(HelloRequest {
            client_version: VERSION.to_owned(),
            protocol: PROTOCOL,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// A handshake that failed because the daemon is going away: it accepted
/// the connection (or the kernel did, for a process still closing its
/// files after kill -9) and then the connection broke.
fn going_away(status: &tonic::Status) -> bool {
    use tonic::Code;
    matches!(
        status.code(),
        Code::Unavailable | Code::Cancelled | Code::Unknown
    )
}

/// Connects to a compatible agentd, starting it (or replacing one of
/// another version) when needed.
pub async fn connect_or_start(profile: &Profile) -> CliResult<Daemon> {
    if let Some(daemon) = connect_compatible(profile).await? {
        return Ok(daemon);
    }
    profile
        .ensure_dir()
        .map_err(|err| CliError::unreachable(err.to_string()))?;
    // One starter at a time; everyone else waits here, then finds it running.
    let _guard = StartupLock::acquire(&profile.startup_lock()).await?;
    if let Some(daemon) = connect_compatible(profile).await? {
        return Ok(daemon);
    }
    if let Some(channel) = probe(profile).await? {
        let old = match hello_status(&channel).await {
            Ok(old) => old,
            Err(status) if going_away(&status) => {
                // A dying daemon: wait for its lock, then start another.
                wait_stopped(profile).await?;
                return spawn_and_wait(profile).await;
            }
            Err(status) => return Err(CliError::from_status("handshake with agentd", &status)),
        };
        // Still another version: we hold the startup lock, so replace it.
        eprintln!(
            "agentx: replacing agentd {} (pid {}) with {VERSION}",
            old.daemon_version, old.pid
        );
        let pid = replace(&channel, &old).await?;
        wait_pid_exited(pid, profile).await?;
        wait_stopped(profile).await?;
    }
    spawn_and_wait(profile).await
}

/// A connection to a running daemon of our version, or `None`.
async fn connect_compatible(profile: &Profile) -> CliResult<Option<Daemon>> {
    let Some(channel) = probe(profile).await? else {
        return Ok(None);
    };
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, hello_status(&channel)).await {
        Ok(Ok(hello)) => hello,
        // It went away between connect and handshake (stopping, killed).
        Ok(Err(status)) if going_away(&status) => return Ok(None),
        Ok(Err(status)) => {
            return Err(CliError::from_status("handshake with agentd", &status));
        }
        Err(_) => return Err(frozen(profile)),
    };
    Ok(hello.compatible.then_some(Daemon { channel, hello }))
}

/// The error for a daemon that accepts connections but does not answer.
pub fn frozen(profile: &Profile) -> CliError {
    let (who, fix) = who_and_fix(profile);
    CliError::unreachable(format!(
        "{who} accepted the connection on {} but did not answer within {}s: it is stopped \
         (SIGSTOP) or stuck; {fix}",
        profile.socket.display(),
        HELLO_TIMEOUT.as_secs()
    ))
}

/// "agentd (pid N)" and how to wake or end it, for a frozen daemon.
fn who_and_fix(profile: &Profile) -> (String, String) {
    match lock_holder(profile) {
        Some(pid) => (
            format!("agentd (pid {pid})"),
            format!("`kill -CONT {pid}` if it was stopped, else `kill {pid}`"),
        ),
        None => ("agentd".to_owned(), "`agentx daemon restart`".to_owned()),
    }
}

/// How often a client waiting on a long call looks at agentd's process
/// state (a cheap read of `/proc`, no request).
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// Every this many looks, it also asks agentd to answer (a stuck daemon is
/// not stopped, but does not answer either).
const ASK_EVERY: u32 = 10;

/// Resolves (with the error to show) once agentd stops answering while a
/// call is in flight on `channel`: its process stopped (SIGSTOP, seen in
/// `/proc` within [`WATCH_EVERY`]), or a handshake left unanswered for
/// [`HELLO_TIMEOUT`], as a new client would be. A daemon that went away is
/// left to the call's own error.
pub async fn unanswering(channel: Channel, profile: &Profile, what: &str) -> CliError {
    let mut looks: u32 = 0;
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        looks = looks.wrapping_add(1);
        let stopped = lock_holder(profile).is_some_and(process_stopped);
        let unanswered = !stopped
            && looks.is_multiple_of(ASK_EVERY)
            && tokio::time::timeout(HELLO_TIMEOUT, hello_status(&channel))
                .await
                .is_err();
        if stopped || unanswered {
            let (who, fix) = who_and_fix(profile);
            return CliError::unreachable(format!(
                "{who} does not answer during {what}: it is stopped (SIGSTOP) or stuck; {fix}"
            ));
        }
    }
}

/// Whether process `pid` is stopped (state `T`, or `t` under a tracer).
fn process_stopped(pid: u32) -> bool {
    agentx_shared::procfs::stat(pid).is_some_and(|s| s.stopped())
}

/// The pid of the agentd holding the profile's lock, if one does.
pub fn lock_holder(profile: &Profile) -> Option<u32> {
    if !pid_lock_held(&profile.pid_file()) {
        return None;
    }
    std::fs::read_to_string(profile.pid_file())
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Waits until process `pid` has exited (all its threads: a killed
/// process's leader turns zombie while the others still hold its files).
pub async fn wait_pid_exited(pid: u32, profile: &Profile) -> CliResult<()> {
    let deadline = Instant::now() + STOP_TIMEOUT;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    loop {
        let gone = match agentx_shared::procfs::stat(pid) {
            None => true,
            Some(stat) => {
                stat.zombie()
                    && std::fs::read_dir(proc_dir.join("task")).map_or(0, |d| d.count()) <= 1
            }
        };
        if gone {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CliError::unreachable(format!(
                "agentd (pid {pid}) did not stop within {}s; see {}",
                STOP_TIMEOUT.as_secs(),
                profile.log_dir().display()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Asks the daemon to stop; returns its pid.
/// Stops agentd `old` (of another version) unless turns are in flight in
/// it: those are never ended under their clients; the user is told what
/// to do instead.
async fn replace(channel: &Channel, old: &HelloReply) -> CliResult<u32> {
    let stopped = DaemonClient::new(channel.clone())
        .shutdown(ShutdownRequest {
            reason: "replaced by a client of another version".to_owned(),
            unless_busy: true,
        })
        .await;
    match stopped {
        Ok(reply) => Ok(reply.into_inner().pid),
        Err(status) if status.code() == tonic::Code::FailedPrecondition => {
            Err(CliError::unreachable(format!(
                "{}; this agentx is {VERSION} and would have to replace it (version {}). Let \
                 them finish and run this again, or end them now with `agentx daemon restart` \
                 (they are kept as interrupted)",
                status.message(),
                old.daemon_version
            )))
        }
        Err(status) => Err(CliError::from_status("stopping agentd", &status)),
    }
}

pub async fn request_stop(channel: &Channel, reason: &str) -> CliResult<u32> {
    DaemonClient::new(channel.clone())
        .shutdown(ShutdownRequest {
            reason: reason.to_owned(),
            unless_busy: false,
        })
        .await
        .map(|r| r.into_inner().pid)
        .map_err(|status| CliError::from_status("stopping agentd", &status))
}

/// Waits until no daemon holds the profile's pid lock.
pub async fn wait_stopped(profile: &Profile) -> CliResult<()> {
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        if !pid_lock_held(&profile.pid_file()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CliError::unreachable(format!(
                "agentd did not stop within {}s; see {}",
                STOP_TIMEOUT.as_secs(),
                profile.log_dir().display()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// True while a live agentd holds `<profile>/agentd.pid`.
pub fn pid_lock_held(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    // A shared probe conflicts with the daemon's exclusive lock only.
    matches!(
        file.try_lock_shared(),
        Err(std::fs::TryLockError::WouldBlock)
    )
}

/// The `agentd` binary to start: AGENTX_AGENTD, next to this executable, or on PATH.
pub fn agentd_binary() -> CliResult<PathBuf> {
    if let Some(path) = std::env::var_os("AGENTX_AGENTD").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        return Err(CliError::unreachable(format!(
            "cannot start agentd: AGENTX_AGENTD={} does not exist; point it at the agentd binary",
            path.display()
        )));
    }
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("agentd")));
    if let Some(path) = sibling.as_ref().filter(|p| p.is_file()) {
        return Ok(path.clone());
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join("agentd");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(CliError::unreachable(
        "cannot start agentd: no agentd binary next to agentx or on PATH; install it \
         (cargo install --path daemon) or set AGENTX_AGENTD to its path",
    ))
}

/// Starts a detached agentd and waits until it answers the handshake.
async fn spawn_and_wait(profile: &Profile) -> CliResult<Daemon> {
    let binary = agentd_binary()?;
    let log_dir = profile.log_dir();
    let deadline = Instant::now() + START_TIMEOUT;
    let mut child = spawn_detached(&binary, &log_dir)?;
    loop {
        if let Some(daemon) = connect_compatible(profile).await? {
            reap_in_background(child);
            return Ok(daemon);
        }
        match child.try_wait() {
            // Exit 0 at start means another agentd still held the pid lock
            // (e.g. one that is stopping): try again until the deadline.
            Ok(Some(status)) if status.success() => {
                tokio::time::sleep(POLL * 5).await;
                if Instant::now() < deadline {
                    child = spawn_detached(&binary, &log_dir)?;
                }
            }
            Ok(Some(status)) => {
                return Err(CliError::unreachable(format!(
                    "agentd ({}) exited during start-up ({status}){}",
                    binary.display(),
                    last_error_line(&log_dir)
                )));
            }
            Ok(None) | Err(_) => {}
        }
        if Instant::now() > deadline {
            return Err(CliError::unreachable(format!(
                "agentd ({}) did not answer on {} within {}s; see {}",
                binary.display(),
                profile.socket.display(),
                START_TIMEOUT.as_secs(),
                log_dir.display()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The variables of this process that hold the provider key (its own
/// variables, and any other whose value contains it).
fn key_carriers() -> Vec<std::ffi::OsString> {
    let keys: Vec<Vec<u8>> = ["OPENAI_API_KEY", "AGENTX_API_KEY"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|k| k.into_encoded_bytes())
        .filter(|k| !k.is_empty())
        .collect();
    std::env::vars_os()
        .filter(|(name, value)| {
            let value = value.as_encoded_bytes();
            name == "OPENAI_API_KEY"
                || name == "AGENTX_API_KEY"
                || keys
                    .iter()
                    .any(|k| value.windows(k.len()).any(|w| w == k.as_slice()))
        })
        .map(|(name, _)| name)
        .collect()
}

fn spawn_detached(binary: &Path, log_dir: &Path) -> CliResult<Child> {
    create_private_dir(log_dir).map_err(|err| {
        CliError::unreachable(format!("cannot create {}: {err}", log_dir.display()))
    })?;
    // agentd logs to <profile>/log/agentd.log itself; its stderr catches
    // anything said before logging is up (bad arguments, a panic).
    let stderr = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log_dir.join("agentd.stderr"))
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null());
    let mut command = Command::new(binary);
    command
        .args(["--log", "file"])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    // The provider key travels with each turn and lives in agentd's memory
    // only: never in its environment (readable in /proc/PID/environ for its
    // whole life), under its own name or any other.
    for name in key_carriers() {
        command.env_remove(name);
    }
    // SAFETY: setsid is async-signal-safe and touches no memory of ours; it
    // detaches the daemon from our terminal and session.
    unsafe {
        command.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(io::Error::from));
    }
    command.spawn().map_err(|err| {
        CliError::unreachable(format!(
            "cannot start agentd ({}): {err}; set AGENTX_AGENTD to a working binary",
            binary.display()
        ))
    })
}

/// The daemon outlives us normally; should it exit while we run, reap it.
fn reap_in_background(mut child: Child) {
    std::thread::spawn(move || {
        let _ = child.wait();
    });
}

/// `": <last line of agentd.stderr>"` when there is one, for start-up errors.
fn last_error_line(log_dir: &Path) -> String {
    std::fs::read_to_string(log_dir.join("agentd.stderr"))
        .ok()
        .and_then(|text| {
            text.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_owned)
        })
        .map(|line| format!(": {line}"))
        .unwrap_or_else(|| format!("; see {}", log_dir.display()))
}

/// Exclusive lock on `<profile>/agentd.startup.lock`, taken off the runtime.
struct StartupLock {
    _file: File,
}

impl StartupLock {
    async fn acquire(path: &Path) -> CliResult<Self> {
        let path = path.to_path_buf();
        let shown = path.display().to_string();
        let locked = tokio::task::spawn_blocking(move || -> io::Result<File> {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)?;
            file.lock()?;
            Ok(file)
        })
        .await
        .map_err(|err| CliError::unreachable(format!("cannot lock {shown}: {err}")))?;
        locked.map(|file| Self { _file: file }).map_err(|err| {
            CliError::unreachable(format!(
                "cannot lock {shown}: {err}; the profile must be writable (choose another with \
                 --profile NAME or AGENTX_HOME=DIR)"
            ))
        })
    }
}
