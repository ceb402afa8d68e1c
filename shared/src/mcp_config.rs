//! `[mcp_servers.NAME]` in config.toml: the MCP servers agentd owns, with
//! Codex's keys plus `idle_timeout_sec` and `scope`, checked into one type.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Seconds a server may take to start and answer `initialize` by default.
pub const DEFAULT_STARTUP_TIMEOUT_SEC: f64 = 10.0;
/// Seconds one tool call may take by default.
pub const DEFAULT_TOOL_TIMEOUT_SEC: f64 = 60.0;
/// Seconds without calls after which a server is stopped by default.
pub const DEFAULT_IDLE_TIMEOUT_SEC: f64 = 600.0;

/// One `[mcp_servers.NAME]` table as written; checked by [`McpServer::from_file`].
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpServerFile {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    bearer_token_env_var: Option<String>,
    enabled: Option<bool>,
    enabled_tools: Option<Vec<String>>,
    #[serde(default)]
    disabled_tools: Vec<String>,
    startup_timeout_sec: Option<f64>,
    /// Codex's older spelling of `startup_timeout_sec`, in milliseconds.
    startup_timeout_ms: Option<u64>,
    tool_timeout_sec: Option<f64>,
    idle_timeout_sec: Option<f64>,
    scope: Option<Scope>,
    /// Overrides the turn's approval policy for this server's calls.
    approval: Option<crate::config::ApprovalMode>,
    /// Overrides `approval` for single tools.
    #[serde(default)]
    tool_approval: BTreeMap<String, crate::config::ApprovalMode>,
}

/// Whether one process serves every folder or each folder gets its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    #[default]
    Profile,
    Folder,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Profile => "profile",
            Self::Folder => "folder",
        }
    }
}

/// How agentd reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC on its stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP at `url`, with a bearer token read from a variable.
    Http {
        url: String,
        bearer_token_env_var: Option<String>,
    },
}

/// One configured MCP server, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    pub name: String,
    pub transport: Transport,
    pub enabled: bool,
    /// Only these tools reach the model (`None`: all of them).
    pub enabled_tools: Option<Vec<String>>,
    /// These tools never reach the model.
    pub disabled_tools: Vec<String>,
    pub startup_timeout: Duration,
    pub tool_timeout: Duration,
    pub idle_timeout: Duration,
    pub scope: Scope,
    /// The server's approval setting, over the turn's policy.
    pub approval: Option<crate::config::ApprovalMode>,
    /// Per-tool approval settings, over the server's.
    pub tool_approval: BTreeMap<String, crate::config::ApprovalMode>,
}

impl McpServer {
    /// Checks one table: a name of letters, digits, `_` and `-`; exactly one
    /// of `command` and `url`; positive timeouts.
    pub(crate) fn from_file(name: &str, file: McpServerFile) -> Result<Self, String> {
        let at = format!("[mcp_servers.{name}]");
        if !valid_name(name) {
            return Err(format!(
                "{at}: a server name is 1 to 64 letters, digits, `_` or `-`"
            ));
        }
        let transport = match (file.command, file.url) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{at}: give `command` (a process) or `url` (streamable HTTP), not both"
                ));
            }
            (None, None) => {
                return Err(format!(
                    "{at}: needs `command` (a process) or `url` (streamable HTTP)"
                ));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(format!("{at}: `command` is empty"));
                }
                if file.bearer_token_env_var.is_some() {
                    return Err(format!(
                        "{at}: `bearer_token_env_var` goes with `url`, not `command`"
                    ));
                }
                Transport::Stdio {
                    command,
                    args: file.args,
                    env: file.env,
                    cwd: file.cwd,
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "{at}: `url` {url:?} must start with http:// or https://"
                    ));
                }
                if !file.args.is_empty() || !file.env.is_empty() || file.cwd.is_some() {
                    return Err(format!(
                        "{at}: `args`, `env` and `cwd` go with `command`, not `url`"
                    ));
                }
                Transport::Http {
                    url,
                    bearer_token_env_var: file.bearer_token_env_var,
                }
            }
        };
        let seconds = |key: &str, value: Option<f64>, default: f64| match value {
            None => Ok(Duration::from_secs_f64(default)),
            Some(s) if s.is_finite() && s > 0.0 && s <= 1e7 => Ok(Duration::from_secs_f64(s)),
            Some(s) => Err(format!(
                "{at}: `{key}` = {s} is not a number of seconds above 0"
            )),
        };
        let startup_timeout = match (file.startup_timeout_sec, file.startup_timeout_ms) {
            (None, Some(ms)) if ms > 0 => Duration::from_millis(ms),
            (sec, _) => seconds("startup_timeout_sec", sec, DEFAULT_STARTUP_TIMEOUT_SEC)?,
        };
        Ok(Self {
            name: name.to_owned(),
            transport,
            enabled: file.enabled.unwrap_or(true),
            enabled_tools: file.enabled_tools,
            disabled_tools: file.disabled_tools,
            startup_timeout,
            tool_timeout: seconds(
                "tool_timeout_sec",
                file.tool_timeout_sec,
                DEFAULT_TOOL_TIMEOUT_SEC,
            )?,
            idle_timeout: seconds(
                "idle_timeout_sec",
                file.idle_timeout_sec,
                DEFAULT_IDLE_TIMEOUT_SEC,
            )?,
            scope: file.scope.unwrap_or_default(),
            approval: file.approval,
            tool_approval: file.tool_approval,
        })
    }

    /// Whether tool `tool` of this server reaches the model.
    pub fn allows(&self, tool: &str) -> bool {
        self.enabled_tools
            .as_ref()
            .is_none_or(|only| only.iter().any(|t| t == tool))
            && !self.disabled_tools.iter().any(|t| t == tool)
    }

    /// The approval setting for `tool`: its own, else the server's
    /// (`None`: the turn's policy decides).
    pub fn approval_for(&self, tool: &str) -> Option<crate::config::ApprovalMode> {
        self.tool_approval.get(tool).copied().or(self.approval)
    }

    /// A fingerprint of what starts the server and what it offers: a tool
    /// list cached under another fingerprint is not this server's.
    pub fn fingerprint(&self) -> String {
        format!("{:?}", self.transport)
    }
}

