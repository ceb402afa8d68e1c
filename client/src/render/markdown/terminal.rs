//! Markdown as terminal lines: bold, italic and code spans styled instead of
//! shown as `**` and backticks, headings, lists, quotes, links with their URL,
//! tables and highlighted code. Every piece of the text goes through the
//! terminal sanitizer; only the styling added here is an escape sequence.

use pulldown_cmark::{Alignment, CodeBlockKind, Event, HeadingLevel, LinkType, Tag, TagEnd};

use super::highlight;
use crate::show::visible;

const BOLD: &str = "1";
const DIM: &str = "2";
const ITALIC: &str = "3";
const UNDERLINE: &str = "4";
const STRIKE: &str = "9";
const CODE: &str = "36";
const RESET: &str = "\x1b[0m";

/// A block that holds others: its lines start with its mark.
enum Container {
    Quote,
    Item { bullet: String, first: bool },
}

/// A table being read: its rows of cells (plain text) and alignments.
struct Table {
    aligns: Vec<Alignment>,
    rows: Vec<Vec<String>>,
    head_rows: usize,
}

/// Renders `markdown` to lines; `styled`: with SGR styling (off for
/// `NO_COLOR`), the structure is the same either way.
pub fn lines(markdown: &str, styled: bool) -> Vec<String> {
    let mut w = Writer {
        styled,
        ..Writer::default()
    };
    for event in super::parser(markdown) {
        w.event(event);
    }
    w.finish()
}

/// [`lines`] with code blocks left unhighlighted: cheap enough for what is
/// shown before the prompt (the syntaxes are not loaded for it).
pub fn lines_unhighlighted(markdown: &str, styled: bool) -> Vec<String> {
    let mut w = Writer {
        styled,
        plain_code: true,
        ..Writer::default()
    };
    for event in super::parser(markdown) {
        w.event(event);
    }
    w.finish()
}

#[derive(Default)]
struct Writer {
    styled: bool,
    /// Code blocks are not highlighted.
    plain_code: bool,
    out: Vec<String>,
    line: String,
    open: bool,
    containers: Vec<Container>,
    /// Active inline styles (SGR parameters), outermost first.
    styles: Vec<&'static str>,
    /// Next number of each open list (`None`: bullets), and whether its
    /// items are set apart by blank lines (a loose list).
    lists: Vec<(Option<u64>, bool)>,
    /// Open links: their URL and the text shown so far.
    links: Vec<(String, String, bool)>,
    code: Option<(String, String)>,
    table: Option<Table>,
    cell: String,
    /// The last line is the blank one between blocks.
    after_gap: bool,
    /// The styles in force on the current line (SGR parameters).
    applied: String,
}

