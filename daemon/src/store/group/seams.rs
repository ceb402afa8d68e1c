//! The group actor's test seam: a request for a chosen folder panics inside
//! the actor, as a bug would. Compiled for tests only.

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
