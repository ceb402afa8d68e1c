//! Per-RPC peer check: the caller's uid (SO_PEERCRED) must equal the
//! daemon's, and it must not be a sandboxed tool command (nor started by
//! one), otherwise PERMISSION_DENIED. Also counts RPCs for `status`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

impl tonic::service::Interceptor for PeerCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let peer_uid = request
            .extensions()
            .get::<UdsConnectInfo>()
            .and_then(|info| info.peer_cred)
            .map(|cred| cred.uid());
        match peer_uid {
            Some(uid) if uid == self.uid && pid_of(&request).is_some_and(sandboxed) => {
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
