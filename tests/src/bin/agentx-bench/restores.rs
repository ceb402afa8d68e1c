//! `agentx-bench restores`: what a big restore in one folder costs another.
//! Folder A (20,000 files) is rewound back and forth between two snapshots,
//! every file rewritten each time, while folder B's snapshot RPC (what a
//! turn's tools wait for) is timed; beside it, the same RPC in the same
//! agentd with nothing else going on. `AGENTX_BENCH_RESTORE_FILES` sets A's
//! size.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tonic::transport::Channel;

use agentx_shared::proto::snapshots_client::SnapshotsClient;
use agentx_shared::proto::{RestoreRequest, Scope, TakeSnapshotRequest, restore_request};
use agentx_tests::TestEnv;

/// B's snapshots per phase (at least), one every [`EVERY`] (or as soon as
/// the last returns, when later); under load, for [`REWINDS`] rewinds of A
/// at least.
const SAMPLES: usize = 150;
const REWINDS: usize = 3;
const EVERY: Duration = Duration::from_millis(20);
/// The goal of the issue that asked for it: p99 under load at most this
/// many times the idle p99, plus [`SLACK_MS`].
const P99_FACTOR: f64 = 3.0;
const SLACK_MS: f64 = 10.0;

pub fn bench_restores() -> anyhow::Result<()> {
    let files: usize = std::env::var("AGENTX_BENCH_RESTORE_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let env = TestEnv::new();
    crate::start_daemon(&env)?;
    let root = std::fs::canonicalize(env.root())?;
    let a = root.join("a");
    let b = root.join("b");
    crate::write_tree(&a, files, "first")?;
    crate::write_tree(&b, 20, "b")?;
    let scope = |dir: &Path| Scope {
        folder: dir.display().to_string(),
        agent: "default".into(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let channel = agentx_shared::transport::connect(&env.socket()).await?;
        let mut client = SnapshotsClient::new(channel.clone());
        // A's two states, each a snapshot.
        let first = take(&mut client, scope(&a)).await?.id;
        crate::write_tree(&a, files, "second")?;
        let second = take(&mut client, scope(&a)).await?.id;
        // Warm up B (its first snapshot is a full scan).
        for _ in 0..10 {
            take(&mut client, scope(&b)).await?;
        }

        eprintln!("restores: idle baseline");
        let idle = samples(channel.clone(), scope(&b), || true).await?;

        eprintln!("restores: B while A ({files} files) is rewound back and forth");
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        let done = Arc::new(AtomicUsize::new(0));
        let restoring = {
            let (channel, a, done) = (channel.clone(), scope(&a), Arc::clone(&done));
            tokio::spawn(async move {
                let mut client = SnapshotsClient::new(channel);
                let mut took = Vec::new();
                for to in [&first, &second].into_iter().cycle() {
                    if *stop_rx.borrow_and_update() {
                        break;
                    }
                    let t0 = Instant::now();
                    let reply = client
                        .restore(RestoreRequest {
                            scope: Some(a.clone()),
                            target: Some(restore_request::Target::RewindId(to.clone())),
                            force: true,
                        })
                        .await?
                        .into_inner();
                    if !reply.errors.is_empty() || reply.applied.len() < files {
                        bail!(
                            "a rewind of A restored {} of {files} paths: {:?}",
                            reply.applied.len(),
                            reply.errors.first()
                        );
                    }
                    took.push(t0.elapsed());
                    done.fetch_add(1, Ordering::SeqCst);
                }
                anyhow::Ok(took)
            })
        };
        // Let the first rewind get going before B is timed.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let loaded = samples(channel.clone(), scope(&b), || {
            done.load(Ordering::SeqCst) >= REWINDS
        })
        .await?;
        let _ = stop_tx.send(true);
        let took = restoring.await??;

        let (i50, i99) = (quantile_ms(&idle, 0.5), quantile_ms(&idle, 0.99));
        let (l50, l99) = (quantile_ms(&loaded, 0.5), quantile_ms(&loaded, 0.99));
        let goal = P99_FACTOR * i99 + SLACK_MS;
        println!(
            "restores: folder B's snapshot RPC while folder A is rewound ({files} files each time)"
        );
        println!(
            "   {} snapshots of B idle, {} while A was rewound, one every {} ms at most; ms",
            idle.len(),
            loaded.len(),
            EVERY.as_millis()
        );
        println!("   {:<34} {:>8} {:>8}", "", "p50", "p99");
        println!("   {:<34} {i50:>8.2} {i99:>8.2}", "idle");
        println!(
            "   {:<34} {l50:>8.2} {l99:>8.2}   goal p99 <= {goal:.1} ({})",
            "A being rewound",
            if l99 <= goal { "met" } else { "missed" }
        );
        println!(
            "   rewinds of A during the window: {}, median {:.0} ms each",
            took.len(),
            quantile_ms(&took, 0.5)
        );
        anyhow::Ok(())
    })?;
    Ok(())
}

async fn take(
    client: &mut SnapshotsClient<Channel>,
    scope: Scope,
) -> anyhow::Result<agentx_shared::proto::SnapshotInfo> {
    Ok(client
        .take_snapshot(TakeSnapshotRequest {
            scope: Some(scope),
            label: "bench".into(),
        })
        .await
        .context("taking a snapshot")?
        .into_inner())
}

/// Snapshots of `scope`, timed: [`SAMPLES`], and more until `enough`.
async fn samples(
    channel: Channel,
    scope: Scope,
    enough: impl Fn() -> bool,
) -> anyhow::Result<Vec<Duration>> {
    let mut client = SnapshotsClient::new(channel);
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut out = Vec::with_capacity(SAMPLES);
    while out.len() < SAMPLES || !enough() {
        tick.tick().await;
        let t0 = Instant::now();
        take(&mut client, scope.clone()).await?;
        out.push(t0.elapsed());
    }
    Ok(out)
}

fn quantile_ms(samples: &[Duration], q: f64) -> f64 {
    let mut v: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i.min(v.len() - 1)]
}
