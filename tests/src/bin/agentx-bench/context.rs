//! `agentx-bench context`: resuming a 3,000-turn conversation with 50
//! compactions in it, beside the same conversation never compacted (the
//! baseline): agentd's open (with the replay) and its context meter, over
//! gRPC; then the same resume of a 100,000-turn conversation beside a
//! 10-turn one (the cost is what is shown, not the conversation's length),
//! and a turn in each of those two against the fake model.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use agentx_shared::proto::open_session_request::Target;
use agentx_shared::proto::sessions_client::SessionsClient;
use agentx_shared::proto::{GetStatusRequest, OpenSessionRequest, ProviderSettings, Scope};
use agentx_tests::TestEnv;

const TURNS: usize = 3000;
const COMPACTIONS: usize = 50;
const RUNS: usize = 30;
/// The long conversation and its short baseline.
const LONG: usize = 100_000;
const SHORT: usize = 10;
/// Turns timed in each of the long and the short conversation, in turns.
const TURN_RUNS: usize = 20;

/// Writes one conversation of `turns` turns in the store's on-disk format;
/// with `compactions`, a compaction record after every `turns / compactions`
/// turns.
fn write(
    dir: &Path,
    folder: &str,
    id: &str,
    turns: usize,
    compactions: usize,
) -> anyhow::Result<u64> {
    let mut journal = String::new();
    let mut items = 0u64;
    let every = turns / compactions.max(1);
    let line = |v: Value, journal: &mut String, items: &mut u64| {
        journal.push_str(&v.to_string());
        journal.push('\n');
        *items += 1;
    };
    for t in 0..turns {
        let at = 1_700_000_000_000i64 + t as i64 * 1000;
        let user = format!(
            "turn {t}: please look at module {t} and {}",
            "fix the bug ".repeat(8)
        );
        line(
            json!({"at": at, "type": "user", "text": user}),
            &mut journal,
            &mut items,
        );
        let answer = format!(
            "done with turn {t}: {}",
            "changed the code accordingly ".repeat(12)
        );
        line(
            json!({"at": at, "type": "assistant", "text": answer}),
            &mut journal,
            &mut items,
        );
        if compactions > 0 && (t + 1) % every == 0 {
            let handoff = format!(
                "[agentx handoff] summary up to turn {t}: {}",
                "DONE: work item ".repeat(120)
            );
            let compaction = json!({"at": at, "type": "compaction", "summary": handoff,
                "context": [{"type": "user", "text": handoff},
                            {"type": "assistant", "text": "Understood."}],
                "tokens_before": 30_000, "tokens_after": 600, "replaced": 120, "reason": "auto"});
            line(compaction, &mut journal, &mut items);
        }
    }
    std::fs::write(dir.join(format!("{id}.jsonl")), &journal)?;
    let doc = json!({
        "format": 1, "id": id, "folder": folder, "agent": "default",
        "title": id, "created_at": 1_700_000_000_000i64, "updated_at": 1_700_000_000_000i64 + turns as i64 * 1000,
        "response_id": null,
        "usage": {"input_tokens": 0, "cached_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0, "total_tokens": 0},
        "last_user": "", "last_assistant": "", "pending_shell": "", "pending_calls": [],
        "turns": turns, "approve_all": false, "journal_items": items,
        "journal_bytes": journal.len(),
    });
    std::fs::write(dir.join(format!("{id}.json")), doc.to_string())?;
    Ok(journal.len() as u64)
}

pub fn bench_context() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let env = TestEnv::new();
    std::fs::create_dir_all(&env.home)?;
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o700))?;
    let folder = std::fs::canonicalize(&env.work)?;
    let text = folder.to_string_lossy().into_owned();
    let dir = env
        .home
        .join("sessions")
        .join(agentx_shared::folder::folder_key(&folder))
        .join("default");
    std::fs::create_dir_all(&dir)?;
    let plain = write(&dir, &text, "18b00000000-000001", TURNS, 0)?;
    let compacted = write(&dir, &text, "18b00000000-000002", TURNS, COMPACTIONS)?;
    let short = write(&dir, &text, "18b00000000-000003", SHORT, 0)?;
    let long = write(&dir, &text, "18b00000000-000004", LONG, 0)?;
    if !env.run(["daemon", "start"]).status.success() {
        bail!("agentd did not start");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let model = agentx_tests::fake_model::FakeModel::start();
    model.set_lean(true);
    let (base, with, short_times, long_times, turn_times) = runtime.block_on(async {
        let channel = agentx_shared::transport::connect(&env.socket())
            .await
            .context("connect to agentd")?;
        let client = SessionsClient::new(channel.clone());
        let base = resume_times(client.clone(), &text, "18b00000000-000001").await?;
        let with = resume_times(client.clone(), &text, "18b00000000-000002").await?;
        let short = resume_times(client.clone(), &text, "18b00000000-000003").await?;
        let long = resume_times(client, &text, "18b00000000-000004").await?;
        let turns = turn_times(&channel, &text, &model).await?;
        anyhow::Ok((base, with, short, long, turns))
    })?;
    let _ = env.run(["daemon", "stop"]);
    let (b50, b90) = crate::summary(base);
    let (c50, c90) = crate::summary(with);
    println!(
        "context: resuming a {TURNS}-turn conversation (open + replay + context meter, gRPC; median of {RUNS})"
    );
    println!(
        "  baseline, never compacted ({:.1} MB transcript):  median {b50:7.2} ms  p90 {b90:7.2} ms",
        plain as f64 / 1e6
    );
    println!(
        "  with {COMPACTIONS} compactions ({:.1} MB transcript):     median {c50:7.2} ms  p90 {c90:7.2} ms  ({:.2}× the baseline)",
        compacted as f64 / 1e6,
        c50 / b50
    );
    let (s50, s90) = crate::summary(short_times);
    let (l50, l90) = crate::summary(long_times);
    println!(
        "context: resuming a long conversation beside a short one (the same; median of {RUNS})"
    );
    println!(
        "  {SHORT} turns ({:.3} MB transcript):       median {s50:7.2} ms  p90 {s90:7.2} ms",
        short as f64 / 1e6
    );
    println!(
        "  {LONG} turns ({:.1} MB transcript):    median {l50:7.2} ms  p90 {l90:7.2} ms  ({:.2}× the short one; target ≤ 2×)",
        long as f64 / 1e6,
        l50 / s50
    );
    let ((s50, s90), (l50, l90)) = (crate::summary(turn_times.0), crate::summary(turn_times.1));
    println!(
        "context: a turn in each of the same two (gRPC, the fake model answering at once; median of {TURN_RUNS}, taken in turns)"
    );
    println!("  {SHORT} turns:       median {s50:7.2} ms  p90 {s90:7.2} ms");
    println!(
        "  {LONG} turns:    median {l50:7.2} ms  p90 {l90:7.2} ms  ({:.2}× the short one; target ≤ 2×)",
        l50 / s50
    );
    Ok(())
}

