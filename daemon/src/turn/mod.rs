//! The turn engine: one user message through the model and its tool calls,
//! every step committed to the store before the next, events streamed out.

pub mod chat;
pub mod compact;
pub mod context;
pub mod instructions;
pub mod live;
mod live_tap;
mod mcp_calls;
pub mod meter;
pub mod provider;
mod resolve;
pub mod responses;
mod retry;
pub mod shell;
pub mod sse;
pub mod tmpdirs;
pub mod tokens;
mod tools;
pub mod view;
pub mod window;

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use agentx_shared::conversation::{CallState, Item, PendingCall, Usage};

use crate::store::conversation::{ConversationDoc, Marker};
use crate::store::{
    AccountingChange, Change, GroupHandle, NewCheckpoint, RollbackTarget, ShellChange, StoreError,
    TranscriptChange, TurnChange, TurnLease, Update,
};
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
    /// The conversation no longer fits the context window: the turn was
    /// dropped (rolled back, nothing resent), the user told what to do.
    ContextFull,
    /// Refused before anything was sent or kept (e.g. a message bigger
    /// than the whole window).
    Refused,
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
        /// What the user should know first ("": nothing).
        note: String,
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
        /// Its bytes' place in the live-output bounds, given back once sent.
        _held: live::Held,
    },
    Notice(String),
    Retry {
        attempt: u32,
        max_attempts: u32,
        delay: Duration,
        reason: String,
    },
    Usage(Usage),
    Compacted {
        tokens_before: u64,
        tokens_after: u64,
        reason: compact::Reason,
        trimmed_only: bool,
    },
    Finished {
        status: Status,
        text: String,
        error: String,
        response_id: String,
        usage: Usage,
        /// The answer was cut short by the server: its reason.
        cut_short: Option<String>,
        /// How full the context window is now.
        context: Option<agentx_shared::context::Meter>,
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
    /// Compact the context now, with an optional focus for the summary;
    /// the first N transcript items (a checkpoint's) stay as they are
    /// (0: all is compacted).
    Compact(String, u64),
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
    /// The caller's terminal (memory only): its proxy settings.
    pub env: shell::Environment,
    /// What tool commands run with: the caller's umask and the variables
    /// its `[shell_environment]` lets through, never the provider key.
    pub tool_env: shell::Environment,
    pub limits: Limits,
    pub retry_base: Duration,
    /// The window, compaction and model choices the client forwarded.
    pub prefs: window::Prefs,
    /// How much tool work the turn may do.
    pub bounds: Bounds,
    /// The sandbox its tool commands run in.
    pub sandbox: agentx_shared::sandbox::SandboxPolicy,
}

/// How much tool work one turn may do: calls run from one model reply
/// (the rest are answered as not run), and replies with calls (steps)
/// before the turn ends with a line naming the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub calls_per_reply: usize,
    pub steps: usize,
}

impl Bounds {
    pub const DEFAULT_CALLS_PER_REPLY: usize = 50;
    pub const DEFAULT_STEPS: usize = 200;

    /// The bounds a request asks for; 0 takes the default.
    pub fn from_request(calls_per_reply: u32, steps: u32) -> Self {
        let or = |n: u32, default: usize| match n {
            0 => default,
            n => usize::try_from(n).unwrap_or(default),
        };
        Self {
            calls_per_reply: or(calls_per_reply, Self::DEFAULT_CALLS_PER_REPLY),
            steps: or(steps, Self::DEFAULT_STEPS),
        }
    }
}

impl Default for Bounds {
    fn default() -> Self {
        Self::from_request(0, 0)
    }
}

/// Runs turns; holds one HTTP client per proxy setting turns came with,
/// what was learned of model windows, and where the profile's own
/// instructions file is.
pub struct Engine {
    clients: provider::Clients,
    /// agentd's own proxy settings, from its environment at start.
    own_proxy: provider::ProxyVars,
    models: std::sync::Arc<window::Models>,
    profile: PathBuf,
    /// agentd's stop: running turns end with a record when it begins.
    pub shutdown: crate::shutdown::Shutdown,
    /// The shell tool's commands, killed by that stop.
    tools: shell::Tools,
    /// The Landlock ABI the command sandbox has (0: none).
    sandbox_abi: u32,
    /// Where sandboxed turns make their private `TMPDIR`s.
    tmpdirs: std::sync::Arc<tmpdirs::TmpDirs>,
    /// The profile's MCP servers (none in benchmarks and unit tests).
    mcp: Option<std::sync::Arc<crate::mcp::Manager>>,
    /// Transcripts' token counts for the meter, until each changes.
    tail_tokens: meter::TailTokens,
}

