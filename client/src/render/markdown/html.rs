//! Markdown as HTML for the web view, safe by construction: every text and
//! every raw HTML block of the answer is escaped, links lead only to http(s)
//! (in a new tab, with `rel="noopener noreferrer"`), images are links.

use pulldown_cmark::{Alignment, CodeBlockKind, Event, Tag, TagEnd};

use super::highlight;

/// The answer `markdown` as an HTML fragment.
pub fn render(markdown: &str) -> String {
    let mut w = Writer {
        out: String::with_capacity(markdown.len() + markdown.len() / 2),
        ..Writer::default()
    };
    for event in super::parser(markdown) {
        w.event(event);
    }
    if let Some((language, code)) = w.code.take() {
        w.code_block(&code, &language);
    }
    w.out
}

#[derive(Default)]
struct Writer {
    out: String,
    /// An open code block: its language and text.
    code: Option<(String, String)>,
    /// Closing tags of open links (`</a>` or `</span>`).
    links: Vec<&'static str>,
    /// Open images: their URL, while the alternative text is written.
    images: Vec<String>,
    aligns: Vec<Alignment>,
    column: usize,
    in_head: bool,
}

impl Writer {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => match &mut self.code {
                Some((_, code)) => code.push_str(&text),
                None => escape(&mut self.out, &text),
            },
            Event::Code(code) => {
                self.out.push_str("<code>");
                escape(&mut self.out, &code);
                self.out.push_str("</code>");
            }
            Event::InlineMath(text) | Event::DisplayMath(text) => escape(&mut self.out, &text),
            Event::Html(html) | Event::InlineHtml(html) => escape(&mut self.out, &html),
            Event::FootnoteReference(name) => {
                self.out.push_str("[^");
                escape(&mut self.out, &name);
                self.out.push(']');
            }
            Event::SoftBreak => self.out.push('\n'),
            Event::HardBreak => self.out.push_str("<br>\n"),
            Event::Rule => self.out.push_str("<hr>\n"),
            Event::TaskListMarker(done) => self.out.push_str(if done {
                "<span class=\"task\">☑</span> "
            } else {
                "<span class=\"task\">☐</span> "
            }),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => self.out.push_str("<p>"),
            Tag::Heading { level, .. } => {
                // The page's own headings come first: an answer's start at h3.
                let n = (level as usize + 2).min(6);
                self.out.push_str(&format!("<h{n}>"));
            }
            Tag::BlockQuote(_) => self.out.push_str("<blockquote>\n"),
            Tag::CodeBlock(kind) => {
                let language = match kind {
                    CodeBlockKind::Fenced(info) => super::fence_language(&info).to_owned(),
                    CodeBlockKind::Indented => String::new(),
                };
                self.code = Some((language, String::new()));
            }
            Tag::HtmlBlock => self.out.push_str("<p>"),
            Tag::List(Some(1)) => self.out.push_str("<ol>\n"),
            Tag::List(Some(n)) => self.out.push_str(&format!("<ol start=\"{n}\">\n")),
            Tag::List(None) => self.out.push_str("<ul>\n"),
            Tag::Item => self.out.push_str("<li>"),
            Tag::Emphasis => self.out.push_str("<em>"),
            Tag::Strong => self.out.push_str("<strong>"),
            Tag::Strikethrough => self.out.push_str("<del>"),
            Tag::Link {
                dest_url, title, ..
            } => {
                if web_url(&dest_url) {
                    self.out.push_str("<a href=\"");
                    escape(&mut self.out, &dest_url);
                    self.out
                        .push_str("\" rel=\"noopener noreferrer\" target=\"_blank\"");
                    if !title.is_empty() {
                        self.out.push_str(" title=\"");
                        escape(&mut self.out, &title);
                        self.out.push('"');
                    }
                    self.out.push('>');
                    self.links.push("</a>");
                } else {
                    // Not a web address: shown, not followed.
                    self.out.push_str("<span class=\"inert-link\" title=\"");
                    escape(&mut self.out, &dest_url);
                    self.out.push_str("\">");
                    self.links.push("</span>");
                }
            }
            Tag::Image { dest_url, .. } => {
                // Never loaded: named, and linked when it is a web address.
                self.images.push(dest_url.into_string());
                self.out.push_str("<span class=\"image\">image: ");
            }
            Tag::Table(aligns) => {
                self.aligns = aligns;
                self.out.push_str("<table>\n");
            }
            Tag::TableHead => {
                self.in_head = true;
                self.column = 0;
                self.out.push_str("<thead><tr>");
            }
            Tag::TableRow => {
                self.column = 0;
                self.out.push_str("<tr>");
            }
            Tag::TableCell => {
                let cell = if self.in_head { "th" } else { "td" };
                let align = match self.aligns.get(self.column) {
                    Some(Alignment::Left) => " class=\"left\"",
                    Some(Alignment::Center) => " class=\"center\"",
                    Some(Alignment::Right) => " class=\"right\"",
                    _ => "",
                };
                self.out.push_str(&format!("<{cell}{align}>"));
            }
            Tag::FootnoteDefinition(name) => {
                self.out.push_str("<p class=\"footnote\">[^");
                escape(&mut self.out, &name);
                self.out.push_str("]: ");
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph | TagEnd::HtmlBlock => self.out.push_str("</p>\n"),
            TagEnd::Heading(level) => {
                let n = (level as usize + 2).min(6);
                self.out.push_str(&format!("</h{n}>\n"));
            }
            TagEnd::BlockQuote(_) => self.out.push_str("</blockquote>\n"),
            TagEnd::CodeBlock => {
                if let Some((language, code)) = self.code.take() {
                    self.code_block(&code, &language);
                }
            }
            TagEnd::List(true) => self.out.push_str("</ol>\n"),
            TagEnd::List(false) => self.out.push_str("</ul>\n"),
            TagEnd::Item => self.out.push_str("</li>\n"),
            TagEnd::Emphasis => self.out.push_str("</em>"),
            TagEnd::Strong => self.out.push_str("</strong>"),
            TagEnd::Strikethrough => self.out.push_str("</del>"),
            TagEnd::Link => {
                let close = self.links.pop().unwrap_or("</span>");
                self.out.push_str(close);
            }
            TagEnd::Image => {
                self.out.push_str("</span>");
                if let Some(url) = self.images.pop()
                    && web_url(&url)
                {
                    self.out.push_str(" (<a href=\"");
                    escape(&mut self.out, &url);
                    self.out
                        .push_str("\" rel=\"noopener noreferrer\" target=\"_blank\">");
                    escape(&mut self.out, &url);
                    self.out.push_str("</a>)");
                }
            }
            TagEnd::Table => self.out.push_str("</tbody></table>\n"),
            TagEnd::TableHead => {
                self.in_head = false;
                self.out.push_str("</tr></thead><tbody>\n");
            }
            TagEnd::TableRow => self.out.push_str("</tr>\n"),
            TagEnd::TableCell => {
                self.out
                    .push_str(if self.in_head { "</th>" } else { "</td>" });
                self.column += 1;
            }
            TagEnd::FootnoteDefinition => self.out.push_str("</p>\n"),
            _ => {}
        }
    }

    fn code_block(&mut self, code: &str, language: &str) {
        self.out.push_str("<pre class=\"code\"");
        if !language.is_empty() {
            self.out.push_str(" data-language=\"");
            escape(&mut self.out, language);
            self.out.push('"');
        }
        self.out.push_str("><code>");
        for pieces in highlight::lines(code, language) {
            for (kind, text) in pieces {
                match kind {
                    Some(kind) => {
                        self.out.push_str("<span class=\"");
                        self.out.push_str(kind.class());
                        self.out.push_str("\">");
                        escape(&mut self.out, &text);
                        self.out.push_str("</span>");
                    }
                    None => escape(&mut self.out, &text),
                }
            }
            self.out.push('\n');
        }
        self.out.push_str("</code></pre>\n");
    }
}

/// Whether a link may be followed: an absolute http or https address.
fn web_url(url: &str) -> bool {
    let lower = url.trim_start().to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://")
}

/// Appends `text` with every character HTML gives a meaning escaped.
fn escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}
