//! Responses requests checked against the stored chain, and the answer
//! each one gets (scripted, echoed or a `shell` call), decided under the lock.

use super::*;

/// Everything a stream needs, decided under the lock.
pub(super) struct Plan {
    pub(super) meta: Meta,
    pub(super) kind: PlanKind,
    /// End with `response.incomplete` instead of `response.completed`.
    pub(super) incomplete: bool,
    /// What to store on completion (None when `store` is false).
    pub(super) store: Option<Stored>,
    /// The default reply's text (for `Truncated` deltas).
    pub(super) default_text: String,
}

pub(super) struct Meta {
    pub(super) id: String,
    pub(super) created_at: u64,
    pub(super) model: Value,
    pub(super) instructions: Value,
    pub(super) tools: Value,
    pub(super) previous: Option<String>,
    pub(super) store: bool,
    /// With a token window: the request's size, reported as its usage.
    pub(super) input_tokens: Option<u64>,
}

pub(super) enum PlanKind {
    Items(Vec<Value>),
    StreamError(Value),
    Truncated(String),
    Stall(Duration, Vec<Value>),
    /// Waits for the receiver to say true, then goes on as the inner plan.
    Held(tokio::sync::watch::Receiver<bool>, Box<PlanKind>),
}

/// Input items with a plain-string `input` turned into one user message.
pub(super) fn input_items(body: &Value) -> Vec<Value> {
    match body.get("input") {
        Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

pub(super) fn item_type(item: &Value) -> &str {
    item.get("type").and_then(Value::as_str).unwrap_or_else(|| {
        if item.get("role").is_some() {
            "message"
        } else {
            ""
        }
    })
}

/// The text of a user message (string content or the text of its parts).
pub(super) fn user_text(item: &Value) -> Option<String> {
    if item_type(item) != "message" || item.get("role").and_then(Value::as_str) != Some("user") {
        return None;
    }
    match item.get("content") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(parts)) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        ),
        _ => Some(String::new()),
    }
}

pub(super) fn call_ids<'a>(items: impl IntoIterator<Item = &'a Value>, kind: &str) -> Vec<String> {
    items
        .into_iter()
        .filter(|item| item_type(item) == kind)
        .map(|item| match item.get("call_id") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => "null".to_owned(),
        })
        .collect()
}

/// Checks the request against the stored chain and decides the answer.
pub(super) fn plan_response(state: &mut FakeState, body: &Value) -> Result<Plan, Box<Response>> {
    let input = input_items(body);
    let previous = body
        .get("previous_response_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut input_tokens = None;
    let default_text = if state.lean {
        lean_text(state, previous.as_deref())?
    } else {
        let chain = chain(state, previous.as_deref())?;
        check_calls(&chain, &input)?;
        if let Some(w) = state.window {
            let used = window::tokens_of(
                body.get("instructions")
                    .into_iter()
                    .chain(chain.iter().flat_map(|s| s.input.iter().chain(&s.output)))
                    .chain(&input),
            );
            if used > w.tokens {
                return Err(Box::new(window::overflow(w.shape, w.tokens, used)));
            }
            input_tokens = Some(used);
        }
        if body.get("tools").is_none() && state.window.is_some() {
            window::summary_text(window::tokens_of(&input))
        } else {
            echo_text(&chain, &input)
        }
    };

    state.next_response += 1;
    let id = format!("resp_{}", state.next_response);
    // With a window, a summary request (no tools) is answered by default:
    // the script is for the turn's own requests.
    let reply = if body.get("tools").is_none() && state.window.is_some() {
        None
    } else {
        next_reply(state, &input, &default_text)
    };
    let incomplete = matches!(reply, Some(Reply::Incomplete(_)));
    let held = reply.is_none();
    let kind = plan_kind(state, reply, &default_text)?;
    let kind = match &state.hold {
        Some((_, release, tx)) if default_text.contains(release.as_str()) => {
            tx.send_replace(true);
            kind
        }
        Some((hold, _, tx)) if held && default_text.contains(hold.as_str()) && !*tx.borrow() => {
            PlanKind::Held(tx.subscribe(), Box::new(kind))
        }
        _ => kind,
    };
    let store = body.get("store").and_then(Value::as_bool) != Some(false);
    let mut meta = meta(body, id, previous.clone(), store);
    meta.input_tokens = input_tokens;
    Ok(Plan {
        meta,
        kind,
        incomplete,
        store: store.then(|| Stored {
            previous,
            input,
            output: Vec::new(),
        }),
        default_text,
    })
}

/// The 400 for a `previous_response_id` the fake does not hold.
fn previous_not_found(prev: &str) -> Box<Response> {
    reject(
        Some("previous_response_id"),
        Some("previous_response_not_found"),
        &format!("Previous response with id '{prev}' not found."),
    )
}

/// Benchmark mode: only the previous id is checked, the answer is `ok`.
fn lean_text(state: &FakeState, previous: Option<&str>) -> Result<String, Box<Response>> {
    if let Some(prev) = previous
        && !state.responses.contains_key(prev)
    {
        return Err(previous_not_found(prev));
    }
    Ok("ok".to_owned())
}

/// The stored chain ending at `previous`, newest first.
fn chain<'a>(
    state: &'a FakeState,
    previous: Option<&str>,
) -> Result<Vec<&'a Stored>, Box<Response>> {
    let mut chain: Vec<&Stored> = Vec::new();
    if let Some(prev) = previous {
        let Some(mut stored) = state.responses.get(prev) else {
            return Err(previous_not_found(prev));
        };
        loop {
            chain.push(stored);
            match stored
                .previous
                .as_ref()
                .and_then(|p| state.responses.get(p))
            {
                Some(older) => stored = older,
                None => break,
            }
        }
    }
    Ok(chain)
}

