//! The generated tree the snapshot benchmark works on: made from a fixed
//! seed, listed, and edited between snapshots the same way in every column.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::RESTORE_DIRS;
use crate::secs;

/// The tree of one run, as generated.
pub(super) struct Generated {
    /// Canonical path of the tree.
    pub(super) tree: PathBuf,
    /// Its files, sorted.
    pub(super) files: Vec<PathBuf>,
    /// Their total size.
    pub(super) bytes: u64,
    /// Directories of 100 files each.
    pub(super) dirs: usize,
}

impl Generated {
    /// Generates `dirs` × 100 files under `scratch/generated` (with
    /// progress on stderr) and lists them.
    pub(super) fn new(scratch: &Path, dirs: usize) -> anyhow::Result<Generated> {
        let generated = scratch.join("generated");
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
        Ok(Generated {
            tree,
            files,
            bytes,
            dirs,
        })
    }
}

/// A seeded generated tree: `dirs` × `per_dir` files of 1–8 KiB.
fn generate_tree(root: &Path, dirs: usize, per_dir: usize) -> anyhow::Result<()> {
    let mut rng = agentx_shared::rng::Rng::new(0x5EED_1234_ABCD_0001);
    let mut next = || rng.next();
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

/// Edits `n` files of the tree (different ones each round).
pub(super) fn touch_files(files: &[PathBuf], round: usize, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let f = &files[(round * n + i * 7919) % files.len()];
        let mut data = std::fs::read(f)?;
        data.extend_from_slice(format!("edit {round}.{i}\n").as_bytes());
        std::fs::write(f, data)?;
    }
    Ok(())
}

/// The regular files under `root` (below 10 MiB, outside `.git`), sorted.
fn list_files(root: &Path) -> Vec<PathBuf> {
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

/// Makes every file of the first [`RESTORE_DIRS`] directories differ.
pub(super) fn change_restore_dirs(tree: &Path, tag: &str) -> anyhow::Result<()> {
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
