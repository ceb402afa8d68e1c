//! What most commands need: the profile, the folder+agent scope, the
//! configuration and a live connection to agentd.

use std::path::{Path, PathBuf};

use tonic::transport::Channel;

use agentx_shared::config::{ApprovalMode, Config, DEFAULT_BASE_URL, ProviderKind};
use agentx_shared::profile::Profile;
use agentx_shared::proto::sessions_client::SessionsClient;
use agentx_shared::proto::{ApprovalPolicy, ProviderSettings, Scope, SessionStatus};
use agentx_shared::sandbox::{SandboxMode, SandboxPolicy};

use crate::cli::{Approval, Global};
use crate::connect::{self, Daemon};
use crate::error::{CliError, CliResult};
use crate::render::Local;
use crate::rpc::Rpc;

pub struct Ctx {
    pub profile: Profile,
    pub global: Global,
    pub scope: Scope,
    pub folder: PathBuf,
    /// Replaced when the REPL reconnects to a restarted agentd.
    daemon: std::cell::RefCell<Daemon>,
    /// The sandbox mode `/sandbox` chose (wins over --sandbox and the file).
    sandbox_chosen: std::cell::Cell<Option<SandboxMode>>,
}

/// The model, provider and approval mode the chat uses here.
pub struct Setup {
    pub model: String,
    pub provider: String,
    pub base_url: String,
    pub approval: &'static str,
    /// Which variables tool commands see (`[shell_environment]`).
    pub shell_environment: agentx_shared::shell_env::ShellEnvironment,
    /// The sandbox commands run in.
    pub sandbox: SandboxPolicy,
    /// The Landlock ABI agentd's kernel offers (0: none).
    pub landlock_abi: u32,
}

impl Setup {
    /// One line: `gpt-5 (responses), approval ask, sandbox workspace-write (enforced)`.
    pub fn line(&self) -> String {
        format!(
            "{} ({}), approval {}, sandbox {}",
            self.model,
            self.provider,
            self.approval,
            self.sandbox.line(self.landlock_abi)
        )
    }
}

impl Ctx {
    /// Resolves the folder, then reaches (or starts) agentd.
    pub async fn connect(profile: Profile, global: Global) -> CliResult<Self> {
        let folder = resolve_folder(global.dir.as_deref())?;
        // Linux paths are bytes, but a conversation's folder is text: it is
        // shown to the model, kept in JSON documents and exported. A lossy
        // conversion would name another folder, so refuse with the reason.
        let Some(text) = folder.to_str() else {
            return Err(CliError::failed(format!(
                "this folder's path is not valid UTF-8: {} (a conversation's folder is shown to \
                 the model and kept in JSON); rename it, or run agentx in a folder with a UTF-8 \
                 path",
                folder.display()
            )));
        };
        let scope = Scope {
            folder: text.to_owned(),
            agent: global.agent.clone(),
        };
        let daemon = connect::connect_or_start(&profile).await?;
        Ok(Self {
            profile,
            global,
            scope,
            folder,
            daemon: std::cell::RefCell::new(daemon),
            sandbox_chosen: std::cell::Cell::new(None),
        })
    }

    pub fn channel(&self) -> Channel {
        self.daemon.borrow().channel.clone()
    }

    /// The handshake of the daemon this context talks to.
    pub fn hello(&self) -> agentx_shared::proto::HelloReply {
        self.daemon.borrow().hello.clone()
    }

    /// Reaches agentd again (starting it when none runs): after a `daemon
    /// stop`, `restart` or a version swap the REPL carries on.
    pub async fn reconnect(&self) -> CliResult<()> {
        let daemon = connect::connect_or_start(&self.profile).await?;
        *self.daemon.borrow_mut() = daemon;
        Ok(())
    }

    /// The calls to agentd, for this folder and agent.
    pub fn rpc(&self) -> Rpc {
        Rpc::new(self.channel(), self.scope.clone())
    }

    /// Conversation `session_id`'s state ("" = the current one), with this
    /// run's provider settings.
    pub async fn status(&self, session_id: &str) -> CliResult<SessionStatus> {
        Ok(self
            .rpc()
            .status(session_id, self.status_provider())
            .await?)
    }

    /// This side of a status: folder, agent, setup and the daemon.
    pub fn local(&self) -> Local {
        let hello = self.hello();
        Local {
            folder: self.scope.folder.clone(),
            agent: self.scope.agent.clone(),
            setup: self.setup().ok(),
            daemon_pid: hello.pid,
            daemon_version: hello.daemon_version,
        }
    }

    pub fn sessions(&self) -> SessionsClient<Channel> {
        SessionsClient::new(self.channel())
    }

