//! The snapshot engine's test seams, in one place: where a test makes a crash or a concurrent
//! writer happen inside production code. Compiled for tests only; production calls are cfg(test).

use std::cell::Cell;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
static RESTORED: Mutex<Option<Arc<ReadHook>>> = Mutex::new(None);
/// Held by whichever test has a path hook in place: tests run in parallel
/// in one process, and a hook is global.
static HOOKED: Mutex<()> = Mutex::new(());

/// A path hook in place; dropping it takes the hook out and lets the next
/// test put its own.
pub struct Hooked {
    slot: &'static Mutex<Option<Arc<ReadHook>>>,
    _turn: MutexGuard<'static, ()>,
}

impl Drop for Hooked {
    fn drop(&mut self) {
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

fn hook(slot: &'static Mutex<Option<Arc<ReadHook>>>, hook: ReadHook) -> Hooked {
    let turn = HOOKED.lock().unwrap_or_else(PoisonError::into_inner);
    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(hook));
    Hooked { slot, _turn: turn }
}

fn call(slot: &'static Mutex<Option<Arc<ReadHook>>>, rel: &[u8]) {
    let hook = slot.lock().ok().and_then(|h| h.clone());
    if let Some(hook) = hook {
        hook(rel);
    }
}

/// Runs `hook` with the relative path of every file a scan just read,
/// before it checks the file did not change meanwhile, until the guard is
/// dropped.
pub fn on_file_read(hook: ReadHook) -> Hooked {
    self::hook(&TORN_READ, hook)
}

/// Runs `hook` with the relative path of every path a restore just put
/// back or removed, until the guard is dropped.
pub fn on_restored(hook: ReadHook) -> Hooked {
    self::hook(&RESTORED, hook)
}

/// The seam after each path a restore finished.
pub(super) fn restored(rel: &[u8]) {
    call(&RESTORED, rel);
}

/// The seam in the scan's file read (the hook runs unlocked: it may block
/// one scan while others go on).
pub(super) fn file_read(rel: &[u8]) {
    call(&TORN_READ, rel);
}
