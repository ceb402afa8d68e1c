//! `agentx-bench sandbox`: what confinement costs a command. One-shots
//! running 100 `true` calls (and one with none: a turn's own time) under
//! workspace-write and danger-full-access, alternated, medians side by side.

use std::process::Stdio;

use anyhow::bail;
use serde_json::json;

use agentx_tests::TestEnv;
use agentx_tests::fake_model::{FakeModel, Reply};

use crate::{median_ms, time_command};

/// Commands per one-shot.
const CALLS: usize = 100;
/// One-shots per mode and shape.
const RUNS: usize = 7;
/// The most confinement may add to one command.
const GOAL_MS: f64 = 2.0;

pub fn bench_sandbox() -> anyhow::Result<()> {
    let env = TestEnv::new();
    let model = FakeModel::start();
    env.write_config(&format!("max_tool_calls_per_reply = {CALLS}\n"));
    let status = env.status();
    let abi = status["sandbox"]["landlock_abi"].as_u64().unwrap_or(0);
    if abi < 4 {
        bail!("this kernel offers Landlock ABI {abi}: workspace-write cannot be measured here");
    }
    let exec = |mode: &str| {
        let mut cmd = env.agentx(["exec", "--auto", "--sandbox", mode, "go"]);
        cmd.env("AGENTX_BASE_URL", model.base_url())
            .env("AGENTX_MODEL", "fake-model")
            .env("OPENAI_API_KEY", "bench")
            .stdin(Stdio::null());
        cmd
    };
    let calls: Vec<(String, serde_json::Value)> = (0..CALLS)
        .map(|_| ("shell".to_owned(), json!({ "command": "true" })))
        .collect();
    let modes = ["danger-full-access", "workspace-write"];
    // [mode][shape]: shape 0 = no call, 1 = CALLS calls.
    let mut samples = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    for _ in 0..RUNS {
        for (m, mode) in modes.iter().enumerate() {
            samples[m][0].extend(time_command(|| exec(mode), 1)?);
            samples[m][1].extend(time_command(
                || {
                    model.push(Reply::ToolCalls(calls.clone()));
                    exec(mode)
                },
                1,
            )?);
        }
    }
    let [[free_turn, free_calls], [boxed_turn, boxed_calls]] = samples.map(|s| s.map(median_ms));
    println!(
        "== sandbox: one-shots of {CALLS} `true` calls, unconfined against workspace-write \
         (Landlock ABI {abi}; median of {RUNS}, ms)"
    );
    println!("                           unconfined   sandboxed      added");
    println!(
        "  a turn, no call        {free_turn:10.1} {boxed_turn:10.1} {:10.1}",
        boxed_turn - free_turn
    );
    println!(
        "  {CALLS} calls              {free_calls:10.1} {boxed_calls:10.1} {:10.1}",
        boxed_calls - free_calls
    );
    let n = CALLS as f64;
    let per_free = (free_calls - free_turn) / n;
    let per_boxed = (boxed_calls - boxed_turn) / n;
    let added = per_boxed - per_free;
    let verdict = if added <= GOAL_MS { "met" } else { "MISSED" };
    println!(
        "  per command            {per_free:10.2} {per_boxed:10.2} {added:10.2}  (goal: at most \
         {GOAL_MS} ms added: {verdict})"
    );
    Ok(())
}
