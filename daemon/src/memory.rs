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

/// Returns free heap pages now, on this thread (one that may block).
pub fn trim_now() {
    // SAFETY: malloc_trim only returns free heap pages; no pointer is given.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}
