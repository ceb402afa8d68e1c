//! Per-RPC peer check: the caller's uid (SO_PEERCRED) must equal the
//! daemon's, otherwise PERMISSION_DENIED. Also counts RPCs for `status`.

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
