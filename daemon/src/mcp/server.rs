//! One MCP server process and its state: started on the first call (by a
//! task of its own, so a caller that gives up never strands a start), shared
//! by every caller over one connection, restarted after a crash with
//! backoff, failed after a crash loop, stopped when idle or told to.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rmcp::model::CallToolRequestParams;
use rmcp::service::{NotificationContext, Peer, RoleClient};
use rmcp::{ClientHandler, ServiceExt as _};
use serde_json::Value;
use tokio::sync::{oneshot, watch};

use agentx_shared::mcp_config::{McpServer, Transport};

use super::catalog::{self, Catalog, ToolInfo};

/// Crashes (or failed starts) in a row after which a server is failed.
pub const MAX_CRASHES: u32 = 5;

/// Where a server stands.
#[derive(Debug, Clone)]
pub enum Phase {
    /// Never started since agentd (or its configuration) began.
    Configured,
    Starting,
    Running(Arc<Conn>),
    /// Stopped after `idle_timeout_sec` without calls.
    Idle,
    /// Crashed or failed to start; started again on the next call.
    Crashed(String),
    /// Crashed [`MAX_CRASHES`] times in a row: not started again until
    /// its configuration changes, agentd restarts or the failure is older
    /// than the manager's `retry_failed_after` (then one start is tried).
    Failed(String),
    /// agentd is stopping.
    Stopped,
}

/// A live connection to a running server.
#[derive(Debug)]
pub struct Conn {
    peer: Peer<RoleClient>,
    pub pid: Option<u32>,
    pub since: SystemTime,
    generation: u64,
    /// Tells the task owning the process to end it.
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// Becomes `true` once the process is gone.
    pub gone: watch::Receiver<bool>,
}

impl Conn {
    /// Asks the owning task to end the process (once).
    pub fn stop(&self) {
        if let Some(tx) = lock(&self.stop).take() {
            let _ = tx.send(());
        }
    }
}

struct State {
    phase: Phase,
    in_flight: usize,
    last_used: Instant,
    crashes: u32,
    last_crash: Option<Instant>,
    generation: u64,
    /// Set while a start runs: becomes `true` when it is over.
    started: Option<watch::Receiver<bool>>,
}

/// One server (per folder when its scope is the folder).
pub struct Server {
    pub config: McpServer,
    pub folder: Option<PathBuf>,
    cwd: PathBuf,
    base_env: Arc<Vec<(OsString, OsString)>>,
    /// A variable of agentd's environment (bearer tokens).
    secret: super::Lookup,
    catalog: Arc<Catalog>,
    /// How long a failed server stays failed before a call tries it again.
    retry_failed_after: Duration,
    state: Mutex<State>,
}

/// What a status listing shows of a server.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub phase: Phase,
    pub in_flight: usize,
}

/// How a call ended when it did not return a result.
#[derive(Debug)]
pub enum CallError {
    /// The server could not be reached or started, or broke the call.
    Failed(String),
    TimedOut(Duration),
    Cancelled,
}

