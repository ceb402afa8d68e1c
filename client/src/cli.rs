//! The `agentx` command line. Global flags are accepted before
//! or after the subcommand.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "agentx",
    version,
    about = "A coding agent for the terminal",
    long_about = "A coding agent for the terminal. Without a command, opens the chat for the \
                  current folder and resumes its latest conversation."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    /// Run PROMPT as a one-shot (same as `agentx exec PROMPT`).
    #[arg(short = 'p', value_name = "PROMPT")]
    pub prompt: Option<String>,

    /// Start (or continue) this folder's chat with PROMPT, as its first
    /// message. A single word is taken as a mistyped command, not a prompt.
    #[arg(value_name = "PROMPT")]
    pub message: Option<String>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Args, Clone)]
pub struct Global {
    /// Work in DIR instead of the current folder.
    #[arg(short = 'C', long = "cd", global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Use the profile ~/.agentx-NAME (AGENTX_HOME overrides it).
    #[arg(long, global = true, value_name = "NAME")]
    pub profile: Option<String>,

    /// Agent name: each folder keeps one conversation line per agent.
    #[arg(long, global = true, value_name = "NAME", default_value = "default")]
    pub agent: String,

    /// Tool approval policy. The chat asks by default; a one-shot runs
    /// nothing without --auto (it says so and exits 1), and asks with
    /// `ask` only at a terminal.
    #[arg(long, global = true, value_enum)]
    pub approval: Option<Approval>,

    /// Approve every tool call (same as --approval auto).
    #[arg(long, global = true)]
    pub auto: bool,

    /// The model for this run (wins over the conversation's /model and
    /// the configured one).
    #[arg(short = 'm', long, global = true, value_name = "NAME")]
    pub model: Option<String>,

    /// The sandbox tool commands run in (default: sandbox in config.toml,
    /// else workspace-write).
    #[arg(long, global = true, value_enum, value_name = "MODE")]
    pub sandbox: Option<Sandbox>,

