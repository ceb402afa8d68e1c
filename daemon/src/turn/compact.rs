//! Compaction: the model writes a handoff summary, and its view of the
//! conversation becomes that summary, the user's recent messages and the latest tool results.

use serde_json::{Value, json};

use agentx_shared::conversation::{Item, Usage};

use super::context;
use super::provider::{self, ModelReply, ProviderError};
use super::tokens::Counter;
use super::{
    AccountingChange, Change, Event, NewCheckpoint, Stop, TranscriptChange, Turn, TurnChange,
    Update,
};
use crate::store::conversation::Fill;

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `/compact`, `agentx compact`.
    Manual,
    /// The next request would pass the threshold.
    Auto,
    /// The server said the request did not fit.
    Overflow,
    /// The conversation moved to a model with a smaller window.
    Model,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Manual => "manual",
            Self::Auto => "auto",
            Self::Overflow => "overflow",
            Self::Model => "model",
        }
    }
}

/// What the model is asked for when it writes the handoff summary.
pub const SUMMARY_INSTRUCTIONS: &str = "\
You are writing a handoff note so that another instance of you can continue this coding \
conversation without its history, which is about to be removed: anything not in the note is \
lost. Write plain Markdown with exactly these sections:

## User requests and corrections
Every request, constraint, preference and correction the user made, in their own words \
(quoted) where short, oldest first. Keep every correction (\"don't…\", \"always…\", \"use X, \
not Y\").

## Done
What was completed, each item starting with DONE, with its result (files, commands, outcomes), \
so that none of it is done again.

## Pending
What remains or was in progress at the end, the very next step first.

## Files touched
Each file created, changed or deleted, one line each on what changed.

## Environment facts
What was learned about the project and the machine: languages, build and test commands that \
work, paths, versions, errors seen and their causes.

Be concise, but lose nothing the next instance needs. No preamble.";

/// The summary instructions for windows too small for [`SUMMARY_INSTRUCTIONS`].
pub const SHORT_SUMMARY_INSTRUCTIONS: &str = "\
Write a brief handoff note so another instance of you can continue this coding conversation \
without its history: the user's requests and corrections (quoted), what is DONE, what is \
pending (next step first), files touched, facts learned. No preamble.";

/// The least conversation worth a summary request, in tokens.
const MIN_SUMMARY_INPUT: u64 = 64;

/// What the summary request wraps around the conversation, in tokens.
const SUMMARY_WRAPPER: u64 = 40;

/// The first line of the message that replaces the compacted history.
pub const HANDOFF_HEADER: &str = "[agentx handoff]";

/// The assistant's answer to the handoff, so that turns keep alternating.
const ACK: &str = "Understood: I have the summary and the user's recent messages, and I will \
continue from there without redoing what is done.";

/// A tool output in the summary request keeps this many bytes, head and tail.
const OUTPUT_IN_SUMMARY: usize = 2000;

/// Roughly how many bytes a token holds, to cut text to a token budget.
const BYTES_PER_TOKEN: u64 = 4;

/// The sizes a compaction aims at, in tokens, from the window's.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// The summary request's transcript.
    pub summary_input: u64,
    /// The summary itself.
    pub summary: u64,
    /// The user's recent messages kept verbatim.
    pub recent: u64,
    /// The unfinished exchange (the message in progress and its tool results).
    pub tail: u64,
    /// The whole compacted context, instructions included: well under the threshold.
    pub target: u64,
}

impl Budget {
    pub fn new(window: u64, threshold: Option<u64>) -> Self {
        let threshold = threshold.unwrap_or(window * 85 / 100).min(window);
        Self {
            summary_input: window * 60 / 100,
            summary: (window * 15 / 100).max(256.min(window / 4)),
            recent: (window * 15 / 100).min(20_000),
            tail: window * 20 / 100,
            target: threshold / 2,
        }
    }
}

