//! The chat loop: opens (or resumes) a conversation — settling an
//! interrupted turn first — then reads messages, slash commands and
//! `!commands` until /exit or end of input.

use std::io::{Read as _, Write as _};
use std::process::Stdio;

use agentx_shared::config::Config;
use agentx_shared::proto::{
    AppendShellTranscriptRequest, ApprovalPolicy, FailedResponse, OpenSessionRequest, Resolve,
    SessionSummary, TurnStart, TurnStatus, open_session_request::Target,
};

use crate::cli::OnPending;
use crate::commands::checkpoints::{self, Pick};
use crate::commands::{library, sessions, snapshots};
use crate::context::{Ctx, provider_settings};
use crate::error::{CliError, CliResult, Exit};
use crate::turn;
use crate::ui::{Line, Ui};

const HELP: &str = "\
messages are sent to the model; lines starting with / are commands:
  /new              start a new conversation (the old one stays listed)
  /resume [N]       pick a conversation (arrows or its number), or continue the Nth (1 = newest)
  /fork [N]         continue in a new conversation from checkpoint N (default: the newest)
  /rename TITLE     give this conversation a title
  /search TEXT      search this folder's conversations (messages, tool output, titles)
  /status           this conversation's state
  /checkpoints      this conversation's checkpoints (1 = newest)
  /rollback [N]     restore a checkpoint (a picker without N); files are untouched
  /rollback undo    revert the last rollback
  /retry            send the last failed or interrupted turn again
  /retry new-chain  ... starting a new server-side chain from the saved conversation
  /undo [force]     put back what the last message changed (shows the list first)
  /rewind [N|ID]    list snapshots, or put the folder back as snapshot N had it
  /clear            delete this conversation's stored state and start fresh
  /help             this list
  /exit             leave (also Ctrl-D)
  !COMMAND          run COMMAND here in your terminal; its output goes with your next message";

/// Largest `!command` output kept for the model.
const MAX_LOCAL_OUTPUT: usize = 16 * 1024;

/// The chat session's state on the client side.
struct Chat<'a> {
    ctx: &'a Ctx,
    config: Config,
    policy: ApprovalPolicy,
    session: SessionSummary,
    ui: Ui,
    failures: u32,
}

