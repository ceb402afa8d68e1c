//! The Chat Completions provider for local model servers (llama.cpp,
//! Ollama, vLLM, LM Studio): no server state, so every request carries the
//! whole conversation rebuilt from the local transcript.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use agentx_shared::conversation::{Item, Usage};

use super::provider::{Call, EventStream, ModelReply, ProviderError, Settings};

/// The shell tool as a Chat Completions function definition.
fn tools() -> Value {
    let tool = super::responses::shell_tool();
    json!([{
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": tool["description"],
            "parameters": tool["parameters"],
        }
    }])
}

/// Messages from a normalized transcript: the instructions as the system
/// message, assistant text and its tool calls merged into one message, and
/// each tool result as a `tool` message.
pub fn messages(instructions: &str, items: &[Item]) -> Vec<Value> {
    let mut out = vec![json!({"role": "system", "content": instructions})];
    let mut i = 0;
    while i < items.len() {
        match &items[i] {
            Item::User { text } => out.push(json!({"role": "user", "content": text})),
            Item::FunctionOutput { call_id, output } => {
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
            }
            Item::Assistant { .. } | Item::FunctionCall { .. } => {
                let mut text = String::new();
                let mut calls = Vec::new();
                while let Some(item) = items.get(i) {
                    match item {
                        Item::Assistant { text: t } if calls.is_empty() => text.push_str(t),
                        Item::FunctionCall {
                            call_id,
                            name,
                            arguments,
                        } => calls.push(json!({
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments},
                        })),
                        _ => break,
                    }
                    i += 1;
                }
                let mut message = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
                if !calls.is_empty() {
                    message["tool_calls"] = Value::Array(calls);
                }
                out.push(message);
                continue;
            }
        }
        i += 1;
    }
    out
}

pub fn request_body(settings: &Settings, messages: Vec<Value>) -> Value {
    json!({
        "model": settings.model,
        "messages": messages,
        "tools": tools(),
        "stream": true,
        "stream_options": {"include_usage": true},
    })
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Sends one request and streams the reply; `on_delta` sees text as it arrives.
pub async fn call(
    http: &reqwest::Client,
    settings: &Settings,
    body: &Value,
    idle_timeout: Duration,
    on_delta: &mut (dyn FnMut(&str) + Send),
) -> Result<ModelReply, ProviderError> {
    let mut events =
        EventStream::open(http, settings, "chat/completions", body, idle_timeout).await?;
    let mut reader = Reader::default();
    while let Some(event) = events.next().await? {
        if reader.event(&event.data, on_delta)? {
            break;
        }
    }
    reader.finish()
}

/// The state of one Chat Completions stream between chunks.
#[derive(Debug)]
pub struct Reader {
    reply: ModelReply,
    calls: BTreeMap<u64, PartialCall>,
    finished: bool,
}

impl Default for Reader {
    fn default() -> Self {
        Self {
            reply: ModelReply {
                usage: Usage::UNREPORTED,
                ..ModelReply::default()
            },
            calls: BTreeMap::new(),
            finished: false,
        }
    }
}

impl Reader {
    /// Takes one chunk (an event's `data:`), handing text deltas to
    /// `on_delta`; true once the stream says it is done (`[DONE]`).
    pub fn event(
        &mut self,
        data: &str,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<bool, ProviderError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.finished = true;
            return Ok(true);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| ProviderError::Stream(format!("unreadable chunk: {e}")))?;
        if chunk["error"].is_object() || chunk["error"].is_string() {
            let error = &chunk["error"];
            return Err(ProviderError::Model {
                code: error["code"].as_str().map(str::to_owned),
                message: error["message"]
                    .as_str()
                    .or(error.as_str())
                    .unwrap_or("unknown error")
                    .to_owned(),
            });
        }
        if self.reply.id.is_empty()
            && let Some(id) = chunk["id"].as_str()
        {
            self.reply.id = id.to_owned();
        }
        if chunk["usage"].is_object() {
            self.reply.usage = parse_usage(&chunk["usage"]);
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                self.reply.text.push_str(text);
                on_delta(text);
            }
            for tc in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = tc["index"].as_u64().unwrap_or(self.calls.len() as u64);
                let entry = self.calls.entry(index).or_default();
                if let Some(id) = tc["id"].as_str() {
                    entry.id = id.to_owned();
                }
                if let Some(name) = tc["function"]["name"].as_str() {
                    entry.name.push_str(name);
                }
                if let Some(args) = tc["function"]["arguments"].as_str() {
                    entry.arguments.push_str(args);
                }
            }
            if choice["finish_reason"].is_string() {
                self.finished = true;
            }
        }
        Ok(false)
    }

    /// The reply once the stream has ended.
    pub fn finish(self) -> Result<ModelReply, ProviderError> {
        if !self.finished {
            return Err(ProviderError::Stream(
                "the stream ended before the answer was finished".into(),
            ));
        }
        let mut reply = self.reply;
        for (n, call) in self.calls.into_values().enumerate() {
            reply.calls.push(Call {
                call_id: if call.id.is_empty() {
                    format!("call_{n}")
                } else {
                    call.id
                },
                name: call.name,
                arguments: if call.arguments.is_empty() {
                    "{}".into()
                } else {
                    call.arguments
                },
            });
        }
        if reply.id.is_empty() {
            reply.id = format!(
                "chat-{}",
                agentx_shared::time::unix_ms(std::time::SystemTime::now())
            );
        }
        Ok(reply)
    }
}

/// Usage from the final chunk; absent details count as 0.
fn parse_usage(u: &Value) -> Usage {
    super::provider::usage_from(u, "prompt", "completion")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_merge_assistant_text_with_its_tool_calls() {
        let items = vec![
            Item::User { text: "hi".into() },
            Item::Assistant {
                text: "let me look".into(),
            },
            Item::FunctionCall {
                call_id: "c1".into(),
                name: "shell".into(),
                arguments: "{\"command\":\"ls\"}".into(),
            },
            Item::FunctionCall {
                call_id: "c2".into(),
                name: "shell".into(),
                arguments: "{}".into(),
            },
            Item::FunctionOutput {
                call_id: "c1".into(),
                output: "a".into(),
            },
            Item::FunctionOutput {
                call_id: "c2".into(),
                output: "b".into(),
            },
            Item::Assistant {
                text: "done".into(),
            },
        ];
        let m = messages("be brief", &items);
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(m[1], json!({"role": "user", "content": "hi"}));
        assert_eq!(m[2]["role"], "assistant");
        assert_eq!(m[2]["content"], "let me look");
        assert_eq!(m[2]["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "shell");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "a"})
        );
        assert_eq!(m[5], json!({"role": "assistant", "content": "done"}));
        let only_calls = messages(
            "x",
            &[Item::FunctionCall {
                call_id: "c".into(),
                name: "shell".into(),
                arguments: "{}".into(),
            }],
        );
        assert_eq!(only_calls[1]["content"], Value::Null);
    }

    #[test]
    fn usage_is_optional() {
        assert_eq!(parse_usage(&json!({})), Usage::default());
        let u = parse_usage(&json!({"prompt_tokens": 7, "completion_tokens": 3}));
        assert_eq!(u.total_tokens, 10);
    }
}