    pub fn scope(&self) -> Option<Scope> {
        Some(self.scope.clone())
    }

    /// Configuration for a turn; a missing key for OpenAI is a clear error.
    pub fn config(&self) -> CliResult<Config> {
        let config = Config::load(&self.profile.config_file())
            .map_err(|e| CliError::failed(e.to_string()))?;
        if config.provider == ProviderKind::Responses
            && config.api_key.is_none()
            && config.base_url == DEFAULT_BASE_URL
        {
            crate::first_run::offer(&self.profile.config_file())?;
            return Config::load(&self.profile.config_file())
                .map_err(|e| CliError::failed(e.to_string()));
        }
        Ok(config)
    }

    /// The settings a turn forwards: the configuration's, with this run's `-m`.
    pub fn provider(&self, config: &Config) -> ProviderSettings {
        let mut settings = provider_settings(config);
        settings.run_model = self.global.model.clone().unwrap_or_default();
        settings
    }

    /// The settings a status forwards, when the configuration reads.
    pub fn status_provider(&self) -> Option<ProviderSettings> {
        let config = Config::load(&self.profile.config_file()).ok()?;
        let mut settings = self.provider(&config);
        settings.api_key.clear();
        Some(settings)
    }

    /// What the chat talks to and how it runs tools, as the banner,
    /// `status` and `status --json` show it.
    pub fn setup(&self) -> CliResult<Setup> {
        // Shown whether or not a key is set (a turn says when one is missing).
        let config = Config::load(&self.profile.config_file())
            .map_err(|e| CliError::failed(e.to_string()))?;
        let approval = match self.approval(&config, ApprovalPolicy::Ask) {
            ApprovalPolicy::Auto => "auto",
            ApprovalPolicy::Never => "never",
            _ => "ask",
        };
        Ok(Setup {
            model: self
                .global
                .model
                .clone()
                .unwrap_or_else(|| config.model.clone()),
            provider: config.provider.as_str().to_owned(),
            base_url: config.base_url.clone(),
            approval,
            shell_environment: config.shell_environment.clone(),
            sandbox: self.sandbox(&config),
            landlock_abi: self.hello().landlock_abi,
        })
    }

    /// The sandbox of this run: `/sandbox`, then --sandbox, then config.toml.
    pub fn sandbox(&self, config: &Config) -> SandboxPolicy {
        let mut policy = config.sandbox.clone();
        if let Some(mode) = self.global.sandbox {
            policy.mode = mode.into();
        }
        if let Some(mode) = self.sandbox_chosen.get() {
            policy.mode = mode;
        }
        policy
    }

    /// `/sandbox MODE`: the mode for the rest of this chat.
    pub fn choose_sandbox(&self, mode: SandboxMode) {
        self.sandbox_chosen.set(Some(mode));
    }

    /// The tool policy: --approval/--auto, then config.toml, then `fallback`.
    pub fn approval(&self, config: &Config, fallback: ApprovalPolicy) -> ApprovalPolicy {
        let from_flag = if self.global.auto {
            Some(Approval::Auto)
        } else {
            self.global.approval
        };
        match (from_flag, config.approval) {
            (Some(Approval::Ask), _) | (None, Some(ApprovalMode::Ask)) => ApprovalPolicy::Ask,
            (Some(Approval::Auto), _) | (None, Some(ApprovalMode::Auto)) => ApprovalPolicy::Auto,
            (Some(Approval::Never), _) | (None, Some(ApprovalMode::Never)) => ApprovalPolicy::Never,
            (None, None) => fallback,
        }
    }
}

pub fn provider_settings(config: &Config) -> ProviderSettings {
    ProviderSettings {
        provider: config.provider.as_str().to_owned(),
        base_url: config.base_url.clone(),
        model: config.model.clone(),
        api_key: config.api_key.clone().unwrap_or_default(),
        context_window: config.context_window.unwrap_or(0),
        model_windows: config
            .model_windows
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        auto_compact_off: !config.auto_compact,
        auto_compact_at: config.auto_compact_at / 100.0,
        run_model: String::new(),
        instruction_files: config.instruction_files.clone(),
    }
}

/// The folder a command is about: `-C DIR` or the current one, canonical.
pub fn resolve_folder(dir: Option<&Path>) -> CliResult<PathBuf> {
    let dir: PathBuf = match dir {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir()
            .map_err(|err| CliError::failed(format!("cannot read the current folder: {err}")))?,
    };
    let folder = std::fs::canonicalize(&dir)
        .map_err(|err| CliError::usage(format!("folder {}: {err}", dir.display())))?;
    if !folder.is_dir() {
        return Err(CliError::usage(format!(
            "{} is not a folder",
            folder.display()
        )));
    }
    Ok(folder)
}
