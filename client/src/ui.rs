//! Terminal I/O for the chat: reading lines (rustyline on a terminal, plain
//! stdin otherwise), the waiting spinner, and how turn activity is shown.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::completion::{ChatHelper, Known};
use crate::error::{CliError, CliResult};
use crate::history::History;

/// The REPL's line editor.
pub type LineEditor = rustyline::Editor<ChatHelper, rustyline::history::DefaultHistory>;

/// Whether this process runs the REPL: hints then name slash commands.
static IN_REPL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, hints name slash commands (`/rewind N`), not `agentx …`.
pub fn entering_repl() {
    IN_REPL.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this process runs the REPL.
pub fn in_repl() -> bool {
    IN_REPL.load(std::sync::atomic::Ordering::Relaxed)
}

/// How the user runs `command` (e.g. "rewind N") from where they are:
/// `/rewind N` in the REPL, `agentx rewind N` at the shell.
pub fn how(command: &str) -> String {
    how_either(command, command)
}

/// [`how`] for a command spelled differently at the shell and in the REPL
/// (`agentx rollback --undo`, `/rollback undo`).
pub fn how_either(shell: &str, repl: &str) -> String {
    if IN_REPL.load(std::sync::atomic::Ordering::Relaxed) {
        format!("/{repl}")
    } else {
        format!("agentx {shell}")
    }
}

/// Where chat input comes from.
pub enum Input {
    /// An interactive terminal with line editing, history and completion.
    Editor(Box<LineEditor>),
    /// Lines from a pipe or file: one message or command per line.
    Lines,
}

/// What reading a line produced.
pub enum Line {
    Text(String),
    /// Ctrl-C at the prompt: discard the line.
    Interrupted,
    /// Ctrl-D or end of input.
    Eof,
}

pub struct Ui {
    pub input: Input,
    /// What Tab may offer now.
    known: std::sync::Arc<std::sync::Mutex<Known>>,
    /// Where accepted lines are kept across sessions.
    history: History,
    /// stdin is a terminal: prompts, history, spinner.
    pub interactive: bool,
    spinner: Option<ProgressBar>,
    /// The current line of streamed text has unfinished output.
    mid_line: bool,
    /// stdout is a terminal: answers stream; otherwise only final answers
    /// are printed, so a retried partial answer never reaches a script.
    pub stream: bool,
    /// Some answer text was streamed in this model attempt.
    pub streamed: bool,
    /// How many lines of a command's output are shown (head and tail).
    pub tool_lines: usize,
    /// The running command's line and its output so far (the live tail).
    running: Option<(String, String)>,
    /// What was typed during turns and not sent yet.
    pub typed: crate::typeahead::Typed,
    /// `[a]lways` was answered since the chat last looked.
    pub answered_always: bool,
    /// Notes that wait for the streamed line to end.
    notes: Vec<String>,
    /// The spinner's own line.
    spin_message: String,
    /// What is being typed during the turn (not sent yet).
    typing: String,
    /// Enter typed between prompts stays Enter (terminal only).
    enter: Option<crate::typeahead::EnterStaysEnter>,
    /// The streamed answer, rendered as Markdown a block at a time.
    markdown: Option<crate::render::markdown::stream::Stream>,
    /// The composer and its pane while a turn runs (a terminal only).
    live: Option<crate::live::Live>,
    /// The spinner's line is shown (in the pane), since when, with a timer.
    spin_on: Option<(std::time::Instant, bool)>,
    /// The pane's last line: model, approval mode, sandbox, title, meter.
    pub status: String,
}

impl Ui {
    /// Terminal I/O with no history kept on disk.
    pub fn new() -> Self {
        Self::with_history(History::none())
    }

    /// Terminal I/O whose line editor starts with `history`'s lines and
    /// keeps each accepted one there.
    pub fn with_history(history: History) -> Self {
        let known = std::sync::Arc::default();
        let interactive = std::io::stdin().is_terminal();
        let input = if interactive {
            let config = rustyline::Config::builder()
                .history_ignore_space(true)
                .completion_type(rustyline::CompletionType::List)
                .max_history_size(crate::history::MAX_LINES)
                .map(|b| b.build());
            match config.and_then(LineEditor::with_config) {
                Ok(mut editor) => {
                    editor.set_helper(Some(ChatHelper {
                        known: std::sync::Arc::clone(&known),
                    }));
                    for line in history.load() {
                        let _ = editor.add_history_entry(line);
                    }
                    crate::completion::bind_newline_keys(&mut editor);
                    Input::Editor(Box::new(editor))
                }
                Err(_) => Input::Lines,
            }
        } else {
            Input::Lines
        };
        Self {
            interactive: interactive && matches!(input, Input::Editor(_)),
            input,
            known,
            history,
            spinner: None,
            mid_line: false,
            stream: std::io::stdout().is_terminal(),
            streamed: false,
            tool_lines: agentx_shared::config::DEFAULT_TOOL_OUTPUT_LINES,
            running: None,
            typed: crate::typeahead::Typed::default(),
            answered_always: false,
            notes: Vec::new(),
            spin_message: String::new(),
            typing: String::new(),
            enter: interactive
                .then(crate::typeahead::EnterStaysEnter::start)
                .flatten(),
            markdown: None,
            live: None,
            spin_on: None,
            status: String::new(),
        }
    }

    /// Puts the composer up for a turn, at a terminal that can take it:
    /// what was typed before goes into it. False: keys are read the plain way.
    pub fn start_live(&mut self) -> bool {
        if self.live.is_some() {
            return self.take_live_up();
        }
        if !self.interactive || !self.stream || !crate::live::possible() {
            return false;
        }
        let Some(live) = crate::live::Live::start(self.typed.partial.clone()) else {
            return false;
        };
        self.typed.partial.clear();
        self.live = Some(live);
        self.redraw();
        true
    }

    /// Whether the composer's pane is up.
    pub fn live_up(&self) -> bool {
        self.live.as_ref().is_some_and(crate::live::Live::up)
    }

    /// A key (or paste) for the composer; says whether it interrupts.
    pub fn live_event(&mut self, event: &crossterm::event::Event) -> crate::live::composer::Asked {
        let Some(live) = &mut self.live else {
            return crate::live::composer::Asked::Nothing;
        };
        let asked = live.composer.event(event);
        self.redraw();
        asked
    }

    /// Takes the pane off (a question asks on the plain terminal), keeping
    /// what was typed.
    pub fn put_live_aside(&mut self) {
        if let Some(live) = &mut self.live {
            live.put_aside();
        }
    }

    /// Puts the pane back after [`Ui::put_live_aside`].
    pub fn take_live_up(&mut self) -> bool {
        let up = self.live.as_mut().is_some_and(crate::live::Live::take_up);
        self.redraw();
        up
    }

    /// Ends the composer: queued messages are sent next, the rest goes
    /// into the prompt.
    pub fn end_live(&mut self) {
        if let Some(live) = self.live.take() {
            let composer = live.end();
            self.typed.queued.extend(composer.queued);
            self.typed.partial = composer.text;
            self.typed.eof |= composer.eof;
        }
    }

    /// Prints `lines` above the pane (which is up).
    fn above(&mut self, lines: &[String]) {
        let pane = self.pane_lines();
        if let Some(live) = &mut self.live {
            live.pane.print_above(lines, &pane);
        }
    }

    /// A line of activity: above the pane when it is up, else on stderr.
    fn err_line(&mut self, line: String) {
        if self.live_up() {
            self.above(&[line]);
        } else {
            eprintln!("{line}");
        }
    }

    /// The pane's lines: the spinner's line and the running command's
    /// tail, the queued messages, the composer, the status line.
    fn pane_lines(&self) -> Vec<String> {
        let Some(live) = &self.live else {
            return Vec::new();
        };
        let styled = color_wanted();
        let dim = |s: String| {
            if styled {
                format!("\x1b[2m{s}\x1b[22m")
            } else {
                s
            }
        };
        let mut lines = Vec::new();
        if let Some((since, timer)) = self.spin_on {
            const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
            let elapsed = since.elapsed();
            let frame = FRAMES[(elapsed.as_millis() / 80) as usize % FRAMES.len()];
            let message = crate::show::visible(&self.spin_message);
            if timer {
                lines.push(format!("{frame} ({}) {message}", elapsed_text(elapsed)));
            } else {
                lines.push(format!("{frame} {message}"));
            }
            if let Some((_, output)) = &self.running {
                let all: Vec<&str> = output.lines().collect();
                for l in &all[all.len().saturating_sub(self.tool_lines)..] {
                    let shown: String = crate::show::visible(l).chars().take(200).collect();
                    lines.push(format!("  │ {shown}"));
                }
            }
        }
        let composer = &live.composer;
        for queued in &composer.queued {
            lines.push(format!(
                "  queued, sent when this turn ends: {}",
                crate::show::one_line(queued, 200)
            ));
        }
        if !composer.queued.is_empty() {
            lines.push(dim(
                "  Up (on an empty line) edits the newest queued message, Ctrl-X drops it"
                    .to_owned(),
            ));
        }
        if composer.text.is_empty() {
            lines.push(format!(
                "\x1b[7m \x1b[27m{}",
                dim(" type ahead: Enter queues it for after this turn · Esc interrupts".to_owned())
            ));
        } else {
            lines.extend(crate::live::composer::lines(
                &composer.text,
                composer.cursor,
            ));
        }
        if !self.status.is_empty() {
            lines.push(dim(format!("  {}", self.status)));
        }
        lines
    }

    /// Keeps what was typed during a turn: lines to send, the rest for the
    /// next prompt.
    pub fn take_typed(&mut self, typed: crate::typeahead::Typed) {
        self.typed.queued.extend(typed.queued);
        self.typed.partial = typed.partial;
        self.typed.eof |= typed.eof;
    }

    /// The next message typed during a turn, not sent yet.
    pub fn next_queued(&mut self) -> Option<String> {
        if self.typed.queued.is_empty() {
            return None;
        }
        let line = self.typed.queued.remove(0);
        Some(match &self.input {
            Input::Editor(editor) => crate::completion::resolve_tabs(editor, &line),
            Input::Lines => line,
        })
    }

    /// A note on stderr that never breaks a streamed line: it waits for
    /// the line's end.
    pub fn note(&mut self, line: &str) {
        if self.live_up() {
            self.above(&[crate::show::terminal_text(line).into_owned()]);
        } else if self.mid_line {
            self.notes.push(line.to_owned());
        } else if let Some(bar) = &self.spinner {
            // Above the spinner, which goes on.
            bar.println(crate::show::terminal_text(line));
        } else {
            self.info(line);
        }
    }

    /// What Tab completion may offer from now on.
    pub fn set_known(&self, known: Known) {
        if let Ok(mut k) = self.known.lock() {
            *k = known;
        }
    }

    /// Reads a message or command at the chat's prompt: kept in the
    /// prompt history.
    pub async fn read_message(&mut self, prompt: &str) -> Line {
        if std::mem::take(&mut self.typed.eof) {
            // Ctrl-D pressed during the turn.
            return Line::Eof;
        }
        let line = self.read_line(prompt).await;
        if let (Line::Text(text), Input::Editor(editor)) = (&line, &mut self.input)
            && History::keeps(text)
        {
            let _ = editor.add_history_entry(text.as_str());
            self.history.append(text);
        }
        line
    }

    /// Reads one line (an answer to a question: not kept in the prompt
    /// history); the prompt is shown only on a terminal. The wait
    /// runs off the async runtime, so the connection to agentd stays served
    /// (pings answered, a stopping daemon's goodbye taken) while the user
    /// thinks.
    pub async fn read_line(&mut self, prompt: &str) -> Line {
        let prompt = prompt.to_owned();
        match std::mem::replace(&mut self.input, Input::Lines) {
            Input::Editor(mut editor) => {
                if let Some(enter) = &mut self.enter
                    && !enter.drained
                {
                    // Lines typed as agentx started are taken as typed.
                    enter.drained = true;
                    let partial = std::mem::take(&mut self.typed.partial);
                    let mut early = crate::typeahead::drain(partial);
                    self.typed.partial = std::mem::take(&mut early.partial);
                    self.typed.queued.extend(early.queued);
                    if let Some(first) = self.next_queued() {
                        self.input = Input::Editor(editor);
                        return Line::Text(first);
                    }
                }
                let initial = crate::completion::resolve_tabs(
                    &editor,
                    &std::mem::take(&mut self.typed.partial),
                );
                let read = tokio::task::spawn_blocking(move || {
                    let line = editor.readline_with_initial(&prompt, (&initial, ""));
                    (editor, line)
                })
                .await;
                let Ok((editor, line)) = read else {
                    return Line::Eof;
                };
                let line = match line {
                    // A `\\` before a newline asked for the newline.
                    Ok(line) => Line::Text(line.replace("\\\n", "\n")),
                    Err(rustyline::error::ReadlineError::Interrupted) => Line::Interrupted,
                    Err(_) => Line::Eof,
                };
                self.input = Input::Editor(editor);
                line
            }
            Input::Lines => {
                let read = tokio::task::spawn_blocking(|| {
                    let mut line = String::new();
                    std::io::stdin().read_line(&mut line).map(|n| (n, line))
                })
                .await;
                match read {
                    Ok(Ok((0, _))) | Ok(Err(_)) | Err(_) => Line::Eof,
                    Ok(Ok((_, line))) => Line::Text(line.trim_end_matches(['\n', '\r']).to_owned()),
                }
            }
        }
    }

    /// Shows a spinner on stderr while waiting (terminal only).
    pub fn start_waiting(&mut self, message: &str) {
        self.spin(message, "{spinner} {msg}");
        self.spin_on = self.spin_on.map(|(since, _)| (since, false));
    }

    /// Shows a spinner and the time elapsed while a tool runs (terminal
    /// only), and under it the last lines of its output as they come.
    pub fn start_running(&mut self, message: &str) {
        self.spin(message, "{spinner} ({elapsed}) {msg}");
        self.running = Some((message.to_owned(), String::new()));
    }

    /// More output of the running command: the live tail shows its last
    /// lines (as many as `tool_lines`).
    pub fn tool_output(&mut self, text: &str) {
        let Some((_, output)) = &mut self.running else {
            return;
        };
        output.push_str(text);
        // Only the tail is ever shown: keep it short.
        if output.len() > 64 * 1024 {
            let cut = output.len() - 32 * 1024;
            let cut = (cut..output.len())
                .find(|i| output.is_char_boundary(*i))
                .unwrap_or(output.len());
            output.drain(..cut);
        }
        self.redraw();
    }

    /// What is being typed during the turn, shown under the spinner.
    pub fn set_typing(&mut self, text: &str) {
        text.clone_into(&mut self.typing);
        self.redraw();
    }

    /// The spinner's message: its line, the running command's live tail,
    /// what is being typed.
    pub fn redraw(&mut self) {
        if self.live_up() {
            let pane = self.pane_lines();
            if let Some(live) = &mut self.live {
                live.pane.draw(&pane);
            }
            return;
        }
        let Some(bar) = &self.spinner else {
            return;
        };
        let mut message = crate::show::terminal_text(&self.spin_message).into_owned();
        if let Some((_, output)) = &self.running {
            let lines: Vec<&str> = output.lines().collect();
            let tail = &lines[lines.len().saturating_sub(self.tool_lines)..];
            for l in tail {
                let shown: String = crate::show::visible(l).chars().take(200).collect();
                message.push_str(&format!("\n  │ {shown}"));
            }
        }
        if !self.typing.is_empty() {
            message.push_str(&format!("\n› {}", crate::show::visible(&self.typing)));
        }
        bar.set_message(message);
    }

    fn spin(&mut self, message: &str, template: &str) {
        self.stop_waiting();
        if self.live_up() {
            message.clone_into(&mut self.spin_message);
            self.spin_on = Some((std::time::Instant::now(), true));
            self.redraw();
            return;
        }
        if !self.interactive || !std::io::stderr().is_terminal() {
            return;
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        message.clone_into(&mut self.spin_message);
        bar.enable_steady_tick(Duration::from_millis(80));
        self.spinner = Some(bar);
        self.redraw();
    }

    pub fn stop_waiting(&mut self) {
        self.running = None;
        if let Some(bar) = self.spinner.take() {
            bar.finish_and_clear();
        }
        if self.spin_on.take().is_some() && self.live_up() {
            self.redraw();
        }
    }

    /// Streams answer text to stdout (terminal only), rendered as Markdown:
    /// each block is printed when it is complete; the spinner stays while
    /// the first one comes.
    pub fn text(&mut self, delta: &str) {
        if !self.stream {
            return;
        }
        self.streamed = true;
        let styled = color_wanted();
        let lines = self
            .markdown
            .get_or_insert_with(|| {
                // Code highlighting's syntaxes load beside the first answer,
                // not at start and not when its first code block is due.
                crate::render::markdown::highlight::warm_up_in_background();
                crate::render::markdown::stream::Stream::new(styled)
            })
            .push(delta);
        self.print_answer_lines(lines);
    }

    /// Prints rendered answer lines (already made safe), above the spinner.
    fn print_answer_lines(&mut self, lines: Vec<String>) {
        if lines.is_empty() {
            return;
        }
        if self.live_up() {
            self.above(&lines);
            return;
        }
        let mut text = String::new();
        for line in lines {
            text.push_str(&line);
            text.push('\n');
        }
        match &self.spinner {
            Some(bar) => bar.suspend(|| write_stdout(&text)),
            None => write_stdout(&text),
        }
    }

    /// Prints a whole answer (when it was not streamed).
    pub fn answer(&mut self, text: &str) {
        if self.stream || text.is_empty() {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(crate::show::terminal_text(text).as_bytes());
        if !text.ends_with('\n') {
            let _ = out.write_all(b"\n");
        }
        let _ = out.flush();
    }

    /// Ends the streamed answer with a newline if it lacks one.
    /// Says that Ctrl-C is cancelling `what`. A terminal that echoes
    /// control characters (ECHOCTL, the default) has already shown `^C`
    /// where the cursor was: the line goes on after it, so `^C` shows once.
    pub fn interrupted(&mut self, what: &str) {
        self.stop_waiting();
        if self.live_up() {
            self.above(&[format!("^C {what}")]);
        } else if echoes_ctrl_c() {
            if self.mid_line {
                println!(" {what}");
                self.mid_line = false;
            } else {
                eprintln!(" {what}");
            }
        } else {
            self.end_text();
            eprintln!("^C {what}");
        }
    }

    pub fn end_text(&mut self) {
        if let Some(mut markdown) = self.markdown.take() {
            let rest = markdown.finish();
            self.print_answer_lines(rest);
        }
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
        for note in std::mem::take(&mut self.notes) {
            self.err_line(crate::show::terminal_text(&note).into_owned());
        }
    }

    /// [`Ui::info`], cut to one line of the terminal (whole when stderr is
    /// not a terminal).
    pub fn info_one_line(&mut self, line: &str) {
        let width = console::Term::stderr()
            .size_checked()
            .map(|(_, cols)| usize::from(cols));
        match width {
            Some(cols) if self.interactive && cols > 1 => {
                let shown = crate::show::terminal_text(line).replace('\n', " ");
                let shown = console::truncate_str(&shown, cols - 1, "…").into_owned();
                self.stop_waiting();
                self.end_text();
                self.err_line(shown);
            }
            _ => self.info(line),
        }
    }

    /// Lines rendered by agentx (their outside text already made safe, the
    /// styling its own), to stderr like every other activity.
    pub fn shown_lines(&mut self, lines: &[String]) {
        self.stop_waiting();
        self.end_text();
        if self.live_up() {
            self.above(lines);
            return;
        }
        for line in lines {
            eprintln!("{line}");
        }
    }

    /// Activity and notices go to stderr, so stdout carries only answers.
    pub fn info(&mut self, line: &str) {
        self.stop_waiting();
        self.end_text();
        self.err_line(crate::show::terminal_text(line).into_owned());
    }
}

/// A running time as the spinner shows it: `7s`, `2m 5s`.
fn elapsed_text(elapsed: Duration) -> String {
    let secs = elapsed.as_secs();
    if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m {}s", secs / 60, secs % 60)
    }
}

/// Whether agentx styles what it prints: not when `NO_COLOR` is set.
pub fn color_wanted() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Writes `text` to stdout and flushes it.
fn write_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Asks `question` on the terminal (it says what may be answered) and
/// returns the answer, trimmed and lowercased; without a terminal, refuses
/// to guess.
pub fn ask(question: &str) -> crate::error::CliResult<String> {
    if !std::io::stdin().is_terminal() {
        return Err(crate::error::CliError::usage(format!(
            "{question} — no terminal to ask on: pass --yes to confirm"
        )));
    }
    let mut answer = String::new();
    crate::typeahead::with_enter_as_newline(|| {
        eprint!("{question} ");
        std::io::stdin().read_line(&mut answer)
    })
    .map_err(|e| crate::error::CliError::failed(e.to_string()))?;
    Ok(answer.trim().to_lowercase())
}

/// Asks a yes/no question on the terminal; without one, refuses to guess.
pub fn confirm(question: &str) -> crate::error::CliResult<bool> {
    Ok(matches!(
        ask(&format!("{question} [y/N]"))?.as_str(),
        "y" | "yes"
    ))
}

/// Whether the terminal on stdin echoes control characters as `^X`
/// (then it already printed the `^C` of a Ctrl-C).
pub fn echoes_ctrl_c() -> bool {
    use nix::sys::termios::{LocalFlags, tcgetattr};
    tcgetattr(std::io::stdin()).is_ok_and(|t| {
        t.local_flags
            .contains(LocalFlags::ECHO | LocalFlags::ECHOCTL)
    })
}

/// Writes `bytes` to stdout; a reader that went away (`| head -1`) ends
/// it quietly, as every other command does.
pub fn print_all(bytes: &[u8], what: &str) -> CliResult<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::failed(format!("writing {what}: {e}"))),
    }
}