impl Writer {
    fn event(&mut self, event: Event<'_>) {
        if self.table.is_some() && self.table_event(&event) {
            return;
        }
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => {
                if let Some((_, code)) = &mut self.code {
                    code.push_str(&text);
                } else {
                    self.text(&text);
                }
            }
            Event::Code(code) => {
                self.push_style(CODE);
                self.text(&code);
                self.pop_style();
            }
            Event::InlineMath(text) | Event::DisplayMath(text) => self.text(&text),
            Event::Html(html) | Event::InlineHtml(html) => self.text(&html),
            Event::FootnoteReference(name) => self.text(&format!("[^{name}]")),
            Event::SoftBreak | Event::HardBreak => self.newline(),
            Event::Rule => {
                self.gap();
                self.begin_line();
                let rule = "─".repeat(40);
                self.styled_text(DIM, &rule);
                self.newline();
            }
            Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => {
                if matches!(self.containers.last(), Some(Container::Item { .. }))
                    && let Some((_, loose)) = self.lists.last_mut()
                {
                    *loose = true;
                }
                self.gap();
            }
            Tag::Heading { level, .. } => {
                self.gap();
                self.push_style(BOLD);
                if level == HeadingLevel::H1 {
                    self.push_style(UNDERLINE);
                }
            }
            Tag::BlockQuote(_) => {
                self.gap();
                self.containers.push(Container::Quote);
            }
            Tag::CodeBlock(kind) => {
                self.gap();
                let language = match kind {
                    CodeBlockKind::Fenced(info) => super::fence_language(&info).to_owned(),
                    CodeBlockKind::Indented => String::new(),
                };
                self.code = Some((language, String::new()));
            }
            Tag::HtmlBlock => self.gap(),
            Tag::List(start) => {
                if self.open {
                    self.newline();
                }
                if !self.in_item() {
                    self.gap();
                }
                self.lists.push((start, false));
            }
            Tag::Item => {
                if self.open {
                    self.newline();
                }
                if self.lists.last().is_some_and(|(_, loose)| *loose) {
                    self.gap();
                }
                let bullet = match self.lists.last_mut().map(|(n, _)| n) {
                    Some(Some(n)) => {
                        let b = format!("{n}. ");
                        *n += 1;
                        b
                    }
                    _ => "• ".to_owned(),
                };
                self.containers.push(Container::Item {
                    bullet,
                    first: true,
                });
            }
            Tag::Emphasis => self.push_style(ITALIC),
            Tag::Strong => self.push_style(BOLD),
            Tag::Strikethrough => self.push_style(STRIKE),
            Tag::Link {
                link_type,
                dest_url,
                ..
            } => {
                let auto = matches!(link_type, LinkType::Autolink | LinkType::Email);
                self.links
                    .push((dest_url.into_string(), String::new(), auto));
                self.push_style(UNDERLINE);
            }
            Tag::Image { dest_url, .. } => {
                self.text("[image: ");
                self.links
                    .push((dest_url.into_string(), String::new(), false));
            }
            Tag::Table(aligns) => {
                self.gap();
                self.table = Some(Table {
                    aligns,
                    rows: Vec::new(),
                    head_rows: 0,
                });
            }
            Tag::FootnoteDefinition(name) => {
                self.gap();
                self.text(&format!("[^{name}]: "));
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph | TagEnd::HtmlBlock => self.close_line(),
            TagEnd::Heading(level) => {
                if level == HeadingLevel::H1 {
                    self.pop_style();
                }
                self.pop_style();
                self.close_line();
            }
            TagEnd::BlockQuote(_) => {
                self.close_line();
                self.containers.pop();
            }
            TagEnd::CodeBlock => {
                if let Some((language, code)) = self.code.take() {
                    self.code_lines(&code, &language);
                }
            }
            TagEnd::List(_) => {
                self.close_line();
                self.lists.pop();
            }
            TagEnd::Item => {
                self.close_line();
                self.containers.pop();
            }
            TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => self.pop_style(),
            TagEnd::Link => {
                self.pop_style();
                if let Some((url, text, auto)) = self.links.pop()
                    && !auto
                    && text != url
                    && !url.is_empty()
                {
                    self.text(" (");
                    self.styled_text(DIM, &url);
                    self.text(")");
                }
            }
            TagEnd::Image => {
                if let Some((url, _, _)) = self.links.pop() {
                    self.text("] (");
                    self.styled_text(DIM, &url);
                    self.text(")");
                }
            }
            TagEnd::FootnoteDefinition => self.close_line(),
            _ => {}
        }
    }

    /// Table events: cells collect plain text; the table is laid out at its end.
    fn table_event(&mut self, event: &Event<'_>) -> bool {
        let Some(table) = &mut self.table else {
            return false;
        };
        match event {
            Event::Start(Tag::TableHead) | Event::Start(Tag::TableRow) => {
                table.rows.push(Vec::new())
            }
            Event::End(TagEnd::TableHead) => table.head_rows = table.rows.len(),
            Event::End(TagEnd::TableCell) => {
                let cell = std::mem::take(&mut self.cell);
                if let Some(row) = table.rows.last_mut() {
                    row.push(cell);
                }
            }
            Event::Text(t) | Event::Code(t) | Event::Html(t) | Event::InlineHtml(t) => {
                self.cell.push_str(&visible(t));
            }
            Event::SoftBreak | Event::HardBreak => self.cell.push(' '),
            Event::End(TagEnd::Table) => {
                if let Some(table) = self.table.take() {
                    self.table_lines(&table);
                }
            }
            _ => {}
        }
        true
    }

    fn table_lines(&mut self, table: &Table) {
        let columns = table.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                table
                    .rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for (r, row) in table.rows.iter().enumerate() {
            self.begin_line();
            for (c, width) in widths.iter().enumerate() {
                if c > 0 {
                    self.styled_text(DIM, " │ ");
                }
                let cell = row.get(c).map_or("", String::as_str);
                let pad = width.saturating_sub(cell.chars().count());
                let (left, right) = match table.aligns.get(c) {
                    Some(Alignment::Right) => (pad, 0),
                    Some(Alignment::Center) => (pad / 2, pad - pad / 2),
                    _ => (0, pad),
                };
                self.raw(&" ".repeat(left));
                if r < table.head_rows {
                    self.styled_text(BOLD, cell);
                } else {
                    self.raw(cell);
                }
                if c + 1 < columns {
                    self.raw(&" ".repeat(right));
                }
            }
            self.newline();
            if r + 1 == table.head_rows {
                self.begin_line();
                let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
                self.styled_text(DIM, &rule.join("─┼─"));
                self.newline();
            }
        }
    }

