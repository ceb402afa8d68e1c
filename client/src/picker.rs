//! The list picker of `/resume` and `/rollback`: arrow keys (or j/k) move,
//! digits jump to that number (1 = first), Enter picks, Esc cancels.

use dialoguer::console::{Key, Term};

use crate::error::{CliError, CliResult};

/// What a key did to the picker.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Moved,
    Picked(usize),
    Cancelled,
}

/// The picker's state, apart from the terminal.
#[derive(Debug)]
struct State {
    len: usize,
    selected: usize,
    typed: String,
}

impl State {
    fn key(&mut self, key: &Key) -> Step {
        match key {
            Key::ArrowUp | Key::Char('k') => {
                self.typed.clear();
                self.selected = self.selected.saturating_sub(1);
            }
            Key::ArrowDown | Key::Char('j') => {
                self.typed.clear();
                self.selected = (self.selected + 1).min(self.len.saturating_sub(1));
            }
            Key::Home => self.selected = 0,
            Key::End => self.selected = self.len.saturating_sub(1),
            Key::Char(c) if c.is_ascii_digit() => {
                self.typed.push(*c);
                if !self.jump() {
                    // Not a number of the list: start over from this digit.
                    self.typed = c.to_string();
                    if !self.jump() {
                        self.typed.clear();
                    }
                }
            }
            Key::Backspace => {
                self.typed.pop();
                self.jump();
            }
            Key::Enter => return Step::Picked(self.selected),
            Key::Escape | Key::Char('q') => return Step::Cancelled,
            _ => {}
        }
        Step::Moved
    }

    /// Selects the typed number when it names an entry.
    fn jump(&mut self) -> bool {
        match self.typed.parse::<usize>() {
            Ok(n) if (1..=self.len).contains(&n) => {
                self.selected = n - 1;
                true
            }
            _ => false,
        }
    }
}

/// Shows `items` (first = 1) on stderr and returns the picked index, or
/// `None` when cancelled. Enter alone picks the first (the newest).
pub fn pick(prompt: &str, items: &[String]) -> CliResult<Option<usize>> {
    let term = Term::stderr();
    let mut state = State {
        len: items.len(),
        selected: 0,
        typed: String::new(),
    };
    let io = |e: std::io::Error| CliError::failed(format!("picker: {e}"));
    let _ = term.hide_cursor();
    let result = (|| {
        let mut drawn = 0;
        loop {
            term.clear_last_lines(drawn).map_err(io)?;
            let typed = if state.typed.is_empty() {
                String::new()
            } else {
                format!("  [{}]", state.typed)
            };
            term.write_line(&format!("{prompt}{typed}")).map_err(io)?;
            for (i, item) in items.iter().enumerate() {
                let mark = if i == state.selected { '>' } else { ' ' };
                term.write_line(&format!("{mark} {item}")).map_err(io)?;
            }
            drawn = items.len() + 1;
            match state.key(&term.read_key().map_err(io)?) {
                Step::Moved => {}
                Step::Picked(i) => return Ok(Some(i)),
                Step::Cancelled => return Ok(None),
            }
        }
    })();
    let _ = term.show_cursor();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(len: usize, keys: &[Key]) -> Option<usize> {
        let mut s = State {
            len,
            selected: 0,
            typed: String::new(),
        };
        for key in keys {
            match s.key(key) {
                Step::Moved => {}
                Step::Picked(i) => return Some(i),
                Step::Cancelled => return None,
            }
        }
        panic!("no decision");
    }

    #[test]
    fn arrows_numbers_enter_and_escape() {
        assert_eq!(run(3, &[Key::Enter]), Some(0));
        assert_eq!(
            run(
                3,
                &[Key::ArrowDown, Key::ArrowDown, Key::ArrowDown, Key::Enter]
            ),
            Some(2)
        );
        assert_eq!(run(3, &[Key::ArrowDown, Key::ArrowUp, Key::Enter]), Some(0));
        assert_eq!(run(3, &[Key::Char('2'), Key::Enter]), Some(1));
        assert_eq!(
            run(12, &[Key::Char('1'), Key::Char('2'), Key::Enter]),
            Some(11)
        );
        // 1 then 5 on a 12-entry list: 15 is no entry, so 5 is.
        assert_eq!(
            run(12, &[Key::Char('1'), Key::Char('5'), Key::Enter]),
            Some(4)
        );
        assert_eq!(run(3, &[Key::Char('9'), Key::Enter]), Some(0));
        assert_eq!(run(3, &[Key::Escape]), None);
    }
}
