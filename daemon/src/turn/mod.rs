//! The turn engine: one user message through the model and its tool calls,
//! every step committed to the store before the next, events streamed out.

pub mod chat;
pub mod context;
pub mod provider;
mod resolve;
pub mod responses;
mod retry;
pub mod run;
pub mod shell;
pub mod sse;
mod tools;

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use agentx_shared::conversation::{CallState, Item, PendingCall, Usage};

use crate::store::session::{Marker, SessionDoc};
use crate::store::{Change, GroupHandle, RollbackTarget, StoreError, TurnLease};
use provider::{Limits, ModelReply, Settings};

pub const DEFAULT_INSTRUCTIONS: &str = "You are agentx, a coding agent working in the user's folder \
through a terminal. Use the `shell` tool to inspect and change files and to run commands; keep \
answers short and concrete.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Ask,
    Auto,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Yes,
    No,
    Always,
}

/// What the client may send while a turn runs.
#[derive(Debug)]
pub enum Input {
    Approval { call_id: String, decision: Decision },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Completed,
    Failed,
    /// Cancelled by the client.
    Interrupted,
    /// Ended because agentd began to stop; kept as interrupted.
    Stopped,
}

/// What a turn reports as it goes.
#[derive(Debug)]
pub enum Event {
    Started {
        session_id: String,
    },
    TextDelta(String),
    ToolCall {
        call_id: String,
        name: String,
        arguments: String,
    },
    ApprovalRequest {
        call_id: String,
        command: String,
    },
    ToolResult {
        call_id: String,
        exit_code: Option<i32>,
        output: String,
        denied: bool,
        timed_out: bool,
        /// Why the call never ran (bad arguments, unknown tool, exec failed).
        not_run: Option<String>,
    },
    /// Output of a running tool call as it arrives (display only).
    ToolOutput {
        call_id: String,
        text: String,
    },
    Notice(String),
    Retry {
        attempt: u32,
        max_attempts: u32,
        delay: Duration,
        reason: String,
    },
    Usage(Usage),
    Finished {
        status: Status,
        text: String,
        error: String,
        response_id: String,
        usage: Usage,
        /// The answer was cut short by the server: its reason.
        cut_short: Option<String>,
    },
}

/// What a turn does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// A new user message.
    Message(String),
    /// Send again what the last (failed) request sent.
    RetryRequest,
    /// Resend the interrupted turn's message from the last checkpoint.
    RetryMessage,
    /// Finish an interrupted turn's pending tool calls and go on.
    Continue,
    /// Forget the server-side chain and send the failed request again with
    /// the whole saved conversation.
    NewChain,
}

/// Everything one turn needs besides the conversation itself.
pub struct TurnSpec {
    pub folder: PathBuf,
    pub mode: Mode,
    pub local_shell: String,
    /// The client that started the turn (0: unknown): its `!command`
    /// transcripts go with its message, another live client's do not.
    pub client_pid: u32,
    pub settings: Settings,
    pub policy: Policy,
    pub instructions: String,
    pub shell_timeout: Duration,
    /// The caller's terminal, for tool commands (memory only).
    pub env: shell::Environment,
    pub limits: Limits,
    pub retry_base: Duration,
}

/// Runs turns; holds one HTTP client per proxy setting turns came with.
#[derive(Default)]
pub struct Engine {
    clients: provider::Clients,
}

/// The channels of a running turn.
pub struct Io {
    pub events: mpsc::Sender<Event>,
    pub inputs: mpsc::Receiver<Input>,
    /// Becomes `true` when the client cancels or goes away.
    pub cancel: watch::Receiver<bool>,
    /// Set before `cancel` when the client went away (killed, connection
    /// lost) instead of cancelling.
    pub client_gone: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Tools wait for this to become `true` (the folder's "before"
    /// snapshot is durable), so undo sees what they change.
    pub tools_gate: Option<watch::Receiver<bool>>,
}

enum Stop {
    Cancelled,
    Failed { message: String, retryable: bool },
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Failed {
            message: format!("conversation store: {e}"),
            retryable: false,
        }
    }
}

fn now_ms() -> i64 {
    agentx_shared::time::unix_ms(std::time::SystemTime::now())
}

struct Turn<'a> {
    engine: &'a Engine,
    group: GroupHandle,
    session: String,
    spec: TurnSpec,
    io: Io,
    usage: Usage,
    response_id: Option<String>,
    approve_all: bool,
    rechained: bool,
    /// Mirror of the document's `unsent`: what the next request carries.
    unsent: Vec<Item>,
    /// The last answer was cut short by the server: its reason.
    cut_short: Option<String>,
}

