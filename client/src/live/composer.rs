//! What the user types while a turn runs: the text being composed (several
//! lines, a cursor) and the queue of messages sent when the turn ends.

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// What a key asks of the running turn.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    /// Nothing beyond redrawing.
    Nothing,
    /// Esc or Ctrl-C: interrupt the turn.
    Interrupt,
}

/// The composer's text, its cursor and the queued messages.
#[derive(Debug, Default)]
pub struct Composer {
    /// The text being typed (lines separated by `\n`).
    pub text: String,
    /// Byte offset of the cursor in `text` (always on a char boundary).
    pub cursor: usize,
    /// Messages ended with Enter, oldest first: sent when the turn ends.
    pub queued: Vec<String>,
    /// Ctrl-D on an empty composer: leave once the turn is done.
    pub eof: bool,
}

impl Composer {
    /// A composer holding `text` (typed before), the cursor at its end.
    pub fn with_text(text: String) -> Self {
        Self {
            cursor: text.len(),
            text,
            ..Self::default()
        }
    }

    /// Applies one terminal event.
    pub fn event(&mut self, event: &Event) -> Asked {
        match event {
            Event::Key(key) if key.kind != KeyEventKind::Release => self.key(key),
            Event::Paste(text) => {
                self.insert(&text.replace("\r\n", "\n").replace('\r', "\n"));
                Asked::Nothing
            }
            _ => Asked::Nothing,
        }
    }

    fn key(&mut self, key: &KeyEvent) -> Asked {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        let shift = key.modifiers.contains(KeyModifiers::SHIFT);
        match key.code {
            KeyCode::Esc => return Asked::Interrupt,
            KeyCode::Char('c') if ctrl => return Asked::Interrupt,
            KeyCode::Char('d') if ctrl && self.text.is_empty() => self.eof = true,
            // Shift-Enter (where the terminal tells it apart), Alt-Enter
            // and Ctrl-J insert a newline.
            KeyCode::Enter if shift || alt || ctrl => self.insert("\n"),
            KeyCode::Char('j') if ctrl => self.insert("\n"),
            KeyCode::Enter => self.enter(),
            KeyCode::Char('u') if ctrl => {
                self.text.clear();
                self.cursor = 0;
            }
            KeyCode::Char('a') if ctrl => self.cursor = self.line_start(),
            KeyCode::Char('e') if ctrl => self.cursor = self.line_end(),
            // Ctrl-X: the newest queued message is dropped.
            KeyCode::Char('x') if ctrl => {
                self.queued.pop();
            }
            KeyCode::Char(c) if !ctrl && !alt => self.insert(c.encode_utf8(&mut [0; 4])),
            KeyCode::Tab => self.insert("\t"),
            KeyCode::Backspace => {
                if let Some(c) = self.text[..self.cursor].chars().next_back() {
                    self.cursor -= c.len_utf8();
                    self.text.remove(self.cursor);
                }
            }
            KeyCode::Delete if self.cursor < self.text.len() => {
                self.text.remove(self.cursor);
            }
            KeyCode::Left => {
                if let Some(c) = self.text[..self.cursor].chars().next_back() {
                    self.cursor -= c.len_utf8();
                }
            }
            KeyCode::Right => {
                if let Some(c) = self.text[self.cursor..].chars().next() {
                    self.cursor += c.len_utf8();
                }
            }
            KeyCode::Home => self.cursor = self.line_start(),
            KeyCode::End => self.cursor = self.line_end(),
            // Up on an empty composer takes the newest queued message back
            // to edit: it leaves the queue (Enter queues it again).
            KeyCode::Up if self.text.is_empty() => {
                if let Some(last) = self.queued.pop() {
                    self.cursor = last.len();
                    self.text = last;
                }
            }
            _ => {}
        }
        Asked::Nothing
    }

    /// Enter: a trailing `\` asks for a newline; else the text is queued.
    fn enter(&mut self) {
        if self.text[..self.cursor].ends_with('\\') {
            self.cursor -= 1;
            self.text.remove(self.cursor);
            self.insert("\n");
            return;
        }
        let message = self.text.trim();
        if !message.is_empty() {
            self.queued.push(message.to_owned());
        }
        self.text.clear();
        self.cursor = 0;
    }

