//! Handing freed heap back to the system: glibc keeps freed memory in its
//! arenas, and agentd's RSS would stay at its peak (a big import, slow clients).

use std::sync::atomic::{AtomicBool, Ordering};

/// Returns free heap pages to the system, on the blocking pool (it walks
/// every arena: milliseconds on a big heap).
pub async fn trim() {
    if let Err(e) = tokio::task::spawn_blocking(trim_now).await {
        tracing::debug!("returning memory failed: {e}");
    }
}

/// [`trim`] in the background half a second from now: many streams ending
/// together ask once, and the trim comes after the last of them.
pub fn trim_soon() {
    static SCHEDULED: AtomicBool = AtomicBool::new(false);
    if SCHEDULED.swap(true, Ordering::SeqCst) || tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    tokio::spawn(async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        SCHEDULED.store(false, Ordering::SeqCst);
        trim().await;
    });
}

/// How many malloc arenas agentd's threads share: one per runtime worker.
/// glibc's default (8 per core) gives the blocking pool's threads arenas
/// of their own, whose freed memory stays: 200 one-shots printing 3 MB each
/// peaked at 190 MB with the default and 123–132 MB with 2
/// (`agentx-bench noisy`, scenario (c)).
pub const ARENAS: i32 = 2;

/// Caps the malloc arenas at [`ARENAS`], unless the user set
/// `MALLOC_ARENA_MAX` (glibc has applied it). Called before any thread.
pub fn limit_arenas(user_set: bool) {
    if user_set {
        return;
    }
    // SAFETY: mallopt only changes a glibc tunable; no pointer is given.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// Returns free heap pages now, on this thread (one that may block).
pub fn trim_now() {
    // SAFETY: malloc_trim only returns free heap pages; no pointer is given.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}
