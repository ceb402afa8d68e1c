//! The MCP servers agentd owns: one process per server (per folder with
//! `scope = "folder"`) shared by every conversation and one-shot.
//!
//! `server` is one server's process and state, `process` forks and ends it
//! (from the spawner thread, so it never outlives agentd), `catalog` keeps
//! tool lists by configuration, `names` makes the names the model sees,
//! `output` turns a result into text for the model.

mod catalog;
mod names;
mod output;
mod process;
mod server;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tokio::sync::watch;

use agentx_shared::mcp_config::{McpServer, Scope};

pub use names::PREFIX;
pub use output::ForModel;
pub use process::base_environment;
pub use server::CallError;
use server::{Phase, Server};

/// Reads a variable of agentd's environment (a bearer token's).
pub type Lookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The most server processes agentd runs at once by default.
pub const DEFAULT_MAX_PROCESSES: usize = 32;

/// How long a failed server stays failed by default before a call tries it
/// again.
pub const DEFAULT_RETRY_FAILED_AFTER: Duration = Duration::from_secs(300);

/// Bounds of the pool.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Server processes at once.
    pub max_processes: usize,
    /// How long a failed server stays failed before a call tries it again.
    pub retry_failed_after: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_processes: DEFAULT_MAX_PROCESSES,
            retry_failed_after: DEFAULT_RETRY_FAILED_AFTER,
        }
    }
}

/// How often idle servers are looked for.
const REAP_EVERY: Duration = Duration::from_millis(250);

/// An MCP tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// `mcp__<server>__<tool>`, cleaned.
    pub name: String,
    pub server: String,
    pub tool: String,
    pub description: String,
    pub schema: Value,
    /// Its approval setting (`None`: the turn's policy).
    pub approval: Option<agentx_shared::config::ApprovalMode>,
}

/// One server's state, for listings.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub name: String,
    /// Set for `scope = "folder"` servers: the folder it runs for.
    pub folder: Option<PathBuf>,
    /// configured, starting, running, idle, restarting, failed, stopped, disabled.
    pub state: &'static str,
    pub pid: Option<u32>,
    pub since: Option<SystemTime>,
    pub in_flight: usize,
    pub error: Option<String>,
    /// Tools known from its (cached) list, `None` when never listed.
    pub tools: Option<usize>,
    pub command: String,
    pub scope: &'static str,
}

/// A server's place in the pool: its name, and its folder when its scope
/// is the folder.
type Key = (String, Option<PathBuf>);

/// Every MCP server of the profile.
pub struct Manager {
    config_path: PathBuf,
    home: PathBuf,
    base_env: Arc<Vec<(OsString, OsString)>>,
    secret: Lookup,
    catalog: Arc<catalog::Catalog>,
    servers: Mutex<HashMap<Key, Arc<Server>>>,
    max_processes: usize,
    retry_failed_after: Duration,
    /// config.toml's servers as last read, with the file's size and times
    /// then: read again only when those change.
    read: Mutex<Option<(FileStamp, Servers)>>,
}

type Servers = BTreeMap<String, McpServer>;

/// What tells one version of config.toml from another: size, mtime and
/// ctime (ns), inode.
type FileStamp = Option<(u64, i64, i64, i64, i64, u64)>;

fn stamp(path: &Path) -> FileStamp {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path).ok()?;
    Some((
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        m.ino(),
    ))
}