/// The real API's pairing rules for function calls and their outputs.
fn check_calls(chain: &[&Stored], input: &[Value]) -> Result<(), Box<Response>> {
    // Every call the model made last time, or that this input replays,
    // needs its output in this input.
    let outputs: Vec<String> = call_ids(input, "function_call_output");
    let output_set: HashSet<&str> = outputs.iter().map(String::as_str).collect();
    let last_output = chain
        .first()
        .map(|s| s.output.as_slice())
        .unwrap_or_default();
    for call in call_ids(last_output.iter().chain(input), "function_call") {
        if !output_set.contains(call.as_str()) {
            return Err(reject(
                Some("input"),
                None,
                &format!("No tool output found for function call {call}."),
            ));
        }
    }
    // Every output needs its call somewhere in the conversation.
    let known_calls: HashSet<String> = call_ids(
        chain
            .iter()
            .flat_map(|s| s.input.iter().chain(&s.output))
            .chain(input),
        "function_call",
    )
    .into_iter()
    .collect();
    for output in &outputs {
        if !known_calls.contains(output) {
            return Err(reject(
                Some("input"),
                None,
                &format!("No tool call found for function call output with call_id {output}."),
            ));
        }
    }
    Ok(())
}

/// The default reply: echo the last user text, count the user turns.
fn echo_text(chain: &[&Stored], input: &[Value]) -> String {
    let user_texts = |items: &[Value]| items.iter().filter_map(user_text).collect::<Vec<_>>();
    let mut turns = user_texts(input).len();
    let mut last_user = user_texts(input).pop();
    for stored in chain {
        let texts = user_texts(&stored.input);
        turns += texts.len();
        if last_user.is_none() {
            last_user = texts.last().cloned();
        }
    }
    format!(
        "echo: {} [turns seen: {turns}]",
        last_user.unwrap_or_default()
    )
}

/// The reply for this request: the script's next one, else a `CALL` (or
/// `TOOL <name> <json>`) directive in the input, else a stall on the stall marker, else none
/// (the default reply).
fn next_reply(state: &mut FakeState, input: &[Value], default_text: &str) -> Option<Reply> {
    let mut reply = state.script.pop_front();
    // `CALL <command>` as this input's own user text: a shell call, so
    // concurrent clients each get their own without sharing the script.
    if reply.is_none()
        && let Some(command) = input
            .iter()
            .filter_map(user_text)
            .next_back()
            .and_then(|t| t.trim_end().strip_prefix("CALL ").map(str::to_owned))
    {
        reply = Some(Reply::tool_call("shell", json!({ "command": command })));
    }
    // `TOOL <name> <json arguments>`: a call of that function.
    if reply.is_none()
        && let Some((name, arguments)) = input
            .iter()
            .filter_map(user_text)
            .next_back()
            .and_then(|t| t.trim_end().strip_prefix("TOOL ").map(str::to_owned))
            .and_then(|rest| {
                let (name, args) = rest.split_once(' ').unwrap_or((rest.as_str(), "{}"));
                Some((name.to_owned(), serde_json::from_str::<Value>(args).ok()?))
            })
    {
        reply = Some(Reply::tool_call(name, arguments));
    }
    if reply.is_none()
        && let Some((marker, d)) = &state.stall_marker
        && default_text.contains(marker.as_str())
    {
        reply = Some(Reply::Stall(*d));
    }
    reply
}

