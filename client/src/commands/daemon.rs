//! `agentx daemon start|stop|status|restart|install-systemd`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use agentx_shared::profile::Profile;
use agentx_shared::proto::daemon_client::DaemonClient;
use agentx_shared::proto::{DaemonStatusReply, DaemonStatusRequest};

use crate::cli::DaemonAction;
use crate::connect;
use crate::error::{CliError, CliResult};
use crate::render::{human, json};

const SERVICE_TEMPLATE: &str = include_str!("../../../systemd/agentd.service");
const SOCKET_TEMPLATE: &str = include_str!("../../../systemd/agentd.socket");

pub async fn run(profile: &Profile, action: DaemonAction) -> CliResult<()> {
    match action {
        DaemonAction::Start => start(profile).await,
        DaemonAction::Stop => stop(profile).await,
        DaemonAction::Restart => {
            stop(profile).await?;
            start(profile).await
        }
        DaemonAction::Status { json } => status(profile, json).await,
        DaemonAction::InstallSystemd { dir } => install_systemd(profile, dir),
    }
}

async fn start(profile: &Profile) -> CliResult<()> {
    let daemon = connect::connect_or_start(profile).await?;
    println!(
        "agentd {} running (pid {}) on {}",
        daemon.hello.daemon_version,
        daemon.hello.pid,
        profile.socket.display()
    );
    Ok(())
}

async fn stop(profile: &Profile) -> CliResult<()> {
    let Some(channel) = connect::probe(profile).await? else {
        if let Some(pid) = connect::lock_holder(profile) {
            // Unreachable but alive (its socket was deleted: it is stopping
            // by itself): wait for the process, then say so.
            connect::wait_pid_exited(pid, profile).await?;
            println!("agentd stopped (pid {pid}; it had lost its socket)");
            return Ok(());
        }
        println!("agentd is not running ({})", profile.socket.display());
        return Ok(());
    };
    let pid = connect::request_stop(&channel, "agentx daemon stop").await?;
    drop(channel);
    // Stopped means the process is gone, not just its pid file.
    connect::wait_pid_exited(pid, profile).await?;
    connect::wait_stopped(profile).await?;
    println!("agentd stopped (pid {pid})");
    Ok(())
}

async fn status(profile: &Profile, json: bool) -> CliResult<()> {
    let Some(channel) = connect::probe(profile).await? else {
        return Err(not_running(profile, json));
    };
    let mut client = DaemonClient::new(channel);
    let call = client.status(DaemonStatusRequest {});
    let reply = tokio::time::timeout(connect::HELLO_TIMEOUT, call)
        .await
        .map_err(|_| connect::frozen(profile))?
        .map_err(|status| CliError::from_status("agentd status", &status))?
        .into_inner();
    let started_at = agentx_shared::time::rfc3339_wire(reply.started_at.as_ref());
    let compatible = reply.version == agentx_shared::version::VERSION
        && reply.protocol == agentx_shared::version::PROTOCOL;
    if json {
        println!(
            "{}",
            json!({
                "running": true,
                "pid": reply.pid,
                "version": reply.version,
                "protocol": reply.protocol,
                "compatible": compatible,
                "started_at": started_at,
                "uptime_ms": reply.uptime_ms,
                "socket": reply.socket_path,
                "socket_inherited": reply.socket_inherited,
                "profile": reply.profile_dir,
                "log": reply.log_path,
                "rpcs_served": reply.rpcs_served,
                "remote": json::remote(reply.remote.as_ref()),
                "search_note": if reply.search_note.is_empty() { serde_json::Value::Null } else { json!(reply.search_note) },
                "mcp_servers": reply.mcp_servers.iter().map(super::mcp::state_json).collect::<Vec<_>>(),
                "mcp_error": if reply.mcp_error.is_empty() { serde_json::Value::Null } else { json!(reply.mcp_error) },
            })
        );
        return Ok(());
    }
    print_running(&reply, compatible, &started_at);
    Ok(())
}

/// `daemon status` when nothing answers: what was looked for, and the pid
/// that still holds the profile when one does (it is stopping).
fn not_running(profile: &Profile, json: bool) -> CliError {
    if json {
        println!(
            "{}",
            json!({
                "running": false,
                "socket": profile.socket,
                "profile": profile.dir,
            })
        );
    } else {
        println!("agentd is not running");
        println!("  socket:  {}", profile.socket.display());
        println!("  profile: {}", profile.dir.display());
    }
    match connect::lock_holder(profile) {
        Some(pid) => CliError::unreachable(format!(
            "agentd (pid {pid}) holds the profile's lock but does not answer on {}: it is \
             stopping (its socket was deleted or replaced); if it stays, `kill {pid}`",
            profile.socket.display()
        )),
        None => CliError::unreachable(String::new()),
    }
}

