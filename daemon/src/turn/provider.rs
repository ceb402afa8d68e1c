//! What every model provider shares: settings, the reply of one model call,
//! and a classified error (lost response id, retryable, or final).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{Stream, StreamExt as _};

use super::sse::{self, Event};

use agentx_shared::conversation::Usage;

/// Which API the model server speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Kind {
    /// OpenAI Responses: server-side state chained by response id.
    #[default]
    Responses,
    /// Chat Completions: stateless; the whole conversation every time.
    Chat,
}

/// Where and how to reach the model; the key lives in memory only.
#[derive(Clone, Default)]
pub struct Settings {
    pub kind: Kind,
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Bounds on one model call; see the README ("Model servers: limits and quirks").
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A stream that sends no byte for this long is broken (retried).
    pub idle: Duration,
    /// A server that sends no response headers for this long is broken (retried).
    pub headers: Duration,
    /// The longest answer (text plus tool-call arguments) a turn accepts.
    pub max_answer: usize,
}

/// Default longest answer: 64 MiB.
pub const MAX_ANSWER: usize = 64 << 20;

impl Default for Limits {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(120),
            headers: Duration::from_secs(60),
            max_answer: MAX_ANSWER,
        }
    }
}

/// Why a reply stopped before the model had finished, when it did.
pub fn too_large(max: usize) -> ProviderError {
    ProviderError::Protocol(format!(
        "the answer grew past {} MiB ({max} bytes, AGENTX_MAX_ANSWER_BYTES); the turn stops here",
        max >> 20
    ))
}

/// A function call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
}

/// One completed model response.
#[derive(Debug, Default)]
pub struct ModelReply {
    pub id: String,
    pub text: String,
    pub calls: Vec<Call>,
    pub usage: Usage,
    /// Set when the server cut the answer short (`max_output_tokens`,
    /// Chat `finish_reason: "length"`): the reason it gave.
    pub incomplete: Option<String>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    #[error("{message}")]
    Http {
        status: u16,
        code: Option<String>,
        param: Option<String>,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("{0}")]
    Connect(String),
    #[error("{0}")]
    Stream(String),
    /// The server answered in a way another attempt cannot fix.
    #[error("{0}")]
    Protocol(String),
    #[error("the model reported an error: {message}")]
    Model {
        code: Option<String>,
        message: String,
    },
}

impl ProviderError {
    /// A request that failed before its response headers; `proxy` is the
    /// proxy it went through, if any (named, as it may be the culprit).
    pub fn from_reqwest(base_url: &str, proxy: Option<&str>, e: &reqwest::Error) -> Self {
        let cause = causes(e);
        if let Some(proxy) = proxy {
            return Self::Connect(format!(
                "cannot reach the model server at {base_url} through the proxy {proxy}: {cause} \
                 (check HTTPS_PROXY / HTTP_PROXY / ALL_PROXY / NO_PROXY)"
            ));
        }
        if e.is_connect() {
            Self::Connect(format!(
                "cannot reach the model server at {base_url}: {cause} \
                 (check AGENTX_BASE_URL and that the server runs)"
            ))
        } else if e.is_timeout() {
            Self::Connect(format!("the model server at {base_url} timed out"))
        } else {
            Self::Connect(format!("request to {base_url} failed: {cause}"))
        }
    }

    /// A response body that broke mid-stream.
    pub fn from_body(e: &reqwest::Error) -> Self {
        let reset = io_kind(e).is_some_and(|k| {
            matches!(
                k,
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
            )
        });
        if reset {
            Self::Stream("the model server reset the connection mid-answer".into())
        } else {
            Self::Stream(format!(
                "the stream from the model server broke: {}",
                causes(e)
            ))
        }
    }

