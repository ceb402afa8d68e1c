//! The web view's boundary: other local users can reach loopback TCP, so a
//! per-run token (traded for an HttpOnly cookie), a Host check against DNS
//! rebinding, an Origin check on changes, no CORS and a strict CSP.

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

/// The secrets and names of one `agentx web` run.
pub struct Guard {
    token: String,
    /// `127.0.0.1:PORT`: the only Host accepted.
    host: String,
    /// `http://127.0.0.1:PORT`: the only Origin accepted on changes.
    origin: String,
    /// Cookies are not kept apart by port: one name per port.
    cookie: String,
}

impl Guard {
    pub fn new(port: u16) -> Result<Self, String> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| format!("no random token: {e}"))?;
        let token = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let host = format!("127.0.0.1:{port}");
        Ok(Self {
            token,
            origin: format!("http://{host}"),
            host,
            cookie: format!("agentx_web_{port}"),
        })
    }

    /// The URL to open: it carries the token once.
    pub fn url(&self) -> String {
        format!("{}/?token={}", self.origin, self.token)
    }

    fn has_cookie(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| name == self.cookie && same(value, &self.token))
    }

    fn token_in_query(&self, query: Option<&str>) -> bool {
        query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter_map(|pair| pair.split_once('='))
            .any(|(name, value)| name == "token" && same(value, &self.token))
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

/// Checks every request: Host, then Origin on changes, then the cookie
/// (or the token in the URL, traded for the cookie).
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
    if guard.has_cookie(headers) {
        return next.run(request).await;
    }
    if safe && request.uri().path() == "/" && guard.token_in_query(request.uri().query()) {
        let cookie = format!(
            "{}={}; HttpOnly; SameSite=Strict; Path=/",
            guard.cookie, guard.token
        );
        return match HeaderValue::from_str(&cookie) {
            Ok(cookie) => (
                StatusCode::SEE_OTHER,
                [
                    (header::SET_COOKIE, cookie),
                    (header::LOCATION, HeaderValue::from_static("/")),
                ],
            )
                .into_response(),
            Err(_) => refuse(StatusCode::INTERNAL_SERVER_ERROR, "bad cookie\n"),
        };
    }
    refuse(
        StatusCode::UNAUTHORIZED,
        "open the URL `agentx web` printed (it carries this run's token)\n",
    )
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
