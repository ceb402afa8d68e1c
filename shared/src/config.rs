//! User configuration: `<profile>/config.toml` overlaid by the environment
//! (`AGENTX_PROVIDER`, `AGENTX_BASE_URL`, `AGENTX_MODEL`, `OPENAI_API_KEY`/`AGENTX_API_KEY`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use thiserror::Error;

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
pub const DEFAULT_MODEL: &str = "gpt-5.1";

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not valid: {message}")]
    Parse { path: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    Responses,
    Chat,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Responses => "responses",
            Self::Chat => "chat",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "responses" => Some(Self::Responses),
            "chat" => Some(Self::Chat),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    Ask,
    Auto,
    Never,
}

/// Lines of a command's output the chat shows by default.
pub const DEFAULT_TOOL_OUTPUT_LINES: usize = 8;

/// The file's shape; every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    provider: Option<ProviderKind>,
    base_url: Option<String>,
    model: Option<String>,
    approval: Option<ApprovalMode>,
    instructions: Option<String>,
    shell_timeout_secs: Option<u64>,
    max_tool_calls_per_reply: Option<u32>,
    max_tool_steps: Option<u32>,
    /// What tool commands inherit (Codex's `shell_environment_policy` keys).
    shell_environment: Option<crate::shell_env::ShellEnvironment>,
    tool_output_lines: Option<usize>,
    snapshot_exclude: Option<Vec<String>>,
    /// The remote store (PostgreSQL URL); read by agentd, see [`remote_url`].
    remote_url: Option<String>,
    /// Per-model settings: `[models.NAME] context_window = N`.
    models: Option<BTreeMap<String, ModelFile>>,
    auto_compact: Option<bool>,
    /// Percent of the window (50–95) past which compaction is automatic.
    auto_compact_at: Option<f64>,
    /// Project-instruction file names (default `["AGENTS.md"]`).
    instruction_files: Option<Vec<String>>,
    /// The command sandbox's mode (Codex names it `sandbox_mode`).
    #[serde(alias = "sandbox_mode")]
    sandbox: Option<crate::sandbox::SandboxMode>,
    /// TCP for sandboxed commands.
    sandbox_network: Option<bool>,
    /// Codex's `[sandbox_workspace_write]` table.
    sandbox_workspace_write: Option<WorkspaceWriteFile>,
    /// `[mcp_servers.NAME]`: the MCP servers agentd runs.
    mcp_servers: Option<BTreeMap<String, crate::mcp_config::McpServerFile>>,
}

/// `[sandbox_workspace_write]`, with Codex's keys.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkspaceWriteFile {
    network_access: Option<bool>,
    writable_roots: Option<Vec<std::path::PathBuf>>,
}

/// One `[models.NAME]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    context_window: Option<u64>,
}

/// Percent of the window past which compaction is automatic by default.
pub const DEFAULT_AUTO_COMPACT_AT: f64 = 85.0;

/// The remote store's URL: `AGENTX_REMOTE_URL` as `env` gives it (agentd's
/// environment), else `remote_url` in `path` (a missing file is fine).
/// `None`: remote keeping is off.
pub fn remote_url(
    path: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, ConfigError> {
    if let Some(url) = env("AGENTX_REMOTE_URL").filter(|v| !v.trim().is_empty()) {
        return Ok(Some(url.trim().to_owned()));
    }
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.display().to_string(),
                source,
            });
        }
    };
    let file = toml::from_str::<File>(&text).map_err(|e| ConfigError::Parse {
        path: path.display().to_string(),
        message: e.message().to_owned(),
    })?;
    Ok(file
        .remote_url
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty()))
}