    /// An HTTP error status with the provider's JSON error body (if any).
    pub fn from_http(status: u16, body: &str, retry_after: Option<Duration>) -> Self {
        let parsed: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        let error = if parsed["error"].is_object() {
            &parsed["error"]
        } else {
            &parsed
        };
        let code = error["code"].as_str().map(str::to_owned);
        let param = error["param"].as_str().map(str::to_owned);
        let detail = error["message"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| parsed["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| body.chars().take(200).collect());
        let message = match status {
            401 => format!(
                "the model server rejected the API key (401): {detail}; set OPENAI_API_KEY or AGENTX_API_KEY"
            ),
            403 => format!("the model server refused access (403): {detail}"),
            404 => format!(
                "the model server answered 404 Not Found: {detail} (check AGENTX_BASE_URL and AGENTX_MODEL)"
            ),
            _ => format!("the model server answered {status}: {detail}"),
        };
        Self::Http {
            status,
            code,
            param,
            message,
            retry_after,
        }
    }

    /// Names the server in an HTTP error (local servers: which one failed).
    pub fn at(self, base_url: &str) -> Self {
        match self {
            Self::Http {
                status,
                code,
                param,
                message,
                retry_after,
            } => Self::Http {
                status,
                code,
                param,
                message: format!("{message} (model server {base_url})"),
                retry_after,
            },
            other => other,
        }
    }

    /// The server no longer knows `previous_response_id`: start a new chain.
    pub fn lost_response_id(&self) -> bool {
        let Self::Http {
            status,
            code,
            param,
            message,
            ..
        } = self
        else {
            return false;
        };
        if code.as_deref() == Some("previous_response_not_found") {
            return true;
        }
        let lowered = message.to_lowercase();
        matches!(status, 400 | 404)
            && (param.as_deref() == Some("previous_response_id")
                || lowered.contains("previous response")
                || lowered.contains("previous_response_id"))
    }

    /// Worth another attempt after a pause.
    pub fn retryable(&self) -> bool {
        match self {
            Self::Http { status, code, .. } => {
                let final_code = matches!(
                    code.as_deref(),
                    Some(
                        "context_length_exceeded" | "insufficient_quota" | "invalid_request_error"
                    )
                );
                !final_code && matches!(status, 408 | 409 | 429 | 500..=599)
            }
            Self::Connect(_) | Self::Stream(_) => true,
            Self::Protocol(_) => false,
            Self::Model { code, .. } => matches!(
                code.as_deref(),
                Some("server_error" | "rate_limit_exceeded" | "server_is_overloaded")
            ),
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Usage from a provider's JSON, named by its `prefix` (`input`/`output` for
/// Responses, `prompt`/`completion` for Chat Completions). Missing or null
/// fields count as 0; a missing total is the sum.
pub fn usage_from(u: &serde_json::Value, input: &str, output: &str) -> Usage {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let (i, o) = (
        n(&u[format!("{input}_tokens")]),
        n(&u[format!("{output}_tokens")]),
    );
    Usage {
        input_tokens: i,
        cached_tokens: n(&u[format!("{input}_tokens_details")]["cached_tokens"]),
        output_tokens: o,
        reasoning_tokens: n(&u[format!("{output}_tokens_details")]["reasoning_tokens"]),
        total_tokens: u["total_tokens"].as_u64().unwrap_or(i.saturating_add(o)),
        unreported: 0,
    }
}

/// `retry-after-ms`, else `Retry-After` in seconds or as an HTTP date
/// (a date in the past means "now").
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Some(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
    }
    let value = get("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return Some(Duration::from_secs_f64(secs.max(0.0)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// An error and its sources, innermost last, without repeats
/// ("error sending request: client error (Connect): tcp connect error: Connection refused").
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
}

/// The kind of the I/O error under `e`, if one is.
fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        next = err.source();
    }
    None
}

/// Proxy settings of one turn: `http_proxy`, `https_proxy`, `all_proxy`
/// and `no_proxy` (lowercase first, then uppercase), from the caller's
/// environment, or agentd's own when the caller sent none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ProxyVars {
    pub http: Option<String>,
    pub https: Option<String>,
    pub all: Option<String>,
    pub no: Option<String>,
}

impl ProxyVars {
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let pick = |lower: &str, upper: &str| {
            get(lower)
                .or_else(|| get(upper))
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        Self {
            http: pick("http_proxy", "HTTP_PROXY"),
            https: pick("https_proxy", "HTTPS_PROXY"),
            all: pick("all_proxy", "ALL_PROXY"),
            no: pick("no_proxy", "NO_PROXY"),
        }
    }

    /// From a turn's environment (agentd's own when it is empty).
    pub fn of(env: &super::shell::Environment) -> Self {
        if env.vars.is_empty() {
            return Self::from_lookup(|name| std::env::var(name).ok());
        }
        Self::from_lookup(|name| {
            env.vars
                .iter()
                .rev()
                .find(|(k, _)| k.as_os_str() == name)
                .and_then(|(_, v)| v.to_str().map(str::to_owned))
        })
    }

    /// The proxy a request to `url` goes through (for messages; reqwest
    /// decides for the request itself).
    pub fn for_url(&self, url: &str) -> Option<&str> {
        let (scheme, rest) = url.split_once("://")?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => authority.split(':').next().unwrap_or(""),
        }
        .to_ascii_lowercase();
        if let Some(no) = &self.no {
            for entry in no.split(',').map(str::trim) {
                let entry = entry.trim_start_matches('.').to_ascii_lowercase();
                if entry == "*"
                    || (!entry.is_empty()
                        && (host == entry || host.ends_with(&format!(".{entry}"))))
                {
                    return None;
                }
            }
        }
        match scheme {
            "https" => self.https.as_deref().or(self.all.as_deref()),
            _ => self.http.as_deref().or(self.all.as_deref()),
        }
    }

    fn client(&self) -> Result<reqwest::Client, ProviderError> {
        let no = || reqwest::NoProxy::from_string(self.no.as_deref().unwrap_or(""));
        let bad = |name: &str, e: reqwest::Error| {
            ProviderError::Protocol(format!("the proxy setting {name} is not usable: {e}"))
        };
        // 301/302/303 would turn the POST into a GET: stop and say so;
        // 307/308 keep the method and are followed.
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            if attempt.previous().len() >= 10 {
                attempt.error("more than 10 redirects")
            } else if matches!(attempt.status().as_u16(), 301..=303) {
                attempt.stop()
            } else {
                attempt.follow()
            }
        });
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .redirect(redirects)
            .no_proxy();
        if let Some(url) = &self.http {
            let proxy = reqwest::Proxy::http(url).map_err(|e| bad("HTTP_PROXY", e))?;
            builder = builder.proxy(proxy.no_proxy(no()));
        }
        if let Some(url) = &self.https {
            let proxy = reqwest::Proxy::https(url).map_err(|e| bad("HTTPS_PROXY", e))?;
            builder = builder.proxy(proxy.no_proxy(no()));
        }
        if let Some(url) = &self.all {
            let proxy = reqwest::Proxy::all(url).map_err(|e| bad("ALL_PROXY", e))?;
            builder = builder.proxy(proxy.no_proxy(no()));
        }
        builder
            .build()
            .map_err(|e| ProviderError::Protocol(format!("cannot set up the HTTP client: {e}")))
    }
}

