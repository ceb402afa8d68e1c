//! Client side of the Unix-socket transport: a tonic `Channel` to agentd,
//! with connection errors kept as `io::Error` so callers can tell "no daemon"
//! (missing or stale socket) from other failures.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

/// The deadline of a call until its response starts: generous, as an undo
/// of a large tree is one call, but never unbounded. (A turn's response
/// starts at once; its events may take as long as the turn.)
pub const CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// A stream whose peer answers no HTTP/2 ping for this long is dead.
pub const KEEPALIVE_EVERY: Duration = Duration::from_secs(10);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Connects to the daemon socket at `path`. The first connection is made
/// eagerly so its `io::Error` (`NotFound`, `ConnectionRefused`, ...) reaches
/// the caller unchanged; reconnects dial the same path.
pub async fn connect(path: &Path) -> io::Result<Channel> {
    let first = UnixStream::connect(path).await?;
    let slot = Arc::new(Mutex::new(Some(first)));
    let path: PathBuf = path.to_path_buf();
    let connector = tower::service_fn(move |_: tonic::transport::Uri| {
        let slot = Arc::clone(&slot);
        let path = path.clone();
        async move {
            let ready = slot.lock().ok().and_then(|mut s| s.take());
            let stream = match ready {
                Some(s) => s,
                None => UnixStream::connect(&path).await?,
            };
            Ok::<_, io::Error>(TokioIo::new(stream))
        }
    });
    // The authority is never resolved: the connector ignores the URI.
    Endpoint::from_static("http://agentd.local")
        // No call waits forever on a frozen daemon (SIGSTOP, a deadlock):
        // a unary call has a deadline; a turn's stream has HTTP/2 pings.
        .timeout(CALL_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE_EVERY)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .connect_with_connector(connector)
        .await
        // The socket accepted (the kernel does so for a daemon still closing
        // its files) but the connection broke before HTTP/2 was up: a daemon
        // going away.
        .map_err(|e| io::Error::new(io::ErrorKind::ConnectionAborted, e))
}

/// True when an error from [`connect`] means no daemon is listening there:
/// the socket file is missing or refuses connections (stale), or a daemon
/// going away accepted and dropped the connection.
pub fn is_not_running(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::NotFound
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::NotADirectory
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
