//! Running one turn from the client: opens the bidirectional stream, renders
//! events as they come, answers approval requests, and cancels on Ctrl-C.

use std::io::IsTerminal as _;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use agentx_shared::proto::turns_client::TurnsClient;
use agentx_shared::proto::{
    ApprovalDecision, CallerEnvironment, RetryNotice, ToolResultEvent, TurnEvent, TurnFinished,
    TurnInput, TurnStart, TurnStatus, approval_decision, turn_event, turn_input,
};

use crate::error::{CliError, CliResult};
use crate::typeahead::{Key, TypeAhead};
use crate::ui::{Line, Ui};

/// Input to a running turn.
pub fn input(input: turn_input::Input) -> TurnInput {
    TurnInput { input: Some(input) }
}

/// Opens a turn's stream with `start`: the sender for approvals and
/// cancellation, and the events.
pub async fn open(
    channel: &Channel,
    mut start: TurnStart,
    what: &str,
) -> CliResult<(mpsc::Sender<TurnInput>, tonic::Streaming<TurnEvent>)> {
    let max = agentx_shared::limits::MAX_MESSAGE;
    if start.message.len() > max {
        return Err(CliError::usage(format!(
            "the message is {} bytes; agentx accepts at most {} KiB ({max} bytes) per message",
            start.message.len(),
            max >> 10
        )));
    }
    if start.caller.is_none() {
        start.caller = Some(caller_environment());
    }
    let (tx, rx) = mpsc::channel::<TurnInput>(8);
    tx.send(input(turn_input::Input::Start(start)))
        .await
        .map_err(|_| CliError::failed(format!("cannot start {what}")))?;
    let events = TurnsClient::new(channel.clone())
        .max_decoding_message_size(agentx_shared::limits::MAX_TURN_EVENT)
        .max_encoding_message_size(agentx_shared::limits::MAX_TURN_EVENT)
        .run_turn(ReceiverStream::new(rx))
        .await
        .map_err(|status| CliError::from_status(what, &status))?
        .into_inner();
    Ok((tx, events))
}

/// This process's environment and umask: tool commands run as they would in
/// the terminal that started the turn.
pub fn caller_environment() -> CallerEnvironment {
    use std::os::unix::ffi::OsStringExt as _;
    let vars = std::env::vars_os()
        .map(|(name, value)| {
            let mut entry = name.into_vec();
            entry.push(b'=');
            entry.extend(value.into_vec());
            entry
        })
        .collect();
    CallerEnvironment {
        vars,
        umask: current_umask(),
    }
}

/// The umask, read without changing it (Linux 4.7+ reports it in
/// `/proc/self/status`); `None` where it cannot be read.
fn current_umask() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(line.trim(), 8).ok()
}

/// What a user is told when agentd stopped during their turn.
const STOPPED_DURING_TURN: &str = "agentd stopped during the turn; it is kept as interrupted — `agentx` will offer to continue it";

/// A turn's stream that broke: agentd stopped or died mid-turn (its state
/// is on disk, marked interrupted), or it answered with an error.
pub fn cut_short(status: &tonic::Status) -> CliError {
    use tonic::Code;
    match status.code() {
        Code::Unavailable | Code::Cancelled | Code::Unknown => {
            CliError::unreachable(STOPPED_DURING_TURN)
        }
        _ => CliError::from_status("the turn", status),
    }
}

/// Whether `err` says agentd stopped in the middle of a turn.
pub fn stopped_mid_turn(err: &CliError) -> bool {
    err.message == STOPPED_DURING_TURN
}

/// Whether a finished turn ended because agentd stopped.
pub fn daemon_stopped(finished: &TurnFinished) -> bool {
    finished.end_kind == agentx_shared::proto::TurnEndKind::DaemonStopped as i32
}

/// Runs a turn to its `finished` event; also returns the conversation it
/// ran on (agentd may continue a fork instead: the remote store's rule for
/// two machines at once).
pub async fn run(
    channel: &Channel,
    start: TurnStart,
    ui: &mut Ui,
) -> CliResult<(TurnFinished, String)> {
    // Keys pressed during the turn are read here, never echoed into it.
    let mut keys = Some(Reading::start(ui));
    let result = run_reading(channel, start, ui, &mut keys).await;
    if let Some(keys) = keys {
        keys.finish(ui);
    }
    ui.end_live();
    ui.set_typing("");
    result
}