/// The MCP servers configured in `path` (a missing file has none); a bad
/// entry is an error naming it.
pub fn mcp_servers(
    path: &Path,
) -> Result<BTreeMap<String, crate::mcp_config::McpServer>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => mcp_servers_in(&text, path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(source) => Err(ConfigError::Read {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// The MCP servers configured in `text`, the contents of `path`.
pub fn mcp_servers_in(
    text: &str,
    path: &Path,
) -> Result<BTreeMap<String, crate::mcp_config::McpServer>, ConfigError> {
    let file = toml::from_str::<File>(text).map_err(|e| ConfigError::Parse {
        path: path.display().to_string(),
        message: e.message().to_owned(),
    })?;
    crate::mcp_config::servers(file.mcp_servers.unwrap_or_default()).map_err(|message| {
        ConfigError::Parse {
            path: path.display().to_string(),
            message,
        }
    })
}

/// The effective configuration of one `agentx` invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub provider: ProviderKind,
    pub base_url: String,
    pub model: String,
    /// From the environment only: keys are never read from or written to files.
    pub api_key: Option<String>,
    pub approval: Option<ApprovalMode>,
    pub instructions: Option<String>,
    pub shell_timeout_secs: Option<u64>,
    /// Tool calls run from one model reply (`None`: agentd's default).
    pub max_tool_calls_per_reply: Option<u32>,
    /// Tool steps (replies with calls) in one turn (`None`: agentd's default).
    pub max_tool_steps: Option<u32>,
    /// Which variables tool commands see (`[shell_environment]`).
    pub shell_environment: crate::shell_env::ShellEnvironment,
    /// How many lines of a command's output the chat shows (its head and
    /// tail); `AGENTX_TOOL_OUTPUT_LINES`, else the file, else 8; 0 shows none.
    pub tool_output_lines: usize,
    /// Extra directory names left out of folder snapshots.
    pub snapshot_exclude: Vec<String>,
    /// `AGENTX_CONTEXT_WINDOW`: the window of any model, in tokens.
    pub context_window: Option<u64>,
    /// `[models.NAME] context_window`.
    pub model_windows: BTreeMap<String, u64>,
    /// `auto_compact` / `AGENTX_AUTO_COMPACT` (default on).
    pub auto_compact: bool,
    /// Percent of the window past which compaction is automatic.
    pub auto_compact_at: f64,
    pub instruction_files: Vec<String>,
    /// The command sandbox (`--sandbox` overrides its mode).
    pub sandbox: crate::sandbox::SandboxPolicy,
    /// `[mcp_servers.NAME]`, checked.
    pub mcp_servers: BTreeMap<String, crate::mcp_config::McpServer>,
}

impl Config {
    /// Reads `path` (a missing file is fine) and applies the environment.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with(path, |k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// [`Config::load`] with the environment given: `env` answers a
    /// variable's value, `None` when it is unset or empty.
    pub fn load_with(
        path: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let file = match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str::<File>(&text).map_err(|e| ConfigError::Parse {
                path: path.display().to_string(),
                message: e.message().to_owned(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => File::default(),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        Self::from_parts(file, env)
    }

    fn from_parts(file: File, env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let provider = match env("AGENTX_PROVIDER") {
            Some(p) => ProviderKind::parse(&p).ok_or_else(|| {
                ConfigError::Invalid(format!("AGENTX_PROVIDER={p} is not `responses` or `chat`"))
            })?,
            None => file.provider.unwrap_or(ProviderKind::Responses),
        };
        let base_url = env("AGENTX_BASE_URL")
            .or(file.base_url)
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let base_url = base_url.trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(ConfigError::Invalid(format!(
                "base URL {base_url:?} must start with http:// or https:// (AGENTX_BASE_URL or base_url in config.toml)"
            )));
        }
        Ok(Self {
            provider,
            base_url,
            model: env("AGENTX_MODEL")
                .or(file.model)
                .unwrap_or_else(|| DEFAULT_MODEL.to_owned()),
            api_key: env("AGENTX_API_KEY").or_else(|| env("OPENAI_API_KEY")),
            approval: file.approval,
            instructions: file.instructions,
            shell_timeout_secs: file.shell_timeout_secs,
            max_tool_calls_per_reply: file.max_tool_calls_per_reply,
            max_tool_steps: file.max_tool_steps,
            shell_environment: file.shell_environment.unwrap_or_default(),
            tool_output_lines: match env("AGENTX_TOOL_OUTPUT_LINES") {
                Some(n) => n.trim().parse().map_err(|_| {
                    ConfigError::Invalid(format!(
                        "AGENTX_TOOL_OUTPUT_LINES={n} is not a number of lines"
                    ))
                })?,
                None => file.tool_output_lines.unwrap_or(DEFAULT_TOOL_OUTPUT_LINES),
            },
            snapshot_exclude: file.snapshot_exclude.unwrap_or_default(),
            context_window: match env("AGENTX_CONTEXT_WINDOW") {
                Some(n) => Some(n.trim().parse().ok().filter(|n| *n >= 256).ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "AGENTX_CONTEXT_WINDOW={n} is not a number of tokens (256 or more)"
                    ))
                })?),
                None => None,
            },
            model_windows: file
                .models
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(name, m)| Some((name, m.context_window?)))
                .collect(),
            auto_compact: match env("AGENTX_AUTO_COMPACT") {
                Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                    "off" | "false" | "0" | "no" => false,
                    "on" | "true" | "1" | "yes" => true,
                    _ => {
                        return Err(ConfigError::Invalid(format!(
                            "AGENTX_AUTO_COMPACT={v} is not on or off"
                        )));
                    }
                },
                None => file.auto_compact.unwrap_or(true),
            },
            auto_compact_at: match file.auto_compact_at {
                Some(p) if (10.0..=99.0).contains(&p) => p,
                Some(p) => {
                    return Err(ConfigError::Invalid(format!(
                        "auto_compact_at = {p} in config.toml is not a percent of the window                          between 10 and 99"
                    )));
                }
                None => DEFAULT_AUTO_COMPACT_AT,
            },
            instruction_files: file.instruction_files.unwrap_or_default(),
            sandbox: sandbox_policy(
                file.sandbox,
                file.sandbox_network,
                file.sandbox_workspace_write,
            )?,
            mcp_servers: crate::mcp_config::servers(file.mcp_servers.unwrap_or_default())
                .map_err(ConfigError::Invalid)?,
        })
    }
}

