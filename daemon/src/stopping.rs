//! agentd's "stopping" signal: set once when a graceful stop begins, so a
//! running turn ends with a record (and an after-snapshot) instead of being cut.

use std::sync::LazyLock;

use tokio::sync::watch;

static STOPPING: LazyLock<watch::Sender<bool>> = LazyLock::new(|| watch::Sender::new(false));

/// Marks agentd as stopping; every [`signal`] receiver sees it.
pub fn begin() {
    STOPPING.send_replace(true);
}

/// Whether a graceful stop has begun.
pub fn requested() -> bool {
    *STOPPING.borrow()
}

/// Resolves once agentd begins to stop (never, if it does not).
pub async fn wait() {
    let mut rx = STOPPING.subscribe();
    if rx.wait_for(|stopping| *stopping).await.is_err() {
        std::future::pending::<()>().await;
    }
}
