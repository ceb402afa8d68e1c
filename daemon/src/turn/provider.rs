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
            .field("base_url", &crate::remote::redact_userinfo(&self.base_url))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Bounds on one model call; see docs/guide.md ("Model servers: limits and quirks").
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A stream that sends no byte for this long is broken (retried).
    pub idle: Duration,
    /// A server that sends no response headers for this long is broken (retried).
    pub headers: Duration,
    /// The longest answer (text, tool-call names, ids and arguments) a turn accepts.
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

/// The longest tool name kept: a longer one is cut here (ending in `…`)
/// and its call is answered as invalid.
pub const MAX_TOOL_NAME: usize = 256;
/// The longest call id (and Chat response id) kept; a longer call id is
/// cut the same way and its call answered as invalid.
pub const MAX_CALL_ID: usize = 1 << 10;

/// Appends `piece` to `dst` while `dst` stays within `cap` bytes; past it,
/// `dst` is cut at `cap` and ends in `…` (so it is longer than `cap`, and
/// [`over_cap`] tells), and further pieces are dropped.
pub fn push_capped(dst: &mut String, piece: &str, cap: usize) {
    if dst.len() > cap {
        return;
    }
    if dst.len() + piece.len() <= cap {
        dst.push_str(piece);
        return;
    }
    let mut end = cap - dst.len();
    while !piece.is_char_boundary(end) {
        end -= 1;
    }
    dst.push_str(&piece[..end]);
    dst.push('…');
}

/// `text` cut as [`push_capped`] cuts it.
pub fn capped(text: &str, cap: usize) -> String {
    let mut out = String::new();
    push_capped(&mut out, text, cap);
    out
}

/// Why a call with this name and id is not run: one of them was cut.
pub fn over_cap(name: &str, call_id: &str) -> Option<String> {
    if name.len() > MAX_TOOL_NAME {
        Some(format!(
            "the tool name is over {MAX_TOOL_NAME} bytes (the limit of a tool name)"
        ))
    } else if call_id.len() > MAX_CALL_ID {
        Some(format!(
            "the call id is over {MAX_CALL_ID} bytes (the limit of a call id)"
        ))
    } else {
        None
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

pub use error::{EMPTY_STREAM, ProviderError};
pub use http::{Clients, EventStream, Http, ProxyVars};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids_are_cut_past_their_caps_and_the_cut_is_seen() {
        let mut name = String::new();
        push_capped(&mut name, "shell", MAX_TOOL_NAME);
        assert_eq!(name, "shell");
        assert_eq!(over_cap(&name, "call_1"), None);
        for _ in 0..1000 {
            push_capped(&mut name, "é".repeat(50).as_str(), MAX_TOOL_NAME);
        }
        assert!(name.len() > MAX_TOOL_NAME && name.len() <= MAX_TOOL_NAME + 3);
        assert!(name.ends_with('…'));
        assert!(over_cap(&name, "call_1").is_some_and(|w| w.contains("tool name")));
        let id = capped(&"i".repeat(5 << 20), MAX_CALL_ID);
        assert_eq!(id.len(), MAX_CALL_ID + '…'.len_utf8());
        assert!(over_cap("shell", &id).is_some_and(|w| w.contains("call id")));
        assert_eq!(
            capped(&"i".repeat(MAX_CALL_ID), MAX_CALL_ID).len(),
            MAX_CALL_ID
        );
    }
}
