//! The cost of token accounting per turn, beside the request body every turn
//! serializes anyway (the baseline). `scripts/bench context` runs it.

use std::hint::black_box;
use std::time::{Duration, Instant};

use agentd::benching::{Budget, Counter, compose};
use agentx_shared::conversation::Item;

/// One turn's new items: a 2 KB message, a tool call with 16 KB of output,
/// and a 4 KB answer.
fn turn_items() -> (String, Vec<Item>) {
    let message = "Please refactor the parser so that errors carry spans. ".repeat(36);
    let output = "src/parser.rs:120: warning: unused variable `span`\n".repeat(320);
    let items = vec![
        Item::FunctionCall {
            call_id: "call_1".into(),
            name: "shell".into(),
            arguments: r#"{"command":"cargo build 2>&1 | tail -n 400"}"#.into(),
        },
        Item::FunctionOutput {
            call_id: "call_1".into(),
            output,
            images: Vec::new(),
        },
        Item::Assistant {
            text: "I changed the error type to carry a span. ".repeat(95),
        },
    ];
    (message, items)
}

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

fn time(runs: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..runs / 10 {
        f();
    }
    let samples = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    median(samples)
}

fn main() {
    let (message, items) = turn_items();
    let runs = 2000;
    let body = |message: &str| {
        serde_json::json!({
            "model": "gpt-4o", "input": [{"role": "user", "content": message}],
            "tools": [{"type": "function", "name": "shell"}], "stream": true, "store": true,
        })
        .to_string()
    };
    let baseline = time(runs, || {
        black_box(body(black_box(&message)));
    });
    println!("context: token accounting per turn (median of {runs}; µs)");
    println!("  baseline: the turn's request body serialized      {baseline:8.1} µs");
    for (name, model) in [
        ("tiktoken (gpt-4o)", "gpt-4o"),
        ("bytes/4 (local)", "qwen2.5-coder"),
    ] {
        let counter = Counter::for_model(model);
        counter.text("warm up the tokenizer");
        // What a turn counts: its message before sending, the tool outputs
        // between steps, the answer when the server reports no usage.
        let cost = time(runs, || {
            black_box(counter.text(black_box(&message)) + counter.items(black_box(&items)));
        });
        println!(
            "  accounting, {name:<18}                 {cost:8.1} µs  ({:.2}× the baseline)",
            cost / baseline
        );
    }
    // A compaction's own arithmetic (the model's summary call aside).
    let view: Vec<Item> = (0..600)
        .flat_map(|i| {
            [
                Item::User {
                    text: format!("request {i}: {}", "x".repeat(300)),
                },
                Item::Assistant {
                    text: "done ".repeat(60),
                },
            ]
        })
        .collect();
    let counter = Counter::for_model("qwen2.5-coder");
    let compose_cost = time(50, || {
        black_box(compose(
            "summary",
            &view,
            &Budget::new(32_768, Some(27_852)),
            &counter,
            200,
        ));
    });
    println!("  composing a compacted context (1,200 items)         {compose_cost:8.1} µs");
}
