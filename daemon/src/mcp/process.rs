//! One stdio MCP server process: run under a supervisor (see `supervisor`)
//! forked by agentd's spawner thread with a death signal, so neither it nor
//! what it starts outlives agentd; in a process group of its own, and ended
//! in steps (stdin closed, then SIGTERM, then SIGKILL).

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

/// Starts `command args` under its supervisor, with piped stdin and stdout
/// (stderr goes nowhere: a chatty server cannot fill a pipe nobody reads).
/// The child is the supervisor: [`server_pid`] finds the server.
pub async fn spawn(
    command: &str,
    args: &[String],
    env: impl Iterator<Item = (OsString, OsString)>,
    cwd: &Path,
) -> std::io::Result<tokio::process::Child> {
    let env: Vec<(OsString, OsString)> = env.collect();
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    // Stat calls on the user's PATH (a hung mount among them): off the
    // runtime's workers.
    let (program, folder) = (command.to_owned(), cwd.to_path_buf());
    let found = tokio::task::spawn_blocking(move || runnable(&program, path.as_ref(), &folder))
        .await
        .unwrap_or(false);
    if !found {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            if command.contains('/') {
                "no such program (or not executable)"
            } else {
                "not found in the server's PATH"
            },
        ));
    }
    let mut cmd = crate::supervisor::server_command(command, args, std::process::id());
    cmd.env_clear()
        .envs(env)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // Its own group (the server's too) lets agentd signal both. The
    // supervisor sets its death signal itself (SIGTERM, keyed to the
    // spawner thread, which lives as long as agentd: it then kills all the
    // server started), so std starts it with posix_spawn, not fork.
    cmd.process_group(0);
    crate::spawner::spawn(cmd).await
}

/// The server's own pid under supervisor `supervisor` (the supervisor's
/// when it cannot be told).
pub fn server_pid(supervisor: u32) -> u32 {
    crate::supervisor::server_pid(supervisor).unwrap_or(supervisor)
}

/// Whether `program` can be started: a path to an executable file
/// (relative to `cwd`), or a name found so on `path`.
fn runnable(program: &str, path: Option<&OsString>, cwd: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(&cwd.join(program));
    }
    path.is_some_and(|path| {
        std::env::split_paths(path).any(|dir| executable(&cwd.join(dir).join(program)))
    })
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
