//! `POST /v1/chat/completions`: stateless, like the local servers it stands
//! in for; checks that every tool call is answered and streams chunks.

use super::*;

/// Problems a real server would reject the body for.
pub fn validate(body: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let Some(messages) = body["messages"].as_array() else {
        return vec!["messages must be an array".into()];
    };
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str() {
            Some("system") => {
                if !m["content"].is_string() {
                    errors.push(format!("messages[{i}].content must be a string"));
                }
            }
            // A user message may be a list of text and image parts.
            Some("user") => {
                if !m["content"].is_string() && !user_parts_valid(&m["content"]) {
                    errors.push(format!(
                        "messages[{i}].content must be a string or a list of text and image_url parts"
                    ));
                }
            }
            Some("assistant") => {
                if let Some(calls) = m["tool_calls"].as_array() {
                    for c in calls {
                        match (c["id"].as_str(), c["function"]["name"].as_str(), c["function"]["arguments"].as_str()) {
                            (Some(id), Some(_), Some(_)) => open.push(id.to_owned()),
                            _ => errors.push(format!("messages[{i}].tool_calls: id, function.name and function.arguments (a string) are required")),
                        }
                    }
                } else if !m["content"].is_string() {
                    errors.push(format!(
                        "messages[{i}]: an assistant message needs content or tool_calls"
                    ));
                }
            }
            Some("tool") if !m["content"].is_string() => {
                errors.push(format!(
                    "messages[{i}]: a tool message's content must be a string"
                ));
            }
            Some("tool") => match m["tool_call_id"].as_str() {
                Some(id) if open.iter().any(|o| o == id) => open.retain(|o| o != id),
                Some(id) => errors.push(format!(
                    "messages[{i}]: tool_call_id {id} answers no tool call"
                )),
                None => errors.push(format!("messages[{i}]: tool_call_id is required")),
            },
            other => errors.push(format!("messages[{i}]: unknown role {other:?}")),
        }
        if m["role"] != "tool" && !open.is_empty() && m["role"] != "assistant" {
            errors.push(format!(
                "messages[{i}]: tool calls {open:?} were not answered before this message"
            ));
            open.clear();
        }
    }
    if !open.is_empty() {
        errors.push(format!("tool calls {open:?} have no tool message"));
    }
    if body["tools"].as_array().is_some_and(|t| {
        t.iter()
            .any(|t| t["type"] != "function" || !t["function"]["name"].is_string())
    }) {
        errors.push("tools must be function definitions".into());
    }
    errors
}

/// A user message's parts as OpenAI's API takes them: text, and images
/// as `image_url` with an http(s) or `data:image/...;base64,` URL.
fn user_parts_valid(content: &Value) -> bool {
    let Some(parts) = content.as_array() else {
        return false;
    };
    !parts.is_empty()
        && parts.iter().all(|p| match p["type"].as_str() {
            Some("text") => p["text"].is_string(),
            Some("image_url") => p["image_url"]["url"].as_str().is_some_and(|u| {
                u.starts_with("https://")
                    || u.split_once(";base64,")
                        .is_some_and(|(head, _)| head.starts_with("data:image/"))
            }),
            _ => false,
        })
}

pub(super) fn error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        &json!({"error": {"message": message, "type": "invalid_request_error"}}),
    )
}

pub fn handle(
    shared: &Arc<Shared>,
    mut state: MutexGuard<'_, FakeState>,
    parsed: Result<Value, String>,
    errors: &[String],
) -> Response {
    let body = match parsed {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("invalid JSON: {e}")),
    };
    if let Some(first) = errors.first() {
        return error(StatusCode::BAD_REQUEST, first);
    }
    if let Some(resp) = pop_scripted_error(&mut state) {
        return resp;
    }
    if body["stream"] != true {
        return error(StatusCode::BAD_REQUEST, "the fake only streams");
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let users: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    let used = window::tokens_of(&messages);
    let window = state.window;
    if let Some(w) = window
        && used > w.tokens
    {
        return window::overflow(w.shape, w.tokens, used);
    }
    let default_text = if body.get("tools").is_none() && window.is_some() {
        window::summary_text(used)
    } else {
        format!(
            "echo: {} [turns seen: {}]",
            users.last().copied().unwrap_or(""),
            users.len()
        )
    };
    let counted = window.map(|_| used);
    let usage = !state.chat_no_usage && body["stream_options"]["include_usage"] == true;
    let one_chunk = state.chat_one_chunk;
    state.next_response += 1;
    let id = format!("chatcmpl-{}", state.next_response);
    // With a window, a summary request (no tools) is answered by default:
    // the script is for the turn's own requests.
    let summary = body.get("tools").is_none() && window.is_some();
    let mut reply = if summary {
        None
    } else {
        state.script.pop_front()
    };
    if reply.is_none()
        && let Some((marker, d)) = &state.stall_marker
        && default_text.contains(marker.as_str())
    {
        reply = Some(Reply::Stall(*d));
    }
    let call_base = state.next_item;
    state.next_item += 8;
    let (sse, resp) = open_sse(shared, state);
    tokio::spawn(async move {
        let usage = usage.then_some(counted);
        let _ = stream(sse, id, reply, default_text, usage, one_chunk, call_base).await;
    });
    resp
}

