//! The chat loop: opens (or resumes) a conversation, then reads messages,
//! slash commands and `!commands` until /exit or end of input.

use std::io::{Read as _, Write as _};
use std::process::Stdio;

use agentx_shared::proto::{
    AppendShellTranscriptRequest, ApprovalPolicy, OpenSessionRequest, SessionSummary, TurnStart,
    open_session_request::Target,
};

use crate::commands::sessions;
use crate::context::{Ctx, provider_settings};
use crate::error::{CliError, CliResult};
use crate::turn;
use crate::ui::{Line, Ui};

const HELP: &str = "\
messages are sent to the model; lines starting with / are commands:
  /new            start a new conversation (the old one stays listed)
  /resume [N]     list conversations, or continue the Nth (1 = newest)
  /status         this conversation's state
  /clear          delete this conversation's stored state and start fresh
  /help           this list
  /exit           leave (also Ctrl-D)
  !COMMAND        run COMMAND here in your terminal; its output goes with your next message";

/// Largest `!command` output kept for the model.
const MAX_LOCAL_OUTPUT: usize = 16 * 1024;

pub async fn run(ctx: &Ctx, target: Target) -> CliResult<()> {
    let config = ctx.config()?;
    let mut ui = Ui::new();
    let mut session = open(ctx, target, &mut ui).await?;
    let policy = ctx.approval(&config, ApprovalPolicy::Ask);
    let mut failures = 0u32;
    if ui.interactive {
        eprintln!("/help for commands, Ctrl-D to leave");
    }
    loop {
        let line = match ui.read_line("› ") {
            Line::Text(line) => line,
            Line::Interrupted => continue,
            Line::Eof => break,
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(command) = line.strip_prefix('/') {
            match slash(ctx, command, &mut session, &mut ui).await {
                Ok(Flow::Continue) => {}
                Ok(Flow::Exit) => break,
                Err(err) => {
                    failures += 1;
                    ui.info(&format!("agentx: {err}"));
                }
            }
            continue;
        }
        if let Some(command) = line.strip_prefix('!') {
            if let Err(err) = local_shell(ctx, &session, command.trim(), ui.interactive).await {
                failures += 1;
                ui.info(&format!("agentx: {err}"));
            }
            continue;
        }
        let start = TurnStart {
            scope: ctx.scope(),
            session_id: session.id.clone(),
            message: line.to_owned(),
            approval: policy as i32,
            provider: Some(provider_settings(&config)),
            oneshot: false,
            client_pid: std::process::id(),
            local_shell_transcript: String::new(),
            instructions: config.instructions.clone().unwrap_or_default(),
            shell_timeout_secs: config
                .shell_timeout_secs
                .and_then(|s| u32::try_from(s).ok())
                .unwrap_or(0),
        };
        match turn::run(&ctx.channel(), start, &mut ui).await {
            Ok(finished) => {
                if let Err(err) = turn::check(&finished) {
                    failures += 1;
                    ui.info(&format!("agentx: {err}"));
                }
            }
            // A lost daemon ends the REPL with exit 3; other errors are shown.
            Err(err) if err.exit == crate::error::Exit::Unreachable => return Err(err),
            Err(err) => {
                failures += 1;
                ui.info(&format!("agentx: {err}"));
            }
        }
    }
    if failures > 0 && !ui.interactive {
        return Err(CliError::failed(String::new()));
    }
    Ok(())
}

enum Flow {
    Continue,
    Exit,
}

async fn slash(
    ctx: &Ctx,
    command: &str,
    session: &mut SessionSummary,
    ui: &mut Ui,
) -> CliResult<Flow> {
    let mut words = command.split_whitespace();
    let name = words.next().unwrap_or("");
    let arg = words.next();
    match (name, arg) {
        ("exit" | "quit" | "q", _) => return Ok(Flow::Exit),
        ("help" | "?", _) => println!("{HELP}"),
        ("new", _) => *session = open(ctx, Target::New(true), ui).await?,
        ("resume", None) => {
            let list = sessions::list(ctx).await?;
            sessions::print_list(&list);
            if !list.is_empty() {
                println!("/resume N continues conversation N");
            }
        }
        ("resume", Some(n)) => {
            let index = n
                .parse::<u32>()
                .map_err(|_| CliError::usage(format!("/resume takes a number, not {n:?}")))?;
            *session = open(ctx, Target::Index(index), ui).await?;
        }
        ("status", _) => {
            let status = sessions::fetch_status(ctx, &session.id).await?;
            sessions::print_status(ctx, &status);
        }
        ("clear", _) => {
            if ui.interactive && !crate::confirm("delete this conversation's stored state?")? {
                return Ok(Flow::Continue);
            }
            let old = session.id.clone();
            *session = sessions::clear(ctx, &old).await?;
            println!("cleared {old}; new conversation {}", session.id);
        }
        ("rollback" | "undo" | "rewind", _) => {
            return Err(CliError::failed(format!(
                "/{name} is not available in this version yet"
            )));
        }
        _ => {
            return Err(CliError::usage(format!(
                "unknown command /{name}; /help lists the commands"
            )));
        }
    }
    Ok(Flow::Continue)
}

/// Opens a conversation and shows where it stands.
async fn open(ctx: &Ctx, target: Target, ui: &mut Ui) -> CliResult<SessionSummary> {
    let reply = ctx
        .sessions()
        .open_session(OpenSessionRequest {
            scope: ctx.scope(),
            target: Some(target),
        })
        .await
        .map_err(|s| CliError::from_status("opening the conversation", &s))?
        .into_inner();
    for notice in &reply.notices {
        ui.info(&format!("agentx: {notice}"));
    }
    let session = reply
        .session
        .ok_or_else(|| CliError::failed("agentd returned no conversation"))?;
    let mut shown = String::new();
    for exchange in &reply.recent {
        shown.push_str(&format!("› {}\n", exchange.user));
        if !exchange.assistant.is_empty() {
            shown.push_str(&format!("{}\n", exchange.assistant));
        }
    }
    let header = if session.turns == 0 {
        format!("new conversation {}", session.id)
    } else {
        format!(
            "resuming {} ({} turn(s)): {}",
            session.id, session.turns, session.title
        )
    };
    if ui.interactive {
        println!("{header}");
        print!("{shown}");
    } else {
        // stdout carries only answers when scripted.
        eprintln!("{header}");
        eprint!("{shown}");
    }
    if !reply.pending_tool_calls.is_empty() {
        ui.info(&format!(
            "agentx: the last turn was interrupted with {} tool call(s) unanswered; \
             they are reported to the model as interrupted with your next message",
            reply.pending_tool_calls.len()
        ));
    }
    Ok(session)
}

/// Runs `!command` in the user's terminal, showing and keeping its output.
async fn local_shell(
    ctx: &Ctx,
    session: &SessionSummary,
    command: &str,
    interactive: bool,
) -> CliResult<()> {
    if command.is_empty() {
        return Err(CliError::usage("! needs a command, e.g. !ls"));
    }
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("exec 2>&1; {command}"))
        .current_dir(&ctx.folder)
        // Scripted input is the chat's, not the command's.
        .stdin(if interactive {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| CliError::failed(format!("cannot run {command:?}: {e}")))?;
    let mut captured = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        let mut buf = [0u8; 8192];
        let mut terminal = std::io::stdout();
        loop {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let _ = terminal.write_all(&buf[..n]);
                    let _ = terminal.flush();
                    if captured.len() < MAX_LOCAL_OUTPUT {
                        captured
                            .extend_from_slice(&buf[..n.min(MAX_LOCAL_OUTPUT - captured.len())]);
                    }
                }
            }
        }
    }
    let status = child.wait().map_err(|e| CliError::failed(e.to_string()))?;
    let mut transcript = format!("$ {command}\n{}", String::from_utf8_lossy(&captured));
    if !transcript.ends_with('\n') {
        transcript.push('\n');
    }
    match status.code() {
        Some(code) => transcript.push_str(&format!("[exit {code}]\n")),
        None => transcript.push_str("[killed by a signal]\n"),
    }
    ctx.sessions()
        .append_shell_transcript(AppendShellTranscriptRequest {
            scope: ctx.scope(),
            session_id: session.id.clone(),
            transcript,
        })
        .await
        .map_err(|s| CliError::from_status("saving the !command output", &s))?;
    Ok(())
}
