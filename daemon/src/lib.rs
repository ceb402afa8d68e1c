//! agentd: the per-user daemon that owns all conversation, checkpoint and
//! snapshot state and serves it to `agentx` clients over a Unix socket.
//!
//! The daemon is a library with a thin binary (`src/main.rs`) so that fuzz
//! targets and benchmarks can reach its on-disk readers; see [`fuzzing`].
//!
//! # Layout
//!
//! Bottom to top (the allowed imports between them are checked by `layers`):
//!
//! - Process helpers: `pidlock` (single instance, re-checked while
//!   serving), `listener` (bind 0600 or inherit from systemd, stale-socket
//!   replacement, unlink only what it bound), `peer` (SO_PEERCRED check),
//!   `authority` (rewrites a socket-path `:authority` from grpc-core
//!   clients), `logging`, `cli`, `durable` (atomic writes, quarantine),
//!   `shutdown` (the one stop handle: requested, then stopping),
//!   `spawner` (the one thread forking tool supervisors and MCP servers),
//!   `priority` (background threads and the background runtime), `faults`
//!   (debug-only fault points for tests) and
//!   `environment` (agentd's environment, read once in [`run`] and handed
//!   on; the others take typed settings parsed from it).
//! - `store`: conversations on disk. One actor per folder key and agent
//!   (`group`, with `handle` for requests, `change` (what a commit changes),
//!   `files`, `rollback` and `turns`:
//!   one turn at a time per conversation); `conversation` = state document +
//!   journal (`rebuild` when the document is corrupt); `oneshot` =
//!   isolated one-shot states; `fork` (forks and imports); `pulled`
//!   (another machine's copy applied); `commits` (the `Changed` event sent
//!   to subscribers); `elsewhere` (conversations kept in other folders).
//! - `snapshot`: folder snapshots. `mod` = the store, `take`, `scan` (the
//!   walk, stat cache and `read`), `watch` (inotify per folder, dirty
//!   sets) + `incremental`, `manifest` (entries, chunks shared between
//!   snapshots), `blobs`, `timeline`, `summary`, `diff`, `undo`
//!   (undo/rewind), `restore` (`plan`, `put` one path, `live`, `durable`,
//!   `path_error`), `service` (the actor thread owning every timeline) and
//!   `seams` (test hooks, tests only).
//! - `search`: the tantivy index (`mod` = the index and its indexer
//!   thread, `query`, `health` and `garbled`: a damaged index is rebuilt).
//! - `remote`: the PostgreSQL copy. `url` (parsing, redaction), `pgpass`,
//!   `tls`, `project` keys, `schema` migrations, `lanes` (connections for
//!   listing, search, pull and the pusher), `listen` (LISTEN/NOTIFY), `search`,
//!   `pusher` (`outbox`, `send`), `pull` over `copy` and `line`, `rule`
//!   (the fork rule as a pure function), `clear`.
//! - `mcp`: the MCP servers agentd owns: `server` (one process and its
//!   state), `process` (fork and end), `catalog` (tool lists by
//!   configuration), `names`, `output`.
//! - `turn`: the engine of one turn. `mod` = its steps, `tools` (approvals
//!   and calls), `retry`, the `responses` and `chat` providers over `sse`
//!   and `provider` (`error`, `http`), `context`, `compact`, `window`,
//!   `tokens`, `meter`, `instructions` (AGENTS.md), `resolve`, and the
//!   `shell` tool with its output and supervisor, `live` and `live_tap`
//!   (a running command's output on its way to the client), `mcp_calls`
//!   (MCP tools offered and called).
//! - `runner`: one turn from start to finish (lease, pre-turn pull, before
//!   and after snapshots, ending on stop).
//! - `services`: the gRPC edge, one file per service; wire ↔ domain
//!   conversion there, every error's status in `services::status`.
//! - `server`: wiring (store, subscribers, shutdown), router, readiness,
//!   signals, graceful drain, the profile guard.
//!
//! `fuzzing` and `benching` expose readers to `fuzz/` and benchmarks;
//! `proptests` holds the property tests.

mod authority;
#[doc(hidden)]
pub mod benching;
pub mod cli;
mod connections;
mod durable;
mod environment;
mod faults;
#[doc(hidden)]
pub mod fuzzing;
mod layers;
mod listener;
mod logging;
mod mcp;
mod memory;
mod peer;
mod pidlock;
mod priority;
#[cfg(test)]
mod proptests;
mod remote;
mod runner;
mod search;
mod server;
mod services;
mod shutdown;
mod snapshot;
mod spawner;
mod store;
mod supervisor;
mod turn;

use std::process::ExitCode;

use anyhow::Context as _;

use agentx_shared::profile::{ENV_HOME, ENV_SOCKET, Profile};

use environment::Environment;

/// Runs the daemon until it is told to stop: takes the profile's pid lock,
/// sets up logging and serves clients. An already running daemon for the
/// same profile is not an error (exit code 0, nothing done).
pub fn run(args: cli::Args) -> anyhow::Result<ExitCode> {
    // Everything agentd creates is private to the user, sockets included.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    // The one read of the environment: everything below is handed this.
    let env = std::sync::Arc::new(Environment::from_process());
    memory::limit_arenas(env.var_os("MALLOC_ARENA_MAX").is_some());
    let profile = resolve_profile(args.profile.as_deref(), &env)?;
    profile.ensure_dir()?;
    raise_fd_limit();

    let lock = match pidlock::PidLock::acquire(&profile.pid_file())? {
        pidlock::Acquired::Lock(lock) => std::sync::Arc::new(std::sync::Mutex::new(lock)),
        pidlock::Acquired::HeldBy(pid) => {
            eprintln!(
                "agentd: already running (pid {pid}) for {}",
                profile.dir.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
    };
    let log_path = logging::init(args.log, &profile, &env)?;
    // TLS for https model servers; an error only means it was installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();

    // Bulk hashing and scanning yield the CPU to requests.
    priority::background_pool();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let config = server::Config {
        profile,
        log_path,
        #[cfg(debug_assertions)]
        reported_version: args.report_version,
        #[cfg(not(debug_assertions))]
        reported_version: None,
        pid_lock: std::sync::Arc::clone(&lock),
        env,
    };
    let result = runtime.block_on(server::run(config));
    // Let blocked tasks go before the lock is released, so a successor never
    // overlaps with us.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    if let Err(err) = &result {
        tracing::error!("agentd stopped with an error: {err:#}");
    }
    drop(lock);
    result.map(|()| ExitCode::SUCCESS)
}

/// The profile as `Profile::resolve` finds it, from `env`.
fn resolve_profile(
    name: Option<&str>,
    env: &Environment,
) -> Result<Profile, agentx_shared::profile::ProfileError> {
    let path = |k: &str| {
        env.var_os(k)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    Profile::resolve_with(name, path(ENV_HOME), path(ENV_SOCKET), path("HOME"))
}

/// Every client connection and open conversation holds descriptors: lift
/// the soft limit to the hard one so a thousand concurrent one-shots fit.
fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}