/// How the keys of a running turn are read: into the composer's pane, or
/// the plain way (typed lines shown under the spinner).
enum Reading {
    Live(crate::live::keys::Keys),
    Plain(TypeAhead),
}

/// A key read during a turn.
enum Got {
    Key(Key),
    Event(crossterm::event::Event),
}

impl Reading {
    /// Starts reading: the composer where the terminal can take it.
    fn start(ui: &mut Ui) -> Self {
        if ui.start_live() {
            return Self::Live(crate::live::keys::Keys::start());
        }
        ui.end_live();
        let partial = std::mem::take(&mut ui.typed.partial);
        Self::Plain(TypeAhead::start(ui.interactive, partial))
    }

    /// Stops reading; what was typed is kept in `ui`.
    fn finish(self, ui: &mut Ui) {
        match self {
            Self::Plain(keys) => ui.take_typed(keys.finish()),
            Self::Live(keys) => {
                for event in keys.finish() {
                    ui.live_event(&event);
                }
            }
        }
    }
}

/// The next key of a running turn that asks for something.
async fn next_key(keys: &mut Option<Reading>) -> Got {
    match keys {
        Some(Reading::Plain(keys)) => Got::Key(keys.next().await),
        Some(Reading::Live(keys)) => Got::Event(keys.next().await),
        None => std::future::pending().await,
    }
}

