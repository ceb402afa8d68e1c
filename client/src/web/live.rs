//! Continuing a conversation from the page: a turn's events streamed as
//! Server-Sent Events; approvals and Stop come back as separate requests.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::IntoResponse as _;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{Value, json};

use agentx_shared::proto::{
    ApprovalDecision, TurnEvent, TurnStart, TurnStatus, approval_decision, turn_event, turn_input,
};

use super::Web;
use super::api::Where;
use super::reply::{ApiError, ApiResult, ok};

#[derive(Debug, Deserialize)]
pub struct StartBody {
    id: String,
    message: String,
    #[serde(flatten)]
    at: Where,
}

/// Forgets a turn's input channel when its stream ends (or the page goes).
struct Registered {
    web: Arc<Web>,
    turn: String,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut turns) = self.web.turns.lock() {
            turns.remove(&self.turn);
        }
    }
}

/// Starts a turn and streams its events. The first event names the turn
/// (for approvals and Stop); the last is `finished`. A page that goes away
/// drops the stream, which cancels the turn as a vanished CLI does.
pub async fn start(State(web): State<Arc<Web>>, Json(body): Json<StartBody>) -> ApiResult {
    let provider = web.provider.clone().map_err(ApiError::bad)?;
    if body.message.trim().is_empty() {
        return Err(ApiError::bad("the message is empty"));
    }
    let start = TurnStart {
        scope: Some(body.at.scope(&web)),
        session_id: body.id,
        message: body.message,
        approval: web.approval as i32,
        provider: Some(provider),
        sandbox: web.sandbox.clone(),
        client_pid: std::process::id(),
        ..TurnStart::default()
    };
    let (tx, events) = crate::turn::open(&web.channel(), start, "the turn")
        .await
        .map_err(|e| ApiError::bad(e.message))?;
    let turn = token()?;
    if let Ok(mut turns) = web.turns.lock() {
        turns.insert(turn.clone(), tx);
    }
    let registered = Registered {
        web: Arc::clone(&web),
        turn: turn.clone(),
    };
    let first = Event::default()
        .event("turn")
        .data(json!({ "turn": turn }).to_string());
    Ok(Sse::new(stream(first, events, registered))
        .keep_alive(KeepAlive::default())
        .into_response())
}

fn stream(
    first: Event,
    events: tonic::Streaming<TurnEvent>,
    registered: Registered,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let head = futures_util::stream::iter([Ok(first)]);
    let rest = futures_util::stream::unfold(
        Some((events, registered, String::new())),
        |state| async move {
            let (mut events, registered, mut chunks) = state?;
            match events.message().await {
                Ok(Some(event)) => {
                    let (name, data) = event_json(event, &mut chunks);
                    let done = name == "finished";
                    let next = (!done).then_some((events, registered, chunks));
                    Some((
                        Ok(Event::default().event(name).data(data.to_string())),
                        next,
                    ))
                }
                Ok(None) => Some((
                    Ok(Event::default().event("error").data(
                        json!({"error": "agentd ended the turn without a result"}).to_string(),
                    )),
                    None,
                )),
                Err(status) => Some((
                    Ok(Event::default().event("error").data(
                        json!({"error": crate::turn::cut_short(&status).message}).to_string(),
                    )),
                    None,
                )),
            }
        },
    );
    futures_util::StreamExt::chain(head, rest)
}

/// A turn event as the page reads it: a name and a JSON object. `chunks`
/// gathers an answer sent in pieces; the last event carries the whole
/// answer rendered (sanitized HTML).
fn event_json(event: TurnEvent, chunks: &mut String) -> (&'static str, Value) {
    use turn_event::Event as E;
    match event.event {
        Some(E::Started(s)) => ("started", json!({ "session_id": s.session_id })),
        Some(E::TextDelta(text)) => ("text", json!({ "text": text })),
        Some(E::AnswerChunk(text)) => {
            chunks.push_str(&text);
            ("chunk", json!({ "text": text }))
        }
        Some(E::ToolCall(c)) => (
            "tool_call",
            json!({ "call_id": c.call_id, "name": c.name, "arguments": c.arguments }),
        ),
        Some(E::ApprovalRequest(a)) => (
            "approval",
            json!({ "call_id": a.call_id, "command": a.command }),
        ),
        Some(E::ToolOutput(o)) => (
            "tool_output",
            json!({ "call_id": o.call_id, "text": o.text }),
        ),
        Some(E::ToolResult(r)) => (
            "tool_result",
            json!({
                "call_id": r.call_id,
                "exit_code": r.exit_code,
                "output": r.output,
                "denied": r.denied,
                "timed_out": r.timed_out,
                "not_run": r.not_run,
            }),
        ),
        Some(E::Notice(text)) => ("notice", json!({ "text": text })),
        Some(E::Retry(r)) => (
            "notice",
            json!({ "text": format!("retrying ({}/{}): {}", r.attempt, r.max_attempts, r.reason) }),
        ),
        Some(E::Usage(u)) => ("usage", json!({ "total_tokens": u.total_tokens })),
        Some(E::Compacted(c)) => (
            "notice",
            json!({ "text": crate::turn::compaction_line(&c) }),
        ),
        Some(E::Finished(f)) => {
            let status = match TurnStatus::try_from(f.status).unwrap_or(TurnStatus::Unspecified) {
                TurnStatus::Completed => "completed",
                TurnStatus::Failed => "failed",
                TurnStatus::Interrupted => "interrupted",
                TurnStatus::Unspecified => "",
            };
            let answer = if f.text_in_chunks {
                chunks.as_str()
            } else {
                f.text.as_str()
            };
            let html = crate::render::markdown::html::render(answer);
            (
                "finished",
                json!({
                    "status": status,
                    "text": f.text,
                    "text_in_chunks": f.text_in_chunks,
                    "error": f.error,
                    "cut_short": f.cut_short,
                    "html": html,
                }),
            )
        }
        None => ("unknown", json!({})),
    }
}

/// A random name for a running turn.
fn token() -> Result<String, ApiError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| ApiError::bad(format!("no random id: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

async fn send(web: &Web, turn: &str, input: turn_input::Input) -> ApiResult {
    let tx = web
        .turns
        .lock()
        .ok()
        .and_then(|turns| turns.get(turn).cloned())
        .ok_or_else(|| ApiError::bad("that turn is over"))?;
    tx.send(crate::turn::input(input))
        .await
        .map_err(|_| ApiError::bad("that turn is over"))?;
    ok(json!({ "sent": true }))
}

#[derive(Debug, Deserialize)]
pub struct ApproveBody {
    turn: String,
    call_id: String,
    /// "yes" | "no" | "always"
    decision: String,
}

pub async fn approve(State(web): State<Arc<Web>>, Json(body): Json<ApproveBody>) -> ApiResult {
    use approval_decision::Decision;
    let decision = match body.decision.as_str() {
        "yes" => Decision::Yes,
        "no" => Decision::No,
        "always" => Decision::Always,
        other => return Err(ApiError::bad(format!("unknown decision {other:?}"))),
    };
    let answer = ApprovalDecision {
        call_id: body.call_id,
        decision: decision as i32,
    };
    send(&web, &body.turn, turn_input::Input::Approval(answer)).await
}

#[derive(Debug, Deserialize)]
pub struct StopBody {
    turn: String,
}

/// Stop: cancels the turn, as Ctrl-C does in the terminal.
pub async fn stop(State(web): State<Arc<Web>>, Json(body): Json<StopBody>) -> ApiResult {
    send(&web, &body.turn, turn_input::Input::Cancel(true)).await
}
