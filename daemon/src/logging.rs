//! Log setup: stderr (the journal under systemd, or a terminal) or
//! `<profile>/log/agentd.log` when auto-started; filtered by AGENTX_LOG/RUST_LOG.

use std::fs::OpenOptions;
use std::io::IsTerminal as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::Context as _;
use tracing_subscriber::EnvFilter;

use agentx_shared::profile::{Profile, create_private_dir};

use crate::cli::LogTarget;
use crate::environment::Environment;

/// A log file larger than this is moved to `agentd.log.1` at start.
const ROTATE_BYTES: u64 = 10 * 1024 * 1024;

/// Installs the global subscriber; returns the log file path when logging to a file.
pub fn init(
    target: LogTarget,
    profile: &Profile,
    env: &Environment,
) -> anyhow::Result<Option<PathBuf>> {
    let filter = env
        .var("AGENTX_LOG")
        .or_else(|| env.var("RUST_LOG"))
        .unwrap_or("info");
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let to_stderr = match target {
        LogTarget::Stderr => true,
        LogTarget::File => false,
        LogTarget::Auto => {
            env.var_os("JOURNAL_STREAM").is_some()
                || env.var_os("LISTEN_FDS").is_some()
                || std::io::stderr().is_terminal()
        }
    };
    if to_stderr {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
        return Ok(None);
    }
    let dir = profile.log_dir();
    create_private_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("agentd.log");
    if std::fs::metadata(&path).is_ok_and(|m| m.len() > ROTATE_BYTES) {
        let _ = std::fs::rename(&path, dir.join("agentd.log.1"));
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open log file {}", path.display()))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Mutex::new(file))
        .with_ansi(false)
        .init();
    Ok(Some(path))
}
