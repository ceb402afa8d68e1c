//! The OpenAI Responses API provider: builds `POST {base}/responses` bodies
//! (streaming, stored, chained by `previous_response_id`) and reads the SSE stream.

use std::time::Duration;

use serde_json::{Value, json};

use agentx_shared::conversation::Usage;

use super::provider::{Call, EventStream, ModelReply, ProviderError, Settings};

/// The function tool the model may call.
pub fn shell_tool() -> Value {
    json!({
        "type": "function",
        "name": "shell",
        "description": "Run a shell command (sh -c) in the user's folder and return its exit code \
                        and combined stdout/stderr (long output is cut in the middle).",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line to run."}
            },
            "required": ["command"],
            "additionalProperties": false
        },
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
    http: &reqwest::Client,
    settings: &Settings,
    body: &Value,
    idle_timeout: Duration,
    on_delta: &mut (dyn FnMut(&str) + Send),
) -> Result<ModelReply, ProviderError> {
    let mut events = EventStream::open(http, settings, "responses", body, idle_timeout).await?;
    let mut reader = Reader::default();
    loop {
        let Some(event) = events.next().await? else {
            return Err(ProviderError::Stream(
                "the stream ended before response.completed".into(),
            ));
        };
        if let Some(reply) = reader.event(&event.event, &event.data, on_delta)? {
            return Ok(reply);
        }
    }
}

/// The state of one Responses stream between events.
#[derive(Debug, Default)]
pub struct Reader {
    reply: ModelReply,
    streamed_text: String,
    message_text: Option<String>,
}

impl Reader {
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
                    self.streamed_text.push_str(delta);
                    on_delta(delta);
                }
            }
            "response.output_item.done" => {
                let item = &data["item"];
                match item["type"].as_str() {
                    Some("function_call") => self.reply.calls.push(Call {
                        call_id: item["call_id"].as_str().unwrap_or_default().to_owned(),
                        name: item["name"].as_str().unwrap_or_default().to_owned(),
                        arguments: item["arguments"].as_str().unwrap_or("{}").to_owned(),
                    }),
                    Some("message") => {
                        let text: String = item["content"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter(|p| p["type"] == "output_text")
                            .filter_map(|p| p["text"].as_str())
                            .collect();
                        self.message_text
                            .get_or_insert_with(String::new)
                            .push_str(&text);
                    }
                    _ => {}
                }
            }
            "response.completed" => {
                let response = &data["response"];
                if let Some(id) = response["id"].as_str() {
                    self.reply.id = id.to_owned();
                }
                self.reply.usage = if response["usage"].is_object() {
                    parse_usage(&response["usage"])
                } else {
                    Usage::UNREPORTED
                };
                self.reply.text = self
                    .message_text
                    .take()
                    .unwrap_or_else(|| std::mem::take(&mut self.streamed_text));
                if self.reply.id.is_empty() {
                    return Err(ProviderError::Stream(
                        "response.completed carried no id".into(),
                    ));
                }
                return Ok(Some(std::mem::take(&mut self.reply)));
            }
            "response.failed" | "response.incomplete" => {
                let response = &data["response"];
                let error = &response["error"];
                let message = error["message"]
                    .as_str()
                    .or_else(|| response["incomplete_details"]["reason"].as_str())
                    .unwrap_or(kind)
                    .to_owned();
                return Err(ProviderError::Model {
                    code: error["code"].as_str().map(str::to_owned),
                    message,
                });
            }
            "error" => {
                // Both shapes occur: flat {code, message} and nested {error: {...}}.
                let inner = if data["error"].is_object() {
                    &data["error"]
                } else {
                    &data
                };
                return Err(ProviderError::Model {
                    code: inner["code"].as_str().map(str::to_owned),
                    message: inner["message"]
                        .as_str()
                        .unwrap_or("unknown error")
                        .to_owned(),
                });
            }
            _ => {}
        }
        Ok(None)
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
