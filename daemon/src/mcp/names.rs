//! The names the model sees for MCP tools: `mcp__<server>__<tool>`, cut to
//! the characters and length model APIs accept, collisions told apart.

use std::collections::BTreeSet;

/// The longest function name the model APIs take.
pub const MAX_NAME: usize = 64;

/// The prefix of every MCP tool's name.
pub const PREFIX: &str = "mcp__";

/// `mcp__<server>__<tool>` in `[a-zA-Z0-9_-]`, at most [`MAX_NAME`] bytes;
/// a name already in `taken` gets a short hash of the original instead of
/// its tail. The result is added to `taken`.
pub fn exposed(server: &str, tool: &str, taken: &mut BTreeSet<String>) -> String {
    let raw = format!("{PREFIX}{server}__{tool}");
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = if clean.len() <= MAX_NAME {
        clean.clone()
    } else {
        with_hash(&clean, &raw, 0)
    };
    let mut salt = 0u32;
    while taken.contains(&name) {
        salt += 1;
        name = with_hash(&clean, &raw, salt);
    }
    taken.insert(name.clone());
    name
}

/// `clean` cut so that `_` and 8 hex digits of `raw`'s hash (with `salt`)
/// fit in [`MAX_NAME`].
fn with_hash(clean: &str, raw: &str, salt: u32) -> String {
    let hash = blake3::hash(format!("{raw}\0{salt}").as_bytes());
    let hex: String = hash.to_hex().chars().take(8).collect();
    let keep = clean.len().min(MAX_NAME - 9);
    format!("{}_{hex}", &clean[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_clean_short_and_distinct() {
        let mut taken = BTreeSet::new();
        assert_eq!(
            exposed("everything", "echo", &mut taken),
            "mcp__everything__echo"
        );
        let odd = exposed("srv", "get.file/ü", &mut taken);
        assert_eq!(odd, "mcp__srv__get_file__");
        // "get.file/ü" and "get_file__" clean to the same name: told apart.
        let twin = exposed("srv", "get_file__", &mut taken);
        assert_ne!(twin, odd);
        assert!(twin.starts_with("mcp__srv__get_file___"));
        let long = exposed("srv", &"x".repeat(200), &mut taken);
        assert_eq!(long.len(), MAX_NAME);
        let long2 = exposed("srv", &"x".repeat(201), &mut taken);
        assert_ne!(long, long2);
        for n in &taken {
            assert!(n.len() <= MAX_NAME, "{n}");
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            );
        }
    }
}
