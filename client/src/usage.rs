//! Token usage as agentx shows it: JSON for `--json`, one line for people.
//! Usage a server never reported is shown as unknown, never as a false 0.

use serde_json::{Value, json};

use agentx_shared::proto::Usage;

/// The `usage` object of `status`, `checkpoints` and `exec --json`. When no
/// response reported usage, the counts are `null`; `unreported_responses`
/// says how many responses the totals leave out.
pub fn json(u: &Usage) -> Value {
    let unknown = agentx_shared::conversation::Usage::from(u).unknown();
    let n = |v: u64| if unknown { Value::Null } else { json!(v) };
    json!({
        "input_tokens": n(u.input_tokens),
        "cached_tokens": n(u.cached_tokens),
        "output_tokens": n(u.output_tokens),
        "reasoning_tokens": n(u.reasoning_tokens),
        "total_tokens": n(u.total_tokens),
        "reported": u.unreported_responses == 0,
        "unreported_responses": u.unreported_responses,
    })
}

/// `1234 total = 1000 in (200 cached) + 234 out (10 reasoning)`, or why not.
pub fn line(u: &Usage) -> String {
    if agentx_shared::conversation::Usage::from(u).unknown() {
        return format!(
            "not reported by the model server ({})",
            agentx_shared::plural::count(u.unreported_responses, "response")
        );
    }
    let mut text = format!(
        "{} total = {} in ({} cached) + {} out ({} reasoning)",
        u.total_tokens, u.input_tokens, u.cached_tokens, u.output_tokens, u.reasoning_tokens
    );
    if u.unreported_responses > 0 {
        text.push_str(&format!(
            "; {} without usage not counted",
            agentx_shared::plural::count(u.unreported_responses, "response")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreported_usage_is_null_never_zero() {
        let none = Usage {
            unreported_responses: 2,
            ..Usage::default()
        };
        let v = json(&none);
        assert_eq!(v["total_tokens"], Value::Null);
        assert_eq!(v["reported"], false);
        assert!(line(&none).starts_with("not reported"));
        let some = Usage {
            input_tokens: 10,
            output_tokens: 5,
            total_tokens: 15,
            unreported_responses: 1,
            ..Usage::default()
        };
        assert_eq!(json(&some)["total_tokens"], 15);
        assert!(line(&some).contains("1 response without usage"));
        let all = Usage {
            total_tokens: 3,
            ..Usage::default()
        };
        assert_eq!(json(&all)["reported"], true);
    }
}
