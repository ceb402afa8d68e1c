//! Watcher-based snapshots: re-list only the directories the watcher saw
//! change and reuse the previous manifest for the rest; every Kth such
//! snapshot is checked against a full scan.
//!
//! The hook into the scanner is [`scan::scan_with`]: the same stat cache and
//! hashing as a full scan, fed with the spliced listing built here.

use std::collections::{BTreeSet, HashSet};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use super::blobs::PackWriter;
use super::manifest::{Entry, Kind, Manifest};
use super::scan::{self, Excludes, MAX_FILE, RACY_NS, ScanStats, excluded};
use super::watch::Plan;
use super::{SnapError, SnapshotStore};

fn ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

fn parent(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => &path[..i],
        None => b"",
    }
}

fn full_path(root: &Path, rel: &[u8]) -> std::path::PathBuf {
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(std::ffi::OsStr::from_bytes(rel))
    }
}

/// The manifest entry for `rel` from its (not followed) stat data, as the
/// full scan builds it; None for what a scan leaves out.
fn entry_for(
    root: &Path,
    rel: Vec<u8>,
    meta: &std::fs::Metadata,
    ex: &Excludes,
    started_ns: i64,
) -> Option<Entry> {
    let ft = meta.file_type();
    let name = rel.rsplit(|b| *b == b'/').next().unwrap_or_default();
    let kind = if ft.is_dir() {
        if excluded(name, &ex.names) || ex.paths.iter().any(|p| *p == full_path(root, &rel)) {
            return None;
        }
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_file() {
        if meta.len() > MAX_FILE {
            return None;
        }
        Kind::File
    } else {
        return None;
    };
    let mtime_ns = ns(meta.mtime(), meta.mtime_nsec());
    let target = if kind == Kind::Symlink {
        std::fs::read_link(full_path(root, &rel))
            .ok()?
            .as_os_str()
            .as_bytes()
            .to_vec()
    } else {
        Vec::new()
    };
    Some(Entry {
        path: rel,
        kind,
        mode: meta.mode() & 0o7777,
        size: if kind == Kind::File { meta.len() } else { 0 },
        mtime_ns,
        ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        ino: meta.ino(),
        racy: mtime_ns > started_ns - RACY_NS,
        hash: [0; 32],
        target,
    })
}

/// The entries directly in `rel` (not below), or None if it cannot be listed.
fn list_one(root: &Path, rel: &[u8], ex: &Excludes, started_ns: i64) -> Option<Vec<Entry>> {
    let read = std::fs::read_dir(full_path(root, rel)).ok()?;
    let mut out = Vec::new();
    for entry in read.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        let mut path = Vec::with_capacity(rel.len() + 1 + entry.file_name().len());
        if !rel.is_empty() {
            path.extend_from_slice(rel);
            path.push(b'/');
        }
        path.extend_from_slice(entry.file_name().as_bytes());
        out.extend(entry_for(root, path, &meta, ex, started_ns));
    }
    Some(out)
}

/// The watcher's view cannot be spliced (a directory changed in a way its
/// parent's events should have reported): scan in full instead.
#[derive(Debug)]
pub struct Inconsistent(pub String);

