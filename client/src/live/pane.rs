//! The pane at the bottom of the terminal while a turn runs, and the lines
//! printed above it, so the transcript stays in the terminal's scrollback.

use std::io::Write as _;

use crossterm::cursor::{MoveToColumn, MoveUp};
use crossterm::queue;
use crossterm::terminal::{Clear, ClearType};

/// The rows drawn at the bottom. The cursor is kept on the pane's first row,
/// column 0: redrawing clears from there down, and lines printed above go
/// where the pane was, scrolling the terminal as a plain print would.
#[derive(Debug, Default)]
pub struct Pane {
    /// Rows the pane takes now (0: nothing drawn).
    rows: usize,
}

impl Pane {
    /// Draws `lines` (styled by agentx, outside text already made safe),
    /// each cut to the terminal's width so none wraps.
    pub fn draw(&mut self, lines: &[String]) {
        let mut out = std::io::stderr().lock();
        let _ = self.draw_to(&mut out, lines);
        let _ = out.flush();
    }

    /// Prints `history` (whole lines, may wrap) where the pane was, then
    /// draws the pane again under them.
    pub fn print_above(&mut self, history: &[String], lines: &[String]) {
        let mut out = std::io::stderr().lock();
        let _ = queue!(out, MoveToColumn(0), Clear(ClearType::FromCursorDown));
        for line in history {
            // The terminal is raw: a newline does not return the carriage.
            let _ = write!(out, "{}\r\n", line.replace('\n', "\r\n"));
        }
        self.rows = 0;
        let _ = self.draw_to(&mut out, lines);
        let _ = out.flush();
    }

    /// Takes the pane off the screen; the cursor is where it began.
    pub fn clear(&mut self) {
        let mut out = std::io::stderr().lock();
        let _ = queue!(out, MoveToColumn(0), Clear(ClearType::FromCursorDown));
        let _ = out.flush();
        self.rows = 0;
    }

    fn draw_to(&mut self, out: &mut impl std::io::Write, lines: &[String]) -> std::io::Result<()> {
        let (cols, rows) = crossterm::terminal::size().unwrap_or((80, 24));
        let width = usize::from(cols).saturating_sub(1).max(1);
        // Never taller than the screen (the first row kept for what is above).
        let keep = usize::from(rows).saturating_sub(1).max(1);
        let lines = &lines[lines.len().saturating_sub(keep)..];
        queue!(out, MoveToColumn(0), Clear(ClearType::FromCursorDown))?;
        for (i, line) in lines.iter().enumerate() {
            if i > 0 {
                out.write_all(b"\r\n")?;
            }
            out.write_all(console::truncate_str(line, width, "…").as_bytes())?;
        }
        if lines.len() > 1 {
            queue!(
                out,
                MoveUp(u16::try_from(lines.len() - 1).unwrap_or(u16::MAX))
            )?;
        }
        queue!(out, MoveToColumn(0))?;
        self.rows = lines.len();
        Ok(())
    }
}
