//! Clients that never read their turn's events cost agentd bounded memory:
//! live output past the bounds is dropped (and said so), never queued.

use std::time::{Duration, Instant};

use agentx_tests::at_server::run_at;
use agentx_tests::fake_model::FakeModel;
use agentx_tests::{TestEnv, assert_code};

/// Streams opened and never read.
const STREAMS: usize = 20;
/// Output of each stream's command.
const OUTPUT: usize = 20_000_000;

fn rss_mib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib >> 10
}

#[test]
fn streams_nobody_reads_hold_bounded_memory() {
    use agentx_shared::proto::{ApprovalPolicy, TurnStart};
    let env = TestEnv::new();
    let model = FakeModel::start();
    // Warm up: agentd up, one turn with a command run.
    let out = run_at(
        &env,
        &model.base_url(),
        &["exec", "--auto", "CALL echo warm"],
    );
    assert_code(&out, 0);
    let pid = env.daemon_pids()[0];
    let before = rss_mib(pid, "VmHWM:");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let held = runtime.block_on(async {
        let mut held = Vec::new();
        for i in 0..STREAMS {
            let start = TurnStart {
                oneshot: true,
                ..env.turn_start(
                    &model,
                    &format!("CALL head -c {OUTPUT} /dev/zero | tr '\\0' x; touch done-{i}"),
                    ApprovalPolicy::Auto,
                )
            };
            held.push(agentx_tests::open_turn(&env.socket(), start).await);
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while (0..STREAMS).any(|i| !env.work.join(format!("done-{i}")).exists()) {
            assert!(Instant::now() < deadline, "the commands did not all run");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Every command's output read by agentd and handed on (or not).
        tokio::time::sleep(Duration::from_secs(2)).await;
        held
    });
    let peak = rss_mib(pid, "VmHWM:");
    let grew = peak.saturating_sub(before);
    eprintln!("GREW {grew} MiB (from {before} to {peak})");
    // 400 MB of output went to clients that read none of it; at most
    // 128 KiB each (16 MiB in all) may wait for them. (Unbounded, agentd
    // grew by 183 MiB here; bounded, by 18.)
    assert!(
        grew < 80,
        "agentd grew by {grew} MiB (from {before} to {peak}) for {STREAMS} streams nobody read"
    );
    drop(held);
    drop(runtime);
}