    fn insert(&mut self, s: &str) {
        self.text.insert_str(self.cursor, s);
        self.cursor += s.len();
    }

    fn line_start(&self) -> usize {
        self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1)
    }

    fn line_end(&self) -> usize {
        self.text[self.cursor..]
            .find('\n')
            .map_or(self.text.len(), |i| self.cursor + i)
    }
}

/// The composer's text as pane lines: `› ` before the first, the cursor
/// drawn as a reversed cell (the terminal's own cursor is hidden). What
/// was typed is shown safely (control characters as visible escapes).
pub fn lines(text: &str, cursor: usize) -> Vec<String> {
    let (before, after) = text.split_at(cursor.min(text.len()));
    let before: Vec<&str> = before.split('\n').collect();
    let after: Vec<&str> = after.split('\n').collect();
    let visible = |s: &str| crate::show::visible(s).into_owned();
    let mut shown: Vec<String> = before[..before.len() - 1]
        .iter()
        .map(|l| visible(l))
        .collect();
    let mut rest = after[0].chars();
    let under = rest
        .next()
        .map_or_else(|| " ".to_owned(), |c| visible(c.encode_utf8(&mut [0; 4])));
    shown.push(format!(
        "{}\x1b[7m{under}\x1b[27m{}",
        visible(before[before.len() - 1]),
        visible(rest.as_str())
    ));
    shown.extend(after[1..].iter().map(|l| visible(l)));
    shown
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("› {l}")
            } else {
                format!("  {l}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode, modifiers: KeyModifiers) -> Event {
        Event::Key(KeyEvent::new(code, modifiers))
    }

    fn typed(c: &mut Composer, text: &str) {
        for ch in text.chars() {
            c.event(&key(KeyCode::Char(ch), KeyModifiers::NONE));
        }
    }

    #[test]
    fn enter_queues_and_up_takes_the_newest_back_to_edit() {
        let mut c = Composer::default();
        typed(&mut c, "one");
        c.event(&key(KeyCode::Enter, KeyModifiers::NONE));
        typed(&mut c, "two");
        c.event(&key(KeyCode::Enter, KeyModifiers::NONE));
        assert_eq!(c.queued, ["one", "two"]);
        c.event(&key(KeyCode::Up, KeyModifiers::NONE));
        assert_eq!((c.text.as_str(), c.queued.len()), ("two", 1));
        typed(&mut c, "!");
        c.event(&key(KeyCode::Enter, KeyModifiers::NONE));
        assert_eq!(c.queued, ["one", "two!"]);
        c.event(&key(KeyCode::Char('x'), KeyModifiers::CONTROL));
        assert_eq!(c.queued, ["one"]);
    }

    #[test]
    fn lines_show_the_cursor_and_escape_what_was_typed() {
        assert_eq!(lines("ab\ncd", 4), ["› ab", "  c\x1b[7md\x1b[27m"]);
        assert_eq!(lines("x\x1b", 2), ["› x\\x1b\x1b[7m \x1b[27m"]);
    }

    #[test]
    fn newlines_from_shift_alt_ctrl_j_and_backslash() {
        let mut c = Composer::default();
        typed(&mut c, "a");
        c.event(&key(KeyCode::Enter, KeyModifiers::SHIFT));
        typed(&mut c, "b");
        c.event(&key(KeyCode::Enter, KeyModifiers::ALT));
        typed(&mut c, "c");
        c.event(&key(KeyCode::Char('j'), KeyModifiers::CONTROL));
        typed(&mut c, "d\\");
        c.event(&key(KeyCode::Enter, KeyModifiers::NONE));
        typed(&mut c, "é");
        c.event(&key(KeyCode::Backspace, KeyModifiers::NONE));
        typed(&mut c, "e");
        assert_eq!(c.text, "a\nb\nc\nd\ne");
        assert_eq!(
            c.event(&key(KeyCode::Esc, KeyModifiers::NONE)),
            Asked::Interrupt
        );
        assert_eq!(
            c.event(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Asked::Interrupt
        );
    }
}
