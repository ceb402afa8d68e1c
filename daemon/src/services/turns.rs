//! The `Turns` gRPC service: a bidirectional stream per turn. The first
//! input starts it; later inputs answer approvals or cancel; events flow back.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt as _};
use tonic::{Request, Response, Status, Streaming};

use agentx_shared::proto::turns_server::Turns;
use agentx_shared::proto::{
    self, ApprovalPolicy, TurnEvent, TurnInput, approval_decision, turn_event, turn_input,
};

use super::{group_for, session_arg, status_of};
use crate::environment::Environment;
use crate::runner::{Runner, Start};
use crate::snapshot::service::Snapshots;
use crate::store::{Store, StoreError};
use crate::turn::provider::Settings;
use crate::turn::{Decision, Engine, Event, Input, Mode, Policy, Status as TurnStatus, TurnSpec};
use agentx_shared::shell_env::ShellEnvironment;

/// Default limit for one shell command.
const SHELL_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest user message accepted (agentx checks it first).
const MAX_MESSAGE: usize = agentx_shared::limits::MAX_MESSAGE;
/// Longest text in one event to agentx (gRPC's default limit is 4 MiB):
/// longer deltas and answers go in pieces.
const WIRE_TEXT: usize = 1 << 20;
/// Events queued for the wire per client.
const WIRE_QUEUE: usize = 16;
/// Longest tool-call arguments or command shown to agentx.
const WIRE_COMMAND: usize = 64 << 10;

pub struct TurnsService {
    store: Arc<Store>,
    runner: Runner,
    tuning: Tuning,
}

/// Timing knobs, from the daemon's environment: `AGENTX_RETRY_BASE_MS`
/// (first backoff step, default 500), `AGENTX_STREAM_IDLE_MS` (a model
/// stream that sends no byte this long is broken and retried, default
/// 120000), `AGENTX_HEADERS_TIMEOUT_MS` (no response headers this long:
/// retried, default 60000) and `AGENTX_MAX_ANSWER_BYTES` (longest answer,
/// default 64 MiB).
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    pub retry_base: Duration,
    pub limits: crate::turn::provider::Limits,
}

impl Tuning {
    /// The knobs `env` sets, the defaults for the rest.
    pub fn from_environment(env: &Environment) -> Self {
        let ms = |name: &str, default: u64| {
            env.var(name)
                .and_then(|v| v.parse::<u64>().ok())
                .map_or(Duration::from_millis(default), Duration::from_millis)
        };
        let max_answer = env
            .var("AGENTX_MAX_ANSWER_BYTES")
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(crate::turn::provider::MAX_ANSWER);
        Self {
            retry_base: ms("AGENTX_RETRY_BASE_MS", 500),
            limits: crate::turn::provider::Limits {
                idle: ms("AGENTX_STREAM_IDLE_MS", 120_000),
                headers: ms("AGENTX_HEADERS_TIMEOUT_MS", 60_000),
                max_answer,
            },
        }
    }
}

