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

mod chat;
mod client;
mod plan;
mod raw;
mod respond;
mod sse;
#[cfg(test)]
mod tests;
mod window;

pub use client::*;
use plan::*;
pub use raw::*;
use respond::*;
use sse::*;
pub use window::OverflowShape;

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
    /// When the fake received it.
    pub received: std::time::Instant,
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
/// running that command; `TOOL <name> <json>` a call of function `name`
/// with those arguments.
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
    /// Responses whose echo contains the first text wait, after
    /// `response.in_progress`, until a request whose echo contains the
    /// second has arrived (see [`FakeModel::hold_until`]).
    hold: Option<(String, String, tokio::sync::watch::Sender<bool>)>,
    /// Chat Completions: leave usage out of the stream.
    chat_no_usage: bool,
    /// Chat Completions: send the whole answer in one chunk.
    chat_one_chunk: bool,
    open_streams: usize,
    completed: usize,
    /// A context window enforced on model calls (and usage reported as
    /// characters / 4), when set.
    window: Option<window::TokenWindow>,
    /// What `/v1/models` and `/props` say the window is.
    advertised_window: Option<u64>,
    /// Only `/props` says it (llama.cpp's own server as agentx probes it).
    props_only: bool,
    /// Window probes received (`GET /v1/models`, `/props`, `/model/info`).
    probes: Vec<String>,
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

    /// Panics unless every request received validated against the
    /// official schema (each names its body and errors).
    #[track_caller]
    pub fn assert_schema_clean(&self) {
        for r in self.requests() {
            assert!(
                r.schema_errors.is_empty(),
                "invalid request body {}: {:?}",
                r.body,
                r.schema_errors
            );
        }
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

    /// Unscripted Responses requests whose last user text contains `held`
    /// are held open (after `response.in_progress`) until a request whose
    /// last user text contains `release` has arrived: a test can prove that
    /// requests overlap, without timing.
    pub fn hold_until(&self, held: &str, release: &str) {
        let (tx, _) = tokio::sync::watch::channel(false);
        self.shared.lock().hold = Some((held.to_owned(), release.to_owned(), tx));
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

    /// Enforces a context window of `tokens` (characters / 4 of every text
    /// a request carries, its chain included) answering overflows in
    /// `shape`'s words, and reports usage the same way. Requests without
    /// tools (summary requests) then get a short summary unless scripted.
    pub fn set_token_window(&self, tokens: u64, shape: OverflowShape) {
        self.shared.lock().window = Some(window::TokenWindow { tokens, shape });
    }

    /// `GET /v1/models` and `/props` say the window is `tokens`.
    pub fn advertise_window(&self, tokens: u64) {
        self.shared.lock().advertised_window = Some(tokens);
    }

    /// Only `GET /props` says the window is `tokens` (llama.cpp's server).
    pub fn advertise_window_at_props(&self, tokens: u64) {
        let mut state = self.shared.lock();
        state.advertised_window = Some(tokens);
        state.props_only = true;
    }

    /// The window probes received, by path (not in [`FakeModel::requests`]).
    pub fn probes(&self) -> Vec<String> {
        self.shared.lock().probes.clone()
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