/// The folder's listing built from `prev` with the `dirty` directories
/// re-listed: every path in byte order, as a full walk would return it.
pub fn relist(
    root: &Path,
    ex: &Excludes,
    prev: &Manifest,
    dirty: &BTreeSet<Vec<u8>>,
    started_ns: i64,
) -> Result<Vec<Entry>, Inconsistent> {
    let find = |p: &[u8]| {
        prev.entries
            .binary_search_by(|e| e.path.as_slice().cmp(p))
            .ok()
    };
    let mut relisted: HashSet<&[u8]> = HashSet::new();
    // Subtrees replaced or removed as a whole (everything below them).
    let mut covered: HashSet<Vec<u8>> = HashSet::new();
    let mut adds: Vec<Entry> = Vec::new();
    let mut drop_own: Vec<usize> = Vec::new();
    for d in dirty {
        let is_covered = {
            let mut p = d.as_slice();
            let mut hit = covered.contains(p);
            while !hit && !p.is_empty() {
                p = parent(p);
                hit = covered.contains(p);
            }
            hit
        };
        if is_covered {
            continue;
        }
        if !d.is_empty() && !relisted.contains(parent(d)) {
            // The directory's own entry, unless its parent's listing has it.
            let own = std::fs::symlink_metadata(full_path(root, d))
                .ok()
                .and_then(|m| entry_for(root, d.clone(), &m, ex, started_ns));
            match (own, find(d)) {
                (Some(o), Some(i))
                    if o.kind == Kind::Dir
                        && prev.entries[i].kind == Kind::Dir
                        && prev.entries[i].ino == o.ino =>
                {
                    drop_own.push(i);
                    adds.push(o);
                }
                _ => {
                    return Err(Inconsistent(format!(
                        "{} changed without an event in its parent",
                        String::from_utf8_lossy(d)
                    )));
                }
            }
        }
        relisted.insert(d.as_slice());
        let now = list_one(root, d, ex, started_ns).unwrap_or_default();
        let prefix = if d.is_empty() {
            Vec::new()
        } else {
            let mut p = d.clone();
            p.push(b'/');
            p
        };
        let start = prev
            .entries
            .partition_point(|e| e.path.as_slice() < prefix.as_slice());
        let was: Vec<&Entry> = prev.entries[start..]
            .iter()
            .take_while(|e| e.path.starts_with(&prefix))
            .filter(|e| !e.path[prefix.len()..].contains(&b'/'))
            .collect();
        let same_dir =
            |a: &Entry, b: &Entry| a.kind == Kind::Dir && b.kind == Kind::Dir && a.ino == b.ino;
        for old in &was {
            if old.kind == Kind::Dir && !now.iter().any(|n| n.path == old.path && same_dir(n, old))
            {
                covered.insert(old.path.clone());
            }
        }
        for new in &now {
            if new.kind == Kind::Dir && !was.iter().any(|o| o.path == new.path && same_dir(new, o))
            {
                covered.insert(new.path.clone());
                adds.extend(scan::walk_dir(root, &new.path, ex, started_ns));
            }
        }
        adds.extend(now);
    }
    // What of the previous listing stays: not directly in a re-listed
    // directory, not below a covered one, not replaced by a fresh own entry.
    let mut keep = vec![true; prev.entries.len()];
    for i in drop_own {
        keep[i] = false;
    }
    let mut range = |prefix: &[u8], direct_only: bool| {
        let start = prev.entries.partition_point(|e| e.path.as_slice() < prefix);
        for (i, e) in prev.entries[start..].iter().enumerate() {
            if !e.path.starts_with(prefix) {
                break;
            }
            if !direct_only || !e.path[prefix.len()..].contains(&b'/') {
                keep[start + i] = false;
            }
        }
    };
    for d in &relisted {
        let mut prefix = d.to_vec();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        range(&prefix, true);
    }
    for c in &covered {
        let mut prefix = c.clone();
        prefix.push(b'/');
        range(&prefix, false);
    }
    adds.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    let mut out = Vec::with_capacity(prev.entries.len() + adds.len());
    let mut adds = adds.into_iter().peekable();
    for (e, keep) in prev.entries.iter().zip(keep) {
        if !keep {
            continue;
        }
        while let Some(a) = adds.next_if(|a| a.path < e.path) {
            out.push(a);
        }
        let mut e = e.clone();
        e.racy = e.mtime_ns > started_ns - RACY_NS;
        out.push(e);
    }
    out.extend(adds);
    if out.windows(2).any(|w| w[0].path >= w[1].path) {
        return Err(Inconsistent("the spliced listing is out of order".into()));
    }
    Ok(out)
}

/// The first difference between two manifests, ignoring the racy flag (a
/// hint that depends on when each scan ran).
pub fn first_difference(a: &Manifest, b: &Manifest) -> Option<String> {
    let show = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
    for i in 0..a.entries.len().max(b.entries.len()) {
        match (a.entries.get(i), b.entries.get(i)) {
            (Some(x), Some(y)) => {
                let mut y = y.clone();
                y.racy = x.racy;
                if *x != y {
                    return Some(if x.path == y.path {
                        format!("{} differs", show(&x.path))
                    } else {
                        format!("{} / {}", show(&x.path), show(&y.path))
                    });
                }
            }
            (Some(x), None) => return Some(format!("{} only in the first", show(&x.path))),
            (None, Some(y)) => return Some(format!("{} only in the second", show(&y.path))),
            (None, None) => break,
        }
    }
    None
}

impl SnapshotStore {
    /// Scans `folder` against its newest manifest `base` (`previous`): the
    /// watcher's dirty directories when it can vouch for them, else in full.
    pub(super) fn scan_folder(
        &mut self,
        folder: &Path,
        base: Option<&str>,
        previous: Option<&Manifest>,
        pack: &mut PackWriter,
    ) -> Result<(Manifest, ScanStats), SnapError> {
        let excludes = self.extra_excludes();
        let plan = self.watch.plan(folder, &excludes, base);
        let (Plan::Dirty { dirs, verify }, Some(prev)) = (plan, previous) else {
            return Ok(scan::scan(folder, &excludes, previous, &self.blobs, pack)?);
        };
        let mut inconsistent = None;
        let walked = scan::scan_with(
            folder,
            previous,
            &self.blobs,
            pack,
            |started_ns| match relist(folder, &excludes, prev, &dirs, started_ns) {
                Ok(entries) => entries,
                Err(e) => {
                    inconsistent = Some(e.0);
                    Vec::new()
                }
            },
        )?;
        if let Some(why) = inconsistent {
            self.watch.reset(folder, &why);
            return Ok(scan::scan(folder, &excludes, previous, &self.blobs, pack)?);
        }
        if verify {
            let full = scan::scan(folder, &excludes, previous, &self.blobs, pack)?;
            if let Some(diff) = first_difference(&walked.0, &full.0) {
                self.watch.distrust(folder, &diff);
                return Ok(full);
            }
            tracing::debug!(folder = %folder.display(), "watcher verified against a full scan");
        }
        Ok(walked)
    }

    /// `agentx status`: whether the folder is watched, and why not.
    pub fn watch_status(&self, folder: &Path) -> String {
        self.watch.describe(folder)
    }

    /// Periodic upkeep of the watches (drain, idle release).
    pub fn watch_tick(&mut self) {
        self.watch.tick();
    }
}
