//! What the model is given of an MCP tool's result: its text, cut to its
//! head and tail like shell output, and its images (bounded) to pass on.

use serde_json::Value;

use agentx_shared::conversation::ToolImage;

/// Output kept from each end of a long result (as the shell tool keeps).
const KEEP_HEAD: usize = 16 * 1024;
const KEEP_TAIL: usize = 16 * 1024;

/// Whether a `tools/call` result says the tool failed (`isError`).
pub fn is_error(result: &Value) -> bool {
    result["isError"].as_bool() == Some(true)
}

/// Images passed on from one result, at most.
pub const MAX_IMAGES: usize = 4;
/// The largest image passed on, in bytes of base64 (about 3.75 MB of image).
pub const MAX_IMAGE_BASE64: usize = 5 * 1024 * 1024;
/// Image types both providers' APIs take.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// What a `tools/call` result gives the model.
#[derive(Debug, Default, PartialEq)]
pub struct ForModel {
    /// Its text (`content`, else `structuredContent` as JSON), bounded, with
    /// a line in place of each other block.
    pub text: String,
    /// The images passed on, in order.
    pub images: Vec<ToolImage>,
}

/// What the model is given of a `tools/call` result.
pub fn for_model(result: &Value) -> ForModel {
    let mut out = ForModel::default();
    let mut text = String::new();
    let blocks = result["content"].as_array().map_or(&[][..], Vec::as_slice);
    for block in blocks {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&block_text(block, &mut out.images));
    }
    if blocks.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        text.push_str(&structured.to_string());
    }
    out.text = cut(&text);
    out
}

/// An image block passed on (pushed to `images`, a line saying so), or a
/// line saying why it was not.
fn image(block: &Value, images: &mut Vec<ToolImage>) -> String {
    let data = block["data"].as_str().unwrap_or("");
    let mime = block["mimeType"].as_str().unwrap_or("unknown type");
    let shown: String = mime.chars().take(60).collect();
    let why_not = if !IMAGE_TYPES.contains(&mime) {
        Some("a type the model APIs do not take")
    } else if data.len() > MAX_IMAGE_BASE64 {
        Some("larger than 5 MiB of base64")
    } else if images.len() >= MAX_IMAGES {
        Some("more than 4 images in one result")
    } else if data.is_empty() || !data.bytes().all(is_base64) {
        Some("its data is not base64")
    } else {
        None
    };
    match why_not {
        Some(why) => format!(
            "[an image ({shown}, {} bytes of base64) the tool returned, not passed on: {why}]",
            data.len()
        ),
        None => {
            images.push(ToolImage {
                mime: mime.to_owned(),
                base64: data.to_owned(),
            });
            format!(
                "[image {} ({shown}, {} bytes of base64), passed on to the model]",
                images.len(),
                data.len()
            )
        }
    }
}

fn is_base64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')
}

/// One content block as text (images passed on into `images`).
fn block_text(block: &Value, images: &mut Vec<ToolImage>) -> String {
    let size = |field: &str| block[field].as_str().map_or(0, str::len);
    let mime = block["mimeType"].as_str().unwrap_or("unknown type");
    match block["type"].as_str().unwrap_or("") {
        "text" => block["text"].as_str().unwrap_or("").to_owned(),
        "image" => image(block, images),
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
    fn text_passes_images_are_passed_on_within_bounds_and_long_output_is_cut() {
        let r = json!({"content": [
            {"type": "text", "text": "Echo: hi"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "image", "data": "AAAA", "mimeType": "image/svg+xml"},
            {"type": "image", "data": "not base64!", "mimeType": "image/png"},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}
        ]});
        let got = for_model(&r);
        assert_eq!(
            got.images,
            vec![ToolImage {
                mime: "image/png".into(),
                base64: "AAAA".into()
            }]
        );
        let lines: Vec<&str> = got.text.lines().collect();
        assert_eq!(lines[0], "Echo: hi");
        assert!(lines[1].contains("image 1 (image/png") && lines[1].contains("passed on"));
        assert!(lines[2].contains("not passed on: a type the model APIs do not take"));
        assert!(lines[3].contains("not passed on: its data is not base64"));
        assert!(lines[4].starts_with("[audio (audio/wav"));
        let many: Vec<Value> = (0..6)
            .map(|_| json!({"type": "image", "data": "AAAA", "mimeType": "image/jpeg"}))
            .collect();
        let got = for_model(&json!({ "content": many }));
        assert_eq!(got.images.len(), MAX_IMAGES);
        assert!(got.text.contains("more than 4 images"));
        let big = "A".repeat(MAX_IMAGE_BASE64 + 4);
        let got = for_model(
            &json!({"content": [{"type": "image", "data": big, "mimeType": "image/png"}]}),
        );
        assert!(got.images.is_empty() && got.text.contains("larger than 5 MiB"));

        let err = json!({"isError": true, "content": [{"type": "text", "text": "no"}]});
        assert!(is_error(&err) && !is_error(&r));
        assert_eq!(for_model(&err).text, "no");
        let big = "é".repeat(100_000);
        let got = for_model(&json!({"content": [{"type": "text", "text": big}]})).text;
        assert!(
            got.len() < 40_000 && got.contains("bytes left out"),
            "{}",
            got.len()
        );
        assert_eq!(
            for_model(&json!({"content": [], "structuredContent": {"a": 1}})).text,
            "{\"a\":1}"
        );
    }
}
