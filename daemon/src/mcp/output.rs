//! What the model is told of an MCP tool's result: its text content (other
//! content as a placeholder line), cut to its head and tail like shell output.

use serde_json::Value;

/// Output kept from each end of a long result (as the shell tool keeps).
const KEEP_HEAD: usize = 16 * 1024;
const KEEP_TAIL: usize = 16 * 1024;

/// Whether a `tools/call` result says the tool failed (`isError`).
pub fn is_error(result: &Value) -> bool {
    result["isError"].as_bool() == Some(true)
}

/// The text of a `tools/call` result as JSON (`content`, `structuredContent`),
/// bounded.
pub fn for_model(result: &Value) -> String {
    let mut text = String::new();
    let blocks = result["content"].as_array().map_or(&[][..], Vec::as_slice);
    for block in blocks {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&block_text(block));
    }
    if blocks.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        text.push_str(&structured.to_string());
    }
    cut(&text)
}

/// One content block as text.
fn block_text(block: &Value) -> String {
    let size = |field: &str| block[field].as_str().map_or(0, str::len);
    let mime = block["mimeType"].as_str().unwrap_or("unknown type");
    match block["type"].as_str().unwrap_or("") {
        "text" => block["text"].as_str().unwrap_or("").to_owned(),
        "image" => format!(
            "[an image ({mime}, {} bytes of base64) the tool returned; images are not passed on]",
            size("data")
        ),
        "audio" => format!(
            "[audio ({mime}, {} bytes of base64) the tool returned; audio is not passed on]",
            size("data")
        ),
        "resource" => {
            let resource = &block["resource"];
            match resource["text"].as_str() {
                Some(text) => text.to_owned(),
                None => format!(
                    "[a binary resource {} the tool returned]",
                    resource["uri"].as_str().unwrap_or("")
                ),
            }
        }
        "resource_link" => format!(
            "[a link to resource {}]",
            block["uri"].as_str().unwrap_or("")
        ),
        other => format!("[content of type {other:?} the tool returned]"),
    }
}

/// `text`, or its head and tail with the size of what was left out.
pub fn cut(text: &str) -> String {
    if text.len() <= KEEP_HEAD + KEEP_TAIL {
        return text.to_owned();
    }
    let mut head = KEEP_HEAD;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - KEEP_TAIL;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n… ({} bytes left out) …\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_passes_other_content_is_named_and_long_output_is_cut() {
        let r = json!({"content": [
            {"type": "text", "text": "Echo: hi"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"}
        ]});
        let got = for_model(&r);
        assert!(
            got.starts_with("Echo: hi\n[an image (image/png, 4 bytes"),
            "{got}"
        );
        let err = json!({"isError": true, "content": [{"type": "text", "text": "no"}]});
        assert!(is_error(&err) && !is_error(&r));
        assert_eq!(for_model(&err), "no");
        let big = "é".repeat(100_000);
        let got = for_model(&json!({"content": [{"type": "text", "text": big}]}));
        assert!(
            got.len() < 40_000 && got.contains("bytes left out"),
            "{}",
            got.len()
        );
        assert_eq!(
            for_model(&json!({"content": [], "structuredContent": {"a": 1}})),
            "{\"a\":1}"
        );
    }
}
