//! Turning the local transcript into what the model sees: the view after the
//! last compaction, normalized to resend, and each item as a Responses input item.

use std::collections::HashSet;

use serde_json::{Value, json};

use agentx_shared::conversation::Item;

/// Output recorded for a call that never produced one.
pub const ABORTED: &str = "aborted: the turn was interrupted before this call finished";

/// One transcript item as an input item (server item ids never included).
pub fn to_input(item: &Item) -> Value {
    match item {
        Item::User { text } => json!({"role": "user", "content": text}),
        Item::Assistant { text } => json!({"role": "assistant", "content": text}),
        Item::FunctionCall {
            call_id,
            name,
            arguments,
        } => {
            json!({"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments})
        }
        Item::FunctionOutput {
            call_id,
            output,
            images,
        } if !images.is_empty() => {
            let mut parts = vec![json!({"type": "input_text", "text": output})];
            parts.extend(
                images
                    .iter()
                    .map(|image| json!({"type": "input_image", "image_url": image.data_url()})),
            );
            json!({"type": "function_call_output", "call_id": call_id, "output": parts})
        }
        Item::FunctionOutput {
            call_id, output, ..
        } => {
            json!({"type": "function_call_output", "call_id": call_id, "output": output})
        }
        // Never in a model view (see [`model_view`]); its summary if it were.
        Item::Compaction { summary, .. } => json!({"role": "user", "content": summary}),
    }
}

/// What the model sees of a transcript: the context the last compaction
/// left, then everything after it (the whole transcript when none).
pub fn model_view(items: &[Item]) -> Vec<Item> {
    let last = items
        .iter()
        .rposition(|i| matches!(i, Item::Compaction { .. }));
    match last.map(|at| (&items[at], &items[at + 1..])) {
        Some((Item::Compaction { context, .. }, after)) => {
            context.iter().chain(after).cloned().collect()
        }
        _ => items.to_vec(),
    }
}

/// The whole transcript made valid to resend: every call answered (with
/// [`ABORTED`] where no output exists, placed right after its call group),
/// outputs without a call dropped, empty assistant messages skipped.
pub fn normalize(items: &[Item]) -> Vec<Item> {
    let calls: HashSet<&str> = items
        .iter()
        .filter_map(|i| match i {
            Item::FunctionCall { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    let answered: HashSet<&str> = items
        .iter()
        .filter_map(|i| match i {
            Item::FunctionOutput { call_id, .. } if calls.contains(call_id.as_str()) => {
                Some(call_id.as_str())
            }
            _ => None,
        })
        .collect();
    let mut out = Vec::with_capacity(items.len());
    let mut unanswered: Vec<String> = Vec::new();
    let mut seen_outputs: HashSet<&str> = HashSet::new();
    for item in items {
        let is_call = matches!(item, Item::FunctionCall { .. });
        if !is_call {
            // The call group ended: answer what it left open.
            for call_id in unanswered.drain(..) {
                out.push(Item::FunctionOutput {
                    call_id,
                    output: ABORTED.to_owned(),
                    images: Vec::new(),
                });
            }
        }
        match item {
            Item::FunctionCall { call_id, .. } => {
                if !answered.contains(call_id.as_str()) {
                    unanswered.push(call_id.clone());
                }
                out.push(item.clone());
            }
            Item::FunctionOutput { call_id, .. } => {
                if calls.contains(call_id.as_str()) && seen_outputs.insert(call_id.as_str()) {
                    out.push(item.clone());
                }
            }
            Item::Assistant { text } if text.is_empty() => {}
            Item::Compaction { .. } => {}
            _ => out.push(item.clone()),
        }
    }
    for call_id in unanswered {
        out.push(Item::FunctionOutput {
            call_id,
            output: ABORTED.to_owned(),
            images: Vec::new(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> Item {
        Item::FunctionCall {
            call_id: id.into(),
            name: "shell".into(),
            arguments: "{}".into(),
        }
    }
    fn output(id: &str) -> Item {
        Item::FunctionOutput {
            call_id: id.into(),
            output: "ok".into(),
            images: Vec::new(),
        }
    }
    fn user(t: &str) -> Item {
        Item::User { text: t.into() }
    }

    #[test]
    fn an_output_with_images_is_a_list_of_text_and_images() {
        let plain = to_input(&output("c1"));
        assert_eq!(plain["output"], "ok");
        let with = to_input(&Item::FunctionOutput {
            call_id: "c1".into(),
            output: "see".into(),
            images: vec![agentx_shared::conversation::ToolImage {
                mime: "image/png".into(),
                base64: "iVBO".into(),
            }],
        });
        assert_eq!(
            with["output"],
            json!([
                {"type": "input_text", "text": "see"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBO"}
            ])
        );
    }

    #[test]
    fn unanswered_calls_get_aborted_outputs_and_orphans_are_dropped() {
        let items = vec![
            user("a"),
            call("c1"),
            call("c2"),
            output("c2"),
            output("ghost"),
            user("b"),
            call("c3"),
        ];
        let got = normalize(&items);
        assert_eq!(
            got,
            vec![
                user("a"),
                call("c1"),
                call("c2"),
                Item::FunctionOutput {
                    call_id: "c1".into(),
                    output: ABORTED.into(),
                    images: Vec::new(),
                },
                output("c2"),
                user("b"),
                call("c3"),
                Item::FunctionOutput {
                    call_id: "c3".into(),
                    output: ABORTED.into(),
                    images: Vec::new(),
                },
            ]
        );
    }

    #[test]
    fn every_call_is_answered_exactly_once() {
        let items = vec![call("c1"), output("c1"), output("c1"), user("x")];
        let got = normalize(&items);
        assert_eq!(
            got.iter()
                .filter(|i| matches!(i, Item::FunctionOutput { .. }))
                .count(),
            1
        );
    }
}
