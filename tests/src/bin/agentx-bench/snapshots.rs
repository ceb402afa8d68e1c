//! `agentx-bench snapshots`: folder snapshots on a generated tree, agentx with and without
//! the watcher beside a shadow git repository and a plain copy.
//!
//! To see where a snapshot's time goes: `AGENTX_BENCH_LOG=agentd::snapshot=debug` runs agentd
//! with that log filter and `AGENTX_BENCH_LOG_TO=/tmp/snap` keeps its log (per-phase timings of
//! each snapshot) as `/tmp/snap.true` (watcher) and `/tmp/snap.false` (full scans).

use std::path::Path;

use agentx_tests::fake_model::FakeModel;

mod agentx;
mod baselines;
mod report;
mod tree;

use report::Results;
use tree::Generated;

/// Repetitions of the steady-state snapshot measurements
/// (`AGENTX_BENCH_SNAP_RUNS`, default 7).
fn snap_runs() -> usize {
    std::env::var("AGENTX_BENCH_SNAP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(7)
}

/// Directories of 100 files in the generated tree, at least
/// [`RESTORE_DIRS`]. AGENTX_BENCH_SNAP_DIRS: a smaller tree for a quick
/// check of the harness (the reported numbers are for the default 1,000).
fn snap_dirs() -> usize {
    std::env::var("AGENTX_BENCH_SNAP_DIRS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1000)
        .max(RESTORE_DIRS)
}

/// Directories of the generated tree whose files the large restore changes
/// (100 files each).
const RESTORE_DIRS: usize = 100;

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
    let generated = Generated::new(scratch.path(), snap_dirs())?;
    let runs = snap_runs();
    report::print_header(&generated, runs);
    // AGENTX_BENCH_SNAP_ONLY=watcher: only agentx with the watcher (for
    // profiling it; the other columns and the targets are then meaningless).
    let only = std::env::var("AGENTX_BENCH_SNAP_ONLY").unwrap_or_default();
    // AGENTX_BENCH_SNAP_ONLY=first: only the first-snapshot rows, watcher
    // and full scans in both orders (a quick check of what watching adds).
    if only == "first" {
        let (tree, files) = (generated.tree.as_path(), generated.files.as_slice());
        let mut row = Vec::new();
        for watch in [true, false, false, true] {
            row.push(runtime.block_on(agentx::first_snapshot_ms(tree, files, watch, runs))?);
        }
        println!(
            "first snapshot: watcher {:.0} ms then full scans {:.0} ms ({:.2}x); full scans {:.0} ms then watcher {:.0} ms ({:.2}x)",
            row[0],
            row[1],
            row[0] / row[1],
            row[2],
            row[3],
            row[3] / row[2]
        );
        return Ok(());
    }
    // AGENTX_BENCH_SNAP_ONLY=memory: agentd's memory for the watched tree.
    if only == "memory" {
        let (tree, files) = (generated.tree.as_path(), generated.files.as_slice());
        let [before, after, idle] = runtime.block_on(agentx::first_snapshot_memory(tree, files))?;
        let per_file = |kib: u64| kib.saturating_sub(before) as f64 * 1024.0 / files.len() as f64;
        println!(
            "agentd's anonymous RSS: {:.1} MB with nothing snapshotted, {:.1} MB right after the first snapshot ({:.0} B per file), {:.1} MB once idle 3 s ({:.0} B per file)",
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            per_file(after),
            idle as f64 / 1024.0,
            per_file(idle)
        );
        return Ok(());
    }
    // AGENTX_BENCH_SNAP_ONLY=resident: what it costs when the tree's
    // manifest has left agentd's memory for another folder's.
    if only == "resident" {
        let (tree, files) = (generated.tree.as_path(), generated.files.as_slice());
        let other = scratch.path().join("small-folder");
        std::fs::create_dir_all(&other)?;
        let [kept, back] =
            runtime.block_on(agentx::resident_snapshot_ms(tree, files, &other, runs))?;
        println!(
            "unchanged snapshot of the watched tree: {kept:.1} ms with its manifest in memory, {back:.1} ms right after another folder's snapshot pushed it out ({:.2}x){}",
            back / kept,
            if files.len() < 100_000 {
                " (a tree under 100,000 entries is never pushed out: set AGENTX_BENCH_SNAP_DIRS to 1000 or more)"
            } else {
                ""
            }
        );
        return Ok(());
    }
    let only_watcher = only == "watcher";
    let results = measure(&runtime, &generated, scratch.path(), runs, only_watcher)?;
    report::print_table(&results, generated.files.len());
    Ok(())
}

/// Every column in turn: shadow git, agentx with the watcher, agentx with
/// full scans and `cp -a` (only the watcher's with `only_watcher`).
fn measure(
    runtime: &tokio::runtime::Runtime,
    generated: &Generated,
    scratch: &Path,
    runs: usize,
    only_watcher: bool,
) -> anyhow::Result<Results> {
    let (tree, files) = (generated.tree.as_path(), generated.files.as_slice());
    let git = if only_watcher {
        SnapResults::default()
    } else {
        eprintln!("shadow git…");
        baselines::bench_git(tree, files, scratch, runs)?
    };
    let model = FakeModel::start();
    model.set_lean(true);
    eprintln!("agentx with the watcher…");
    let watch = runtime.block_on(agentx::bench_agentx(tree, files, true, runs, &model))?;
    let (scan, copy) = if only_watcher {
        (SnapResults::default(), baselines::CopyResults::default())
    } else {
        eprintln!("agentx with full scans…");
        let scan = runtime.block_on(agentx::bench_agentx(tree, files, false, runs, &model))?;
        eprintln!("cp -a…");
        (scan, baselines::bench_copy(tree, scratch)?)
    };
    // The first-snapshot rows again in the other order (full scans, then
    // the watcher), so a warm page cache favours neither.
    let reversed = if only_watcher {
        (0.0, 0.0)
    } else {
        eprintln!("first snapshots, full scans before the watcher…");
        let scan = runtime.block_on(agentx::first_snapshot_ms(tree, files, false, runs))?;
        let watch = runtime.block_on(agentx::first_snapshot_ms(tree, files, true, runs))?;
        (watch, scan)
    };
    Ok(Results {
        watch,
        scan,
        git,
        copy,
        reversed,
    })
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
    /// The restore's live check (µs, median): in the undo of 10 files and
    /// in the large restore (None: agentd logged none).
    live_undo: Option<f64>,
    live_restore: Option<f64>,
}
