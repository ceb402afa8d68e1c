//! Answers written in Markdown, rendered for people: styled lines for a
//! terminal (`terminal`, streamed a block at a time by `stream`) and sanitized
//! HTML for the web view (`html`), code blocks highlighted by `highlight`.

pub mod highlight;
pub mod html;
pub mod stream;
pub mod terminal;

use pulldown_cmark::{Options, Parser};

/// The Markdown answers are read as: CommonMark plus GitHub's tables,
/// strikethrough and task lists.
pub fn parser(text: &str) -> Parser<'_> {
    Parser::new_ext(
        text,
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS,
    )
}

/// The language of a fenced code block from its info string (`rust,ignore`
/// → `rust`); empty when none is named.
pub fn fence_language(info: &str) -> &str {
    info.split(|c: char| c.is_whitespace() || c == ',' || c == '{')
        .next()
        .unwrap_or("")
}

#[cfg(test)]
mod tests;
