//! One stdio MCP server process: forked by agentd's spawner thread with a
//! death signal (it never outlives agentd), in its own process group, and
//! ended in steps (stdin closed, then SIGTERM, then SIGKILL).

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// How long a server has to exit after its stdin closes, and after SIGTERM.
pub const GRACE: Duration = Duration::from_secs(2);

/// The variables a server gets from agentd's environment (as Codex gives
/// its servers), before its own `env` table.
const INHERITED: &[&str] = &[
    "HOME", "LOGNAME", "PATH", "SHELL", "USER", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ",
];

/// The pieces of agentd's environment a server starts from.
pub fn base_environment(var: impl Fn(&str) -> Option<OsString>) -> Vec<(OsString, OsString)> {
    INHERITED
        .iter()
        .filter_map(|k| Some((OsString::from(k), var(k)?)))
        .collect()
}

/// Starts `command args` with piped stdin and stdout (stderr goes nowhere:
/// a chatty server cannot fill a pipe nobody reads).
pub async fn spawn(
    command: &str,
    args: &[String],
    env: impl Iterator<Item = (OsString, OsString)>,
    cwd: &Path,
) -> std::io::Result<tokio::process::Child> {
    let mut cmd = std::process::Command::new(command);
    cmd.args(args)
        .env_clear()
        .envs(env)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: setpgid and prctl are async-signal-safe and touch only the
    // child. Its own group lets agentd signal what it started too; the
    // death signal comes from the spawner thread, which lives as long as
    // agentd, so a killed agentd leaves no server behind.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0))
                .map_err(std::io::Error::from)?;
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    crate::spawner::spawn(cmd).await
}

/// Ends `child` (whose stdin the caller has closed): waits [`GRACE`], then
/// SIGTERM to its group, [`GRACE`] again, then SIGKILL; reaps it.
pub async fn end(child: &mut tokio::process::Child) {
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    if tokio::time::timeout(GRACE, child.wait()).await.is_ok() {
        if let Some(group) = group {
            let _ = killpg(group, Signal::SIGKILL);
        }
        return;
    }
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGTERM);
    }
    if tokio::time::timeout(GRACE, child.wait()).await.is_err() {
        if let Some(group) = group {
            let _ = killpg(group, Signal::SIGKILL);
        }
        let _ = child.kill().await;
    } else if let Some(group) = group {
        // What the server started and left behind.
        let _ = killpg(group, Signal::SIGKILL);
    }
}