/// The summary request that fits `window`: its instructions and how many
/// tokens of conversation it can carry, the full instructions when they
/// leave room, else the short ones, else none (the compaction trims alone).
pub fn summary_plan(
    window: u64,
    budget: &Budget,
    counter: &Counter,
) -> Option<(&'static str, u64)> {
    [SUMMARY_INSTRUCTIONS, SHORT_SUMMARY_INSTRUCTIONS]
        .into_iter()
        .find_map(|instructions| {
            let room = window
                .checked_sub(counter.text(instructions) + SUMMARY_WRAPPER + budget.summary)?;
            (room >= MIN_SUMMARY_INPUT).then(|| (instructions, room.min(budget.summary_input)))
        })
}

/// Whether a handoff with a summary of [`MIN_SUMMARY_INPUT`] tokens, the
/// acknowledgement and the exchange in progress fits the budget's target.
pub fn handoff_fits(view: &[Item], budget: &Budget, counter: &Counter, instructions: u64) -> bool {
    let (_, tail) = split_tail(view);
    let fixed = instructions
        + counter.text(&handoff("", &[]))
        + counter.text(ACK)
        + counter.items(tail).min(budget.tail);
    fixed + MIN_SUMMARY_INPUT <= budget.target
}

/// The view cut to `target` tokens (with `instructions`) by trimming alone:
/// the oldest exchanges dropped whole, then the exchange in progress trimmed
/// like [`compose`] does — for when no summary can fit or the handoff would
/// not make the context smaller.
pub fn trim_oldest(view: &[Item], target: u64, counter: &Counter, instructions: u64) -> Vec<Item> {
    let (earlier, tail) = split_tail(view);
    let fits = |items: &[Item]| instructions + counter.items(items) <= target;
    let mut start = 0;
    while start < earlier.len() && !fits(&view[start..]) {
        start = earlier[start + 1..]
            .iter()
            .position(|i| matches!(i, Item::User { .. }))
            .map_or(earlier.len(), |p| start + 1 + p);
    }
    let mut out = view[start..].to_vec();
    if !fits(&out) && start >= earlier.len() {
        out = trim_tail(tail, target.saturating_sub(instructions), counter);
        // trim_tail keeps a kilobyte of each output: cut them further (the
        // cut's own marker costs a little, hence a few rounds).
        for _ in 0..3 {
            let over = (instructions + counter.items(&out)).saturating_sub(target);
            if over == 0 {
                break;
            }
            for item in &mut out {
                if let Item::FunctionOutput { output, images, .. } = item {
                    // Images go first: each costs as much as a page of text.
                    if !images.is_empty() {
                        output.push_str(&format!(
                            "\n[{} image(s) left out to fit the context window]",
                            images.len()
                        ));
                        images.clear();
                    }
                    let keep = counter.text(output).saturating_sub(over + 16).max(16);
                    *output = middle_out(output, bytes_for(keep));
                }
            }
        }
    }
    out
}

/// A model view split into what came before the exchange in progress and
/// that exchange (from its user message on; empty when the view ends with
/// an answer, i.e. between turns).
pub fn split_tail(view: &[Item]) -> (&[Item], &[Item]) {
    if matches!(view.last(), None | Some(Item::Assistant { .. })) {
        return (view, &[]);
    }
    let at = view
        .iter()
        .rposition(|i| matches!(i, Item::User { .. }))
        .unwrap_or(0);
    view.split_at(at)
}

