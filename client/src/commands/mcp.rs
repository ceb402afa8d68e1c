//! `agentx mcp list | get NAME | add NAME -- COMMAND… | remove NAME`: the
//! MCP servers agentd runs, read from agentd and edited in config.toml.

use std::path::Path;

use serde_json::{Value, json};

use agentx_shared::mcp_config::{McpServer, Transport, valid_name};
use agentx_shared::proto::McpServerState;
use agentx_shared::proto::McpServersRequest;
use agentx_shared::proto::daemon_client::DaemonClient;
use agentx_shared::terminal::visible;

use crate::cli::McpAction;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};

/// `list` and `get` ask agentd; `add` and `remove` edit config.toml only.
pub async fn run(
    profile: agentx_shared::profile::Profile,
    global: crate::cli::Global,
    action: McpAction,
) -> CliResult<()> {
    let config = profile.config_file();
    match action {
        McpAction::Add {
            name,
            env,
            json: as_json,
            command,
        } => add(&config, &name, &env, &command, as_json),
        McpAction::Remove {
            name,
            json: as_json,
        } => remove(&config, &name, as_json),
        McpAction::List { json: as_json } => {
            let ctx = Ctx::connect(profile, global).await?;
            let states = states(&ctx).await?;
            if as_json {
                println!("{}", Value::Array(states.iter().map(state_json).collect()));
            } else if states.is_empty() {
                println!("no MCP servers configured (agentx mcp add NAME -- COMMAND…)");
            } else {
                for line in lines(&states) {
                    println!("{line}");
                }
            }
            Ok(())
        }
        McpAction::Get {
            name,
            json: as_json,
        } => {
            let servers = agentx_shared::mcp_config::load(&config)
                .map_err(|e| CliError::usage(e.to_string()))?;
            let Some(server) = servers.get(&name) else {
                return Err(CliError::usage(format!(
                    "no MCP server named {:?} in {}",
                    visible(&name),
                    config.display()
                )));
            };
            let ctx = Ctx::connect(profile, global).await?;
            let states: Vec<McpServerState> = states(&ctx)
                .await?
                .into_iter()
                .filter(|s| s.name == name)
                .collect();
            if as_json {
                let mut doc = config_json(server);
                doc["processes"] = Value::Array(states.iter().map(state_json).collect());
                println!("{doc}");
            } else {
                println!("{}", visible(&server.name));
                for (key, value) in config_json(server).as_object().into_iter().flatten() {
                    if key != "name" && !value.is_null() {
                        println!("  {key}: {}", visible(&value.to_string()));
                    }
                }
                for line in lines(&states) {
                    println!("  {line}");
                }
            }
            Ok(())
        }
    }
}

/// The MCP servers as agentd sees them now.
pub async fn states(ctx: &Ctx) -> CliResult<Vec<McpServerState>> {
    let reply = DaemonClient::new(ctx.channel())
        .mcp_servers(McpServersRequest {})
        .await
        .map_err(|s| CliError::from_status("listing MCP servers", &s))?
        .into_inner();
    if !reply.error.is_empty() {
        return Err(CliError::usage(reply.error));
    }
    Ok(reply.servers)
}

/// One line per server (or per process of a folder-scoped one).
pub fn lines(states: &[McpServerState]) -> Vec<String> {
    states
        .iter()
        .map(|s| {
            let mut line = format!("{}  {}", visible(&s.name), s.state);
            if s.state == "running" {
                line.push_str(&format!(
                    " (pid {}, up {}, {} in flight)",
                    s.pid,
                    uptime(s),
                    agentx_shared::plural::count(s.calls_in_flight as usize, "call")
                ));
            }
            if !s.folder.is_empty() {
                line.push_str(&format!("  for {}", visible(&s.folder)));
            }
            if s.tools >= 0 {
                line.push_str(&format!(
                    "  {}",
                    agentx_shared::plural::count(s.tools as usize, "tool")
                ));
            } else {
                line.push_str("  tools not listed yet");
            }
            line.push_str(&format!("  {}", visible(&s.command)));
            if !s.error.is_empty() {
                line.push_str(&format!("  ({})", visible(&s.error)));
            }
            line
        })
        .collect()
}

fn uptime(s: &McpServerState) -> String {
    let since = s
        .since
        .as_ref()
        .map(agentx_shared::time::from_wire)
        .and_then(|t| t.elapsed().ok())
        .unwrap_or_default();
    humantime::format_duration(std::time::Duration::from_secs(since.as_secs())).to_string()
}

/// A server's state as JSON.
pub fn state_json(s: &McpServerState) -> Value {
    let uptime_ms = s
        .since
        .as_ref()
        .map(agentx_shared::time::from_wire)
        .and_then(|t| t.elapsed().ok())
        .map(|d| d.as_millis() as u64);
    json!({
        "name": s.name,
        "folder": if s.folder.is_empty() { Value::Null } else { json!(s.folder) },
        "state": s.state,
        "pid": if s.pid == 0 { Value::Null } else { json!(s.pid) },
        "since": s.since.as_ref().map(|t| agentx_shared::time::rfc3339_wire(Some(t))),
        "uptime_ms": uptime_ms,
        "calls_in_flight": s.calls_in_flight,
        "error": if s.error.is_empty() { Value::Null } else { json!(s.error) },
        "tools": if s.tools < 0 { Value::Null } else { json!(s.tools) },
        "command": s.command,
        "scope": s.scope,
    })
}

