//! The baselines of the snapshot benchmark: a shadow git repository (GIT_DIR
//! outside the folder) taking the same snapshots, and `cp -a` of the files.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::tree::{change_restore_dirs, touch_files};
use super::{RESTORE_DIRS, SnapResults};
use crate::median_ms;

/// Shadow git: a repository whose GIT_DIR lives outside the folder.
struct ShadowGit {
    git_dir: PathBuf,
    work: PathBuf,
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

/// The shadow git column: the same rows as agentx's, medians.
pub(super) fn bench_git(
    tree: &Path,
    files: &[PathBuf],
    scratch: &Path,
    runs: usize,
) -> anyhow::Result<SnapResults> {
    let first = first_snapshots(tree, scratch)?;
    let git = ShadowGit {
        git_dir: scratch.join("steady.git"),
        work: tree.to_path_buf(),
    };
    let (same, ten, undo) = steady(&git, files, runs)?;
    let restore = restores(&git, tree)?;
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

/// Three first snapshots, each into a fresh repository.
fn first_snapshots(tree: &Path, scratch: &Path) -> anyhow::Result<Vec<Duration>> {
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
    Ok(first)
}

/// Samples of the steady-state rows in a new repository: unchanged
/// re-snapshots, snapshots after 10 files changed, and undos of them.
fn steady(
    git: &ShadowGit,
    files: &[PathBuf],
    runs: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, Vec<Duration>)> {
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
    Ok((same, ten, undo))
}

/// Three large restores: every file of [`RESTORE_DIRS`] directories changed,
/// then put back by `read-tree` after the racy window.
fn restores(git: &ShadowGit, tree: &Path) -> anyhow::Result<Vec<Duration>> {
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
    Ok(restore)
}

/// `cp -a` baselines in milliseconds.
#[derive(Default)]
pub(super) struct CopyResults {
    pub(super) same_files: f64,
    pub(super) same_files_synced: f64,
    pub(super) whole_tree: f64,
}

/// `cp -a` of the restore's directories (plain and followed by `sync -f`,
/// medians of 3) and of the whole tree (once).
pub(super) fn bench_copy(tree: &Path, scratch: &Path) -> anyhow::Result<CopyResults> {
    let sources: Vec<PathBuf> = (0..RESTORE_DIRS)
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
