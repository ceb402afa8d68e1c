//! A fake OpenAI Responses server on 127.0.0.1 for end-to-end tests: real
//! HTTP/1.1 and SSE, stateful `previous_response_id` chains, scripted replies.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::schema::validate_create_response;

/// Token usage reported on every completed response.
pub fn usage() -> Value {
    json!({
        "input_tokens": 10,
        // `cache_write_tokens` is required by the schema's ResponseUsage.
        "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 15
    })
}

/// One scripted answer, consumed by one `POST /v1/responses`.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An assistant message.
    Text(String),
    /// One `function_call` item. A `Value::String` is sent verbatim as the
    /// `arguments` string (so a test can send malformed JSON); any other
    /// value is serialised.
    ToolCall { name: String, arguments: Value },
    /// Several function calls in one response.
    ToolCalls(Vec<(String, Value)>),
    /// An HTTP error answered before any other check (as a rate limiter or
    /// an overloaded front end would).
    HttpError {
        status: u16,
        body: Value,
        headers: Vec<(String, String)>,
    },
    /// `response.created`, then an SSE `error` event with this data (a
    /// `"type":"error"` field is added when missing), then the stream ends.
    StreamError(Value),
    /// `response.created` and a couple of text deltas, then the stream ends
    /// without `response.completed`.
    Truncated,
    /// `response.created`, then this long a pause, then the default reply.
    Stall(Duration),
    /// This text, then the answer ends cut short: Responses sends
    /// `response.incomplete` (reason `max_output_tokens`, stored and
    /// chainable like a completed one), Chat `finish_reason: "length"`.
    Incomplete(String),
}

impl Reply {
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Text(text.into())
    }

    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Reply {
        Reply::ToolCall {
            name: name.into(),
            arguments,
        }
    }

    /// An HTTP error with an OpenAI-style `{"error":{...}}` body.
    pub fn http_error(status: u16, code: Option<&str>, message: &str) -> Reply {
        Reply::HttpError {
            status,
            body: error_body("invalid_request_error", None, code, message),
            headers: Vec::new(),
        }
    }
}

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Header names are lowercase, in the order received.
    pub headers: Vec<(String, String)>,
    /// The JSON body; a body that is not JSON is kept as a string (and gets
    /// an `invalid JSON: ...` entry in `schema_errors`), an empty one is `null`.
    pub body: Value,
    /// What `validate_create_response` found (empty when valid, and for
    /// requests to other paths).
    pub schema_errors: Vec<String>,
}

