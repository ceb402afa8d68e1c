//! `agentx-bench snapshots`: folder snapshots on a generated tree, agentx with and without
//! the watcher beside a shadow git repository and a plain copy.
//! To see where a snapshot's time goes: `AGENTX_BENCH_LOG=agentd::snapshot=debug` runs agentd
//! with that log filter and `AGENTX_BENCH_LOG_TO=/tmp/snap` keeps its log (per-phase timings of
//! each snapshot) as `/tmp/snap.true` (watcher) and `/tmp/snap.false` (full scans).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use agentx_shared::proto::sessions_client::SessionsClient;
use agentx_shared::proto::{
    OpenSessionRequest, ProviderSettings, Scope, open_session_request, turn_event,
};
use agentx_tests::TestEnv;
use agentx_tests::fake_model::FakeModel;

use crate::{median_ms, open_message, secs};

/// A seeded generated tree: `dirs` × `per_dir` files of 1–8 KiB.
fn generate_tree(root: &std::path::Path, dirs: usize, per_dir: usize) -> anyhow::Result<()> {
    let mut state: u64 = 0x5EED_1234_ABCD_0001;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for d in 0..dirs {
        let dir = root.join(format!("dir{d:04}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..per_dir {
            let len = 1024 + (next() % (7 * 1024)) as usize;
            let mut data = Vec::with_capacity(len);
            while data.len() < len {
                // Text-like content: compressible like source code.
                data.extend_from_slice(
                    format!("line {} of file {d}/{f}: {:x}\n", data.len(), next() % 4096)
                        .as_bytes(),
                );
            }
            data.truncate(len);
            std::fs::write(dir.join(format!("file{f:03}.txt")), data)?;
        }
    }
    Ok(())
}

/// Shadow git: a repository whose GIT_DIR lives outside the folder.
struct ShadowGit {
    git_dir: std::path::PathBuf,
    work: std::path::PathBuf,
}

impl ShadowGit {
    fn git(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("git")
            .args(args)
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.work)
            .env("GIT_INDEX_FILE", self.git_dir.join("index"))
            .current_dir(&self.work)
            .output()?;
        if !out.status.success() {
            bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
    /// `git add -A && git write-tree`: what shadow-git agents do per snapshot.
    fn snapshot(&self) -> anyhow::Result<String> {
        self.git(&["add", "-A"])?;
        self.git(&["write-tree"])
    }
}

/// Edits `n` files of the tree (different ones each round).
fn touch_files(files: &[std::path::PathBuf], round: usize, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let f = &files[(round * n + i * 7919) % files.len()];
        let mut data = std::fs::read(f)?;
        data.extend_from_slice(format!("edit {round}.{i}\n").as_bytes());
        std::fs::write(f, data)?;
    }
    Ok(())
}

fn list_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() && e.file_name() != ".git" => stack.push(p),
                Ok(t) if t.is_file() && e.metadata().is_ok_and(|m| m.len() < 10 << 20) => {
                    out.push(p)
                }
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// Repetitions of the steady-state snapshot measurements
/// (`AGENTX_BENCH_SNAP_RUNS`, default 7).
fn snap_runs() -> usize {
    std::env::var("AGENTX_BENCH_SNAP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(7)
}

/// Directories of the generated tree whose files the large restore changes
/// (100 files each).
const RESTORE_DIRS: usize = 250;

/// Folder snapshots: agentx with the watcher, agentx with full scans
/// (`AGENTX_WATCH=off`) and a shadow git repository, on the same tree in
/// one run; medians.
pub fn bench_snapshots() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let scratch = tempfile::Builder::new()
        .prefix("agentx-bench-snap-")
        .tempdir()?;
    let generated = scratch.path().join("generated");
    // AGENTX_BENCH_SNAP_DIRS: a smaller tree for a quick check of the
    // harness (the reported numbers are for the default 1,000).
    let dirs = std::env::var("AGENTX_BENCH_SNAP_DIRS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1000)
        .max(RESTORE_DIRS);
    eprintln!("generating {} files…", dirs * 100);
    let t = Instant::now();
    generate_tree(&generated, dirs, 100)?;
    eprintln!("  generated in {:.1} s", secs(t.elapsed()));
    let tree = std::fs::canonicalize(&generated)?;
    let files = list_files(&tree);
    let bytes: u64 = files
        .iter()
        .filter_map(|f| f.metadata().ok())
        .map(|m| m.len())
        .sum();
    let runs = snap_runs();
    println!(
        "== snapshots: agentx (watcher / full scans) vs a shadow git repository (GIT_DIR outside the folder), medians"
    );
    println!(
        "-- generated tree: {} files, {:.0} MiB ({dirs} dirs x 100 files, 1-8 KiB of text); {runs} runs per row, first snapshot 3",
        files.len(),
        bytes as f64 / 1048576.0
    );
    // AGENTX_BENCH_SNAP_ONLY=watcher: only agentx with the watcher (for
    // profiling it; the other columns and the targets are then meaningless).
    let only_watcher = std::env::var("AGENTX_BENCH_SNAP_ONLY").is_ok_and(|v| v == "watcher");
    let git = if only_watcher {
        SnapResults::default()
    } else {
        eprintln!("shadow git…");
        bench_git(&tree, &files, scratch.path(), runs)?
    };
    let model = FakeModel::start();
    model.set_lean(true);
    eprintln!("agentx with the watcher…");
    let watch = runtime.block_on(bench_agentx(&tree, &files, true, runs, &model))?;
    let (scan, copy) = if only_watcher {
        let none = CopyResults {
            same_files: 0.0,
            same_files_synced: 0.0,
            whole_tree: 0.0,
        };
        (SnapResults::default(), none)
    } else {
        eprintln!("agentx with full scans…");
        let scan = runtime.block_on(bench_agentx(&tree, &files, false, runs, &model))?;
        eprintln!("cp -a…");
        (scan, bench_copy(&tree, scratch.path())?)
    };

    println!("agentd with the watcher: {}", watch.watch_status);
    println!("agentd with AGENTX_WATCH=off: {}", scan.watch_status);
    println!(
        "{:<48} {:>10} {:>10} {:>10} {:>8}  target",
        "", "watcher", "full scan", "git", "w/git"
    );
    let ms = |d: f64| format!("{d:.1} ms");
    let row = |what: &str, w: f64, f: f64, g: f64, target: &str| {
        println!(
            "{what:<48} {:>10} {:>10} {:>10} {:>7.3}x  {target}",
            ms(w),
            ms(f),
            ms(g),
            w / g
        );
    };
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    row(
        "first snapshot (fresh store)",
        watch.first,
        scan.first,
        git.first,
        &format!(
            "<= 0.12x git: {} / {} (both full scans)",
            met(watch.first <= 0.12 * git.first),
            met(scan.first <= 0.12 * git.first)
        ),
    );
    row(
        "unchanged re-snapshot",
        watch.same,
        scan.same,
        git.same,
        &format!("<= 10 ms: {}", met(watch.same <= 10.0)),
    );
    row(
        "snapshot after 10 files changed",
        watch.ten,
        scan.ten,
        git.ten,
        &format!("<= 20 ms: {}", met(watch.ten <= 20.0)),
    );
    row(
        "undo of 10 files (incl. pre-restore snapshot)",
        watch.undo,
        scan.undo,
        git.undo,
        &format!(
            "<= 50 ms and <= 0.1x git: {}",
            met(watch.undo <= 50.0 && watch.undo <= 0.1 * git.undo)
        ),
    );
    row(
        "message overhead over an empty folder",
        watch.message_overhead,
        scan.message_overhead,
        2.0 * git.same,
        &format!(
            "<= 15 ms: {} (git: 2 unchanged re-adds)",
            met(watch.message_overhead <= 15.0)
        ),
    );
    println!(
        "{:<48} {:>10} {:>10}            (message in the 100k folder / in an empty one)",
        "  message, 100k folder / empty folder",
        format!("{:.1}/{:.1}", watch.message_tree, watch.message_empty),
        format!("{:.1}/{:.1}", scan.message_tree, scan.message_empty),
    );
    let files_25k = RESTORE_DIRS * 100;
    row(
        &format!("restore of {files_25k} changed files (rewind)"),
        watch.restore,
        scan.restore,
        git.restore,
        &format!(
            "<= 1.2x cp -a: {} ({:.2}x)",
            met(watch.restore <= 1.2 * copy.same_files),
            watch.restore / copy.same_files
        ),
    );
    println!(
        "{:<48} {:>10} {:>10}",
        format!("  cp -a of the same {files_25k} files / + syncfs"),
        ms(copy.same_files),
        ms(copy.same_files_synced),
    );
    println!(
        "{:<48} {:>10}",
        format!("  cp -a of the whole tree ({} files)", files.len()),
        ms(copy.whole_tree),
    );
    println!(
        "{:<48} {:>7.1} MiB {:>7.1} MiB {:>7.1} MiB {:>7.3}x",
        "store at the end (same history of edits)",
        watch.store as f64 / 1048576.0,
        scan.store as f64 / 1048576.0,
        git.store as f64 / 1048576.0,
        watch.store as f64 / git.store as f64
    );
    Ok(())
}

/// Medians in milliseconds (store: bytes).
#[derive(Default)]
struct SnapResults {
    first: f64,
    same: f64,
    ten: f64,
    undo: f64,
    restore: f64,
    store: u64,
    message_tree: f64,
    message_empty: f64,
    message_overhead: f64,
    watch_status: String,
}

/// Makes every file of the first [`RESTORE_DIRS`] directories differ.
fn change_restore_dirs(tree: &std::path::Path, tag: &str) -> anyhow::Result<()> {
    for d in 0..RESTORE_DIRS {
        let dir = tree.join(format!("dir{d:04}"));
        for f in 0..100 {
            let p = dir.join(format!("file{f:03}.txt"));
            let mut data = std::fs::read(&p)?;
            data.extend_from_slice(format!("changed {tag}\n").as_bytes());
            std::fs::write(&p, data)?;
        }
    }
    Ok(())
}

fn bench_git(
    tree: &std::path::Path,
    files: &[std::path::PathBuf],
    scratch: &std::path::Path,
    runs: usize,
) -> anyhow::Result<SnapResults> {
    let mut first = Vec::new();
    for run in 0..3 {
        let git = ShadowGit {
            git_dir: scratch.join(format!("first-{run}.git")),
            work: tree.to_path_buf(),
        };
        git.git(&["init", "-q"])?;
        let t = Instant::now();
        git.snapshot()?;
        first.push(t.elapsed());
        let _ = std::fs::remove_dir_all(&git.git_dir);
    }
    let git = ShadowGit {
        git_dir: scratch.join("steady.git"),
        work: tree.to_path_buf(),
    };
    git.git(&["init", "-q"])?;
    git.snapshot()?;
    // Let the racy window pass so the index's stat data is trusted.
    std::thread::sleep(Duration::from_millis(2500));
    git.snapshot()?;
    let mut same = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        git.snapshot()?;
        same.push(t.elapsed());
    }
    let (mut ten, mut undo) = (Vec::new(), Vec::new());
    for round in 0..runs {
        let before = git.snapshot()?;
        touch_files(files, 2000 + round, 10)?;
        let t = Instant::now();
        git.snapshot()?;
        ten.push(t.elapsed());
        let t = Instant::now();
        git.git(&["read-tree", "-u", "--reset", &before])?;
        undo.push(t.elapsed());
        git.snapshot()?;
    }
    let mut restore = Vec::new();
    for rep in 0..3 {
        let before = git.snapshot()?;
        change_restore_dirs(tree, &format!("git {rep}"))?;
        git.snapshot()?;
        std::thread::sleep(Duration::from_millis(2500));
        let t = Instant::now();
        git.git(&["read-tree", "-u", "--reset", &before])?;
        restore.push(t.elapsed());
        git.snapshot()?;
    }
    for round in 0..50 {
        touch_files(files, 3000 + round, 10)?;
        git.snapshot()?;
    }
    let store = crate::dir_bytes(&git.git_dir);
    let _ = std::fs::remove_dir_all(&git.git_dir);
    Ok(SnapResults {
        first: median_ms(first),
        same: median_ms(same),
        ten: median_ms(ten),
        undo: median_ms(undo),
        restore: median_ms(restore),
        store,
        ..SnapResults::default()
    })
}

/// One message through agentd with a fake provider that answers with text
/// at once (no tool call): the time until the turn is finished.
async fn timed_message(
    channel: &tonic::transport::Channel,
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

async fn bench_agentx(
    tree: &std::path::Path,
    files: &[std::path::PathBuf],
    watch: bool,
    runs: usize,
    model: &FakeModel,
) -> anyhow::Result<SnapResults> {
    use agentx_shared::proto::snapshots_client::SnapshotsClient;
    use agentx_shared::proto::{RestoreRequest, TakeSnapshotRequest, restore_request};
    let scope = Scope {
        folder: tree.display().to_string(),
        agent: "default".into(),
    };
    let start_env = || -> anyhow::Result<TestEnv> {
        let mut env = TestEnv::new();
        if !watch {
            env.extra_env.push(("AGENTX_WATCH".into(), "off".into()));
        }
        if let Ok(filter) = std::env::var("AGENTX_BENCH_LOG") {
            env.extra_env.push(("AGENTX_LOG".into(), filter));
        }
        if !env.run(["daemon", "start"]).status.success() {
            bail!("agentd did not start");
        }
        Ok(env)
    };
    let take = |client: &SnapshotsClient<tonic::transport::Channel>| {
        let mut c = client.clone();
        let scope = scope.clone();
        async move {
            let t = Instant::now();
            c.take_snapshot(TakeSnapshotRequest {
                scope: Some(scope),
                label: String::new(),
            })
            .await?;
            Ok::<Duration, anyhow::Error>(t.elapsed())
        }
    };
    let rewind = |client: &SnapshotsClient<tonic::transport::Channel>, expect: usize| {
        let mut c = client.clone();
        let scope = scope.clone();
        async move {
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
            Ok::<Duration, anyhow::Error>(took)
        }
    };
    // Rounds of edits distinct from the other configuration's.
    let base = if watch { 0 } else { 1000 };

    let mut first = Vec::new();
    for _ in 0..3 {
        let env = start_env()?;
        let client = SnapshotsClient::new(agentx_shared::transport::connect(&env.socket()).await?);
        first.push(take(&client).await?);
    }

    let env = start_env()?;
    let channel = agentx_shared::transport::connect(&env.socket()).await?;
    let client = SnapshotsClient::new(channel.clone());
    take(&client).await?;
    // Let the racy window pass so the stat cache is trusted.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    take(&client).await?;
    let status = env
        .agentx(["status", "--json"])
        .current_dir(tree)
        .output()?;
    let watch_status = serde_json::from_slice::<serde_json::Value>(&status.stdout)
        .ok()
        .and_then(|v| v["snapshot_watch"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "(status did not say)".into());
    let mut same = Vec::new();
    for _ in 0..runs {
        same.push(take(&client).await?);
    }
    let (mut ten, mut undo) = (Vec::new(), Vec::new());
    for round in 0..runs {
        touch_files(files, base + round, 10)?;
        ten.push(take(&client).await?);
        // Undo those 10 files: rewind to the snapshot before them (2 = the
        // one before the newest), pre-restore snapshot included.
        undo.push(rewind(&client, 10).await?);
        take(&client).await?;
    }
    // The log of the steady-state rows (see the module comment).
    if let Ok(to) = std::env::var("AGENTX_BENCH_LOG_TO") {
        std::fs::copy(env.home.join("log/agentd.log"), format!("{to}.{watch}"))?;
    }

    // Whole messages, no tool call: in the tree and in an empty folder.
    let provider = ProviderSettings {
        provider: "responses".into(),
        base_url: model.base_url(),
        model: "fake-model".into(),
        api_key: "bench".into(),
    };
    let empty = Scope {
        folder: std::fs::canonicalize(&env.work)?.display().to_string(),
        agent: "default".into(),
    };
    let mut sessions = Vec::new();
    for s in [&scope, &empty] {
        let session = SessionsClient::new(channel.clone())
            .open_session(OpenSessionRequest {
                scope: Some(s.clone()),
                target: Some(open_session_request::Target::New(true)),
            })
            .await?
            .into_inner()
            .session
            .context("no session")?;
        sessions.push(session.id);
    }
    let (mut in_tree, mut in_empty) = (Vec::new(), Vec::new());
    for i in 0..3 + 2 * runs {
        let t = timed_message(&channel, &scope, &sessions[0], &provider, i).await?;
        let e = timed_message(&channel, &empty, &sessions[1], &provider, i).await?;
        if i >= 3 {
            in_tree.push(t);
            in_empty.push(e);
        }
    }
    let (message_tree, message_empty) = (median_ms(in_tree), median_ms(in_empty));

    // A large restore: every file of RESTORE_DIRS directories changed, then
    // put back by a rewind (after the racy window, as an undo read after
    // the result is).
    let mut restore = Vec::new();
    for rep in 0..3 {
        take(&client).await?;
        change_restore_dirs(tree, &format!("agentx {watch} {rep}"))?;
        take(&client).await?;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        restore.push(rewind(&client, RESTORE_DIRS * 100).await?);
    }
    take(&client).await?;

    // Store size after 50 snapshots with 10 files changed each.
    for round in 0..50 {
        touch_files(files, base + 3000 + round, 10)?;
        take(&client).await?;
    }
    let store = crate::dir_bytes(&env.home.join("checkpoints"));
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
    })
}

/// `cp -a` baselines in milliseconds.
struct CopyResults {
    same_files: f64,
    same_files_synced: f64,
    whole_tree: f64,
}

fn bench_copy(tree: &std::path::Path, scratch: &std::path::Path) -> anyhow::Result<CopyResults> {
    let sources: Vec<std::path::PathBuf> = (0..RESTORE_DIRS)
        .map(|d| tree.join(format!("dir{d:04}")))
        .collect();
    let dest = scratch.join("copy");
    let copy = |sync: bool| -> anyhow::Result<Duration> {
        let _ = std::fs::remove_dir_all(&dest);
        std::fs::create_dir(&dest)?;
        let t = Instant::now();
        if !Command::new("cp")
            .arg("-a")
            .args(&sources)
            .arg(&dest)
            .status()?
            .success()
        {
            bail!("cp -a failed");
        }
        if sync
            && !Command::new("sync")
                .arg("-f")
                .arg(&dest)
                .status()?
                .success()
        {
            bail!("sync -f failed");
        }
        Ok(t.elapsed())
    };
    let (mut plain, mut synced) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        plain.push(copy(false)?);
        synced.push(copy(true)?);
    }
    let _ = std::fs::remove_dir_all(&dest);
    let t = Instant::now();
    if !Command::new("cp")
        .arg("-a")
        .arg(tree)
        .arg(&dest)
        .status()?
        .success()
    {
        bail!("cp -a failed");
    }
    let whole = t.elapsed();
    let _ = std::fs::remove_dir_all(&dest);
    Ok(CopyResults {
        same_files: median_ms(plain),
        same_files_synced: median_ms(synced),
        whole_tree: whole.as_secs_f64() * 1000.0,
    })
}
