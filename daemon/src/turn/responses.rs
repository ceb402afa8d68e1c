//! The OpenAI Responses API provider: builds `POST {base}/responses` bodies
//! (streaming, stored, chained by `previous_response_id`) and reads the SSE stream.

use serde_json::{Value, json};

use agentx_shared::conversation::Usage;

use super::provider::{
    Call, EventStream, Http, Limits, MAX_CALL_ID, MAX_TOOL_NAME, ModelReply, ProviderError,
    Settings, capped,
};

/// The shell tool as a Responses function tool.
fn shell_tool() -> Value {
    json!({
        "type": "function",
        "name": super::shell::NAME,
        "description": super::shell::DESCRIPTION,
        "parameters": super::shell::parameters(),
        "strict": true
    })
}

/// The request body for one model call.
pub fn request_body(
    settings: &Settings,
    instructions: &str,
    previous_response_id: Option<&str>,
    input: Vec<Value>,
) -> Value {
    let mut body = json!({
        "model": settings.model,
        "instructions": instructions,
        "input": input,
        "tools": [shell_tool()],
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "stream": true,
        "store": true,
    });
    if let Some(id) = previous_response_id {
        body["previous_response_id"] = json!(id);
    }
    body
}

/// Sends one request and streams the reply; `on_delta` sees text as it arrives.
pub async fn call(
    http: &Http,
    settings: &Settings,
    body: &Value,
    limits: &Limits,
    on_delta: &mut (dyn FnMut(&str) + Send),
) -> Result<ModelReply, ProviderError> {
    let mut events = EventStream::open(http, settings, "responses", body, limits).await?;
    let mut reader = Reader::with_limit(limits.max_answer);
    let mut any = false;
    loop {
        let Some(event) = events.next().await? else {
            return Err(ProviderError::Stream(if any {
                "the stream ended before response.completed".into()
            } else {
                super::provider::EMPTY_STREAM.to_owned()
            }));
        };
        any = true;
        if let Some(reply) = reader.event(&event.event, &event.data, on_delta)? {
            return Ok(reply);
        }
    }
}

/// The state of one Responses stream between events. The answer is held
/// once: text deltas as they arrive, replaced by a finished message item's
/// text only where that differs.
#[derive(Debug)]
pub struct Reader {
    reply: ModelReply,
    /// Where the text of the message being streamed starts in `reply.text`.
    item_start: usize,
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
            reply: ModelReply::default(),
            item_start: 0,
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

    /// The reply as it ends: the id (required), usage, and what was cut short.
    fn finish(&mut self, response: &Value) -> Result<ModelReply, ProviderError> {
        if let Some(id) = response["id"].as_str() {
            self.reply.id = id.to_owned();
        }
        self.reply.usage = if response["usage"].is_object() {
            parse_usage(&response["usage"])
        } else {
            Usage::UNREPORTED
        };
        if self.reply.id.is_empty() {
            return Err(ProviderError::Stream(
                "the response ended without an id".into(),
            ));
        }
        if self.reply.id.len() > MAX_CALL_ID {
            return Err(ProviderError::Protocol(format!(
                "the model server sent a response id of {} bytes; agentx keeps ids of at most \
                 {MAX_CALL_ID} bytes",
                self.reply.id.len()
            )));
        }
        Ok(std::mem::take(&mut self.reply))
    }

    /// Takes one server-sent event (its `event:` name and `data:`), handing
    /// text deltas to `on_delta`; the reply once `response.completed` arrives.
    pub fn event(
        &mut self,
        event: &str,
        data: &str,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<Option<ModelReply>, ProviderError> {
        if data.trim() == "[DONE]" {
            return Ok(None);
        }
        let data: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(e) => return Err(ProviderError::Stream(format!("unreadable event: {e}"))),
        };
        let kind = data["type"].as_str().unwrap_or(event);
        match kind {
            "response.created" | "response.in_progress" => {
                if let Some(id) = data["response"]["id"].as_str() {
                    self.reply.id = id.to_owned();
                }
            }
            "response.output_text.delta" => {
                if let Some(delta) = data["delta"].as_str() {
                    self.grow(delta.len())?;
                    self.reply.text.push_str(delta);
                    on_delta(delta);
                }
            }
            "response.output_item.done" => self.item_done(&data["item"])?,
            "response.completed" => {
                return self.finish(&data["response"]).map(Some);
            }
            "response.incomplete" => {
                // Cut short (max_output_tokens, a content filter): keep
                // what came, say why.
                let response = &data["response"];
                let reason = response["incomplete_details"]["reason"]
                    .as_str()
                    .unwrap_or("incomplete")
                    .to_owned();
                let mut reply = self.finish(response)?;
                reply.incomplete = Some(reason);
                return Ok(Some(reply));
            }
            "response.failed" => return Err(failed(&data["response"], kind)),
            "error" => return Err(stream_error(&data)),
            _ => {}
        }
        Ok(None)
    }

