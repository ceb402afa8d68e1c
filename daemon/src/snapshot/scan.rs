//! Scanning a folder into a manifest: a parallel walk that prunes excluded
//! directories, the stat cache (reuse the previous hash when size, times,
//! inode and mode match and the entry was not racy), and parallel hashing
//! and compression of what changed.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::Mutex;

use rayon::prelude::*;

use super::blobs::{Blobs, PackWriter, compress};
use super::manifest::{Entry, Hash, Kind, Manifest};

/// Directory names never snapshotted (anywhere in the tree).
pub const EXCLUDED_DIRS: &[&str] = &[
    ".git",
    ".agentx",
    ".webagents",
    "node_modules",
    ".venv",
    "venv",
    "__pycache__",
];

/// Files over this size are left out (and left alone by restores).
pub const MAX_FILE: u64 = 10 * 1024 * 1024;

/// An entry modified within this much of the scan start is "racy": its
/// hash is recomputed next time even if its stat data looks unchanged.
const RACY_NS: i64 = 2_000_000_000;

/// What the walk found for one path, before hashing.
struct Found {
    entry: Entry,
    /// The file must be read and hashed.
    needs_hash: bool,
}

pub struct ScanStats {
    /// Files read and hashed (not served by the stat cache).
    pub hashed: u64,
    /// Blobs the store did not have.
    pub new_blobs: u64,
}

fn ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// True when `name` is an excluded directory name.
pub fn excluded(name: &[u8], extra: &[String]) -> bool {
    EXCLUDED_DIRS.iter().any(|d| d.as_bytes() == name) || extra.iter().any(|d| d.as_bytes() == name)
}

/// Walks `root` and builds its manifest, storing new content in `pack`.
pub fn scan(
    root: &Path,
    extra_excludes: &[String],
    previous: Option<&Manifest>,
    blobs: &Blobs,
    pack: &mut PackWriter,
) -> std::io::Result<(Manifest, ScanStats)> {
    let started_ns = {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(now.as_nanos()).unwrap_or(i64::MAX)
    };
    let prev: HashMap<&[u8], &Entry> = previous.map(Manifest::by_path).unwrap_or_default();
    let found: Mutex<Vec<Found>> = Mutex::new(Vec::new());
    let errors: Mutex<Vec<std::io::Error>> = Mutex::new(Vec::new());
    let extra: Vec<String> = extra_excludes.to_vec();

    let walker = ignore::WalkBuilder::new(root)
        .standard_filters(false)
        .follow_links(false)
        .same_file_system(false)
        .filter_entry(move |e| {
            !(e.file_type().is_some_and(|t| t.is_dir())
                && e.depth() > 0
                && excluded(e.file_name().as_bytes(), &extra))
        })
        .build_parallel();
    walker.run(|| {
        let found = &found;
        let errors = &errors;
        let prev = &prev;
        Box::new(move |result| {
            let entry = match result {
                Ok(e) => e,
                Err(e) => {
                    if let Ok(mut errs) = errors.lock() {
                        errs.push(std::io::Error::other(e.to_string()));
                    }
                    return ignore::WalkState::Continue;
                }
            };
            if entry.depth() == 0 {
                return ignore::WalkState::Continue;
            }
            let path = entry.path();
            let Ok(rel) = path.strip_prefix(root) else {
                return ignore::WalkState::Continue;
            };
            let meta = match std::fs::symlink_metadata(path) {
                Ok(m) => m,
                Err(_) => return ignore::WalkState::Continue, // vanished
            };
            let ft = meta.file_type();
            let kind = if ft.is_dir() {
                Kind::Dir
            } else if ft.is_symlink() {
                Kind::Symlink
            } else if ft.is_file() {
                if meta.len() > MAX_FILE {
                    return ignore::WalkState::Continue;
                }
                Kind::File
            } else {
                return ignore::WalkState::Continue; // sockets, fifos, devices
            };
            let rel_bytes = rel.as_os_str().as_bytes().to_vec();
            let mtime_ns = ns(meta.mtime(), meta.mtime_nsec());
            let mut e = Entry {
                path: rel_bytes,
                kind,
                mode: meta.mode() & 0o7777,
                size: if kind == Kind::File { meta.len() } else { 0 },
                mtime_ns,
                ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
                ino: meta.ino(),
                racy: mtime_ns > started_ns - RACY_NS,
                hash: [0; 32],
                target: Vec::new(),
            };
            let mut needs_hash = false;
            match kind {
                Kind::Symlink => match std::fs::read_link(path) {
                    Ok(t) => e.target = t.as_os_str().as_bytes().to_vec(),
                    Err(_) => return ignore::WalkState::Continue,
                },
                Kind::File => match prev.get(e.path.as_slice()) {
                    Some(p)
                        if p.kind == Kind::File
                            && !p.racy
                            && p.size == e.size
                            && p.mtime_ns == e.mtime_ns
                            && p.ctime_ns == e.ctime_ns
                            && p.ino == e.ino
                            && p.mode == e.mode
                            && blobs.contains(&p.hash) =>
                    {
                        e.hash = p.hash;
                    }
                    _ => needs_hash = true,
                },
                Kind::Dir => {}
            }
            if let Ok(mut f) = found.lock() {
                f.push(Found {
                    entry: e,
                    needs_hash,
                });
            }
            ignore::WalkState::Continue
        })
    });
    if let Some(e) = errors.into_inner().ok().and_then(|mut v| v.pop()) {
        tracing::debug!("snapshot walk skipped an unreadable path: {e}");
    }
    let mut found = found
        .into_inner()
        .map_err(|_| std::io::Error::other("walk poisoned"))?;

    // Hash (and compress what is new) in parallel, in bounded batches, and
    // append sequentially to the pack.
    let todo: Vec<usize> = (0..found.len()).filter(|i| found[*i].needs_hash).collect();
    let mut stats = ScanStats {
        hashed: todo.len() as u64,
        new_blobs: 0,
    };
    for batch in todo.chunks(512) {
        type Hashed = (Hash, u64, Option<Vec<u8>>);
        let results: Vec<(usize, std::io::Result<Hashed>)> = batch
            .par_iter()
            .map(|&i| {
                let path = root.join(std::ffi::OsStr::from_bytes(&found[i].entry.path));
                let result = std::fs::read(&path).and_then(|data| {
                    let hash = *blake3::hash(&data).as_bytes();
                    let len = data.len() as u64;
                    if blobs.contains(&hash) {
                        Ok((hash, len, None))
                    } else {
                        Ok((hash, len, Some(compress(&data)?)))
                    }
                });
                (i, result)
            })
            .collect();
        for (i, result) in results {
            match result {
                Ok((hash, len, blob)) => {
                    let entry = &mut found[i].entry;
                    entry.hash = hash;
                    if let Some(compressed) = blob
                        && !pack.contains(&hash)
                    {
                        pack.append(hash, &compressed, len)?;
                        stats.new_blobs += 1;
                    }
                    // The file changed between stat and read (still being
                    // written): keep what was read, never trust the stat.
                    if len != entry.size {
                        entry.size = len;
                        entry.racy = true;
                    }
                }
                Err(_) => found[i].entry.path.clear(), // vanished or unreadable: leave out
            }
        }
    }
    let mut manifest = Manifest {
        entries: found
            .into_iter()
            .map(|f| f.entry)
            .filter(|e| !e.path.is_empty())
            .collect(),
    };
    manifest.sort();
    Ok((manifest, stats))
}
