//! The agentx columns of the snapshot benchmark: agentd (with the watcher or
//! with full scans) taking, undoing and restoring snapshots, and messages.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tonic::transport::Channel;

use agentx_shared::proto::snapshots_client::SnapshotsClient;
use agentx_shared::proto::{
    ProviderSettings, RestoreRequest, Scope, TakeSnapshotRequest, restore_request, turn_event,
};
use agentx_tests::TestEnv;
use agentx_tests::fake_model::FakeModel;

use super::tree::{change_restore_dirs, touch_files};
use super::{RESTORE_DIRS, SnapResults};
use crate::{median_ms, open_message};

/// One agentd configuration under measurement.
struct Bench<'a> {
    tree: &'a Path,
    files: &'a [PathBuf],
    /// With the watcher, or with full scans (`AGENTX_WATCH=off`).
    watch: bool,
    runs: usize,
    /// The tree's scope.
    scope: Scope,
    /// Rounds of edits distinct from the other configuration's.
    base: usize,
}

/// The agentx column with or without the watcher: the same rows as the
/// baselines', plus the message rows; medians.
pub(super) async fn bench_agentx(
    tree: &Path,
    files: &[PathBuf],
    watch: bool,
    runs: usize,
    model: &FakeModel,
) -> anyhow::Result<SnapResults> {
    let bench = Bench::new(tree, files, watch, runs);
    let first = bench.first_snapshots().await?;

    let env = bench.start_env()?;
    let channel = agentx_shared::transport::connect(&env.socket()).await?;
    let client = SnapshotsClient::new(channel.clone());
    let (watch_status, same, ten, undo) = bench.steady(&env, &client).await?;
    // The log of the steady-state rows (see the `snapshots` module comment).
    if let Ok(to) = std::env::var("AGENTX_BENCH_LOG_TO") {
        std::fs::copy(env.home.join("log/agentd.log"), format!("{to}.{watch}"))?;
    }
    let (message_tree, message_empty) = bench.messages(&env, &channel, model).await?;
    let restore = bench.restores(&client).await?;
    let log = std::fs::read_to_string(env.home.join("log/agentd.log")).unwrap_or_default();
    let live_undo = live_check_us(&log, 10);
    let live_restore = live_check_us(&log, RESTORE_DIRS * 100);
    let store = bench.store_size(&env, &client).await?;
    let _ = env.run(["daemon", "stop"]);
    Ok(SnapResults {
        first: median_ms(first),
        same: median_ms(same),
        ten: median_ms(ten),
        undo: median_ms(undo),
        restore: median_ms(restore),
        store,
        message_tree,
        message_empty,
        message_overhead: message_tree - message_empty,
        watch_status,
        live_undo,
        live_restore,
    })
}

/// The module whose debug lines time the restore's live check.
const LIVE_CHECK_TARGET: &str = "agentd::snapshot::undo";

/// The median time (µs) of agentd's live checks over `paths` paths, from
/// its "live check paths=N differ=D us=T" debug lines.
fn live_check_us(log: &str, paths: usize) -> Option<f64> {
    let field = |line: &str, name: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
    };
    let mut us: Vec<f64> = log
        .lines()
        .filter(|l| l.contains("live check"))
        .filter(|l| field(l, "paths=") == Some(paths as u64))
        .filter_map(|l| field(l, "us=").map(|v| v as f64))
        .collect();
    if us.is_empty() {
        return None;
    }
    us.sort_by(f64::total_cmp);
    Some(us[us.len() / 2])
}

/// Only the first-snapshot row of one configuration: the median, ms.
pub(super) async fn first_snapshot_ms(
    tree: &Path,
    files: &[PathBuf],
    watch: bool,
    runs: usize,
) -> anyhow::Result<f64> {
    Ok(median_ms(
        Bench::new(tree, files, watch, runs)
            .first_snapshots()
            .await?,
    ))
}

/// agentd's resident anonymous memory (KiB) with nothing snapshotted, right
/// after the first snapshot of `tree` (with the watcher), and once agentd
/// was idle for 3 s: what holding a watched tree costs.
pub(super) async fn first_snapshot_memory(
    tree: &Path,
    files: &[PathBuf],
) -> anyhow::Result<[u64; 3]> {
    let bench = Bench::new(tree, files, true, 1);
    let env = bench.start_env()?;
    let pid = *env.daemon_pids().first().context("no agentd")?;
    let anon = || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("RssAnon:"))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(0)
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = anon();
    let client = SnapshotsClient::new(agentx_shared::transport::connect(&env.socket()).await?);
    bench.take(&client).await?;
    let after = anon();
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok([before, after, anon()])
}

