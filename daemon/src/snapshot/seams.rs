//! The snapshot engine's test seams, in one place: where a test makes a crash or a concurrent
//! writer happen inside production code. Compiled for tests only; production calls are cfg(test).

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use super::SnapError;

thread_local! {
    static CRASH_AFTER_TIMELINE_SAVE: Cell<bool> = const { Cell::new(false) };
}

/// Makes `take` on this thread stop right after saving the timeline, as a
/// kill -9 there would.
pub fn crash_after_timeline_save(on: bool) {
    CRASH_AFTER_TIMELINE_SAVE.set(on);
}

/// The seam in `take`: the simulated crash, when this thread asked for it.
pub(super) fn after_timeline_save() -> Result<(), SnapError> {
    if CRASH_AFTER_TIMELINE_SAVE.get() {
        return Err(SnapError::NotFound("simulated crash".into()));
    }
    Ok(())
}

type ReadHook = Box<dyn Fn(&[u8]) + Send + Sync>;
static TORN_READ: Mutex<Option<Arc<ReadHook>>> = Mutex::new(None);

/// Runs `hook` with the relative path of every file the scan just read,
/// before it checks the file did not change meanwhile (`None`: no hook).
pub fn on_file_read(hook: Option<ReadHook>) {
    if let Ok(mut h) = TORN_READ.lock() {
        *h = hook.map(Arc::new);
    }
}

static RESTORED: Mutex<Option<Arc<ReadHook>>> = Mutex::new(None);

/// Runs `hook` with the relative path of every path a restore just put
/// back or removed (`None`: no hook).
pub fn on_restored(hook: Option<ReadHook>) {
    if let Ok(mut h) = RESTORED.lock() {
        *h = hook.map(Arc::new);
    }
}

/// The seam after each path a restore finished.
pub(super) fn restored(rel: &[u8]) {
    let hook = RESTORED.lock().ok().and_then(|h| h.clone());
    if let Some(hook) = hook {
        hook(rel);
    }
}

/// The seam in the scan's file read (the hook runs unlocked: it may block
/// one scan while others go on).
pub(super) fn file_read(rel: &[u8]) {
    let hook = TORN_READ.lock().ok().and_then(|h| h.clone());
    if let Some(hook) = hook {
        hook(rel);
    }
}
