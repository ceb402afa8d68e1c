//! The snapshot benchmark's report on stdout: the header, then the table of
//! medians per column (watcher, full scan, git) with each row's target.

use super::baselines::CopyResults;
use super::tree::Generated;
use super::{RESTORE_DIRS, SnapResults};

/// Every column of one run.
pub(super) struct Results {
    pub(super) watch: SnapResults,
    pub(super) scan: SnapResults,
    pub(super) git: SnapResults,
    pub(super) copy: CopyResults,
    /// First snapshot (watcher, full scans), ms, measured full scans first.
    pub(super) reversed: (f64, f64),
}

/// The title and the tree's description.
pub(super) fn print_header(generated: &Generated, runs: usize) {
    println!(
        "== snapshots: agentx (watcher / full scans) vs a shadow git repository (GIT_DIR outside the folder), medians"
    );
    println!(
        "-- generated tree: {} files, {:.0} MiB ({} dirs x 100 files, 1-8 KiB of text); {runs} runs per row, first snapshot 3",
        generated.files.len(),
        generated.bytes as f64 / 1048576.0,
        generated.dirs,
    );
}

/// agentd's watch status in each configuration, then the table.
pub(super) fn print_table(r: &Results, files: usize) {
    println!("agentd with the watcher: {}", r.watch.watch_status);
    println!("agentd with AGENTX_WATCH=off: {}", r.scan.watch_status);
    println!(
        "{:<48} {:>10} {:>10} {:>10} {:>8}  target",
        "", "watcher", "full scan", "git", "w/git"
    );
    snapshot_rows(r);
    message_rows(r);
    restore_rows(r, files);
    println!(
        "{:<48} {:>7.1} MiB {:>7.1} MiB {:>7.1} MiB {:>7.3}x",
        "store at the end (same history of edits)",
        r.watch.store as f64 / 1048576.0,
        r.scan.store as f64 / 1048576.0,
        r.git.store as f64 / 1048576.0,
        r.watch.store as f64 / r.git.store as f64
    );
}

fn ms(d: f64) -> String {
    format!("{d:.1} ms")
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

/// One row of milliseconds: watcher, full scan, git, watcher / git, target.
fn row(what: &str, w: f64, f: f64, g: f64, target: &str) {
    println!(
        "{what:<48} {:>10} {:>10} {:>10} {:>7.3}x  {target}",
        ms(w),
        ms(f),
        ms(g),
        w / g
    );
}

/// First, unchanged, after-10-changes and undo rows.
fn snapshot_rows(r: &Results) {
    let (watch, scan, git) = (&r.watch, &r.scan, &r.git);
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
    println!(
        "{:<48} {:>10} {:>10}            (watcher / full scans: {:.2}x, {:.2}x in this order)",
        "  again, full scans measured first",
        ms(r.reversed.0),
        ms(r.reversed.1),
        watch.first / scan.first,
        r.reversed.0 / r.reversed.1,
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
}

/// The message overhead row (git: two unchanged re-adds) and its parts.
fn message_rows(r: &Results) {
    let (watch, scan, git) = (&r.watch, &r.scan, &r.git);
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
}

/// The large restore row and the `cp -a` baselines beside it.
fn restore_rows(r: &Results, files: usize) {
    let (watch, copy) = (&r.watch, &r.copy);
    let restored = RESTORE_DIRS * 100;
    let us = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.2} ms", v / 1000.0));
    println!(
        "{:<48} {:>10} {:>10}            (one lstat per path it would touch)",
        "  of which the live check: undo of 10 / restore",
        us(watch.live_undo),
        us(watch.live_restore),
    );
    row(
        &format!("restore of {restored} changed files (rewind)"),
        watch.restore,
        r.scan.restore,
        r.git.restore,
        &format!(
            "<= 1.2x cp -a: {} ({:.2}x)",
            met(watch.restore <= 1.2 * copy.same_files),
            watch.restore / copy.same_files
        ),
    );
    println!(
        "{:<48} {:>10} {:>10}",
        format!("  cp -a of the same {restored} files / + syncfs"),
        ms(copy.same_files),
        ms(copy.same_files_synced),
    );
    println!(
        "{:<48} {:>10}",
        format!("  cp -a of the whole tree ({files} files)"),
        ms(copy.whole_tree),
    );
}
