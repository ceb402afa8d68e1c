use super::{html, stream::Stream, terminal};

fn plain(markdown: &str) -> Vec<String> {
    terminal::lines(markdown, false)
}

#[test]
fn emphasis_and_code_spans_lose_their_marks_and_gain_styles() {
    assert_eq!(
        plain("Use **bold**, *italic*, ~~old~~ and `cargo test`."),
        ["Use bold, italic, old and cargo test."]
    );
    assert_eq!(
        terminal::lines("a **b** `c`", true),
        ["a \x1b[1mb\x1b[0m \x1b[36mc\x1b[0m"]
    );
}

#[test]
fn headings_lists_quotes_and_rules_are_laid_out() {
    let md = "# Title\n\nSome text\nover two lines.\n\n- one\n- two\n  - nested\n\n3. three\n4. four\n\n> quoted\n> more\n\n---\n";
    assert_eq!(
        plain(md),
        [
            "Title",
            "",
            "Some text",
            "over two lines.",
            "",
            "• one",
            "• two",
            "  • nested",
            "",
            "3. three",
            "4. four",
            "",
            "│ quoted",
            "│ more",
            "",
            &"─".repeat(40),
        ]
    );
    assert_eq!(terminal::lines("# Title", true), ["\x1b[1;4mTitle\x1b[0m"]);
}

#[test]
fn links_show_their_text_and_address() {
    assert_eq!(
        plain("See [the docs](https://example.com/d) or <https://example.com>."),
        ["See the docs (https://example.com/d) or https://example.com."]
    );
}

#[test]
fn code_blocks_are_highlighted_without_their_fences() {
    let md = "Run:\n\n```rust\nfn main() { let x = \"hi\"; } // done\n```\n";
    assert_eq!(
        plain(md),
        ["Run:", "", "fn main() { let x = \"hi\"; } // done"]
    );
    let styled = terminal::lines(md, true);
    let code = &styled[2];
    assert!(code.contains("\x1b[35mfn\x1b[0m"), "keyword: {code:?}");
    assert!(code.contains("\x1b[32m\"hi\"\x1b[0m"), "string: {code:?}");
    assert!(code.contains("\x1b[90m// done\x1b[0m"), "comment: {code:?}");
    // An unknown language is shown plain.
    assert_eq!(terminal::lines("```nosuchlang\nfn x\n```", true), ["fn x"]);
}

#[test]
fn tables_line_up() {
    assert_eq!(
        plain("| a | bb |\n|---|---:|\n| ccc | d |\n"),
        ["a   │ bb", "────┼───", "ccc │  d"]
    );
}

#[test]
fn the_model_cannot_emit_escape_sequences() {
    let evil = "**\x1b]52;c;aGk=\x07** \x1b[2J `\u{9b}31m`\n\n```sh\necho \x1b]0;title\x07\n```\n";
    for line in terminal::lines(evil, true) {
        // Only agentx's own SGR sequences remain: ESC always starts `ESC [ digits m`.
        let mut rest = line.as_str();
        while let Some(at) = rest.find('\x1b') {
            let tail = &rest[at + 1..];
            let end = tail.find('m').unwrap();
            assert!(
                tail.starts_with('[')
                    && tail[1..end].chars().all(|c| c.is_ascii_digit() || c == ';'),
                "{line:?}"
            );
            rest = &tail[end..];
        }
        assert!(
            !line.contains('\u{9b}') && !line.contains('\x07'),
            "{line:?}"
        );
    }
    let shown = plain(evil).join("\n");
    assert!(shown.contains("\\x1b]52;c;aGk=\\x07"), "{shown}");
}

#[test]
fn a_stream_prints_each_block_when_it_ends() {
    let mut s = Stream::new(false);
    assert!(s.push("Hello **wor").is_empty());
    assert!(
        s.push("ld**.\nSecond line").is_empty(),
        "a paragraph waits for its end"
    );
    assert!(
        s.push("\n\n").is_empty(),
        "…which is known when the next block starts"
    );
    assert_eq!(s.push("```py\n"), ["Hello world.", "Second line"]);
    assert!(
        s.push("x = 1\n\ny = 2\n").is_empty(),
        "a blank line in code ends nothing"
    );
    assert_eq!(s.push("```\n"), ["", "x = 1", "", "y = 2"]);
    assert!(
        s.push("- a\n\n  still a\n").is_empty(),
        "an indented line continues the item"
    );
    assert!(s.push("\n- b").is_empty());
    assert_eq!(s.finish(), ["", "• a", "", "  still a", "", "• b"]);
    assert!(s.finish().is_empty());
}

#[test]
fn html_escapes_everything_the_answer_says() {
    let got =
        html::render("<script>alert(1)</script>\n\nHi <b onclick=x>there</b> & **you** `<i>`\n");
    assert_eq!(
        got,
        "<p>&lt;script&gt;alert(1)&lt;/script&gt;\n</p>\n<p>Hi &lt;b onclick=x&gt;there&lt;/b&gt; &amp; <strong>you</strong> <code>&lt;i&gt;</code></p>\n"
    );
}

#[test]
fn html_links_lead_only_to_the_web_and_open_no_window_reference() {
    let got = html::render(
        "[ok](https://example.com/a?b=1&c=\"2\") [bad](javascript:alert(1)) [data](data:text/html,x) ![pic](http://x/y.png)",
    );
    assert!(
        got.contains("<a href=\"https://example.com/a?b=1&amp;c=&quot;2&quot;\" rel=\"noopener noreferrer\" target=\"_blank\">ok</a>"),
        "{got}"
    );
    assert!(!got.contains("href=\"javascript"), "{got}");
    assert!(!got.contains("href=\"data"), "{got}");
    assert!(
        got.contains("<span class=\"inert-link\" title=\"javascript:alert(1)\">bad</span>"),
        "{got}"
    );
    assert!(!got.contains("<img"), "{got}");
    assert!(got.contains("image: pic</span>"), "{got}");
}

#[test]
fn html_code_blocks_are_highlighted_with_classes() {
    let got = html::render("```rust\nlet s = \"<x>\";\n```\n");
    assert!(
        got.starts_with("<pre class=\"code\" data-language=\"rust\"><code>"),
        "{got}"
    );
    assert!(
        got.contains("<span class=\"hl-keyword\">let</span>"),
        "{got}"
    );
    assert!(
        got.contains("<span class=\"hl-string\">&quot;&lt;x&gt;&quot;</span>"),
        "{got}"
    );
}