impl Engine {
    /// Runs one turn to its end and returns its `Finished` event (for the
    /// caller to send once it has cleaned up); the lease keeps other turns
    /// on this conversation waiting until it is dropped.
    pub async fn run(&self, group: GroupHandle, lease: TurnLease, spec: TurnSpec, io: Io) -> Event {
        let doc = lease.doc.clone();
        let mut turn = Turn {
            engine: self,
            group,
            session: doc.id.clone(),
            spec,
            io,
            usage: Usage::default(),
            response_id: doc.response_id.clone(),
            approve_all: doc.approve_all,
            rechained: false,
            unsent: doc.unsent.clone(),
            cut_short: None,
        };
        turn.emit(Event::Started {
            session_id: doc.id.clone(),
        })
        .await;
        // One span per turn: every line the engine logs names its conversation.
        let span = tracing::info_span!(
            "turn",
            session = %doc.id,
            provider = ?turn.spec.settings.kind,
            model = %turn.spec.settings.model,
        );
        let result = tracing::Instrument::instrument(turn.drive(doc, &lease), span).await;
        let (status, text, error) = turn.record_end(result).await;
        drop(lease);
        Event::Finished {
            status,
            text,
            error,
            response_id: turn.response_id.clone().unwrap_or_default(),
            usage: turn.usage,
            cut_short: if status == Status::Completed {
                turn.cut_short.take()
            } else {
                None
            },
        }
    }
}

