//! The context meter inside a turn: the fill after each reply, the window
//! learned from servers, the threshold checks, and what a full context does to a turn.

use agentx_shared::context::Meter;
use agentx_shared::conversation::{Item, Usage};

use super::compact::Reason;
use super::window::{Source, WARN_SHARE, Window};
use super::{Engine, Event, Mode, Stop, Turn, TurnSpec, context, provider};
use crate::store::conversation::{ConversationDoc, Fill};
use crate::store::{RollbackTarget, TurnLease};

impl Engine {
    /// The window of the turn's model as known now (configured, learned,
    /// published for its name, or the default).
    pub(super) fn window_for(&self, spec: &TurnSpec) -> Window {
        let (settings, prefs) = (&spec.settings, &spec.prefs);
        self.models
            .window(prefs, &settings.base_url, &settings.model)
    }

    /// Asks the turn's server for its window (once per run), after an
    /// overflow that named none: whether it said.
    async fn ask_window(&self, spec: &TurnSpec) -> bool {
        let proxy = std::sync::Arc::new(provider::ProxyVars::of(&spec.env, &self.own_proxy));
        let Ok(client) = self.clients.get(&proxy) else {
            return false;
        };
        let http = provider::Http { client, proxy };
        self.models
            .probe_once(&http, &spec.settings, &spec.prefs)
            .await
    }
}

