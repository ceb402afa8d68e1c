//! Forks a pull made here, kept until the user was told: on the next turn
//! that lands on either side, and by `agentx sync`. Survives agentd restarts.

use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// At most this many forks are remembered (the oldest told ones go first).
const KEPT: usize = 200;

/// A conversation whose local line was kept as a fork.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkNote {
    pub from: String,
    pub to: String,
    pub title: String,
    /// The machine whose turns the conversation kept.
    pub other: String,
    /// The next turn on `from` still has to continue `to` instead.
    #[serde(default)]
    pub redirect: bool,
    /// A turn said so.
    #[serde(default)]
    pub told: bool,
    /// `agentx sync` listed it.
    #[serde(default)]
    pub reported: bool,
}

impl ForkNote {
    pub fn line(&self) -> String {
        format!(
            "conversation {} was also continued on {} at the same time: this machine's turns \
             are kept as a fork, {} ({:?}), which goes on here; {} has {}'s turns (agentx resume {})",
            self.from, self.other, self.to, self.title, self.from, self.other, self.from
        )
    }
}

/// The forks of this agentd, mirrored in `<profile>/remote/forks.json`.
pub struct Forks {
    path: PathBuf,
    notes: Mutex<Vec<ForkNote>>,
}

impl Forks {
    /// Reads what an earlier agentd left (a damaged file counts as none).
    pub fn load(path: PathBuf) -> Self {
        let notes = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        Self {
            path,
            notes: Mutex::new(notes),
        }
    }

    /// Runs `change` on the list and writes it when it changed anything.
    fn change<T>(&self, change: impl FnOnce(&mut Vec<ForkNote>) -> T) -> Option<T> {
        let mut notes = self.notes.lock().ok()?;
        let before = notes.clone();
        let out = change(&mut notes);
        if *notes != before {
            // Told and listed: nothing left to say about it.
            notes.retain(|n| !(n.told && n.reported && !n.redirect));
            let excess = notes.len().saturating_sub(KEPT);
            notes.drain(..excess);
            let written = serde_json::to_vec(&*notes)
                .map_err(std::io::Error::other)
                .and_then(|bytes| {
                    if let Some(dir) = self.path.parent() {
                        std::fs::create_dir_all(dir)?;
                    }
                    crate::durable::write_atomic(&self.path, &bytes)
                });
            if let Err(e) = written {
                tracing::warn!("remote: cannot keep the list of forks: {e}");
            }
        }
        Some(out)
    }

    /// A fork was just made: the next turn on `note.from` continues it.
    pub fn made(&self, mut note: ForkNote) {
        note.redirect = true;
        self.change(|notes| {
            notes.retain(|f| f.from != note.from);
            notes.push(note);
        });
    }

    /// Forks `agentx sync` has not listed yet, now marked listed.
    pub fn unreported(&self) -> Vec<ForkNote> {
        self.change(|notes| {
            notes
                .iter_mut()
                .filter(|f| !f.reported)
                .map(|f| {
                    f.reported = true;
                    f.clone()
                })
                .collect()
        })
        .unwrap_or_default()
    }

    /// The user opened conversation `id` themselves: a fork of it is no
    /// longer continued in its place (a turn on it still says it was made).
    pub fn opened(&self, id: &str) {
        self.change(|notes| {
            for f in notes.iter_mut().filter(|f| f.from == id) {
                f.redirect = false;
            }
        });
    }

    /// Whether a turn on `id` has something to say or a fork to continue.
    pub fn waiting(&self, id: &str) -> bool {
        self.notes.lock().is_ok_and(|notes| {
            notes
                .iter()
                .any(|f| (f.from == id && f.redirect) || ((f.from == id || f.to == id) && !f.told))
        })
    }

    /// For a turn on `id`: the lines it must show, and the fork it must
    /// continue instead of `id` (at most once).
    pub fn for_turn(&self, id: &str) -> (Vec<String>, Option<String>) {
        self.change(|notes| {
            let mut lines = Vec::new();
            let mut continue_in = None;
            for f in notes.iter_mut() {
                if f.from == id && f.redirect {
                    f.redirect = false;
                    continue_in = Some(f.to.clone());
                }
                if (f.from == id || f.to == id) && !f.told {
                    f.told = true;
                    lines.push(f.line());
                }
            }
            (lines, continue_in)
        })
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(from: &str, to: &str) -> ForkNote {
        ForkNote {
            from: from.into(),
            to: to.into(),
            title: "t (fork on here)".into(),
            other: "there".into(),
            redirect: false,
            told: false,
            reported: false,
        }
    }

    #[test]
    fn a_turn_on_either_side_is_told_once_and_sync_lists_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let forks = Forks::load(dir.path().join("forks.json"));
        forks.made(note("a", "b"));
        // The turn landed on the fork itself (the folder's current moved).
        assert!(forks.waiting("b"));
        let (lines, continue_in) = forks.for_turn("b");
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("kept as a fork, b"));
        assert_eq!(continue_in, None);
        // A later turn on the original still continues the fork, silently.
        let (lines, continue_in) = forks.for_turn("a");
        assert!(lines.is_empty());
        assert_eq!(continue_in.as_deref(), Some("b"));
        assert!(!forks.waiting("a"));
        // Survives a restart until sync lists it; listed once.
        let again = Forks::load(dir.path().join("forks.json"));
        assert_eq!(again.unreported().len(), 1);
        assert!(again.unreported().is_empty());
        assert!(
            Forks::load(dir.path().join("forks.json"))
                .unreported()
                .is_empty()
        );
    }

    #[test]
    fn opening_the_original_keeps_it_but_still_tells() {
        let dir = tempfile::tempdir().unwrap();
        let forks = Forks::load(dir.path().join("forks.json"));
        forks.made(note("a", "b"));
        forks.opened("a");
        let (lines, continue_in) = forks.for_turn("a");
        assert_eq!((lines.len(), continue_in), (1, None));
    }
}
