//! A conversation's line, identified by content: each record's *chain* is the
//! hash of the line up to and including it, so two copies agree by hash, never by count.
//!
//! A chain value is only ever compared with one computed from the same base
//! (the server's head a push continues from, or the empty line), so the
//! exact bytes hashed need only be the same on every machine: the record's
//! time and its item as canonical JSON (object keys sorted at every depth;
//! PostgreSQL's `jsonb` reorders keys, so the order as read is meaningless).

use std::fmt::Write as _;

use serde_json::Value;

/// The chain after a record (`at` ms, `item`) that follows the line whose
/// chain is `prev` ("" for the empty line).
pub fn next(prev: &str, at: i64, item: &Value) -> String {
    let mut text = String::new();
    canonical(item, &mut text);
    let mut hasher = blake3::Hasher::new();
    hasher.update(prev.as_bytes());
    hasher.update(b"\n");
    hasher.update(at.to_string().as_bytes());
    hasher.update(b"\n");
    hasher.update(text.as_bytes());
    hasher.finalize().to_hex().to_string()
}

/// `value` as JSON with every object's keys sorted.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (n, key) in keys.into_iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                push_json(&Value::String(key.clone()), out);
                out.push(':');
                if let Some(v) = map.get(key) {
                    canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (n, v) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        scalar => push_json(scalar, out),
    }
}

fn push_json(scalar: &Value, out: &mut String) {
    // Writing a scalar into a String cannot fail.
    let _ = write!(out, "{scalar}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_depends_on_content_and_order_not_on_key_order() {
        let a: Value =
            serde_json::from_str(r#"{"type":"user","text":"hi","x":{"b":1,"a":2}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"x":{"a":2,"b":1},"text":"hi","type":"user"}"#).unwrap();
        assert_eq!(next("", 5, &a), next("", 5, &b));
        assert_ne!(next("", 5, &a), next("", 6, &a));
        let other: Value = serde_json::from_str(r#"{"type":"user","text":"hi!"}"#).unwrap();
        assert_ne!(next("", 5, &a), next("", 5, &other));
        // The same record after different lines differs.
        let one = next("", 1, &other);
        assert_ne!(next(&one, 5, &a), next("", 5, &a));
        let mut text = String::new();
        canonical(&b, &mut text);
        assert_eq!(text, r#"{"text":"hi","type":"user","x":{"a":2,"b":1}}"#);
    }
}