/// The sandbox the file sets: `sandbox_network` or Codex's
/// `network_access`, and absolute writable roots.
fn sandbox_policy(
    mode: Option<crate::sandbox::SandboxMode>,
    network: Option<bool>,
    workspace: Option<WorkspaceWriteFile>,
) -> Result<crate::sandbox::SandboxPolicy, ConfigError> {
    let workspace = workspace.unwrap_or_default();
    let writable_roots = workspace.writable_roots.unwrap_or_default();
    if let Some(bad) = writable_roots.iter().find(|r| !r.is_absolute()) {
        return Err(ConfigError::Invalid(format!(
            "writable_roots in config.toml: {} is not an absolute path",
            bad.display()
        )));
    }
    Ok(crate::sandbox::SandboxPolicy {
        mode: mode.unwrap_or_default(),
        network: network.or(workspace.network_access).unwrap_or(false),
        writable_roots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(toml_text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let file: File = toml::from_str(toml_text).unwrap();
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_parts(file, |k| env.get(k).cloned())
    }

    #[test]
    fn environment_overrides_the_file() {
        let c = load(
            "model = \"file-model\"\nbase_url = \"http://file/v1/\"\napproval = \"never\"",
            &[("AGENTX_MODEL", "env-model"), ("OPENAI_API_KEY", "sk-1")],
        )
        .unwrap();
        assert_eq!(c.model, "env-model");
        assert_eq!(c.base_url, "http://file/v1");
        assert_eq!(c.api_key.as_deref(), Some("sk-1"));
        assert_eq!(c.approval, Some(ApprovalMode::Never));
        assert_eq!(c.provider, ProviderKind::Responses);
    }

    #[test]
    fn agentx_api_key_wins_and_bad_values_are_named() {
        let c = load("", &[("OPENAI_API_KEY", "a"), ("AGENTX_API_KEY", "b")]).unwrap();
        assert_eq!(c.api_key.as_deref(), Some("b"));
        let err = load("", &[("AGENTX_PROVIDER", "soap")]).unwrap_err();
        assert!(err.to_string().contains("AGENTX_PROVIDER"));
        let err = load("", &[("AGENTX_BASE_URL", "ftp://x")]).unwrap_err();
        assert!(err.to_string().contains("AGENTX_BASE_URL"));
    }

    #[test]
    fn context_window_settings_from_the_file_and_the_environment() {
        let text = "auto_compact_at = 70\ninstruction_files = [\"AGENTS.md\", \"CLAUDE.md\"]\n\
                    [models.\"qwen2.5-coder\"]\ncontext_window = 32768\n";
        let c = load(text, &[]).unwrap();
        assert_eq!(c.model_windows.get("qwen2.5-coder"), Some(&32768));
        assert_eq!(c.auto_compact_at, 70.0);
        assert!(c.auto_compact);
        assert_eq!(c.instruction_files, ["AGENTS.md", "CLAUDE.md"]);
        assert_eq!(c.context_window, None);
        let c = load(
            "auto_compact = true",
            &[
                ("AGENTX_AUTO_COMPACT", "off"),
                ("AGENTX_CONTEXT_WINDOW", "4096"),
            ],
        )
        .unwrap();
        assert!(!c.auto_compact);
        assert_eq!(c.context_window, Some(4096));
        assert!(load("auto_compact_at = 120", &[]).is_err());
        assert!(load("", &[("AGENTX_CONTEXT_WINDOW", "lots")]).is_err());
        assert!(load("", &[("AGENTX_AUTO_COMPACT", "maybe")]).is_err());
    }

    #[test]
    fn the_sandbox_takes_its_keys_and_codexs() {
        use crate::sandbox::SandboxMode;
        let c = load("", &[]).unwrap();
        assert_eq!(c.sandbox, crate::sandbox::SandboxPolicy::default());
        let c = load("sandbox = \"read-only\"\nsandbox_network = true", &[]).unwrap();
        assert_eq!(c.sandbox.mode, SandboxMode::ReadOnly);
        assert!(c.sandbox.network);
        let c = load(
            "sandbox_mode = \"danger-full-access\"\n[sandbox_workspace_write]\n\
             network_access = true\nwritable_roots = [\"/data\"]",
            &[],
        )
        .unwrap();
        assert_eq!(c.sandbox.mode, SandboxMode::DangerFullAccess);
        assert!(c.sandbox.network);
        assert_eq!(
            c.sandbox.writable_roots,
            [std::path::PathBuf::from("/data")]
        );
        assert!(
            load(
                "[sandbox_workspace_write]\nwritable_roots = [\"data\"]",
                &[]
            )
            .is_err()
        );
        assert!(toml::from_str::<File>("sandbox = \"open\"").is_err());
    }

    #[test]
    fn unknown_keys_in_the_file_are_refused() {
        assert!(toml::from_str::<File>("api_key = \"sk\"").is_err());
    }
}
