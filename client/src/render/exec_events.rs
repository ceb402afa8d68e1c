//! `agentx exec --json` lines: one tagged object per turn event,
//! typed so the contract is written down in one place.

use serde::Serialize;
use serde_json::Value;

use agentx_shared::proto::turn_event::Event;

/// One line of `--json` output.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum JsonEvent<'a> {
    Started {
        oneshot_id: &'a str,
    },
    TextDelta {
        delta: &'a str,
    },
    ToolCall {
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    ToolResult {
        call_id: &'a str,
        exit_code: Option<i32>,
        output: &'a str,
        denied: bool,
        timed_out: bool,
        #[serde(skip_serializing_if = "str::is_empty")]
        not_run: &'a str,
    },
    /// Output of a running command as it arrives.
    ToolOutput {
        call_id: &'a str,
        text: &'a str,
    },
    Notice {
        message: &'a str,
    },
    Retry {
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
        reason: &'a str,
    },
    Compacted {
        tokens_before: u64,
        tokens_after: u64,
        reason: &'a str,
        trimmed_only: bool,
    },
    Result {
        status: &'a str,
        text: &'a str,
        oneshot_id: &'a str,
        usage: Value,
        #[serde(skip_serializing_if = "str::is_empty")]
        error: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        cut_short: &'a str,
    },
}

impl<'a> JsonEvent<'a> {
    /// The line for an event in the middle of a turn; `None` for events that
    /// have none (usage, answer pieces, approvals, the result).
    pub fn of(event: &'a Event) -> Option<Self> {
        Some(match event {
            Event::Started(s) => Self::Started {
                oneshot_id: &s.oneshot_id,
            },
            Event::TextDelta(delta) => Self::TextDelta { delta },
            Event::ToolCall(c) => Self::ToolCall {
                call_id: &c.call_id,
                name: &c.name,
                arguments: &c.arguments,
            },
            Event::ToolResult(r) => Self::ToolResult {
                call_id: &r.call_id,
                exit_code: r.exit_code,
                output: &r.output,
                denied: r.denied,
                timed_out: r.timed_out,
                not_run: &r.not_run,
            },
            Event::ToolOutput(o) => Self::ToolOutput {
                call_id: &o.call_id,
                text: &o.text,
            },
            Event::Notice(message) => Self::Notice { message },
            Event::Retry(r) => Self::Retry {
                attempt: r.attempt,
                max_attempts: r.max_attempts,
                delay_ms: r.delay_ms,
                reason: &r.reason,
            },
            Event::Compacted(c) => Self::Compacted {
                tokens_before: c.tokens_before,
                tokens_after: c.tokens_after,
                reason: &c.reason,
                trimmed_only: c.trimmed_only,
            },
            Event::Usage(_)
            | Event::AnswerChunk(_)
            | Event::ApprovalRequest(_)
            | Event::Finished(_) => return None,
        })
    }

    /// Writes the line to stdout at once (a reader may be following it).
    pub fn emit(&self) {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        if let Ok(line) = serde_json::to_string(self) {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_shared::proto::{RetryNotice, ToolResultEvent};

    #[test]
    fn events_serialize_as_the_documented_lines() {
        let result = Event::ToolResult(ToolResultEvent {
            call_id: "c1".into(),
            exit_code: Some(0),
            output: "ok\n".into(),
            ..Default::default()
        });
        let line = serde_json::to_value(JsonEvent::of(&result).unwrap()).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"type": "tool_result", "call_id": "c1", "exit_code": 0,
                "output": "ok\n", "denied": false, "timed_out": false})
        );
        let retry = Event::Retry(RetryNotice {
            attempt: 1,
            max_attempts: 4,
            delay_ms: 500,
            reason: "503".into(),
        });
        let line = serde_json::to_value(JsonEvent::of(&retry).unwrap()).unwrap();
        assert_eq!(line["type"], "retry");
        assert_eq!(line["delay_ms"], 500);
    }
}
