//! The HTTP side of a model call: per-turn proxies, a bounded cache of
//! clients, and the event stream with its idle timer and size limit.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{Stream, StreamExt as _};

use super::super::sse::{self, Event};
use super::error::{ProviderError, retry_after};
use super::{Limits, Settings};

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

    /// From `env`, agentd's environment as read at start.
    pub fn from_environment(env: &crate::environment::Environment) -> Self {
        Self::from_lookup(|name| env.var(name).map(str::to_owned))
    }

    /// From a turn's environment (agentd's own, `own`, when it is empty).
    pub fn of(env: &crate::turn::shell::Environment, own: &Self) -> Self {
        let Some(vars) = &env.vars else {
            return own.clone();
        };
        if vars.is_empty() {
            return own.clone();
        }
        Self::from_lookup(|name| {
            vars.iter()
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
        // 307/308 keep the method and are followed within the same origin
        // only (scheme, host and port): the prompt never goes elsewhere,
        // nor from https to http.
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let origin = attempt.previous().first().map(reqwest::Url::origin);
            if attempt.previous().len() >= 10 {
                attempt.error("more than 10 redirects")
            } else if matches!(attempt.status().as_u16(), 301..=303) {
                attempt.stop()
            } else if origin.is_some_and(|o| o != attempt.url().origin()) {
                let to = attempt.url().to_string();
                attempt.error(format!(
                    "the model server redirected the request to {to}, another origin; agentx \
                     does not send a prompt elsewhere (set AGENTX_BASE_URL there if you trust it)"
                ))
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
        let client = proxy.client().map_err(redacted)?;
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
    /// gzip input not inflated yet: inflated a slice at a time, only when
    /// the events of the last slice are taken (see [`GZ_SLICE`]).
    compressed: VecDeque<u8>,
    queue: VecDeque<Event>,
    done: bool,
    idle: Duration,
}

/// `e` with the user-info of every URL in its message replaced by `***`:
/// a key in `AGENTX_BASE_URL` or a password in a proxy URL is never
/// printed, logged nor stored (every provider error passes here).
pub fn redacted(e: ProviderError) -> ProviderError {
    e.map_message(|m| crate::remote::redact_userinfo(&m))
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

/// The most of a body that is not an event stream agentd reads (an error's
/// JSON, an HTML page): the rest is never buffered.
pub const MAX_OTHER_BODY: usize = 8 << 10;

/// The first [`MAX_OTHER_BODY`] bytes of a body that is not an event
/// stream, read within the idle timeout; a body that stalls is a broken
/// stream (retried), named with the status it came with.
async fn body_head(
    mut response: reqwest::Response,
    base_url: &str,
    limits: &Limits,
) -> Result<String, ProviderError> {
    let status = response.status();
    let mut head: Vec<u8> = Vec::new();
    let read = async {
        while head.len() < MAX_OTHER_BODY {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = MAX_OTHER_BODY - head.len();
                    head.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                Ok(None) => break,
                Err(e) => return Err(ProviderError::from_body(&e)),
            }
        }
        Ok(())
    };
    match tokio::time::timeout(limits.idle, read).await {
        Ok(result) => result?,
        Err(_) => {
            return Err(ProviderError::Stream(format!(
                "the model server at {base_url} answered {status} but its body stalled: \
                 {} bytes in {}s (AGENTX_STREAM_IDLE_MS)",
                head.len(),
                limits.idle.as_secs_f64()
            )));
        }
    }
    // The rest of the body is dropped with the connection, unread.
    drop(response);
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// Sends the POST and waits (at most the headers timeout) for the
/// response's headers.
async fn post(
    http: &Http,
    settings: &Settings,
    url: &str,
    body: &serde_json::Value,
    limits: &Limits,
) -> Result<reqwest::Response, ProviderError> {
    let mut request = http
        .client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .header("accept-encoding", "identity")
        .body(body.to_string());
    if let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) {
        request = request.bearer_auth(key);
    }
    let proxy = http.proxy.for_url(url);
    match tokio::time::timeout(limits.headers, request.send()).await {
        Err(_) => Err(ProviderError::Connect(format!(
            "the model server at {} sent no response headers within {}s \
             (AGENTX_HEADERS_TIMEOUT_MS)",
            settings.base_url,
            limits.headers.as_secs_f64()
        ))),
        Ok(sent) => sent.map_err(|e| ProviderError::from_reqwest(&settings.base_url, proxy, &e)),
    }
}

/// The response when its status is a success; a redirect (which would turn
/// the POST into a GET) or an HTTP error comes back as an error.
async fn check_status(
    response: reqwest::Response,
    url: &str,
    base_url: &str,
    limits: &Limits,
) -> Result<reqwest::Response, ProviderError> {
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
        let text = body_head(response, base_url, limits).await?;
        return Err(ProviderError::from_http(status.as_u16(), &text, retry_after).at(base_url));
    }
    Ok(response)
}

/// The response unless it is JSON or HTML instead of an event stream (then
/// an error carrying the server's message or the body's start).
async fn check_content_type(
    response: reqwest::Response,
    base_url: &str,
    limits: &Limits,
) -> Result<reqwest::Response, ProviderError> {
    let status = response.status();
    let content_type = header(&response, "content-type").unwrap_or_default();
    if content_type.contains("json") || content_type.starts_with("text/html") {
        let text = body_head(response, base_url, limits).await?;
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let detail = parsed["error"]["message"]
            .as_str()
            .or_else(|| parsed["error"].as_str())
            .map_or_else(|| head_of(&text), str::to_owned);
        return Err(ProviderError::Protocol(format!(
            "the model server at {base_url} answered {status} with {content_type} instead of an \
             event stream (text/event-stream): {detail}"
        )));
    }
    Ok(response)
}

/// gzip input inflated at a time (see `EventStream::inflate_some`).
const GZ_SLICE: usize = 64;

/// The gzip decoder the stream's content-encoding needs (`None`: identity);
/// any other encoding is an error.
fn gunzip_for(
    response: &reqwest::Response,
    base_url: &str,
) -> Result<Option<flate2::write::GzDecoder<Vec<u8>>>, ProviderError> {
    match header(response, "content-encoding").as_deref() {
        None | Some("identity") => Ok(None),
        Some("gzip" | "x-gzip") => Ok(Some(flate2::write::GzDecoder::new(Vec::new()))),
        Some(other) => Err(ProviderError::Protocol(format!(
            "the model server at {base_url} sent the stream with content-encoding {other}, \
             which agentx cannot decode (it asks for identity)"
        ))),
    }
}

/// A response header, trimmed and lowercased.
fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
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
        Self::open_unredacted(http, settings, path, body, limits)
            .await
            .map_err(redacted)
    }

    async fn open_unredacted(
        http: &Http,
        settings: &Settings,
        path: &str,
        body: &serde_json::Value,
        limits: &Limits,
    ) -> Result<Self, ProviderError> {
        let url = format!("{}/{path}", settings.base_url);
        let response = post(http, settings, &url, body, limits).await?;
        let response = check_status(response, &url, &settings.base_url, limits).await?;
        let response = check_content_type(response, &settings.base_url, limits).await?;
        let gunzip = gunzip_for(&response, &settings.base_url)?;
        Ok(Self {
            bytes: Box::pin(response.bytes_stream()),
            decoder: sse::Decoder::with_cap(limits.max_answer.saturating_mul(2)),
            gunzip,
            compressed: VecDeque::new(),
            queue: VecDeque::new(),
            done: false,
            idle: limits.idle,
        })
    }

    fn feed(&mut self, chunk: &[u8]) -> Result<(), ProviderError> {
        if self.gunzip.is_some() {
            self.compressed.extend(chunk);
            return Ok(());
        }
        let mut out = Vec::new();
        let result = self.decoder.feed(chunk, &mut out);
        self.queue.extend(out);
        result.map_err(unusable)
    }

    /// Inflates the next slice of buffered gzip input into events; `false`
    /// when there is none. A slice inflates to at most ~66 KB (deflate's
    /// ratio is at most 1032:1), so a small bomb costs no more memory than
    /// the same bytes sent plainly: the stream's caps see every piece.
    fn inflate_some(&mut self) -> Result<bool, ProviderError> {
        use std::io::Write as _;
        let Some(gz) = &mut self.gunzip else {
            return Ok(false);
        };
        if self.compressed.is_empty() {
            return Ok(false);
        }
        let n = self.compressed.len().min(GZ_SLICE);
        let slice: Vec<u8> = self.compressed.drain(..n).collect();
        gz.write_all(&slice).map_err(|e| {
            ProviderError::Protocol(format!("the gzip-encoded stream is corrupt: {e}"))
        })?;
        let plain = std::mem::take(gz.get_mut());
        let mut out = Vec::new();
        let result = self.decoder.feed(&plain, &mut out);
        self.queue.extend(out);
        result.map_err(unusable)?;
        Ok(true)
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
            if self.inflate_some()? {
                continue;
            }
            if self.done {
                let Some(gz) = self.gunzip.take() else {
                    return Ok(None);
                };
                // Every slice is in: what the decoder still holds.
                let plain = gz.finish().map_err(|e| {
                    ProviderError::Protocol(format!("the gzip-encoded stream is corrupt: {e}"))
                })?;
                let mut out = Vec::new();
                let result = self.decoder.feed(&plain, &mut out);
                self.queue.extend(out);
                result.map_err(unusable)?;
                continue;
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
                None => self.done = true,
                Some(Err(e)) => return Err(redacted(ProviderError::from_body(&e))),
                Some(Ok(chunk)) => self.feed(&chunk)?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
