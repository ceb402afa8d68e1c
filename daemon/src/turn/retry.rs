//! One model call with its retries: bounded exponential backoff for
//! recoverable failures, and a new chain once when the server lost ours.

use std::time::Duration;

use serde_json::Value;

use agentx_shared::conversation::Item;

use super::provider::{self, ModelReply, ProviderError};
use super::{Event, Stop, Turn};
use super::{chat, context, responses};
use crate::store::Change;

impl Turn<'_> {
    /// One model call, starting a new chain once if the server lost ours,
    /// compacting once if the request did not fit the window, and retrying
    /// recoverable failures with bounded exponential backoff.
    pub(super) async fn call_model(&mut self, send: &[Item]) -> Result<ModelReply, Stop> {
        let mut failures = 0u32;
        let chat = self.spec.settings.kind == provider::Kind::Chat;
        self.settle_fill().await?;
        loop {
            let (body, chained) = self.request_body(send, chat).await?;
            match self.attempt(&body, chat, true).await? {
                Ok(reply) => {
                    self.note_accepted(&reply.usage);
                    return Ok(reply);
                }
                Err(e)
                    if (e.lost_response_id() || e.chain_missing_output())
                        && chained
                        && !self.rechained =>
                {
                    self.rechained = true;
                    self.response_id = None;
                    self.commit(Change::new_chain()).await?;
                    let why = if e.lost_response_id() {
                        "the server no longer knows this conversation's last response"
                    } else {
                        "the server is missing a tool output of this conversation's last response"
                    };
                    self.emit(Event::Notice(format!(
                        "{why}; starting a new chain from the saved conversation"
                    )))
                    .await;
                }
                Err(e) if self.probable_overflow(&e) => {
                    if self.silent_overflow {
                        return Err(Stop::Failed {
                            message: format!(
                                "{e} again after compacting: the model server ends its answer \
                                 before any output on requests larger than the last it answered \
                                 — probably more than its context window ({} tokens assumed); \
                                 set context_window for this model (or AGENTX_CONTEXT_WINDOW)",
                                self.window.tokens
                            ),
                            retryable: true,
                        });
                    }
                    self.silent_overflow = true;
                    self.emit(Event::Notice(format!(
                        "{e}, on a request larger than the last the server answered: probably \
                         more than the model's context window"
                    )))
                    .await;
                    self.on_overflow(None).await?;
                }
                Err(e) if e.overflow().is_some() => {
                    let window = e.overflow().and_then(|o| o.window);
                    self.on_overflow(window).await?;
                }
                Err(e) => self.pause_or_fail(e, &mut failures).await?,
            }
        }
    }

    /// A request whose body does not change between attempts (nothing to
    /// rechain), retried like any model call; a final error comes back.
    pub(super) async fn call_fixed(
        &mut self,
        body: &Value,
        chat: bool,
    ) -> Result<Result<ModelReply, ProviderError>, Stop> {
        let mut failures = 0u32;
        loop {
            match self.attempt(body, chat, false).await? {
                Ok(reply) => return Ok(Ok(reply)),
                Err(e) if e.retryable() && failures + 1 < MAX_ATTEMPTS => {
                    self.pause_or_fail(e, &mut failures).await?;
                }
                Err(e) => return Ok(Err(e)),
            }
        }
    }

    /// One attempt, ended by a cancel.
    async fn attempt(
        &self,
        body: &Value,
        chat: bool,
        show: bool,
    ) -> Result<Result<ModelReply, ProviderError>, Stop> {
        let mut cancel = self.io.cancel.clone();
        let call = self.send_once(body, chat, show);
        let span = tracing::debug_span!("model call");
        tokio::select! {
            r = tracing::Instrument::instrument(call, span) => Ok(r),
            _ = cancel.wait_for(|c| *c) => Err(Stop::Cancelled),
        }
    }

    /// After a failed attempt: waits (backoff, Retry-After) when another
    /// is worth it, else ends the call with the error.
    async fn pause_or_fail(&self, e: ProviderError, failures: &mut u32) -> Result<(), Stop> {
        if !(e.retryable() && *failures + 1 < MAX_ATTEMPTS) {
            return Err(Stop::Failed {
                message: describe(&e, *failures),
                retryable: e.retryable(),
            });
        }
        *failures += 1;
        let delay = backoff(self.spec.retry_base, *failures, e.retry_after());
        let reason = match e.retry_after() {
            Some(asked) if asked > delay => format!(
                "{e}; the server asked to wait {}s, waiting at most {}s",
                asked.as_secs(),
                delay.as_secs()
            ),
            _ => e.to_string(),
        };
        self.emit(Event::Retry {
            attempt: *failures + 1,
            max_attempts: MAX_ATTEMPTS,
            delay,
            reason,
        })
        .await;
        let mut cancel = self.io.cancel.clone();
        tokio::select! {
            () = tokio::time::sleep(delay) => Ok(()),
            _ = cancel.wait_for(|c| *c) => Err(Stop::Cancelled),
        }
    }

    /// The body of the next request, and whether it chains on a response id.
    /// Responses chains on the server's copy; Chat Completions (and a
    /// Responses chain that must restart) gets the whole conversation.
    async fn request_body(&self, send: &[Item], chat: bool) -> Result<(Value, bool), Stop> {
        let (previous, full) = match (&self.response_id, chat) {
            (Some(id), false) => (Some(id.clone()), None),
            _ => (None, Some(self.read_view(None).await?.items)),
        };
        let (settings, instructions) = (&self.spec.settings, &self.spec.instructions);
        let body = if chat {
            let items = full.unwrap_or_default();
            chat::request_body(settings, chat::messages(instructions, &items))
        } else {
            let input: Vec<Value> = match full {
                Some(items) => items.iter().map(context::to_input).collect(),
                None => send.iter().map(context::to_input).collect(),
            };
            responses::request_body(settings, instructions, previous.as_deref(), input)
        };
        let body = super::mcp_calls::with_tools(body, &self.mcp_tools, chat);
        Ok((body, previous.is_some()))
    }

    /// One attempt: the request sent through the turn's proxy settings,
    /// text deltas passed on as they come (when `show`).
    async fn send_once(
        &self,
        body: &Value,
        chat: bool,
        show: bool,
    ) -> Result<ModelReply, ProviderError> {
        let events = self.io.events.clone();
        let mut on_delta = move |delta: &str| {
            if show {
                let _ = events.try_send(Event::TextDelta(delta.to_owned()));
            }
        };
        let proxy = std::sync::Arc::new(provider::ProxyVars::of(
            &self.spec.env,
            &self.engine.own_proxy,
        ));
        let client = self.engine.clients.get(&proxy)?;
        let http = provider::Http { client, proxy };
        let (settings, limits) = (&self.spec.settings, &self.spec.limits);
        if chat {
            chat::call(&http, settings, body, limits, &mut on_delta).await
        } else {
            responses::call(&http, settings, body, limits, &mut on_delta).await
        }
    }
}

