//! The REPL's slash commands: one method per command family, and the help
//! text that lists them.

use agentx_shared::proto::Resolve;
use agentx_shared::proto::open_session_request::Target;
use agentx_shared::sandbox::SandboxMode;

use super::{Chat, Flow, open};
use crate::choose;
use crate::commands::checkpoints::{self, Pick};
use crate::commands::{search, snapshots};
use crate::error::{CliError, CliResult};
use crate::render::diff::Format;
use crate::render::{self, human};
use crate::rpc::DiffOf;

const HELP: &str = "\
messages are sent to the model; lines starting with / are commands:
  /new              start a new conversation (the old one stays listed)
  /resume [N|ID]    pick a conversation (arrows or its number), or continue the Nth (1 = newest) or ID
  /fork [N]         continue in a new conversation from checkpoint N (default: the newest)
  /rename TITLE     give this conversation a title
  /search TEXT      search this folder's conversations (messages, tool output, titles)
  /status [verbose] this conversation's state (verbose: with the internals)
  /checkpoints      this conversation's checkpoints (1 = newest)
  /rollback [N]     restore a checkpoint (a picker without N); files are untouched
  /rollback undo    revert the last rollback
  /compact [FOCUS]  summarise the conversation so it fits the model's window (the transcript keeps all)
  /model [NAME]     show the model, or use NAME for this conversation (`default` goes back)
  /approvals [MODE] show the approval mode, or use ask, auto or never for this chat (ask also takes back [a]lways)
  /sandbox [MODE]   show the command sandbox, or use MODE (read-only, workspace-write, danger-full-access) from now on
  /retry            send the last failed or interrupted turn again
  /retry new-chain  ... starting a new server-side chain from the saved conversation
  /diff [N]         what message N (1 = the last) changed, as a diff
  /undo [force]     put back what the last message changed (shows the list first)
  /rewind [N|ID]    the rewind menu (Esc Esc too), or put the folder back as snapshot N had it
  /clear            delete this conversation's stored state and start fresh
  /help             this list (Tab completes commands and their arguments)
  /exit             leave (also Ctrl-D)
  !COMMAND          run COMMAND here in your terminal; its output goes with your next message";

