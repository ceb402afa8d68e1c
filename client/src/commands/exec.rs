//! `agentx exec PROMPT` (and `agentx -p PROMPT`): a one-shot that branches
//! from the folder's shared checkpoint. The answer goes to stdout (streamed to
//! a terminal), activity to stderr; `--json` prints one event per line.

use std::io::{IsTerminal as _, Read as _, Write as _};

use agentx_shared::proto::turn_event::Event;
use agentx_shared::proto::{
    ApprovalDecision, ApprovalPolicy, TurnFinished, TurnStart, TurnStatus, approval_decision,
    turn_input,
};

use crate::cli::Approval;
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render::exec_events::JsonEvent;

/// Runs one one-shot with `prompt` (`-`: read from stdin) and prints its
/// events and result.
pub async fn exec(
    ctx: &Ctx,
    prompt: String,
    as_json: bool,
    max_steps: Option<u32>,
) -> CliResult<()> {
    let from_args = prompt != "-";
    let prompt = read_prompt(prompt)?;
    let mut start = turn_start(ctx, prompt, from_args)?;
    if let Some(steps) = max_steps {
        start.max_steps = steps;
    }
    let input = crate::turn::input;
    let (tx, mut events) = crate::turn::open(&ctx.channel(), start, "the one-shot").await?;
    let mut out = Output {
        as_json,
        stream: !as_json && std::io::stdout().is_terminal(),
        mid_line: false,
        answer: String::new(),
        markdown: None,
        needed_approval: 0,
        unconfinable: 0,
    };
    let mut cancelled = false;
    // A frozen agentd (SIGSTOP) is named within seconds, not after the
    // stream's keep-alive gives up.
    let unanswering = crate::connect::unanswering(ctx.channel(), &ctx.profile, "the one-shot");
    tokio::pin!(unanswering);
    loop {
        let message = tokio::select! {
            m = events.message() => m,
            err = &mut unanswering => return Err(err),
            _ = tokio::signal::ctrl_c(), if !cancelled => {
                cancelled = true;
                if crate::ui::echoes_ctrl_c() {
                    eprintln!(" cancelling…");
                } else {
                    eprintln!("^C cancelling…");
                }
                let _ = tx.send(input(turn_input::Input::Cancel(true))).await;
                continue;
            }
        };
        let event = match message {
            Ok(Some(event)) => event,
            Ok(None) => {
                return Err(CliError::unreachable(
                    "agentd ended the one-shot without a result",
                ));
            }
            Err(status) => return Err(stream_error(&status)),
        };
        match event.event {
            None => {}
            Some(Event::ApprovalRequest(r)) => {
                // Asked only under --approval ask, at a terminal.
                let question = format!("run `{}`?", crate::show::visible(&r.command));
                let yes = tokio::task::spawn_blocking(move || crate::ui::confirm(&question))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or(false);
                let decision = if yes {
                    approval_decision::Decision::Yes
                } else {
                    approval_decision::Decision::No
                };
                let answer = ApprovalDecision {
                    call_id: r.call_id,
                    decision: decision as i32,
                };
                let _ = tx.send(input(turn_input::Input::Approval(answer))).await;
            }
            Some(Event::Finished(f)) => return out.finished(f),
            Some(event) => out.show(&event),
        }
    }
}

/// The prompt as given, or read from stdin for `-`; an empty one is refused.
fn read_prompt(prompt: String) -> CliResult<String> {
    let prompt = if prompt == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| CliError::usage(format!("cannot read the prompt from stdin: {e}")))?;
        text
    } else {
        prompt
    };
    if prompt.trim().is_empty() {
        return Err(CliError::usage("the prompt is empty"));
    }
    Ok(prompt)
}

