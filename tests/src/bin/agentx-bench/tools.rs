//! `agentx-bench tools`: one-shots whose reply asks for 1, 10 or 1,000 tool
//! calls (50 run, the rest answered as not run) beside one with no call,
//! then the per-call commit cost (agentd's `benches/calls.rs`).

use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use serde_json::json;

use agentx_tests::TestEnv;
use agentx_tests::fake_model::{FakeModel, Reply};

use crate::{median_ms, time_command};

pub fn bench_tools() -> anyhow::Result<()> {
    let env = TestEnv::new();
    let model = FakeModel::start();
    let exec = || {
        let mut cmd = env.agentx(["exec", "--auto", "go"]);
        cmd.env("AGENTX_BASE_URL", model.base_url())
            .env("AGENTX_MODEL", "fake-model")
            .env("OPENAI_API_KEY", "bench")
            .stdin(Stdio::null());
        cmd
    };
    const RUNS: usize = 7;
    println!("== tools: a one-shot whose reply asks for N `true` calls (median of {RUNS}, ms)");
    let baseline = median_ms(time_command(exec, RUNS)?);
    println!("  no call (baseline)                      {baseline:8.1}");
    for n in [1usize, 10, 1000] {
        let calls: Vec<(String, serde_json::Value)> = (0..n)
            .map(|_| ("shell".to_owned(), json!({ "command": "true" })))
            .collect();
        let samples = time_command(
            || {
                model.push(Reply::ToolCalls(calls.clone()));
                exec()
            },
            RUNS,
        )?;
        let ms = median_ms(samples);
        println!(
            "  {n:>5} calls ({:>2} run, {:>3} refused)        {ms:8.1}  ({:.1}× the baseline)",
            n.min(50),
            n.saturating_sub(50),
            ms / baseline
        );
    }
    let status = Command::new("cargo")
        .args(["bench", "--quiet", "-p", "agentd", "--bench", "calls"])
        .status()
        .context("cargo bench")?;
    if !status.success() {
        bail!("the commit-cost benchmark failed: {status}");
    }
    Ok(())
}
