//! Tool calls within a turn: each call approved (or declined) under the
//! policy, run in the caller's environment, and committed before the next.

use agentx_shared::conversation::{CallState, Item, PendingCall, ToolImage};
use agentx_shared::sandbox::Enforcement;

use serde_json::Value;

use super::{Decision, Event, Input, Policy, Stop, Turn, context, head, shell};
use crate::store::{Change, SettingsChange, TranscriptChange, TurnChange};

impl Turn<'_> {
    /// Outputs for calls an earlier turn left open, without running anything.
    pub(super) fn answer_unrun_calls(pending: &[PendingCall]) -> Vec<Item> {
        pending
            .iter()
            .map(|c| {
                let finished = c.state == CallState::Finished;
                Item::FunctionOutput {
                    call_id: c.call_id.clone(),
                    output: if finished {
                        c.output.clone()
                    } else {
                        context::ABORTED.to_owned()
                    },
                    images: if finished {
                        c.images.clone()
                    } else {
                        Vec::new()
                    },
                }
            })
            .collect()
    }

    /// Runs (or declines) each call in order; their outputs are committed
    /// with what the next request sends, in one commit. With `resuming`, calls already finished keep their output and calls
    /// that were running when interrupted run again only on an explicit yes.
    pub(super) async fn run_tools(
        &mut self,
        mut pending: Vec<PendingCall>,
        resuming: bool,
    ) -> Result<(), Stop> {
        if let Some(mut gate) = self.io.tools_gate.take() {
            let mut cancel = self.io.cancel.clone();
            tokio::select! {
                // A dropped sender also opens the gate: the snapshot is over.
                _ = gate.wait_for(|open| *open) => {}
                _ = cancel.wait_for(|c| *c) => return Err(Stop::Cancelled),
            }
        }
        for i in 0..pending.len() {
            // A client gone or a cancel ends the turn between calls too,
            // whether or not the calls run.
            if self.cancelled() {
                return Err(Stop::Cancelled);
            }
            let call = pending[i].clone();
            if call.state == CallState::Finished {
                continue;
            }
            self.emit(Event::ToolCall {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            })
            .await;
            let was_running = resuming && call.state == CallState::Running;
            let Ran {
                output,
                images,
                exit_code,
                denied,
                timed_out,
                not_run,
            } = self.run_call(&mut pending, i, was_running).await?;
            pending[i].state = CallState::Finished;
            pending[i].exit_code = exit_code;
            pending[i].output = output.clone();
            pending[i].images = images;
            self.update_call(&pending, i).await?;
            self.emit(Event::ToolResult {
                call_id: call.call_id.clone(),
                exit_code,
                output,
                denied,
                timed_out,
                not_run,
            })
            .await;
        }
        let outputs: Vec<Item> = pending
            .iter()
            .map(|c| Item::FunctionOutput {
                call_id: c.call_id.clone(),
                output: c.output.clone(),
                images: c.images.clone(),
            })
            .collect();
        // The outputs join what the next request sends in the same commit
        // that ends the calls: a kill between two commits left them in the
        // transcript, no call pending and nothing to send, and the next
        // request chained to a reply whose calls the server never got.
        let mut unsent = self.unsent.clone();
        unsent.extend(outputs.iter().cloned());
        self.commit(Change {
            transcript: TranscriptChange {
                append: outputs,
                unsent: Some(unsent.clone()),
                ..TranscriptChange::default()
            },
            turn: TurnChange {
                calls: Some(Vec::new()),
                ..TurnChange::default()
            },
            ..Change::default()
        })
        .await?;
        crate::faults::point("tool-step-committed");
        self.unsent = unsent;
        Ok(())
    }

    /// Makes where call `i` stands durable: one append to the calls log,
    /// whatever the number of pending calls.
    pub(super) async fn update_call(&self, pending: &[PendingCall], i: usize) -> Result<(), Stop> {
        Ok(self
            .group
            .update_call(&self.session, i, pending[i].clone())
            .await?)
    }

    /// Runs one call if it may run (approved, well-formed); what it gave.
    /// A cancel (or agentd stopping) while it runs is recorded, then ends
    /// the turn.
    async fn run_call(
        &mut self,
        pending: &mut [PendingCall],
        i: usize,
        was_running: bool,
    ) -> Result<Ran, Stop> {
        let call = pending[i].clone();
        if call.name.starts_with(crate::mcp::PREFIX) {
            return self.run_mcp_call(pending, i, was_running).await;
        }
        let command = match parse_command(&call) {
            Err((message, reason)) => return Ok(Ran::not_run(message, reason)),
            Ok(command) => command,
        };
        let confine = self.confinement().await;
        if let Err(why) = &confine
            && self.spec.policy == Policy::Auto
        {
            let line = unconfinable(why);
            return Ok(Ran {
                denied: true,
                ..Ran::not_run(line.clone(), line)
            });
        }
        let approved = match (&confine, was_running) {
            (Err(why), true) => {
                let note = format!(
                    "it was running when the turn was interrupted, and would run unconfined: {why}"
                );
                self.approve_each(&call.call_id, &command, &note).await?
            }
            (Ok(_), true) => self.approve_rerun(&call.call_id, &command).await?,
            (Err(why), false) => {
                let note = format!("it would run unconfined: {why}");
                self.approve_each(&call.call_id, &command, &note).await?
            }
            (Ok(_), false) => self.approve(&call.call_id, &command).await?,
        };
        if !approved {
            return Ok(self.declined(was_running));
        }
        // Approved unconfined (the kernel could not confine it).
        let confine = confine.unwrap_or_default();
        pending[i].state = CallState::Running;
        self.update_call(pending, i).await?;
        let mut outcome = self.run_command(&call.call_id, &command, &confine).await;
        // Escalation is the user's alone: in ask mode a command the
        // sandbox seems to have denied may run again outside it.
        if let Ok(o) = &outcome
            && confine.rules.is_some()
            && self.spec.policy == Policy::Ask
            && !o.cancelled
            && o.exit_code != Some(0)
            && looks_denied(&o.output)
            && self.approve_each(&call.call_id, &command, ESCALATE).await?
        {
            let outside = shell::Confine {
                rules: None,
                tmpdir: confine.tmpdir.clone(),
            };
            outcome = self.run_command(&call.call_id, &command, &outside).await;
        }
        match outcome {
            Ok(o) if o.cancelled => {
                pending[i].state = CallState::Finished;
                pending[i].exit_code = o.exit_code;
                pending[i].output = o.for_model_when(self.client_gone());
                self.update_call(pending, i).await?;
                Err(Stop::Cancelled)
            }
            Ok(o) => Ok(Ran {
                output: o.for_model(),
                images: Vec::new(),
                exit_code: o.exit_code,
                denied: false,
                timed_out: o.timed_out,
                not_run: None,
            }),
            Err(e) => Ok(Ran::not_run(
                format!("could not start the command: {e}"),
                format!("could not start it: {e}"),
            )),
        }
    }

    /// Where this turn's commands run: the sandbox's rules and private
    /// `TMPDIR` (both made at the first command, kept for the turn); `Err`
    /// with why when the kernel cannot confine them as the mode says.
    async fn confinement(&mut self) -> Result<shell::Confine, String> {
        match self.spec.sandbox.enforcement(self.engine.sandbox_abi) {
            Enforcement::Unconfined => return Ok(shell::Confine::default()),
            Enforcement::Unavailable(why) => return Err(why),
            Enforcement::Enforced => {}
        }
        if let Some((_, confine)) = &self.tmpdir {
            return Ok(confine.clone());
        }
        let (sandbox, folder, profile, tmpdirs) = (
            self.spec.sandbox.clone(),
            self.spec.folder.clone(),
            self.engine.profile.clone(),
            std::sync::Arc::clone(&self.engine.tmpdirs),
        );
        // Lists and opens what the rules name: off the runtime's workers.
        let (made, confine) = crate::priority::blocking_background(move || {
            let made = tmpdirs
                .make()
                .map_err(|e| format!("its private TMPDIR could not be made ({e})"))?;
            let tmpdir = made.path().to_path_buf();
            let rules = shell::sandbox::Rules::new(&sandbox, &folder, &tmpdir, &profile)
                .map(|r| r.ruleset())
                .transpose()
                .map_err(|e| format!("its Landlock rules could not be made ({e})"))?;
            let confine = shell::Confine {
                rules,
                tmpdir: Some(tmpdir),
            };
            Ok::<_, String>((made, confine))
        })
        .await
        .map_err(|e| format!("its rules could not be made ({e})"))??;
        self.tmpdir = Some((made, confine.clone()));
        Ok(confine)
    }

    /// Runs `command` as `confine` says, its output shown as it comes.
    async fn run_command(
        &self,
        call_id: &str,
        command: &str,
        confine: &shell::Confine,
    ) -> std::io::Result<shell::Outcome> {
        // Its output goes to the client as it comes, for display only:
        // never waiting on a slow or gone client (see `live_tap`).
        let (tap, taken) = super::live_tap::tap();
        let forward = crate::priority::spawn_background(super::live_tap::forward(
            call_id.to_owned(),
            taken,
            self.io.events.clone(),
            self.io.live.clone(),
        ));
        let outcome = self
            .engine
            .tools
            .run_with(
                command,
                &self.spec.folder,
                &self.spec.tool_env,
                confine,
                (self.spec.shell_timeout, self.io.cancel.clone()),
                Some(tap),
            )
            .await;
        // Every piece shown before the result.
        let _ = forward.await;
        outcome
    }

    /// What a call not approved gives: declined by the user, or never
    /// asked because this turn's policy lets nothing run (no one to ask).
    pub(super) fn declined(&self, was_running: bool) -> Ran {
        self.declined_under(self.spec.policy, was_running)
    }

    /// [`Self::declined`] under `policy`.
    pub(super) fn declined_under(&self, policy: Policy, was_running: bool) -> Ran {
        let (output, reason) = if was_running {
            (
                "interrupted while running and not run again (it may have partly run)",
                "",
            )
        } else if policy == Policy::Never {
            (
                "not run: commands need approval, and this turn's approval policy is never \
                 (nobody was asked); the user can allow commands with --auto",
                NEEDS_APPROVAL,
            )
        } else {
            ("the user declined to run this command", "")
        };
        Ran {
            denied: true,
            ..Ran::not_run(output.to_owned(), reason.to_owned())
        }
    }

    /// A call that was running when the turn died may have had effects:
    /// only an explicit answer from the user runs it again.
    pub(super) async fn approve_rerun(
        &mut self,
        call_id: &str,
        command: &str,
    ) -> Result<bool, Stop> {
        let note = "it was running when the turn was interrupted: run it again?";
        self.approve_each(call_id, command, note).await
    }

    /// Asks about this one command whatever "always" said before (ask mode
    /// only; other policies: no), with `note` after it.
    async fn approve_each(
        &mut self,
        call_id: &str,
        command: &str,
        note: &str,
    ) -> Result<bool, Stop> {
        if self.spec.policy != Policy::Ask {
            return Ok(false);
        }
        let saved = self.approve_all;
        self.approve_all = false;
        let answer = self.ask(call_id, command, note).await;
        self.approve_all = saved;
        answer
    }

    /// Whether to run a command under the policy, asking the client if needed.
    pub(super) async fn approve(&mut self, call_id: &str, command: &str) -> Result<bool, Stop> {
        self.approve_under(self.spec.policy, call_id, command).await
    }

    /// Whether to run a command under `policy`, asking the client if needed.
    pub(super) async fn approve_under(
        &mut self,
        policy: Policy,
        call_id: &str,
        command: &str,
    ) -> Result<bool, Stop> {
        match policy {
            Policy::Auto => return Ok(true),
            Policy::Never => return Ok(false),
            Policy::Ask if self.approve_all => return Ok(true),
            Policy::Ask => {}
        }
        self.ask(call_id, command, "").await
    }

    /// Asks the client whether to run `command`, telling `note` too.
    async fn ask(&mut self, call_id: &str, command: &str, note: &str) -> Result<bool, Stop> {
        // Answers sent before this question are not answers to it.
        while self.io.inputs.try_recv().is_ok() {}
        self.emit(Event::ApprovalRequest {
            call_id: call_id.to_owned(),
            command: if note.is_empty() {
                command.to_owned()
            } else {
                format!("{command}   ({note})")
            },
            note: note.to_owned(),
        })
        .await;
        let mut cancel = self.io.cancel.clone();
        loop {
            let input = tokio::select! {
                input = self.io.inputs.recv() => input,
                _ = cancel.wait_for(|c| *c) => return Err(Stop::Cancelled),
            };
            match input {
                None => return Err(Stop::Cancelled),
                Some(Input::Approval {
                    call_id: id,
                    decision,
                }) if id == call_id => {
                    return match decision {
                        Decision::Yes => Ok(true),
                        Decision::No => Ok(false),
                        Decision::Always => {
                            self.approve_all = true;
                            self.commit(Change::settings(SettingsChange {
                                approve_all: Some(true),
                                ..SettingsChange::default()
                            }))
                            .await?;
                            Ok(true)
                        }
                    };
                }
                Some(Input::Approval { .. }) => {} // an answer to another call: ignore
            }
        }
    }
}