impl Turn<'_> {
    /// Records how a turn that did not complete ended (interrupted, by the
    /// client or by agentd stopping, or failed): status, text and error.
    async fn record_end(&self, result: Result<String, Stop>) -> (Status, String, String) {
        match result {
            Ok(text) => (Status::Completed, text, String::new()),
            Err(Stop::Cancelled) => {
                // A graceful stop cancels every turn; the record says which.
                let stopped = crate::stopping::requested();
                let marker = Marker {
                    message: if stopped {
                        "agentd stopped during the turn".into()
                    } else if self.client_gone() {
                        "the agentx that ran the turn went away before it finished".into()
                    } else {
                        "cancelled before it finished".into()
                    },
                    at: now_ms(),
                    retryable: true,
                };
                let change = Change {
                    turn_open: Some(false),
                    interrupted: Some(Some(marker)),
                    ..Change::default()
                };
                if let Err(e) = self.group.commit(&self.session, change).await {
                    tracing::warn!("could not record the interrupted turn: {e}");
                }
                if stopped {
                    let error = "agentd stopped during the turn".to_owned();
                    (Status::Stopped, String::new(), error)
                } else {
                    (Status::Interrupted, String::new(), "interrupted".to_owned())
                }
            }
            Err(Stop::Failed { message, retryable }) => {
                // A server's error text can be any size; this one is shown.
                let message = head(&message, 4096);
                let marker = Marker {
                    message: message.clone(),
                    at: now_ms(),
                    retryable,
                };
                let change = Change {
                    turn_open: Some(false),
                    failed: Some(Some(marker)),
                    ..Change::default()
                };
                if let Err(e) = self.group.commit(&self.session, change).await {
                    tracing::warn!("could not record the failed turn: {e}");
                }
                (Status::Failed, String::new(), message)
            }
        }
    }

    async fn emit(&self, event: Event) {
        let _ = self.io.events.send(event).await;
    }

    /// The cancel came from the client going away, not from the user.
    fn client_gone(&self) -> bool {
        self.io
            .client_gone
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    fn cancelled(&self) -> bool {
        *self.io.cancel.borrow()
    }

    async fn commit(&self, change: Change) -> Result<SessionDoc, Stop> {
        Ok(self.group.commit(&self.session, change).await?)
    }

    fn failed(message: impl Into<String>) -> Stop {
        Stop::Failed {
            message: message.into(),
            retryable: false,
        }
    }

    async fn drive(&mut self, doc: SessionDoc, lease: &TurnLease) -> Result<String, Stop> {
        if self.cancelled() {
            return Err(Stop::Cancelled);
        }
        match self.spec.mode.clone() {
            Mode::RetryMessage => self.retry_message(doc, lease).await?,
            Mode::Message(message) => self.start_message(&doc, &message).await?,
            Mode::RetryRequest => self.retry_request(&doc, false).await?,
            Mode::NewChain => self.retry_request(&doc, true).await?,
            Mode::Continue => {
                if !self.continue_interrupted(&doc).await? {
                    return Ok(String::new());
                }
            }
        }
        self.model_loop().await
    }

    /// Records the user message (and answers calls an interrupted turn left).
    async fn start_message(&mut self, doc: &SessionDoc, message: &str) -> Result<(), Stop> {
        let mut append = Self::settle_without_running(&doc.pending_calls);
        let mut shell = doc.pending_shell.clone();
        let me = crate::store::session::process_start(self.spec.client_pid);
        let mut taken = Vec::new();
        for (i, run) in doc.pending_shell_runs.iter().enumerate() {
            if run.is_of(self.spec.client_pid, me) || !run.owner_alive() {
                shell.push_str(&run.text);
                taken.push(i);
            }
        }
        shell.push_str(&self.spec.local_shell);
        let text = if shell.trim().is_empty() {
            message.to_owned()
        } else {
            format!(
                "Commands I ran in my terminal since my last message:\n```\n{}\n```\n\n{message}",
                shell.trim_end()
            )
        };
        append.push(Item::User { text });
        self.unsent.extend(append.iter().cloned());
        self.commit(Change {
            append,
            unsent: Some(self.unsent.clone()),
            pending_calls: Some(Vec::new()),
            last_user: Some(message.to_owned()),
            clear_pending_shell: true,
            take_shell_runs: taken,
            turn_open: Some(true),
            interrupted: Some(None),
            failed: Some(None),
            ..Change::default()
        })
        .await?;
        Ok(())
    }

    /// Commits one model reply: its text and calls to the transcript, usage,
    /// the response id, and (when no call is left) the checkpoint that ends
    /// the turn. The answer when the turn is done, else empty.
    async fn record_reply(
        &mut self,
        reply: ModelReply,
        pending: &[PendingCall],
    ) -> Result<String, Stop> {
        let done = pending.is_empty();
        // What status shows of the answer; the transcript keeps it whole.
        let shown = (!reply.text.is_empty()).then(|| last_answer(&reply.text));
        self.cut_short = reply.incomplete.clone();
        let cut_short = done.then(|| {
            reply.incomplete.as_ref().map(|reason| Marker {
                message: format!("the answer was cut short by the model server ({reason})"),
                at: now_ms(),
                retryable: true,
            })
        });
        let ModelReply {
            id,
            text,
            calls,
            usage,
            incomplete: _,
        } = reply;
        let answer = if done { text.clone() } else { String::new() };
        let mut items = Vec::new();
        if !text.is_empty() {
            items.push(Item::Assistant { text });
        }
        items.extend(calls.iter().map(|c| Item::FunctionCall {
            call_id: c.call_id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
        }));
        self.usage.add(&usage);
        self.response_id = Some(id.clone());
        self.unsent.clear();
        self.commit(Change {
            append: items,
            response_id: Some(Some(id)),
            add_usage: Some(usage),
            last_assistant: shown,
            cut_short,
            pending_calls: Some(pending.to_vec()),
            unsent: Some(Vec::new()),
            turn_completed: done,
            turn_open: done.then_some(false),
            checkpoint: done,
            ..Change::default()
        })
        .await?;
        Ok(answer)
    }

    /// Requests until the model answers without calling a tool.
    async fn model_loop(&mut self) -> Result<String, Stop> {
        loop {
            if self.cancelled() {
                return Err(Stop::Cancelled);
            }
            let send = self.unsent.clone();
            let reply = self.call_model(&send).await?;
            let pending = pending_calls(&reply);
            let done = pending.is_empty();
            let answer = self.record_reply(reply, &pending).await?;
            self.emit(Event::Usage(self.usage)).await;
            if done {
                if let Some(reason) = &self.cut_short {
                    self.emit(Event::Notice(format!(
                        "the answer was cut short by the model server ({reason}); it is kept — \
                         send \"continue\" for the rest"
                    )))
                    .await;
                }
                return Ok(answer);
            }
            let outputs = self.run_tools(pending, false).await?;
            self.unsent = outputs;
            self.commit(Change {
                unsent: Some(self.unsent.clone()),
                ..Change::default()
            })
            .await?;
        }
    }
}

/// The calls of a reply, as pending calls not started yet.
fn pending_calls(reply: &ModelReply) -> Vec<PendingCall> {
    reply
        .calls
        .iter()
        .map(|c| PendingCall {
            call_id: c.call_id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
            state: CallState::NotStarted,
            exit_code: None,
            output: String::new(),
        })
        .collect()
}

/// Longest answer kept whole as the conversation's "last assistant
/// message" (shown by status and in checkpoints); the transcript keeps all.
const LAST_ANSWER: usize = 64 << 10;

/// `text`, or its head and its size when it is over `max` bytes.
pub fn head(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

fn last_answer(text: &str) -> String {
    head(text, LAST_ANSWER)
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    line.chars().take(80).collect()
}
