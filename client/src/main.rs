//! agentx: the thin terminal client of agentd. Parses the command line,
//! reaches (or starts) the daemon, and renders what it answers.

mod cli;
mod commands;
mod connect;
mod error;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser as _;

use agentx_shared::folder::check_component;
use agentx_shared::profile::Profile;
use agentx_shared::proto::Scope;

use crate::cli::{Cli, Command};
use crate::commands::pending::Call;
use crate::error::{CliError, CliResult, Exit};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() {
                Exit::Usage as u8
            } else {
                0
            };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("agentx: cannot start: {err}");
            return ExitCode::from(Exit::Failed as u8);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if !err.message.is_empty() {
                eprintln!("agentx: {}", err.message);
            }
            ExitCode::from(err.exit as u8)
        }
    }
}

async fn run(cli: Cli) -> CliResult<()> {
    let profile = Profile::resolve(cli.global.profile.as_deref())
        .map_err(|err| CliError::unreachable(err.to_string()))?;
    check_component("agent name", &cli.global.agent).map_err(|e| CliError::usage(e.to_string()))?;

    let command = match (cli.command, cli.prompt) {
        (Some(Command::Daemon { action }), _) => {
            return commands::daemon::run(&profile, action).await;
        }
        (Some(_), Some(_)) => {
            return Err(CliError::usage(
                "-p PROMPT cannot be combined with a command",
            ));
        }
        (command, _) => command,
    };

    let (call, what) = match &command {
        None | Some(Command::Exec { .. }) => (Call::OpenSession, "chat"),
        Some(Command::Resume { .. } | Command::New) => {
            (Call::OpenSession, "opening a conversation")
        }
        Some(Command::Sessions { .. }) => (Call::ListSessions, "listing conversations"),
        Some(Command::Status { .. } | Command::Clear { .. }) => {
            (Call::Status, "conversation status")
        }
        Some(Command::Checkpoints { .. } | Command::Rollback { .. }) => {
            (Call::Checkpoints, "checkpoints")
        }
        Some(
            Command::Snapshots { .. }
            | Command::Snapshot { .. }
            | Command::Undo { .. }
            | Command::Rewind { .. },
        ) => (Call::Snapshots, "snapshots"),
        Some(Command::Oneshots { .. }) => (Call::Oneshots, "one-shots"),
        Some(Command::Daemon { .. }) => return Ok(()),
    };
    let scope = scope(cli.global.dir.as_deref(), &cli.global.agent)?;
    let daemon = connect::connect_or_start(&profile).await?;
    commands::pending::run(&daemon, scope, call, what).await
}

/// The folder (canonical, must exist) and agent a command is about.
fn scope(dir: Option<&std::path::Path>, agent: &str) -> CliResult<Scope> {
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
    Ok(Scope {
        folder: folder.to_string_lossy().into_owned(),
        agent: agent.to_owned(),
    })
}
