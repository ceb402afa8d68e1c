//! What every model provider shares: settings, the reply of one model call,
//! and a classified error (lost response id, retryable, or final).

use std::time::Duration;

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

mod error;
mod http;

pub use error::{ProviderError, retry_after};
pub use http::{Clients, EventStream, Http, ProxyVars};