impl Server {
    pub fn new(
        config: McpServer,
        folder: Option<PathBuf>,
        cwd: PathBuf,
        base_env: Arc<Vec<(OsString, OsString)>>,
        secret: super::Lookup,
        catalog: Arc<Catalog>,
        retry_failed_after: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            config,
            folder,
            cwd,
            base_env,
            secret,
            catalog,
            retry_failed_after,
            state: Mutex::new(State {
                phase: Phase::Configured,
                in_flight: 0,
                last_used: Instant::now(),
                crashes: 0,
                last_crash: None,
                generation: 0,
                started: None,
            }),
        })
    }

    pub fn snapshot(&self) -> Snapshot {
        let st = self.lock();
        Snapshot {
            phase: st.phase.clone(),
            in_flight: st.in_flight,
        }
    }

    /// Whether a process runs (or is being started) for this server.
    pub fn is_live(&self) -> bool {
        matches!(self.lock().phase, Phase::Running(_) | Phase::Starting)
    }

    /// When the server was last used, if it runs and no call is in flight.
    pub fn idle_since(&self) -> Option<Instant> {
        let st = self.lock();
        (matches!(st.phase, Phase::Running(_)) && st.in_flight == 0).then_some(st.last_used)
    }

    /// The connection, started if need be (bounded by `startup_timeout_sec`);
    /// the returned guard counts the caller as a call in flight.
    pub async fn acquire(self: &Arc<Self>) -> Result<InFlight, String> {
        loop {
            let waiting = {
                let mut st = self.lock();
                match &st.phase {
                    Phase::Running(conn) => {
                        let conn = Arc::clone(conn);
                        st.in_flight += 1;
                        st.last_used = Instant::now();
                        return Ok(InFlight {
                            server: Arc::clone(self),
                            conn,
                            ok: false,
                        });
                    }
                    Phase::Failed(e) if !failure_is_old(&st, self.retry_failed_after) => {
                        return Err(format!(
                            "MCP server {} failed ({e}); it is tried again {} s after its last \
                             failure, or when its configuration changes",
                            self.config.name,
                            self.retry_failed_after.as_secs()
                        ));
                    }
                    Phase::Stopped => return Err("agentd is stopping".to_owned()),
                    Phase::Starting => st.started.clone(),
                    // A failure old enough gets one start (no backoff): a
                    // crash puts it back to failed, a working call resets it.
                    Phase::Configured | Phase::Idle | Phase::Crashed(_) | Phase::Failed(_) => {
                        let (tx, rx) = watch::channel(false);
                        st.phase = Phase::Starting;
                        st.started = Some(rx.clone());
                        st.generation += 1;
                        let delay = backoff(st.crashes, st.last_crash);
                        let generation = st.generation;
                        let me = Arc::clone(self);
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            me.start(generation).await;
                            let _ = tx.send(true);
                        });
                        Some(rx)
                    }
                }
            };
            if let Some(mut rx) = waiting {
                // A dropped sender also ends the wait: the start is over.
                let _ = rx.wait_for(|done| *done).await;
            }
            // One start per call: a start that failed is this call's error
            // (the next call starts it again, after the backoff).
            if let Phase::Crashed(e) = &self.lock().phase {
                return Err(format!(
                    "MCP server {} could not be started: {e}",
                    self.config.name
                ));
            }
        }
    }

    /// Starts the process and the connection; records how it went.
    async fn start(self: &Arc<Self>, generation: u64) {
        let outcome =
            match tokio::time::timeout(self.config.startup_timeout, self.connect(generation)).await
            {
                Ok(Ok(conn)) => Ok(conn),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(format!(
                    "it did not start within {} s (startup_timeout_sec)",
                    self.config.startup_timeout.as_secs_f64()
                )),
            };
        let mut st = self.lock();
        st.started = None;
        if !matches!(st.phase, Phase::Starting) || st.generation != generation {
            // Stopped meanwhile.
            if let Ok(conn) = outcome {
                conn.stop();
            }
            return;
        }
        match outcome {
            Ok(conn) => {
                tracing::info!(server = %self.config.name, pid = ?conn.pid, "MCP server started");
                st.phase = Phase::Running(conn);
                st.last_used = Instant::now();
            }
            Err(e) => {
                tracing::warn!(server = %self.config.name, "MCP server did not start: {e}");
                record_crash(&mut st, e);
            }
        }
    }

    /// Spawns the process, initializes the session and lists its tools.
    async fn connect(self: &Arc<Self>, generation: u64) -> Result<Arc<Conn>, String> {
        let (command, args, env, cwd) = match &self.config.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => (command, args, env, cwd),
            Transport::Http {
                url,
                bearer_token_env_var,
            } => {
                return self
                    .connect_http(generation, url, bearer_token_env_var)
                    .await;
            }
        };
        let cwd = cwd.clone().unwrap_or_else(|| self.cwd.clone());
        let vars = self
            .base_env
            .iter()
            .cloned()
            .chain(env.iter().map(|(k, v)| (k.into(), v.into())));
        let mut child = super::process::spawn(command, args, vars, &cwd)
            .await
            .map_err(|e| format!("cannot start {command:?}: {e}"))?;
        let supervisor = child.id();
        // Until the owner task has it, a start given up on (timed out)
        // kills what it started.
        let mut orphan = KillOnDrop(supervisor);
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            let _ = child.kill().await;
            orphan.0 = None;
            return Err("its pipes could not be opened".to_owned());
        };
        let service = match self.handler().serve((stdout, stdin)).await {
            Ok(service) => service,
            Err(e) => {
                super::process::end(&mut child).await;
                orphan.0 = None;
                return Err(format!("it did not answer initialize: {e}"));
            }
        };
        let peer = service.peer().clone();
        // It answered: it runs, under its supervisor.
        let pid = supervisor.map(super::process::server_pid);
        let (stop_tx, stop_rx) = oneshot::channel();
        let (gone_tx, gone_rx) = watch::channel(false);
        let conn = Arc::new(Conn {
            peer: peer.clone(),
            pid,
            since: SystemTime::now(),
            generation,
            stop: Mutex::new(Some(stop_tx)),
            gone: gone_rx,
        });
        // The task that owns the process for its whole life.
        orphan.0 = None;
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let crashed = tokio::select! {
                status = child.wait() => Some(match status {
                    Ok(s) => format!("it exited ({s})"),
                    Err(e) => format!("it could not be watched: {e}"),
                }),
                _ = stop_rx => None,
            };
            // Closing the connection closes the server's stdin: its cue to exit.
            drop(service.cancel().await);
            super::process::end(&mut child).await;
            if let Some(why) = crashed {
                me.crashed(generation, why);
            }
            let _ = gone_tx.send(true);
        });
        self.list_tools(&conn).await?;
        Ok(conn)
    }

    /// Connects to a streamable HTTP server (no process of agentd's).
    async fn connect_http(
        self: &Arc<Self>,
        generation: u64,
        url: &str,
        token_var: &Option<String>,
    ) -> Result<Arc<Conn>, String> {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
        if let Some(var) = token_var {
            let token = (self.secret)(var).ok_or_else(|| {
                format!("{var} (its bearer_token_env_var) is not set in agentd's environment")
            })?;
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let service = self
            .handler()
            .serve(transport)
            .await
            .map_err(|e| format!("it did not answer initialize: {e}"))?;
        let peer = service.peer().clone();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (gone_tx, gone_rx) = watch::channel(false);
        let conn = Arc::new(Conn {
            peer: peer.clone(),
            pid: None,
            since: SystemTime::now(),
            generation,
            stop: Mutex::new(Some(stop_tx)),
            gone: gone_rx,
        });
        tokio::spawn(async move {
            let _ = stop_rx.await;
            // Ends the session (DELETE) and the connection.
            drop(service.cancel().await);
            let _ = gone_tx.send(true);
        });
        self.list_tools(&conn).await?;
        Ok(conn)
    }

    /// What hears this server's notifications.
    fn handler(&self) -> Handler {
        Handler {
            server: self.config.name.clone(),
            fingerprint: self.config.fingerprint(),
            catalog: Arc::clone(&self.catalog),
        }
    }

    /// Lists the tools of the running connection again (none: nothing to
    /// do), bounded by `startup_timeout_sec`: a name the model used may come
    /// from a list change whose own refresh is still on its way.
    pub async fn relist(self: &Arc<Self>) {
        if !self.is_live() {
            return;
        }
        let Ok(held) = self.acquire().await else {
            return;
        };
        let listed =
            tokio::time::timeout(self.config.startup_timeout, self.list_tools(&held.conn)).await;
        if listed.is_err() {
            tracing::warn!(server = %self.config.name, "listing tools again timed out");
        }
    }

    /// Lists the tools of a new connection into the catalog.
    async fn list_tools(&self, conn: &Arc<Conn>) -> Result<(), String> {
        match conn.peer.list_all_tools().await {
            Ok(tools) => {
                self.catalog.put(
                    &self.config.name,
                    &self.config.fingerprint(),
                    catalog::from_rmcp(tools),
                );
                Ok(())
            }
            Err(e) => {
                conn.stop();
                Err(format!("it did not list its tools: {e}"))
            }
        }
    }

    /// The process of `generation` died on its own.
    fn crashed(&self, generation: u64, why: String) {
        let mut st = self.lock();
        if let Phase::Running(conn) = &st.phase
            && conn.generation == generation
        {
            tracing::warn!(server = %self.config.name, "MCP server crashed: {why}");
            record_crash(&mut st, why);
        }
    }

    /// Stops the process if it has been idle past its `idle_timeout_sec`.
    pub fn stop_if_idle(&self, now: Instant) {
        let mut st = self.lock();
        if let Phase::Running(conn) = &st.phase
            && st.in_flight == 0
            && now.duration_since(st.last_used) >= self.config.idle_timeout
        {
            tracing::info!(server = %self.config.name, "MCP server idle: stopped");
            conn.stop();
            st.phase = Phase::Idle;
        }
    }

    /// Stops the process (if any) and keeps it stopped: `Stopped` when
    /// agentd stops, `Idle` to make room; returns how to tell it is gone.
    pub fn stop(&self, for_good: bool) -> Option<watch::Receiver<bool>> {
        let mut st = self.lock();
        let gone = match &st.phase {
            Phase::Running(conn) => {
                conn.stop();
                Some(conn.gone.clone())
            }
            _ => None,
        };
        if for_good {
            st.phase = Phase::Stopped;
        } else if gone.is_some() {
            st.phase = Phase::Idle;
        }
        gone
    }

    /// Calls `tool` with `arguments`, bounded by `tool_timeout_sec`; a
    /// `true` on `cancel` drops the request, which tells the server
    /// (`notifications/cancelled`).
    pub async fn call(
        self: &Arc<Self>,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        mut cancel: watch::Receiver<bool>,
    ) -> Result<Value, CallError> {
        let mut held = self.acquire().await.map_err(CallError::Failed)?;
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let timeout = self.config.tool_timeout;
        let call = tokio::time::timeout(timeout, held.conn.peer.call_tool(params));
        let result = tokio::select! {
            r = call => r,
            _ = cancel.wait_for(|c| *c) => return Err(CallError::Cancelled),
        };
        match result {
            Err(_) => Err(CallError::TimedOut(timeout)),
            Ok(Err(e)) => {
                if matches!(e, rmcp::ServiceError::TransportClosed) {
                    self.crashed(held.conn.generation, "its connection closed".to_owned());
                }
                Err(CallError::Failed(format!(
                    "the MCP server {} did not answer the call: {e}",
                    self.config.name
                )))
            }
            Ok(Ok(result)) => {
                held.ok = true;
                serde_json::to_value(&result).map_err(|e| CallError::Failed(e.to_string()))
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }
}

/// A call in flight on a connection; its drop counts the call done.
pub struct InFlight {
    server: Arc<Server>,
    pub conn: Arc<Conn>,
    /// The call got an answer: the crash count starts over.
    ok: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut st = self.server.lock();
        st.in_flight = st.in_flight.saturating_sub(1);
        st.last_used = Instant::now();
        if self.ok {
            st.crashes = 0;
        }
    }
}

/// Kills the process group of a server whose start was given up on.
struct KillOnDrop(Option<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            let group = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

fn record_crash(st: &mut State, why: String) {
    st.crashes += 1;
    st.last_crash = Some(Instant::now());
    st.phase = if st.crashes >= MAX_CRASHES {
        Phase::Failed(format!("{why}; {} crashes in a row", st.crashes))
    } else {
        Phase::Crashed(why)
    };
}

/// Whether a failed server's last failure is older than `after`.
fn failure_is_old(st: &State, after: Duration) -> bool {
    st.last_crash.is_some_and(|at| at.elapsed() >= after)
}

/// How long to wait before starting again after `crashes` crashes in a
/// row, the last at `last`: 0.25 s doubling, at most 4 s.
fn backoff(crashes: u32, last: Option<Instant>) -> Duration {
    let Some(last) = last.filter(|_| crashes > 0) else {
        return Duration::ZERO;
    };
    let wait = Duration::from_millis(250 << (crashes - 1).min(4)).min(Duration::from_secs(4));
    wait.saturating_sub(last.elapsed())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Hears the server's notifications: a changed tool list is listed again.
struct Handler {
    server: String,
    fingerprint: String,
    catalog: Arc<Catalog>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        match context.peer.list_all_tools().await {
            Ok(tools) => {
                let tools: Vec<ToolInfo> = catalog::from_rmcp(tools);
                self.catalog.put(&self.server, &self.fingerprint, tools);
            }
            Err(e) => tracing::warn!(server = %self.server, "could not list tools again: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let long_ago = Instant::now().checked_sub(Duration::from_secs(100));
        assert_eq!(backoff(0, Some(Instant::now())), Duration::ZERO);
        assert_eq!(backoff(3, long_ago), Duration::ZERO);
        let now = Some(Instant::now());
        assert!(backoff(1, now) <= Duration::from_millis(250));
        assert!(backoff(2, now) > Duration::from_millis(400));
        assert!(backoff(9, now) <= Duration::from_secs(4));
    }
}
