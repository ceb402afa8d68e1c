//! The rendering edge for text that came from outside (titles, machine
//! names, folders, snippets, transcripts — remote rows and imported files
//! included): control characters never reach the terminal raw. C0 (below
//! 0x20), DEL and C1 (0x80–0x9F) become visible escapes such as `\x1b`, so
//! an OSC 52 clipboard write, a window title or a cursor move is shown as
//! text instead of being obeyed. `--json` output does not go through here:
//! JSON escapes them itself.

pub use agentx_shared::terminal::{terminal_text, visible, visible_lines};

/// The first `n` lines of `text`, then `… N more lines` when it had more.
pub fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= n {
        return text.trim_end_matches('\n').to_owned();
    }
    let more = lines.len() - n;
    format!(
        "{}\n  … {}",
        lines[..n].join("\n"),
        agentx_shared::plural::count(more, "more line")
    )
}

/// The first non-empty line of `text`, trimmed, at most `max` characters
/// (then `…`), shown safely.
pub fn one_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let taken: String = line.chars().take(max).collect();
    let mut out = visible(&taken).into_owned();
    if line.chars().count() > max {
        out.push('…');
    }
    out
}

/// Rows as aligned text: every column but the last padded to its widest
/// cell (in characters), those marked in `right` aligned right, two spaces
/// between columns. Relative times and counts of different widths stay in
/// line this way.
pub fn table(rows: &[Vec<String>], right: &[bool]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                let pad = widths[c].saturating_sub(cell.chars().count());
                let last = c + 1 == row.len();
                if right.get(c).copied().unwrap_or(false) {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    if !last {
                        line.push_str(&" ".repeat(pad));
                    }
                }
            }
            line
        })
        .collect()
}

#[cfg(test)]
mod table_tests {
    use super::*;

    #[test]
    fn columns_line_up_whatever_the_widths() {
        let rows = vec![
            vec!["1".into(), "just now".into(), "1 turn".into(), "a".into()],
            vec![
                "10".into(),
                "yesterday 14:02".into(),
                "12 turns".into(),
                "b".into(),
            ],
        ];
        let lines = table(&rows, &[true, false, true, false]);
        assert_eq!(lines[0], " 1  just now           1 turn  a");
        assert_eq!(lines[1], "10  yesterday 14:02  12 turns  b");
    }
}
