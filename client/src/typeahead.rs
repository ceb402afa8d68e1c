//! Keys pressed while a turn runs, read off a terminal without echo so they
//! never land in the answer: Esc interrupts, typed lines are queued for after.
//!
//! Also the single-key question (y / n / a / Esc) an approval asks.

use std::os::fd::AsFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::termios::{self, InputFlags, LocalFlags, SetArg, SpecialCharacterIndices, Termios};
use tokio::sync::mpsc;

/// What a key pressed during a turn asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Key {
    /// Esc: interrupt the turn.
    Interrupt,
    /// A line typed and ended with Enter: sent after the turn.
    Queued(String),
    /// The line being typed changed: it is now this.
    Typing(String),
}

/// What was typed while the turn ran.
#[derive(Debug, Default)]
pub struct Typed {
    /// Lines ended with Enter, oldest first.
    pub queued: Vec<String>,
    /// What was typed after the last Enter (it goes back into the prompt).
    pub partial: String,
    /// Ctrl-D was pressed on an empty line: leave once the turn is done.
    pub eof: bool,
}

/// How often the reader looks whether it should stop (ms).
const POLL_MS: u16 = 40;

/// The terminal in a mode where keys come one by one, unechoed; `signals`
/// keeps Ctrl-C a signal. Restored when dropped.
struct RawTerminal {
    saved: Termios,
}

impl RawTerminal {
    fn enter(signals: bool) -> Option<Self> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = saved.clone();
        raw.local_flags
            .remove(LocalFlags::ECHO | LocalFlags::ICANON | LocalFlags::IEXTEN);
        if !signals {
            raw.local_flags.remove(LocalFlags::ISIG);
        }
        raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
        raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).ok()?;
        Some(Self { saved })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// Waits up to `wait_ms` for input on stdin; reads what is there.
fn read_some(buf: &mut [u8], wait_ms: u16) -> Option<usize> {
    let stdin = std::io::stdin();
    let fd = stdin.as_fd();
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::from(wait_ms)) {
        Ok(n) if n > 0 => nix::unistd::read(fd, buf).ok(),
        _ => Some(0),
    }
}

/// The keys of a running turn, read on a thread of their own.
pub struct TypeAhead {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Typed>>,
    keys: mpsc::UnboundedReceiver<Key>,
}

impl TypeAhead {
    /// Starts reading keys when stdin is a terminal (`interactive`),
    /// `partial` being the line typed so far; else reads nothing (scripted
    /// input stays for the next line).
    pub fn start(interactive: bool, partial: String) -> Self {
        let (tx, keys) = mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = interactive.then(|| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let Some(_raw) = RawTerminal::enter(true) else {
                    return Typed::default();
                };
                let mut reader = Reader {
                    line: partial.into_bytes(),
                    queued: Vec::new(),
                    eof: false,
                };
                let mut buf = [0u8; 1024];
                while !stop.load(Ordering::Relaxed) {
                    match read_some(&mut buf, POLL_MS) {
                        Some(0) => {}
                        Some(n) => {
                            for key in reader.feed(&buf[..n]) {
                                let _ = tx.send(key);
                            }
                        }
                        None => break,
                    }
                }
                reader.typed()
            })
        });
        Self { stop, thread, keys }
    }

    /// The next key that asks for something (never, when not reading).
    pub async fn next(&mut self) -> Key {
        match self.keys.recv().await {
            Some(key) => key,
            None => std::future::pending().await,
        }
    }

    /// Stops reading, gives the terminal back as it was and returns what
    /// was typed.
    pub fn finish(mut self) -> Typed {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

/// While the chat runs, an Enter typed when nothing reads the terminal
/// (between turns, before the first prompt) stays Enter: the terminal does
/// not turn it into the Ctrl-J that inserts a newline at the prompt.
/// Dropped, the terminal is as before.
pub struct EnterStaysEnter {
    saved: Termios,
    /// What was typed before it took effect has been read.
    pub drained: bool,
}

impl EnterStaysEnter {
    pub fn start() -> Option<Self> {
        // Where the line editor reads plain lines (it cannot drive the
        // terminal), Enter must stay the end of a line.
        let term = std::env::var("TERM").unwrap_or_default();
        if matches!(term.as_str(), "dumb" | "cons25" | "emacs") {
            return None;
        }
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).ok()?;
        if !saved.input_flags.contains(InputFlags::ICRNL) {
            return None;
        }
        let mut kept = saved.clone();
        kept.input_flags.remove(InputFlags::ICRNL);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &kept).ok()?;
        Some(Self {
            saved,
            drained: false,
        })
    }
}

impl Drop for EnterStaysEnter {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// Runs `f` (a question answered with a line, a command given the
/// terminal) with Enter ending lines as terminals do by default.
pub fn with_enter_as_newline<T>(f: impl FnOnce() -> T) -> T {
    let stdin = std::io::stdin();
    let Ok(now) = termios::tcgetattr(stdin.as_fd()) else {
        return f();
    };
    if now.input_flags.contains(InputFlags::ICRNL) {
        return f();
    }
    let mut cooked = now.clone();
    cooked.input_flags.insert(InputFlags::ICRNL);
    let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &cooked);
    let result = f();
    let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &now);
    result
}