impl Engine {
    /// `own_proxy`: agentd's own proxy settings, for turns whose caller
    /// sent no environment.
    pub fn new(
        profile: PathBuf,
        models: std::sync::Arc<window::Models>,
        shutdown: crate::shutdown::Shutdown,
        own_proxy: provider::ProxyVars,
        sandbox_abi: u32,
    ) -> Self {
        Self {
            sandbox_abi,
            tmpdirs: std::sync::Arc::new(tmpdirs::TmpDirs::open(&std::env::temp_dir(), &profile)),
            clients: provider::Clients::default(),
            own_proxy,
            models,
            profile,
            tools: shell::Tools::new(shutdown.clone()),
            shutdown,
            mcp: None,
            tail_tokens: meter::TailTokens::default(),
        }
    }

    /// Turns offer the tools of `mcp`'s servers and call them there.
    pub fn with_mcp(mut self, mcp: std::sync::Arc<crate::mcp::Manager>) -> Self {
        self.mcp = Some(mcp);
        self
    }
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
    /// The turn's share of the live bytes queued for clients.
    pub live: live::LiveBytes,
}

enum Stop {
    Cancelled,
    Failed {
        message: String,
        retryable: bool,
    },
    /// Nothing was sent or kept; the conversation is as it was.
    Refused(String),
    /// The conversation no longer fits the window: what the user can do.
    ContextFull(String),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Failed {
            message: format!("conversation store: {e}"),
            retryable: false,
        }
    }
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
    /// Counts tokens for this model.
    counter: tokens::Counter,
    window: window::Window,
    /// How full the model's context is (`None`: not known yet).
    fill: Option<crate::store::conversation::Fill>,
    /// The fill was counted from the transcript's end only, up to a limit
    /// past the window: the context holds at least that much. Made exact
    /// (or replaced by a compaction) before a request is sent.
    fill_floor: bool,
    /// Compactions in this turn, and whether the last made progress (a turn
    /// compacts again only then, at most [`MAX_COMPACTIONS`] times).
    compactions: u32,
    progressed: bool,
    /// The size the last compaction in this turn left, in tokens.
    compacted_to: Option<u64>,
    /// A stream ended before any output as a probable overflow once already.
    silent_overflow: bool,
    /// Tokens of the items the request in flight adds to the context.
    sending: u64,
    /// The instruction files the requests carry, with their sizes in bytes.
    instruction_files: Vec<(std::path::PathBuf, u64)>,
    /// Sandboxed commands' private `TMPDIR` (made at the first, removed
    /// with the turn) and the confinement made with it.
    tmpdir: Option<(tempfile::TempDir, shell::Confine)>,
    /// The MCP tools offered to the model in this step.
    mcp_tools: Vec<crate::mcp::Tool>,
    /// MCP servers whose tools could not be listed were told once.
    mcp_told: bool,
    /// The running MCP servers were asked for their lists again in this
    /// step (for a name the model used that no cached list has).
    mcp_relisted: bool,
}