impl Turn<'_> {
    /// Past this many tokens, compaction is automatic (`None`: off).
    pub(super) fn threshold(&self) -> Option<u64> {
        self.window.threshold(&self.spec.prefs)
    }

    /// The fill now, counted from the transcript once when no reply said it
    /// yet (an older conversation, an import, a new one-shot) — from its end,
    /// and only to past the window: beyond that every decision is "over",
    /// so a long conversation never compacted costs what a window holds (the
    /// count is then a floor, see [`Turn::settle_fill`]). Accounting never
    /// fails a turn: an unreadable transcript counts as empty here (the
    /// request that needs it says why).
    async fn fill_now(&mut self) -> Fill {
        if let Some(fill) = self.fill {
            return fill;
        }
        let limit = self.window.tokens.max(self.threshold().unwrap_or(0));
        let (items, cut) = match self.read_view(Some(limit)).await {
            Ok(view) => (self.counter.items(&view.items), view.cut),
            Err(e) => {
                tracing::debug!("cannot count the context: {e}");
                (0, false)
            }
        };
        let fill = Fill {
            tokens: self.fixed_tokens() + items,
            estimated: true,
        };
        self.fill = Some(fill);
        self.fill_floor = cut;
        fill
    }

    /// Before a request: a fill that is only a floor is counted whole, as
    /// what a server accepts or rejects is learned from it (a compaction
    /// usually replaced it already).
    pub(super) async fn settle_fill(&mut self) -> Result<(), Stop> {
        if !self.fill_floor {
            return Ok(());
        }
        let view = self.read_view(None).await?;
        self.fill = Some(Fill {
            tokens: self.fixed_tokens() + self.counter.items(&view.items),
            estimated: true,
        });
        self.fill_floor = false;
        Ok(())
    }

    /// What every request carries before the conversation: the
    /// instructions (instruction files included) and the tool definitions.
    pub(super) fn fixed_tokens(&self) -> u64 {
        self.counter.text(&self.spec.instructions)
            + self.counter.text(&super::chat::tools().to_string())
    }

    /// When the instructions take most of the window: which files they come
    /// from and how big each is, for the error that ends the turn.
    pub(super) fn instructions_blame(&self, fixed: u64) -> Option<String> {
        let window = self.window.tokens;
        if self.instruction_files.is_empty() || fixed.saturating_mul(2) < window {
            return None;
        }
        let files: Vec<String> = self
            .instruction_files
            .iter()
            .map(|(path, bytes)| format!("{} ({} KiB)", path.display(), bytes.div_ceil(1024)))
            .collect();
        Some(format!(
            "the instructions alone are about {fixed} tokens of the model's {window}-token \
             context window: they carry the instruction files {}, sent with every request; \
             shorten them, or name other files with instruction_files in config.toml",
            files.join(", ")
        ))
    }

    /// The context after a reply: what the server reported (input plus
    /// output), else the fill before plus what was sent and answered.
    pub(super) fn fill_after(&self, usage: &Usage, reply: &[Item]) -> Fill {
        if usage.unreported == 0 && usage.input_tokens + usage.output_tokens > 0 {
            return Fill {
                tokens: usage.input_tokens + usage.output_tokens,
                estimated: false,
            };
        }
        let before = self.fill.map_or(0, |f| f.tokens);
        Fill {
            tokens: before + self.sending + self.counter.items(reply),
            estimated: true,
        }
    }

    /// Before a new message: refuses one bigger than the whole window (not
    /// kept, not sent), and compacts first when it would pass the threshold.
    pub(super) async fn fit_message(
        &mut self,
        doc: &ConversationDoc,
        message: &str,
    ) -> Result<(), Stop> {
        let instructions = self.fixed_tokens();
        let needs = self.counter.text(message) + self.counter.text(&doc.pending_shell);
        // Refused only against a window known for this model: an assumed
        // one is for the server to confirm (an overflow teaches it).
        if instructions + needs > self.window.tokens && self.window.source != Source::Default {
            if let Some(blame) = self.instructions_blame(instructions) {
                return Err(Stop::Refused(format!(
                    "{blame}; this message (about {needs} tokens) was not sent and is not kept"
                )));
            }
            return Err(Stop::Refused(format!(
                "this message is about {needs} tokens: with the instructions that is more than \
                 the model's whole context window ({} tokens), so it was not sent and is not \
                 kept; send a shorter message, or point the model at a file instead",
                self.window.tokens
            )));
        }
        let fill = self.fill_now().await;
        if let Some(threshold) = self.threshold()
            && fill.tokens + needs > threshold
            && doc.pending_calls.is_empty()
        {
            let reason = if doc.model.is_some() && self.spec.prefs.run_model.is_none() {
                Reason::Model
            } else {
                Reason::Auto
            };
            self.compact(reason, "", true, 0).await?;
        }
        Ok(())
    }

    /// Learns the window an overflow error named for a request of about
    /// `rejected` tokens, bounded by what the server showed (an absurd or
    /// missing number is not learned): whether it was.
    pub(super) fn learn_window(&mut self, named: Option<u64>, rejected: u64) -> bool {
        let settings = &self.spec.settings;
        let learned =
            self.engine
                .models
                .rejected(&settings.base_url, &settings.model, named, rejected);
        self.window =
            self.engine
                .models
                .window(&self.spec.prefs, &settings.base_url, &settings.model);
        learned
    }

    /// The server answered a request of `usage` (or about the fill and what
    /// was sent, when it did not say): its window is at least that.
    pub(super) fn note_accepted(&self, usage: &Usage) {
        let tokens = if usage.unreported == 0 && usage.input_tokens > 0 {
            usage.input_tokens
        } else {
            self.fill.map_or(0, |f| f.tokens) + self.sending
        };
        let settings = &self.spec.settings;
        self.engine
            .models
            .accepted(&settings.base_url, &settings.model, tokens);
        let estimate = self.fill.map_or(0, |f| f.tokens) + self.sending;
        self.engine
            .models
            .answered(&settings.base_url, &settings.model, estimate);
    }

    /// A stream that ended before any output on a request larger than the
    /// last one this server answered: probably over its window, from a
    /// server that cannot say so after its `200 OK`.
    pub(super) fn probable_overflow(&self, e: &provider::ProviderError) -> bool {
        if !e.empty_stream() {
            return false;
        }
        let settings = &self.spec.settings;
        let sent = self.fill.map_or(0, |f| f.tokens) + self.sending;
        self.engine
            .models
            .larger_than_answered(&settings.base_url, &settings.model, sent)
            .unwrap_or(false)
    }

    /// The server said the request does not fit: learn the window, compact
    /// and go on (once per turn), or end the turn saying what to do.
    pub(super) async fn on_overflow(&mut self, window: Option<u64>) -> Result<(), Stop> {
        let sent = self.fill.map_or(0, |f| f.tokens) + self.sending;
        if !self.learn_window(window, sent) {
            // The server named no window in its error (or an absurd one):
            // ask where servers say it; else it is smaller than what was
            // just sent, so take a tenth below that.
            let settings = &self.spec.settings;
            if self.engine.ask_window(&self.spec).await {
                self.window = self.engine.models.window(
                    &self.spec.prefs,
                    &settings.base_url,
                    &settings.model,
                );
            } else {
                let guess = sent / 10 * 9;
                if guess < self.window.tokens {
                    self.learn_window(Some(guess), sent);
                }
            }
        }
        let auto = self.spec.prefs.auto_compact;
        if auto && self.may_compact() && !matches!(self.spec.mode, Mode::Compact(..)) {
            self.emit(Event::Notice(format!(
                "the request did not fit the model's context window ({} tokens); compacting \
                 and sending it again",
                self.window.tokens
            )))
            .await;
            self.compact(Reason::Overflow, "", false, 0).await?;
            return Ok(());
        }
        let window = self.window.tokens;
        let why = if let Some(blame) = self.instructions_blame(self.fixed_tokens()) {
            blame
        } else if !auto {
            format!(
                "the conversation no longer fits the model's context window ({window} tokens) \
                 and automatic compaction is off"
            )
        } else {
            self.why_full(sent)
        };
        Err(Stop::ContextFull(format!(
            "{why}: the turn was dropped, its message and tool results are not kept. /compact (agentx compact) \
             summarises the conversation, /rollback goes back to an earlier checkpoint, /new \
             starts afresh; then send it again"
        )))
    }

    /// Why a request still does not fit with automatic compaction on: the
    /// turn's own tool calls outgrew the window after compacting, compacting
    /// made no progress, or it could not compact at all.
    fn why_full(&self, sent: u64) -> String {
        let window = self.window.tokens;
        let n = self.compactions;
        let times = if n == 1 {
            "once".to_owned()
        } else {
            format!("{n} times")
        };
        match self.compacted_to {
            Some(to) if to < window => format!(
                "this turn's own tool calls and their results outgrew the model's context \
                 window ({window} tokens): the conversation was compacted {times} in this turn \
                 (last to about {to} tokens), and the request grew to about {sent} tokens{}",
                if self.progressed {
                    format!(
                        " — {MAX} compactions is a turn's limit",
                        MAX = super::MAX_COMPACTIONS
                    )
                } else {
                    "; compacting again would not make it smaller".to_owned()
                }
            ),
            Some(to) => format!(
                "even compacted (to about {to} tokens), the conversation does not fit the \
                 model's context window ({window} tokens)"
            ),
            None if n > 0 => format!(
                "compacting could not make the conversation smaller, and it does not fit the \
                 model's context window ({window} tokens)"
            ),
            None => format!(
                "the conversation does not fit the model's context window ({window} tokens)"
            ),
        }
    }

    /// A turn that ended because the context is full is dropped (rolled
    /// back to the last checkpoint, kept as the rollback's backup), so
    /// nothing of it is resent with the next message.
    pub(super) async fn drop_if_full(
        &mut self,
        result: Result<String, Stop>,
        lease: &TurnLease,
    ) -> Result<String, Stop> {
        if let Err(Stop::ContextFull(_)) = &result {
            let doc = self.group.get(Some(self.session.clone())).await;
            let target = match doc {
                Ok(Some(d)) if !d.checkpoints.is_empty() => RollbackTarget::Index(1),
                _ => RollbackTarget::Origin,
            };
            match self.group.rollback_in_turn(lease, target).await {
                Ok(doc) => {
                    self.response_id = doc.response_id.clone();
                    self.fill = doc.context;
                    self.fill_floor = false;
                }
                Err(e) => tracing::warn!("could not drop the overflowing turn: {e}"),
            }
        }
        result
    }

    /// Says once, as the context passes a share of the threshold (or of the
    /// window when compaction is manual), that it is filling up.
    pub(super) async fn warn_when_filling(&self, before: u64) {
        let now = self.fill.map_or(0, |f| f.tokens);
        let (at, then) = match self.threshold() {
            Some(t) => (
                (t as f64 * WARN_SHARE) as u64,
                "it is compacted automatically past 85% — /compact does it now".replace(
                    "85",
                    &format!("{:.0}", self.spec.prefs.auto_compact_at * 100.0),
                ),
            ),
            None => (
                (self.window.tokens as f64 * WARN_SHARE) as u64,
                "automatic compaction is off: /compact before it fills".to_owned(),
            ),
        };
        if before < at && now >= at {
            self.emit(Event::Notice(format!(
                "the context is {}% full ({now} of {} tokens); {then}",
                now * 100 / self.window.tokens.max(1),
                self.window.tokens
            )))
            .await;
        }
    }

    /// The meter at the end of the turn.
    pub(super) async fn meter(&mut self) -> Meter {
        let fill = self.fill_now().await;
        meter(fill, self.window, &self.spec.prefs)
    }
}

