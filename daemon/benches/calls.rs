//! What committing one tool call's state costs, at 10 and at 1,000 calls
//! pending: one append to the calls log beside the old whole-document
//! rewrite (the baseline); and what a turn pays for the tool environment's
//! scrub and the terminal sanitizer, beside a plain copy of the same data.
//! `scripts/bench tools` runs it.

use std::time::{Duration, Instant};

use agentd::benching::CallsBench;

fn median_us(mut samples: Vec<Duration>) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

fn time(runs: usize, mut f: impl FnMut() -> std::io::Result<()>) -> std::io::Result<f64> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        f()?;
        samples.push(start.elapsed());
    }
    Ok(median_us(samples))
}

/// A terminal's environment: 60 variables, a few of them secrets.
fn caller_env() -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    (0..55)
        .map(|i| (format!("VAR_{i}"), "/usr/local/bin:/usr/bin:/bin".repeat(2)))
        .chain([
            ("OPENAI_API_KEY".to_owned(), "sk-bench-key".to_owned()),
            ("GITHUB_TOKEN".to_owned(), "ghp-x".to_owned()),
            ("AWS_SECRET_ACCESS_KEY".to_owned(), "x".to_owned()),
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("HOME".to_owned(), "/home/u".to_owned()),
        ])
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

fn time_ns(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        f();
        samples.push(start.elapsed());
    }
    median_us(samples) * 1000.0
}

fn per_turn() {
    use std::hint::black_box;
    let runs = 5000;
    let env = caller_env();
    let policy = agentx_shared::shell_env::ShellEnvironment::default();
    let copy = time_ns(runs, || {
        black_box(black_box(&env).clone());
    });
    let scrub = time_ns(runs, || {
        black_box(policy.apply(black_box(&env).clone(), &["sk-bench-key"]));
    });
    println!("tools: per turn (median of {runs}, ns)");
    println!(
        "  tool environment, 60 variables: copy {copy:.0} / copy + scrub {scrub:.0} ({:.1}×)",
        scrub / copy
    );
    let answer = "The parser now carries spans; `cargo test` passes.\n".repeat(80);
    let hostile = answer.replace("spans", "\u{1b}]52;c;eA==\u{7}");
    let plain = time_ns(runs, || {
        black_box(black_box(answer.as_str()).to_owned());
    });
    let clean = time_ns(runs, || {
        black_box(agentx_shared::terminal::terminal_text(black_box(&answer)).into_owned());
    });
    let escaped = time_ns(runs, || {
        black_box(agentx_shared::terminal::terminal_text(black_box(&hostile)).into_owned());
    });
    println!(
        "  a 4 KB answer: copy {plain:.0} / sanitized {clean:.0} ({:.1}×) / with 80 escapes {escaped:.0} ({:.1}×)",
        clean / plain,
        escaped / plain
    );
}

fn main() -> std::io::Result<()> {
    per_turn();
    let runs = 200;
    println!("tools: committing one call's state (median of {runs}, µs; real fsync)");
    println!(
        "  {:>8} {:>16} {:>16} {:>8}",
        "pending", "rewrite (before)", "append (now)", "ratio"
    );
    for pending in [10, 1000] {
        let dir = tempfile::tempdir()?;
        let mut bench = CallsBench::new(dir.path(), pending)?;
        let rewrite = time(runs, || bench.rewrite())?;
        let append = time(runs, || bench.append())?;
        println!(
            "  {pending:>8} {rewrite:>16.0} {append:>16.0} {:>7.1}×",
            rewrite / append
        );
    }
    Ok(())
}
