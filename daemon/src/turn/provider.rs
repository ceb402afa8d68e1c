//! What every model provider shares: settings, the reply of one model call,
//! and a classified error (lost response id, retryable, or final).

use std::pin::Pin;
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
    #[error("the model reported an error: {message}")]
    Model {
        code: Option<String>,
        message: String,
    },
}

impl ProviderError {
    pub fn from_reqwest(base_url: &str, e: &reqwest::Error) -> Self {
        if e.is_connect() {
            Self::Connect(format!(
                "cannot reach the model server at {base_url}: connection refused or unreachable \
                 (check AGENTX_BASE_URL and that the server runs)"
            ))
        } else if e.is_timeout() {
            Self::Connect(format!("the model server at {base_url} timed out"))
        } else {
            Self::Connect(format!("request to {base_url} failed: {e}"))
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

type Events = Pin<Box<dyn Stream<Item = Result<Event, String>> + Send>>;

/// An open server-sent-event stream from a model server.
pub struct EventStream {
    events: Events,
    idle: Duration,
}

impl EventStream {
    /// POSTs `body` to `{base_url}/{path}` (bearer key if any) and opens the
    /// stream; an HTTP error comes back classified and naming the server.
    pub async fn open(
        http: &reqwest::Client,
        settings: &Settings,
        path: &str,
        body: &serde_json::Value,
        idle: Duration,
    ) -> Result<Self, ProviderError> {
        let url = format!("{}/{path}", settings.base_url);
        let mut request = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body.to_string());
        if let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| ProviderError::from_reqwest(&settings.base_url, &e))?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let text = response.text().await.unwrap_or_default();
            return Err(
                ProviderError::from_http(status.as_u16(), &text, retry_after)
                    .at(&settings.base_url),
            );
        }
        Ok(Self {
            events: Box::pin(sse::events(response.bytes_stream())),
            idle,
        })
    }

    /// The next event with data (`None` when the stream ends); a stream
    /// silent for the idle timeout is broken.
    pub async fn next(&mut self) -> Result<Option<Event>, ProviderError> {
        loop {
            let next = tokio::time::timeout(self.idle, self.events.next())
                .await
                .map_err(|_| {
                    ProviderError::Stream(format!(
                        "no data from the model for {}s",
                        self.idle.as_secs()
                    ))
                })?;
            match next {
                None => return Ok(None),
                Some(Err(e)) => return Err(ProviderError::Stream(e)),
                Some(Ok(event)) if event.data.trim().is_empty() => {}
                Some(Ok(event)) => return Ok(Some(event)),
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
    fn retry_classification() {
        assert!(ProviderError::from_http(429, "{}", None).retryable());
        assert!(ProviderError::from_http(503, "", None).retryable());
        assert!(!ProviderError::from_http(400, "{}", None).retryable());
        assert!(!ProviderError::from_http(401, "{}", None).retryable());
        let quota = r#"{"error":{"code":"insufficient_quota","message":"x"}}"#;
        assert!(!ProviderError::from_http(429, quota, None).retryable());
    }
}