/// One HTTP client per distinct proxy setting (a client keeps its
/// connection pool), the most recently used few kept.
#[derive(Default)]
pub struct Clients {
    cache: Mutex<VecDeque<(ProxyVars, reqwest::Client)>>,
}

/// Distinct proxy settings whose clients are kept.
const CLIENTS_KEPT: usize = 8;

impl Clients {
    pub fn get(&self, proxy: &ProxyVars) -> Result<reqwest::Client, ProviderError> {
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = cache.iter().position(|(k, _)| k == proxy)
            && let Some(entry) = cache.remove(i)
        {
            let client = entry.1.clone();
            cache.push_back(entry);
            return Ok(client);
        }
        let client = proxy.client()?;
        cache.push_back((proxy.clone(), client.clone()));
        while cache.len() > CLIENTS_KEPT {
            cache.pop_front();
        }
        Ok(client)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.len())
    }
}

/// How a turn reaches its model server.
pub struct Http {
    pub client: reqwest::Client,
    pub proxy: Arc<ProxyVars>,
}

type Bytes = Pin<Box<dyn Stream<Item = Result<tonic::codegen::Bytes, reqwest::Error>> + Send>>;

/// An open server-sent-event stream from a model server.
pub struct EventStream {
    bytes: Bytes,
    decoder: sse::Decoder,
    gunzip: Option<flate2::write::GzDecoder<Vec<u8>>>,
    queue: VecDeque<Event>,
    done: bool,
    idle: Duration,
}

/// A stream the decoder gave up on: another attempt would fare no better.
fn unusable(e: String) -> ProviderError {
    ProviderError::Protocol(format!("the model server's stream is unusable: {e}"))
}

/// The first bytes of a body, for messages.
fn head_of(body: &str) -> String {
    let flat: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut head: String = flat.chars().take(200).collect();
    if head.len() < flat.len() {
        head.push('…');
    }
    head
}