    fn code_lines(&mut self, code: &str, language: &str) {
        let language = if self.plain_code { "" } else { language };
        for pieces in highlight::lines(code, language) {
            self.begin_line();
            for (kind, text) in pieces {
                match kind {
                    Some(kind) => self.styled_text(kind.sgr(), &visible(&text)),
                    None => self.raw(&visible(&text)),
                }
            }
            self.newline();
        }
    }

    fn in_item(&self) -> bool {
        self.containers
            .iter()
            .any(|c| matches!(c, Container::Item { .. }))
    }

    /// A blank line between blocks, except where a list item's first block
    /// starts on its bullet's line.
    fn gap(&mut self) {
        if self.open {
            self.newline();
        }
        let first_in_item = matches!(
            self.containers.last(),
            Some(Container::Item { first: true, .. })
        );
        if first_in_item || self.out.is_empty() || self.after_gap {
            return;
        }
        let bars = self
            .containers
            .iter()
            .filter(|c| matches!(c, Container::Quote))
            .count();
        let mut blank = String::new();
        for _ in 0..bars {
            blank.push_str(&self.style_of(DIM, "│"));
        }
        self.out.push(blank);
        self.after_gap = true;
    }

    fn style_of(&self, sgr: &str, text: &str) -> String {
        if self.styled {
            format!("\x1b[{sgr}m{text}{RESET}")
        } else {
            text.to_owned()
        }
    }

    /// Starts a line with the marks of the blocks it is in.
    fn begin_line(&mut self) {
        if self.open {
            return;
        }
        self.open = true;
        let mut prefix = String::new();
        for c in &mut self.containers {
            match c {
                Container::Quote => prefix.push_str(&if self.styled {
                    format!("\x1b[{DIM}m│{RESET} ")
                } else {
                    "│ ".to_owned()
                }),
                Container::Item { bullet, first } => {
                    if *first {
                        prefix.push_str(bullet);
                        *first = false;
                    } else {
                        prefix.push_str(&" ".repeat(bullet.chars().count()));
                    }
                }
            }
        }
        self.line = prefix;
        self.applied.clear();
    }

    fn newline(&mut self) {
        if !self.open {
            self.begin_line();
        }
        let mut line = std::mem::take(&mut self.line);
        if !self.applied.is_empty() {
            line.push_str(RESET);
            self.applied.clear();
        }
        self.out.push(line);
        self.open = false;
        self.after_gap = false;
    }

    fn close_line(&mut self) {
        if self.open {
            self.newline();
        }
    }

    /// Text from the answer: sanitized, line breaks kept as lines.
    fn text(&mut self, text: &str) {
        if let Some((_, shown, _)) = self.links.last_mut() {
            shown.push_str(text);
        }
        let mut first = true;
        for piece in text.split('\n') {
            if !first {
                self.newline();
            }
            first = false;
            if piece.is_empty() {
                continue;
            }
            self.begin_line();
            let safe = visible(piece.strip_suffix('\r').unwrap_or(piece)).into_owned();
            self.raw(&safe);
        }
    }

    /// Already sanitized text, on the current line, in the active styles.
    fn raw(&mut self, text: &str) {
        self.begin_line();
        if self.styled {
            let wanted = self.styles.join(";");
            if wanted != self.applied {
                if !self.applied.is_empty() {
                    self.line.push_str(RESET);
                }
                if !wanted.is_empty() {
                    self.line.push_str(&format!("\x1b[{wanted}m"));
                }
                self.applied = wanted;
            }
        }
        self.line.push_str(text);
    }

    fn styled_text(&mut self, sgr: &'static str, text: &str) {
        self.push_style(sgr);
        self.raw(text);
        self.pop_style();
    }

    fn push_style(&mut self, sgr: &'static str) {
        self.styles.push(sgr);
    }

    fn pop_style(&mut self) {
        self.styles.pop();
    }

    fn finish(mut self) -> Vec<String> {
        if let Some((language, code)) = self.code.take() {
            self.code_lines(&code, &language);
        }
        self.close_line();
        if self.after_gap {
            self.out.pop();
        }
        self.out
    }
}