/// Whether `name` may name a server (and so a tool prefix).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The servers of `tables`, checked, by name.
pub(crate) fn servers(
    tables: BTreeMap<String, McpServerFile>,
) -> Result<BTreeMap<String, McpServer>, String> {
    tables
        .into_iter()
        .map(|(name, file)| McpServer::from_file(&name, file).map(|s| (name, s)))
        .collect()
}

/// The MCP servers configured in `path` (a missing file has none).
pub fn load(path: &Path) -> Result<BTreeMap<String, McpServer>, crate::config::ConfigError> {
    crate::config::mcp_servers(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<BTreeMap<String, McpServer>, String> {
        #[derive(Deserialize)]
        struct F {
            mcp_servers: BTreeMap<String, McpServerFile>,
        }
        let f: F = toml::from_str(text).map_err(|e| e.to_string())?;
        servers(f.mcp_servers)
    }

    #[test]
    fn codex_keys_and_our_own_are_read() {
        let s = parse(
            "[mcp_servers.docs]\ncommand = \"npx\"\nargs = [\"-y\", \"x\"]\nenv = { A = \"1\" }\n\
             enabled_tools = [\"a\", \"b\"]\ndisabled_tools = [\"b\"]\ntool_timeout_sec = 2.5\n\
             idle_timeout_sec = 30\nscope = \"folder\"\napproval = \"never\"\n\
             tool_approval = { a = \"auto\" }\n\
             [mcp_servers.web]\nurl = \"https://mcp.example/mcp\"\nbearer_token_env_var = \"T\"\n",
        )
        .unwrap();
        let docs = &s["docs"];
        assert_eq!(docs.scope, Scope::Folder);
        assert_eq!(docs.tool_timeout, Duration::from_millis(2500));
        assert_eq!(docs.idle_timeout, Duration::from_secs(30));
        assert_eq!(docs.startup_timeout, Duration::from_secs(10));
        assert!(docs.allows("a") && !docs.allows("b") && !docs.allows("c"));
        use crate::config::ApprovalMode;
        assert_eq!(docs.approval_for("a"), Some(ApprovalMode::Auto));
        assert_eq!(docs.approval_for("b"), Some(ApprovalMode::Never));
        assert!(matches!(&docs.transport, Transport::Stdio { args, .. } if args.len() == 2));
        let web = &s["web"];
        assert_eq!(web.scope, Scope::Profile);
        assert_eq!(web.idle_timeout, Duration::from_secs(600));
        assert!(matches!(&web.transport, Transport::Http { url, .. } if url.ends_with("/mcp")));
    }

    #[test]
    fn bad_entries_are_named_with_what_is_wrong() {
        let cases = [
            ("[mcp_servers.x]\n", "needs `command`"),
            (
                "[mcp_servers.x]\ncommand = \"a\"\nurl = \"http://h\"\n",
                "not both",
            ),
            ("[mcp_servers.x]\nurl = \"ftp://h\"\n", "http://"),
            (
                "[mcp_servers.x]\ncommand = \"a\"\ntool_timeout_sec = 0\n",
                "tool_timeout_sec",
            ),
            ("[mcp_servers.\"a b\"]\ncommand = \"a\"\n", "server name"),
            (
                "[mcp_servers.x]\ncommand = \"a\"\nscope = \"world\"\n",
                "scope",
            ),
            (
                "[mcp_servers.x]\ncommand = \"a\"\ncomand = \"b\"\n",
                "comand",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
