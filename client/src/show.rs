//! The rendering edge for text that came from outside (titles, machine
//! names, folders, snippets, transcripts — remote rows and imported files
//! included): control characters never reach the terminal raw. C0 (below
//! 0x20), DEL and C1 (0x80–0x9F) become visible escapes such as `\x1b`, so
//! an OSC 52 clipboard write, a window title or a cursor move is shown as
//! text instead of being obeyed. `--json` output does not go through here:
//! JSON escapes them itself.

use std::borrow::Cow;

fn is_control(c: char) -> bool {
    c < '\u{20}' || ('\u{7f}'..='\u{9f}').contains(&c)
}

/// `s` with every control character shown as a visible escape; one line.
pub fn visible(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\t' => out.push(' '),
            c if is_control(c) => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Text for the terminal as it came (answers, tool output, messages):
/// line breaks and tabs stay, every other control character is shown as a
/// visible escape. The one sanitizer for text from outside that is printed
/// as prose rather than as a listing.
pub fn terminal_text(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| is_control(c) && c != '\n' && c != '\t') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            // A line ending in CR LF is a line ending.
            '\r' if chars.peek() == Some(&'\n') => {}
            c if is_control(c) => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Like [`visible`], but line breaks stay line breaks (for multi-line text
/// such as the exchanges shown when resuming).
pub fn visible_lines(s: &str) -> String {
    s.split('\n')
        .map(|line| visible(line.strip_suffix('\r').unwrap_or(line)))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_c0_del_and_c1_and_keeps_the_rest() {
        assert_eq!(visible("plain — ü"), "plain — ü");
        assert_eq!(
            visible("a\x1b]52;c;aGk=\x07b\x1b[2J\u{7f}\u{9b}c\td"),
            "a\\x1b]52;c;aGk=\\x07b\\x1b[2J\\x7f\\x9bc d"
        );
        assert_eq!(visible("one\ntwo"), "one\\x0atwo");
        assert_eq!(visible_lines("one\r\n\x1b[Htwo"), "one\n\\x1b[Htwo");
    }

    #[test]
    fn terminal_text_keeps_lines_and_tabs_and_shows_every_other_control() {
        assert_eq!(terminal_text("a\tb\nc\r\nd"), "a\tb\nc\nd");
        for (raw, shown) in [
            ("\x1b]52;c;aGk=\x07", "\\x1b]52;c;aGk=\\x07"),
            ("\x1b]0;title\x1b\\", "\\x1b]0;title\\x1b\\"),
            ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
            ("\x1bP+q544e\x1b\\", "\\x1bP+q544e\\x1b\\"),
            ("\u{9b}31m", "\\x9b31m"),
            ("over\rwrite", "over\\x0dwrite"),
            ("nul\0", "nul\\x00"),
        ] {
            assert_eq!(terminal_text(raw), shown, "{raw:?}");
        }
    }
}

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