pub(super) fn chunk(id: &str, delta: Value, finish: Option<&str>) -> String {
    json!({"id": id, "object": "chat.completion.chunk", "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

pub(super) async fn stream(
    mut sse: Sse,
    id: String,
    reply: Option<Reply>,
    default_text: String,
    usage: Option<Option<u64>>,
    one_chunk: bool,
    call_base: u64,
) -> Result<(), Closed> {
    let cut = matches!(reply, Some(Reply::Incomplete(_)));
    let Some((text, calls)) = answer(&mut sse, &id, reply, default_text).await? else {
        return Ok(());
    };
    let finish = if cut {
        "length"
    } else if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let answered = text
        .as_ref()
        .map_or(0, |t| (t.chars().count() as u64).div_ceil(4));
    if one_chunk {
        send_one_chunk(&mut sse, &id, text, &calls, finish, call_base).await?;
    } else {
        send_chunks(&mut sse, &id, text.as_deref(), &calls, finish, call_base).await?;
    }
    if let Some(counted) = usage {
        let (prompt, completion) = match counted {
            Some(prompt) => (prompt, answered),
            None => (10, 5),
        };
        sse.send_data(
            &json!({"id": id, "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": 2}}})
            .to_string(),
        )
        .await?;
    }
    sse.send_data("[DONE]").await
}

/// The text and tool calls `reply` answers with; `None` when the reply is
/// a fault that has already been streamed (a truncation, an error).
async fn answer(
    sse: &mut Sse,
    id: &str,
    reply: Option<Reply>,
    default_text: String,
) -> Result<Option<(Option<String>, Vec<(String, Value)>)>, Closed> {
    Ok(Some(match reply {
        None => (Some(default_text), vec![]),
        Some(Reply::Incomplete(t)) => (Some(t), vec![]),
        Some(Reply::Text(t)) => (Some(t), vec![]),
        Some(Reply::ToolCall { name, arguments }) => (None, vec![(name, arguments)]),
        Some(Reply::ToolCalls(calls)) => (None, calls),
        Some(Reply::Stall(d)) => {
            sse.pause(d).await?;
            (Some(default_text), vec![])
        }
        Some(Reply::Truncated) => {
            for part in chunks(&default_text, 3).into_iter().take(2) {
                sse.send_data(&chunk(id, json!({"content": part}), None))
                    .await?;
            }
            return Ok(None);
        }
        Some(Reply::StreamError(v)) => {
            sse.send_data(&json!({"error": v}).to_string()).await?;
            return Ok(None);
        }
        Some(Reply::HttpError { .. }) => return Ok(None),
    }))
}

/// A call's `arguments` as sent: a string verbatim, other JSON serialised.
fn call_arguments(a: &Value) -> String {
    match a {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The whole answer in one chunk that also carries the finish reason.
async fn send_one_chunk(
    sse: &mut Sse,
    id: &str,
    text: Option<String>,
    calls: &[(String, Value)],
    finish: &str,
    call_base: u64,
) -> Result<(), Closed> {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, a))| {
            json!({"index": i, "id": format!("call_{}", call_base + i as u64), "type": "function",
            "function": {"name": name, "arguments": call_arguments(a)}})
        })
        .collect();
    let mut delta = json!({"role": "assistant", "content": text});
    if !tool_calls.is_empty() {
        delta["tool_calls"] = json!(tool_calls);
    }
    sse.send_data(&chunk(id, delta, Some(finish))).await
}

/// The answer as a role chunk, text deltas, each call's head and argument
/// deltas, then an empty chunk with the finish reason.
async fn send_chunks(
    sse: &mut Sse,
    id: &str,
    text: Option<&str>,
    calls: &[(String, Value)],
    finish: &str,
    call_base: u64,
) -> Result<(), Closed> {
    sse.send_data(&chunk(id, json!({"role": "assistant", "content": if text.is_some() { json!("") } else { Value::Null }}), None)).await?;
    if let Some(t) = text {
        for part in chunks(t, 3) {
            sse.send_data(&chunk(id, json!({"content": part}), None))
                .await?;
        }
    }
    for (i, (name, a)) in calls.iter().enumerate() {
        let call_id = format!("call_{}", call_base + i as u64);
        sse.send_data(&chunk(
            id,
            json!({"content": null, "tool_calls": [{"index": i, "id": call_id, "type": "function",
            "function": {"name": name, "arguments": ""}}]}),
            None,
        ))
        .await?;
        for part in chunks(&call_arguments(a), 2) {
            sse.send_data(&chunk(
                id,
                json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                None,
            ))
            .await?;
        }
    }
    sse.send_data(&chunk(id, json!({}), Some(finish))).await
}