impl TurnsService {
    pub fn new(
        store: Arc<Store>,
        engine: Arc<Engine>,
        tuning: Tuning,
        snapshots: Snapshots,
        remote: Option<Arc<crate::remote::Remote>>,
    ) -> Self {
        Self {
            runner: Runner {
                store: Arc::clone(&store),
                engine,
                snapshots,
                remote,
            },
            store,
            tuning,
        }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<TurnEvent, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Turns for TurnsService {
    async fn run_turn(
        &self,
        request: Request<Streaming<TurnInput>>,
    ) -> Result<Response<EventStream>, Status> {
        let mut inputs = request.into_inner();
        let start = first_start(&mut inputs).await?;
        let mode = mode_of(&start)?;
        let settings = settings_of(start.provider.clone().unwrap_or_default())?;
        let (group, folder) = group_for(&self.store, start.scope.as_ref()).await?;
        let mut session = session_arg(&start.session_id)?;
        let mut policy = policy(start.approval);
        let oneshot = if start.oneshot {
            if !matches!(mode, Mode::Message(_)) {
                return Err(Status::invalid_argument(
                    "a one-shot takes a prompt, not a retry",
                ));
            }
            // Nobody can be asked: tools run only when allowed outright.
            if policy == Policy::Ask {
                policy = Policy::Never;
            }
            let agent = super::Scope::try_from(start.scope.as_ref())?.agent;
            let oneshot = self
                .store
                .start_oneshot(&folder, &agent, start.client_pid, &start.message)
                .await
                .map_err(status_of)?;
            session = Some(oneshot.id.clone());
            Some(oneshot)
        } else {
            None
        };
        let group = oneshot.as_ref().map_or(group, |o| o.group.clone());
        let shell_env = match start.shell_environment.clone() {
            None => ShellEnvironment::default(),
            Some(p) => ShellEnvironment::try_from(p).map_err(Status::invalid_argument)?,
        };
        let sandbox = match start.sandbox.clone() {
            None => agentx_shared::sandbox::SandboxPolicy::default(),
            Some(p) => p.try_into().map_err(Status::invalid_argument)?,
        };
        let mut spec = turn_spec(
            start,
            PathBuf::from(folder),
            mode,
            (settings, shell_env),
            policy,
            self.tuning,
        );
        spec.sandbox = sandbox;

        let (input_tx, input_rx) = mpsc::channel::<Input>(16);
        let cancel_tx = Arc::new(watch::channel(false).0);

        let client_gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let gone = (Arc::clone(&cancel_tx), Arc::clone(&client_gone));
        tokio::spawn(pump_inputs(
            inputs,
            input_tx,
            Arc::clone(&cancel_tx),
            Arc::clone(&client_gone),
        ));

        let oneshot_id = oneshot.as_ref().map(|o| o.id.clone()).unwrap_or_default();
        let start = Start {
            group,
            session,
            spec,
            oneshot,
            client_gone,
        };
        let events = self.runner.start(start, input_rx, cancel_tx);
        // Small: what waits here for a slow client is bounded in count, and
        // live output in bytes (see `turn::live`): a piece keeps its share
        // of the bound until the server takes it to send.
        let (wire_tx, wire_rx) = mpsc::channel::<Wire>(WIRE_QUEUE);
        tokio::spawn(to_client(events, wire_tx, oneshot_id, gone));
        let stream = ReceiverStream::new(wire_rx).map(|(event, _held)| event);
        Ok(Response::new(Box::pin(stream)))
    }
}

/// The stream's first message, which must start the turn.
async fn first_start(inputs: &mut Streaming<TurnInput>) -> Result<proto::TurnStart, Status> {
    let first = inputs
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("the turn stream closed before it started"))?;
    let Some(turn_input::Input::Start(start)) = first.input else {
        return Err(Status::invalid_argument(
            "the first turn message must be `start`",
        ));
    };
    Ok(start)
}

/// What the engine runs for a start, its other parts already checked.
fn turn_spec(
    start: proto::TurnStart,
    folder: PathBuf,
    mode: Mode,
    (settings, shell_env): (Settings, ShellEnvironment),
    policy: Policy,
    tuning: Tuning,
) -> TurnSpec {
    let env = start
        .caller
        .map(|c| crate::turn::shell::Environment::from_entries(c.vars, c.umask))
        .unwrap_or_default();
    // What tools see: the policy's variables, never the provider key (a
    // client that sent no environment: agentd's own, filtered the same).
    let key: Vec<&str> = settings.api_key.as_deref().into_iter().collect();
    let tool_env = env.clone().filtered(&shell_env, &key);
    TurnSpec {
        folder,
        mode,
        local_shell: start.local_shell_transcript,
        client_pid: start.client_pid,
        settings,
        policy,
        instructions: if start.instructions.is_empty() {
            crate::turn::DEFAULT_INSTRUCTIONS.to_owned()
        } else {
            start.instructions
        },
        shell_timeout: match start.shell_timeout_secs {
            0 => SHELL_TIMEOUT,
            s => Duration::from_secs(u64::from(s)),
        },
        env,
        tool_env,
        limits: tuning.limits,
        retry_base: tuning.retry_base,
        prefs: super::prefs_of(start.provider.as_ref()),
        bounds: crate::turn::Bounds::from_request(start.max_calls_per_reply, start.max_steps),
        sandbox: agentx_shared::sandbox::SandboxPolicy::default(),
    }
}

/// The engine's mode for a start: a message, or how to settle a failed or
/// interrupted turn.
fn mode_of(start: &proto::TurnStart) -> Result<Mode, Status> {
    let mode = match proto::Resolve::try_from(start.resolve) {
        Ok(proto::Resolve::None) | Err(_) => {
            if start.message.trim().is_empty() {
                return Err(Status::invalid_argument("the message is empty"));
            }
            Mode::Message(start.message.clone())
        }
        Ok(proto::Resolve::RetryRequest) => Mode::RetryRequest,
        Ok(proto::Resolve::RetryMessage) => Mode::RetryMessage,
        Ok(proto::Resolve::Continue) => Mode::Continue,
        Ok(proto::Resolve::NewChain) => Mode::NewChain,
        Ok(proto::Resolve::Compact) => {
            Mode::Compact(start.message.clone(), start.compact_after_items)
        }
    };
    if start.message.len() > MAX_MESSAGE {
        return Err(Status::invalid_argument(format!(
            "the message is over {} KiB",
            MAX_MESSAGE / 1024
        )));
    }
    Ok(mode)
}

/// The model server a start names.
fn settings_of(provider: proto::ProviderSettings) -> Result<Settings, Status> {
    if provider.base_url.is_empty() || provider.model.is_empty() {
        return Err(Status::invalid_argument(
            "provider base_url and model are required",
        ));
    }
    let kind = match provider.provider.as_str() {
        "" | "responses" => crate::turn::provider::Kind::Responses,
        "chat" => crate::turn::provider::Kind::Chat,
        other => {
            return Err(Status::invalid_argument(format!(
                "unknown provider {other:?}: use `responses` or `chat`"
            )));
        }
    };
    Ok(Settings {
        kind,
        base_url: provider.base_url.trim_end_matches('/').to_owned(),
        model: provider.model,
        api_key: Some(provider.api_key).filter(|k| !k.is_empty()),
    })
}

/// Client → turn: approvals and cancellation. A broken stream means the
/// client is gone: cancel. A clean half-close changes nothing.
async fn pump_inputs(
    mut inputs: Streaming<TurnInput>,
    input_tx: mpsc::Sender<Input>,
    cancel: Arc<watch::Sender<bool>>,
    client_gone: Arc<std::sync::atomic::AtomicBool>,
) {
    loop {
        match inputs.message().await {
            Ok(Some(TurnInput {
                input: Some(turn_input::Input::Approval(a)),
            })) => {
                let decision = match approval_decision::Decision::try_from(a.decision) {
                    Ok(approval_decision::Decision::Yes) => Decision::Yes,
                    Ok(approval_decision::Decision::Always) => Decision::Always,
                    _ => Decision::No,
                };
                let approval = Input::Approval {
                    call_id: a.call_id,
                    decision,
                };
                // Never waits: answers nobody asked for must not hold up a
                // cancel behind them (the turn drains stale ones when it asks).
                let _ = input_tx.try_send(approval);
            }
            Ok(Some(TurnInput {
                input: Some(turn_input::Input::Cancel(true)),
            })) => {
                let _ = cancel.send(true);
            }
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(_) => {
                crate::runner::went_away(&cancel, &client_gone);
                return;
            }
        }
    }
}

/// An event for the wire, with the live-output share it holds till sent.
type Wire = (Result<TurnEvent, Status>, Option<crate::turn::live::Held>);

/// Domain events to the wire. When the client is gone this stops, and the
/// runner, finding nobody to tell, cancels the turn.
async fn to_client(
    mut events: mpsc::Receiver<Result<Event, StoreError>>,
    wire_tx: mpsc::Sender<Wire>,
    oneshot_id: String,
    (cancel, client_gone): (Arc<watch::Sender<bool>>, Arc<std::sync::atomic::AtomicBool>),
) {
    // Live output not sent because the client reads too slowly: the wire
    // queue keeps room for what must arrive (results, the end).
    let mut unsent = 0usize;
    loop {
        // A client that goes away is noticed at once, even while the turn
        // sends nothing (queued behind another turn, a long command).
        let event = tokio::select! {
            event = events.recv() => event,
            () = wire_tx.closed() => {
                crate::runner::went_away(&cancel, &client_gone);
                crate::memory::trim_soon();
                return;
            }
        };
        let Some(event) = event else {
            // What this stream's events held goes back to the system.
            crate::memory::trim_soon();
            return;
        };
        if let Ok(Event::ToolOutput { text, .. }) = &event
            && wire_tx.capacity() < WIRE_QUEUE / 2
        {
            unsent += text.len();
            continue;
        }
        let mut held = None;
        let mut wire: Vec<Result<TurnEvent, Status>> = match event {
            Ok(Event::ToolOutput {
                call_id,
                text,
                _held: share,
            }) => {
                held = Some(share);
                vec![Ok(tool_output(call_id, &text))]
            }
            Ok(event) => to_wire(event, &oneshot_id).into_iter().map(Ok).collect(),
            Err(e) => vec![Err(status_of(e))],
        };
        if unsent > 0 {
            let call_id = match wire.first() {
                Some(Ok(TurnEvent {
                    event: Some(turn_event::Event::ToolOutput(o)),
                })) => Some(o.call_id.clone()),
                _ => None,
            };
            if let Some(call_id) = call_id {
                let note = crate::turn::live::not_shown(unsent);
                wire.insert(
                    0,
                    Ok(TurnEvent {
                        event: Some(turn_event::Event::ToolOutput(proto::ToolOutputEvent {
                            call_id,
                            text: note,
                        })),
                    }),
                );
                unsent = 0;
            }
        }
        let last = wire.len().saturating_sub(1);
        for (i, item) in wire.into_iter().enumerate() {
            let held = if i == last { held.take() } else { None };
            if wire_tx.send((item, held)).await.is_err() {
                return;
            }
        }
    }
}

fn policy(p: i32) -> Policy {
    match ApprovalPolicy::try_from(p) {
        Ok(ApprovalPolicy::Auto) => Policy::Auto,
        Ok(ApprovalPolicy::Never) => Policy::Never,
        _ => Policy::Ask,
    }
}

/// `text` in pieces of at most `max` bytes, cut at character boundaries.
fn pieces(text: &str, max: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while rest.len() > max {
        let mut end = max;
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        out.push(rest[..end].to_owned());
        rest = &rest[end..];
    }
    if !rest.is_empty() || out.is_empty() {
        out.push(rest.to_owned());
    }
    out
}

/// A call's arguments as shown to agentx: whole when short, else the
/// head of its command (or of the arguments) and the size.
fn shown_arguments(arguments: String) -> String {
    if arguments.len() <= WIRE_COMMAND {
        return arguments;
    }
    match serde_json::from_str::<serde_json::Value>(&arguments)
        .ok()
        .and_then(|v| v["command"].as_str().map(str::to_owned))
    {
        Some(command) => serde_json::json!({
            "command": crate::turn::head(&command, WIRE_COMMAND)
        })
        .to_string(),
        None => crate::turn::head(&arguments, WIRE_COMMAND),
    }
}

/// Engine events as wire events: one each, except long text, which goes in
/// pieces no message limit can refuse.
fn to_wire(event: Event, oneshot_id: &str) -> Vec<TurnEvent> {
    use turn_event::Event as W;
    let wrap = |event: W| TurnEvent { event: Some(event) };
    match event {
        Event::TextDelta(text) if text.len() > WIRE_TEXT => pieces(&text, WIRE_TEXT)
            .into_iter()
            .map(|piece| wrap(W::TextDelta(piece)))
            .collect(),
        Event::Finished {
            status,
            text,
            error,
            response_id,
            usage,
            cut_short,
            context,
        } if text.len() > WIRE_TEXT => {
            let mut out: Vec<TurnEvent> = pieces(&text, WIRE_TEXT)
                .into_iter()
                .map(|piece| wrap(W::AnswerChunk(piece)))
                .collect();
            drop(text);
            let mut finished = one_to_wire(
                Event::Finished {
                    status,
                    text: String::new(),
                    error,
                    response_id,
                    usage,
                    cut_short,
                    context,
                },
                oneshot_id,
            );
            if let Some(W::Finished(f)) = &mut finished.event {
                f.text_in_chunks = true;
            }
            out.push(finished);
            out
        }
        other => vec![one_to_wire(other, oneshot_id)],
    }
}

/// A piece of a running command's output, as sent.
fn tool_output(call_id: String, text: &str) -> TurnEvent {
    TurnEvent {
        event: Some(turn_event::Event::ToolOutput(proto::ToolOutputEvent {
            call_id,
            text: crate::turn::head(text, WIRE_COMMAND),
        })),
    }
}

fn one_to_wire(event: Event, oneshot_id: &str) -> TurnEvent {
    use turn_event::Event as W;
    let event = match event {
        Event::Started { session_id } => W::Started(proto::TurnStarted {
            session_id,
            oneshot_id: oneshot_id.to_owned(),
        }),
        Event::TextDelta(text) => W::TextDelta(text),
        Event::ToolCall {
            call_id,
            name,
            arguments,
        } => W::ToolCall(proto::ToolCallEvent {
            call_id,
            name: crate::turn::head(&name, 200),
            arguments: shown_arguments(arguments),
        }),
        Event::ApprovalRequest {
            call_id,
            command,
            note,
        } => W::ApprovalRequest(proto::ApprovalRequest {
            call_id,
            command: crate::turn::head(&command, WIRE_COMMAND),
            note: crate::turn::head(&note, WIRE_COMMAND),
        }),
        Event::ToolResult {
            call_id,
            exit_code,
            output,
            denied,
            timed_out,
            not_run,
        } => W::ToolResult(proto::ToolResultEvent {
            call_id,
            exit_code,
            output: crate::turn::head(&output, WIRE_TEXT),
            denied,
            timed_out,
            not_run: not_run.unwrap_or_default(),
        }),
        Event::ToolOutput { call_id, text, .. } => return tool_output(call_id, &text),
        Event::Notice(text) => W::Notice(crate::turn::head(&text, WIRE_COMMAND)),
        Event::Retry {
            attempt,
            max_attempts,
            delay,
            reason,
        } => W::Retry(proto::RetryNotice {
            attempt,
            max_attempts,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            reason: crate::turn::head(&reason, WIRE_COMMAND),
        }),
        Event::Usage(usage) => W::Usage(usage.into()),
        Event::Compacted {
            tokens_before,
            tokens_after,
            reason,
            trimmed_only,
        } => W::Compacted(proto::CompactionEvent {
            tokens_before,
            tokens_after,
            reason: reason.as_str().to_owned(),
            trimmed_only,
        }),
        Event::Finished {
            status,
            text,
            error,
            response_id,
            usage,
            cut_short,
            context,
        } => {
            use proto::TurnEndKind as Kind;
            let (status, end_kind) = match status {
                TurnStatus::Completed => (proto::TurnStatus::Completed, Kind::Unspecified),
                TurnStatus::Failed => (proto::TurnStatus::Failed, Kind::Unspecified),
                TurnStatus::Interrupted => (proto::TurnStatus::Interrupted, Kind::Cancelled),
                TurnStatus::Stopped => (proto::TurnStatus::Interrupted, Kind::DaemonStopped),
                TurnStatus::ContextFull => (proto::TurnStatus::Failed, Kind::ContextFull),
                TurnStatus::Refused => (proto::TurnStatus::Failed, Kind::Refused),
            };
            W::Finished(proto::TurnFinished {
                status: status as i32,
                text,
                error: crate::turn::head(&error, WIRE_COMMAND),
                response_id: crate::turn::head(&response_id, WIRE_COMMAND),
                usage: Some(usage.into()),
                oneshot_id: oneshot_id.to_owned(),
                text_in_chunks: false,
                cut_short: cut_short.unwrap_or_default(),
                end_kind: end_kind as i32,
                context: context.as_ref().map(Into::into),
            })
        }
    };
    TurnEvent { event: Some(event) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timing_knobs_come_from_the_environment_given() {
        let env = Environment::from_pairs([
            ("AGENTX_RETRY_BASE_MS", "5"),
            ("AGENTX_STREAM_IDLE_MS", "300"),
            ("AGENTX_HEADERS_TIMEOUT_MS", "200"),
            ("AGENTX_MAX_ANSWER_BYTES", "1024"),
        ]);
        let tuning = Tuning::from_environment(&env);
        assert_eq!(tuning.retry_base, Duration::from_millis(5));
        assert_eq!(tuning.limits.idle, Duration::from_millis(300));
        assert_eq!(tuning.limits.headers, Duration::from_millis(200));
        assert_eq!(tuning.limits.max_answer, 1024);
        // Unset, unparsable or (the answer) zero: the defaults.
        let env = Environment::from_pairs([
            ("AGENTX_RETRY_BASE_MS", " 5"),
            ("AGENTX_MAX_ANSWER_BYTES", "0"),
        ]);
        let tuning = Tuning::from_environment(&env);
        assert_eq!(tuning.retry_base, Duration::from_millis(500));
        assert_eq!(tuning.limits.idle, Duration::from_secs(120));
        assert_eq!(tuning.limits.headers, Duration::from_secs(60));
        assert_eq!(tuning.limits.max_answer, crate::turn::provider::MAX_ANSWER);
    }
}