/// [`run`], with the keys pressed meanwhile read by `keys`.
async fn run_reading(
    channel: &Channel,
    start: TurnStart,
    ui: &mut Ui,
    keys: &mut Option<Reading>,
) -> CliResult<(TurnFinished, String)> {
    let mut ran_on = start.session_id.clone();
    let send = input;
    ui.start_waiting("thinking…");
    let (tx, mut events) = match open(channel, start, "the turn").await {
        Ok(opened) => opened,
        Err(mut e) => {
            ui.stop_waiting();
            e.not_started = e.exit == crate::error::Exit::Unreachable;
            return Err(e);
        }
    };
    let mut cancelled = false;
    let mut answer = String::new();
    // The line the running command shows (its live tail goes under it).
    let mut running = String::new();
    // On a terminal, each call is shown once it is done, folded; meanwhile
    // the spinner names it.
    let folded = ui.stream && std::io::stderr().is_terminal();
    let mut calls: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    // The pane's spinner and timer move on.
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    loop {
        let message = tokio::select! {
            m = events.message() => m,
            _ = tokio::signal::ctrl_c(), if !cancelled => {
                cancelled = true;
                ui.interrupted("cancelling the turn…");
                let _ = tx.send(send(turn_input::Input::Cancel(true))).await;
                continue;
            }
            _ = tick.tick(), if ui.live_up() => {
                ui.redraw();
                continue;
            }
            key = next_key(keys) => {
                let key = match key {
                    Got::Key(key) => key,
                    Got::Event(event) => {
                        let asked = ui.live_event(&event);
                        if asked == crate::live::composer::Asked::Interrupt && !cancelled {
                            cancelled = true;
                            ui.info("cancelling the turn…");
                            let _ = tx.send(send(turn_input::Input::Cancel(true))).await;
                        }
                        continue;
                    }
                };
                match key {
                    Key::Interrupt if !cancelled => {
                        cancelled = true;
                        ui.info("Esc: cancelling the turn…");
                        let _ = tx.send(send(turn_input::Input::Cancel(true))).await;
                    }
                    Key::Interrupt => {}
                    Key::Typing(text) => ui.set_typing(&text),
                    Key::Queued(line) => ui.note(&format!(
                        "  queued, sent when this turn ends: {}",
                        crate::show::visible(&line)
                    )),
                }
                continue;
            }
        };
        let event = match message {
            Ok(Some(event)) => event,
            Ok(None) => {
                ui.stop_waiting();
                return Err(CliError::unreachable(
                    "agentd ended the turn without a result",
                ));
            }
            Err(status) => {
                ui.stop_waiting();
                return Err(cut_short(&status));
            }
        };
        use turn_event::Event;
        match event.event {
            Some(Event::Started(started)) => {
                if !started.session_id.is_empty() {
                    ran_on = started.session_id;
                }
            }
            Some(Event::Usage(_)) | None => {}
            Some(Event::TextDelta(delta)) => ui.text(&delta),
            Some(Event::AnswerChunk(piece)) => answer.push_str(&piece),
            Some(Event::ToolCall(call)) => {
                let shown = shown_call(&call.arguments);
                if folded {
                    ui.end_text();
                    calls.insert(call.call_id, folded_label(&call.name, &call.arguments));
                } else {
                    ui.info(&format!("» {}: {shown}", call.name));
                }
                running = format!("running {shown}");
                ui.start_running(&running);
            }
            Some(Event::ApprovalRequest(request)) => {
                if folded {
                    // The call's line waits for its result: the question
                    // shows the command whole now (a shell command after
                    // `$`; another tool's question names it).
                    let shell = calls
                        .get(&request.call_id)
                        .is_none_or(|label| label.starts_with("$ "));
                    ui.info(&format!(
                        "{}{}",
                        if shell { "$ " } else { "" },
                        crate::show::visible_lines(&request.command)
                    ));
                } else if shorten(&request.command) != request.command {
                    // The line above shortened a long command: the question
                    // shows it whole.
                    ui.info(&format!(
                        "  {}",
                        crate::show::visible_lines(&request.command)
                    ));
                }
                // Why it asks (the sandbox cannot confine it, or it was
                // denied and may run outside it).
                if !request.note.is_empty() {
                    ui.info(&format!(
                        "agentx: {}",
                        crate::show::visible_lines(&request.note)
                    ));
                }
                // The question reads its own key: the reader pauses.
                if let Some(reading) = keys.take() {
                    reading.finish(ui);
                }
                ui.put_live_aside();
                let decision = ask_approval(ui).await;
                *keys = Some(Reading::start(ui));
                if decision == approval_decision::Decision::Unspecified {
                    cancelled = true;
                    let _ = tx.send(send(turn_input::Input::Cancel(true))).await;
                } else {
                    let answer = ApprovalDecision {
                        call_id: request.call_id,
                        decision: decision as i32,
                    };
                    let _ = tx.send(send(turn_input::Input::Approval(answer))).await;
                }
                if decision == approval_decision::Decision::Always {
                    ui.answered_always = true;
                }
                if decision == approval_decision::Decision::Always && crate::ui::in_repl() {
                    ui.info(
                        "approval auto (always, this conversation) — /approvals ask takes it back",
                    );
                }
                // An approved command shows its timer and live tail, as
                // one that needed no approval does.
                match decision {
                    approval_decision::Decision::Yes | approval_decision::Decision::Always => {
                        ui.start_running(&running);
                    }
                    _ => ui.start_waiting("working…"),
                }
            }
            Some(Event::ToolOutput(piece)) => ui.tool_output(&piece.text),
            Some(Event::ToolResult(result)) => {
                match calls.remove(&result.call_id) {
                    Some(shown) => {
                        let tail = ui.tool_lines.div_ceil(2);
                        let styled = crate::ui::color_wanted();
                        let lines = crate::render::tool_block::lines(&shown, &result, tail, styled);
                        ui.shown_lines(&lines);
                    }
                    None => show_tool_result(ui, &result),
                }
                ui.start_waiting("thinking…");
            }
            Some(Event::Notice(text)) => ui.info(&format!("agentx: {text}")),
            Some(Event::Retry(r)) => show_retry(ui, &r),
            Some(Event::Compacted(c)) => ui.info(&compaction_line(&c)),
            Some(Event::Finished(finished)) => {
                return Ok((show_finished(ui, finished, answer), ran_on));
            }
        }
    }
}