impl EventStream {
    /// POSTs `body` to `{base_url}/{path}` (bearer key if any) and opens the
    /// stream; an HTTP error comes back classified and naming the server.
    pub async fn open(
        http: &Http,
        settings: &Settings,
        path: &str,
        body: &serde_json::Value,
        limits: &Limits,
    ) -> Result<Self, ProviderError> {
        let url = format!("{}/{path}", settings.base_url);
        let mut request = http
            .client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .header("accept-encoding", "identity")
            .body(body.to_string());
        if let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            request = request.bearer_auth(key);
        }
        let proxy = http.proxy.for_url(&url);
        let response = match tokio::time::timeout(limits.headers, request.send()).await {
            Err(_) => {
                return Err(ProviderError::Connect(format!(
                    "the model server at {} sent no response headers within {}s \
                     (AGENTX_HEADERS_TIMEOUT_MS)",
                    settings.base_url,
                    limits.headers.as_secs_f64()
                )));
            }
            Ok(sent) => {
                sent.map_err(|e| ProviderError::from_reqwest(&settings.base_url, proxy, &e))?
            }
        };
        let status = response.status();
        if matches!(status.as_u16(), 301..=303) {
            let to = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("?")
                .to_owned();
            return Err(ProviderError::Protocol(format!(
                "the model server redirected POST {url} to {to} with {status}, which turns the \
                 request into a GET and loses it; set AGENTX_BASE_URL to the new address"
            )));
        }
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let text = response.text().await.unwrap_or_default();
            return Err(
                ProviderError::from_http(status.as_u16(), &text, retry_after)
                    .at(&settings.base_url),
            );
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_ascii_lowercase())
        };
        let content_type = header("content-type").unwrap_or_default();
        if content_type.contains("json") || content_type.starts_with("text/html") {
            let text = response.text().await.unwrap_or_default();
            let parsed: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let detail = parsed["error"]["message"]
                .as_str()
                .or_else(|| parsed["error"].as_str())
                .map_or_else(|| head_of(&text), str::to_owned);
            return Err(ProviderError::Protocol(format!(
                "the model server at {} answered {status} with {content_type} instead of an \
                 event stream (text/event-stream): {detail}",
                settings.base_url
            )));
        }
        let gunzip = match header("content-encoding").as_deref() {
            None | Some("identity") => None,
            Some("gzip" | "x-gzip") => Some(flate2::write::GzDecoder::new(Vec::new())),
            Some(other) => {
                return Err(ProviderError::Protocol(format!(
                    "the model server at {} sent the stream with content-encoding {other}, \
                     which agentx cannot decode (it asks for identity)",
                    settings.base_url
                )));
            }
        };
        Ok(Self {
            bytes: Box::pin(response.bytes_stream()),
            decoder: sse::Decoder::with_cap(limits.max_answer.saturating_mul(2)),
            gunzip,
            queue: VecDeque::new(),
            done: false,
            idle: limits.idle,
        })
    }

    fn feed(&mut self, chunk: &[u8]) -> Result<(), ProviderError> {
        use std::io::Write as _;
        let mut out = Vec::new();
        let result = match &mut self.gunzip {
            None => self.decoder.feed(chunk, &mut out),
            Some(gz) => {
                gz.write_all(chunk).map_err(|e| {
                    ProviderError::Protocol(format!("the gzip-encoded stream is corrupt: {e}"))
                })?;
                let plain = std::mem::take(gz.get_mut());
                self.decoder.feed(&plain, &mut out)
            }
        };
        self.queue.extend(out);
        result.map_err(unusable)
    }

    /// The next event with data (`None` when the stream ends); a stream
    /// that sends no byte for the idle timeout is broken.
    pub async fn next(&mut self) -> Result<Option<Event>, ProviderError> {
        loop {
            while let Some(event) = self.queue.pop_front() {
                if !event.data.trim().is_empty() {
                    return Ok(Some(event));
                }
            }
            if self.done {
                return Ok(None);
            }
            let next = tokio::time::timeout(self.idle, self.bytes.next())
                .await
                .map_err(|_| {
                    ProviderError::Stream(format!(
                        "no data from the model for {}s",
                        self.idle.as_secs_f64()
                    ))
                })?;
            match next {
                None => {
                    self.done = true;
                    if let Some(gz) = self.gunzip.take() {
                        let plain = gz.finish().map_err(|e| {
                            ProviderError::Protocol(format!(
                                "the gzip-encoded stream is corrupt: {e}"
                            ))
                        })?;
                        let mut out = Vec::new();
                        let result = self.decoder.feed(&plain, &mut out);
                        self.queue.extend(out);
                        result.map_err(unusable)?;
                    }
                }
                Some(Err(e)) => return Err(ProviderError::from_body(&e)),
                Some(Ok(chunk)) => self.feed(&chunk)?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_milliseconds_seconds_and_http_dates() {
        use reqwest::header::{HeaderMap, HeaderValue};
        let headers = |pairs: &[(&'static str, String)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_str(v).unwrap());
            }
            h
        };
        let ms = headers(&[
            ("retry-after-ms", "1500".into()),
            ("retry-after", "9".into()),
        ]);
        assert_eq!(retry_after(&ms), Some(Duration::from_millis(1500)));
        let secs = headers(&[("retry-after", "7".into())]);
        assert_eq!(retry_after(&secs), Some(Duration::from_secs(7)));
        let in_30s = std::time::SystemTime::now() + Duration::from_secs(30);
        let date = headers(&[("retry-after", httpdate::fmt_http_date(in_30s))]);
        let wait = retry_after(&date).unwrap();
        assert!(
            wait > Duration::from_secs(27) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        let past = headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".into())]);
        assert_eq!(retry_after(&past), Some(Duration::ZERO));
        let junk = headers(&[("retry-after", "soon".into())]);
        assert_eq!(retry_after(&junk), None);
    }

    #[test]
    fn lost_ids_are_recognised_in_every_known_shape() {
        let official = r#"{"error":{"type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found","message":"Previous response with id 'resp_1' not found."}}"#;
        assert!(ProviderError::from_http(400, official, None).lost_response_id());
        let bare = r#"{"error":{"message":"Invalid `previous_response_id`."}}"#;
        assert!(ProviderError::from_http(400, bare, None).lost_response_id());
        let vllm = r#"{"error":{"message":"Previous response resp_1 not found"}}"#;
        assert!(ProviderError::from_http(404, vllm, None).lost_response_id());
        let other = r#"{"error":{"message":"bad input","param":"input"}}"#;
        assert!(!ProviderError::from_http(400, other, None).lost_response_id());
    }

    #[test]
    fn proxies_are_picked_per_url_and_clients_cached_per_setting() {
        let vars = |pairs: &[(&str, &str)]| {
            let pairs: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            ProxyVars::from_lookup(move |name| {
                pairs
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            })
        };
        let p = vars(&[
            ("HTTPS_PROXY", "http://upper:1"),
            ("https_proxy", "http://lower:1"),
            ("ALL_PROXY", "http://all:1"),
            ("NO_PROXY", "localhost,.internal"),
        ]);
        assert_eq!(
            p.for_url("https://api.openai.com/v1"),
            Some("http://lower:1")
        );
        assert_eq!(p.for_url("http://api.openai.com/v1"), Some("http://all:1"));
        assert_eq!(p.for_url("http://localhost:8080/v1"), None);
        assert_eq!(p.for_url("https://llm.internal/v1"), None);
        assert_eq!(vars(&[]).for_url("https://x/v1"), None);

        let _ = rustls::crypto::ring::default_provider().install_default();
        let clients = Clients::default();
        for n in 0..20 {
            clients
                .get(&vars(&[("HTTP_PROXY", &format!("http://p{n}:1"))]))
                .unwrap();
        }
        assert_eq!(clients.len(), CLIENTS_KEPT);
        clients
            .get(&vars(&[("HTTP_PROXY", "http://p19:1")]))
            .unwrap();
        assert_eq!(clients.len(), CLIENTS_KEPT);
    }

    #[test]
    fn retry_classification() {
        assert!(ProviderError::from_http(429, "{}", None).retryable());
        assert!(ProviderError::from_http(503, "", None).retryable());
        assert!(!ProviderError::from_http(400, "{}", None).retryable());
        assert!(!ProviderError::from_http(401, "{}", None).retryable());
        let quota = r#"{"error":{"code":"insufficient_quota","message":"x"}}"#;
        assert!(!ProviderError::from_http(429, quota, None).retryable());
    }
}
