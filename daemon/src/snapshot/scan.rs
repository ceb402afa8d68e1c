//! Scanning a folder into a manifest: a parallel walk that prunes excluded
//! directories, the stat cache (reuse the previous hash when size, times,
//! inode and mode match and the entry was not racy), and parallel hashing
//! and compression of what changed.

use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

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
pub(super) const RACY_NS: i64 = 2_000_000_000;

pub struct ScanStats {
    /// Files read and hashed (not served by the stat cache).
    pub hashed: u64,
    /// Blobs the store did not have.
    pub new_blobs: u64,
}

fn ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// What a scan leaves out besides [`EXCLUDED_DIRS`].
#[derive(Debug, Default, Clone)]
pub struct Excludes {
    /// Directory names, anywhere in the tree (`snapshot_exclude`).
    pub names: Vec<String>,
    /// Absolute directories (agentd's own profile, should it sit inside the
    /// folder: restoring it would overwrite the daemon's state).
    pub paths: Vec<std::path::PathBuf>,
}

/// True when `name` is an excluded directory name.
pub fn excluded(name: &[u8], extra: &[String]) -> bool {
    EXCLUDED_DIRS.iter().any(|d| d.as_bytes() == name) || extra.iter().any(|d| d.as_bytes() == name)
}

/// One item of a directory listing being put in order.
enum Part {
    One(Entry),
    /// The contents of the subdirectory with this index.
    Tree(usize),
}

impl Part {
    /// The name it sorts by, and whether a '/' follows it.
    fn key<'a>(&'a self, subdirs: &'a [Vec<u8>], skip: usize) -> (&'a [u8], bool) {
        match self {
            Part::One(e) => (&e.path[skip..], false),
            Part::Tree(i) => (&subdirs[*i][skip..], true),
        }
    }
}

/// Lists one directory (lstat through its fd) and, in parallel, the
/// directories below it; excluded names are pruned, oversized files and
/// special files left out. The result is in byte order of the full paths:
/// entries sort by name, and a subdirectory's contents by its name plus
/// `/` — so no global sort is needed.
pub(super) fn walk_dir(root: &Path, rel: &[u8], ex: &Excludes, started_ns: i64) -> Vec<Entry> {
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(std::ffi::OsStr::from_bytes(rel))
    };
    let Ok(read) = std::fs::read_dir(&dir) else {
        return Vec::new(); // vanished or unreadable: left out
    };
    let mut out = Vec::new();
    let mut subdirs = Vec::new();
    for entry in read.flatten() {
        let name = entry.file_name();
        let name = name.as_bytes();
        // DirEntry::metadata does not follow symlinks.
        let Ok(meta) = entry.metadata() else { continue };
        let ft = meta.file_type();
        let kind = if ft.is_dir() {
            if excluded(name, &ex.names)
                || ex.paths.iter().any(|p| *p == dir.join(entry.file_name()))
            {
                continue;
            }
            Kind::Dir
        } else if ft.is_symlink() {
            Kind::Symlink
        } else if ft.is_file() {
            if meta.len() > MAX_FILE {
                continue;
            }
            Kind::File
        } else {
            continue; // sockets, fifos, devices
        };
        let mut path = Vec::with_capacity(rel.len() + 1 + name.len());
        if !rel.is_empty() {
            path.extend_from_slice(rel);
            path.push(b'/');
        }
        path.extend_from_slice(name);
        let mtime_ns = ns(meta.mtime(), meta.mtime_nsec());
        let mut e = Entry {
            path,
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
        match kind {
            Kind::Symlink => match std::fs::read_link(entry.path()) {
                Ok(t) => e.target = t.as_os_str().as_bytes().to_vec(),
                Err(_) => continue,
            },
            Kind::Dir => subdirs.push(e.path.clone()),
            Kind::File => {}
        }
        out.push(e);
    }
    let nested: Vec<Vec<Entry>> = subdirs
        .par_iter()
        .map(|sub| walk_dir(root, sub, ex, started_ns))
        .collect();
    // Order this directory: an entry by its name, a subdirectory's
    // contents by its name followed by '/'.
    let skip = if rel.is_empty() { 0 } else { rel.len() + 1 };
    let mut parts: Vec<Part> = out.into_iter().map(Part::One).collect();
    parts.extend((0..subdirs.len()).map(Part::Tree));
    parts.sort_unstable_by(|a, b| {
        let ((x, xd), (y, yd)) = (a.key(&subdirs, skip), b.key(&subdirs, skip));
        let slash = |d: bool| if d { Some(b'/') } else { None };
        x.iter()
            .copied()
            .chain(slash(xd))
            .cmp(y.iter().copied().chain(slash(yd)))
    });
    let mut nested: Vec<Option<Vec<Entry>>> = nested.into_iter().map(Some).collect();
    let mut sorted = Vec::with_capacity(parts.len());
    for part in parts {
        match part {
            Part::One(e) => sorted.push(e),
            Part::Tree(i) => sorted.extend(nested[i].take().unwrap_or_default()),
        }
    }
    sorted
}