impl Engine {
    /// Runs one turn to its end and returns its `Finished` event (for the
    /// caller to send once it has cleaned up); the lease keeps other turns
    /// on this conversation waiting until it is dropped.
    pub async fn run(
        &self,
        group: GroupHandle,
        lease: TurnLease,
        mut spec: TurnSpec,
        io: Io,
    ) -> Event {
        let doc = lease.doc.clone();
        // The model: this run's -m, else the conversation's own, else the
        // configured one.
        if let Some(model) = spec.prefs.run_model.clone().or_else(|| doc.model.clone()) {
            spec.settings.model = model;
        }
        let loaded = instructions::load_bounded(
            &spec.instructions,
            &spec.folder,
            &self.profile,
            &spec.prefs.instruction_files,
        )
        .await;
        spec.instructions = loaded.text;
        let instruction_files = loaded.files.into_iter().zip(loaded.sizes).collect();
        let counter = tokens::Counter::for_model(&spec.settings.model);
        let window = self.window_for(&spec);
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
            counter,
            window,
            fill: doc.context,
            fill_floor: false,
            compactions: 0,
            progressed: true,
            compacted_to: None,
            silent_overflow: false,
            sending: 0,
            instruction_files,
            tmpdir: None,
            mcp_tools: Vec::new(),
            mcp_told: false,
            mcp_relisted: false,
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
        let result = turn.drop_if_full(result, &lease).await;
        let (status, text, error) = turn.record_end(result).await;
        drop(lease);
        // The private TMPDIR may hold a build's thousands of files, and the
        // last close of the sandbox's ruleset frees its hundreds of rules in
        // the kernel: both off the runtime's workers, before the turn is
        // said to be over.
        if let Some((made, confine)) = turn.tmpdir.take() {
            let _ = crate::priority::blocking_background(move || {
                tmpdirs::remove(made.path());
                drop((made, confine));
            })
            .await;
        }
        let context = Some(turn.meter().await);
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
            context,
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
                let stopped = self.engine.shutdown.stopping();
                let marker = Marker {
                    message: if stopped {
                        "agentd stopped during the turn".into()
                    } else if self.client_gone() {
                        "the agentx that ran the turn went away before it finished".into()
                    } else {
                        "cancelled before it finished".into()
                    },
                    at: agentx_shared::time::now_ms(),
                    retryable: true,
                };
                let change = Change::turn(TurnChange::interrupted(marker));
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
            Err(Stop::Refused(message)) => (Status::Refused, String::new(), message),
            Err(Stop::ContextFull(message)) => {
                let marker = Marker {
                    message: message.clone(),
                    at: agentx_shared::time::now_ms(),
                    retryable: false,
                };
                let change = Change::turn(TurnChange::failed(marker));
                if let Err(e) = self.group.commit(&self.session, change).await {
                    tracing::warn!("could not record the overflowing turn: {e}");
                }
                (Status::ContextFull, String::new(), message)
            }
            Err(Stop::Failed { message, retryable }) => {
                // A server's error text can be any size; this one is shown.
                let message = head(&message, 4096);
                let marker = Marker {
                    message: message.clone(),
                    at: agentx_shared::time::now_ms(),
                    retryable,
                };
                let change = Change::turn(TurnChange::failed(marker));
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

    async fn commit(&self, change: Change) -> Result<ConversationDoc, Stop> {
        Ok(self.group.commit(&self.session, change).await?)
    }

    fn failed(message: impl Into<String>) -> Stop {
        Stop::Failed {
            message: message.into(),
            retryable: false,
        }
    }

    async fn drive(&mut self, doc: ConversationDoc, lease: &TurnLease) -> Result<String, Stop> {
        if self.cancelled() {
            return Err(Stop::Cancelled);
        }
        match self.spec.mode.clone() {
            Mode::RetryMessage => self.retry_message(doc, lease).await?,
            Mode::Message(message) => {
                self.fit_message(&doc, &message).await?;
                self.start_message(&doc, &message).await?;
            }
            Mode::Compact(focus, keep) => {
                if !doc.pending_calls.is_empty() || doc.interrupted.is_some() {
                    return Err(Stop::Refused(
                        "the last turn was interrupted: continue it, retry it or start a new \
                         conversation before compacting"
                            .into(),
                    ));
                }
                // "Summarize from here" starts where a turn ended: a
                // checkpoint's place in the transcript.
                if keep > doc.journal_items {
                    return Err(Stop::Refused(format!(
                        "cannot summarize from transcript item {keep}: the conversation has {} \
                         items",
                        doc.journal_items
                    )));
                }
                if keep > 0 && !doc.checkpoints.iter().any(|cp| cp.journal_items == keep) {
                    return Err(Stop::Refused(format!(
                        "cannot summarize from transcript item {keep}: it is not where a turn \
                         ended (pick a message from the rewind list)"
                    )));
                }
                // The compaction event says what it did; there is no answer.
                // One that fails kept nothing: said as a compaction (not a
                // failed turn to retry), and the conversation is unmarked.
                return match self
                    .compact(compact::Reason::Manual, &focus, true, keep)
                    .await
                {
                    Ok(()) => Ok(String::new()),
                    Err(Stop::Failed { message, .. }) => Err(Stop::Refused(format!(
                        "the compaction failed, nothing was compacted: {message}"
                    ))),
                    Err(stop) => Err(stop),
                };
            }
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
    async fn start_message(&mut self, doc: &ConversationDoc, message: &str) -> Result<(), Stop> {
        let mut append = Self::answer_unrun_calls(&doc.pending_calls);
        let mut shell = doc.pending_shell.clone();
        let me = crate::store::conversation::process_start(self.spec.client_pid);
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
            transcript: TranscriptChange {
                append,
                unsent: Some(self.unsent.clone()),
                last_user: Some(message.to_owned()),
                ..TranscriptChange::default()
            },
            turn: TurnChange {
                calls: Some(Vec::new()),
                ..TurnChange::started()
            },
            shell: ShellChange {
                clear_pending: true,
                take_runs: taken,
                ..ShellChange::default()
            },
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
        refused: Vec<Item>,
    ) -> Result<String, Stop> {
        let done = pending.is_empty();
        // What status shows of the answer; the transcript keeps it whole.
        let shown = (!reply.text.is_empty()).then(|| last_answer(&reply.text));
        self.cut_short = reply.incomplete.clone();
        let cut_short = if done {
            Update::set_or_clear(reply.incomplete.as_ref().map(|reason| Marker {
                message: format!("the answer was cut short by the model server ({reason})"),
                at: agentx_shared::time::now_ms(),
                retryable: true,
            }))
        } else {
            Update::Keep
        };
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
        let fill = self.fill_after(&usage, &items);
        // Calls over the bound are answered at once: the next request
        // carries their outputs with those of the calls that ran.
        items.extend(refused.iter().cloned());
        self.usage.add(&usage);
        self.response_id = Some(id.clone());
        self.unsent = refused;
        self.fill = Some(fill);
        self.commit(Change {
            transcript: TranscriptChange {
                append: items,
                unsent: Some(self.unsent.clone()),
                response_id: Update::Set(id),
                last_assistant: shown,
                ..TranscriptChange::default()
            },
            turn: TurnChange {
                calls: Some(pending.to_vec()),
                completed: done,
                open: done.then_some(false),
                cut_short,
                ..TurnChange::default()
            },
            accounting: AccountingChange {
                usage: Some(usage),
                context: Update::Set(fill),
            },
            checkpoint: done.then(NewCheckpoint::default),
            ..Change::default()
        })
        .await?;
        Ok(answer)
    }

    /// Requests until the model answers without calling a tool.
    async fn model_loop(&mut self) -> Result<String, Stop> {
        let mut steps = 0;
        loop {
            if self.cancelled() {
                return Err(Stop::Cancelled);
            }
            self.refresh_mcp_tools().await;
            self.mcp_relisted = false;
            let send = self.unsent.clone();
            let sent = self.counter.items(&send);
            let before = self.fill.map_or(0, |f| f.tokens);
            self.sending = sent;
            let reply = self.call_model(&send).await?;
            let (pending, refused) = bound_calls(&reply, self.spec.bounds.calls_per_reply);
            let done = pending.is_empty();
            let asked = reply.calls.len();
            let answer = self.record_reply(reply, &pending, refused).await?;
            if asked > pending.len() {
                self.emit(Event::Notice(format!(
                    "the model asked for {asked} tool calls in one reply: the first {} were \
                     taken, the other {} answered as not run (the limit: \
                     max_tool_calls_per_reply = {} in config.toml)",
                    pending.len(),
                    asked - pending.len(),
                    self.spec.bounds.calls_per_reply,
                )))
                .await;
            }
            self.emit(Event::Usage(self.usage)).await;
            self.warn_when_filling(before).await;
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
            self.run_tools(pending, false).await?;
            steps += 1;
            if steps >= self.spec.bounds.steps {
                return Err(Stop::Failed {
                    message: format!(
                        "the turn stopped after {steps} tool steps, its limit (max_tool_steps \
                         in config.toml; exec --max-steps): send a message to go on, or retry \
                         to let it run {steps} more"
                    ),
                    retryable: true,
                });
            }
            // Between tool steps: compact when the next request would pass
            // the threshold (again only when the last compaction made progress).
            let next = self.fill.map_or(0, |f| f.tokens) + self.counter.items(&self.unsent);
            if self.may_compact() && self.threshold().is_some_and(|t| next > t) {
                self.compact(compact::Reason::Auto, "", false, 0).await?;
            }
        }
    }
}

/// Compactions one turn may do (each must have made progress for the next).
pub(super) const MAX_COMPACTIONS: u32 = 20;

impl Turn<'_> {
    /// Whether this turn may compact (again).
    fn may_compact(&self) -> bool {
        self.compactions == 0 || (self.progressed && self.compactions < MAX_COMPACTIONS)
    }
}

/// The calls of a reply to run (at most `max`), as pending calls not
/// started yet, and the outputs answering the rest as not run.
fn bound_calls(reply: &ModelReply, max: usize) -> (Vec<PendingCall>, Vec<Item>) {
    let total = reply.calls.len();
    let refused = reply
        .calls
        .iter()
        .skip(max)
        .map(|c| Item::FunctionOutput {
            call_id: c.call_id.clone(),
            output: format!(
                "not run: the reply asked for {total} tool calls and at most {max} run per \
                 reply; ask again for the ones still needed"
            ),
            images: Vec::new(),
        })
        .collect();
    (pending_calls(&reply.calls[..total.min(max)]), refused)
}

/// Calls as pending calls not started yet.
fn pending_calls(calls: &[provider::Call]) -> Vec<PendingCall> {
    calls
        .iter()
        .map(|c| PendingCall {
            call_id: c.call_id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
            state: CallState::NotStarted,
            exit_code: None,
            output: String::new(),
            images: Vec::new(),
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
