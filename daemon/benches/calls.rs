//! What committing one tool call's state costs, at 10 and at 1,000 calls
//! pending: one append to the calls log beside the old whole-document
//! rewrite (the baseline). `scripts/bench tools` runs it.

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

fn main() -> std::io::Result<()> {
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
