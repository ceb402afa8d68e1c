//! agentx: the thin terminal client of agentd. Parses the command line,
//! reaches (or starts) the daemon, and renders what it answers.

mod choose;
mod cli;
mod commands;
mod completion;
mod connect;
mod context;
mod error;
mod first_run;
mod history;
mod live;
#[cfg(test)]
mod message_text;
mod pager;
mod picker;
mod render;
mod repl;
mod rpc;
mod show;
mod turn;
mod typeahead;
mod ui;
mod usage;
mod web;
mod when;

use std::process::ExitCode;

use clap::Parser as _;

use agentx_shared::folder::check_component;
use agentx_shared::profile::Profile;
use agentx_shared::proto::open_session_request::Target;

use crate::cli::{Cli, Command};
use crate::context::Ctx;
use crate::error::{CliError, CliResult, Exit};

/// When this process started (ms since the Unix epoch): what a command
/// typed with its argument chosen (`rollback 2`) expects to act on.
pub static STARTED_MS: std::sync::OnceLock<i64> = std::sync::OnceLock::new();

fn main() -> ExitCode {
    STARTED_MS.get_or_init(agentx_shared::time::now_ms);
    exit_quietly_on_broken_pipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            if !err.use_stderr() {
                // --help and --version.
                let _ = err.print();
                return ExitCode::SUCCESS;
            }
            eprintln!("agentx: {}", cli::usage_line(&err));
            return ExitCode::from(Exit::Usage as u8);
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
                // Errors carry text from outside (server messages, paths).
                eprintln!("agentx: {}", show::terminal_text(&err.message));
            }
            ExitCode::from(err.exit as u8)
        }
    }
}

/// A reader that went away (`agentx sessions | head -1`) ends the output:
/// exit 0 quietly, as ripgrep does, not with a panic from `println!`.
/// (SIGPIPE stays ignored: the gRPC socket must report EPIPE as an error.)
fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to std") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// Runs the parsed command line: the commands that need no agentd here,
/// the rest after connecting.
async fn run(cli: Cli) -> CliResult<()> {
    // A bad profile name is a usage error, even where AGENTX_HOME makes
    // the name unused.
    if let Some(name) = cli.global.profile.as_deref() {
        check_component("profile name", name).map_err(|e| CliError::usage(e.to_string()))?;
    }
    let profile = Profile::resolve(cli.global.profile.as_deref())
        .map_err(|err| CliError::unreachable(err.to_string()))?;
    check_component("agent name", &cli.global.agent).map_err(|e| CliError::usage(e.to_string()))?;

    if let Some(message) = cli.message {
        if cli.prompt.is_some() {
            return Err(CliError::usage(
                "-p PROMPT cannot be combined with a chat PROMPT",
            ));
        }
        if !message.trim().contains(char::is_whitespace) {
            return Err(CliError::usage(format!(
                "unknown command {:?} (agentx --help lists them); a prompt is a quoted \
                 sentence: agentx \"fix the failing test\"",
                show::visible(&message)
            )));
        }
        let ctx = Ctx::connect(profile, cli.global).await?;
        return repl::run_with(&ctx, Target::Latest(true), Some(message)).await;
    }
    let command = match (cli.command, cli.prompt) {
        (Some(Command::Daemon { action }), None) => {
            return commands::daemon::run(&profile, action).await;
        }
        (Some(Command::Mcp { action }), None) => {
            return commands::mcp::run(profile, cli.global, action).await;
        }
        (Some(Command::Completions { shell }), None) => {
            return commands::manuals::completions(shell);
        }
        (Some(Command::Man), None) => return commands::manuals::man(),
        (Some(_), Some(_)) => {
            return Err(CliError::usage(
                "-p PROMPT cannot be combined with a command",
            ));
        }
        (None, Some(prompt)) => Command::Exec {
            json: false,
            max_steps: None,
            prompt,
        },
        (Some(command), None) => command,
        (None, None) => {
            let ctx = Ctx::connect(profile, cli.global).await?;
            return repl::run(&ctx, Target::Latest(true)).await;
        }
    };
    let ctx = Ctx::connect(profile, cli.global).await?;
    dispatch(&ctx, command).await
}

