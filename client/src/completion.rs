//! Tab completion in the REPL: slash commands, then their arguments (conversation numbers
//! and ids for `/resume`, checkpoint and snapshot numbers, the words some commands take).
//!
//! The line editor runs off the async runtime, so it cannot ask agentd:
//! the chat refreshes what it may offer ([`Known`]) before each prompt.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Helper};

/// The slash commands, as `/help` lists them.
pub const COMMANDS: &[&str] = &[
    "new",
    "resume",
    "fork",
    "rename",
    "search",
    "status",
    "checkpoints",
    "rollback",
    "retry",
    "compact",
    "model",
    "approvals",
    "sandbox",
    "diff",
    "undo",
    "rewind",
    "clear",
    "help",
    "exit",
];

/// Alt-Enter and Ctrl-J insert a newline, and so does Enter after a `\\`
/// at the end of the line (the `\\` goes when the line is sent): a
/// message of several lines.
pub fn bind_newline_keys(editor: &mut crate::ui::LineEditor) {
    use rustyline::{Cmd, EventHandler, KeyCode, KeyEvent, Modifiers};
    editor.bind_sequence(KeyEvent(KeyCode::Enter, Modifiers::ALT), Cmd::Newline);
    editor.bind_sequence(KeyEvent::ctrl('J'), Cmd::Newline);
    editor.bind_sequence(
        KeyEvent(KeyCode::Enter, Modifiers::NONE),
        EventHandler::Conditional(Box::new(BackslashEnter)),
    );
    // Esc Esc: the rewind menu, as in Claude Code. At the prompt the
    // editor reads Esc as the start of a key sequence: a lone Esc waits for
    // the next key, and Esc Esc arrives as one Esc key.
    editor.bind_sequence(
        KeyEvent(KeyCode::Esc, Modifiers::NONE),
        EventHandler::Conditional(Box::new(EscEsc)),
    );
}

/// Set when Esc Esc asked for the rewind menu; taken by the chat loop.
static REWIND_ASKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether Esc Esc asked for the rewind menu since the last call.
pub fn rewind_asked() -> bool {
    REWIND_ASKED.swap(false, std::sync::atomic::Ordering::SeqCst)
}

/// Esc Esc: leaves the prompt as an interrupt would, asking for the menu.
struct EscEsc;

impl rustyline::ConditionalEventHandler for EscEsc {
    fn handle(
        &self,
        _: &rustyline::Event,
        _: rustyline::RepeatCount,
        _: bool,
        _: &rustyline::EventContext,
    ) -> Option<rustyline::Cmd> {
        REWIND_ASKED.store(true, std::sync::atomic::Ordering::SeqCst);
        Some(rustyline::Cmd::Interrupt)
    }
}

/// `text` typed before the prompt came, each Tab in it done as Tab does
/// at the prompt when one completion fits (else dropped).
pub fn resolve_tabs(editor: &crate::ui::LineEditor, text: &str) -> String {
    let mut out = String::new();
    for (i, piece) in text.split('\t').enumerate() {
        if i > 0
            && let Some(helper) = editor.helper()
        {
            let ctx = Context::new(editor.history());
            if let Ok((start, found)) = helper.complete(&out, out.len(), &ctx)
                && let [only] = found.as_slice()
            {
                out = format!("{}{}", &out[..start], only.replacement);
            }
        }
        out.push_str(piece);
    }
    out
}

/// Enter after a trailing `\\`: a newline.
struct BackslashEnter;

impl rustyline::ConditionalEventHandler for BackslashEnter {
    fn handle(
        &self,
        _: &rustyline::Event,
        _: rustyline::RepeatCount,
        _: bool,
        ctx: &rustyline::EventContext,
    ) -> Option<rustyline::Cmd> {
        let line = ctx.line();
        (ctx.pos() == line.len() && line.ends_with('\\')).then_some(rustyline::Cmd::Newline)
    }
}

/// What arguments may be offered now.
#[derive(Debug, Default, Clone)]
pub struct Known {
    /// This folder's conversation ids, newest first (numbered from 1).
    pub conversations: Vec<String>,
    pub checkpoints: usize,
    pub snapshots: usize,
}

/// The editor's helper: completes from the latest [`Known`].
#[derive(Clone, Default)]
pub struct ChatHelper {
    pub known: Arc<Mutex<Known>>,
}

/// What may follow `/command `.
fn arguments(command: &str, known: &Known) -> Vec<String> {
    let numbers = |n: usize| (1..=n).map(|i| i.to_string());
    match command {
        "resume" => numbers(known.conversations.len())
            .chain(known.conversations.iter().cloned())
            .collect(),
        "fork" => numbers(known.checkpoints).collect(),
        "rollback" => numbers(known.checkpoints)
            .chain(["undo".to_owned()])
            .collect(),
        "rewind" => numbers(known.snapshots).collect(),
        "retry" => vec!["new-chain".to_owned()],
        "undo" => vec!["force".to_owned()],
        "status" => vec!["verbose".to_owned()],
        "sandbox" => ["read-only", "workspace-write", "danger-full-access"]
            .map(str::to_owned)
            .to_vec(),
        _ => Vec::new(),
    }
}

/// Candidates for the word before the cursor in `line`: where it starts,
/// and what may replace it.
pub fn candidates(line: &str, known: &Known) -> (usize, Vec<String>) {
    let Some(rest) = line.strip_prefix('/') else {
        return (0, Vec::new());
    };
    match rest.split_once(' ') {
        None => (
            1,
            COMMANDS
                .iter()
                .filter(|c| c.starts_with(rest))
                .map(|c| format!("{c} "))
                .collect(),
        ),
        Some((command, arg)) if !arg.contains(' ') => {
            let start = line.len() - arg.len();
            let offered = arguments(command, known)
                .into_iter()
                .filter(|a| a.starts_with(arg))
                .collect();
            (start, offered)
        }
        Some(_) => (line.len(), Vec::new()),
    }
}

impl Completer for ChatHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let known = self.known.lock().map(|k| k.clone()).unwrap_or_default();
        let before = line.get(..pos).unwrap_or(line);
        let (start, offered) = candidates(before, &known);
        let pairs = offered
            .into_iter()
            .map(|c| Pair {
                display: c.trim_end().to_owned(),
                replacement: c,
            })
            .collect();
        Ok((start, pairs))
    }
}

impl Hinter for ChatHelper {
    type Hint = String;
}

impl Highlighter for ChatHelper {
    fn highlight_hint<'h>(&self, hint: &'h str) -> Cow<'h, str> {
        Cow::Borrowed(hint)
    }
}

impl Validator for ChatHelper {}

impl Helper for ChatHelper {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_then_their_arguments_are_offered() {
        let known = Known {
            conversations: vec!["1a2b-c3".into(), "1a2a-d4".into()],
            checkpoints: 2,
            snapshots: 3,
        };
        assert_eq!(candidates("/res", &known), (1, vec!["resume ".to_owned()]));
        assert_eq!(
            candidates("/r", &known).1,
            ["resume ", "rename ", "rollback ", "retry ", "rewind "]
        );
        assert_eq!(
            candidates("/resume 1a2b", &known),
            (8, vec!["1a2b-c3".to_owned()])
        );
        assert_eq!(candidates("/rollback ", &known).1, ["1", "2", "undo"]);
        assert_eq!(candidates("/rewind 3", &known).1, ["3"]);
        assert_eq!(candidates("hello /re", &known).1, Vec::<String>::new());
    }
}
