//! Diffs as `agentx diff` prints them: unified patches (colored on a
//! terminal), per-file counts, or the JSON document.

use serde_json::json;

use agentx_shared::proto::DiffReply;

/// How to print it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Patch,
    Stat,
    Json,
}

/// `reply` as asked; patches colored when `color`.
pub fn text(reply: &DiffReply, format: Format, color: bool) -> String {
    match format {
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
        Format::Patch => patch(reply, color),
    }
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
            let path = crate::show::visible(&f.path);
            out.push_str(&paint("1", &format!("{path} ({}): {what}", f.change)));
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
