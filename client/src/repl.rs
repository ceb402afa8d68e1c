//! The chat loop: opens (or resumes) a conversation, settling an interrupted
//! turn first, then reads messages, slash and `!` commands until /exit or EOF.

use std::io::{Read as _, Write as _};
use std::process::Stdio;

use agentx_shared::config::Config;
use agentx_shared::proto::{
    AppendShellTranscriptRequest, ApprovalPolicy, FailedResponse, GetStatusRequest,
    OpenSessionRequest, Resolve, SessionStatus, SessionSummary, SetApproveAllRequest,
    SetModelRequest, TurnEndKind, TurnStart, TurnStatus, open_session_request::Target,
};

use crate::cli::OnPending;
use crate::commands::checkpoints::{self, Pick};
use crate::commands::clear;
use crate::context::Ctx;
use crate::error::{CliError, CliResult, Exit};
use crate::show::{visible, visible_lines};
use crate::turn;
use crate::ui::{Line, Ui};

mod slash;

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
    /// `[a]lways` holds for this conversation (as last known).
    always: bool,
    /// The context meter after the last turn ("" before the first).
    meter: String,
}

pub async fn run(ctx: &Ctx, target: Target) -> CliResult<()> {
    run_with(ctx, target, None).await
}

/// The chat, sending `first` (`agentx "PROMPT"`) before reading anything.
pub async fn run_with(ctx: &Ctx, target: Target, first: Option<String>) -> CliResult<()> {
    let config = ctx.config()?;
    let policy = ctx.approval(&config, ApprovalPolicy::Ask);
    crate::ui::entering_repl();
    let mut ui = Ui::with_history(crate::history::History::of_profile(&ctx.profile.dir));
    ui.tool_lines = config.tool_output_lines;
    let opened = open(ctx, target, &mut ui).await?;
    let mut chat = Chat {
        ctx,
        config,
        policy,
        session: opened.session.clone(),
        ui,
        failures: 0,
        always: false,
        meter: String::new(),
    };
    chat.resolve_interrupted(opened).await?;
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    if chat.ui.interactive
        && agentx_shared::folder::undo_off(&ctx.folder, home.as_deref().map(std::path::Path::new))
    {
        chat.ui.info(&format!(
            "agentx: undo is off here: {} is your home folder or above it, so no snapshots are \
             taken (/undo and /rewind cannot put files back); run agentx in a project folder",
            ctx.folder.display()
        ));
    }
    if chat.ui.interactive && chat.policy == ApprovalPolicy::Ask && !chat.session.id.is_empty() {
        // An `[a]lways` of an earlier chat still holds: say so.
        if let Ok(status) = ctx.status(&chat.session.id).await
            && status.approve_all
        {
            chat.always = true;
            chat.ui.info(
                "approval auto (always, this conversation): commands run unasked — /approvals ask \
                 takes it back",
            );
        }
    }
    if chat.ui.interactive {
        eprintln!("/help for commands, Ctrl-D to leave");
    }
    let mut first = first;
    loop {
        let line = if let Some(message) = first.take() {
            if chat.ui.interactive {
                println!("› {}", crate::show::visible_lines(&message));
            }
            message
        } else if let Some(message) = chat.ui.next_queued() {
            // Typed while the last turn ran.
            println!("› {}  (queued)", crate::show::visible_lines(&message));
            message
        } else {
            if chat.ui.interactive {
                chat.refresh_completions().await;
            }
            match chat.ui.read_message("› ").await {
                Line::Text(line) => line,
                Line::Interrupted if crate::completion::rewind_asked() => "/rewind".to_owned(),
                Line::Interrupted => continue,
                Line::Eof => break,
            }
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
            Err(err) if err.exit == Exit::Unreachable && chat.ui.interactive => {
                chat.carry_on_after(err).await?;
            }
            Err(err) if err.exit == Exit::Unreachable => return Err(err),
            Err(err) => {
                chat.failures += 1;
                let line = match chat.cleared_elsewhere().await {
                    Some(line) => line,
                    None => format!("agentx: {err}"),
                };
                chat.ui.info(&line);
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
    let status = ctx.status("").await?;
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
    Chat::outside(ctx, config, policy, &status.session_id)
        .turn(None, resolve)
        .await
}

impl<'a> Chat<'a> {
    /// A chat with no prompt, for one command's turn on `session_id`.
    fn outside(ctx: &'a Ctx, config: Config, policy: ApprovalPolicy, session_id: &str) -> Self {
        let session = SessionSummary {
            id: session_id.to_owned(),
            ..SessionSummary::default()
        };
        Chat {
            ctx,
            config,
            policy,
            session,
            ui: Ui::new(),
            failures: 0,
            always: false,
            meter: String::new(),
        }
    }
}

/// `agentx compact [--focus TEXT] [--from N]`: compacts the conversation's
/// context now; from message N on only (1 = the latest), keeping what
/// came before it as it is.
pub async fn compact(ctx: &Ctx, focus: &str, from: Option<u32>) -> CliResult<()> {
    let config = ctx.config()?;
    let status = ctx.status("").await?;
    if status.session_id.is_empty() || status.turns == 0 {
        return Err(CliError::failed(
            "this folder's conversation has nothing to compact yet",
        ));
    }
    let keep = match from {
        Some(n) => summarized_from(ctx, &status.session_id, n).await?,
        None => 0,
    };
    Chat::outside(ctx, config, ApprovalPolicy::Never, &status.session_id)
        .turn_keeping(Some(focus), Resolve::Compact, keep)
        .await
}

/// The transcript items kept when conversation `session` is summarized from
/// message `n` on (1 = the latest; the rewind numbering): those before it.
/// Where the folder has no snapshots (undo is off there), the answered
/// checkpoints number the messages.
pub async fn summarized_from(ctx: &Ctx, session: &str, n: u32) -> CliResult<u64> {
    use crate::commands::snapshots::rewind_to;
    let kept: Vec<u64> = match rewind_to::listed(ctx, session).await {
        Ok((_, messages, _)) if !messages.is_empty() => messages
            .into_iter()
            .map(|m| m.checkpoint.map_or(0, |cp| cp.transcript_len))
            .collect(),
        _ => rewind_to::answered_starts(&ctx.rpc().checkpoints(session).await?.checkpoints),
    };
    let count = kept.len();
    n.checked_sub(1)
        .and_then(|i| kept.get(i as usize).copied())
        .ok_or_else(|| {
            CliError::failed(format!(
                "no message {n} of this conversation to summarize from (it has {count}; 1 is the last)"
            ))
        })
}

/// `/model NAME`: sets the conversation's model ("": the configured one).
pub async fn set_model(ctx: &Ctx, session_id: &str, model: &str) -> CliResult<SessionStatus> {
    Ok(ctx
        .sessions()
        .set_model(SetModelRequest {
            scope: ctx.scope(),
            session_id: session_id.to_owned(),
            model: model.to_owned(),
            provider: ctx.status_provider(),
        })
        .await
        .map_err(|s| CliError::from_status("setting the model", &s))?
        .into_inner())
}

/// An approval mode's name, as flags and config spell it.
fn mode_name(policy: ApprovalPolicy) -> &'static str {
    match policy {
        ApprovalPolicy::Auto => "auto",
        ApprovalPolicy::Never => "never",
        _ => "ask",
    }
}

/// `/approvals ask`: takes back (or sets) the `[a]lways` of `session_id`.
pub async fn set_approve_all(ctx: &Ctx, session_id: &str, approve_all: bool) -> CliResult<()> {
    ctx.sessions()
        .set_approve_all(SetApproveAllRequest {
            scope: ctx.scope(),
            session_id: session_id.to_owned(),
            approve_all,
            provider: ctx.status_provider(),
        })
        .await
        .map_err(|s| CliError::from_status("changing the approval mode", &s))?;
    Ok(())
}

/// How many lines of each message the resume replay shows.
const REPLAY_LINES: usize = 6;

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
    /// After a failure: whether this REPL's conversation is gone (another
    /// client cleared it), as the line that says so and what to do.
    async fn cleared_elsewhere(&self) -> Option<String> {
        if self.session.id.is_empty() {
            return None;
        }
        let asked = self
            .ctx
            .sessions()
            .get_status(GetStatusRequest {
                scope: self.ctx.scope(),
                session_id: self.session.id.clone(),
                provider: None,
            })
            .await;
        match asked {
            Err(s) if s.code() == tonic::Code::NotFound => Some(format!(
                "agentx: conversation {} was cleared elsewhere (by another agentx), so this was \
                 not sent: /new starts a new conversation, /resume lists the others",
                self.session.id
            )),
            _ => None,
        }
    }

    /// agentd went away (stopped, restarted, killed) during a command or a
    /// turn: say what it cut short, reach it again (starting it as between
    /// turns) and go on at the prompt.
    async fn carry_on_after(&mut self, err: CliError) -> CliResult<()> {
        self.failures += 1;
        if turn::stopped_mid_turn(&err) {
            self.ui.info(
                "agentx: the turn was cut short by agentd stopping; it is kept as interrupted — \
                 send a message to go on, or /retry to send its message again",
            );
        } else {
            self.ui.info(&format!("agentx: {err}"));
        }
        self.ctx.reconnect().await?;
        self.ui.info(&format!(
            "agentx: reconnected to agentd (pid {})",
            self.ctx.hello().pid
        ));
        Ok(())
    }

    /// Runs one turn: a message, or a retry/continue of the last one.
    async fn turn(&mut self, message: Option<&str>, resolve: Resolve) -> CliResult<()> {
        self.turn_keeping(message, resolve, 0).await
    }

    /// [`Chat::turn`]; a compaction keeps the first `keep` transcript items
    /// as they are (0: it compacts all).
    async fn turn_keeping(
        &mut self,
        message: Option<&str>,
        resolve: Resolve,
        keep: u64,
    ) -> CliResult<()> {
        let config = &self.config;
        let start = TurnStart {
            scope: self.ctx.scope(),
            session_id: self.session.id.clone(),
            message: message.unwrap_or_default().to_owned(),
            approval: self.policy as i32,
            provider: Some(self.ctx.provider(config)),
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
            max_calls_per_reply: config.max_tool_calls_per_reply.unwrap_or(0),
            max_steps: config.max_tool_steps.unwrap_or(0),
            shell_environment: Some((&config.shell_environment).into()),
            sandbox: Some((&self.ctx.sandbox(config)).into()),
            compact_after_items: keep,
        };
        if self.ui.interactive {
            self.ui.status = self.pane_status();
        }
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
        if let Some(meter) = &finished.context
            && finished.end_kind != TurnEndKind::Refused as i32
        {
            let meter = agentx_shared::context::Meter::from(meter).line();
            self.meter.clone_from(&meter);
            if self.ui.interactive {
                let line = self.status_line(&meter);
                self.ui.info(&line);
            } else {
                self.ui.info(&meter);
            }
        }
        if finished.end_kind == TurnEndKind::Refused as i32 {
            return Err(CliError::failed(finished.error));
        }
        if finished.end_kind == TurnEndKind::ContextFull as i32 {
            self.ui.info(&format!("agentx: {}", finished.error));
            if self.ui.interactive {
                return self.offer_context_recovery().await;
            }
            return Err(CliError::failed(
                "the conversation no longer fits the model's context window",
            ));
        }
        if finished.status == TurnStatus::Failed as i32 && self.ui.interactive {
            // One line and the ways on; the next message simply goes on
            // from here (the failed turn stays as it is).
            self.failures += 1;
            self.ui.info(&format!(
                "agentx: the turn failed: {} — /retry sends it again, /rollback drops it, /new \
                 starts a new conversation, /clear deletes this one; or type your next message",
                finished.error
            ));
            return Ok(());
        }
        if finished.status == TurnStatus::Failed as i32 {
            return Err(CliError::failed(format!(
                "the turn failed: {} (agentx retry or agentx retry --new-chain send it again, \
                 agentx rollback drops it, agentx clear deletes the whole conversation)",
                finished.error
            )));
        }
        turn::check(&finished)
    }

    /// The composer pane's status line while a turn runs: model, approval
    /// mode, sandbox mode, the conversation's title, the last context meter.
    fn pane_status(&mut self) -> String {
        let (model, approval, sandbox) = self.modes();
        let mut line = format!("{model} · approval {approval} · sandbox {sandbox}");
        if !self.session.title.is_empty() {
            line.push_str(&format!(
                " · {}",
                crate::show::one_line(&self.session.title, 60)
            ));
        }
        if !self.meter.is_empty() {
            line.push_str(&format!(" · {}", self.meter));
        }
        line
    }

    /// The model, approval mode and sandbox mode, as the status shows them.
    fn modes(&mut self) -> (String, String, &'static str) {
        if std::mem::take(&mut self.ui.answered_always) {
            self.always = true;
        }
        let model = self
            .ctx
            .global
            .model
            .clone()
            .or_else(|| Some(self.session.model.clone()).filter(|m| !m.is_empty()))
            .unwrap_or_else(|| self.config.model.clone());
        let approval = crate::render::human::approval_mode(mode_name(self.policy), self.always);
        (
            model,
            approval,
            self.ctx.sandbox(&self.config).mode.as_str(),
        )
    }

    /// The line after each turn at a terminal: context meter, model,
    /// approval mode, sandbox mode and the conversation's title.
    fn status_line(&mut self, meter: &str) -> String {
        let (model, approval, sandbox) = self.modes();
        let mut line = format!("{meter} · {model} · approval {approval} · sandbox {sandbox}");
        if !self.session.title.is_empty() {
            line.push_str(&format!(" · {}", visible(&self.session.title)));
        }
        line
    }

    /// What Tab may offer at the next prompt: this folder's conversations,
    /// this conversation's checkpoints, the folder's snapshots (a failure
    /// only leaves the previous ones).
    async fn refresh_completions(&self) {
        let mut known = crate::completion::Known::default();
        if let Ok(reply) = self.ctx.rpc().list_sessions(false).await {
            known.conversations = reply.sessions.into_iter().map(|s| s.id).collect();
        }
        if let Ok(cps) = checkpoints::list(self.ctx, &self.session.id).await {
            known.checkpoints = cps.len();
        }
        if let Ok(n) = crate::commands::snapshots::count(self.ctx).await {
            known.snapshots = n;
        }
        self.ui.set_known(known);
    }

    /// After a turn the context window could not take: compact, roll back,
    /// start a new conversation, or go on (nothing is resent either way).
    async fn offer_context_recovery(&mut self) -> CliResult<()> {
        loop {
            let answer = match self
                .ui
                .read_line(
                    "[c]ompact now, roll[b]ack to a checkpoint, [n]ew conversation, or Enter to \
                     go on: ",
                )
                .await
            {
                Line::Text(t) => t.trim().to_lowercase(),
                Line::Interrupted | Line::Eof => return Ok(()),
            };
            return match answer.as_str() {
                "" => Ok(()),
                "c" | "compact" => Box::pin(self.turn(Some(""), Resolve::Compact)).await,
                "b" | "rollback" => self.rollback(Pick::Choose).await,
                "n" | "new" => {
                    let opened = open(self.ctx, Target::New(true), &mut self.ui).await?;
                    self.session = opened.session;
                    Ok(())
                }
                _ => {
                    eprintln!("please answer c, b, n or Enter");
                    continue;
                }
            };
        }
    }

    /// An interrupted turn must be settled before the chat goes on.
    async fn resolve_interrupted(&mut self, opened: Opened) -> CliResult<()> {
        if let Some(failed) = &opened.failed {
            // /retry is offered only when it has something to send: a turn
            // dropped for the context window has not (its message says what to do).
            if failed.resendable {
                self.ui.info(&format!(
                    "agentx: the last turn failed: {} — /retry sends it again, /retry new-chain \
                     starts a new chain, /rollback drops it, /clear deletes the whole conversation",
                    failed.message
                ));
            } else {
                self.ui.info(&format!(
                    "agentx: the last turn failed and was not kept: {}",
                    failed.message
                ));
            }
        }
        let Some(interrupted) = opened.interrupted else {
            return Ok(());
        };
        self.ui.info(&format!(
            "agentx: the last turn was interrupted: {}; {} unanswered",
            interrupted.message,
            agentx_shared::plural::count(opened.pending, "tool call")
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
        let (fresh, line) = clear::clear(self.ctx, &old).await?;
        self.session = fresh;
        println!("{line}");
        Ok(())
    }

    /// Runs `!command` in the user's terminal, showing and keeping its output.
    async fn local_shell(&mut self, command: &str) -> CliResult<()> {
        if command.is_empty() {
            return Err(CliError::usage("! needs a command, e.g. !ls"));
        }
        let interactive = self.ui.interactive;
        // The command gets the terminal as it was before the chat.
        let ran = crate::typeahead::with_enter_as_newline(|| -> CliResult<_> {
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
            Ok((captured, status))
        });
        let (captured, status) = ran?;
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
                client_pid: std::process::id(),
            })
            .await
            .map_err(|s| CliError::from_status("saving the !command output", &s))?;
        Ok(())
    }
}

/// An answer as the resume replay shows it at a terminal: rendered as
/// Markdown, its first [`REPLAY_LINES`] lines.
fn replayed_markdown(answer: &str) -> String {
    let styled = crate::ui::color_wanted();
    let mut lines = crate::render::markdown::terminal::lines_unhighlighted(answer, styled);
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    if lines.len() <= REPLAY_LINES {
        return lines.join("\n");
    }
    let more = lines.len() - REPLAY_LINES;
    format!(
        "{}\n  … {}",
        lines[..REPLAY_LINES].join("\n"),
        agentx_shared::plural::count(more, "more line")
    )
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
    // At a terminal, answers are shown as Markdown (as they streamed).
    let as_markdown = ui.interactive && ui.stream;
    let last = reply.recent.len().saturating_sub(1);
    for (n, exchange) in reply.recent.iter().enumerate() {
        if !exchange.boundary.is_empty() {
            shown.push_str(&format!("{}\n", visible(&exchange.boundary)));
            continue;
        }
        let user = crate::show::first_lines(&visible_lines(&exchange.user), REPLAY_LINES);
        shown.push_str(&format!("› {user}\n"));
        if !exchange.assistant.is_empty() {
            let answer = if as_markdown {
                replayed_markdown(&exchange.assistant)
            } else {
                crate::show::first_lines(&visible_lines(&exchange.assistant), REPLAY_LINES)
            };
            shown.push_str(&format!("{answer}\n"));
        } else if n == last {
            // The last turn did not finish: say so rather than show it
            // as if its answer were missing.
            if let Some(marker) = &reply.interrupted {
                shown.push_str(&format!("  (interrupted: {})\n", visible(&marker.message)));
            } else if let Some(marker) = &reply.failed {
                shown.push_str(&format!("  (failed: {})\n", visible(&marker.message)));
            }
        }
    }
    let mut header = if session.turns == 0 {
        format!("new conversation {}", session.id)
    } else {
        format!(
            "resuming {} ({}): {}",
            session.id,
            agentx_shared::plural::count(session.turns, "turn"),
            visible(&session.title)
        )
    };
    if let Ok(mut setup) = ctx.setup() {
        // -m wins for this run; else the conversation's own model.
        if ctx.global.model.is_none() && !session.model.is_empty() {
            setup.model = format!("{} (this conversation's /model)", session.model);
        }
        header.push_str(&format!("\nmodel {}", setup.line()));
    }
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
