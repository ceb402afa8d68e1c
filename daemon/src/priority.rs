//! Background work yields the CPU to requests: threads doing bulk hashing,
//! scanning or parsing run at a lower scheduling priority (nice 10).

/// How much lower than agentd's own priority background threads run.
const BACKGROUND_NICE: i32 = 10;

/// Lowers the calling thread's priority (Linux schedules threads apart).
/// Best effort: a thread stays as it was when the kernel refuses.
pub fn lower_this_thread() {
    // SAFETY: gettid and setpriority take and return plain integers.
    unsafe {
        let tid = libc::gettid();
        let now = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        let _ = libc::setpriority(
            libc::PRIO_PROCESS,
            tid as libc::id_t,
            now.saturating_add(BACKGROUND_NICE).min(19),
        );
    }
}

/// Runs `work` on a thread of its own at background priority; its result
/// comes back to the awaiting task (which never blocks a runtime worker).
pub async fn in_background<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            lower_this_thread();
            let _ = tx.send(work());
        })?;
    rx.await
        .map_err(|_| std::io::Error::other("a background task ended without an answer"))
}

/// Makes rayon's global pool (parallel hashing and scanning) run at
/// background priority; call once at start.
pub fn background_pool() {
    let built = rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("agentd-bulk-{i}"))
        .start_handler(|_| lower_this_thread())
        .build_global();
    if let Err(e) = built {
        tracing::debug!("the bulk thread pool was set up already: {e}");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_background_thread_runs_at_a_lower_priority() {
        let (mine, theirs) = std::thread::scope(|s| {
            // SAFETY: as in `lower_this_thread`.
            let mine = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            let theirs = s
                .spawn(|| {
                    super::lower_this_thread();
                    // SAFETY: as above; 0 is the calling thread.
                    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
                })
                .join()
                .unwrap();
            (mine, theirs)
        });
        assert!(theirs > mine || mine == 19, "{mine} -> {theirs}");
    }
}