/// The request starting a one-shot with `prompt` under the configuration.
fn turn_start(ctx: &Ctx, prompt: String, prompt_from_args: bool) -> CliResult<TurnStart> {
    let config = ctx.config()?;
    if ctx.global.on_pending.is_some() {
        return Err(CliError::usage(
            "--on-pending settles an interrupted chat turn; a one-shot never has one",
        ));
    }
    // Tools run with --auto; --approval ask asks at a terminal; else
    // nothing runs (and the one-shot says so and exits 1).
    let auto = ctx.global.auto || ctx.global.approval == Some(Approval::Auto);
    let policy = match ctx.global.approval {
        _ if auto => ApprovalPolicy::Auto,
        Some(Approval::Ask) if std::io::stdin().is_terminal() && prompt_from_args => {
            ApprovalPolicy::Ask
        }
        Some(Approval::Ask) => {
            return Err(CliError::usage(
                "--approval ask needs a terminal to ask on; use --auto (or --approval auto) to \
                 let the one-shot run commands",
            ));
        }
        _ => ApprovalPolicy::Never,
    };
    Ok(TurnStart {
        scope: ctx.scope(),
        message: prompt,
        approval: policy as i32,
        provider: Some(ctx.provider(&config)),
        oneshot: true,
        client_pid: std::process::id(),
        instructions: config.instructions.clone().unwrap_or_default(),
        shell_timeout_secs: config
            .shell_timeout_secs
            .and_then(|s| u32::try_from(s).ok())
            .unwrap_or(0),
        max_calls_per_reply: config.max_tool_calls_per_reply.unwrap_or(0),
        max_steps: config.max_tool_steps.unwrap_or(0),
        shell_environment: Some((&config.shell_environment).into()),
        sandbox: Some((&ctx.sandbox(&config)).into()),
        ..TurnStart::default()
    })
}

/// The error for the event stream failing: agentd gone, or its status.
fn stream_error(status: &tonic::Status) -> CliError {
    match status.code() {
        tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown => {
            CliError::unreachable(
                "agentd stopped during the one-shot; its state is kept for diagnosis \
                 (`agentx oneshots`)",
            )
        }
        _ => CliError::from_status("the one-shot", status),
    }
}

