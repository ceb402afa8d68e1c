//! The group actor's test seams: a request for a chosen folder panics
//! inside the actor, as a bug would, or is held there. Compiled for tests only.

use std::collections::HashMap;
use std::sync::Mutex;

static PANIC_IN: Mutex<Option<String>> = Mutex::new(None);

/// Makes the next request for `folder` panic in its actor (`None`: none).
pub fn panic_next_request_in(folder: Option<&str>) {
    if let Ok(mut f) = PANIC_IN.lock() {
        *f = folder.map(str::to_owned);
    }
}

/// The seam in the actor's loop.
pub(super) fn maybe_panic(folder: &str) {
    let hit = PANIC_IN
        .lock()
        .map(|mut f| f.take_if(|f| f == folder).is_some())
        .unwrap_or(false);
    if hit {
        panic!("test seam: a request for {folder} panicked");
    }
}

/// Where the actor holds a request (see [`hold_next_request_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Before it is handled.
    Handling,
    /// Handled (its reply sent), before what it changed is published.
    Publishing,
}

/// A held request's two ends: told when it is reached, sent to release it.
struct Holding {
    at: Hold,
    reached: std::sync::mpsc::Sender<()>,
    release: std::sync::mpsc::Receiver<()>,
}

/// Holds by folder (tests run in parallel, each in folders of its own).
static HOLD_IN: Mutex<Option<HashMap<String, Holding>>> = Mutex::new(None);

/// The test's side of a hold: `reached` receives once the actor holds the
/// request; sending on `release` (or dropping it) lets the request go on.
pub struct HeldRequest {
    pub reached: std::sync::mpsc::Receiver<()>,
    pub release: std::sync::mpsc::Sender<()>,
}

/// Holds the next request for `folder` at `at`.
pub fn hold_next_request_in(folder: &str, at: Hold) -> HeldRequest {
    let (release, released) = std::sync::mpsc::channel();
    let (reach, reached) = std::sync::mpsc::channel();
    if let Ok(mut holds) = HOLD_IN.lock() {
        holds.get_or_insert_default().insert(
            folder.to_owned(),
            Holding {
                at,
                reached: reach,
                release: released,
            },
        );
    }
    HeldRequest { reached, release }
}

/// The seam in the actor's loop.
pub(super) fn maybe_hold(folder: &str, at: Hold) {
    let held = HOLD_IN.lock().ok().and_then(|mut holds| {
        let holds = holds.as_mut()?;
        if holds.get(folder)?.at != at {
            return None;
        }
        holds.remove(folder)
    });
    if let Some(holding) = held {
        let _ = holding.reached.send(());
        // Bounded: a test that fails while holding never frees it (the
        // runtime, dropped first, waits for this thread).
        let _ = holding
            .release
            .recv_timeout(std::time::Duration::from_secs(30));
    }
}