/// Why a call did not run under approval policy `never` (the user sees it;
/// a one-shot that meets it exits non-zero).
const NEEDS_APPROVAL: &str =
    "needs approval (approval policy never): run with --auto or --approval auto to allow commands";

/// The one line a command the kernel cannot confine gets in auto mode
/// (the model and the user see it).
fn unconfinable(why: &str) -> String {
    format!(
        "not run: the sandbox cannot confine commands here ({why}); run agentx with \
         --sandbox danger-full-access to let commands run unconfined"
    )
}

/// The question after a sandboxed command seems to have been denied.
const ESCALATE: &str = "the sandbox denied it: run it again outside the sandbox?";

/// Whether a failed command's output reads like the sandbox refused it.
fn looks_denied(output: &str) -> bool {
    ["Permission denied", "Operation not permitted"]
        .iter()
        .any(|w| output.contains(w))
}

/// What one call gave: its output for the model and how it went.
pub(super) struct Ran {
    pub(super) output: String,
    /// Images the tool returned (MCP image content).
    pub(super) images: Vec<ToolImage>,
    pub(super) exit_code: Option<i32>,
    pub(super) denied: bool,
    pub(super) timed_out: bool,
    /// Why it never ran (bad arguments, could not start).
    pub(super) not_run: Option<String>,
}