/// The meter for a fill, a window and the user's choices.
pub fn meter(fill: Fill, window: Window, prefs: &super::window::Prefs) -> Meter {
    Meter {
        used_tokens: fill.tokens,
        window_tokens: window.tokens,
        estimated: fill.estimated,
        auto_compact_at: prefs.auto_share(),
        window_source: window.source.as_str(),
    }
}

/// What `status` says of a conversation's model and context.
pub struct Standing {
    pub model: String,
    pub meter: Meter,
    pub instruction_files: Vec<std::path::PathBuf>,
    /// Instruction files found but not read, each with why.
    pub instruction_files_skipped: Vec<String>,
}

/// The model a conversation uses now and how full its context is, from the
/// client's settings (`settings.model` is the configured default).
pub async fn standing(
    engine: &Engine,
    group: &crate::store::GroupHandle,
    doc: &ConversationDoc,
    settings: &provider::Settings,
    prefs: &super::window::Prefs,
    folder: &std::path::Path,
) -> Standing {
    let model = prefs
        .run_model
        .clone()
        .or_else(|| doc.model.clone())
        .unwrap_or_else(|| settings.model.clone());
    let window = engine.models.window(prefs, &settings.base_url, &model);
    let loaded =
        super::instructions::load_bounded("", folder, &engine.profile, &prefs.instruction_files)
            .await;
    let fill = match doc.context {
        Some(fill) => fill,
        None => {
            let counter = super::tokens::Counter::for_model(&model);
            let base = counter.text(super::DEFAULT_INSTRUCTIONS)
                + counter.text(&loaded.text)
                + counter.text(&super::chat::tools().to_string());
            // Read from the end, back to the last compaction or to a
            // window's worth: past that the meter only says "over", so a
            // long conversation costs what its window holds, once: the
            // count is kept until the transcript changes.
            let limit = window.tokens;
            let enough = super::view::enough(counter, Some(limit), Default::default());
            let key = TailKey::of(doc, &model, limit);
            let items = match engine.tail_tokens.get(&key) {
                Some(items) => items,
                None => match group.transcript_tail(&doc.id, enough).await {
                    Ok(t) => {
                        let items = counter.items(&context::normalize(&context::model_view(&t)));
                        engine.tail_tokens.put(key, items);
                        items
                    }
                    Err(_) => 0,
                },
            };
            Fill {
                tokens: if items == 0 { 0 } else { base + items },
                estimated: true,
            }
        }
    };
    Standing {
        model,
        meter: meter(fill, window, prefs),
        instruction_files: loaded.files,
        instruction_files_skipped: loaded.skipped,
    }
}