impl Chat<'_> {
    /// Runs `/name args`.
    pub(super) async fn slash(&mut self, command: &str) -> CliResult<Flow> {
        let mut words = command.split_whitespace();
        let name = words.next().unwrap_or("");
        let arg = words.next();
        let rest = command.trim_start()[name.len()..].trim();
        match (name, arg) {
            ("exit" | "quit" | "q", _) => return Ok(Flow::Exit),
            ("help" | "?", _) => println!("{HELP}"),
            ("fork", n) => self.fork(n).await?,
            ("rename", None) => return Err(CliError::usage("/rename needs a title")),
            ("rename", Some(_)) => {
                let renamed = self.ctx.rpc().rename(&self.session.id, rest).await?;
                self.session.title = renamed.title.clone();
                println!("renamed: {}", crate::show::visible(&renamed.title));
            }
            ("search", None) => return Err(CliError::usage("/search needs some text")),
            ("search", Some(_)) => {
                let hits = search::search(self.ctx, rest, false, 20).await?;
                search::print_hits(self.ctx, &hits);
            }
            ("new", _) => {
                let opened = open(self.ctx, Target::New(true), &mut self.ui).await?;
                self.session = opened.session;
            }
            ("resume", None) => self.pick_and_resume().await?,
            ("resume", Some(n)) => {
                let target = choose::named(self.ctx, n).await?;
                self.resume(target).await?;
            }
            ("status", arg) => {
                let status = self.ctx.status(&self.session.id).await?;
                let verbose = matches!(arg, Some("verbose" | "-v" | "--verbose"));
                let mut local = self.ctx.local();
                if let Some(setup) = &mut local.setup {
                    setup.approval = super::mode_name(self.policy);
                }
                render::print(human::status(&local, &status, verbose));
                let mcp = crate::commands::mcp::states(self.ctx).await.ok();
                crate::commands::status::print_mcp(mcp.as_deref());
            }
            ("approvals", mode) => self.approvals(mode, words.next()).await?,
            ("checkpoints", _) => {
                let cps = checkpoints::list(self.ctx, &self.session.id).await?;
                checkpoints::print_list(&cps);
            }
            ("rollback", arg) => self.rollback_command(arg).await?,
            ("retry", arg) => self.retry_command(arg).await?,
            ("compact", _) => {
                Box::pin(self.turn(Some(rest), Resolve::Compact)).await?;
            }
            ("model", None) => {
                let status = self.ctx.status(&self.session.id).await?;
                render::print(human::model(&status));
            }
            ("model", Some(name)) => {
                let name = if name == "default" { "" } else { name };
                let status = super::set_model(self.ctx, &self.session.id, name).await?;
                render::print(human::model(&status));
            }
            ("sandbox", arg) => {
                if let Some(name) = arg {
                    let mode = SandboxMode::parse(name).ok_or_else(|| {
                        CliError::usage(format!(
                            "/sandbox takes {}, not {name:?}",
                            SandboxMode::NAMES
                        ))
                    })?;
                    self.ctx.choose_sandbox(mode);
                }
                let setup = self.ctx.setup()?;
                println!("sandbox: {}", setup.sandbox.line(setup.landlock_abi));
            }
            ("clear", _) => self.clear_command().await?,
            ("diff", arg) => {
                let n = match arg {
                    None => 1,
                    Some(n) => n.parse::<u32>().map_err(|_| {
                        CliError::usage(format!(
                            "/diff takes a message number (1 = the last), not {n:?}"
                        ))
                    })?,
                };
                let of = DiffOf::Message(n);
                let reply = self.ctx.rpc().diff(&self.session.id, &of).await?;
                crate::pager::print_diff(&reply, Format::Patch)?;
            }
            ("undo", arg) => {
                if let Some(other) = arg.filter(|a| *a != "force").or(words.next()) {
                    return Err(CliError::usage(format!(
                        "/undo takes nothing or `force`, not {other:?}"
                    )));
                }
                let force = arg == Some("force");
                let yes = !self.ui.interactive;
                let what = snapshots::Restore::Undo(self.session.id.clone());
                snapshots::restore(self.ctx, what, yes, force).await?;
            }
            ("rewind", None) if self.ui.interactive => self.rewind_menu().await?,
            ("rewind", None) => snapshots::rewind(self.ctx, None, false, false).await?,
            ("rewind", Some(n)) => {
                let yes = !self.ui.interactive;
                snapshots::restore(self.ctx, snapshots::rewind_target(n), yes, false).await?;
            }
            _ => {
                return Err(CliError::usage(format!(
                    "unknown command /{name}; /help lists the commands"
                )));
            }
        }
        Ok(Flow::Continue)
    }

    /// `/approvals [ask|auto|never]`: shows the mode, or sets it for this
    /// chat; `ask` also takes back an `[a]lways`.
    async fn approvals(&mut self, mode: Option<&str>, extra: Option<&str>) -> CliResult<()> {
        use agentx_shared::proto::ApprovalPolicy;
        if let Some(extra) = extra {
            return Err(CliError::usage(format!(
                "/approvals takes one mode (ask, auto or never), not {extra:?} too"
            )));
        }
        let policy = match mode {
            None => {
                let status = self.ctx.status(&self.session.id).await?;
                println!(
                    "approval {} — /approvals ask, auto or never changes it for this chat",
                    human::approval_mode(super::mode_name(self.policy), status.approve_all)
                );
                return Ok(());
            }
            Some("ask") => ApprovalPolicy::Ask,
            Some("auto") => ApprovalPolicy::Auto,
            Some("never") => ApprovalPolicy::Never,
            Some(other) => {
                return Err(CliError::usage(format!(
                    "/approvals takes ask, auto or never, not {other:?}"
                )));
            }
        };
        self.policy = policy;
        self.always &= policy == ApprovalPolicy::Ask;
        if policy == ApprovalPolicy::Ask && !self.session.id.is_empty() {
            let status = self.ctx.status(&self.session.id).await?;
            if status.approve_all {
                super::set_approve_all(self.ctx, &self.session.id, false).await?;
                self.always = false;
                println!("approval ask: [a]lways is taken back, every command is asked again");
                return Ok(());
            }
        }
        println!("approval {} for this chat", super::mode_name(policy));
        Ok(())
    }

    /// `/fork [N]`: continue in a new conversation from checkpoint N.
    async fn fork(&mut self, n: Option<&str>) -> CliResult<()> {
        let n = match n {
            None => 0,
            Some(n) => n.parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(|| {
                CliError::usage(format!(
                    "/fork takes a checkpoint number (1 is the newest), not {n:?}"
                ))
            })?,
        };
        let forked = self.ctx.rpc().fork(&self.session.id, n).await?;
        println!("{}", human::fork(&forked));
        let opened = open(self.ctx, Target::Id(forked.id), &mut self.ui).await?;
        self.session = opened.session;
        Ok(())
    }

    /// `/resume`: a picker at a terminal, else the numbered list.
    async fn pick_and_resume(&mut self) -> CliResult<()> {
        if let Some(target) =
            choose::pick(self.ctx, "/resume N or /resume ID continues one").await?
        {
            self.resume(target).await?;
        }
        Ok(())
    }

    /// Opens `target` here and settles what it left pending.
    async fn resume(&mut self, target: Target) -> CliResult<()> {
        let opened = open(self.ctx, target, &mut self.ui).await?;
        self.session = opened.session.clone();
        self.resolve_interrupted(opened).await
    }

    /// `/rollback [N|undo]`.
    async fn rollback_command(&mut self, arg: Option<&str>) -> CliResult<()> {
        match arg {
            None => self.rollback(Pick::Choose).await,
            Some("undo") => {
                let status = checkpoints::rollback(self.ctx, &self.session.id, Pick::Undo).await?;
                if let Some(status) = status {
                    println!("rollback undone: back at turn {}", status.turns);
                }
                Ok(())
            }
            Some(n) => {
                let index = n.parse::<u32>().map_err(|_| {
                    CliError::usage(format!("/rollback takes a number or `undo`, not {n:?}"))
                })?;
                self.rollback(Pick::Index(index)).await
            }
        }
    }

    /// `/retry [new-chain]`: the failed request again, or the interrupted message.
    async fn retry_command(&mut self, arg: Option<&str>) -> CliResult<()> {
        let status = self.ctx.status(&self.session.id).await?;
        let resolve = match arg {
            Some("new-chain") => Resolve::NewChain,
            Some(other) => {
                return Err(CliError::usage(format!(
                    "/retry takes nothing or `new-chain`, not {other:?}"
                )));
            }
            None if status.failed.is_some() => Resolve::RetryRequest,
            None => Resolve::RetryMessage,
        };
        self.turn(None, resolve).await
    }

    /// `/rewind` at a terminal (or Esc Esc): one menu of this conversation's
    /// messages, then what to put back — files and conversation, the
    /// conversation only, the files only — or to summarize from there. The
    /// message comes back into the prompt to edit and send again.
    async fn rewind_menu(&mut self) -> CliResult<()> {
        use snapshots::rewind_to::{self, Halves};
        let (_, messages, _) = rewind_to::listed(self.ctx, &self.session.id).await?;
        if messages.is_empty() {
            println!("no message of this conversation to rewind to yet");
            return Ok(());
        }
        let rows: Vec<String> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                format!(
                    "{:>3}  {}  {}",
                    i + 1,
                    crate::when::human(m.before.created_at.as_ref()),
                    crate::show::one_line(&m.prompt, 70)
                )
            })
            .collect();
        let Some(n) = crate::picker::pick(
            "rewind to before which message (arrows or a number, Enter, Esc = cancel)",
            &rows,
        )?
        else {
            println!(
                "nothing changed; `{}` (or `{}`) puts the folder back as a snapshot had it (`!agentx snapshots` lists them)",
                crate::ui::how("rewind N"),
                crate::ui::how("rewind ID")
            );
            return Ok(());
        };
        let choices = [
            "restore code and conversation".to_owned(),
            "restore the conversation only (files untouched)".to_owned(),
            "restore the code only (the conversation goes on)".to_owned(),
            "summarize from here (what the model sees from this message on becomes a summary; \
             files and transcript stay)"
                .to_owned(),
            "cancel".to_owned(),
        ];
        let halves = match crate::picker::pick("what to put back", &choices)? {
            Some(0) => Halves {
                code: true,
                conversation: true,
            },
            Some(1) => Halves {
                code: false,
                conversation: true,
            },
            Some(2) => Halves {
                code: true,
                conversation: false,
            },
            Some(3) => {
                // Earlier messages stay as they are; this one and what
                // follows are compacted.
                let Some(message) = messages.get(n) else {
                    return Ok(());
                };
                let keep = message
                    .checkpoint
                    .as_ref()
                    .map_or(0, |cp| cp.transcript_len);
                let prompt = crate::show::visible(&message.prompt).into_owned();
                self.turn_keeping(Some(""), Resolve::Compact, keep).await?;
                // Back into the prompt, as the restore choices do (unless
                // something was typed meanwhile).
                if self.ui.typed.partial.is_empty() {
                    self.ui.typed.partial = prompt;
                }
                return Ok(());
            }
            _ => {
                println!("nothing changed");
                return Ok(());
            }
        };
        let n = u32::try_from(n + 1).unwrap_or(u32::MAX);
        let done = rewind_to::rewind(
            self.ctx,
            &self.session.id,
            n,
            halves,
            (false, false, false),
            0,
        )
        .await?;
        if let Some(prompt) = done {
            // Back into the prompt, to edit and send again.
            self.ui.typed.partial = prompt;
        }
        Ok(())
    }

    /// `/clear`, confirmed at a terminal (saying when the remote copy goes too).
    pub(super) async fn clear_command(&mut self) -> CliResult<()> {
        let status = self.ctx.status(&self.session.id).await?;
        if self.ui.interactive && !crate::ui::confirm(&human::clear_question(&status))? {
            println!("nothing changed");
            return Ok(());
        }
        self.clear().await
    }
}
