//! `agentx web`: a second, thin client of agentd in the browser. It serves
//! HTTP on 127.0.0.1 only and speaks gRPC to agentd over the Unix socket.

mod api;
mod assets;
mod changes;
mod daemon;
mod guard;
mod live;
mod reply;

use std::collections::HashMap;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::{get, post};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use agentx_shared::proto::{ApprovalPolicy, ProviderSettings, Scope, TurnInput};

use crate::context::{Ctx, provider_settings};
use crate::error::{CliError, CliResult};

/// What every request handler shares.
pub struct Web {
    /// agentd, started again when it is gone.
    pub link: daemon::Link,
    /// The folder and agent `agentx web` was started for (the default scope).
    pub scope: Scope,
    /// Provider settings for turns, or why turns cannot be sent (no key).
    pub provider: Result<ProviderSettings, String>,
    pub approval: ApprovalPolicy,
    /// The command sandbox of turns started here (`None`: agentd's default).
    pub sandbox: Option<agentx_shared::proto::SandboxPolicy>,
    pub guard: guard::Guard,
    /// Running turns started from a page: where approvals and Stop go.
    pub turns: Mutex<HashMap<String, mpsc::Sender<TurnInput>>>,
}

impl Web {
    /// The calls to agentd about `scope`.
    pub fn rpc(&self, scope: &Scope) -> crate::rpc::Rpc {
        crate::rpc::Rpc::new(self.channel(), scope.clone())
    }

    /// The connection to agentd.
    pub fn channel(&self) -> Channel {
        self.link.channel()
    }
}

/// Serves the web view until Ctrl-C.
pub async fn run(ctx: &Ctx, no_open: bool, port: Option<u16>) -> CliResult<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port.unwrap_or(0)));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::failed(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::failed(format!("cannot listen on {addr}: {e}")))?;
    let guard = guard::Guard::new(bound.port()).map_err(CliError::failed)?;
    let url = guard.url();
    let provider = ctx.config().map(|config| {
        (
            provider_settings(&config),
            ctx.approval(&config, ApprovalPolicy::Ask),
            (&ctx.sandbox(&config)).into(),
        )
    });
    let (provider, approval, sandbox) = match provider {
        Ok((p, a, s)) => (Ok(p), a, Some(s)),
        Err(e) => (Err(e.message), ApprovalPolicy::Ask, None),
    };
    let web = Arc::new(Web {
        link: daemon::Link::new(ctx.profile.clone(), ctx.channel()),
        scope: ctx.scope.clone(),
        provider,
        approval,
        sandbox,
        guard,
        turns: Mutex::new(HashMap::new()),
    });
    // Code highlighting's syntaxes, loaded before the first page asks.
    tokio::task::spawn_blocking(crate::render::markdown::highlight::warm_up);
    let app = router(Arc::clone(&web));
    println!("{url}");
    let _ = std::io::stdout().flush();
    eprintln!(
        "agentx web: serving {} on {bound} (Ctrl-C stops it)",
        ctx.scope.folder
    );
    if !no_open {
        open_browser(&url);
    }
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| CliError::failed(format!("the web view stopped: {e}")))
}

/// Every route, behind the guard (token, Host, Origin) and the headers.
fn router(web: Arc<Web>) -> Router {
    let api = Router::new()
        .route("/api/info", get(api::info))
        .route("/api/sessions", get(api::sessions))
        .route("/api/search", get(api::search))
        .route("/api/transcript", get(api::transcript))
        .route("/api/fork", post(changes::fork))
        .route("/api/rollback", post(changes::rollback))
        .route("/api/snapshots", get(changes::snapshots))
        .route("/api/diff", get(changes::diff))
        .route("/api/restore/plan", post(changes::plan_restore))
        .route("/api/restore", post(changes::restore))
        .route("/api/turn", post(live::start))
        .route("/api/turn/approve", post(live::approve))
        .route("/api/turn/stop", post(live::stop))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&web),
            daemon::ensure,
        ));
    let app = Router::new()
        .route("/", get(assets::index))
        .route("/app.js", get(assets::script))
        .route("/app.css", get(assets::style))
        .merge(api)
        .fallback(reply::not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&web),
            guard::check,
        ))
        .with_state(web);
    guard::with_headers(app)
}

/// Opens the URL in the user's browser when one can be found; quietly
/// does nothing otherwise (the URL is printed).
fn open_browser(url: &str) {
    use std::process::{Command, Stdio};
    let has_display =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if !has_display {
        return;
    }
    let _ = Command::new("xdg-open")
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}
