//! Per-RPC peer check: the caller's uid (SO_PEERCRED) must equal the
//! daemon's, and it must not be a sandboxed tool command (nor started by
//! one), otherwise PERMISSION_DENIED. Also counts RPCs for `status`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tonic::transport::server::UdsConnectInfo;
use tonic::{Request, Status};

/// The process id of the client that sent `request` (SO_PEERCRED), if the
/// kernel gave one.
pub fn pid_of<T>(request: &Request<T>) -> Option<u32> {
    request
        .extensions()
        .get::<UdsConnectInfo>()
        .and_then(|info| info.peer_cred)
        .and_then(|cred| cred.pid())
        .and_then(|pid| u32::try_from(pid).ok())
}

/// Whether process `pid` runs under a confined tool supervisor: one of
/// its ancestors is one. Whatever a command starts stays below its
/// supervisor (a child subreaper) while the supervisor lives.
fn sandboxed(pid: u32) -> bool {
    let me = std::process::id();
    let marker = format!("{}\0", agentx_shared::sandbox::CONFINED_SUPERVISOR);
    let mut pid = pid;
    // Bounded: a walk never loops on a pid reused meanwhile.
    for _ in 0..64 {
        if pid <= 1 || pid == me {
            return false;
        }
        let is_supervisor = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| cmdline.starts_with(marker.as_bytes()));
        if is_supervisor {
            return true;
        }
        let Some(parent) =
            agentx_shared::procfs::stat(pid).and_then(|s| u32::try_from(s.ppid).ok())
        else {
            return false;
        };
        pid = parent;
    }
    false
}

/// Whether a connection's peer runs under a confined tool supervisor,
/// found at its first RPC and kept for the connection's others (one walk
/// up `/proc` per connection, not per call). Sound because a process never
/// gains an ancestor: one outside every sandbox when it connected stays
/// outside, and one inside stays below its supervisor (a subreaper).
#[derive(Clone, Default)]
pub struct Verdict(Arc<OnceLock<bool>>);

#[derive(Clone)]
pub struct PeerCheck {
    uid: u32,
    served: Arc<AtomicU64>,
}

impl PeerCheck {
    pub fn new(uid: u32, served: Arc<AtomicU64>) -> Self {
        Self { uid, served }
    }
}

/// Whether the peer of `request` is a sandboxed command (kept per
/// connection when the connection carries a [`Verdict`]).
fn is_sandboxed<T>(request: &Request<T>) -> bool {
    let walk = || pid_of(request).is_some_and(sandboxed);
    match request.extensions().get::<Verdict>() {
        Some(Verdict(known)) => *known.get_or_init(walk),
        None => walk(),
    }
}

impl tonic::service::Interceptor for PeerCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let peer_uid = request
            .extensions()
            .get::<UdsConnectInfo>()
            .and_then(|info| info.peer_cred)
            .map(|cred| cred.uid());
        match peer_uid {
            Some(uid) if uid == self.uid && is_sandboxed(&request) => {
                tracing::warn!("refused an RPC from a sandboxed tool command");
                Err(Status::permission_denied(
                    "a command in agentx's sandbox may not call agentd",
                ))
            }
            Some(uid) if uid == self.uid => {
                self.served.fetch_add(1, Ordering::Relaxed);
                Ok(request)
            }
            Some(uid) => {
                tracing::warn!(peer_uid = uid, "refused an RPC from another user");
                Err(Status::permission_denied(format!(
                    "agentd serves uid {} only; this client runs as uid {uid}",
                    self.uid
                )))
            }
            None => Err(Status::permission_denied(
                "agentd could not identify the caller (no peer credentials)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connection's verdict, once found, stands for its later calls
    /// (the walk up `/proc` is not made again).
    #[test]
    fn a_connections_verdict_is_found_once_and_kept() {
        let verdict = Verdict::default();
        let mut first = Request::new(());
        first.extensions_mut().insert(verdict.clone());
        // No peer credentials: the walk finds no sandbox.
        assert!(!is_sandboxed(&first));
        assert_eq!(verdict.0.get(), Some(&false));

        let confined = Verdict::default();
        let _ = confined.0.set(true);
        let mut later = Request::new(());
        later.extensions_mut().insert(confined);
        assert!(is_sandboxed(&later));
    }
}
