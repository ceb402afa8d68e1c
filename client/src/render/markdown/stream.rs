//! A streamed answer rendered a block at a time: a paragraph, list or quote
//! is printed once a blank line ends it, a fenced code block once its closing
//! fence arrives; the unfinished tail is held back until then (or the end).

use super::terminal;

/// The answer so far and where its finished blocks end.
pub struct Stream {
    styled: bool,
    /// Text not yet rendered.
    pending: String,
    /// Bytes of `pending` whose complete lines were read.
    scanned: usize,
    /// The open fence (its character and length) of a code block.
    fence: Option<(char, usize)>,
    /// After a blank line (outside code): where the next block may start.
    after_blank: bool,
    /// Something was printed: the next block is set off by a blank line.
    printed: bool,
}

impl Stream {
    pub fn new(styled: bool) -> Self {
        Self {
            styled,
            pending: String::new(),
            scanned: 0,
            fence: None,
            after_blank: false,
            printed: false,
        }
    }

    /// Takes more of the answer; returns the lines of the blocks it finished.
    pub fn push(&mut self, delta: &str) -> Vec<String> {
        self.pending.push_str(delta);
        let mut cut = 0;
        while let Some(len) = self.pending[self.scanned..].find('\n') {
            let start = self.scanned;
            let end = start + len + 1;
            self.scanned = end;
            let line = self.pending[start..end - 1].to_owned();
            if let Some(boundary) = self.read_line(&line, start, end) {
                cut = boundary;
            }
        }
        if cut == 0 {
            return Vec::new();
        }
        let done: String = self.pending.drain(..cut).collect();
        self.scanned -= cut;
        self.render(&done)
    }

    /// The rest of the answer, rendered.
    pub fn finish(&mut self) -> Vec<String> {
        let rest = std::mem::take(&mut self.pending);
        self.scanned = 0;
        self.fence = None;
        self.after_blank = false;
        if rest.trim().is_empty() {
            return Vec::new();
        }
        self.render(&rest)
    }

    /// Reads one complete line (`start..end` in `pending`, break included);
    /// returns where the finished blocks end, when this line ends some.
    fn read_line(&mut self, line: &str, start: usize, end: usize) -> Option<usize> {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some((c, n)) = self.fence {
            if closes(line, c, n) {
                self.fence = None;
                // A code block at the margin is finished; one inside a list
                // item may be followed by more of the item.
                return (!line.starts_with(' ')).then_some(end);
            }
            return None;
        }
        if line.trim().is_empty() {
            self.after_blank = true;
            return None;
        }
        let boundary = (self.after_blank && !line.starts_with([' ', '\t'])).then_some(start);
        self.after_blank = false;
        self.fence = opens(line);
        boundary
    }

    fn render(&mut self, markdown: &str) -> Vec<String> {
        let lines = terminal::lines(markdown, self.styled);
        if lines.is_empty() {
            return lines;
        }
        let mut out = Vec::with_capacity(lines.len() + 1);
        if self.printed {
            out.push(String::new());
        }
        self.printed = true;
        out.extend(lines);
        out
    }
}

/// The fence a line opens (up to three spaces, then three or more backticks
/// or tildes), if any.
fn opens(line: &str) -> Option<(char, usize)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let c = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = rest.len() - rest.trim_start_matches(c).len();
    // A backtick fence's info string may not hold a backtick.
    (n >= 3 && !(c == '`' && rest[n..].contains('`'))).then_some((c, n))
}

/// Whether a line closes a fence of `n` `c`s.
fn closes(line: &str, c: char, n: usize) -> bool {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return false;
    }
    let rest = &line[indent..];
    let run = rest.len() - rest.trim_start_matches(c).len();
    run >= n && rest[run..].trim().is_empty()
}
