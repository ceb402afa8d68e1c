//! A check over the workspace's string literals: a message continued on the
//! next source line without `\` keeps the newline and the indentation.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use proc_macro2::{TokenStream, TokenTree};

/// The crates whose literals reach people (messages, help, rendering).
const CRATES: [&str; 3] = ["client/src", "shared/src", "daemon/src"];

/// Literals that are SQL, where a newline and indentation mean nothing.
const SQL: [&str; 8] = [
    "SELECT", "INSERT", "WITH", "CREATE", "ALTER", "DROP", "DO", "SET",
];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The string literals of a token stream, as written in the source.
fn literals(stream: TokenStream, out: &mut Vec<String>) {
    for tree in stream {
        match tree {
            TokenTree::Group(group) => literals(group.stream(), out),
            TokenTree::Literal(lit) => {
                let text = lit.to_string();
                if text.starts_with('"') || text.starts_with("b\"") {
                    out.push(text);
                }
            }
            _ => {}
        }
    }
}

/// Whether a (non-raw) literal holds a newline that the source line ended
/// without `\`, followed by indentation: the lost-continuation mistake.
/// A literal opened with `"\` and a newline is a deliberate block of lines.
fn lost_continuation(literal: &str) -> bool {
    let body = literal.trim_start_matches('b').trim_start_matches('"');
    if body.starts_with("\\\n") {
        return false;
    }
    let first_word = body.split_whitespace().next().unwrap_or("");
    if SQL.contains(&first_word) {
        return false;
    }
    let bytes = body.as_bytes();
    let mut escaped = false;
    for (i, &byte) in bytes.iter().enumerate() {
        if byte == b'\n' && !escaped && matches!(bytes.get(i + 1), Some(b' ' | b'\t')) {
            return true;
        }
        escaped = byte == b'\\' && !escaped;
    }
    false
}

/// The offending literals of one source text.
fn offenders(source: &str) -> Result<Vec<String>, String> {
    let stream = TokenStream::from_str(source).map_err(|err| err.to_string())?;
    let mut found = Vec::new();
    literals(stream, &mut found);
    found.retain(|lit| lost_continuation(lit));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spots_a_continuation_without_backslash() {
        let bad = "fn f() { g(\"is shown to\n         the model\"); }";
        assert_eq!(offenders(bad).unwrap().len(), 1);
        let good = "fn f() { g(\"is shown to \\\n         the model\"); }";
        assert!(offenders(good).unwrap().is_empty());
        let block = "const HELP: &str = \"\\\nlines:\n  /new   start\";";
        assert!(offenders(block).unwrap().is_empty());
    }

    /// Would have caught the non-UTF-8 folder refusal: no
    /// literal in the workspace continues a line without `\`.
    #[test]
    fn no_message_continues_a_line_without_backslash() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        for dir in CRATES {
            sources(&root.join(dir), &mut files);
        }
        assert!(files.len() > 50, "found only {} sources", files.len());
        let mut bad = Vec::new();
        for file in files {
            let source = std::fs::read_to_string(&file).unwrap();
            for lit in offenders(&source).unwrap() {
                bad.push(format!("{}: {lit}", file.display()));
            }
        }
        assert!(
            bad.is_empty(),
            "a string continues without `\\`:\n{}",
            bad.join("\n")
        );
    }
}