    /// A finished output item: a function call, or a message whose text
    /// replaces what its deltas said if they differ.
    fn item_done(&mut self, item: &Value) -> Result<(), ProviderError> {
        match item["type"].as_str() {
            Some("function_call") => {
                let arguments = item["arguments"].as_str().unwrap_or("{}");
                let call_id = item["call_id"].as_str().unwrap_or_default();
                let name = item["name"].as_str().unwrap_or_default();
                self.grow(arguments.len() + call_id.len() + name.len())?;
                self.reply.calls.push(Call {
                    call_id: capped(call_id, MAX_CALL_ID),
                    name: capped(name, MAX_TOOL_NAME),
                    arguments: arguments.to_owned(),
                });
            }
            Some("message") => {
                let text: String = item["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["type"] == "output_text")
                    .filter_map(|p| p["text"].as_str())
                    .collect();
                // The finished item is the truth; deltas usually match it.
                let streamed = self.reply.text.get(self.item_start..).unwrap_or("");
                if streamed != text {
                    self.size = self.size.saturating_sub(streamed.len());
                    self.grow(text.len())?;
                    self.reply.text.truncate(self.item_start);
                    self.reply.text.push_str(&text);
                }
                self.item_start = self.reply.text.len();
            }
            _ => {}
        }
        Ok(())
    }
}

/// A `response.failed` event's error.
fn failed(response: &Value, kind: &str) -> ProviderError {
    let error = &response["error"];
    let message = error["message"]
        .as_str()
        .or_else(|| response["incomplete_details"]["reason"].as_str())
        .unwrap_or(kind)
        .to_owned();
    ProviderError::Model {
        code: error["code"].as_str().map(str::to_owned),
        message,
    }
}

/// An `error` event; both shapes occur: flat `{code, message}` and nested
/// `{error: {...}}`.
fn stream_error(data: &Value) -> ProviderError {
    let inner = if data["error"].is_object() {
        &data["error"]
    } else {
        data
    };
    ProviderError::Model {
        code: inner["code"].as_str().map(str::to_owned),
        message: inner["message"]
            .as_str()
            .unwrap_or("unknown error")
            .to_owned(),
    }
}

/// Usage from a response object; missing or null details count as 0.
pub fn parse_usage(u: &Value) -> Usage {
    super::provider::usage_from(u, "input", "output")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_tolerates_missing_and_null_details() {
        let u = parse_usage(
            &json!({"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
            "input_tokens_details": null}),
        );
        assert_eq!(
            u,
            Usage {
                input_tokens: 10,
                cached_tokens: 0,
                output_tokens: 5,
                reasoning_tokens: 0,
                total_tokens: 15,
                unreported: 0,
            }
        );
        let u = parse_usage(&json!({"input_tokens": 3, "output_tokens": 4}));
        assert_eq!(u.total_tokens, 7);
    }

    fn feed(reader: &mut Reader, events: &[Value]) -> Result<Option<ModelReply>, ProviderError> {
        let mut last = None;
        for e in events {
            last = reader.event("", &e.to_string(), &mut |_| {})?;
        }
        Ok(last)
    }

    #[test]
    fn an_incomplete_response_keeps_its_partial_answer() {
        let mut reader = Reader::default();
        let reply = feed(
            &mut reader,
            &[
                json!({"type": "response.created", "response": {"id": "resp_1"}}),
                json!({"type": "response.output_text.delta", "delta": "half "}),
                json!({"type": "response.output_text.delta", "delta": "an answer"}),
                json!({"type": "response.incomplete", "response": {"id": "resp_1",
                    "incomplete_details": {"reason": "max_output_tokens"}}}),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(reply.text, "half an answer");
        assert_eq!(reply.incomplete.as_deref(), Some("max_output_tokens"));
    }

    #[test]
    fn the_finished_item_wins_over_deltas_and_the_limit_holds() {
        let mut reader = Reader::default();
        let reply = feed(
            &mut reader,
            &[
                json!({"type": "response.output_text.delta", "delta": "draft"}),
                json!({"type": "response.output_item.done", "item": {"type": "message",
                    "content": [{"type": "output_text", "text": "final"}]}}),
                json!({"type": "response.completed", "response": {"id": "resp_2"}}),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(reply.text, "final");
        let mut small = Reader::with_limit(8);
        let err = feed(
            &mut small,
            &[json!({"type": "response.output_text.delta", "delta": "123456789"})],
        )
        .unwrap_err();
        assert!(!err.retryable(), "{err}");
    }

    #[test]
    fn body_chains_and_always_carries_instructions_and_tools() {
        let settings = Settings {
            kind: Default::default(),
            base_url: "http://x/v1".into(),
            model: "m".into(),
            api_key: None,
        };
        let body = request_body(
            &settings,
            "be brief",
            Some("resp_1"),
            vec![json!({"role":"user","content":"hi"})],
        );
        assert_eq!(body["previous_response_id"], "resp_1");
        assert_eq!(body["instructions"], "be brief");
        assert_eq!(body["store"], true);
        assert_eq!(body["stream"], true);
        assert_eq!(body["tools"][0]["strict"], true);
        let first = request_body(&settings, "x", None, vec![]);
        assert!(first.get("previous_response_id").is_none());
    }
}
