//! `agentx-bench oneshots`: one-shot cost and memory beside a direct request.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use agentx_tests::TestEnv;
use agentx_tests::fake_model::{FakeModel, post_and_hold};

use crate::{children_peak_rss_kib, median_ms, peak_rss_kib, time_command};

/// Concurrent one-shots against a fake provider that answers at once.
pub fn bench_oneshots() -> anyhow::Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    let env = TestEnv::new();
    let model = FakeModel::start();
    model.set_lean(true);
    let chat = |args: &[&str]| {
        let mut cmd = env.agentx(args);
        cmd.env("AGENTX_BASE_URL", model.base_url())
            .env("AGENTX_MODEL", "fake-model")
            .env("OPENAI_API_KEY", "bench")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    // A branch point: two interactive turns.
    let mut base = chat(&[]);
    base.stdin(Stdio::piped());
    let mut child = base.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        stdin.write_all(b"one\ntwo\n")?;
    }
    if !child.wait()?.success() {
        bail!("the base conversation failed");
    }

    // A single one-shot, process start to exit, against the provider alone.
    let direct = direct_requests(&model)?;
    let single = time_command(|| chat(&["exec", "hello"]), 50)?;
    print_single(median_ms(direct), median_ms(single));
    println!(
        "{:>6} {:>10} {:>9} {:>16} {:>16}",
        "n", "wall", "failures", "agentd peak RSS", "max client RSS"
    );
    for n in [1usize, 50, 200, 1000] {
        concurrent_row(&env, n, |i| chat(&["exec", &format!("prompt {i}")]))?;
    }
    Ok(())
}

/// 50 streamed requests straight to the fake provider, each to the end of
/// its stream.
fn direct_requests(model: &FakeModel) -> anyhow::Result<Vec<Duration>> {
    let body = serde_json::json!({"model": "m", "input": "hi", "stream": true, "store": false});
    let mut direct = Vec::new();
    for _ in 0..50 {
        let start = Instant::now();
        let (status, mut reader) = post_and_hold(&model.responses_url(), &body);
        if status != 200 {
            bail!("fake server answered {status}");
        }
        let mut sink = String::new();
        std::io::Read::read_to_string(&mut reader, &mut sink)?;
        direct.push(start.elapsed());
    }
    Ok(direct)
}

/// The single one-shot beside the provider alone (medians in ms).
fn print_single(floor: f64, one: f64) {
    println!(
        "== oneshots: concurrent `agentx exec` in one folder, fake provider answering at once"
    );
    println!(
        "{:<58} {:>8.2} ms",
        "provider alone: request to end of stream (median of 50)", floor
    );
    println!(
        "{:<58} {:>8.2} ms",
        "one `agentx exec`, process start to exit (median of 50)", one
    );
    println!(
        "{:<58} {:>8.2} ms",
        "added by agentx (difference of medians)",
        one - floor
    );
}

/// One row of the table: `n` one-shots (made by `exec`) started at once
/// against a fresh daemon, waited for, and the peak memory seen.
fn concurrent_row(env: &TestEnv, n: usize, exec: impl Fn(usize) -> Command) -> anyhow::Result<()> {
    // A fresh daemon per row, so its peak RSS belongs to this row.
    let _ = env.run(["daemon", "restart"]);
    let daemon = env.daemon_pids().first().copied().context("no agentd")?;
    let start = Instant::now();
    let mut children = Vec::with_capacity(n);
    for i in 0..n {
        children.push(exec(i).spawn()?);
    }
    let mut failures = 0;
    for mut c in children {
        if !c.wait()?.success() {
            failures += 1;
        }
    }
    let wall = start.elapsed();
    println!(
        "{:>6} {:>8.2} s {:>9} {:>12} MiB {:>12} MiB",
        n,
        wall.as_secs_f64(),
        failures,
        peak_rss_kib(daemon) / 1024,
        children_peak_rss_kib() / 1024
    );
    Ok(())
}
