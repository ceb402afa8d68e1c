//! The web view's boundary: other local users and servers can reach
//! loopback TCP, and browsers send cookies to every 127.0.0.1 port. So no
//! cookie: the printed URL carries a one-time login token, traded for a
//! per-run key in the URL's fragment (never sent to a server, taken into the
//! page's sessionStorage and out of the address bar), which every API call
//! sends as a header. Also a Host check against DNS rebinding, an Origin
//! check on changes, no CORS and a strict CSP.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::set_header::SetResponseHeaderLayer;

use super::Web;

/// The page may load only its own script and style, and talk only to us.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The API key's header.
pub const KEY_HEADER: &str = "x-agentx-key";

/// The secrets and names of one `agentx web` run.
pub struct Guard {
    /// In the printed URL (and so in `xdg-open`'s argv): works once.
    token: String,
    login_used: std::sync::atomic::AtomicBool,
    /// What the page sends with every API call; only the browser that
    /// logged in ever receives it.
    key: String,
    /// `127.0.0.1:PORT`: the only Host accepted.
    host: String,
    /// `http://127.0.0.1:PORT`: the only Origin accepted on changes.
    origin: String,
}

fn random_hex() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no random token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Guard {
    pub fn new(port: u16) -> Result<Self, String> {
        let host = format!("127.0.0.1:{port}");
        Ok(Self {
            token: random_hex()?,
            login_used: std::sync::atomic::AtomicBool::new(false),
            key: random_hex()?,
            origin: format!("http://{host}"),
            host,
        })
    }

    /// The URL to open: it carries the login token, good once.
    pub fn url(&self) -> String {
        format!("{}/?token={}", self.origin, self.token)
    }

    fn has_key(&self, headers: &HeaderMap) -> bool {
        headers
            .get(KEY_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| same(v, &self.key))
    }

    fn token_in_query(&self, query: Option<&str>) -> bool {
        query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter_map(|pair| pair.split_once('='))
            .any(|(name, value)| name == "token" && same(value, &self.token))
    }

    /// Takes the login token: `true` the first time only.
    fn take_login(&self) -> bool {
        !self
            .login_used
            .swap(true, std::sync::atomic::Ordering::SeqCst)
    }
}

/// Compares without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn refuse(status: StatusCode, why: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        why,
    )
        .into_response()
}

/// Checks every request: Host, then Origin on changes, then the key on
/// the API (the page and its script hold no data and need none), and
/// trades the one-time login token for the key.
pub async fn check(State(web): State<Arc<Web>>, request: Request, next: Next) -> Response {
    let guard = &web.guard;
    let headers = request.headers();
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if host != Some(guard.host.as_str()) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "this web view answers only at 127.0.0.1 and its port\n",
        );
    }
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if !safe {
        let origin = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok());
        if origin != Some(guard.origin.as_str()) {
            return refuse(StatusCode::FORBIDDEN, "cross-origin request refused\n");
        }
    }
    let path = request.uri().path();
    if path.starts_with("/api/") {
        if guard.has_key(headers) {
            return next.run(request).await;
        }
        return refuse(
            StatusCode::UNAUTHORIZED,
            "open the URL `agentx web` printed (it logs this browser tab in once)\n",
        );
    }
    if safe && path == "/" && request.uri().query().is_some_and(|q| q.contains("token=")) {
        if !guard.token_in_query(request.uri().query()) {
            return refuse(StatusCode::UNAUTHORIZED, "not this run's login URL\n");
        }
        if !guard.take_login() {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "this login URL was used already: it works once; run `agentx web` again for \
                 another\n",
            );
        }
        // The key goes in the fragment: the browser keeps it, no server
        // (nor a log, nor a Referer) ever sees it.
        let location = format!("/#key={}", guard.key);
        return match HeaderValue::from_str(&location) {
            Ok(location) => (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response(),
            Err(_) => refuse(StatusCode::INTERNAL_SERVER_ERROR, "bad location\n"),
        };
    }
    next.run(request).await
}

/// Headers on every answer: the CSP, no sniffing, no framing, no caching,
/// no referrer (the first URL carries the token).
pub fn with_headers(router: Router) -> Router {
    let set = |name, value: &'static str| {
        SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value))
    };
    router
        .layer(set(header::CONTENT_SECURITY_POLICY, CSP))
        .layer(set(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(set(header::X_FRAME_OPTIONS, "DENY"))
        .layer(set(header::REFERRER_POLICY, "no-referrer"))
        .layer(set(header::CACHE_CONTROL, "no-store"))
}
