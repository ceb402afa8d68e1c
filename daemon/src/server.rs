//! The gRPC server: every service on one Unix socket behind the peer-uid
//! check, plus health and reflection; readiness, signals and graceful stop.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::service::{InterceptorLayer, Routes};
use tonic_reflection::server::{v1, v1alpha};

use agentx_shared::profile::Profile;
use agentx_shared::proto::daemon_server::DaemonServer;
use agentx_shared::proto::library_server::LibraryServer;
use agentx_shared::proto::oneshots_server::OneshotsServer;
use agentx_shared::proto::sessions_server::SessionsServer;
use agentx_shared::proto::snapshots_server::SnapshotsServer;
use agentx_shared::proto::turns_server::TurnsServer;

use crate::authority::AuthorityFix;
use crate::environment::Environment;
use crate::listener::{Listener, remove_owned_socket};
use crate::peer::PeerCheck;
use crate::pidlock::{Check, PidLock};
use crate::services::daemon::{DaemonInfo, DaemonService};
use crate::services::oneshots::OneshotsService;
use crate::services::sessions::SessionsService;
use crate::services::snapshots::SnapshotsService;
use crate::services::turns::TurnsService;
use crate::shutdown::Shutdown;
use crate::snapshot::service::Snapshots;
use crate::store::Store;
use crate::turn::Engine;

/// In-flight RPCs get this long after a stop is requested; systemd's default
/// stop timeout and the design's "exit within 5 s" both leave room for it.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(4);

/// Running tool commands are killed at once on a stop; their supervisors
/// take this long at most to report their trees gone.
const TOOLS_STOP_TIMEOUT: Duration = Duration::from_secs(3);

pub struct Config {
    pub profile: Profile,
    pub log_path: Option<PathBuf>,
    pub reported_version: Option<String>,
    /// The profile's pid lock, re-checked while serving.
    pub pid_lock: Arc<std::sync::Mutex<PidLock>>,
    /// agentd's environment, read once at start.
    pub env: Arc<Environment>,
}

/// How long MCP servers get to exit when agentd stops.
const MCP_STOP_TIMEOUT: Duration = Duration::from_secs(6);

/// How often agentd checks that its pid file and socket are still its own.
const GUARD_EVERY: Duration = Duration::from_millis(500);