/// A server's configuration as JSON (variable values left out: they may
/// be secrets).
fn config_json(s: &McpServer) -> Value {
    let mut doc = json!({
        "name": s.name,
        "enabled": s.enabled,
        "scope": s.scope.as_str(),
        "startup_timeout_sec": s.startup_timeout.as_secs_f64(),
        "tool_timeout_sec": s.tool_timeout.as_secs_f64(),
        "idle_timeout_sec": s.idle_timeout.as_secs_f64(),
        "enabled_tools": s.enabled_tools,
        "disabled_tools": s.disabled_tools,
    });
    match &s.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            doc["command"] = json!(command);
            doc["args"] = json!(args);
            doc["env"] = json!(env.keys().collect::<Vec<_>>());
            doc["cwd"] = json!(cwd.as_ref().map(|c| c.display().to_string()));
        }
        Transport::Http {
            url,
            bearer_token_env_var,
        } => {
            doc["url"] = json!(url);
            doc["bearer_token_env_var"] = json!(bearer_token_env_var);
        }
    }
    doc
}

/// The document of config.toml (empty when there is none).
fn read(config: &Path) -> CliResult<toml_edit::DocumentMut> {
    let text = match std::fs::read_to_string(config) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(CliError::usage(format!(
                "cannot read {}: {e}",
                config.display()
            )));
        }
    };
    text.parse::<toml_edit::DocumentMut>()
        .map_err(|e| CliError::usage(format!("{} is not valid TOML: {e}", config.display())))
}

/// Writes `doc` to config.toml through a temporary file, after checking
/// the result is a configuration agentx reads.
fn write(config: &Path, doc: &toml_edit::DocumentMut) -> CliResult<()> {
    let text = doc.to_string();
    let dir = config.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::usage(format!("cannot create {}: {e}", dir.display())))?;
    let tmp = dir.join(".config.toml.mcp-edit");
    std::fs::write(&tmp, &text)
        .and_then(|()| std::fs::rename(&tmp, config))
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", config.display())))
}

fn add(
    config: &Path,
    name: &str,
    env: &[String],
    command: &[String],
    as_json: bool,
) -> CliResult<()> {
    if !valid_name(name) {
        return Err(CliError::usage(
            "an MCP server name is 1 to 64 letters, digits, `_` or `-`",
        ));
    }
    let Some((program, args)) = command.split_first() else {
        return Err(CliError::usage(
            "give the server's command after --: agentx mcp add NAME -- COMMAND…",
        ));
    };
    let mut doc = read(config)?;
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            toml_edit::Item::Table(t)
        })
        .as_table_mut()
        .ok_or_else(|| CliError::usage("mcp_servers in config.toml is not a table"))?;
    if servers.contains_key(name) {
        return Err(CliError::usage(format!(
            "an MCP server named {name} is configured already (agentx mcp remove {name} first)"
        )));
    }
    let mut table = toml_edit::Table::new();
    table["command"] = toml_edit::value(program.as_str());
    if !args.is_empty() {
        table["args"] = toml_edit::value(
            args.iter()
                .map(String::as_str)
                .collect::<toml_edit::Array>(),
        );
    }
    if !env.is_empty() {
        let mut vars = toml_edit::InlineTable::new();
        for pair in env {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(CliError::usage(format!(
                    "--env takes KEY=VALUE, not {:?}",
                    visible(pair)
                )));
            };
            vars.insert(k, v.into());
        }
        table["env"] = toml_edit::value(vars);
    }
    servers.insert(name, toml_edit::Item::Table(table));
    // What agentx would read back must be valid before it is written.
    agentx_shared::config::mcp_servers_in(&doc.to_string(), config)
        .map_err(|e| CliError::usage(e.to_string()))?;
    write(config, &doc)?;
    if as_json {
        println!(
            "{}",
            json!({"added": name, "config": config.display().to_string()})
        );
    } else {
        println!("added MCP server {name} to {}", config.display());
    }
    Ok(())
}

fn remove(config: &Path, name: &str, as_json: bool) -> CliResult<()> {
    let mut doc = read(config)?;
    let removed = doc
        .get_mut("mcp_servers")
        .and_then(toml_edit::Item::as_table_like_mut)
        .and_then(|t| t.remove(name))
        .is_some();
    if !removed {
        return Err(CliError::usage(format!(
            "no MCP server named {:?} in {}",
            visible(name),
            config.display()
        )));
    }
    write(config, &doc)?;
    if as_json {
        println!(
            "{}",
            json!({"removed": name, "config": config.display().to_string()})
        );
    } else {
        println!("removed MCP server {name} from {}", config.display());
    }
    Ok(())
}
