//! Handing freed heap back to the system: glibc keeps freed memory in its
//! arenas, and agentd's RSS would stay at its peak (a big import, slow clients).

use std::sync::atomic::{AtomicI64, Ordering};

/// Returns free heap pages to the system, on the blocking pool (it walks
/// every arena: milliseconds on a big heap).
pub async fn trim() {
    if let Err(e) = tokio::task::spawn_blocking(trim_now).await {
        tracing::debug!("returning memory failed: {e}");
    }
}

/// [`trim`] in the background, at most once a second (many streams ending
/// together ask once).
pub fn trim_soon() {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = agentx_shared::time::now_ms();
    let last = LAST.load(Ordering::Relaxed);
    if now - last < 1000
        || LAST
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::task::spawn_blocking(trim_now);
    }
}

fn trim_now() {
    // SAFETY: malloc_trim only returns free heap pages; no pointer is given.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}
