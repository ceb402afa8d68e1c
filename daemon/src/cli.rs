//! Command-line arguments of `agentd`. Normally started by `agentx` or by
//! systemd; running it by hand in a terminal logs to stderr.

use clap::{Parser, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "agentd",
    version,
    about = "The agentx daemon: owns conversations, checkpoints and snapshots"
)]
pub struct Args {
    /// Use the profile ~/.agentx-NAME instead of ~/.agentx (AGENTX_HOME overrides both).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,

    /// Where logs go: `auto` is stderr under systemd or in a terminal, else `<profile>/log/agentd.log`.
    #[arg(long, value_enum, default_value_t = LogTarget::Auto)]
    pub log: LogTarget,

    /// Report this version in the handshake instead of the real one (used to
    /// test how clients replace a daemon of another version). A test hook:
    /// only debug builds have it.
    #[cfg(debug_assertions)]
    #[arg(long, hide = true, value_name = "VERSION")]
    pub report_version: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogTarget {
    Auto,
    Stderr,
    File,
}