/// A turn's whole time in the short and in the long conversation, one
/// after the other (two of each first, to warm up).
async fn turn_times(
    channel: &tonic::transport::Channel,
    folder: &str,
    model: &agentx_tests::fake_model::FakeModel,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let scope = Scope {
        folder: folder.to_owned(),
        agent: "default".into(),
    };
    let provider = crate::fake_provider(model);
    // Over its window too and never compacted, so its first turn compacts
    // as the long one's does: what that costs at 1.8 MB, not 60.
    let (_, took) =
        crate::turns::timed_turn(channel, &scope, "18b00000000-000001", &provider, 0).await?;
    println!(
        "  the first turn in 18b00000000-000001, {TURNS} turns (not counted): {:.2} ms",
        took.as_secs_f64() * 1000.0
    );
    let (mut short, mut long) = (Vec::new(), Vec::new());
    for i in 0..TURN_RUNS + 2 {
        for (id, times) in [
            ("18b00000000-000003", &mut short),
            ("18b00000000-000004", &mut long),
        ] {
            let (_, took) = crate::turns::timed_turn(channel, &scope, id, &provider, i).await?;
            if i == 0 {
                println!(
                    "  the first turn in {id} (not counted): {:.2} ms",
                    took.as_secs_f64() * 1000.0
                );
            }
            if i >= 2 {
                times.push(took);
            }
        }
    }
    Ok((short, long))
}

/// Times opening conversation `id` and reading its status (the meter).
async fn resume_times(
    mut client: SessionsClient<tonic::transport::Channel>,
    folder: &str,
    id: &str,
) -> anyhow::Result<Vec<Duration>> {
    let scope = Some(Scope {
        folder: folder.to_owned(),
        agent: "default".into(),
    });
    let provider = ProviderSettings {
        provider: "chat".into(),
        base_url: "http://127.0.0.1:9/v1".into(),
        model: "bench-model".into(),
        ..ProviderSettings::default()
    };
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS + 3 {
        let start = Instant::now();
        client
            .open_session(OpenSessionRequest {
                scope: scope.clone(),
                target: Some(Target::Id(id.to_owned())),
            })
            .await?;
        let status = client
            .get_status(GetStatusRequest {
                scope: scope.clone(),
                session_id: id.to_owned(),
                provider: Some(provider.clone()),
            })
            .await?
            .into_inner();
        samples.push(start.elapsed());
        if status.context.is_none() {
            bail!("no context meter for {id}");
        }
    }
    // The first few warm the daemon's caches.
    Ok(samples.split_off(3))
}