    /// The chat only: when the last turn was interrupted and no terminal can
    /// ask, continue it, retry its message, or start a new conversation
    /// (a one-shot refuses it: it never has one).
    #[arg(long, global = true, value_enum, value_name = "ACTION")]
    pub on_pending: Option<OnPending>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnPending {
    Continue,
    Retry,
    New,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sandbox {
    /// No writes but a private temporary directory; no network.
    ReadOnly,
    /// Writes in the folder and a private temporary directory; no network.
    WorkspaceWrite,
    /// No sandbox: commands run with your full rights.
    DangerFullAccess,
}

impl From<Sandbox> for agentx_shared::sandbox::SandboxMode {
    fn from(s: Sandbox) -> Self {
        match s {
            Sandbox::ReadOnly => Self::ReadOnly,
            Sandbox::WorkspaceWrite => Self::WorkspaceWrite,
            Sandbox::DangerFullAccess => Self::DangerFullAccess,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Approval {
    Ask,
    Auto,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one prompt as a one-shot ('-' reads it from stdin).
    Exec {
        /// Print one JSON event per line.
        #[arg(long)]
        json: bool,
        /// End the turn after N model replies with tool calls (default:
        /// max_tool_steps in config.toml, else 200).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        max_steps: Option<u32>,
        /// What to ask ('-' reads it from stdin).
        prompt: String,
    },
    /// This folder's conversations, newest first.
    Sessions {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Draw forks under the conversation they came from.
        #[arg(long, conflicts_with = "json")]
        tree: bool,
        /// List at most N (default: all).
        #[arg(long, value_name = "N", conflicts_with = "tree")]
        limit: Option<u32>,
        /// With --limit: which page of N to list (1 = the newest).
        #[arg(long, value_name = "P", requires = "limit", value_parser = clap::value_parser!(u32).range(1..))]
        page: Option<u32>,
    },
    /// Push to the remote store now (remote_url), waiting at most --wait-ms.
    Sync {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How long to wait for the push (default 10000).
        #[arg(long, value_name = "MS")]
        wait_ms: Option<u32>,
    },
    /// Open the chat on conversation N (1 = newest) or ID.
    Resume {
        /// N (1 = newest, as `sessions` numbers them) or ID; none: pick one
        /// at a terminal, else the latest.
        #[arg(value_name = "N|ID")]
        target: Option<String>,
    },
    /// Open the chat on a new conversation.
    New,
    /// The current conversation's state.
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also the internals: the model server's URL and last response
        /// id, how snapshots watch the folder.
        #[arg(long, short)]
        verbose: bool,
    },
    /// This conversation's checkpoints, newest first.
    Checkpoints {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Restore checkpoint N (1 = newest); --undo reverts the last rollback.
    Rollback {
        /// Checkpoint N (1 = newest, as `checkpoints` numbers them); none:
        /// pick one at a terminal, else the newest.
        #[arg(value_name = "N")]
        index: Option<u32>,
        /// Revert the last rollback.
        #[arg(long, conflicts_with = "index")]
        undo: bool,
    },
    /// Settle the last failed or interrupted turn: send it again.
    Retry {
        /// Forget the server-side chain and resend the whole saved conversation.
        #[arg(long)]
        new_chain: bool,
    },
    /// Compact the conversation's context now: the model writes a handoff
    /// summary that replaces the history it sees (the transcript keeps all).
    Compact {
        /// What the summary should focus on.
        #[arg(long, value_name = "TEXT")]
        focus: Option<String>,
        /// Summarize only from message N on (1 = the latest, as `rewind
        /// --to` numbers them); what came before stays as it is.
        #[arg(long, value_name = "N")]
        from: Option<u32>,
    },
    /// Delete the current conversation's stored state and start fresh.
    Clear {
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// This folder's snapshots, newest first.
    Snapshots {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Snapshot the folder now.
    Snapshot {
        /// A label shown in `snapshots`.
        #[arg(long, value_name = "TEXT")]
        label: Option<String>,
    },
    /// What message N (1 = the last) of this conversation changed, as a
    /// unified diff; or, with --since, what changed since a snapshot.
    Diff {
        /// Message N of this conversation (1 = the last, the default).
        #[arg(value_name = "N", conflicts_with = "since")]
        message: Option<u32>,
        /// Snapshot N (1 = newest, as `snapshots` numbers them) or ID: what
        /// changed from it to the folder now.
        #[arg(long, value_name = "N|ID")]
        since: Option<String>,
        /// Per-file line counts instead of the diff.
        #[arg(long, conflicts_with = "json")]
        stat: bool,
        /// Per-file counts as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put back what the last message changed.
    Undo {
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
        /// Also overwrite paths changed since the message (conflicts).
        #[arg(long)]
        force: bool,
    },
    /// Put the folder back as snapshot N (or ID) had it.
    Rewind {
        /// Snapshot N (1 = newest, as `snapshots` numbers them) or its ID;
        /// none: list them.
        #[arg(value_name = "N|ID", conflicts_with = "to")]
        index: Option<String>,
        /// Go back to before message N of this conversation (1 = the last,
        /// as `diff N` numbers them): its files, its conversation, or both.
        #[arg(long, value_name = "N")]
        to: Option<u32>,
        /// With --to: put back the files only.
        #[arg(long, requires = "to", conflicts_with_all = ["conversation", "both"])]
        code: bool,
        /// With --to: roll back the conversation only (files untouched).
        #[arg(long, requires = "to", conflicts_with = "both")]
        conversation: bool,
        /// With --to: both the files and the conversation (the default).
        #[arg(long, requires = "to")]
        both: bool,
        /// With --to: print the outcome as JSON.
        #[arg(long, requires = "to")]
        json: bool,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
        /// Also overwrite paths changed since the snapshot was taken elsewhere (conflicts).
        #[arg(long)]
        force: bool,
    },
    /// Serve the web view on 127.0.0.1 and print its URL (with a token).
    Web {
        /// Print the URL only; do not open a browser.
        #[arg(long)]
        no_open: bool,
        /// Port to listen on (default: any free port).
        #[arg(long, value_name = "N")]
        port: Option<u16>,
    },
    /// Retained one-shot states (failed or interrupted).
    Oneshots {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        action: Option<OneshotsAction>,
    },
    /// Start a new conversation from checkpoint N (1 = newest, the default)
    /// of the current one; the original stays as it is.
    Fork {
        /// Checkpoint N (1 = newest, the default).
        #[arg(value_name = "N")]
        checkpoint: Option<u32>,
    },
    /// Give conversation N (1 = newest) or ID, or the current one, a title.
    Rename {
        /// [N|ID] TITLE
        #[arg(required = true, num_args = 1.., value_name = "[N|ID] TITLE")]
        words: Vec<String>,
    },
    /// Full-text search over messages, tool outputs and titles (this folder
    /// and agent; every folder with --all).
    Search {
        /// Words, and "phrases" in quotes, all of which a hit holds.
        #[arg(required = true, num_args = 1.., value_name = "TEXT")]
        text: Vec<String>,
        /// Search every folder and agent.
        #[arg(long)]
        all: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// At most this many hits (1 or more; 0 is a usage error).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
    },
    /// Write conversation N (1 = newest) or ID (default: the current one) as
    /// JSON (re-importable) or Markdown.
    Export {
        /// Conversation N (1 = newest) or ID; none: the current one.
        #[arg(value_name = "N|ID")]
        target: Option<String>,
        /// json (re-importable) or markdown (default: markdown for a FILE
        /// ending in .md, else json).
        #[arg(long, value_enum)]
        format: Option<ExportFormat>,
        /// Write to FILE instead of stdout (never overwrites).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Add a conversation from an `agentx export` JSON file ('-' reads stdin).
    Import {
        /// An `agentx export` JSON file ('-' reads stdin).
        file: PathBuf,
        /// The folder it belongs to here (default: the current folder or -C).
        #[arg(long, value_name = "DIR")]
        folder: Option<PathBuf>,
    },
    /// Print a shell completion script: bash, zsh, fish, elvish or powershell.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the agentx(1) man page (roff).
    Man,
    /// MCP servers agentd runs for this profile: list, get, add, remove.
    Mcp {
        #[command(subcommand)]
        action: McpAction,
    },
    /// Manage the agentd daemon.
    Daemon {
        #[command(subcommand)]
        action: DaemonAction,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Json,
    Markdown,
}

#[derive(Debug, Subcommand)]
pub enum McpAction {
    /// Every configured server: its state and tool count.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One server: its configuration and state.
    Get {
        /// The server's name, as config.toml names it.
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Add a server that runs COMMAND (stdio) to config.toml.
    Add {
        /// The new server's name: letters, digits, `_` and `-`.
        name: String,
        /// A variable for the server, KEY=VALUE (repeatable).
        #[arg(long, value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// The command and its arguments, after --.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Remove a server from config.toml.
    Remove {
        /// The server's name, as config.toml names it.
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum OneshotsAction {
    /// Print one retained one-shot: its state and transcript.
    Show {
        /// The one-shot's id, as `oneshots` lists them.
        id: String,
    },
    /// Remove every retained one-shot of this folder.
    Prune,
}

#[derive(Debug, Subcommand)]
pub enum DaemonAction {
    /// Start agentd (succeeds when it already runs).
    Start,
    /// Stop agentd gracefully.
    Stop,
    /// Whether agentd runs: pid, version, uptime, socket, profile. Never starts it.
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Stop agentd, then start it.
    Restart,
    /// Write systemd user units for agentd (socket activation).
    InstallSystemd {
        /// Write the units here instead of ~/.config/systemd/user.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// A command-line error as one line: what is wrong, clap's tip when it
/// has one (a similar command), and where the commands are listed.
pub fn usage_line(err: &clap::Error) -> String {
    let text = err.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("invalid command line");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let tip = lines
        .find_map(|l| l.strip_prefix("tip: "))
        .map(|t| format!("; {t}"))
        .unwrap_or_default();
    format!("{first}{tip} (agentx --help lists commands and options)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_argument_of_every_command_says_what_it_is() {
        use clap::CommandFactory as _;
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "agentx", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:?}");
    }

    #[test]
    fn global_flags_work_after_the_subcommand() {
        let cli = Cli::try_parse_from([
            "agentx",
            "status",
            "--json",
            "--profile",
            "w",
            "--agent",
            "a",
        ])
        .unwrap();
        assert_eq!(cli.global.profile.as_deref(), Some("w"));
        assert_eq!(cli.global.agent, "a");
        assert!(matches!(
            cli.command,
            Some(Command::Status { json: true, .. })
        ));
    }

    #[test]
    fn rename_takes_an_optional_target_before_the_title() {
        let cli = Cli::try_parse_from(["agentx", "rename", "2", "my title"]).unwrap();
        assert!(
            matches!(cli.command, Some(Command::Rename { words }) if words == ["2", "my title"])
        );
        assert!(Cli::try_parse_from(["agentx", "rename"]).is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }

    #[test]
    fn auto_is_accepted_after_the_subcommand() {
        let cli = Cli::try_parse_from(["agentx", "exec", "hi", "--auto"]).unwrap();
        assert!(cli.global.auto);
    }

    #[test]
    fn dash_p_is_a_one_shot() {
        let cli = Cli::try_parse_from(["agentx", "-p", "hello"]).unwrap();
        assert_eq!(cli.prompt.as_deref(), Some("hello"));
        assert!(cli.command.is_none());
    }
}