impl Ran {
    /// A call that did not run: `output` for the model, `reason` for the
    /// user (empty: none shown).
    pub(super) fn not_run(output: String, reason: String) -> Self {
        Self {
            output,
            images: Vec::new(),
            exit_code: None,
            denied: false,
            timed_out: false,
            not_run: Some(reason).filter(|r| !r.is_empty()),
        }
    }
}

/// The command of a `shell` call, or why it cannot run: the output for
/// the model and a short reason for the user.
fn parse_command(call: &PendingCall) -> Result<String, (String, String)> {
    if let Some(why) = super::provider::over_cap(&call.name, &call.call_id) {
        return Err((format!("this call was not run: {why}"), why));
    }
    if call.name != shell::NAME {
        return Err((
            format!("unknown tool {:?}: the only tool is `shell`", call.name),
            format!("unknown tool {:?}", head(&call.name, 100)),
        ));
    }
    let args: Value = serde_json::from_str(&call.arguments).map_err(|e| {
        (
            format!("the arguments are not valid JSON: {e}"),
            format!("arguments were not valid JSON ({e})"),
        )
    })?;
    args["command"]
        .as_str()
        .filter(|c| !c.trim().is_empty())
        .map(str::to_owned)
        .ok_or_else(|| {
            (
                "missing `command` argument".to_owned(),
                "no `command` in the arguments".to_owned(),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> PendingCall {
        PendingCall {
            call_id: "c1".into(),
            name: name.into(),
            arguments: arguments.into(),
            state: CallState::NotStarted,
            exit_code: None,
            output: String::new(),
            images: Vec::new(),
        }
    }

    #[test]
    fn a_shell_call_yields_its_command() {
        let got = parse_command(&call("shell", r#"{"command":"ls -la"}"#));
        assert_eq!(got, Ok("ls -la".to_owned()));
    }

    #[test]
    fn calls_that_cannot_run_say_why_to_the_model_and_the_user() {
        let unknown = parse_command(&call("python", "{}")).unwrap_err();
        assert!(
            unknown.0.contains("the only tool is `shell`"),
            "{unknown:?}"
        );
        let bad = parse_command(&call("shell", "{not json")).unwrap_err();
        assert!(
            bad.0.starts_with("the arguments are not valid JSON"),
            "{bad:?}"
        );
        for args in [r#"{}"#, r#"{"command":"   "}"#, r#"{"command":3}"#] {
            let missing = parse_command(&call("shell", args)).unwrap_err();
            assert_eq!(missing.0, "missing `command` argument", "{args}");
        }
        // A hostile tool name is cut for the user's line.
        let long = "x".repeat(10_000);
        let (_, shown) = parse_command(&call(&long, "{}")).unwrap_err();
        assert!(shown.len() < 200, "{}", shown.len());
    }
}