/// Walks `root` and builds its manifest, storing new content in `pack`.
pub fn scan(
    root: &Path,
    excludes: &Excludes,
    previous: Option<&Manifest>,
    blobs: &Blobs,
    pack: &mut PackWriter,
) -> std::io::Result<(Manifest, ScanStats)> {
    scan_with(root, previous, blobs, pack, |started_ns| {
        walk_dir(root, &[], excludes, started_ns)
    })
}

/// [`scan`] with the listing supplied: `walk(started_ns)` returns every
/// entry of the folder in path order, unhashed (the watcher's splice).
pub(super) fn scan_with(
    root: &Path,
    previous: Option<&Manifest>,
    blobs: &Blobs,
    pack: &mut PackWriter,
    walk: impl FnOnce(i64) -> Vec<Entry>,
) -> std::io::Result<(Manifest, ScanStats)> {
    let started_ns = {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(now.as_nanos()).unwrap_or(i64::MAX)
    };
    // Already in path order (see walk_dir).
    let mut entries = walk(started_ns);
    let mut needs_hash: Vec<bool> = entries.iter().map(|e| e.kind == Kind::File).collect();

    // The stat cache: walk the previous manifest (sorted too) alongside and
    // reuse a file's hash when nothing about it changed.
    if let Some(prev) = previous {
        let mut old = prev.entries.iter().peekable();
        for (e, needs) in entries.iter_mut().zip(needs_hash.iter_mut()) {
            if e.kind != Kind::File {
                continue;
            }
            while old.peek().is_some_and(|o| o.path < e.path) {
                old.next();
            }
            let Some(p) = old.peek() else { break };
            if p.path == e.path
                && p.kind == Kind::File
                && !p.racy
                && p.size == e.size
                && p.mtime_ns == e.mtime_ns
                && p.ctime_ns == e.ctime_ns
                && p.ino == e.ino
                && p.mode == e.mode
                && blobs.contains(&p.hash)
            {
                e.hash = p.hash;
                *needs = false;
            }
        }
    }

    // Hash (and compress what is new) in parallel, in bounded batches, and
    // append sequentially to the pack.
    let todo: Vec<usize> = (0..entries.len()).filter(|i| needs_hash[*i]).collect();
    let mut stats = ScanStats {
        hashed: todo.len() as u64,
        new_blobs: 0,
    };
    for batch in todo.chunks(512) {
        type Hashed = (Hash, u64, Option<Vec<u8>>);
        let results: Vec<(usize, std::io::Result<Hashed>)> = batch
            .par_iter()
            .map(|&i| {
                let path = root.join(std::ffi::OsStr::from_bytes(&entries[i].path));
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
                    let entry = &mut entries[i];
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
                Err(_) => entries[i].path.clear(), // vanished or unreadable: leave out
            }
        }
    }
    // Still sorted: entries are only left out, never reordered.
    entries.retain(|e| !e.path.is_empty());
    let manifest = Manifest { entries };
    Ok((manifest, stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_yields_paths_in_byte_order() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for d in ["a", "a/b", "a-b", "a0", "b", "a/b/c"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "a.txt",
            "a/x",
            "a/b.txt",
            "a-b/y",
            "a0/z",
            "b/.hidden",
            "a/b/c/d",
            "Z",
            "_",
        ] {
            std::fs::write(root.join(f), f).unwrap();
        }
        let entries = walk_dir(root, &[], &Excludes::default(), 0);
        let paths: Vec<&[u8]> = entries.iter().map(|e| e.path.as_slice()).collect();
        let mut sorted = paths.clone();
        sorted.sort();
        assert_eq!(paths, sorted);
        assert_eq!(paths.len(), 15);
    }
}
