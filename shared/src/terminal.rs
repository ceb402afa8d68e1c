//! Text from outside (model answers, tool output, titles, file names,
//! remote rows, server errors) made safe for a terminal: C0 (below 0x20),
//! DEL and C1 (0x80–0x9F) become visible escapes such as `\x1b`, so an OSC
//! 52 clipboard write, a window title or a cursor move is shown as text
//! instead of being obeyed. JSON output escapes them itself.

use std::borrow::Cow;

fn is_control(c: char) -> bool {
    c < '\u{20}' || ('\u{7f}'..='\u{9f}').contains(&c)
}

/// Whether `s` holds a control character (line breaks and tabs allowed with
/// `keep_lines`), read on the bytes: C0 and DEL are single bytes, C1 is
/// 0xC2 0x80–0x9F.
fn has_control(s: &str, keep_lines: bool) -> bool {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x20 {
            if !(keep_lines && (b == b'\n' || b == b'\t')) {
                return true;
            }
        } else if b == 0x7f
            || (b == 0xc2 && bytes.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)))
        {
            return true;
        }
        i += 1;
    }
    false
}

/// `s` with every control character shown as a visible escape; one line.
pub fn visible(s: &str) -> Cow<'_, str> {
    if !has_control(s, false) {
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
    if !has_control(s, true) {
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