/// Rendered answer lines (already made safe) to stdout.
fn print_lines(lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    let mut out = std::io::stdout().lock();
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// Where a one-shot's events go: JSON lines, or the answer on stdout and
/// activity on stderr.
struct Output {
    as_json: bool,
    /// stdout is a terminal: the answer streams as it comes.
    stream: bool,
    mid_line: bool,
    /// The answer when it comes in pieces.
    answer: String,
    /// The streamed answer, rendered as Markdown a block at a time.
    markdown: Option<crate::render::markdown::stream::Stream>,
    /// Calls not run because nobody could approve them.
    needed_approval: usize,
    /// Calls not run because the kernel cannot confine them.
    unconfinable: usize,
}

impl Output {
    /// An event in the middle of the turn.
    fn show(&mut self, event: &Event) {
        if let Event::AnswerChunk(piece) = event {
            self.answer.push_str(piece);
            return;
        }
        if let Event::ToolResult(r) = event
            && r.denied
            && !r.not_run.is_empty()
        {
            // agentd names the way out of a sandbox the kernel cannot enforce.
            if r.not_run.contains("--sandbox danger-full-access") {
                self.unconfinable += 1;
            } else {
                self.needed_approval += 1;
            }
        }
        if self.as_json {
            if let Some(line) = JsonEvent::of(event) {
                line.emit();
            }
            return;
        }
        if !matches!(event, Event::TextDelta(_)) {
            self.end_answer();
        }
        match event {
            Event::TextDelta(delta) if self.stream => {
                let styled = crate::ui::color_wanted();
                let lines = self
                    .markdown
                    .get_or_insert_with(|| crate::render::markdown::stream::Stream::new(styled))
                    .push(delta);
                print_lines(&lines);
            }
            Event::ToolCall(c) => {
                let line = format!("» {}: {}", c.name, crate::turn::shown_call(&c.arguments));
                eprintln!("{}", crate::show::terminal_text(&line));
            }
            Event::ToolResult(r) if !r.not_run.is_empty() => {
                eprintln!("  ↳ not run: {}", crate::show::terminal_text(&r.not_run));
            }
            Event::ToolResult(r) if r.denied => eprintln!("  ↳ declined"),
            Event::ToolResult(r) => {
                let status = r
                    .exit_code
                    .map_or("killed".to_owned(), |c| format!("exit {c}"));
                eprintln!(
                    "  ↳ {status}, {} of output",
                    agentx_shared::plural::count(crate::turn::output_lines(&r.output), "line")
                );
            }
            Event::Notice(text) => eprintln!("agentx: {}", crate::show::terminal_text(text)),
            Event::Compacted(c) => eprintln!("agentx: {}", crate::turn::compaction_line(c)),
            Event::Retry(r) => {
                if self.mid_line {
                    println!();
                    self.mid_line = false;
                }
                eprintln!(
                    "agentx: retrying {}/{} in {:.1}s: {}",
                    r.attempt,
                    r.max_attempts,
                    r.delay_ms as f64 / 1000.0,
                    r.reason
                );
            }
            _ => {}
        }
    }

    /// Prints what is held of a streamed answer.
    fn end_answer(&mut self) {
        if let Some(mut markdown) = self.markdown.take() {
            print_lines(&markdown.finish());
        }
    }

    /// The result: printed, and the exit status it means.
    fn finished(&mut self, mut f: TurnFinished) -> CliResult<()> {
        self.end_answer();
        if f.text_in_chunks {
            f.text = std::mem::take(&mut self.answer);
        }
        let status = match TurnStatus::try_from(f.status) {
            Ok(TurnStatus::Completed) => "completed",
            Ok(TurnStatus::Interrupted) => "interrupted",
            _ => "failed",
        };
        if self.as_json {
            JsonEvent::Result {
                status,
                text: &f.text,
                oneshot_id: &f.oneshot_id,
                usage: crate::usage::json(&f.usage.unwrap_or_default()),
                error: &f.error,
                cut_short: &f.cut_short,
            }
            .emit();
        } else if self.stream {
            if self.mid_line {
                println!();
            }
        } else if status == "completed" {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(crate::show::terminal_text(&f.text).as_bytes());
            if !f.text.ends_with('\n') {
                let _ = out.write_all(b"\n");
            }
        }
        if !self.as_json && !f.cut_short.is_empty() {
            let line = crate::turn::cut_short_line(&f.cut_short);
            eprintln!("{}", crate::show::terminal_text(&line));
        }
        match status {
            "completed" if self.unconfinable > 0 => Err(CliError::failed(format!(
                "{} the model asked for not run: the sandbox cannot confine commands here \
                 (--sandbox danger-full-access runs them unconfined)",
                agentx_shared::plural::count(self.unconfinable as u64, "command")
            ))),
            "completed" if self.needed_approval > 0 => Err(CliError::failed(format!(
                "{} the model asked for not run: they need approval, and a one-shot runs \
                 commands only with --auto (or --approval auto)",
                agentx_shared::plural::count(self.needed_approval as u64, "command")
            ))),
            "completed" => Ok(()),
            "interrupted" if crate::turn::daemon_stopped(&f) => {
                Err(CliError::unreachable(format!(
                    "agentd stopped during the one-shot; its state is kept as {} (agentx oneshots)",
                    f.oneshot_id
                )))
            }
            "interrupted" => Err(CliError::failed(format!(
                "the one-shot was interrupted; its state is kept as {} (agentx oneshots)",
                f.oneshot_id
            ))),
            _ => Err(CliError::failed(format!(
                "the one-shot failed: {}; its state is kept as {} (agentx oneshots)",
                f.error, f.oneshot_id
            ))),
        }
    }
}