pub async fn run(ctx: &Ctx, target: Target) -> CliResult<()> {
    let config = ctx.config()?;
    let policy = ctx.approval(&config, ApprovalPolicy::Ask);
    let mut ui = Ui::new();
    let opened = open(ctx, target, &mut ui).await?;
    let mut chat = Chat {
        ctx,
        config,
        policy,
        session: opened.session.clone(),
        ui,
        failures: 0,
    };
    chat.settle(opened).await?;
    if chat.ui.interactive {
        eprintln!("/help for commands, Ctrl-D to leave");
    }
    loop {
        let line = match chat.ui.read_line("› ").await {
            Line::Text(line) => line,
            Line::Interrupted => continue,
            Line::Eof => break,
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let result = if let Some(command) = line.strip_prefix('/') {
            match chat.slash(command).await {
                Ok(Flow::Exit) => break,
                other => other.map(drop),
            }
        } else if let Some(command) = line.strip_prefix('!') {
            chat.local_shell(command.trim()).await
        } else {
            chat.turn(Some(line), Resolve::None).await
        };
        match result {
            Ok(()) => {}
            Err(err) if err.exit == Exit::Unreachable => return Err(err),
            Err(err) => {
                chat.failures += 1;
                chat.ui.info(&format!("agentx: {err}"));
            }
        }
    }
    if chat.failures > 0 && !chat.ui.interactive {
        return Err(CliError::failed(String::new()));
    }
    Ok(())
}

/// `agentx retry [--new-chain]`: settles the last turn outside the REPL.
pub async fn retry(ctx: &Ctx, new_chain: bool) -> CliResult<()> {
    let config = ctx.config()?;
    let policy = ctx.approval(&config, ApprovalPolicy::Never);
    let status = sessions::fetch_status(ctx, "").await?;
    if status.session_id.is_empty() {
        return Err(CliError::failed("this folder has no conversation to retry"));
    }
    let resolve = if new_chain {
        Resolve::NewChain
    } else if status.failed.is_some() {
        Resolve::RetryRequest
    } else if status.interrupted.is_some() || !status.pending_tool_calls.is_empty() {
        Resolve::RetryMessage
    } else {
        return Err(CliError::failed(
            "the last turn succeeded: there is nothing to retry",
        ));
    };
    let session = SessionSummary {
        id: status.session_id.clone(),
        ..SessionSummary::default()
    };
    let mut chat = Chat {
        ctx,
        config,
        policy,
        session,
        ui: Ui::new(),
        failures: 0,
    };
    chat.turn(None, resolve).await
}

enum Flow {
    Continue,
    Exit,
}

/// What opening a conversation told us.
struct Opened {
    session: SessionSummary,
    interrupted: Option<FailedResponse>,
    failed: Option<FailedResponse>,
    pending: usize,
}

impl Chat<'_> {
    /// Runs one turn: a message, or a retry/continue of the last one.
    async fn turn(&mut self, message: Option<&str>, resolve: Resolve) -> CliResult<()> {
        let config = &self.config;
        let start = TurnStart {
            scope: self.ctx.scope(),
            session_id: self.session.id.clone(),
            message: message.unwrap_or_default().to_owned(),
            approval: self.policy as i32,
            provider: Some(provider_settings(config)),
            oneshot: false,
            client_pid: std::process::id(),
            local_shell_transcript: String::new(),
            instructions: config.instructions.clone().unwrap_or_default(),
            shell_timeout_secs: config
                .shell_timeout_secs
                .and_then(|s| u32::try_from(s).ok())
                .unwrap_or(0),
            resolve: resolve as i32,
            caller: None,
        };
        let (finished, ran_on) =
            match turn::run(&self.ctx.channel(), start.clone(), &mut self.ui).await {
                // agentd was stopped, restarted or replaced since the last
                // message, and nothing of this one reached it: reconnect (the
                // start-up waits for a stopping daemon) and send it once more.
                Err(e) if e.not_started => {
                    self.ctx.reconnect().await?;
                    self.ui.info("agentx: reconnected to agentd");
                    turn::run(&self.ctx.channel(), start, &mut self.ui).await?
                }
                other => other?,
            };
        if ran_on != self.session.id {
            // agentd continued this machine's fork (it said why).
            self.session.id = ran_on;
        }
        if finished.status == TurnStatus::Failed as i32 && self.ui.interactive {
            self.ui
                .info(&format!("agentx: the turn failed: {}", finished.error));
            return self.offer_recovery().await;
        }
        if finished.status == TurnStatus::Failed as i32 {
            return Err(CliError::failed(format!(
                "the turn failed: {} (agentx retry, agentx retry --new-chain, agentx rollback or \
                 agentx clear settle it)",
                finished.error
            )));
        }
        turn::check(&finished)
    }

    /// After a failed turn at a terminal: retry, new chain, rollback, clear, or go on.
    async fn offer_recovery(&mut self) -> CliResult<()> {
        self.failures += 1;
        loop {
            let answer = match self
                .ui
                .read_line("[r]etry, [n]ew chain, roll[b]ack, [c]lear, or Enter to go on: ")
                .await
            {
                Line::Text(t) => t.trim().to_lowercase(),
                Line::Interrupted | Line::Eof => return Ok(()),
            };
            return match answer.as_str() {
                "" => Ok(()),
                "r" | "retry" => Box::pin(self.turn(None, Resolve::RetryRequest)).await,
                "n" | "new chain" => Box::pin(self.turn(None, Resolve::NewChain)).await,
                "b" | "rollback" => self.rollback(Pick::Choose).await,
                "c" | "clear" => self.clear().await,
                _ => {
                    eprintln!("please answer r, n, b, c or Enter");
                    continue;
                }
            };
        }
    }

    /// An interrupted turn must be settled before the chat goes on.
    async fn settle(&mut self, opened: Opened) -> CliResult<()> {
        if let Some(failed) = &opened.failed {
            self.ui.info(&format!(
                "agentx: the last turn failed: {} — /retry sends it again, /retry new-chain \
                 starts a new chain, /rollback or /clear drop it",
                failed.message
            ));
        }
        let Some(interrupted) = opened.interrupted else {
            return Ok(());
        };
        self.ui.info(&format!(
            "agentx: the last turn was interrupted: {}; {} tool call(s) unanswered",
            interrupted.message, opened.pending
        ));
        let choice = if self.ui.interactive {
            loop {
                match self
                    .ui
                    .read_line(
                        "[c]ontinue it, [r]etry its message, or start a [n]ew conversation: ",
                    )
                    .await
                {
                    Line::Text(t) => match t.trim().to_lowercase().as_str() {
                        "c" | "continue" => break OnPending::Continue,
                        "r" | "retry" => break OnPending::Retry,
                        "n" | "new" => break OnPending::New,
                        _ => eprintln!("please answer c, r or n"),
                    },
                    Line::Interrupted | Line::Eof => {
                        return Err(CliError::failed("the interrupted turn was left as it is"));
                    }
                }
            }
        } else {
            self.ctx.global.on_pending.ok_or_else(|| {
                CliError::failed(
                    "the last turn in this conversation was interrupted: choose with \
                     --on-pending continue|retry|new (or run agentx in a terminal to be asked)",
                )
            })?
        };
        match choice {
            OnPending::Continue => self.turn(None, Resolve::Continue).await,
            OnPending::Retry => self.turn(None, Resolve::RetryMessage).await,
            OnPending::New => {
                let opened = open(self.ctx, Target::New(true), &mut self.ui).await?;
                self.session = opened.session;
                Ok(())
            }
        }
    }

    async fn rollback(&mut self, pick: Pick) -> CliResult<()> {
        match checkpoints::rollback(self.ctx, &self.session.id, pick).await? {
            None => println!("nothing changed"),
            Some(status) => println!("{}", checkpoints::describe(&status)),
        }
        Ok(())
    }

    async fn clear(&mut self) -> CliResult<()> {
        let old = self.session.id.clone();
        let (fresh, line) = sessions::clear(self.ctx, &old).await?;
        self.session = fresh;
        println!("{line}");
        Ok(())
    }

    async fn slash(&mut self, command: &str) -> CliResult<Flow> {
        let mut words = command.split_whitespace();
        let name = words.next().unwrap_or("");
        let arg = words.next();
        let rest = command.trim_start()[name.len()..].trim();
        match (name, arg) {
            ("fork", n) => {
                let n = match n {
                    None => 0,
                    Some(n) => n.parse::<u32>().map_err(|_| {
                        CliError::usage(format!("/fork takes a checkpoint number, not {n:?}"))
                    })?,
                };
                let forked = library::fork(self.ctx, &self.session.id, n).await?;
                println!("{}", library::describe_fork(&forked));
                let opened = open(self.ctx, Target::Id(forked.id), &mut self.ui).await?;
                self.session = opened.session;
            }
            ("rename", None) => return Err(CliError::usage("/rename needs a title")),
            ("rename", Some(_)) => {
                let renamed = library::rename(self.ctx, &self.session.id, rest).await?;
                self.session.title = renamed.title.clone();
                println!("renamed: {}", renamed.title);
            }
            ("search", None) => return Err(CliError::usage("/search needs some text")),
            ("search", Some(_)) => {
                let hits = library::search(self.ctx, rest, false, 20).await?;
                library::print_hits(self.ctx, &hits);
            }
            ("exit" | "quit" | "q", _) => return Ok(Flow::Exit),
            ("help" | "?", _) => println!("{HELP}"),
            ("new", _) => {
                let opened = open(self.ctx, Target::New(true), &mut self.ui).await?;
                self.session = opened.session;
            }
            ("resume", None) => {
                let (list, note) = sessions::list_with_remote(self.ctx).await?;
                if !note.is_empty() {
                    self.ui.info(&format!("agentx: {note}"));
                }
                if self.ui.interactive && !list.is_empty() {
                    let labels: Vec<String> = list.iter().map(sessions::label).collect();
                    let Some(index) = crate::picker::pick(
                        "resume (arrows or a number, Enter, Esc = cancel)",
                        &labels,
                    )?
                    else {
                        return Ok(Flow::Continue);
                    };
                    let id = list[index].id.clone();
                    let opened = open(self.ctx, Target::Id(id), &mut self.ui).await?;
                    self.session = opened.session.clone();
                    self.settle(opened).await?;
                    return Ok(Flow::Continue);
                }
                sessions::print_list(&list);
                if !list.is_empty() {
                    println!("/resume N continues conversation N");
                }
            }
            ("resume", Some(n)) => {
                let index = n
                    .parse::<u32>()
                    .map_err(|_| CliError::usage(format!("/resume takes a number, not {n:?}")))?;
                let target = sessions::nth(self.ctx, index).await?;
                let opened = open(self.ctx, target, &mut self.ui).await?;
                self.session = opened.session.clone();
                self.settle(opened).await?;
            }
            ("status", _) => {
                let status = sessions::fetch_status(self.ctx, &self.session.id).await?;
                sessions::print_status(self.ctx, &status);
            }
            ("checkpoints", _) => {
                let cps = checkpoints::list(self.ctx, &self.session.id).await?;
                checkpoints::print_list(&cps);
            }
            ("rollback", None) => self.rollback(Pick::Choose).await?,
            ("rollback", Some("undo")) => {
                let status = checkpoints::rollback(self.ctx, &self.session.id, Pick::Undo).await?;
                if let Some(status) = status {
                    println!("rollback undone: back at turn {}", status.turns);
                }
            }
            ("rollback", Some(n)) => {
                let index = n.parse::<u32>().map_err(|_| {
                    CliError::usage(format!("/rollback takes a number or `undo`, not {n:?}"))
                })?;
                self.rollback(Pick::Index(index)).await?;
            }
            ("retry", arg) => {
                let status = sessions::fetch_status(self.ctx, &self.session.id).await?;
                let resolve = match arg {
                    Some("new-chain") => Resolve::NewChain,
                    Some(other) => {
                        return Err(CliError::usage(format!(
                            "/retry takes nothing or `new-chain`, not {other:?}"
                        )));
                    }
                    None if status.failed.is_some() => Resolve::RetryRequest,
                    None => Resolve::RetryMessage,
                };
                self.turn(None, resolve).await?;
            }
            ("clear", _) => {
                let status = sessions::fetch_status(self.ctx, &self.session.id).await?;
                let question = if status.remote_copy {
                    "delete this conversation's stored state here and its copy on the remote store?"
                } else {
                    "delete this conversation's stored state?"
                };
                if self.ui.interactive && !crate::ui::confirm(question)? {
                    return Ok(Flow::Continue);
                }
                self.clear().await?;
            }
            ("undo", arg) => {
                let force = arg == Some("force");
                let yes = !self.ui.interactive;
                let what = snapshots::Restore::Undo(self.session.id.clone());
                snapshots::restore(self.ctx, what, yes, force).await?;
            }
            ("rewind", None) => snapshots::rewind(self.ctx, None, false, false).await?,
            ("rewind", Some(n)) => {
                let yes = !self.ui.interactive;
                snapshots::restore(self.ctx, snapshots::rewind_target(n), yes, false).await?;
            }
            _ => {
                return Err(CliError::usage(format!(
                    "unknown command /{name}; /help lists the commands"
                )));
            }
        }
        Ok(Flow::Continue)
    }

    /// Runs `!command` in the user's terminal, showing and keeping its output.
    async fn local_shell(&mut self, command: &str) -> CliResult<()> {
        if command.is_empty() {
            return Err(CliError::usage("! needs a command, e.g. !ls"));
        }
        let interactive = self.ui.interactive;
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("exec 2>&1; {command}"))
            .current_dir(&self.ctx.folder)
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
                        let room = MAX_LOCAL_OUTPUT.saturating_sub(captured.len());
                        captured.extend_from_slice(&buf[..n.min(room)]);
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
        self.ctx
            .sessions()
            .append_shell_transcript(AppendShellTranscriptRequest {
                scope: self.ctx.scope(),
                session_id: self.session.id.clone(),
                transcript,
            })
            .await
            .map_err(|s| CliError::from_status("saving the !command output", &s))?;
        Ok(())
    }
}

/// Opens a conversation and shows where it stands.
async fn open(ctx: &Ctx, target: Target, ui: &mut Ui) -> CliResult<Opened> {
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
    Ok(Opened {
        session,
        interrupted: reply.interrupted,
        failed: reply.failed,
        pending: reply.pending_tool_calls.len(),
    })
}