impl RecordedRequest {
    /// The first header of that (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A fake OpenAI Responses API on `127.0.0.1`; stops when dropped.
///
/// [`FakeModel::start`] binds an ephemeral port and serves `POST /v1/responses`
/// from its own thread and tokio runtime. Every request is recorded with the
/// errors the official schema finds in its body
/// ([`crate::schema::validate_create_response`]); a body the schema rejects
/// gets HTTP 400, as do the chain errors of the real API (unknown previous
/// response, a function call without its output, an output without its call).
///
/// A response is stored (when `store` is not `false`) just before its
/// `response.completed` event is sent, so a stream that errors, is truncated
/// or loses its client leaves nothing to chain from. With an empty script the
/// reply is `echo: <last user text> [turns seen: N]`, N counting the user
/// messages along the whole chain plus this input, so a test can prove the
/// model saw history (the last user text comes from this input, or from the
/// chain when this input has none, e.g. only tool outputs). A user text
/// `CALL <command>` in this input (with an empty script) gets a `shell` call
/// running that command.
///
/// [`post_json`] and [`HttpReply::events`] are a tiny blocking client for tests.
pub struct FakeModel {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<FakeState>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, FakeState> {
        // A panic elsewhere must not take the fake down with it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Default)]
struct FakeState {
    script: VecDeque<Reply>,
    requests: Vec<RecordedRequest>,
    responses: HashMap<String, Stored>,
    next_response: u64,
    next_item: u64,
    event_delay: Duration,
    /// Benchmark mode: constant work per request (see [`FakeModel::set_lean`]).
    lean: bool,
    /// Requests whose last user text contains this stall this long.
    stall_marker: Option<(String, Duration)>,
    /// Chat Completions: leave usage out of the stream.
    chat_no_usage: bool,
    /// Chat Completions: send the whole answer in one chunk.
    chat_one_chunk: bool,
    open_streams: usize,
    completed: usize,
}

/// What the fake remembers of a completed, stored response.
#[derive(Debug, Clone)]
struct Stored {
    previous: Option<String>,
    input: Vec<Value>,
    output: Vec<Value>,
}

impl FakeModel {
    /// Binds `127.0.0.1:0` and serves from a new thread.
    pub fn start() -> FakeModel {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("set_nonblocking");
        let addr = listener.local_addr().expect("local_addr");
        let shared = Arc::new(Shared::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::max(256 << 20))
            .with_state(Arc::clone(&shared));
        let thread = std::thread::Builder::new()
            .name(format!("fake-model-{}", addr.port()))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime");
                rt.block_on(async move {
                    use axum::serve::ListenerExt as _;
                    // Real providers disable Nagle; without it every small SSE
                    // write waits on the client's delayed ACK (~40 ms).
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .expect("tokio listener")
                        .tap_io(|tcp| {
                            let _ = tcp.set_nodelay(true);
                        });
                    tokio::select! {
                        result = axum::serve(listener, app) => {
                            if let Err(e) = result {
                                eprintln!("fake model server failed: {e}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime cancels open connections and streams.
            })
            .expect("spawn fake model thread");
        FakeModel {
            shared,
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1/responses`
    pub fn responses_url(&self) -> String {
        format!("{}/responses", self.base_url())
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Appends a reply to the script (FIFO; one per `POST /v1/responses`
    /// that passes the schema and chain checks, or any one for `HttpError`).
    pub fn push(&self, reply: Reply) {
        self.shared.lock().script.push_back(reply);
    }

    /// Scripted replies not consumed yet.
    pub fn pending_replies(&self) -> usize {
        self.shared.lock().script.len()
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Waits until at least `n` requests arrived; false on timeout.
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.shared.lock().requests.len() >= n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Forgets every stored response: a later `previous_response_id` gets the
    /// real `previous_response_not_found` 400.
    pub fn forget_response_ids(&self) {
        self.shared.lock().responses.clear();
    }

    /// Ids of the responses currently stored.
    pub fn stored_response_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.shared.lock().responses.keys().cloned().collect();
        ids.sort_by_key(|id| id.trim_start_matches("resp_").parse::<u64>().unwrap_or(0));
        ids
    }

    /// Sleep between SSE events (default 0).
    /// Benchmark mode: no schema check, no request log, no chain walk —
    /// every request costs the same however long the conversation is, and
    /// the reply is always `ok`. Unknown previous ids still get the 400.
    pub fn set_lean(&self, lean: bool) {
        self.shared.lock().lean = lean;
    }

    /// Unscripted requests whose last user message contains `marker` stall
    /// for `d` before answering (so a test can kill chosen clients mid-turn).
    pub fn stall_when_prompt_contains(&self, marker: &str, d: Duration) {
        self.shared.lock().stall_marker = Some((marker.to_owned(), d));
    }

    /// Chat Completions: omit usage (as some local servers do).
    pub fn set_chat_no_usage(&self, v: bool) {
        self.shared.lock().chat_no_usage = v;
    }

    /// Chat Completions: stream each answer as one big chunk.
    pub fn set_chat_one_chunk(&self, v: bool) {
        self.shared.lock().chat_one_chunk = v;
    }

    pub fn set_event_delay(&self, d: Duration) {
        self.shared.lock().event_delay = d;
    }

    /// SSE streams still being written (a client that hung up is noticed at
    /// the next event or, during a stall, at once).
    pub fn open_streams(&self) -> usize {
        self.shared.lock().open_streams
    }

    /// Streams that reached `response.completed`.
    pub fn completed_responses(&self) -> usize {
        self.shared.lock().completed
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// ---------------------------------------------------------------------------
// Request handling

fn error_body(kind: &str, param: Option<&str>, code: Option<&str>, message: &str) -> Value {
    json!({"error": {"type": kind, "param": param, "code": code, "message": message}})
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn bad_request(param: Option<&str>, code: Option<&str>, message: &str) -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        &error_body("invalid_request_error", param, code, message),
    )
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let is_responses = method == Method::POST && path == "/v1/responses";
    let is_chat = method == Method::POST && path == "/v1/chat/completions";
    let parsed: Result<Value, String> = if body.is_empty() && !is_responses && !is_chat {
        Ok(Value::Null)
    } else {
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    };
    let lean = shared.lock().lean;
    let (body_value, schema_errors) = match &parsed {
        Ok(_) if lean => (Value::Null, Vec::new()),
        Ok(v) if is_responses => (
            v.clone(),
            validate_create_response(v).err().unwrap_or_default(),
        ),
        Ok(v) if is_chat => (v.clone(), chat::validate(v)),
        Ok(v) => (v.clone(), Vec::new()),
        Err(e) => (
            Value::String(String::from_utf8_lossy(&body).into_owned()),
            vec![format!("invalid JSON: {e}")],
        ),
    };
    let mut state = shared.lock();
    if !lean {
        state.requests.push(RecordedRequest {
            method: method.to_string(),
            path: path.clone(),
            headers,
            body: body_value,
            schema_errors: schema_errors.clone(),
        });
    }
    if is_chat {
        return chat::handle(&shared, state, parsed, &schema_errors);
    }
    if !is_responses {
        return json_response(
            StatusCode::NOT_FOUND,
            &error_body(
                "invalid_request_error",
                None,
                Some("unknown_url"),
                &format!("Unknown request URL: {method} {path}."),
            ),
        );
    }
    let body = match parsed {
        Ok(body) => body,
        Err(e) => {
            return bad_request(
                None,
                None,
                &format!("We could not parse the JSON body of your request: {e}"),
            );
        }
    };
    if let Some(first) = schema_errors.first() {
        return bad_request(None, None, &format!("schema: {first}"));
    }
    // Scripted HTTP errors come before any semantic check.
    if let Some(Reply::HttpError { .. }) = state.script.front()
        && let Some(Reply::HttpError {
            status,
            body,
            headers,
        }) = state.script.pop_front()
    {
        return scripted_error(status, &body, &headers);
    }
    if body.get("stream").and_then(Value::as_bool) != Some(true) {
        return bad_request(
            Some("stream"),
            None,
            "The fake model only streams: send \"stream\": true.",
        );
    }
    let plan = match plan_response(&mut state, &body) {
        Ok(plan) => plan,
        Err(resp) => return *resp,
    };
    let (sse, resp) = open_sse(&shared, state);
    tokio::spawn(async move {
        // Ok or Err(Closed): either way the stream is over.
        let _ = run_stream(sse, plan).await;
    });
    resp
}

/// Counts an open stream and makes the SSE writer and the response it feeds.
fn open_sse(shared: &Arc<Shared>, mut state: MutexGuard<'_, FakeState>) -> (Sse, Response) {
    let delay = state.event_delay;
    state.open_streams += 1;
    drop(state);
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let sse = Sse {
        tx,
        seq: 0,
        delay,
        shared: Arc::clone(shared),
    };
    let mut resp = Response::new(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    (sse, resp)
}

fn reject(param: Option<&str>, code: Option<&str>, message: &str) -> Box<Response> {
    Box::new(bad_request(param, code, message))
}

fn scripted_error(status: u16, body: &Value, headers: &[(String, String)]) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(status, body);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            resp.headers_mut().append(name, value);
        }
    }
    resp
}

/// Everything a stream needs, decided under the lock.
struct Plan {
    meta: Meta,
    kind: PlanKind,
    /// End with `response.incomplete` instead of `response.completed`.
    incomplete: bool,
    /// What to store on completion (None when `store` is false).
    store: Option<Stored>,
    /// The default reply's text (for `Truncated` deltas).
    default_text: String,
}

struct Meta {
    id: String,
    created_at: u64,
    model: Value,
    instructions: Value,
    tools: Value,
    previous: Option<String>,
    store: bool,
}

enum PlanKind {
    Items(Vec<Value>),
    StreamError(Value),
    Truncated(String),
    Stall(Duration, Vec<Value>),
}

/// Input items with a plain-string `input` turned into one user message.
fn input_items(body: &Value) -> Vec<Value> {
    match body.get("input") {
        Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

fn item_type(item: &Value) -> &str {
    item.get("type").and_then(Value::as_str).unwrap_or_else(|| {
        if item.get("role").is_some() {
            "message"
        } else {
            ""
        }
    })
}

/// The text of a user message (string content or the text of its parts).
fn user_text(item: &Value) -> Option<String> {
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

fn call_ids<'a>(items: impl IntoIterator<Item = &'a Value>, kind: &str) -> Vec<String> {
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
fn plan_response(state: &mut FakeState, body: &Value) -> Result<Plan, Box<Response>> {
    let input = input_items(body);
    let previous = body
        .get("previous_response_id")
        .and_then(Value::as_str)
        .map(str::to_owned);

    let default_text = if state.lean {
        if let Some(prev) = &previous
            && !state.responses.contains_key(prev)
        {
            return Err(reject(
                Some("previous_response_id"),
                Some("previous_response_not_found"),
                &format!("Previous response with id '{prev}' not found."),
            ));
        }
        "ok".to_owned()
    } else {
        // The chain, newest first.
        let mut chain: Vec<&Stored> = Vec::new();
        if let Some(prev) = &previous {
            let Some(mut stored) = state.responses.get(prev) else {
                return Err(reject(
                    Some("previous_response_id"),
                    Some("previous_response_not_found"),
                    &format!("Previous response with id '{prev}' not found."),
                ));
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

        // Every call the model made last time, or that this input replays,
        // needs its output in this input.
        let outputs: Vec<String> = call_ids(&input, "function_call_output");
        let output_set: HashSet<&str> = outputs.iter().map(String::as_str).collect();
        let last_output = chain
            .first()
            .map(|s| s.output.as_slice())
            .unwrap_or_default();
        for call in call_ids(last_output.iter().chain(&input), "function_call") {
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
                .chain(&input),
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

        // The default reply: echo the last user text, count the user turns.
        let user_texts = |items: &[Value]| items.iter().filter_map(user_text).collect::<Vec<_>>();
        let mut turns = user_texts(&input).len();
        let mut last_user = user_texts(&input).pop();
        for stored in &chain {
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
    };

    state.next_response += 1;
    let id = format!("resp_{}", state.next_response);
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
    if reply.is_none()
        && let Some((marker, d)) = &state.stall_marker
        && default_text.contains(marker.as_str())
    {
        reply = Some(Reply::Stall(*d));
    }
    let mut next_item = || {
        state.next_item += 1;
        state.next_item
    };
    let incomplete = matches!(reply, Some(Reply::Incomplete(_)));
    let kind = match reply {
        None => PlanKind::Items(vec![message_item(next_item(), &default_text)]),
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
        Some(Reply::Stall(d)) => PlanKind::Stall(d, vec![message_item(next_item(), &default_text)]),
        // Answered before planning; unreachable, but harmless.
        Some(Reply::HttpError {
            status,
            body,
            headers,
        }) => return Err(Box::new(scripted_error(status, &body, &headers))),
    };

    let store = body.get("store").and_then(Value::as_bool) != Some(false);
    let meta = Meta {
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
        previous: previous.clone(),
        store,
    };
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

fn message_item(n: u64, text: &str) -> Value {
    json!({
        "type": "message",
        "id": format!("msg_{n}"),
        "role": "assistant",
        "status": "completed",
        // `logprobs` is required by the schema's OutputTextContent.
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    })
}

fn call_item(n: u64, name: &str, arguments: &Value) -> Value {
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

fn response_object(meta: &Meta, status: &str, output: &[Value]) -> Value {
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
        resp["usage"] = usage();
    }
    resp
}

// ---------------------------------------------------------------------------
// SSE

/// The client went away.
struct Closed;

struct Sse {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    seq: u64,
    delay: Duration,
    shared: Arc<Shared>,
}

impl Drop for Sse {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.open_streams = state.open_streams.saturating_sub(1);
    }
}

impl Sse {
    /// Sends one event, numbering it (`sequence_number`) and naming it after its `type`.
    async fn send(&mut self, mut event: Value) -> Result<(), Closed> {
        event["sequence_number"] = json!(self.seq);
        let name = event["type"].as_str().unwrap_or("message").to_owned();
        self.send_raw(&name, &event).await
    }

    /// A data-only SSE line (Chat Completions style).
    async fn send_data(&mut self, data: &str) -> Result<(), Closed> {
        if self.seq > 0 && !self.delay.is_zero() {
            self.pause(self.delay).await?;
        }
        self.seq += 1;
        self.tx
            .send(Ok(Bytes::from(format!("data: {data}\n\n"))))
            .await
            .map_err(|_| Closed)
    }

    async fn send_raw(&mut self, name: &str, data: &Value) -> Result<(), Closed> {
        if self.seq > 0 && !self.delay.is_zero() {
            self.pause(self.delay).await?;
        }
        self.seq += 1;
        let chunk = format!("event: {name}\ndata: {data}\n\n");
        self.tx
            .send(Ok(Bytes::from(chunk)))
            .await
            .map_err(|_| Closed)
    }

    /// Sleeps, returning early with `Closed` when the client hangs up.
    async fn pause(&self, d: Duration) -> Result<(), Closed> {
        tokio::select! {
            () = tokio::time::sleep(d) => Ok(()),
            () = self.tx.closed() => Err(Closed),
        }
    }
}

fn chunks(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(parts).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

async fn run_stream(mut sse: Sse, plan: Plan) -> Result<(), Closed> {
    let Plan {
        meta,
        kind,
        incomplete,
        store,
        default_text,
    } = plan;
    let created = response_object(&meta, "in_progress", &[]);
    sse.send(json!({"type": "response.created", "response": created}))
        .await?;
    sse.send(json!({"type": "response.in_progress", "response": created}))
        .await?;
    let items = match kind {
        PlanKind::Items(items) => items,
        PlanKind::Stall(d, items) => {
            sse.pause(d).await?;
            items
        }
        PlanKind::StreamError(v) => return sse.send_raw("error", &v).await,
        PlanKind::Truncated(item_id) => {
            let item = json!({"type": "message", "id": item_id, "role": "assistant",
                              "status": "in_progress", "content": []});
            sse.send(
                json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
            )
            .await?;
            sse.send(json!({"type": "response.content_part.added", "item_id": item_id,
                            "output_index": 0, "content_index": 0,
                            "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}))
                .await?;
            for delta in chunks(&default_text, 3).into_iter().take(2) {
                sse.send(json!({"type": "response.output_text.delta", "item_id": item_id,
                                "output_index": 0, "content_index": 0, "delta": delta, "logprobs": []}))
                    .await?;
            }
            return Ok(());
        }
    };
    for (index, item) in items.iter().enumerate() {
        send_item(&mut sse, index, item).await?;
    }
    if let Some(mut stored) = store {
        stored.output = items.clone();
        sse.shared.lock().responses.insert(meta.id.clone(), stored);
    }
    sse.shared.lock().completed += 1;
    if incomplete {
        let mut done = response_object(&meta, "incomplete", &items);
        done["usage"] = usage();
        done["incomplete_details"] = json!({"reason": "max_output_tokens"});
        return sse
            .send(json!({"type": "response.incomplete", "response": done}))
            .await;
    }
    let done = response_object(&meta, "completed", &items);
    sse.send(json!({"type": "response.completed", "response": done}))
        .await
}

async fn send_item(sse: &mut Sse, index: usize, item: &Value) -> Result<(), Closed> {
    let id = item["id"].as_str().unwrap_or_default().to_owned();
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    if item["type"] == "function_call" {
        let arguments = item["arguments"].as_str().unwrap_or_default();
        added["arguments"] = json!("");
        sse.send(
            json!({"type": "response.output_item.added", "output_index": index, "item": added}),
        )
        .await?;
        for delta in chunks(arguments, 2) {
            sse.send(
                json!({"type": "response.function_call_arguments.delta", "item_id": id,
                            "output_index": index, "delta": delta}),
            )
            .await?;
        }
        sse.send(
            json!({"type": "response.function_call_arguments.done", "item_id": id,
                        "output_index": index, "name": item["name"], "arguments": arguments}),
        )
        .await?;
    } else {
        let part = item["content"][0].clone();
        let text = part["text"].as_str().unwrap_or_default().to_owned();
        added["content"] = json!([]);
        sse.send(
            json!({"type": "response.output_item.added", "output_index": index, "item": added}),
        )
        .await?;
        let mut empty = part.clone();
        empty["text"] = json!("");
        sse.send(json!({"type": "response.content_part.added", "item_id": id,
                        "output_index": index, "content_index": 0, "part": empty}))
            .await?;
        for delta in chunks(&text, 3) {
            sse.send(json!({"type": "response.output_text.delta", "item_id": id,
                            "output_index": index, "content_index": 0, "delta": delta, "logprobs": []}))
                .await?;
        }
        sse.send(json!({"type": "response.output_text.done", "item_id": id,
                        "output_index": index, "content_index": 0, "text": text, "logprobs": []}))
            .await?;
        sse.send(json!({"type": "response.content_part.done", "item_id": id,
                        "output_index": index, "content_index": 0, "part": part}))
            .await?;
    }
    sse.send(json!({"type": "response.output_item.done", "output_index": index, "item": item}))
        .await
}

// ---------------------------------------------------------------------------
// A tiny blocking HTTP/1.1 client for tests of the fake (and quick probes).

/// A complete HTTP answer.
#[derive(Debug, Clone)]
pub struct HttpReply {
    pub status: u16,
    /// Lowercase names.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// The `event:` line (empty when absent).
    pub event: String,
    /// The `data:` lines parsed as JSON (a string when not JSON).
    pub data: Value,
}

impl HttpReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }

    /// The body parsed as a `text/event-stream`.
    pub fn events(&self) -> Vec<SseEvent> {
        parse_sse(&self.body)
    }
}

/// Parses a `text/event-stream` body.
pub fn parse_sse(body: &str) -> Vec<SseEvent> {
    let body = body.replace("\r\n", "\n");
    body.split("\n\n")
        .filter_map(|block| {
            let mut event = String::new();
            let mut data: Vec<&str> = Vec::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim_start().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            if event.is_empty() && data.is_empty() {
                return None;
            }
            let data = data.join("\n");
            let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
            Some(SseEvent { event, data })
        })
        .collect()
}

/// `POST url` with a JSON body and `Authorization: Bearer test-key`.
pub fn post_json(url: &str, body: &Value) -> HttpReply {
    post_raw(url, body.to_string().as_bytes())
}

/// `POST url` with these bytes as an `application/json` body.
pub fn post_raw(url: &str, body: &[u8]) -> HttpReply {
    let (mut stream, host, path) = connect(url);
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer test-key\r\n\
         Content-Type: application/json\r\nAccept: text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("write request");
    stream.write_all(body).expect("write body");
    read_reply(BufReader::new(stream))
}

/// Sends a POST and returns the open connection once the response head has
/// been read, for tests that hang up mid-stream. The reader is positioned at
/// the start of the (chunked) body.
pub fn post_and_hold(url: &str, body: &Value) -> (u16, BufReader<TcpStream>) {
    let (mut stream, host, path) = connect(url);
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("write request");
    let mut reader = BufReader::new(stream);
    let (status, _) = read_head(&mut reader);
    (status, reader)
}

fn connect(url: &str) -> (TcpStream, String, String) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("only http:// URLs: {url}"));
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("connect {host}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("set_read_timeout");
    (stream, host.to_owned(), path.to_owned())
}

fn read_head(reader: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("read status line");
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("read header");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    (status, headers)
}

fn read_reply(mut reader: BufReader<TcpStream>) -> HttpReply {
    let (status, headers) = read_head(&mut reader);
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).expect("read chunk size") == 0 {
                break; // the peer closed without the last chunk
            }
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .unwrap_or_else(|_| panic!("bad chunk size {line:?}"));
            if size == 0 {
                break;
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).expect("read chunk");
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(len) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(len, 0);
        reader.read_exact(&mut body).expect("read body");
    } else {
        reader.read_to_end(&mut body).expect("read body");
    }
    HttpReply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// `POST /v1/chat/completions`: stateless, like the local servers it stands
/// in for; checks that every tool call is answered and streams chunks.
mod chat {
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
                Some("system" | "user") => {
                    if !m["content"].is_string() {
                        errors.push(format!("messages[{i}].content must be a string"));
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

    fn error(status: StatusCode, message: &str) -> Response {
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
        if let Some(Reply::HttpError { .. }) = state.script.front()
            && let Some(Reply::HttpError {
                status,
                body,
                headers,
            }) = state.script.pop_front()
        {
            return scripted_error(status, &body, &headers);
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
        let default_text = format!(
            "echo: {} [turns seen: {}]",
            users.last().copied().unwrap_or(""),
            users.len()
        );
        let usage = !state.chat_no_usage && body["stream_options"]["include_usage"] == true;
        let one_chunk = state.chat_one_chunk;
        state.next_response += 1;
        let id = format!("chatcmpl-{}", state.next_response);
        let mut reply = state.script.pop_front();
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
            let _ = stream(sse, id, reply, default_text, usage, one_chunk, call_base).await;
        });
        resp
    }

    fn chunk(id: &str, delta: Value, finish: Option<&str>) -> String {
        json!({"id": id, "object": "chat.completion.chunk", "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    }

    async fn stream(
        mut sse: Sse,
        id: String,
        reply: Option<Reply>,
        default_text: String,
        usage: bool,
        one_chunk: bool,
        call_base: u64,
    ) -> Result<(), Closed> {
        let cut = matches!(reply, Some(Reply::Incomplete(_)));
        let (text, calls): (Option<String>, Vec<(String, Value)>) = match reply {
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
                    sse.send_data(&chunk(&id, json!({"content": part}), None))
                        .await?;
                }
                return Ok(());
            }
            Some(Reply::StreamError(v)) => {
                sse.send_data(&json!({"error": v}).to_string()).await?;
                return Ok(());
            }
            Some(Reply::HttpError { .. }) => return Ok(()),
        };
        let args = |a: &Value| match a {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let finish = if cut {
            "length"
        } else if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        if one_chunk {
            let tool_calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, a))| json!({"index": i, "id": format!("call_{}", call_base + i as u64), "type": "function",
                    "function": {"name": name, "arguments": args(a)}}))
                .collect();
            let mut delta = json!({"role": "assistant", "content": text});
            if !tool_calls.is_empty() {
                delta["tool_calls"] = json!(tool_calls);
            }
            sse.send_data(&chunk(&id, delta, Some(finish))).await?;
        } else {
            sse.send_data(&chunk(&id, json!({"role": "assistant", "content": if text.is_some() { json!("") } else { Value::Null }}), None)).await?;
            if let Some(t) = &text {
                for part in chunks(t, 3) {
                    sse.send_data(&chunk(&id, json!({"content": part}), None))
                        .await?;
                }
            }
            for (i, (name, a)) in calls.iter().enumerate() {
                let call_id = format!("call_{}", call_base + i as u64);
                sse.send_data(&chunk(&id, json!({"content": null, "tool_calls": [{"index": i, "id": call_id, "type": "function",
                    "function": {"name": name, "arguments": ""}}]}), None)).await?;
                for part in chunks(&args(a), 2) {
                    sse.send_data(&chunk(
                        &id,
                        json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                        None,
                    ))
                    .await?;
                }
            }
            sse.send_data(&chunk(&id, json!({}), Some(finish))).await?;
        }
        if usage {
            sse.send_data(
                &json!({"id": id, "object": "chat.completion.chunk", "choices": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                    "prompt_tokens_details": {"cached_tokens": 2}}})
                .to_string(),
            )
            .await?;
        }
        sse.send_data("[DONE]").await
    }
}

// ---------------------------------------------------------------------------
// A raw server, for misbehaviour a well-formed HTTP stack cannot produce.

/// A TCP server on `127.0.0.1` that hands each connection, once its request
/// head (and `Content-Length` body) is read, to a handler writing whatever
/// bytes it likes; stops accepting when dropped.
pub struct RawServer {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A handler of one connection: the stream and the request head.
pub type RawHandler = dyn Fn(&mut TcpStream, &str) + Send + Sync;

impl RawServer {
    pub fn start(handler: impl Fn(&mut TcpStream, &str) + Send + Sync + 'static) -> RawServer {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("set_nonblocking");
        let addr = listener.local_addr().expect("local_addr");
        let heads = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<RawHandler> = Arc::new(handler);
        let (heads2, stop2) = (Arc::clone(&heads), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let (heads, handler) = (Arc::clone(&heads2), Arc::clone(&handler));
                std::thread::spawn(move || {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                    let Some(head) = read_request(&mut stream) else {
                        return;
                    };
                    heads
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(head.clone());
                    handler(&mut stream, &head);
                });
            }
        });
        RawServer {
            addr,
            heads,
            stop,
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The request heads received, in order.
    pub fn heads(&self) -> Vec<String> {
        self.heads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads a request head and its `Content-Length` body; the head.
fn read_request(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).ok()?;
    Some(head)
}

/// Holds a connection open without answering until the peer hangs up.
pub fn hold_silent(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
}

/// A complete, minimal Responses event stream answering `text`.
pub fn responses_sse(id: &str, text: &str) -> String {
    let events = [
        json!({"type": "response.created", "response": {"id": id, "status": "in_progress"}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
               "content_index": 0, "delta": text}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}}),
        json!({"type": "response.completed", "response": {"id": id, "status": "completed", "usage": usage()}}),
    ];
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

/// A `200 OK` head for a body of `len` bytes of `content_type`, with extra header lines.
pub fn ok_head(content_type: &str, len: usize, extra: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\n{extra}Connection: close\r\n\r\n"
    )
}
