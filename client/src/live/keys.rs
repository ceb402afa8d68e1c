//! The terminal in raw mode for the composer (bracketed paste, and Shift-Enter
//! told apart where the terminal can), and the keys read on a thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossterm::event::{
    self, DisableBracketedPaste, EnableBracketedPaste, Event, KeyboardEnhancementFlags,
    PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use crossterm::{cursor, execute};
use tokio::sync::mpsc;

/// How long the reader waits for a key before it looks whether to stop.
const POLL: Duration = Duration::from_millis(40);

/// Whether the terminal speaks the keyboard protocol that tells Shift-Enter
/// from Enter (asked once, at the first turn: never on the way to the prompt).
static ENHANCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// The keyboard flags were pushed (they are popped on the way out).
static PUSHED: AtomicBool = AtomicBool::new(false);

/// Raw mode, bracketed paste, the cursor hidden (the composer draws its
/// own) and, where supported, the keyboard protocol. Undone when dropped,
/// and by a panic.
pub struct RawMode(());

impl RawMode {
    pub fn enter() -> Option<Self> {
        crossterm::terminal::enable_raw_mode().ok()?;
        restore_on_panic();
        let enhanced = *ENHANCED
            .get_or_init(|| crossterm::terminal::supports_keyboard_enhancement().unwrap_or(false));
        let mut err = std::io::stderr();
        if enhanced {
            let flags = KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES;
            if execute!(err, PushKeyboardEnhancementFlags(flags)).is_ok() {
                PUSHED.store(true, Ordering::Relaxed);
            }
        }
        let _ = execute!(err, EnableBracketedPaste, cursor::Hide);
        Some(Self(()))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        restore();
    }
}

/// Gives the terminal back as it was.
fn restore() {
    let mut err = std::io::stderr();
    if PUSHED.swap(false, Ordering::Relaxed) {
        let _ = execute!(err, PopKeyboardEnhancementFlags);
    }
    let _ = execute!(err, DisableBracketedPaste, cursor::Show);
    let _ = crossterm::terminal::disable_raw_mode();
}

/// A panic while the composer is up leaves a usable terminal.
fn restore_on_panic() {
    static HOOKED: std::sync::Once = std::sync::Once::new();
    HOOKED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if crossterm::terminal::is_raw_mode_enabled().unwrap_or(false) {
                restore();
            }
            previous(info);
        }));
    });
}

/// Terminal events read on a thread of their own.
pub struct Keys {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    events: mpsc::UnboundedReceiver<Event>,
}

impl Keys {
    /// Starts reading (the terminal must be raw).
    pub fn start() -> Self {
        let (tx, events) = mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match event::poll(POLL) {
                    Ok(true) => match event::read() {
                        Ok(ev) => {
                            let _ = tx.send(ev);
                        }
                        Err(_) => break,
                    },
                    Ok(false) => {}
                    Err(_) => break,
                }
            }
        });
        Self {
            stop,
            thread: Some(thread),
            events,
        }
    }

    /// The next event (never, once the terminal is gone).
    pub async fn next(&mut self) -> Event {
        match self.events.recv().await {
            Some(ev) => ev,
            None => std::future::pending().await,
        }
    }

    /// Stops reading; returns the events not taken yet, those already
    /// read off the terminal included.
    pub fn finish(mut self) -> Vec<Event> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let mut left = Vec::new();
        while let Ok(ev) = self.events.try_recv() {
            left.push(ev);
        }
        while event::poll(Duration::ZERO).unwrap_or(false) {
            match event::read() {
                Ok(ev) => left.push(ev),
                Err(_) => break,
            }
        }
        left
    }
}
