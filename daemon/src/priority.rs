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

/// A runtime whose threads run at background priority, built at first
/// use (`None`: it could not be). Tool commands' output is read there, so
/// many commands printing at once wait behind a request, not before it.
pub fn background_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::OnceLock<Option<tokio::runtime::Runtime>> =
        std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            // Reading pipes is light work: a few threads serve hundreds of
            // commands, however many cores the machine has.
            let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .thread_name("agentd-tools")
                .on_thread_start(lower_this_thread)
                .enable_all()
                .build()
                .inspect_err(|e| tracing::warn!("no background runtime for tool output: {e}"))
                .ok()
        })
        .as_ref()
}

/// Spawns `task` on the [`background_runtime`] (on the current one when
/// there is none).
pub fn spawn_background<F>(task: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    match background_runtime() {
        Some(runtime) => runtime.spawn(task),
        None => tokio::spawn(task),
    }
}

/// Runs `work` on the [`background_runtime`]'s blocking threads (the
/// current runtime's when there is none) and waits for its result.
pub async fn blocking_background<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    let task = match background_runtime() {
        Some(runtime) => runtime.spawn_blocking(work),
        None => tokio::task::spawn_blocking(work),
    };
    task.await.map_err(std::io::Error::other)
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

    #[tokio::test]
    async fn the_background_runtime_runs_tasks_and_blocking_work_at_a_lower_priority() {
        // SAFETY: as in `lower_this_thread`; 0 is the calling thread.
        let priority = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let mine = priority();
        let task = super::spawn_background(async move { priority() })
            .await
            .unwrap();
        let blocking = super::blocking_background(priority).await.unwrap();
        for theirs in [task, blocking] {
            assert!(theirs > mine || mine == 19, "{mine} -> {theirs}");
        }
    }
}
