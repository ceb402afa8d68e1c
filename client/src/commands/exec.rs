//! `agentx exec PROMPT` (and `agentx -p PROMPT`): a one-shot that branches
//! from the folder's shared checkpoint. The answer goes to stdout (streamed to
//! a terminal), activity to stderr; `--json` prints one event per line.

use std::io::{IsTerminal as _, Read as _, Write as _};

use serde_json::{Value, json};

use agentx_shared::proto::{
    ApprovalDecision, ApprovalPolicy, TurnStart, TurnStatus, Usage, approval_decision, turn_event,
    turn_input,
};

use crate::cli::Approval;
use crate::context::{Ctx, provider_settings};
use crate::error::{CliError, CliResult};

fn usage_json(u: Option<&Usage>) -> Value {
    crate::usage::json(&u.copied().unwrap_or_default())
}

/// Writes one JSON event line.
fn emit(event: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{event}");
    let _ = out.flush();
}

pub async fn exec(ctx: &Ctx, prompt: String, as_json: bool) -> CliResult<()> {
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
    let config = ctx.config()?;
    // No one is there to ask: tools run only with --auto.
    let auto = ctx.global.auto || ctx.global.approval == Some(Approval::Auto);
    let policy = if auto {
        ApprovalPolicy::Auto
    } else {
        ApprovalPolicy::Never
    };
    let start = TurnStart {
        scope: ctx.scope(),
        message: prompt,
        approval: policy as i32,
        provider: Some(provider_settings(&config)),
        oneshot: true,
        client_pid: std::process::id(),
        instructions: config.instructions.clone().unwrap_or_default(),
        shell_timeout_secs: config
            .shell_timeout_secs
            .and_then(|s| u32::try_from(s).ok())
            .unwrap_or(0),
        ..TurnStart::default()
    };

    let input = crate::turn::input;
    let (tx, mut events) = crate::turn::open(&ctx.channel(), start, "the one-shot").await?;
    let stream = !as_json && std::io::stdout().is_terminal();
    let mut mid_line = false;
    let mut cancelled = false;
    let mut answer = String::new();
    loop {
        let message = tokio::select! {
            m = events.message() => m,
            _ = tokio::signal::ctrl_c(), if !cancelled => {
                cancelled = true;
                eprintln!("^C cancelling…");
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
            Err(status) => {
                return Err(match status.code() {
                    tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown => {
                        CliError::unreachable(
                            "agentd stopped during the one-shot; its state is kept for diagnosis \
                             (`agentx oneshots`)",
                        )
                    }
                    _ => CliError::from_status("the one-shot", &status),
                });
            }
        };
        use turn_event::Event;
        match event.event {
            None => {}
            Some(Event::Started(s)) if as_json => {
                emit(&json!({"type": "started", "oneshot_id": s.oneshot_id}));
            }
            Some(Event::Started(_)) => {}
            Some(Event::TextDelta(delta)) => {
                if as_json {
                    emit(&json!({"type": "text_delta", "delta": delta}));
                } else if stream {
                    print!("{delta}");
                    let _ = std::io::stdout().flush();
                    mid_line = !delta.ends_with('\n');
                }
            }
            Some(Event::AnswerChunk(piece)) => answer.push_str(&piece),
            Some(Event::ToolCall(c)) => {
                if as_json {
                    emit(
                        &json!({"type": "tool_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments}),
                    );
                } else {
                    eprintln!("» {}: {}", c.name, crate::turn::shown_call(&c.arguments));
                }
            }
            Some(Event::ApprovalRequest(r)) => {
                // Never asked for a one-shot; answer no should it happen.
                let answer = ApprovalDecision {
                    call_id: r.call_id,
                    decision: approval_decision::Decision::No as i32,
                };
                let _ = tx.send(input(turn_input::Input::Approval(answer))).await;
            }
            Some(Event::ToolResult(r)) => {
                if as_json {
                    let mut event = json!({"type": "tool_result", "call_id": r.call_id, "exit_code": r.exit_code,
                        "output": r.output, "denied": r.denied, "timed_out": r.timed_out});
                    if !r.not_run.is_empty() {
                        event["not_run"] = json!(r.not_run);
                    }
                    emit(&event);
                } else if !r.not_run.is_empty() {
                    eprintln!("  ↳ not run: {}", r.not_run);
                } else if r.denied {
                    eprintln!("  ↳ denied (one-shots run tools only with --auto)");
                } else {
                    let status = r
                        .exit_code
                        .map_or("killed".to_owned(), |c| format!("exit {c}"));
                    eprintln!(
                        "  ↳ {status}, {} line(s) of output",
                        r.output.lines().count()
                    );
                }
            }
            Some(Event::Notice(text)) => {
                if as_json {
                    emit(&json!({"type": "notice", "message": text}));
                } else {
                    eprintln!("agentx: {text}");
                }
            }
            Some(Event::Retry(r)) => {
                if as_json {
                    emit(
                        &json!({"type": "retry", "attempt": r.attempt, "max_attempts": r.max_attempts,
                        "delay_ms": r.delay_ms, "reason": r.reason}),
                    );
                } else {
                    if mid_line {
                        println!();
                        mid_line = false;
                    }
                    eprintln!(
                        "agentx: retrying {}/{} in {:.1}s: {}",
                        r.attempt,
                        r.max_attempts,
                        r.delay_ms as f64 / 1000.0,
                        r.reason
                    );
                }
            }
            Some(Event::Usage(_)) => {}
            Some(Event::Finished(mut f)) => {
                if f.text_in_chunks {
                    f.text = std::mem::take(&mut answer);
                }
                let status = match TurnStatus::try_from(f.status) {
                    Ok(TurnStatus::Completed) => "completed",
                    Ok(TurnStatus::Interrupted) => "interrupted",
                    _ => "failed",
                };
                if as_json {
                    let mut result = json!({"type": "result", "status": status, "text": f.text,
                        "oneshot_id": f.oneshot_id, "usage": usage_json(f.usage.as_ref())});
                    if !f.error.is_empty() {
                        result["error"] = json!(f.error);
                    }
                    if !f.cut_short.is_empty() {
                        result["cut_short"] = json!(f.cut_short);
                    }
                    emit(&result);
                } else if stream {
                    if mid_line {
                        println!();
                    }
                } else if status == "completed" {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(f.text.as_bytes());
                    if !f.text.ends_with('\n') {
                        let _ = out.write_all(b"\n");
                    }
                }
                if !as_json && !f.cut_short.is_empty() {
                    eprintln!("{}", crate::turn::cut_short_line(&f.cut_short));
                }
                return match status {
                    "completed" => Ok(()),
                    "interrupted" if crate::turn::daemon_stopped(&f) => {
                        Err(CliError::unreachable(format!(
                            "agentd stopped during the one-shot; its state is kept as {} \
                             (agentx oneshots)",
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
                };
            }
        }
    }
}
