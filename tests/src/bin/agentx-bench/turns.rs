//! `agentx-bench turns`: per-turn latency through agentd as a conversation grows, beside the model directly.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use agentx_shared::proto::{ProviderSettings, Scope, turn_event};
use agentx_tests::TestEnv;
use agentx_tests::fake_model::{FakeModel, post_and_hold};
use tonic::transport::Channel;

use crate::{median_ms, open_message};

/// Turns for the long-conversation benchmark (AGENTX_BENCH_TURNS, default 5000).
pub fn turn_count() -> usize {
    std::env::var("AGENTX_BENCH_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000)
}

/// Turns at each end of the conversation whose medians are compared.
const WINDOW: usize = 100;

/// Persistence cost early vs late in one long conversation, and the
/// latency agentx adds before the first streamed token.
pub fn bench_turns(turns: usize) -> anyhow::Result<()> {
    if turns < 2 * WINDOW {
        bail!("need at least {} turns", 2 * WINDOW);
    }
    let env = TestEnv::new();
    crate::start_daemon(&env)?;
    let model = FakeModel::start();
    model.set_lean(true);
    let direct = direct_first_tokens(&model)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (first_token, totals) = runtime.block_on(conversation(&env, &model, turns))?;
    let sizes = session_file_sizes(&env.home.join("sessions"));
    print_report(turns, &totals, &first_token, direct, sizes);
    Ok(())
}

/// Baseline: the fake server's own time to its first text delta.
fn direct_first_tokens(model: &FakeModel) -> anyhow::Result<Vec<Duration>> {
    let mut direct = Vec::new();
    let body = serde_json::json!({"model": "m", "input": "hi", "stream": true, "store": false});
    for _ in 0..WINDOW {
        let start = Instant::now();
        let (status, mut reader) = post_and_hold(&model.responses_url(), &body);
        if status != 200 {
            bail!("fake server answered {status}");
        }
        let mut line = String::new();
        loop {
            line.clear();
            if std::io::BufRead::read_line(&mut reader, &mut line)? == 0 {
                bail!("stream ended before a text delta");
            }
            if line.contains("response.output_text.delta") {
                break;
            }
        }
        direct.push(start.elapsed());
    }
    Ok(direct)
}

/// One conversation of `turns` messages through agentd: each turn's time
/// to its first text delta and to its finish.
async fn conversation(
    env: &TestEnv,
    model: &FakeModel,
    turns: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let channel = agentx_shared::transport::connect(&env.socket()).await?;
    let scope = Scope {
        folder: env.work.display().to_string(),
        agent: "default".into(),
    };
    let session = crate::new_session(&channel, &scope).await?;
    let provider = crate::fake_provider(model);
    let mut first_token = Vec::with_capacity(turns);
    let mut totals = Vec::with_capacity(turns);
    for i in 0..turns {
        let (first, total) = timed_turn(&channel, &scope, &session, &provider, i).await?;
        first_token.push(first);
        totals.push(total);
        if (i + 1) % 1000 == 0 {
            eprintln!("  {} turns done", i + 1);
        }
    }
    Ok((first_token, totals))
}

/// Turn `i`: the time to its first text delta and to its finish.
pub async fn timed_turn(
    channel: &Channel,
    scope: &Scope,
    session: &str,
    provider: &ProviderSettings,
    i: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let (tx, t0, mut events) = open_message(channel, scope, session, provider, i).await?;
    let mut first = None;
    while let Some(event) = events.message().await? {
        match event.event {
            Some(turn_event::Event::TextDelta(_)) if first.is_none() => first = Some(t0.elapsed()),
            Some(turn_event::Event::Finished(f)) => {
                if f.status != agentx_shared::proto::TurnStatus::Completed as i32 {
                    bail!("turn {i} failed: {}", f.error);
                }
                break;
            }
            _ => {}
        }
    }
    drop(tx);
    let first = first.context("no text delta")?;
    Ok((first, t0.elapsed()))
}

fn print_report(
    turns: usize,
    totals: &[Duration],
    first_token: &[Duration],
    direct: Vec<Duration>,
    sizes: (u64, u64),
) {
    let early = median_ms(totals[..WINDOW].to_vec());
    let late = median_ms(totals[turns - WINDOW..].to_vec());
    println!("== turns: one conversation of {turns} turns, fake provider answering at once");
    println!(
        "{:<58} {:>8.2} ms",
        format!("turn time, median of turns 1-{WINDOW}"),
        early
    );
    println!(
        "{:<58} {:>8.2} ms",
        format!("turn time, median of turns {}-{turns}", turns - WINDOW + 1),
        late
    );
    println!("{:<58} {:>9.2}x", "late / early", late / early);
    let via = median_ms(first_token[..WINDOW].to_vec());
    let floor = median_ms(direct);
    println!(
        "{:<58} {:>8.2} ms",
        "first token straight from the fake server (median)", floor
    );
    println!(
        "{:<58} {:>8.2} ms",
        format!("first token through agentd (median of turns 1-{WINDOW})"),
        via
    );
    println!(
        "{:<58} {:>8.2} ms",
        "added by agentd (difference of medians)",
        via - floor
    );
    println!(
        "{:<58} {:>8} B",
        "state document after the last turn", sizes.0
    );
    println!(
        "{:<58} {:>8} B",
        "transcript journal after the last turn", sizes.1
    );
}

/// Sizes of the (single) conversation's state document and journal.
fn session_file_sizes(dir: &std::path::Path) -> (u64, u64) {
    let mut doc = 0;
    let mut journal = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                stack.push(path);
            } else if name.ends_with(".jsonl") {
                journal = entry.metadata().map(|m| m.len()).unwrap_or(0);
            } else if name.ends_with(".json") && name != "current.json" && name != "shared.json" {
                doc = entry.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    (doc, journal)
}