/// An unchanged snapshot of the tree (watched) while its manifest is kept
/// in memory, and right after a small folder's snapshot pushed it out
/// (agentd keeps at most 100,000 entries of folders not in use): medians,
/// ms. `other` is an empty directory for the small folder.
pub(super) async fn resident_snapshot_ms(
    tree: &Path,
    files: &[PathBuf],
    other: &Path,
    runs: usize,
) -> anyhow::Result<[f64; 2]> {
    let bench = Bench::new(tree, files, true, runs);
    let env = bench.start_env()?;
    let client = SnapshotsClient::new(agentx_shared::transport::connect(&env.socket()).await?);
    std::fs::write(other.join("f"), "f")?;
    let small = Scope {
        folder: other.display().to_string(),
        agent: "default".into(),
    };
    bench.take(&client).await?;
    // Past the racy window: the unchanged snapshots re-read nothing.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (mut kept, mut back) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        kept.push(bench.take(&client).await?);
        client
            .clone()
            .take_snapshot(TakeSnapshotRequest {
                scope: Some(small.clone()),
                label: String::new(),
            })
            .await?;
        back.push(bench.take(&client).await?);
    }
    Ok([median_ms(kept), median_ms(back)])
}

impl<'a> Bench<'a> {
    /// The configuration `watch` on `tree` (its edits distinct from the
    /// other configuration's).
    fn new(tree: &'a Path, files: &'a [PathBuf], watch: bool, runs: usize) -> Self {
        Self {
            tree,
            files,
            watch,
            runs,
            scope: Scope {
                folder: tree.display().to_string(),
                agent: "default".into(),
            },
            base: if watch { 0 } else { 1000 },
        }
    }
}

