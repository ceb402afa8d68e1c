//! The `Daemon` gRPC service: version handshake, ping, status, shutdown.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tonic::{Request, Response, Status};

use agentx_shared::proto::{
    DaemonStatusReply, DaemonStatusRequest, HelloReply, HelloRequest, McpServerState,
    McpServersReply, McpServersRequest, PingReply, PingRequest, ShutdownReply, ShutdownRequest,
    daemon_server::Daemon,
};
use agentx_shared::version::PROTOCOL;

use crate::search::SearchIndex;

/// Longest delay a diagnostic Ping may ask for.
const MAX_PING_DELAY: Duration = Duration::from_secs(10);

/// Facts about this daemon process, shared by the services.
pub struct DaemonInfo {
    pub pid: u32,
    /// The Landlock ABI the command sandbox has (0: none).
    pub landlock_abi: u32,
    pub version: String,
    pub started_at: SystemTime,
    pub started: Instant,
    pub socket_path: PathBuf,
    pub profile_dir: PathBuf,
    pub socket_inherited: bool,
    pub log_path: Option<PathBuf>,
    pub served: Arc<AtomicU64>,
    pub stop: crate::shutdown::Shutdown,
}

pub struct DaemonService {
    info: Arc<DaemonInfo>,
    remote: Option<Arc<crate::remote::Remote>>,
    search: Option<Arc<SearchIndex>>,
    mcp: Arc<crate::mcp::Manager>,
}

impl DaemonService {
    pub fn new(
        info: Arc<DaemonInfo>,
        remote: Option<Arc<crate::remote::Remote>>,
        search: Option<Arc<SearchIndex>>,
        mcp: Arc<crate::mcp::Manager>,
    ) -> Self {
        Self {
            info,
            remote,
            search,
            mcp,
        }
    }

    /// The MCP servers on the wire, and why they could not be read.
    fn mcp_states(&self) -> (Vec<McpServerState>, String) {
        match self.mcp.status() {
            Ok(list) => (list.into_iter().map(mcp_to_wire).collect(), String::new()),
            Err(e) => (Vec::new(), e),
        }
    }
}

fn mcp_to_wire(s: crate::mcp::Status) -> McpServerState {
    McpServerState {
        name: s.name,
        folder: s
            .folder
            .map(|f| f.display().to_string())
            .unwrap_or_default(),
        state: s.state.to_owned(),
        pid: s.pid.unwrap_or(0),
        since: s.since.map(agentx_shared::time::to_wire),
        calls_in_flight: u32::try_from(s.in_flight).unwrap_or(u32::MAX),
        error: s.error.unwrap_or_default(),
        tools: s.tools.map_or(-1, |n| i32::try_from(n).unwrap_or(i32::MAX)),
        command: s.command,
        scope: s.scope.to_owned(),
    }
}

#[tonic::async_trait]
impl Daemon for DaemonService {
    async fn hello(&self, request: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let hello = request.into_inner();
        let compatible = hello.client_version == self.info.version && hello.protocol == PROTOCOL;
        if !compatible {
            tracing::info!(
                client_version = %hello.client_version,
                client_protocol = hello.protocol,
                "client of another version connected"
            );
        }
        Ok(Response::new(HelloReply {
            daemon_version: self.info.version.clone(),
            protocol: PROTOCOL,
            pid: self.info.pid,
            compatible,
            landlock_abi: self.info.landlock_abi,
        }))
    }

    async fn ping(&self, request: Request<PingRequest>) -> Result<Response<PingReply>, Status> {
        let ping = request.into_inner();
        // A test hook (an RPC still in flight while agentd stops): debug
        // builds only, so release binaries never sleep on a client's word.
        if cfg!(debug_assertions) && ping.delay_ms > 0 {
            let delay = Duration::from_millis(u64::from(ping.delay_ms)).min(MAX_PING_DELAY);
            tokio::time::sleep(delay).await;
        }
        Ok(Response::new(PingReply {
            payload: ping.payload,
        }))
    }

    async fn status(
        &self,
        _request: Request<DaemonStatusRequest>,
    ) -> Result<Response<DaemonStatusReply>, Status> {
        let info = &self.info;
        let (mcp_servers, mcp_error) = self.mcp_states();
        Ok(Response::new(DaemonStatusReply {
            pid: info.pid,
            version: info.version.clone(),
            protocol: PROTOCOL,
            started_at: Some(agentx_shared::time::to_wire(info.started_at)),
            uptime_ms: u64::try_from(info.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            socket_path: info.socket_path.display().to_string(),
            profile_dir: info.profile_dir.display().to_string(),
            socket_inherited: info.socket_inherited,
            log_path: info
                .log_path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            rpcs_served: info.served.load(Ordering::Relaxed),
            remote: Some(super::remote_state(self.remote.as_deref())),
            search_note: self
                .search
                .as_ref()
                .and_then(|s| s.rebuild_note())
                .unwrap_or_default(),
            mcp_servers,
            mcp_error,
        }))
    }

    async fn mcp_servers(
        &self,
        _request: Request<McpServersRequest>,
    ) -> Result<Response<McpServersReply>, Status> {
        let (servers, error) = self.mcp_states();
        Ok(Response::new(McpServersReply { servers, error }))
    }

    async fn shutdown(
        &self,
        request: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownReply>, Status> {
        let request = request.into_inner();
        let reason = request.reason;
        let turns = self.info.stop.turns();
        if request.unless_busy && turns > 0 {
            tracing::info!(%reason, turns, "shutdown refused: turns in flight");
            return Err(Status::failed_precondition(format!(
                "agentd {} (pid {}) is running {}",
                self.info.version,
                self.info.pid,
                agentx_shared::plural::count(turns, "turn")
            )));
        }
        tracing::info!(%reason, "shutdown requested");
        self.info.stop.request();
        Ok(Response::new(ShutdownReply { pid: self.info.pid }))
    }
}