/// What was typed before [`EnterStaysEnter`] took effect (as agentx
/// started), `partial` being the line typed before: read now, so an Enter
/// pressed then ends a line (the terminal made it the Ctrl-J that inserts
/// a newline at the prompt).
pub fn drain(partial: String) -> Typed {
    let Some(_raw) = RawTerminal::enter(true) else {
        return Typed {
            partial,
            ..Typed::default()
        };
    };
    let mut reader = Reader {
        line: partial.into_bytes(),
        queued: Vec::new(),
        eof: false,
    };
    let mut buf = [0u8; 1024];
    while let Some(n) = read_some(&mut buf, 0).filter(|n| *n > 0) {
        reader.feed(&buf[..n]);
    }
    reader.typed()
}

/// Turns bytes from the terminal into keys, keeping the line being typed.
#[derive(Default)]
struct Reader {
    line: Vec<u8>,
    queued: Vec<String>,
    eof: bool,
}

impl Reader {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Key> {
        let before = self.line.clone();
        let mut keys = self.keys(bytes);
        if self.line != before {
            keys.push(Key::Typing(
                String::from_utf8_lossy(&self.line).into_owned(),
            ));
        }
        keys
    }

    fn keys(&mut self, bytes: &[u8]) -> Vec<Key> {
        let mut keys = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            i += 1;
            match b {
                0x1b => match bytes.get(i) {
                    // Esc alone (nothing came with it): interrupt.
                    None => keys.push(Key::Interrupt),
                    // An escape sequence (arrows, function keys): skipped.
                    Some(b'[') => {
                        i += 1;
                        while i < bytes.len() && !(0x40..=0x7e).contains(&bytes[i]) {
                            i += 1;
                        }
                        i += 1;
                    }
                    Some(b'O') => i += 2,
                    // Esc pressed twice, or Alt with a key.
                    Some(&next) => {
                        if next == 0x1b {
                            keys.push(Key::Interrupt);
                        }
                        i += 1;
                    }
                },
                b'\r' | b'\n' => {
                    let line = String::from_utf8_lossy(&self.line).trim().to_owned();
                    self.line.clear();
                    if !line.is_empty() {
                        self.queued.push(line.clone());
                        keys.push(Key::Queued(line));
                    }
                }
                // Backspace: one character (all of its UTF-8 bytes).
                0x7f | 0x08 => {
                    while self.line.last().is_some_and(|c| (0x80..0xc0).contains(c)) {
                        self.line.pop();
                    }
                    self.line.pop();
                }
                // Ctrl-U: the whole line.
                0x15 => self.line.clear(),
                0x04 if self.line.is_empty() => self.eof = true,
                // Kept: the prompt completes it as Tab would.
                b'\t' => self.line.push(b'\t'),
                0..0x20 => {}
                _ => self.line.push(b),
            }
        }
        keys
    }

    fn typed(self) -> Typed {
        Typed {
            queued: self.queued,
            partial: String::from_utf8_lossy(&self.line).into_owned(),
            eof: self.eof,
        }
    }
}

/// An answer to the single-key approval question.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    Yes,
    No,
    Always,
    /// Esc or Ctrl-C: interrupt the turn.
    Interrupt,
    /// The terminal went away.
    Gone,
}

/// Waits for y, n, a (Enter is no answer), Esc or Ctrl-C, unechoed; other
/// keys are ignored. Blocking: run it off the async runtime.
pub fn approval_key() -> Answer {
    let Some(_raw) = RawTerminal::enter(false) else {
        return Answer::Gone;
    };
    let mut buf = [0u8; 64];
    loop {
        let n = match read_some(&mut buf, POLL_MS) {
            Some(0) => continue,
            Some(n) => n,
            None => return Answer::Gone,
        };
        let bytes = &buf[..n];
        match bytes[0] {
            b'y' | b'Y' => return Answer::Yes,
            b'n' | b'N' => return Answer::No,
            b'a' | b'A' => return Answer::Always,
            0x03 => return Answer::Interrupt,
            0x04 => return Answer::Gone,
            0x1b if n == 1 || bytes[1] == 0x1b => return Answer::Interrupt,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_queued_and_esc_alone_interrupts() {
        let mut r = Reader::default();
        assert_eq!(r.feed(b"hel"), vec![Key::Typing("hel".into())]);
        assert_eq!(
            r.feed(b"lo\x7f\x7fp\r"),
            vec![Key::Queued("help".into()), Key::Typing(String::new())]
        );
        assert_eq!(r.feed(b"\x1b"), vec![Key::Interrupt]);
        // Arrows and Alt-keys are neither text nor an interrupt.
        assert_eq!(r.feed(b"\x1b[A\x1bOPx\x1bc"), vec![Key::Typing("x".into())]);
        assert_eq!(r.feed("é\x7fz".as_bytes()), vec![Key::Typing("xz".into())]);
        let typed = r.typed();
        assert_eq!(typed.queued, vec!["help".to_owned()]);
        assert_eq!(typed.partial, "xz");
    }
}
