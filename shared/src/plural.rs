//! Counts in words: `1 turn`, `2 turns`, `1 directory`, `3 directories` — never `turn(s)`.

/// `n` and the noun, singular for one: `count(1, "turn")` is `1 turn`.
/// Nouns ending in a consonant and `y` take `ies`; `s`, `x`, `ch`, `sh`
/// take `es`; the rest `s`.
pub fn count(n: impl TryInto<u64>, noun: &str) -> String {
    let n = n.try_into().unwrap_or(u64::MAX);
    if n == 1 {
        return format!("1 {noun}");
    }
    format!("{n} {}", plural(noun))
}

fn plural(noun: &str) -> String {
    let vowel = |c: char| "aeiou".contains(c);
    if let Some(stem) = noun.strip_suffix('y')
        && stem.chars().last().is_some_and(|c| !vowel(c))
    {
        return format!("{stem}ies");
    }
    if ["s", "x", "ch", "sh"].iter().any(|e| noun.ends_with(e)) {
        return format!("{noun}es");
    }
    format!("{noun}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_the_rest_plural() {
        assert_eq!(count(1u32, "turn"), "1 turn");
        assert_eq!(count(0u32, "turn"), "0 turns");
        assert_eq!(count(2u32, "directory"), "2 directories");
        assert_eq!(count(1u32, "directory"), "1 directory");
        assert_eq!(count(3u32, "path"), "3 paths");
        assert_eq!(count(2u32, "day"), "2 days");
        assert_eq!(count(2u32, "match"), "2 matches");
        assert_eq!(count(2u32, "tool call"), "2 tool calls");
    }
}
