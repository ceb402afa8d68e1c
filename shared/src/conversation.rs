//! Conversation domain types both binaries use: transcript items, token
//! usage, pending tool calls — plus their conversions to and from the wire.

use serde::{Deserialize, Serialize};

use crate::proto;

/// Token usage totals (or one response's usage).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub cached_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub total_tokens: u64,
    /// Responses whose server reported no usage: counted here, never as 0.
    #[serde(default)]
    pub unreported: u64,
}

impl Usage {
    /// One response's usage that its server did not report.
    pub const UNREPORTED: Usage = Usage {
        input_tokens: 0,
        cached_tokens: 0,
        output_tokens: 0,
        reasoning_tokens: 0,
        total_tokens: 0,
        unreported: 1,
    };

    /// True when no response so far reported any usage: the totals are
    /// unknown, not zero.
    pub fn unknown(&self) -> bool {
        self.unreported > 0
            && self.input_tokens == 0
            && self.output_tokens == 0
            && self.total_tokens == 0
    }

    /// Adds another response's usage (saturating: the counts come from the
    /// model server and may be anything).
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
        self.unreported = self.unreported.saturating_add(other.unreported);
    }
}

impl From<Usage> for proto::Usage {
    fn from(u: Usage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            cached_tokens: u.cached_tokens,
            output_tokens: u.output_tokens,
            reasoning_tokens: u.reasoning_tokens,
            total_tokens: u.total_tokens,
            unreported_responses: u.unreported,
        }
    }
}

impl From<&proto::Usage> for Usage {
    fn from(u: &proto::Usage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            cached_tokens: u.cached_tokens,
            output_tokens: u.output_tokens,
            reasoning_tokens: u.reasoning_tokens,
            total_tokens: u.total_tokens,
            unreported: u.unreported_responses,
        }
    }
}

/// One entry of the local transcript — the conversation's source of truth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item {
    User {
        text: String,
    },
    Assistant {
        text: String,
    },
    FunctionCall {
        call_id: String,
        name: String,
        arguments: String,
    },
    FunctionOutput {
        call_id: String,
        output: String,
        /// Images the tool returned (an MCP tool's image content), passed to
        /// the model in the form its API takes.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ToolImage>,
    },
    /// A compaction: from here on the model sees `context` instead of
    /// everything before it; the transcript keeps it all (docs/guide.md: "Long
    /// conversations").
    Compaction {
        /// The handoff summary the model wrote (empty: trimmed only).
        summary: String,
        /// What replaces the model's view of the conversation before it.
        context: Vec<Item>,
        /// The context's size before and after, in tokens (estimated after;
        /// before, at least this when the view was longer than two windows,
        /// which is read only that far from its end).
        tokens_before: u64,
        tokens_after: u64,
        /// Items of the model's earlier view that it replaced (of a view
        /// longer than two windows, those read).
        replaced: u64,
        /// Why: `manual`, `auto`, `overflow` or `model`.
        reason: String,
    },
}

impl Item {
    /// The line a transcript shows where a compaction happened.
    pub fn compaction_line(tokens_before: u64, tokens_after: u64) -> String {
        format!(
            "— compacted: {} → {} tokens —",
            crate::context::short(tokens_before),
            crate::context::short(tokens_after)
        )
    }
}

/// How far an interrupted tool call got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallState {
    NotStarted,
    Running,
    Finished,
}

/// A tool call the model asked for that has not been answered yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCall {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub state: CallState,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub output: String,
    /// Images the call returned, kept with its output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ToolImage>,
}

/// An image a tool returned: its media type and its bytes in base64, as
/// MCP gives them and as the providers' data URLs take them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolImage {
    pub mime: String,
    pub base64: String,
}

impl ToolImage {
    /// The image as a `data:` URL.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime, self.base64)
    }
}

impl From<&PendingCall> for proto::PendingToolCall {
    fn from(c: &PendingCall) -> Self {
        let state = match c.state {
            CallState::NotStarted => proto::ToolCallState::NotStarted,
            CallState::Running => proto::ToolCallState::Running,
            CallState::Finished => proto::ToolCallState::Finished,
        };
        Self {
            call_id: c.call_id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
            state: state as i32,
            exit_code: c.exit_code,
            output: c.output.clone(),
        }
    }
}

impl PendingCall {
    /// The state name used in JSON output.
    pub fn state_name(state: i32) -> &'static str {
        match proto::ToolCallState::try_from(state) {
            Ok(proto::ToolCallState::NotStarted) => "not_started",
            Ok(proto::ToolCallState::Running) => "running",
            Ok(proto::ToolCallState::Finished) => "finished",
            _ => "unknown",
        }
    }
}

/// Whether `id` has the shape of the ids agentd makes (hex milliseconds,
/// `-`, six hex digits). Ids from elsewhere (the remote store, an imported
/// file) must have it too, so that no conversation id is ever one of a
/// group directory's own names (`current`, `shared`).
pub fn is_conversation_id(id: &str) -> bool {
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    id.split_once('-').is_some_and(|(time, salt)| {
        (11..=16).contains(&time.len()) && salt.len() == 6 && hex(time) && hex(salt)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_serialize_with_a_type_tag() {
        let item = Item::FunctionCall {
            call_id: "call_1".into(),
            name: "shell".into(),
            arguments: "{}".into(),
        };
        let json = serde_json::to_string(&item).unwrap();
        assert_eq!(
            json,
            r#"{"type":"function_call","call_id":"call_1","name":"shell","arguments":"{}"}"#
        );
        assert_eq!(serde_json::from_str::<Item>(&json).unwrap(), item);
    }

    #[test]
    fn usage_adds_up() {
        let mut total = Usage::default();
        let one = Usage {
            input_tokens: 10,
            cached_tokens: 2,
            output_tokens: 5,
            reasoning_tokens: 1,
            total_tokens: 15,
            unreported: 0,
        };
        total.add(&one);
        total.add(&one);
        assert_eq!(total.total_tokens, 30);
        assert_eq!(Usage::from(&proto::Usage::from(total)), total);
    }
}
