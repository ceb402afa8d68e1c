//! Watcher-based snapshots: re-list only the directories the watcher saw
//! change and reuse the previous manifest for the rest; every Kth such
//! snapshot is checked against a full scan.
//!
//! The hook into the scanner is [`scan::scan_with`]: the same stat cache and
//! hashing as a full scan, fed with the spliced listing built here.

use std::collections::{BTreeSet, HashSet};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use super::blobs::{Blobs, PackWriter};
use super::manifest::{Entry, Kind, Manifest};
use super::scan::{self, Excludes, ScanStats};
use super::watch::Plan;
use super::{SnapError, SnapshotStore};

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

/// The entry for `rel` from an lstat through its parent's fd, exactly as a
/// full scan records it (skipped kinds included); None if it is gone.
fn own_entry(
    root_fd: &OwnedFd,
    root: &Path,
    rel: &[u8],
    ex: &Excludes,
    started_ns: i64,
) -> Option<Entry> {
    let par = parent(rel);
    let name = &rel[if par.is_empty() { 0 } else { par.len() + 1 }..];
    let dir = scan::open_rel_dir(root_fd, par).ok()?;
    scan::stat_entry(&dir, &full_path(root, par), par, name, ex, started_ns)
}

/// The entries directly in `rel` (not below), or None if it cannot be listed.
fn list_one(
    root_fd: &OwnedFd,
    root: &Path,
    rel: &[u8],
    ex: &Excludes,
    started_ns: i64,
) -> Option<Vec<Entry>> {
    let dir = scan::open_rel_dir(root_fd, rel).ok()?;
    let names = scan::list_dir(&dir).ok()?;
    let full = full_path(root, rel);
    let mut out = Vec::new();
    for name in names {
        if name.starts_with(scan::TEMP_PREFIX) {
            continue; // a restore's own temp file
        }
        out.extend(scan::stat_entry(&dir, &full, rel, &name, ex, started_ns));
    }
    Some(out)
}

/// The watcher's view cannot be spliced (a directory changed in a way its
/// parent's events should have reported): scan in full instead.
#[derive(Debug)]
pub struct Inconsistent(pub String);

/// The `dirty` directories re-listed against `prev`: the fresh entries (in
/// path order, unhashed) and which entries of `prev` they replace or remove
/// (`false` in the mask).
fn relist(
    root: &Path,
    root_fd: &OwnedFd,
    ex: &Excludes,
    prev: &Manifest,
    dirty: &BTreeSet<Vec<u8>>,
    started_ns: i64,
) -> Result<(Vec<Entry>, Vec<bool>), Inconsistent> {
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
            let own = own_entry(root_fd, root, d, ex, started_ns);
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
        let now = list_one(root_fd, root, d, ex, started_ns).ok_or_else(|| {
            Inconsistent(format!("{} cannot be listed", String::from_utf8_lossy(d)))
        })?;
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
                let below = scan::walk_subtree(root_fd, root, &new.path, ex, started_ns)
                    .ok_or_else(|| {
                        Inconsistent(format!(
                            "{} cannot be listed",
                            String::from_utf8_lossy(&new.path)
                        ))
                    })?;
                adds.extend(below);
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
    Ok((adds, keep))
}

/// A watcher-based snapshot: the new manifest and its delta from the
/// previous one, found without comparing the whole trees.
pub struct Spliced {
    pub manifest: Manifest,
    /// New or changed entries (any field), in path order.
    pub upserts: Vec<Entry>,
    pub removed: Vec<Vec<u8>>,
    pub stats: ScanStats,
}

fn find<'a>(m: &'a [Entry], path: &[u8]) -> Option<&'a Entry> {
    m.binary_search_by(|e| e.path.as_slice().cmp(path))
        .ok()
        .map(|i| &m[i])
}

