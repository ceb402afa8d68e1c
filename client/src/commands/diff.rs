//! `agentx diff` and `/diff`: what a message changed (or what changed since a snapshot),
//! as unified diffs colored on a terminal and paged when long, or per-file counts.

use std::io::{IsTerminal as _, Write as _};

use serde_json::json;

use agentx_shared::proto::snapshots_client::SnapshotsClient;
use agentx_shared::proto::{DiffReply, DiffRequest, diff_request};

use crate::context::Ctx;
use crate::error::{CliError, CliResult};

/// What to compare.
pub enum DiffOf {
    /// Message N of the conversation (1 = its last).
    Message(u32),
    /// Snapshot N (1 = newest) or ID against the folder now.
    Since(String),
}

/// How to print it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Patch,
    Stat,
    Json,
}

/// Asks agentd for the diff.
pub async fn fetch(ctx: &Ctx, session_id: &str, of: &DiffOf) -> CliResult<DiffReply> {
    let (target, message) = match of {
        DiffOf::Message(n) => (diff_request::Target::SessionId(session_id.to_owned()), *n),
        DiffOf::Since(s) => match s.parse::<u32>() {
            Ok(n) => (diff_request::Target::SinceIndex(n), 0),
            Err(_) => (diff_request::Target::SinceId(s.clone()), 0),
        },
    };
    Ok(SnapshotsClient::new(ctx.channel())
        .diff(DiffRequest {
            scope: ctx.scope(),
            target: Some(target),
            message,
        })
        .await
        .map_err(|s| CliError::from_status("diffing", &s))?
        .into_inner())
}

/// `agentx diff`: the current conversation's message, or since a snapshot.
pub async fn diff(ctx: &Ctx, of: DiffOf, format: Format) -> CliResult<()> {
    let status = crate::commands::sessions::fetch_status(ctx, "").await?;
    if status.session_id.is_empty() && matches!(of, DiffOf::Message(_)) {
        return Err(CliError::failed(
            "no conversation here yet: nothing to diff",
        ));
    }
    let reply = fetch(ctx, &status.session_id, &of).await?;
    print(&reply, format)
}

/// Prints `reply` as asked.
pub fn print(reply: &DiffReply, format: Format) -> CliResult<()> {
    let text = match format {
        Format::Json => {
            let files: Vec<_> = reply
                .files
                .iter()
                .map(|f| {
                    json!({"path": f.path, "change": f.change, "added": f.added_lines,
                        "removed": f.removed_lines, "binary": f.binary, "too_big": f.too_big})
                })
                .collect();
            format!(
                "{}\n",
                json!({"from": reply.from, "to": reply.to, "files": files})
            )
        }
        Format::Stat => stat(reply),
        Format::Patch => patch(reply, std::io::stdout().is_terminal()),
    };
    show(&text, format == Format::Patch)
}

/// One line per file, `path | +A -R`, and the totals.
fn stat(reply: &DiffReply) -> String {
    let width = reply
        .files
        .iter()
        .map(|f| f.path.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let (mut added, mut removed) = (0, 0);
    for f in &reply.files {
        let counts = if f.binary {
            "binary".to_owned()
        } else if f.too_big {
            "too big to diff".to_owned()
        } else {
            format!("+{} -{}", f.added_lines, f.removed_lines)
        };
        out.push_str(&format!("{:<width$} | {counts} ({})\n", f.path, f.change));
        added += f.added_lines;
        removed += f.removed_lines;
    }
    out.push_str(&format!(
        "{} changed, +{added} -{removed}\n",
        agentx_shared::plural::count(reply.files.len(), "file")
    ));
    out
}

/// The unified diffs, colored when `color`; binary and big files as one line.
fn patch(reply: &DiffReply, color: bool) -> String {
    if reply.files.is_empty() {
        return format!("no changes ({} → {})\n", reply.from, reply.to);
    }
    let paint = |code: &str, line: &str| {
        if color {
            format!("\x1b[{code}m{line}\x1b[0m\n")
        } else {
            format!("{line}\n")
        }
    };
    let mut out = String::new();
    for f in &reply.files {
        if f.binary || f.too_big || f.unified.is_empty() {
            let what = if f.binary {
                "binary file"
            } else if f.too_big {
                "over 1 MiB, not diffed"
            } else {
                "permissions changed"
            };
            out.push_str(&paint("1", &format!("{} ({}): {what}", f.path, f.change)));
            continue;
        }
        for line in f.unified.lines() {
            let code = if line.starts_with("+++") || line.starts_with("---") {
                "1"
            } else if line.starts_with('+') {
                "32"
            } else if line.starts_with('-') {
                "31"
            } else if line.starts_with("@@") {
                "36"
            } else {
                ""
            };
            if code.is_empty() {
                out.push_str(line);
                out.push('\n');
            } else {
                out.push_str(&paint(code, &crate::show::visible(line)));
            }
        }
    }
    out
}

/// Writes `text` to stdout, through a pager when it is long and stdout is
/// a terminal (`$PAGER`, else `less -R`); a reader gone away is no error.
fn show(text: &str, page: bool) -> CliResult<()> {
    let rows = terminal_rows().unwrap_or(24);
    if page && std::io::stdout().is_terminal() && text.lines().count() > rows {
        let pager = std::env::var("PAGER")
            .ok()
            .filter(|p| !p.trim().is_empty())
            .unwrap_or_else(|| "less -R".to_owned());
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg(&pager)
            .stdin(std::process::Stdio::piped())
            .spawn();
        if let Ok(mut child) = child {
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(text.as_bytes());
            }
            let _ = child.wait();
            return Ok(());
        }
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::failed(format!("writing the diff: {e}")))
        }
        _ => Ok(()),
    }
}

/// The terminal's height.
fn terminal_rows() -> Option<usize> {
    console::Term::stdout()
        .size_checked()
        .map(|(rows, _)| usize::from(rows))
}