impl Manager {
    /// Servers configured in `config_path`; tool lists kept under
    /// `cache_dir`; processes start with `base_env` in `home` (unless
    /// their own `cwd` or folder says otherwise). Starts the idle reaper.
    pub fn start(
        config_path: PathBuf,
        cache_dir: PathBuf,
        home: PathBuf,
        base_env: Vec<(OsString, OsString)>,
        secret: Lookup,
        limits: Limits,
    ) -> Arc<Self> {
        let manager = Arc::new(Self {
            config_path,
            home,
            base_env: Arc::new(base_env),
            secret,
            catalog: Arc::new(catalog::Catalog::new(cache_dir)),
            servers: Mutex::new(HashMap::new()),
            max_processes: limits.max_processes.max(1),
            retry_failed_after: limits.retry_failed_after,
            read: Mutex::new(None),
        });
        let weak = Arc::downgrade(&manager);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REAP_EVERY).await;
                let Some(manager) = weak.upgrade() else {
                    return;
                };
                let now = Instant::now();
                for server in manager.all() {
                    server.stop_if_idle(now);
                }
            }
        });
        manager
    }

    /// The servers config.toml names now.
    pub fn configured(&self) -> Result<Servers, String> {
        let now = stamp(&self.config_path);
        if let Some((seen, servers)) = lock(&self.read).as_ref()
            && *seen == now
        {
            return Ok(servers.clone());
        }
        let servers =
            agentx_shared::mcp_config::load(&self.config_path).map_err(|e| e.to_string())?;
        // Kept only when the file did not change while it was read.
        if stamp(&self.config_path) == now {
            *lock(&self.read) = Some((now, servers.clone()));
        }
        Ok(servers)
    }

    /// The tools of every enabled server for a turn in `folder`: from the
    /// cached lists; a server never listed is started to list them. The
    /// notices say which servers could not be listed.
    pub async fn tools(&self, folder: &Path) -> (Vec<Tool>, Vec<String>) {
        let configured = match self.configured() {
            Ok(c) => c,
            Err(e) => return (Vec::new(), vec![format!("MCP servers are off: {e}")]),
        };
        let mut tools = Vec::new();
        let mut notices = Vec::new();
        let mut taken = BTreeSet::new();
        for (name, config) in configured {
            if !config.enabled {
                continue;
            }
            let fingerprint = config.fingerprint();
            let listed = match self.catalog.get(&name, &fingerprint) {
                Some(list) => list,
                None => {
                    let server = self.server(&config, folder);
                    match self.acquire(&server).await {
                        Ok(held) => {
                            drop(held);
                            self.catalog.get(&name, &fingerprint).unwrap_or_default()
                        }
                        Err(e) => {
                            notices.push(format!("MCP server {name}: its tools are left out: {e}"));
                            continue;
                        }
                    }
                }
            };
            for t in listed {
                if !config.allows(&t.name) {
                    continue;
                }
                tools.push(Tool {
                    approval: config.approval_for(&t.name),
                    name: names::exposed(&name, &t.name, &mut taken),
                    server: name.clone(),
                    tool: t.name,
                    description: t.description,
                    schema: t.input_schema,
                });
            }
        }
        (tools, notices)
    }

    /// Lists again the tools of every running server a turn in `folder`
    /// uses (see [`Server::relist`]).
    pub async fn relist(&self, folder: &Path) {
        let Ok(configured) = self.configured() else {
            return;
        };
        for (_, config) in configured {
            if config.enabled {
                self.server(&config, folder).relist().await;
            }
        }
    }

    /// Calls `tool` with JSON `arguments`: what the model is given (text and
    /// images) and whether the tool said it failed.
    pub async fn call(
        &self,
        tool: &Tool,
        arguments: serde_json::Map<String, Value>,
        folder: &Path,
        cancel: watch::Receiver<bool>,
    ) -> Result<(ForModel, bool), CallError> {
        let configured = self.configured().map_err(CallError::Failed)?;
        let Some(config) = configured.get(&tool.server).filter(|c| c.enabled) else {
            return Err(CallError::Failed(format!(
                "the MCP server {} is no longer configured",
                tool.server
            )));
        };
        let server = self.server(config, folder);
        if !server.is_live() {
            self.make_room(&server).map_err(CallError::Failed)?;
        }
        let result = server.call(&tool.tool, arguments, cancel).await?;
        Ok((output::for_model(&result), output::is_error(&result)))
    }

    /// Starts `server` if need be (within the process bound).
    async fn acquire(&self, server: &Arc<Server>) -> Result<server::InFlight, String> {
        if !server.is_live() {
            self.make_room(server)?;
        }
        server.acquire().await
    }

    /// Below the process bound, stopping the least recently used idle
    /// server when at it; an error when every process is busy.
    fn make_room(&self, wanted: &Arc<Server>) -> Result<(), String> {
        let live: Vec<Arc<Server>> = self
            .all()
            .into_iter()
            .filter(|s| s.is_live() && !Arc::ptr_eq(s, wanted))
            .collect();
        if live.len() < self.max_processes {
            return Ok(());
        }
        let oldest = live
            .iter()
            .filter_map(|s| Some((s.idle_since()?, s)))
            .min_by_key(|(since, _)| *since);
        match oldest {
            Some((_, s)) => {
                s.stop(false);
                Ok(())
            }
            None => Err(format!(
                "{} MCP server processes run, each busy with a call (the limit, \
                 AGENTX_MCP_MAX_PROCESSES): try again when one is done",
                live.len()
            )),
        }
    }

    /// The pool's server for `config` in `folder`; a server whose
    /// configuration changed is replaced (its process stopped).
    fn server(&self, config: &McpServer, folder: &Path) -> Arc<Server> {
        let folder = (config.scope == Scope::Folder).then(|| folder.to_owned());
        let key = (config.name.clone(), folder.clone());
        let mut servers = lock(&self.servers);
        if let Some(s) = servers.get(&key) {
            if s.config == *config {
                return Arc::clone(s);
            }
            s.stop(true);
        }
        let cwd = folder.clone().unwrap_or_else(|| self.home.clone());
        let s = Server::new(
            config.clone(),
            folder,
            cwd,
            Arc::clone(&self.base_env),
            Arc::clone(&self.secret),
            Arc::clone(&self.catalog),
            self.retry_failed_after,
        );
        servers.insert(key, Arc::clone(&s));
        s
    }

    fn all(&self) -> Vec<Arc<Server>> {
        lock(&self.servers).values().cloned().collect()
    }

    /// Every configured server and each process the pool has for it.
    pub fn status(&self) -> Result<Vec<Status>, String> {
        let configured = self.configured()?;
        let pool = self.all();
        let mut out = Vec::new();
        for (name, config) in &configured {
            let tools = self
                .catalog
                .get(name, &config.fingerprint())
                .map(|t| t.iter().filter(|t| config.allows(&t.name)).count());
            let base = Status {
                name: name.clone(),
                folder: None,
                state: if config.enabled {
                    "configured"
                } else {
                    "disabled"
                },
                pid: None,
                since: None,
                in_flight: 0,
                error: None,
                tools,
                command: describe(config),
                scope: config.scope.as_str(),
            };
            let mut mine: Vec<&Arc<Server>> = pool
                .iter()
                .filter(|s| s.config.name == *name && s.config == *config)
                .collect();
            mine.sort_by(|a, b| a.folder.cmp(&b.folder));
            if mine.is_empty() || !config.enabled {
                out.push(base);
                continue;
            }
            for s in mine {
                let snap = s.snapshot();
                let mut st = base.clone();
                st.folder = s.folder.clone();
                st.in_flight = snap.in_flight;
                st.state = match snap.phase {
                    Phase::Configured => "configured",
                    Phase::Starting => "starting",
                    Phase::Running(conn) => {
                        st.pid = conn.pid;
                        st.since = Some(conn.since);
                        "running"
                    }
                    Phase::Idle => "idle",
                    Phase::Crashed(e) => {
                        st.error = Some(e);
                        "restarting"
                    }
                    Phase::Failed(e) => {
                        st.error = Some(e);
                        "failed"
                    }
                    Phase::Stopped => "stopped",
                };
                out.push(st);
            }
        }
        Ok(out)
    }

    /// Ends every server process (stdin closed, then SIGTERM, then
    /// SIGKILL) and waits for them, at most `bound`.
    pub async fn stop_all(&self, bound: Duration) {
        let gone: Vec<_> = self.all().iter().filter_map(|s| s.stop(true)).collect();
        let all = async {
            for mut g in gone {
                let _ = g.wait_for(|done| *done).await;
            }
        };
        if tokio::time::timeout(bound, all).await.is_err() {
            tracing::warn!("some MCP servers were still exiting after {bound:?}");
        }
    }
}

/// The command line (or URL) of a server, as listings show it.
fn describe(config: &McpServer) -> String {
    match &config.transport {
        agentx_shared::mcp_config::Transport::Stdio { command, args, .. } => {
            std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ")
        }
        agentx_shared::mcp_config::Transport::Http { url, .. } => url.clone(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