/// One line for a tool call's result.
fn show_tool_result(ui: &mut Ui, result: &ToolResultEvent) {
    if !result.not_run.is_empty() {
        ui.info(&format!("  ↳ not run: {}", result.not_run));
        return;
    }
    let status = if result.denied {
        "declined".to_owned()
    } else if result.timed_out {
        "timed out".to_owned()
    } else {
        match result.exit_code {
            Some(code) => format!("exit {code}"),
            None => "killed".to_owned(),
        }
    };
    for line in head_and_tail(&result.output, ui.tool_lines) {
        ui.info(&format!("  │ {line}"));
    }
    ui.info(&format!(
        "  ↳ {status}, {} of output",
        agentx_shared::plural::count(output_lines(&result.output), "line")
    ));
}

/// A command's output (without agentd's status line) cut to its first and
/// last lines, `n` in all, with a line saying how many were left out.
pub fn head_and_tail(output: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = output.lines().skip(1).collect();
    if n == 0 {
        return Vec::new();
    }
    if lines.len() <= n {
        return lines
            .iter()
            .map(|l| crate::show::visible(l).into_owned())
            .collect();
    }
    let head = n.div_ceil(2);
    let tail = n - head;
    let mut shown: Vec<String> = lines[..head]
        .iter()
        .map(|l| crate::show::visible(l).into_owned())
        .collect();
    shown.push(format!(
        "… {} …",
        agentx_shared::plural::count(lines.len() - n, "more line")
    ));
    shown.extend(
        lines[lines.len() - tail..]
            .iter()
            .map(|l| crate::show::visible(l).into_owned()),
    );
    shown
}

/// The lines of a command's output, without the status line agentd puts
/// first for the model (`exit code 0`).
pub fn output_lines(output: &str) -> u64 {
    output.lines().skip(1).count() as u64
}

/// The line a compaction shows: sizes, and why it ran.
pub fn compaction_line(c: &agentx_shared::proto::CompactionEvent) -> String {
    format!(
        "{} ({})",
        agentx_shared::conversation::Item::compaction_line(c.tokens_before, c.tokens_after),
        compaction_note(c)
    )
}

/// Why a compaction ran and how it went.
pub fn compaction_note(c: &agentx_shared::proto::CompactionEvent) -> String {
    let why = match c.reason.as_str() {
        "auto" => "the context was nearly full",
        "overflow" => "the request did not fit the window",
        "model" => "the new model's window is smaller",
        _ => "asked",
    };
    let how = if c.trimmed_only {
        "trimmed: no summary could be written"
    } else {
        "summarised"
    };
    format!("{why}; {how}; the transcript keeps everything")
}

/// A retry, saying so when part of an answer was already shown.
fn show_retry(ui: &mut Ui, r: &RetryNotice) {
    if ui.streamed {
        ui.info("agentx: (the answer above was cut off)");
        ui.streamed = false;
    }
    // One line per attempt at a terminal: the whole cause is said once,
    // when the turn fails.
    ui.info_one_line(&format!(
        "agentx: retrying {}/{} in {:.1}s: {}",
        r.attempt,
        r.max_attempts,
        r.delay_ms as f64 / 1000.0,
        r.reason
    ));
}

/// The end of the turn shown: the answer (whole, when it came in pieces)
/// and whether it was cut short.
fn show_finished(ui: &mut Ui, mut finished: TurnFinished, answer: String) -> TurnFinished {
    ui.stop_waiting();
    ui.end_text();
    ui.streamed = false;
    if finished.text_in_chunks {
        finished.text = answer;
    }
    if finished.status == TurnStatus::Completed as i32 {
        ui.answer(&finished.text);
    }
    if !finished.cut_short.is_empty() {
        ui.info(&cut_short_line(&finished.cut_short));
    }
    finished
}

/// The `command` argument of a shell call, for display.
pub fn command_of(arguments: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(arguments).ok()?;
    v["command"].as_str().map(str::to_owned)
}

/// Characters of a command (or arguments) shown; the rest is counted.
const SHOWN_CHARS: usize = 200;

