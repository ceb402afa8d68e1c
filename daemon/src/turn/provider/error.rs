//! A failed model call, classified: a lost response id, retryable (with
//! the server's Retry-After), or final; its causes named for the user.

use std::time::Duration;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    #[error("{message}")]
    Http {
        status: u16,
        code: Option<String>,
        param: Option<String>,
        message: String,
        retry_after: Option<Duration>,
        /// The request did not fit the model's context window.
        overflow: Option<Overflow>,
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
        if let Some(reason) = untrusted_certificate(e) {
            // Another attempt meets the same certificate: said once, not retried.
            return Self::Protocol(format!(
                "the model server at {base_url} presented a certificate agentx does not trust \
                 ({reason}); if your network uses its own certificate authority, point \
                 SSL_CERT_FILE at its PEM file"
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
        let overflow = overflow_in(code.as_deref(), error, &detail);
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
            overflow,
        }
    }

    /// The request did not fit the model's context window: what the server
    /// said of the window, if anything.
    pub fn overflow(&self) -> Option<Overflow> {
        match self {
            Self::Http { overflow, .. } => *overflow,
            Self::Model { code, message } => {
                overflow_in(code.as_deref(), &serde_json::Value::Null, message)
            }
            _ => None,
        }
    }

    /// Names the server in an HTTP error (local servers: which one failed).
    pub fn at(self, base_url: &str) -> Self {
        match self {
            Self::Http { .. } => self.map_message(|m| format!("{m} (model server {base_url})")),
            other => other,
        }
    }

    /// The same error with its message passed through `f`.
    pub fn map_message(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            Self::Http {
                status,
                code,
                param,
                message,
                retry_after,
                overflow,
            } => Self::Http {
                status,
                code,
                param,
                message: f(message),
                retry_after,
                overflow,
            },
            Self::Connect(m) => Self::Connect(f(m)),
            Self::Stream(m) => Self::Stream(f(m)),
            Self::Protocol(m) => Self::Protocol(f(m)),
            Self::Model { code, message } => Self::Model {
                code,
                message: f(message),
            },
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

    /// The stream ended before the server sent any output: what a server
    /// that cannot say "overflow" after its `200 OK` (llama-cpp-python) does
    /// with a prompt over its context window.
    pub fn empty_stream(&self) -> bool {
        matches!(self, Self::Stream(m) if m.starts_with(EMPTY_STREAM))
    }

    /// The server holds a call of the chain's last response without its
    /// output (OpenAI: "No tool output found for function call …"): what a
    /// conversation broken by a crash before this was fixed would get at
    /// every request. The saved transcript has the outputs: a new chain
    /// sends them.
    pub fn chain_missing_output(&self) -> bool {
        let Self::Http {
            status, message, ..
        } = self
        else {
            return false;
        };
        *status == 400 && message.to_lowercase().contains("no tool output found")
    }

    /// Worth another attempt after a pause.
    pub fn retryable(&self) -> bool {
        match self {
            Self::Http {
                overflow: Some(_), ..
            } => false,
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

/// How a stream that ended before any output is described.
pub const EMPTY_STREAM: &str = "the stream ended before any output";

/// A request too big for the model's context window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow {
    /// The window the server named, when it did.
    pub window: Option<u64>,
}

/// Recognises a context overflow in each server's words — OpenAI
/// (`context_length_exceeded`), vLLM and LiteLLM ("maximum context length is
/// N tokens"), llama.cpp (`exceed_context_size_error`, `n_ctx`), Ollama,
/// Anthropic through a gateway ("prompt is too long") — and the window it names.
fn overflow_in(code: Option<&str>, error: &serde_json::Value, message: &str) -> Option<Overflow> {
    let lowered = message.to_lowercase();
    let kind = error["type"].as_str().unwrap_or_default();
    let said = code == Some("context_length_exceeded")
        || kind == "exceed_context_size_error"
        || [
            "context_length_exceeded",
            "maximum context length",
            "exceeds the available context size",
            "exceed_context_size",
            "exceeds the context length",
            "exceeds maximum context length",
            "exceeds the context window",
            "context window exceeded",
            "contextwindowexceedederror",
            "prompt is too long",
            "too many tokens in the prompt",
            "input is too long for requested model",
        ]
        .iter()
        .any(|p| lowered.contains(p));
    if !said {
        return None;
    }
    let window = error["n_ctx"]
        .as_u64()
        .or_else(|| number_after(&lowered, "maximum context length is "))
        .or_else(|| number_after(&lowered, "n_ctx"))
        .or_else(|| number_after(&lowered, "context length of "))
        .or_else(|| number_after(&lowered, "context window of "))
        .or_else(|| number_between(&lowered, "tokens > ", " maximum"));
    Some(Overflow { window })
}

/// The number right after `prefix` (skipping `=`, `:`, quotes and spaces).
fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let at = text.find(prefix)? + prefix.len();
    let rest = text[at..].trim_start_matches([' ', '=', ':', '"', '\'', '(']);
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The number after `prefix` when `suffix` follows it ("… tokens > 200000 maximum").
fn number_between(text: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let at = text.find(prefix)? + prefix.len();
    let end = text[at..].find(suffix)?;
    text[at..at + end].trim().parse().ok()
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
/// Why a TLS handshake refused the server's certificate, when that is what
/// `e` comes from. Read from rustls's message ("invalid peer certificate:
/// …"), which reaches here wrapped in I/O and hyper errors.
fn untrusted_certificate(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let text = causes(e);
    let (_, why) = text.split_once("invalid peer certificate: ")?;
    let why = why.split(" (").next().unwrap_or(why).trim();
    Some(
        if why.contains("UnknownIssuer") {
            "signed by an unknown issuer"
        } else if why.contains("CaUsedAsEndEntity") {
            "a certificate authority's own certificate used as the server's"
        } else if why.contains("NotValidForName") {
            "issued for another name"
        } else if why.contains("Expired") {
            "expired"
        } else {
            why
        }
        .to_owned(),
    )
}

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
        assert!(!ProviderError::from_http(400, other, None).chain_missing_output());
        let missing = r#"{"error":{"message":"No tool output found for function call call_7.","type":"invalid_request_error","param":"input","code":null}}"#;
        assert!(ProviderError::from_http(400, missing, None).chain_missing_output());
        assert!(!ProviderError::from_http(500, missing, None).chain_missing_output());
    }

    #[test]
    fn every_known_overflow_is_recognised_with_its_window() {
        let cases: &[(u16, &str, Option<u64>)] = &[
            (
                400,
                r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130012 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
                Some(128_000),
            ),
            (
                400,
                r#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
                None,
            ),
            (
                400,
                r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4187,"n_ctx":4096}}"#,
                Some(4096),
            ),
            (
                400,
                r#"{"object":"error","message":"This model's maximum context length is 4,096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
                Some(4096),
            ),
            (
                400,
                r#"{"error":{"message":"litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: OpenAIException - This model's maximum context length is 8192 tokens","type":null,"param":null,"code":"400"}}"#,
                Some(8192),
            ),
            (
                400,
                r#"{"error":{"message":"the input length exceeds the context length","type":"api_error"}}"#,
                None,
            ),
            (
                400,
                r#"{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum","type":"invalid_request_error"}}"#,
                Some(200_000),
            ),
        ];
        for (status, body, window) in cases {
            let e = ProviderError::from_http(*status, body, None);
            assert_eq!(e.overflow(), Some(Overflow { window: *window }), "{body}");
            assert!(!e.retryable(), "an overflow is never retried as is: {body}");
        }
        let other = ProviderError::from_http(400, r#"{"error":{"message":"bad input"}}"#, None);
        assert_eq!(other.overflow(), None);
        let streamed = ProviderError::Model {
            code: Some("context_length_exceeded".into()),
            message: "Your input exceeds the context window of this model.".into(),
        };
        assert!(streamed.overflow().is_some());
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
