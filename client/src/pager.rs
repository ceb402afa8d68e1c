//! Long output for people: a diff written to stdout, through a pager when
//! it is long and stdout is a terminal.

use std::io::{IsTerminal as _, Write as _};

use agentx_shared::proto::DiffReply;

use crate::error::{CliError, CliResult};
use crate::render::diff::{self, Format};

/// Prints `reply` as asked.
pub fn print_diff(reply: &DiffReply, format: Format) -> CliResult<()> {
    let text = diff::text(reply, format, std::io::stdout().is_terminal());
    show(&text, format == Format::Patch)
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
