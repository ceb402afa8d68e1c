//! The Chat Completions provider for local model servers (llama.cpp,
//! Ollama, vLLM, LM Studio): no server state, so every request carries the
//! whole conversation rebuilt from the local transcript.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use agentx_shared::conversation::{Item, Usage};

use super::provider::{
    Call, EventStream, Http, Limits, MAX_CALL_ID, MAX_TOOL_NAME, ModelReply, ProviderError,
    Settings, capped, push_capped,
};

/// The shell tool as a Chat Completions function definition.
pub(super) fn tools() -> Value {
    json!([{
        "type": "function",
        "function": {
            "name": super::shell::NAME,
            "description": super::shell::DESCRIPTION,
            "parameters": super::shell::parameters(),
        }
    }])
}

/// Messages from a normalized transcript: the instructions as the system
/// message, assistant text and its tool calls merged into one message, and
/// each tool result as a `tool` message (images a tool returned as a user
/// message after the group's results: `tool` messages take text only).
pub fn messages(instructions: &str, items: &[Item]) -> Vec<Value> {
    let mut out = vec![json!({"role": "system", "content": instructions})];
    let mut pending_images: Vec<Value> = Vec::new();
    let mut i = 0;
    while i < items.len() {
        match &items[i] {
            Item::User { text } => out.push(json!({"role": "user", "content": text})),
            Item::FunctionOutput {
                call_id,
                output,
                images,
            } => {
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
                if !images.is_empty() {
                    pending_images.push(json!({
                        "type": "text",
                        "text": format!("The images tool call {call_id} returned:"),
                    }));
                    pending_images.extend(images.iter().map(|image| {
                        json!({"type": "image_url", "image_url": {"url": image.data_url()}})
                    }));
                }
                // A `tool` message takes text only: the images follow the
                // call group's last result as a user message.
                if !matches!(items.get(i + 1), Some(Item::FunctionOutput { .. }))
                    && !pending_images.is_empty()
                {
                    let parts = std::mem::take(&mut pending_images);
                    out.push(json!({"role": "user", "content": parts}));
                }
            }
            // Never in a model view (`context::model_view` flattens it).
            Item::Compaction { .. } => {}
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
    http: &Http,
    settings: &Settings,
    body: &Value,
    limits: &Limits,
    on_delta: &mut (dyn FnMut(&str) + Send),
) -> Result<ModelReply, ProviderError> {
    let mut events = EventStream::open(http, settings, "chat/completions", body, limits).await?;
    let mut reader = Reader::with_limit(limits.max_answer);
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
    /// The index of the call the last tool-call chunk went to: a chunk
    /// without `index` continues it (some servers number only the first).
    open_call: Option<u64>,
    finished: bool,
    /// Bytes of the answer so far: text, tool-call names, ids and arguments.
    size: usize,
    max: usize,
}

impl Default for Reader {
    fn default() -> Self {
        Self::with_limit(super::provider::MAX_ANSWER)
    }
}

impl Reader {
    /// A reader that fails once the answer grows past `max` bytes.
    pub fn with_limit(max: usize) -> Self {
        Self {
            reply: ModelReply {
                usage: Usage::UNREPORTED,
                ..ModelReply::default()
            },
            calls: BTreeMap::new(),
            open_call: None,
            finished: false,
            size: 0,
            max,
        }
    }

    fn grow(&mut self, by: usize) -> Result<(), ProviderError> {
        self.size = self.size.saturating_add(by);
        if self.size > self.max {
            return Err(super::provider::too_large(self.max));
        }
        Ok(())
    }

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
            self.reply.id = capped(id, MAX_CALL_ID);
        }
        if chunk["usage"].is_object() {
            self.reply.usage = parse_usage(&chunk["usage"]);
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                self.grow(text.len())?;
                self.reply.text.push_str(text);
                on_delta(text);
            }
            for tc in delta["tool_calls"].as_array().into_iter().flatten() {
                self.tool_call_chunk(tc)?;
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finished = true;
                if reason == "length" {
                    self.reply.incomplete = Some("max_output_tokens".to_owned());
                }
            }
        }
        Ok(false)
    }

    /// One entry of a chunk's `tool_calls`: every byte of its id, name and
    /// arguments counts toward the answer's size; the name and id are kept
    /// only up to their caps (a call past one is answered as invalid).
    fn tool_call_chunk(&mut self, tc: &Value) -> Result<(), ProviderError> {
        let id = tc["id"].as_str().filter(|id| !id.is_empty());
        let name = tc["function"]["name"].as_str();
        let args = tc["function"]["arguments"].as_str();
        self.grow([id, name, args].iter().map(|s| s.map_or(0, str::len)).sum())?;
        let id = id.map(|id| capped(id, MAX_CALL_ID));
        let open_id = self
            .open_call
            .and_then(|i| self.calls.get(&i))
            .map(|c| c.id.as_str());
        let starts_call = id.as_deref().is_some_and(|id| Some(id) != open_id);
        let index = match (tc["index"].as_u64(), self.open_call) {
            (Some(index), _) => index,
            // No index, no new id: the rest of the open call.
            (None, Some(open)) if !starts_call => open,
            (None, _) => self
                .calls
                .keys()
                .next_back()
                .map_or(0, |k| k.saturating_add(1)),
        };
        self.open_call = Some(index);
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = id {
            entry.id = id;
        }
        if let Some(name) = name {
            push_capped(&mut entry.name, name, MAX_TOOL_NAME);
        }
        if let Some(args) = args {
            entry.arguments.push_str(args);
        }
        Ok(())
    }

    /// The reply once the stream has ended.
    pub fn finish(self) -> Result<ModelReply, ProviderError> {
        if !self.finished {
            if self.reply.text.is_empty() && self.calls.is_empty() {
                return Err(ProviderError::Stream(
                    super::provider::EMPTY_STREAM.to_owned(),
                ));
            }
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
                images: Vec::new(),
            },
            Item::FunctionOutput {
                call_id: "c2".into(),
                output: "b".into(),
                images: Vec::new(),
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
    fn images_follow_the_call_groups_results_as_a_user_message() {
        let image = agentx_shared::conversation::ToolImage {
            mime: "image/png".into(),
            base64: "iVBO".into(),
        };
        let call = |id: &str| Item::FunctionCall {
            call_id: id.into(),
            name: "mcp__e__img".into(),
            arguments: "{}".into(),
        };
        let items = vec![
            Item::User { text: "hi".into() },
            call("c1"),
            call("c2"),
            Item::FunctionOutput {
                call_id: "c1".into(),
                output: "one".into(),
                images: vec![image.clone()],
            },
            Item::FunctionOutput {
                call_id: "c2".into(),
                output: "two".into(),
                images: Vec::new(),
            },
        ];
        let m = messages("x", &items);
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "tool", "tool", "user"]
        );
        assert_eq!(m[3]["content"], "one");
        assert_eq!(m[5]["content"][0]["type"], "text");
        assert!(m[5]["content"][0]["text"].as_str().unwrap().contains("c1"));
        assert_eq!(
            m[5]["content"][1],
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}})
        );
    }

    fn read(chunks: &[Value]) -> ModelReply {
        let mut reader = Reader::default();
        for c in chunks {
            reader.event(&c.to_string(), &mut |_| {}).unwrap();
        }
        reader.event("[DONE]", &mut |_| {}).unwrap();
        reader.finish().unwrap()
    }

    fn tool_chunk(calls: Value, finish: Option<&str>) -> Value {
        json!({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": finish}]})
    }

    #[test]
    fn tool_call_chunks_without_index_continue_the_open_call() {
        let reply = read(&[
            tool_chunk(
                json!([{"index": 0, "id": "call_a", "type": "function", "function": {"name": "shell", "arguments": "{\"comm"}}]),
                None,
            ),
            tool_chunk(json!([{"function": {"arguments": "and\":"}}]), None),
            tool_chunk(json!([{"function": {"arguments": "\"ls\"}"}}]), None),
            // A second call numbered only by its id.
            tool_chunk(
                json!([{"id": "call_b", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]),
                Some("tool_calls"),
            ),
        ]);
        assert_eq!(reply.calls.len(), 2, "{:?}", reply.calls);
        assert_eq!(reply.calls[0].call_id, "call_a");
        assert_eq!(reply.calls[0].arguments, "{\"command\":\"ls\"}");
        assert_eq!(reply.calls[1].call_id, "call_b");
        assert_eq!(reply.incomplete, None);
    }

    #[test]
    fn finish_reason_length_marks_the_answer_cut_short() {
        let reply = read(&[
            json!({"id": "c", "choices": [{"index": 0, "delta": {"content": "half an ans"}, "finish_reason": null}]}),
            json!({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
        ]);
        assert_eq!(reply.text, "half an ans");
        assert_eq!(reply.incomplete.as_deref(), Some("max_output_tokens"));
    }

    #[test]
    fn an_answer_past_the_limit_fails() {
        let mut reader = Reader::with_limit(10);
        let chunk = |t: &str| {
            json!({"id": "c", "choices": [{"index": 0, "delta": {"content": t}}]}).to_string()
        };
        reader.event(&chunk("12345"), &mut |_| {}).unwrap();
        let err = reader.event(&chunk("678901"), &mut |_| {}).unwrap_err();
        assert!(!err.retryable());
        assert!(err.to_string().contains("AGENTX_MAX_ANSWER_BYTES"), "{err}");
    }

    #[test]
    fn tool_call_names_and_ids_count_toward_the_limit() {
        let mut reader = Reader::with_limit(1000);
        let name = |n: &str| tool_chunk(json!([{"index": 0, "function": {"name": n}}]), None);
        reader
            .event(
                &tool_chunk(
                    json!([{"index": 0, "id": "call_a", "function": {"name": "sh"}}]),
                    None,
                )
                .to_string(),
                &mut |_| {},
            )
            .unwrap();
        let piece = "x".repeat(300);
        for _ in 0..3 {
            reader
                .event(&name(&piece).to_string(), &mut |_| {})
                .unwrap();
        }
        let err = reader
            .event(&name(&piece).to_string(), &mut |_| {})
            .unwrap_err();
        assert!(err.to_string().contains("AGENTX_MAX_ANSWER_BYTES"), "{err}");
        let mut ids = Reader::with_limit(1000);
        let id = tool_chunk(json!([{"index": 0, "id": "i".repeat(1001)}]), None);
        assert!(ids.event(&id.to_string(), &mut |_| {}).is_err());
    }

    #[test]
    fn usage_is_optional() {
        assert_eq!(parse_usage(&json!({})), Usage::default());
        let u = parse_usage(&json!({"prompt_tokens": 7, "completion_tokens": 3}));
        assert_eq!(u.total_tokens, 10);
    }
}
