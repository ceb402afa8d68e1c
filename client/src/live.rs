//! The composer that lives through a turn: what the user types and queues,
//! drawn in a pane at the bottom of the terminal with the turn's activity.

pub mod composer;
pub mod keys;
pub mod pane;

use composer::Composer;

/// Whether the composer can be used: stdin, stdout and stderr are one
/// terminal that can be driven.
pub fn possible() -> bool {
    use std::io::IsTerminal as _;
    let term = std::env::var("TERM").unwrap_or_default();
    std::io::stdin().is_terminal()
        && std::io::stdout().is_terminal()
        && std::io::stderr().is_terminal()
        && !matches!(term.as_str(), "" | "dumb" | "cons25" | "emacs")
}

/// The composer and its pane while a turn runs.
pub struct Live {
    pub composer: Composer,
    pub pane: pane::Pane,
    /// The terminal is raw while this is held (`None`: the composer is
    /// put aside, e.g. while an approval asks its question).
    raw: Option<keys::RawMode>,
}

impl Live {
    /// Takes the terminal; `partial` is what was typed before.
    pub fn start(partial: String) -> Option<Self> {
        let raw = keys::RawMode::enter()?;
        Some(Self {
            composer: Composer::with_text(partial),
            pane: pane::Pane::default(),
            raw: Some(raw),
        })
    }

    /// Whether the pane is up (the terminal raw).
    pub fn up(&self) -> bool {
        self.raw.is_some()
    }

    /// Takes the pane off and gives the terminal back, keeping what was typed.
    pub fn put_aside(&mut self) {
        if self.raw.is_some() {
            self.pane.clear();
            self.raw = None;
        }
    }

    /// Takes the terminal again after [`Live::put_aside`].
    pub fn take_up(&mut self) -> bool {
        if self.raw.is_none() {
            self.raw = keys::RawMode::enter();
        }
        self.raw.is_some()
    }

    /// Ends: the pane is cleared, the terminal given back.
    pub fn end(mut self) -> Composer {
        self.put_aside();
        self.composer
    }
}