/// What a conversation's transcript was counted as, by the transcript it
/// was: each status of an unchanged conversation with no measured fill (an
/// import, an older one) would otherwise read a window's worth again.
#[derive(Default)]
pub struct TailTokens(std::sync::Mutex<std::collections::HashMap<TailKey, u64>>);

/// The counted transcript: any commit, rollback or undo of one changes
/// its length, its count of rollbacks or its last update.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TailKey {
    id: String,
    journal_bytes: u64,
    journal_items: u64,
    rollbacks: u64,
    updated_at: i64,
    model: String,
    limit: u64,
}

impl TailKey {
    fn of(doc: &ConversationDoc, model: &str, limit: u64) -> Self {
        Self {
            id: doc.id.clone(),
            journal_bytes: doc.journal_bytes,
            journal_items: doc.journal_items,
            rollbacks: doc.rollbacks,
            updated_at: doc.updated_at,
            model: model.to_owned(),
            limit,
        }
    }
}

/// Conversations whose counts are kept; past it they are all dropped.
const TAIL_KEPT: usize = 256;

impl TailTokens {
    fn get(&self, key: &TailKey) -> Option<u64> {
        self.0.lock().ok()?.get(key).copied()
    }

    fn put(&self, key: TailKey, tokens: u64) {
        let Ok(mut kept) = self.0.lock() else { return };
        // One entry per conversation: its older counts are stale.
        kept.retain(|k, _| k.id != key.id);
        if kept.len() >= TAIL_KEPT {
            kept.clear();
        }
        kept.insert(key, tokens);
    }
}