/// `text` cut to about `max` bytes by dropping its middle (head and tail kept).
pub fn middle_out(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let keep = max / 2;
    let mut head = keep;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - keep;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[… {} bytes left out …]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

fn bytes_for(tokens: u64) -> usize {
    usize::try_from(tokens.saturating_mul(BYTES_PER_TOKEN)).unwrap_or(usize::MAX)
}

/// The conversation as text for the summary request, oldest first; the
/// oldest entries are left out (and said so) past `budget` tokens.
pub fn render_for_summary(view: &[Item], budget: u64, counter: &Counter) -> String {
    let entries: Vec<String> = view
        .iter()
        .filter_map(|item| match item {
            Item::User { text } => Some(format!("USER:\n{text}")),
            Item::Assistant { text } => Some(format!("ASSISTANT:\n{text}")),
            Item::FunctionCall {
                name, arguments, ..
            } => {
                let command = serde_json::from_str::<Value>(arguments)
                    .ok()
                    .and_then(|v| v["command"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| arguments.clone());
                Some(format!(
                    "TOOL CALL ({name}):\n{}",
                    middle_out(&command, OUTPUT_IN_SUMMARY)
                ))
            }
            Item::FunctionOutput { output, .. } => Some(format!(
                "TOOL OUTPUT:\n{}",
                middle_out(output, OUTPUT_IN_SUMMARY)
            )),
            Item::Compaction { .. } => None,
        })
        .collect();
    let mut kept: Vec<String> = Vec::new();
    let mut used = 0u64;
    for entry in entries.iter().rev() {
        let cost = counter.text(entry) + 2;
        if used + cost > budget {
            if kept.is_empty() {
                kept.push(middle_out(entry, bytes_for(budget)));
            }
            break;
        }
        used += cost;
        kept.push(entry.clone());
    }
    kept.reverse();
    let mut out = String::new();
    if kept.len() < entries.len() {
        out.push_str("[… the oldest entries are left out to fit …]\n\n");
    }
    out.push_str(&kept.join("\n\n"));
    out
}

/// The user's messages before the exchange in progress, newest kept first
/// within `budget` tokens, returned oldest first (earlier handoffs skipped:
/// the new summary covers them).
fn recent_messages(earlier: &[Item], budget: u64, counter: &Counter) -> Vec<String> {
    let mut out = Vec::new();
    let mut left = budget;
    for item in earlier.iter().rev() {
        let Item::User { text } = item else { continue };
        if text.starts_with(HANDOFF_HEADER) {
            continue;
        }
        let cost = counter.text(text);
        if cost <= left {
            out.push(text.clone());
            left -= cost;
        } else {
            if left > 200 {
                out.push(middle_out(text, bytes_for(left)));
            }
            break;
        }
    }
    out.reverse();
    out
}

/// What the handoff says it replaced: all that came before it, or (when
/// summarizing from a message on) what followed the messages kept above it.
const EARLIER: &str = "the earlier messages";
const FOLLOWING: &str = "the messages that followed the ones above";

/// The message that replaces the compacted history.
fn handoff(summary: &str, recent: &[String]) -> String {
    let mut text = format!(
        "{HANDOFF_HEADER} This conversation was compacted to fit the model's context window: \
         {EARLIER} were replaced by this handoff summary, written by you. Continue \
         from it; what is marked DONE is done.\n\n{}",
        summary.trim()
    );
    if !recent.is_empty() {
        text.push_str(
            "\n\nThe user's most recent messages before this point, verbatim (oldest first):\n",
        );
        for message in recent {
            text.push_str(&format!("\n---\n{}\n", message.trim_end()));
        }
    }
    text
}

/// The exchange in progress with its tool outputs trimmed (middle-out) to
/// fit `budget` tokens, then its older tool calls dropped, the user's
/// message and the latest calls kept.
fn trim_tail(tail: &[Item], budget: u64, counter: &Counter) -> Vec<Item> {
    let mut out = tail.to_vec();
    if counter.items(&out) <= budget {
        return out;
    }
    let outputs = out
        .iter()
        .filter(|i| matches!(i, Item::FunctionOutput { .. }))
        .count()
        .max(1) as u64;
    let each = bytes_for(budget / outputs).max(1024);
    for item in &mut out {
        if let Item::FunctionOutput { output, .. } = item {
            *output = middle_out(output, each);
        }
    }
    // Then the oldest call groups go (a call with its output), never the
    // latest group.
    let latest: Vec<String> = match out
        .iter()
        .rposition(|i| matches!(i, Item::FunctionCall { .. }))
    {
        Some(last) => {
            let first = out[..=last]
                .iter()
                .rposition(|i| !matches!(i, Item::FunctionCall { .. }))
                .map_or(0, |i| i + 1);
            out[first..=last]
                .iter()
                .filter_map(|i| match i {
                    Item::FunctionCall { call_id, .. } => Some(call_id.clone()),
                    _ => None,
                })
                .collect()
        }
        None => Vec::new(),
    };
    while counter.items(&out) > budget {
        let Some(oldest) = out.iter().find_map(|i| match i {
            Item::FunctionCall { call_id, .. } if !latest.contains(call_id) => {
                Some(call_id.clone())
            }
            _ => None,
        }) else {
            break;
        };
        out.retain(|i| match i {
            Item::FunctionCall { call_id, .. } | Item::FunctionOutput { call_id, .. } => {
                *call_id != oldest
            }
            _ => true,
        });
    }
    out
}

/// For "summarize from here": what the model saw up to transcript item
/// `keep` (kept as it is) and what it saw after (to summarize), out of
/// `full`, the whole view; refused when they do not split cleanly.
fn kept_and_later(
    transcript: &[Item],
    full: &[Item],
    keep: u64,
) -> Result<(Vec<Item>, Vec<Item>), String> {
    let keep = usize::try_from(keep).unwrap_or(usize::MAX);
    if keep > transcript.len() {
        return Err(format!(
            "cannot summarize from transcript item {keep}: the conversation has {} items",
            transcript.len()
        ));
    }
    if keep == transcript.len() {
        return Err("nothing follows that message to summarize".into());
    }
    if transcript[keep..]
        .iter()
        .any(|i| matches!(i, Item::Compaction { .. }))
    {
        return Err(
            "the conversation was compacted after that message: summarize from a later one, or \
             compact all of it"
                .into(),
        );
    }
    let kept = context::normalize(&context::model_view(&transcript[..keep]));
    if !full.starts_with(&kept) {
        return Err("that message is not where a turn ended: pick another one".into());
    }
    let later = full[kept.len()..].to_vec();
    Ok((kept, later))
}

/// The compacted context: the handoff (summary and recent messages), the
/// acknowledgement, and the exchange in progress. It must shrink: past the
/// budget's target, tool outputs, then the recent messages, then the
/// summary are cut further — each once, never a loop on the model.
pub fn compose(
    summary: &str,
    view: &[Item],
    budget: &Budget,
    counter: &Counter,
    instructions: u64,
) -> Vec<Item> {
    let (earlier, tail) = split_tail(view);
    let mut summary = middle_out(summary, bytes_for(budget.summary));
    let mut recent = recent_messages(earlier, budget.recent, counter);
    let mut tail = trim_tail(tail, budget.tail, counter);
    let build = |summary: &str, recent: &[String], tail: &[Item]| {
        let mut context = vec![
            Item::User {
                text: handoff(summary, recent),
            },
            Item::Assistant { text: ACK.into() },
        ];
        context.extend_from_slice(tail);
        context
    };
    let size = |c: &[Item]| instructions + counter.items(c);
    let mut context = build(&summary, &recent, &tail);
    if size(&context) > budget.target {
        for item in &mut tail {
            if let Item::FunctionOutput { output, .. } = item {
                *output = middle_out(output, 1024);
            }
        }
        context = build(&summary, &recent, &tail);
    }
    if size(&context) > budget.target {
        recent.clear();
        context = build(&summary, &recent, &tail);
    }
    if size(&context) > budget.target {
        let over = size(&context) - budget.target;
        let keep = counter.text(&summary).saturating_sub(over).max(64);
        summary = middle_out(&summary, bytes_for(keep));
        context = build(&summary, &recent, &tail);
    }
    let over = size(&context).saturating_sub(budget.target);
    if over > 0
        && let Some(Item::User { text }) = context.get_mut(2)
    {
        // The message in progress itself is what is too big.
        let keep = counter.text(text).saturating_sub(over).max(64);
        *text = middle_out(text, bytes_for(keep));
    }
    context
}

impl Turn<'_> {
    /// Compacts the conversation now: asks the model for a handoff summary
    /// (trimming alone when that fails), commits the compaction record (a
    /// checkpoint `between_turns`) and starts a new chain from it. With
    /// `keep` (a checkpoint's transcript items), what the model saw up to
    /// there stays as it is and only what follows is summarized.
    pub(super) async fn compact(
        &mut self,
        reason: Reason,
        focus: &str,
        between_turns: bool,
        keep: u64,
    ) -> Result<(), Stop> {
        // Everything a compaction keeps, summarizes or trims to is well
        // within a window, so the view is read from its end to past two
        // (unless messages before `keep` stay: their place is counted from
        // the start).
        let (kept, view, cut) = if keep == 0 {
            let view = self.read_view(Some(2 * self.window.tokens)).await?;
            (Vec::new(), view.items, view.cut)
        } else {
            let transcript = self.group.transcript(&self.session).await?;
            let full = context::normalize(&context::model_view(&transcript));
            let (kept, later) = kept_and_later(&transcript, &full, keep).map_err(Stop::Refused)?;
            (kept, later, false)
        };
        let replaced = (kept.len() + view.len()) as u64;
        if view.is_empty() {
            // Automatically, nothing to do: the message alone is what is big.
            if reason != Reason::Manual {
                return Ok(());
            }
            return Err(Stop::Refused("there is nothing to compact yet".into()));
        }
        let counter = self.counter;
        // What is kept counts as fixed, like the instructions.
        let instructions = self.fixed_tokens() + counter.items(&kept);
        // Sizes compared as counted here (the fill may be the server's count).
        let counted = instructions + counter.items(&view);
        let before = match self.fill {
            Some(f) if !self.fill_floor => f.tokens,
            _ => counted,
        };
        let budget = Budget::new(self.window.tokens, self.threshold());
        let share = before * 100 / self.window.tokens.max(1);
        let size = if cut && before == counted {
            format!("more than {before} tokens, over {share}%")
        } else {
            format!("{before} tokens, {share}%")
        };
        self.emit(Event::Notice(format!(
            "compacting the conversation ({size} of the {}-token window)…",
            self.window.tokens
        )))
        .await;
        // A summary is asked for only when its request fits the window and
        // a handoff carrying it fits the target.
        let plan = summary_plan(self.window.tokens, &budget, &counter)
            .filter(|_| handoff_fits(&view, &budget, &counter, instructions));
        let summarized = match plan {
            Some(plan) => self.summarize(&view, focus, plan).await?,
            None => Err("the model's context window is too small for a summary request".into()),
        };
        let (summary, usage, trimmed_only) = match summarized {
            Ok((text, usage)) if !text.trim().is_empty() => (text, usage, false),
            Ok((_, usage)) => (no_summary("the model answered with nothing"), usage, true),
            Err(why) => (no_summary(&why), Usage::default(), true),
        };
        let mut context = kept.clone();
        context.extend(compose(&summary, &view, &budget, &counter, instructions));
        if let Some(Item::User { text }) = context.get_mut(kept.len()).filter(|_| !kept.is_empty())
        {
            // The messages above the handoff are still there.
            *text = text.replacen(EARLIER, FOLLOWING, 1);
        }
        let mut after = instructions + counter.items(&context);
        let mut trimmed_only = trimmed_only;
        let automatic = reason != Reason::Manual;
        if kept.is_empty()
            && (after > budget.target || (automatic && (trimmed_only || after >= counted)))
        {
            // A handoff over the target, or (automatically) one that says
            // nothing or does not shrink the context: trimming alone may do
            // better.
            let trimmed = trim_oldest(&view, budget.target, &counter, instructions);
            let size = instructions + counter.items(&trimmed);
            if size < after {
                (context, after, trimmed_only) = (trimmed, size, true);
            }
        }
        if let Some(point) = self
            .threshold()
            .filter(|_| !kept.is_empty() && after > budget.target)
        {
            // Kept word for word as asked, so not trimmed: said instead.
            self.emit(Event::Notice(format!(
                "the messages kept before the summary take {} tokens, so the context is still \
                 {after} tokens, over the {} a compaction aims for; at {point} tokens agentx \
                 compacts by itself, and that compaction summarizes everything (summarize from \
                 an earlier message to keep less)",
                counter.items(&kept),
                budget.target
            )))
            .await;
        }
        self.compactions += 1;
        if after >= counted && automatic {
            // Compacting would not make the context smaller: nothing to do
            // (not again in this turn); the request is sent as it is. (A
            // compaction asked for by hand is done: the user wants the handoff.)
            self.progressed = false;
            return Ok(());
        }
        // Progress: a tenth smaller at least.
        self.progressed = after.saturating_add(after / 10) < counted;
        self.compacted_to = Some(after);
        let record = Item::Compaction {
            summary: if trimmed_only { String::new() } else { summary },
            context,
            tokens_before: before,
            tokens_after: after,
            replaced,
            reason: reason.as_str().to_owned(),
        };
        let fill = Fill {
            tokens: after,
            estimated: true,
        };
        self.commit(Change {
            transcript: TranscriptChange {
                append: vec![record],
                unsent: Some(Vec::new()),
                response_id: Update::Clear,
                ..TranscriptChange::default()
            },
            turn: TurnChange {
                failed: Update::Clear,
                ..TurnChange::default()
            },
            accounting: AccountingChange {
                usage: Some(usage),
                context: Update::Set(fill),
            },
            checkpoint: between_turns.then(|| NewCheckpoint {
                note: Some(
                    Item::compaction_line(before, after)
                        .trim_matches([' ', '—'])
                        .to_owned(),
                ),
            }),
            ..Change::default()
        })
        .await?;
        self.usage.add(&usage);
        self.response_id = None;
        self.unsent.clear();
        self.fill = Some(fill);
        self.fill_floor = false;
        self.emit(Event::Compacted {
            tokens_before: before,
            tokens_after: after,
            reason,
            trimmed_only,
        })
        .await;
        Ok(())
    }

    /// The model's handoff summary of `view` and what it cost, or why there
    /// is none, asked with `plan`'s instructions and input budget. A summary
    /// request that overflows is cut to half once.
    async fn summarize(
        &mut self,
        view: &[Item],
        focus: &str,
        plan: (&'static str, u64),
    ) -> Result<Result<(String, Usage), String>, Stop> {
        let chat = self.spec.settings.kind == provider::Kind::Chat;
        let (instructions, mut input_budget) = plan;
        for _ in 0..2 {
            let rendered = render_for_summary(view, input_budget, &self.counter);
            let body = self.summary_body(instructions, &rendered, focus, chat);
            match self.call_fixed(&body, chat).await? {
                Ok(ModelReply { text, usage, .. }) => return Ok(Ok((text, usage))),
                Err(e) => match e.overflow() {
                    Some(overflow) => {
                        let sent =
                            self.counter.text(SUMMARY_INSTRUCTIONS) + self.counter.text(&rendered);
                        self.learn_window(overflow.window, sent);
                        input_budget = (input_budget / 2).min(self.window.tokens / 3);
                    }
                    None => return Ok(Err(describe(&e))),
                },
            }
        }
        Ok(Err(
            "the summary request did not fit the model's context window".into(),
        ))
    }

    /// The summary request: no tools, not stored, the conversation as text.
    fn summary_body(&self, instructions: &str, rendered: &str, focus: &str, chat: bool) -> Value {
        let mut ask = format!(
            "Here is the conversation so far, oldest first:\n\n<conversation>\n{rendered}\n\
             </conversation>\n\nWrite the handoff note now."
        );
        if !focus.trim().is_empty() {
            ask.push_str(&format!(
                "\n\nThe user asks the note to focus on: {}",
                focus.trim()
            ));
        }
        let settings = &self.spec.settings;
        let mut body = if chat {
            super::chat::request_body(
                settings,
                vec![
                    json!({"role": "system", "content": instructions}),
                    json!({"role": "user", "content": ask}),
                ],
            )
        } else {
            let mut body = super::responses::request_body(
                settings,
                instructions,
                None,
                vec![json!({"role": "user", "content": ask})],
            );
            body["store"] = json!(false);
            body
        };
        if let Some(map) = body.as_object_mut() {
            for key in ["tools", "tool_choice", "parallel_tool_calls"] {
                map.remove(key);
            }
        }
        body
    }
}

/// What stands for the summary when the model could not write one.
fn no_summary(why: &str) -> String {
    format!(
        "(No summary could be written: {why}. The earlier conversation was trimmed instead; \
         the user's recent messages below are what remains of it.)"
    )
}

fn describe(e: &ProviderError) -> String {
    let text = e.to_string();
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(t: &str) -> Item {
        Item::User { text: t.into() }
    }
    fn answer(t: &str) -> Item {
        Item::Assistant { text: t.into() }
    }
    fn call(id: &str) -> Item {
        Item::FunctionCall {
            call_id: id.into(),
            name: "shell".into(),
            arguments: r#"{"command":"ls"}"#.into(),
        }
    }
    fn output(id: &str, text: &str) -> Item {
        Item::FunctionOutput {
            call_id: id.into(),
            output: text.into(),
            images: Vec::new(),
        }
    }

    #[test]
    fn summarizing_from_a_message_keeps_what_came_before_and_refuses_bad_splits() {
        let transcript = vec![
            user("a"),
            answer("A"),
            user("b"),
            call("1"),
            output("1", "x"),
            answer("B"),
            user("c"),
            answer("C"),
        ];
        let full = context::normalize(&context::model_view(&transcript));
        let (kept, later) = kept_and_later(&transcript, &full, 2).unwrap();
        assert_eq!(kept, vec![user("a"), answer("A")]);
        assert_eq!(later.first(), Some(&user("b")));
        assert_eq!(kept.len() + later.len(), full.len());
        // Past the end, at the end, inside a call group.
        let past = kept_and_later(&transcript, &full, 9).unwrap_err();
        assert!(past.contains("has 8 items"), "{past}");
        let end = kept_and_later(&transcript, &full, 8).unwrap_err();
        assert!(end.contains("nothing follows"), "{end}");
        let inside = kept_and_later(&transcript, &full, 4).unwrap_err();
        assert!(inside.contains("not where a turn ended"), "{inside}");
        // A compaction after the message: its context replaced the message.
        let mut compacted = transcript.clone();
        compacted.push(Item::Compaction {
            summary: "s".into(),
            context: vec![user("summary")],
            tokens_before: 10,
            tokens_after: 1,
            replaced: 8,
            reason: "manual".into(),
        });
        let full = context::normalize(&context::model_view(&compacted));
        let after = kept_and_later(&compacted, &full, 2).unwrap_err();
        assert!(after.contains("compacted after that message"), "{after}");
    }

    #[test]
    fn the_exchange_in_progress_is_split_off_between_turns_nothing_is() {
        let done = vec![user("a"), answer("b")];
        assert_eq!(split_tail(&done), (&done[..], &[][..]));
        let going = vec![
            user("a"),
            answer("b"),
            user("c"),
            call("1"),
            output("1", "x"),
        ];
        let (earlier, tail) = split_tail(&going);
        assert_eq!(earlier.len(), 2);
        assert_eq!(tail[0], user("c"));
    }

    #[test]
    fn the_compacted_context_keeps_order_recent_messages_and_the_tail() {
        let counter = Counter::bytes();
        let view = vec![
            user("first request"),
            answer("ok"),
            user("no, use tabs not spaces"),
            answer("done"),
            user("now run the tests"),
            call("c1"),
            output("c1", &"test output line\n".repeat(20_000)),
        ];
        let budget = Budget::new(10_000, Some(8_500));
        let context = compose("SUMMARY TEXT", &view, &budget, &counter, 100);
        let Item::User { text } = &context[0] else {
            panic!("{context:?}")
        };
        assert!(text.starts_with(HANDOFF_HEADER));
        let (s, a, b) = (
            text.find("SUMMARY TEXT").unwrap(),
            text.find("first request").unwrap(),
            text.find("no, use tabs not spaces").unwrap(),
        );
        assert!(s < a && a < b, "{text}");
        assert!(matches!(context[1], Item::Assistant { .. }));
        assert_eq!(context[2], user("now run the tests"));
        assert_eq!(context[3], call("c1"));
        let Item::FunctionOutput { output, .. } = &context[4] else {
            panic!()
        };
        assert!(output.contains("bytes left out"));
        let after = 100 + counter.items(&context);
        assert!(after <= budget.target, "{after} > {}", budget.target);
        // Valid to send: every call answered, turns alternate.
        assert_eq!(context::normalize(&context), context);
    }

    #[test]
    fn a_summary_that_does_not_shrink_is_trimmed_under_the_target() {
        let counter = Counter::bytes();
        let view = vec![user(&"u".repeat(8000)), answer("a")];
        let budget = Budget::new(4000, Some(3400));
        let huge = "s".repeat(1_000_000);
        let context = compose(&huge, &view, &budget, &counter, 50);
        let after = 50 + counter.items(&context);
        assert!(after <= budget.target, "{after}");
        assert_eq!(context.len(), 2);
    }

    #[test]
    fn old_tool_groups_go_before_the_latest_one() {
        let counter = Counter::bytes();
        let tail = vec![
            user("go"),
            call("old"),
            output("old", &"o".repeat(40_000)),
            answer("next"),
            call("new1"),
            call("new2"),
            output("new1", "n1"),
            output("new2", "n2"),
        ];
        let kept = trim_tail(&tail, 150, &counter);
        let ids: Vec<&str> = kept
            .iter()
            .filter_map(|i| match i {
                Item::FunctionCall { call_id, .. } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["new1", "new2"]);
        assert_eq!(kept[0], user("go"));
    }

    #[test]
    fn the_summary_request_scales_to_the_window_or_is_not_made() {
        let counter = Counter::bytes();
        let big = Budget::new(100_000, None);
        let (instructions, input) = summary_plan(100_000, &big, &counter).unwrap();
        assert_eq!(instructions, SUMMARY_INSTRUCTIONS);
        assert_eq!(input, big.summary_input);
        // Too small for the full instructions: the short ones, and what
        // is left of the window for the conversation.
        let window = 400;
        let small = Budget::new(window, None);
        let (instructions, input) = summary_plan(window, &small, &counter).unwrap();
        assert_eq!(instructions, SHORT_SUMMARY_INSTRUCTIONS);
        assert!(
            counter.text(instructions) + SUMMARY_WRAPPER + input + small.summary <= window,
            "{input}"
        );
        assert!(summary_plan(200, &Budget::new(200, None), &counter).is_none());
        // A handoff that cannot fit the target is not asked for either.
        let view = vec![user("a question"), answer("an answer")];
        assert!(handoff_fits(&view, &big, &counter, 100));
        assert!(!handoff_fits(&view, &Budget::new(300, None), &counter, 100));
    }

    #[test]
    fn trimming_alone_drops_the_oldest_exchanges_and_keeps_what_fits() {
        let counter = Counter::bytes();
        let view: Vec<Item> = (0..10)
            .flat_map(|i| {
                [
                    user(&format!("message {i} {}", "x".repeat(100))),
                    answer("ok"),
                ]
            })
            .chain([
                user("the new one"),
                call("c"),
                output("c", &"o".repeat(5000)),
            ])
            .collect();
        let kept = trim_oldest(&view, 400, &counter, 20);
        assert!(20 + counter.items(&kept) <= 400, "{}", counter.items(&kept));
        assert!(matches!(&kept[0], Item::User { .. }));
        assert!(kept.contains(&user("the new one")));
        assert_eq!(context::normalize(&kept), kept);
        // Between turns, the newest exchanges that fit are kept whole.
        let done: Vec<Item> = view[..20].to_vec();
        let kept = trim_oldest(&done, 200, &counter, 20);
        assert_eq!(kept.last(), Some(&answer("ok")));
        assert!(kept.len() >= 2 && kept.len() < 20);
    }

    #[test]
    fn the_summary_request_leaves_the_oldest_out_first() {
        let counter = Counter::bytes();
        let view: Vec<Item> = (0..100)
            .flat_map(|i| {
                [
                    user(&format!("message {i} {}", "x".repeat(400))),
                    answer("ok"),
                ]
            })
            .collect();
        let text = render_for_summary(&view, 2000, &counter);
        assert!(text.starts_with("[… the "));
        assert!(text.contains("message 99"));
        assert!(!text.contains("message 0 "));
        assert!(counter.text(&text) <= 2100);
    }
}