/// `daemon status` of a running agentd, for people.
fn print_running(reply: &DaemonStatusReply, compatible: bool, started_at: &str) {
    let uptime = humantime::format_duration(Duration::from_secs(reply.uptime_ms / 1000));
    println!("agentd is running");
    println!("  pid:      {}", reply.pid);
    let note = if compatible {
        String::new()
    } else {
        format!(
            " (this agentx is {}; the next command replaces it)",
            agentx_shared::version::VERSION
        )
    };
    println!("  version:  {}{note}", reply.version);
    println!("  uptime:   {uptime} (since {started_at})");
    let origin = if reply.socket_inherited {
        " (from systemd)"
    } else {
        ""
    };
    println!("  socket:   {}{origin}", reply.socket_path);
    println!("  profile:  {}", reply.profile_dir);
    if !reply.log_path.is_empty() {
        println!("  log:      {}", reply.log_path);
    }
    println!("  remote:   {}", human::remote_line(reply.remote.as_ref()));
    if let Some(error) = reply
        .remote
        .as_ref()
        .map(|r| &r.last_error)
        .filter(|e| !e.is_empty())
    {
        println!("            last error: {error}");
    }
    if let Some(remote) = reply.remote.as_ref() {
        for line in human::refused_lines(remote, "            ") {
            println!("{line}");
        }
    }
    if !reply.search_note.is_empty() {
        println!("  search:   {}", crate::show::visible(&reply.search_note));
    }
    if !reply.mcp_error.is_empty() {
        println!("  mcp:      {}", crate::show::visible(&reply.mcp_error));
    }
    for (i, line) in super::mcp::lines(&reply.mcp_servers).iter().enumerate() {
        let label = if i == 0 { "mcp:" } else { "" };
        println!("  {label:<9} {line}");
    }
}

/// Writes `agentd.service` and `agentd.socket` with this installation's
/// real binary path and profile, then prints how to enable them.
fn install_systemd(profile: &Profile, dir: Option<PathBuf>) -> CliResult<()> {
    let dir = match dir {
        Some(dir) => dir,
        None => user_unit_dir()?,
    };
    let agentd = agentd_path()?;
    std::fs::create_dir_all(&dir)
        .map_err(|err| CliError::failed(format!("cannot create {}: {err}", dir.display())))?;
    let service = render_service(SERVICE_TEMPLATE, &agentd, profile);
    let socket = render_socket(SOCKET_TEMPLATE, profile);
    for (name, text) in [("agentd.service", service), ("agentd.socket", socket)] {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|err| CliError::failed(format!("cannot write {}: {err}", path.display())))?;
        println!("wrote {}", path.display());
    }
    println!("enable socket activation with:");
    println!("  systemctl --user daemon-reload");
    println!("  systemctl --user enable --now agentd.socket");
    Ok(())
}

fn user_unit_dir() -> CliResult<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .ok_or_else(|| CliError::failed("cannot find ~/.config: set HOME or use --dir"))?;
    Ok(base.join("systemd").join("user"))
}

/// The agentd binary the units should run (absolute, resolved).
fn agentd_path() -> CliResult<PathBuf> {
    // The same search as auto-start: what the units run is what agentx starts.
    let candidate = crate::connect::agentd_binary().map_err(|e| CliError::failed(e.message))?;
    std::fs::canonicalize(&candidate)
        .map_err(|err| CliError::failed(format!("cannot resolve {}: {err}", candidate.display())))
}

/// Replaces the `ExecStart=` line and pins the profile in the environment.
fn render_service(template: &str, agentd: &Path, profile: &Profile) -> String {
    let mut out = String::new();
    for line in template.lines() {
        if line.starts_with("ExecStart=") {
            out.push_str(&format!(
                "Environment=AGENTX_HOME={}\n",
                systemd_escape(&profile.dir)
            ));
            out.push_str(&format!(
                "ExecStart={} --log stderr\n",
                systemd_escape(agentd)
            ));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Replaces the `ListenStream=` line with the profile's socket path.
fn render_socket(template: &str, profile: &Profile) -> String {
    let mut out = String::new();
    for line in template.lines() {
        if line.starts_with("ListenStream=") {
            out.push_str(&format!(
                "ListenStream={}\n",
                systemd_escape(&profile.socket)
            ));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Escapes a path for a unit file value: `%` is a specifier, `\` and
/// spaces need escaping.
fn systemd_escape(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => out.push_str("%%"),
            '\\' => out.push_str("\\\\"),
            ' ' => out.push_str("\\x20"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        Profile {
            dir: PathBuf::from("/home/me/.agentx"),
            socket: PathBuf::from("/home/me/.agentx/agentd.sock"),
        }
    }

    #[test]
    fn service_gets_the_real_binary_and_profile() {
        let text = render_service(
            SERVICE_TEMPLATE,
            Path::new("/opt/my bin/agentd"),
            &profile(),
        );
        assert!(
            text.contains("ExecStart=/opt/my\\x20bin/agentd --log stderr\n"),
            "{text}"
        );
        assert!(text.contains("Environment=AGENTX_HOME=/home/me/.agentx\n"));
        assert!(text.contains("Type=notify"));
        assert_eq!(text.matches("ExecStart=").count(), 1);
    }

    #[test]
    fn socket_listens_on_the_profile_socket_privately() {
        let text = render_socket(SOCKET_TEMPLATE, &profile());
        assert!(
            text.contains("ListenStream=/home/me/.agentx/agentd.sock\n"),
            "{text}"
        );
        assert!(text.contains("SocketMode=0600"));
        assert!(text.contains("DirectoryMode=0700"));
    }
}