/// Serves until SIGTERM, SIGINT or a Shutdown RPC, then drains and cleans up.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let Listener {
        listener,
        owned_path,
    } = Listener::acquire(&config.profile.socket)?;
    let shutdown = Shutdown::default();
    let served = Arc::new(AtomicU64::new(0));
    let landlock_abi = crate::turn::shell::sandbox::kernel_abi(
        config
            .env
            .var(crate::turn::shell::sandbox::PRETEND_ENV)
            .and_then(|v| v.trim().parse().ok()),
    );
    let info = Arc::new(DaemonInfo {
        landlock_abi,
        pid: std::process::id(),
        version: config
            .reported_version
            .unwrap_or_else(|| agentx_shared::version::VERSION.to_owned()),
        started_at: SystemTime::now(),
        started: Instant::now(),
        socket_path: config.profile.socket.clone(),
        profile_dir: config.profile.dir.clone(),
        socket_inherited: owned_path.is_none(),
        log_path: config.log_path,
        served: Arc::clone(&served),
        stop: shutdown.clone(),
    });

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<DaemonServer<DaemonService>>().await;
    let (reflection, reflection_v1alpha) = reflection()?;
    let domain = Domain::start(&config.profile, &shutdown, &config.env, landlock_abi)?;
    let mcp = Arc::clone(&domain.mcp);

    let uid = nix::unistd::geteuid().as_raw();
    let routes = routes(&info, domain)
        .add_service(health_service)
        .add_service(reflection)
        .add_service(reflection_v1alpha);
    let service = tower::ServiceBuilder::new()
        .layer(InterceptorLayer::new(PeerCheck::new(uid, served)))
        .service(routes.prepare());

    tokio::spawn(guard_profile(
        Arc::clone(&config.pid_lock),
        owned_path.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(watch_signals(shutdown.clone()));
    let stop_requested = {
        let shutdown = shutdown.clone();
        async move { shutdown.wait_requested().await }
    };

    // grpc-core clients name the socket's path as :authority, which h2
    // refuses: each connection gets a usable one (see authority.rs).
    let incoming = UnixListenerStream::new(listener).map(|c| c.map(AuthorityFix::new));
    announce_ready(&info);

    let server = tokio::spawn(crate::connections::serve(service, incoming, stop_requested));
    shutdown.wait_requested().await;
    begin_stopping(owned_path.as_ref(), &shutdown);

    // MCP servers end with the tool commands: stdin closed, SIGTERM, SIGKILL.
    tokio::join!(drain(server, &shutdown), mcp.stop_all(MCP_STOP_TIMEOUT));
    // State is written durably before each RPC returns, so nothing is left
    // to flush here; later stores hook their shutdown in at this point.
    tracing::info!("agentd stopped");
    Ok(())
}

/// agentd's own services, each on what it works on.
fn routes(info: &Arc<DaemonInfo>, domain: Domain) -> Routes {
    let Domain {
        store,
        snapshots,
        engine,
        search,
        remote,
        tuning,
        machine,
        mcp,
    } = domain;
    Routes::new(DaemonServer::new(DaemonService::new(
        Arc::clone(info),
        remote.clone(),
        search.clone(),
        mcp,
    )))
    .add_service(SessionsServer::new(SessionsService::new(
        Arc::clone(&store),
        snapshots.clone(),
        remote.clone(),
        Arc::clone(&engine),
        search.clone(),
        machine,
    )))
    .add_service(
        TurnsServer::new(TurnsService::new(
            Arc::clone(&store),
            engine,
            tuning,
            snapshots.clone(),
            remote.clone(),
        ))
        .max_encoding_message_size(agentx_shared::limits::MAX_TURN_EVENT)
        .max_decoding_message_size(agentx_shared::limits::MAX_TURN_EVENT),
    )
    .add_service(OneshotsServer::new(OneshotsService::new(Arc::clone(
        &store,
    ))))
    .add_service(SnapshotsServer::new(SnapshotsService::new(
        Arc::clone(&store),
        snapshots.clone(),
    )))
    .add_service(LibraryServer::new(
        crate::services::library::LibraryService::new(Arc::clone(&store), search, remote.clone()),
    ))
}

/// Tells systemd (a no-op without NOTIFY_SOCKET) and the log that agentd
/// is ready.
fn announce_ready(info: &DaemonInfo) {
    if let Err(err) = sd_notify::notify(&[sd_notify::NotifyState::Ready]) {
        tracing::warn!("sd_notify READY failed: {err}");
    }
    tracing::info!(pid = info.pid, version = %info.version, "agentd ready");
}

/// The first steps of a stop, before draining: systemd told, the socket
/// path freed, running turns told to end.
fn begin_stopping(owned_path: Option<&crate::listener::OwnedSocket>, shutdown: &Shutdown) {
    tracing::info!("stopping: no new connections, draining in-flight RPCs");
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    // The listener is closed by now or within a moment; new clients must not
    // find a socket nobody will answer on.
    remove_owned_socket(owned_path);
    // Running turns end now, each with a record and an after-snapshot, and
    // every tool command dies with its whole process tree.
    shutdown.begin_stopping();
}

/// Reflection in both versions: grpcurl and grpcui speak v1; Python's
/// grpcio-reflection, Postman and older grpcurl only v1alpha.
fn reflection() -> anyhow::Result<(
    v1::ServerReflectionServer<impl v1::ServerReflection>,
    v1alpha::ServerReflectionServer<impl v1alpha::ServerReflection>,
)> {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(agentx_shared::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let current = builder()
        .build_v1()
        .context("cannot build the reflection service")?;
    let older = builder()
        .build_v1alpha()
        .context("cannot build the reflection service (v1alpha)")?;
    Ok((current, older))
}

/// What the services work on, started before the socket serves.
struct Domain {
    store: Arc<Store>,
    snapshots: Snapshots,
    engine: Arc<Engine>,
    search: Option<Arc<crate::search::SearchIndex>>,
    remote: Option<Arc<crate::remote::Remote>>,
    /// The turn service's timing knobs.
    tuning: crate::services::turns::Tuning,
    /// This machine's name, as the remote store knows it.
    machine: String,
    /// The profile's MCP servers.
    mcp: Arc<crate::mcp::Manager>,
}

impl Domain {
    fn start(
        profile: &Profile,
        shutdown: &Shutdown,
        env: &Arc<Environment>,
        landlock_abi: u32,
    ) -> anyhow::Result<Self> {
        // The store announces its commits; the indexer and the pusher
        // subscribe (the store knows neither).
        let commits = crate::store::Commits::default();
        let store = Store::new(
            profile.sessions_dir(),
            commits.clone(),
            crate::store::max_idle_groups(env),
        );
        let snapshots = Snapshots::start(
            profile.snapshots_dir(),
            profile.config_file(),
            Arc::clone(env),
        )
        .context("cannot start the snapshot store")?;
        // HTTP clients are made per proxy setting as turns need them.
        let models = Arc::new(crate::turn::window::Models::open(
            profile.dir.join("model-windows.json"),
        ));
        let mcp = crate::mcp::Manager::start(
            profile.config_file(),
            profile.dir.join("mcp-tools"),
            env.path("HOME").unwrap_or_else(|| profile.dir.clone()),
            crate::mcp::base_environment(|k| env.var_os(k).map(ToOwned::to_owned)),
            {
                let env = Arc::clone(env);
                Arc::new(move |k: &str| env.non_empty(k))
            },
            crate::mcp::Limits {
                max_processes: env
                    .non_empty("AGENTX_MCP_MAX_PROCESSES")
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(crate::mcp::DEFAULT_MAX_PROCESSES),
                retry_failed_after: env
                    .non_empty("AGENTX_MCP_RETRY_FAILED_SEC")
                    .and_then(|n| n.trim().parse().ok())
                    .map_or(crate::mcp::DEFAULT_RETRY_FAILED_AFTER, Duration::from_secs),
            },
        );
        let engine = Arc::new(
            Engine::new(
                profile.dir.clone(),
                models,
                shutdown.clone(),
                crate::turn::provider::ProxyVars::from_environment(env),
                landlock_abi,
            )
            .with_mcp(Arc::clone(&mcp)),
        );
        let search = crate::search::start(
            profile.dir.join("search"),
            profile.sessions_dir(),
            commits.subscribe(),
        )
        .map_err(|e| tracing::warn!("search is off: {e}"))
        .ok();
        // The remote store (off without remote_url): pushes in the background.
        let remote = crate::remote::Remote::start(
            &profile.dir,
            (Arc::clone(&store), profile.sessions_dir()),
            &profile.config_file(),
            &commits,
            env,
        );
        let machine = remote.as_ref().map_or_else(
            || crate::remote::machine_name(env),
            |r| r.machine().to_owned(),
        );
        Ok(Self {
            store,
            snapshots,
            engine,
            search,
            remote,
            tuning: crate::services::turns::Tuning::from_environment(env),
            machine,
            mcp,
        })
    }
}

/// Lets in-flight RPCs finish (bounded) while every tool command dies with
/// its whole process tree: a turn running one records it and ends, so its
/// RPC drains too.
async fn drain(server: tokio::task::JoinHandle<()>, shutdown: &Shutdown) {
    let (tools_gone, drained) = tokio::join!(
        shutdown.tools_gone(TOOLS_STOP_TIMEOUT),
        tokio::time::timeout(DRAIN_TIMEOUT, server)
    );
    if !tools_gone {
        tracing::warn!("some tool processes were still exiting after {TOOLS_STOP_TIMEOUT:?}");
    }
    match drained {
        Ok(Ok(())) => tracing::info!("all RPCs finished"),
        Ok(Err(err)) => tracing::warn!("server task failed: {err}"),
        Err(_) => {
            tracing::warn!("in-flight RPCs did not finish within {DRAIN_TIMEOUT:?}; closing them")
        }
    }
}

/// Keeps single-instance true whatever happens to the files around agentd.
/// A deleted pid file is re-created and locked; a socket deleted or replaced
/// means clients can no longer reach us, so we stop (gracefully: we still
/// hold the lock, no successor can write yet) and the next client starts a
/// fresh agentd. A lock another process took (the profile was deleted and a
/// second agentd started) means two writers: stop writing at once — exit
/// without draining, as a crash would, which the store is built to survive.
async fn guard_profile(
    lock: Arc<std::sync::Mutex<PidLock>>,
    socket: Option<crate::listener::OwnedSocket>,
    stop: Shutdown,
) {
    let mut tick = tokio::time::interval(GUARD_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if stop.requested() {
            return;
        }
        let check = match lock.lock() {
            Ok(mut held) => held.check(),
            Err(_) => Check::Lost("the pid lock's mutex was poisoned".into()),
        };
        match check {
            Check::Ours => {}
            Check::Readopted(what) => tracing::warn!("{what}"),
            Check::Lost(what) => {
                tracing::error!("{what}: another agentd may serve this profile; exiting now");
                std::process::exit(1);
            }
        }
        if let Some(what) = socket.as_ref().and_then(|s| s.check()) {
            tracing::warn!("{what}: clients cannot reach this agentd any more; stopping");
            stop.request();
            return;
        }
    }
}

/// Turns SIGTERM, SIGINT and SIGHUP into a stop request: all three drain.
/// agentd has no configuration of its own to reload (clients send theirs
/// with every turn), so a hang-up means "stop cleanly", never "die at once".
async fn watch_signals(stop: Shutdown) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
        _ = hup.recv() => tracing::info!("SIGHUP received"),
    }
    stop.request();
}