/// Attempts per model call, the first included.
const MAX_ATTEMPTS: u32 = 4;

/// `min(base · 2^(n-1), 16 · base)` with ±25 % jitter (base 0.5 s: at most
/// 8 s), or the server's Retry-After (capped at 60 s) when it gave one.
fn backoff(base: Duration, failures: u32, retry_after: Option<Duration>) -> Duration {
    if let Some(after) = retry_after {
        return after.min(Duration::from_secs(60));
    }
    let base = base.as_secs_f64();
    let base = (base * 2f64.powi(i32::try_from(failures).unwrap_or(8) - 1)).min(16.0 * base);
    use std::hash::{BuildHasher as _, RandomState};
    let jitter = (RandomState::new().hash_one(failures) % 1000) as f64 / 1000.0; // 0..1
    Duration::from_secs_f64(base * (0.75 + 0.5 * jitter))
}

fn describe(e: &ProviderError, retries: u32) -> String {
    if retries > 0 {
        format!("{e} (after {} attempts)", retries + 1)
    } else {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_within_jitter_and_caps_at_sixteen_bases() {
        let base = Duration::from_millis(500);
        for (failures, nominal) in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 8.0), (9, 8.0)] {
            let got = backoff(base, failures, None).as_secs_f64();
            assert!(
                (nominal * 0.75..=nominal * 1.25).contains(&got),
                "failure {failures}: {got} s, nominal {nominal} s"
            );
        }
    }

    #[test]
    fn a_servers_retry_after_wins_but_is_capped() {
        let base = Duration::from_millis(500);
        let after = Some(Duration::from_secs(3));
        assert_eq!(backoff(base, 1, after), Duration::from_secs(3));
        let huge = Some(Duration::from_secs(3600));
        assert_eq!(backoff(base, 1, huge), Duration::from_secs(60));
    }
}