/// Runs a command that talks to agentd.
async fn dispatch(ctx: &Ctx, command: Command) -> CliResult<()> {
    match command {
        Command::Sessions {
            json,
            tree,
            limit,
            page,
        } => commands::sessions::run(ctx, json, tree, (limit, page)).await,
        Command::Fork { checkpoint } => commands::fork::run(ctx, checkpoint).await,
        Command::Rename { words } => commands::rename::run(ctx, &words).await,
        Command::Search {
            text,
            all,
            json,
            limit,
        } => commands::search::run(ctx, &text, all, json, limit).await,
        Command::Export {
            target,
            format,
            output,
        } => commands::export::run(ctx, target.as_deref(), format, output.as_deref()).await,
        Command::Import { file, folder } => {
            commands::import::run(ctx, &file, folder.as_deref()).await
        }
        Command::Status { json, verbose } => commands::status::run(ctx, json, verbose).await,
        Command::Sync { json, wait_ms } => commands::sync::run(ctx, json, wait_ms).await,
        Command::Clear { yes } => commands::clear::run(ctx, yes).await,
        Command::New => repl::run(ctx, Target::New(true)).await,
        Command::Resume { target } => resume(ctx, target).await,
        Command::Exec {
            json,
            max_steps,
            prompt,
        } => commands::exec::exec(ctx, prompt, json, max_steps).await,
        Command::Checkpoints { json } => commands::checkpoints::checkpoints(ctx, json).await,
        Command::Rollback { index, undo } => {
            commands::checkpoints::rollback_command(ctx, index, undo).await
        }
        Command::Retry { new_chain } => repl::retry(ctx, new_chain).await,
        Command::Compact { focus, from } => {
            repl::compact(ctx, focus.as_deref().unwrap_or(""), from).await
        }
        Command::Snapshots { json } => commands::snapshots::list(ctx, json).await,
        Command::Snapshot { label } => commands::snapshots::take(ctx, label).await,
        Command::Diff {
            message,
            since,
            stat,
            json,
        } => {
            use crate::render::diff::Format;
            use crate::rpc::DiffOf;
            let of = match since {
                Some(s) => DiffOf::Since(s),
                None => DiffOf::Message(message.unwrap_or(1)),
            };
            let format = if json {
                Format::Json
            } else if stat {
                Format::Stat
            } else {
                Format::Patch
            };
            commands::diff::diff(ctx, of, format).await
        }
        Command::Undo { yes, force } => commands::snapshots::undo(ctx, yes, force).await,
        Command::Rewind {
            to: Some(n),
            code,
            conversation,
            json,
            yes,
            force,
            ..
        } => {
            let halves = commands::snapshots::rewind_to::Halves {
                code: code || !conversation,
                conversation: conversation || !code,
            };
            commands::snapshots::rewind_to::run(ctx, n, halves, (yes, force, json)).await
        }
        Command::Rewind {
            index, yes, force, ..
        } => commands::snapshots::rewind(ctx, index, yes, force).await,
        Command::Oneshots { json, action } => commands::oneshots::run(ctx, json, action).await,
        Command::Web { no_open, port } => web::run(ctx, no_open, port).await,
        Command::Daemon { .. }
        | Command::Mcp { .. }
        | Command::Completions { .. }
        | Command::Man => Ok(()),
    }
}

/// `agentx resume [N|ID]`: the latest conversation, the Nth newest or the
/// one with this id.
/// `agentx resume [N|ID]`: without one, at a terminal, the picker `/resume`
/// shows; without a terminal, the latest.
async fn resume(ctx: &Ctx, target: Option<String>) -> CliResult<()> {
    use std::io::IsTerminal as _;
    let target = match target {
        None if std::io::stdin().is_terminal() => match choose::pick(ctx, "").await? {
            Some(target) => target,
            None => return Ok(()),
        },
        None => Target::Latest(true),
        Some(t) => choose::named(ctx, &t).await?,
    };
    repl::run(ctx, target).await
}