/// What the stream sends for `reply`, its items numbered from `state`.
fn plan_kind(
    state: &mut FakeState,
    reply: Option<Reply>,
    default_text: &str,
) -> Result<PlanKind, Box<Response>> {
    let mut next_item = || {
        state.next_item += 1;
        state.next_item
    };
    Ok(match reply {
        None => PlanKind::Items(vec![message_item(next_item(), default_text)]),
        Some(Reply::Incomplete(text)) => PlanKind::Items(vec![message_item(next_item(), &text)]),
        Some(Reply::Text(text)) => PlanKind::Items(vec![message_item(next_item(), &text)]),
        Some(Reply::ToolCall { name, arguments }) => {
            PlanKind::Items(vec![call_item(next_item(), &name, &arguments)])
        }
        Some(Reply::ToolCalls(calls)) => PlanKind::Items(
            calls
                .iter()
                .map(|(name, arguments)| call_item(next_item(), name, arguments))
                .collect(),
        ),
        Some(Reply::StreamError(mut v)) => {
            if let Some(obj) = v.as_object_mut() {
                obj.entry("type").or_insert_with(|| json!("error"));
            }
            PlanKind::StreamError(v)
        }
        Some(Reply::Truncated) => PlanKind::Truncated(format!("msg_{}", next_item())),
        Some(Reply::Stall(d)) => PlanKind::Stall(d, vec![message_item(next_item(), default_text)]),
        // Answered before planning; unreachable, but harmless.
        Some(Reply::HttpError {
            status,
            body,
            headers,
        }) => return Err(Box::new(scripted_error(status, &body, &headers))),
    })
}

/// The response's own fields, echoed from the request.
fn meta(body: &Value, id: String, previous: Option<String>, store: bool) -> Meta {
    Meta {
        id,
        created_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: body
            .get("model")
            .cloned()
            .unwrap_or_else(|| json!("fake-model")),
        instructions: body.get("instructions").cloned().unwrap_or(Value::Null),
        tools: match body.get("tools") {
            Some(Value::Array(tools)) => Value::Array(tools.clone()),
            _ => json!([]),
        },
        previous,
        store,
        input_tokens: None,
    }
}

pub(super) fn message_item(n: u64, text: &str) -> Value {
    json!({
        "type": "message",
        "id": format!("msg_{n}"),
        "role": "assistant",
        "status": "completed",
        // `logprobs` is required by the schema's OutputTextContent.
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    })
}

pub(super) fn call_item(n: u64, name: &str, arguments: &Value) -> Value {
    let arguments = match arguments {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    json!({
        "type": "function_call",
        "id": format!("fc_{n}"),
        "call_id": format!("call_{n}"),
        "name": name,
        "arguments": arguments,
        "status": "completed"
    })
}

pub(super) fn response_object(meta: &Meta, status: &str, output: &[Value]) -> Value {
    let mut resp = json!({
        "id": meta.id,
        "object": "response",
        "created_at": meta.created_at,
        "status": status,
        "completed_at": null,
        "error": null,
        "incomplete_details": null,
        "instructions": meta.instructions,
        "max_output_tokens": null,
        "model": meta.model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": meta.previous,
        "reasoning": null,
        "store": meta.store,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": meta.tools,
        "top_p": 1.0,
        "truncation": "disabled",
        "metadata": {}
    });
    if status == "completed" {
        resp["completed_at"] = json!(meta.created_at);
        resp["usage"] = usage_of(meta, output);
    }
    resp
}

/// The fixed usage, or with a token window the request's size and the
/// answer's (characters / 4).
pub(super) fn usage_of(meta: &Meta, output: &[Value]) -> Value {
    let Some(input) = meta.input_tokens else {
        return usage();
    };
    let out = window::tokens_of(output);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + out
    })
}