impl Bench<'_> {
    /// A new profile with agentd started in this configuration (and the
    /// `AGENTX_BENCH_LOG` filter, see the `snapshots` module comment).
    fn start_env(&self) -> anyhow::Result<TestEnv> {
        let mut env = TestEnv::new();
        if !self.watch {
            env.extra_env.push(("AGENTX_WATCH".into(), "off".into()));
        }
        // The live check's own timings (debug lines of agentd's undo
        // module) are read back from the log: see [`live_check_us`].
        let filter = std::env::var("AGENTX_BENCH_LOG").unwrap_or_else(|_| "info".into());
        env.extra_env.push((
            "AGENTX_LOG".into(),
            format!("{filter},{LIVE_CHECK_TARGET}=debug"),
        ));
        if !env.run(["daemon", "start"]).status.success() {
            bail!("agentd did not start");
        }
        Ok(env)
    }

    /// One snapshot of the tree, timed.
    async fn take(&self, client: &SnapshotsClient<Channel>) -> anyhow::Result<Duration> {
        let mut c = client.clone();
        let scope = self.scope.clone();
        let t = Instant::now();
        c.take_snapshot(TakeSnapshotRequest {
            scope: Some(scope),
            label: String::new(),
        })
        .await?;
        Ok(t.elapsed())
    }

    /// A rewind to the snapshot before the newest (pre-restore snapshot
    /// included), timed; it must restore `expect` paths.
    async fn rewind(
        &self,
        client: &SnapshotsClient<Channel>,
        expect: usize,
    ) -> anyhow::Result<Duration> {
        let mut c = client.clone();
        let scope = self.scope.clone();
        let t = Instant::now();
        let reply = c
            .restore(RestoreRequest {
                scope: Some(scope),
                target: Some(restore_request::Target::RewindIndex(2)),
                force: true,
            })
            .await?
            .into_inner();
        let took = t.elapsed();
        if reply.applied.len() != expect || !reply.errors.is_empty() {
            bail!(
                "the rewind restored {} paths, expected {expect} ({:?})",
                reply.applied.len(),
                reply.errors.first()
            );
        }
        Ok(took)
    }

    /// Three first snapshots, each by a fresh agentd into a fresh store.
    async fn first_snapshots(&self) -> anyhow::Result<Vec<Duration>> {
        let mut first = Vec::new();
        for _ in 0..3 {
            let env = self.start_env()?;
            let client =
                SnapshotsClient::new(agentx_shared::transport::connect(&env.socket()).await?);
            first.push(self.take(&client).await?);
        }
        Ok(first)
    }

    /// agentd's watch status, then samples of the steady-state rows:
    /// unchanged re-snapshots, snapshots after 10 files changed, and undos
    /// of them.
    async fn steady(
        &self,
        env: &TestEnv,
        client: &SnapshotsClient<Channel>,
    ) -> anyhow::Result<(String, Vec<Duration>, Vec<Duration>, Vec<Duration>)> {
        self.take(client).await?;
        // Let the racy window pass so the stat cache is trusted.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        self.take(client).await?;
        let watch_status = self.watch_status(env)?;
        let mut same = Vec::new();
        for _ in 0..self.runs {
            same.push(self.take(client).await?);
        }
        let (mut ten, mut undo) = (Vec::new(), Vec::new());
        for round in 0..self.runs {
            touch_files(self.files, self.base + round, 10)?;
            ten.push(self.take(client).await?);
            // Undo those 10 files: rewind to the snapshot before them (2 = the
            // one before the newest), pre-restore snapshot included.
            undo.push(self.rewind(client, 10).await?);
            self.take(client).await?;
        }
        Ok((watch_status, same, ten, undo))
    }

    /// What `agentx status` says of the tree's snapshot watch.
    fn watch_status(&self, env: &TestEnv) -> anyhow::Result<String> {
        let status = env
            .agentx(["status", "--json"])
            .current_dir(self.tree)
            .output()?;
        Ok(serde_json::from_slice::<serde_json::Value>(&status.stdout)
            .ok()
            .and_then(|v| v["snapshot_watch"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "(status did not say)".into()))
    }

    /// Whole messages, no tool call: medians in the tree and in an empty
    /// folder, in milliseconds.
    async fn messages(
        &self,
        env: &TestEnv,
        channel: &Channel,
        model: &FakeModel,
    ) -> anyhow::Result<(f64, f64)> {
        let provider = crate::fake_provider(model);
        let empty = Scope {
            folder: std::fs::canonicalize(&env.work)?.display().to_string(),
            agent: "default".into(),
        };
        let mut sessions = Vec::new();
        for s in [&self.scope, &empty] {
            sessions.push(crate::new_session(channel, s).await?);
        }
        let (mut in_tree, mut in_empty) = (Vec::new(), Vec::new());
        for i in 0..3 + 2 * self.runs {
            let t = timed_message(channel, &self.scope, &sessions[0], &provider, i).await?;
            let e = timed_message(channel, &empty, &sessions[1], &provider, i).await?;
            if i >= 3 {
                in_tree.push(t);
                in_empty.push(e);
            }
        }
        Ok((median_ms(in_tree), median_ms(in_empty)))
    }

    /// A large restore: every file of [`RESTORE_DIRS`] directories changed,
    /// then put back by a rewind (after the racy window, as an undo read
    /// after the result is); three of them, then a snapshot.
    async fn restores(&self, client: &SnapshotsClient<Channel>) -> anyhow::Result<Vec<Duration>> {
        let mut restore = Vec::new();
        for rep in 0..3 {
            self.take(client).await?;
            change_restore_dirs(self.tree, &format!("agentx {} {rep}", self.watch))?;
            self.take(client).await?;
            tokio::time::sleep(Duration::from_millis(2500)).await;
            restore.push(self.rewind(client, RESTORE_DIRS * 100).await?);
        }
        self.take(client).await?;
        Ok(restore)
    }

    /// Store size in bytes after 50 snapshots with 10 files changed each.
    async fn store_size(
        &self,
        env: &TestEnv,
        client: &SnapshotsClient<Channel>,
    ) -> anyhow::Result<u64> {
        for round in 0..50 {
            touch_files(self.files, self.base + 3000 + round, 10)?;
            self.take(client).await?;
        }
        Ok(crate::dir_bytes(&env.home.join("checkpoints")))
    }
}

/// One message through agentd with a fake provider that answers with text
/// at once (no tool call): the time until the turn is finished.
async fn timed_message(
    channel: &Channel,
    scope: &Scope,
    session: &str,
    provider: &ProviderSettings,
    i: usize,
) -> anyhow::Result<Duration> {
    let (tx, t0, mut events) = open_message(channel, scope, session, provider, i).await?;
    while let Some(event) = events.message().await? {
        if let Some(turn_event::Event::Finished(f)) = event.event {
            if f.status != agentx_shared::proto::TurnStatus::Completed as i32 {
                bail!("message {i} failed: {}", f.error);
            }
            drop(tx);
            return Ok(t0.elapsed());
        }
    }
    bail!("message {i}: the stream ended without a finish")
}