/// `text`, or its first [`SHOWN_CHARS`] characters and its size.
pub fn shorten(text: &str) -> String {
    let Some((end, _)) = text.char_indices().nth(SHOWN_CHARS) else {
        return text.to_owned();
    };
    // agentd already cut a very long one: keep the size it gave.
    let size = text
        .rsplit_once("… (")
        .and_then(|(_, tail)| tail.strip_suffix(" bytes)"))
        .filter(|n| n.parse::<u64>().is_ok())
        .map_or_else(|| text.len().to_string(), str::to_owned);
    format!("{}… ({size} bytes)", &text[..end])
}

/// A tool call as shown: its command (or raw arguments), shortened.
pub fn shown_call(arguments: &str) -> String {
    shorten(&command_of(arguments).unwrap_or_else(|| arguments.to_owned()))
}

/// A tool call's folded header at a terminal: `$ COMMAND` for the shell,
/// `⚙ SERVER TOOL ARGUMENTS` for an MCP server's tool (`mcp__S__T`), the
/// name and arguments for anything else.
pub fn folded_label(name: &str, arguments: &str) -> String {
    if name == "shell" {
        return format!("$ {}", shown_call(arguments));
    }
    let shown = match name
        .strip_prefix("mcp__")
        .and_then(|rest| rest.split_once("__"))
    {
        Some((server, tool)) => format!("{server} {tool}"),
        None => name.to_owned(),
    };
    format!("⚙ {shown} {}", shorten(arguments))
}

/// The line saying the answer is partial.
pub fn cut_short_line(reason: &str) -> String {
    format!(
        "agentx: the answer was cut short by the model server ({reason}); send \"continue\" \
         for the rest"
    )
}

/// Asks y / n / always; `Unspecified` means the user interrupted. At a
/// terminal one key answers (Esc interrupts).
async fn ask_approval(ui: &mut Ui) -> approval_decision::Decision {
    use approval_decision::Decision;
    ui.stop_waiting();
    ui.end_text();
    if ui.interactive {
        use crate::typeahead::Answer;
        eprint!("run it? [y]es / [n]o / [a]lways for this conversation / Esc interrupts: ");
        let answer = tokio::task::spawn_blocking(crate::typeahead::approval_key)
            .await
            .unwrap_or(Answer::Gone);
        let (word, decision) = match answer {
            Answer::Yes => ("yes", Decision::Yes),
            Answer::No => ("no", Decision::No),
            Answer::Always => ("always", Decision::Always),
            Answer::Interrupt => ("interrupted", Decision::Unspecified),
            Answer::Gone => ("no", Decision::No),
        };
        eprintln!("{word}");
        return decision;
    }
    loop {
        match ui
            .read_line("run it? [y]es / [n]o / [a]lways for this conversation: ")
            .await
        {
            Line::Text(answer) => match answer.trim().to_lowercase().as_str() {
                "y" | "yes" => return Decision::Yes,
                "n" | "no" => return Decision::No,
                "a" | "always" => return Decision::Always,
                _ if !ui.interactive => return Decision::No,
                _ => eprintln!("please answer y, n or a"),
            },
            Line::Interrupted => return Decision::Unspecified,
            Line::Eof => return Decision::No,
        }
    }
}

/// Exit status and message for a finished turn.
pub fn check(finished: &TurnFinished) -> CliResult<()> {
    match TurnStatus::try_from(finished.status) {
        Ok(TurnStatus::Completed) => Ok(()),
        Ok(TurnStatus::Interrupted) if daemon_stopped(finished) => {
            Err(CliError::unreachable(STOPPED_DURING_TURN))
        }
        Ok(TurnStatus::Interrupted) => Err(CliError::failed("the turn was interrupted")),
        _ => Err(CliError::failed(format!(
            "the turn failed: {}",
            finished.error
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::folded_label;

    #[test]
    fn a_folded_call_is_labelled_as_the_tool_it_is() {
        assert_eq!(
            folded_label("shell", r#"{"command":"cargo test"}"#),
            "$ cargo test"
        );
        assert_eq!(
            folded_label("mcp__docs__search", r#"{"q":"x"}"#),
            r#"⚙ docs search {"q":"x"}"#
        );
        assert_eq!(folded_label("python", "{}"), "⚙ python {}");
    }
}