/// Re-lists the `dirty` directories, hashes what the stat cache cannot
/// vouch for, and splices the result into `prev`. Entries outside the
/// dirty directories are taken as they are (hash and racy flag included):
/// a write to any of them since `prev`'s scan would have made its
/// directory dirty, so none needs a re-read. Cost: the dirty directories,
/// plus one copy of the untouched entries.
pub fn splice(
    root: &Path,
    ex: &Excludes,
    prev: &Manifest,
    dirty: &BTreeSet<Vec<u8>>,
    blobs: &Blobs,
    pack: &mut PackWriter,
) -> Result<Result<Spliced, Inconsistent>, std::io::Error> {
    let started_ns = scan::now_ns();
    let root_fd = scan::open_root(root)?;
    let (mut fresh, keep) = match relist(root, &root_fd, ex, prev, dirty, started_ns) {
        Ok(parts) => parts,
        Err(e) => return Ok(Err(e)),
    };
    // The stat cache, for the fresh entries only.
    let todo: Vec<usize> = (0..fresh.len())
        .filter(|&i| {
            let e = &mut fresh[i];
            if e.kind != Kind::File {
                return false;
            }
            match find(&prev.entries, &e.path) {
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
                    false
                }
                _ => true,
            }
        })
        .collect();
    let stats = scan::hash_todo(&root_fd, &mut fresh, &todo, blobs, pack)?;
    fresh.retain(|e| !e.path.is_empty());
    let mut upserts = Vec::new();
    for f in &fresh {
        if find(&prev.entries, &f.path).is_none_or(|p| p != f) {
            upserts.push(f.clone());
        }
    }
    let mut removed = Vec::new();
    for (e, _) in prev.entries.iter().zip(&keep).filter(|(_, k)| !**k) {
        if find(&fresh, &e.path).is_none() {
            removed.push(e.path.clone());
        }
    }
    let mut out: Vec<Entry> = Vec::with_capacity(prev.entries.len() + fresh.len());
    // Every path strictly after the one before it, as a walk returns them.
    let mut ordered = true;
    let mut push = |out: &mut Vec<Entry>, e: Entry| {
        ordered &= out.last().is_none_or(|l| l.path < e.path);
        out.push(e);
    };
    let mut adds = fresh.into_iter().peekable();
    for (e, keep) in prev.entries.iter().zip(keep) {
        if !keep {
            continue;
        }
        while let Some(a) = adds.next_if(|a| a.path < e.path) {
            push(&mut out, a);
        }
        push(&mut out, e.clone());
    }
    for a in adds {
        push(&mut out, a);
    }
    if !ordered {
        return Ok(Err(Inconsistent(
            "the spliced listing is out of order".into(),
        )));
    }
    Ok(Ok(Spliced {
        manifest: Manifest { entries: out },
        upserts,
        removed,
        stats,
    }))
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

/// A scan's result; `delta` (upserts, removed) against the previous
/// manifest when the watcher's splice found it on the way.
pub struct Scanned {
    pub manifest: Manifest,
    pub stats: ScanStats,
    pub delta: Option<(Vec<Entry>, Vec<Vec<u8>>)>,
}

impl Scanned {
    fn full(manifest: Manifest, stats: ScanStats) -> Self {
        Self {
            manifest,
            stats,
            delta: None,
        }
    }
}

impl SnapshotStore {
    /// Scans `folder` against its newest manifest `previous` as `plan` (the
    /// watcher's answer for it) says: only the dirty directories, or in full.
    pub(super) fn scan_folder(
        &mut self,
        folder: &Path,
        excludes: &Excludes,
        plan: Plan,
        previous: Option<&Manifest>,
        pack: &mut PackWriter,
    ) -> Result<Scanned, SnapError> {
        let (Plan::Dirty { dirs, verify }, Some(prev)) = (plan, previous) else {
            let (m, stats) = scan::scan(folder, excludes, previous, &self.blobs, pack)?;
            return Ok(Scanned::full(m, stats));
        };
        let spliced = match splice(folder, excludes, prev, &dirs, &self.blobs, pack)? {
            Ok(spliced) => spliced,
            Err(Inconsistent(why)) => {
                self.watch.reset(folder, &why);
                let (m, stats) = scan::scan(folder, excludes, previous, &self.blobs, pack)?;
                return Ok(Scanned::full(m, stats));
            }
        };
        if verify {
            let full = scan::scan(folder, excludes, previous, &self.blobs, pack)?;
            if let Some(diff) = first_difference(&spliced.manifest, &full.0) {
                self.watch.distrust(folder, &diff);
                return Ok(Scanned::full(full.0, full.1));
            }
            tracing::debug!(folder = %folder.display(), "watcher verified against a full scan");
        }
        Ok(Scanned {
            manifest: spliced.manifest,
            stats: spliced.stats,
            delta: Some((spliced.upserts, spliced.removed)),
        })
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
