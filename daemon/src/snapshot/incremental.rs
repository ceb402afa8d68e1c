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

use super::blobs::{Known, PackWriter};
use super::manifest::{Entry, Kind, Manifest, aligned};
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
        out.extend(scan::stat_entry(&dir, &full, rel, &name, ex, started_ns));
    }
    Some(out)
}

/// The watcher's view cannot be spliced (a directory changed in a way its
/// parent's events should have reported): scan in full instead.
#[derive(Debug)]
pub struct Inconsistent(pub String);

/// The `dirty` directories re-listed against the previous manifest: what
/// each listing found, and which previous entries it replaces.
struct Relist<'a> {
    root: &'a Path,
    root_fd: &'a OwnedFd,
    ex: &'a Excludes,
    prev: &'a Manifest,
    started_ns: i64,
    /// Directories listed (their direct entries are replaced).
    relisted: HashSet<&'a [u8]>,
    /// Subtrees replaced or removed as a whole (everything below them).
    covered: HashSet<Vec<u8>>,
    /// Fresh entries, unhashed.
    adds: Vec<Entry>,
    /// Positions in `prev` of directories' own entries listed afresh.
    drop_own: Vec<usize>,
}

/// `dir/` (the prefix of what is below `dir`), or empty for the root.
fn prefix_of(dir: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p
}

fn same_dir(a: &Entry, b: &Entry) -> bool {
    a.kind == Kind::Dir && b.kind == Kind::Dir && a.ino == b.ino
}

impl<'a> Relist<'a> {
    /// Re-lists every dirty directory not below one already covered.
    fn run(
        mut self,
        dirty: &'a BTreeSet<Vec<u8>>,
    ) -> Result<(Vec<Entry>, Vec<bool>), Inconsistent> {
        for d in dirty {
            if self.is_covered(d) {
                continue;
            }
            if !d.is_empty() && !self.relisted.contains(parent(d)) {
                self.own_entry(d)?;
            }
            self.relisted.insert(d.as_slice());
            self.list(d)?;
        }
        let keep = self.keep_mask();
        let mut adds = self.adds;
        adds.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        Ok((adds, keep))
    }

    fn is_covered(&self, d: &[u8]) -> bool {
        let mut p = d;
        let mut hit = self.covered.contains(p);
        while !hit && !p.is_empty() {
            p = parent(p);
            hit = self.covered.contains(p);
        }
        hit
    }

    /// The directory's own entry (its parent's listing does not have it):
    /// still the same directory, or the watcher missed an event.
    fn own_entry(&mut self, d: &[u8]) -> Result<(), Inconsistent> {
        let own = own_entry(self.root_fd, self.root, d, self.ex, self.started_ns);
        let was = self.prev.search(d).ok();
        match (own, was.and_then(|i| self.prev.get(i).map(|e| (i, e)))) {
            (Some(o), Some((i, p))) if same_dir(&o, p) => {
                self.drop_own.push(i);
                self.adds.push(o);
                Ok(())
            }
            _ => Err(Inconsistent(format!(
                "{} changed without an event in its parent",
                String::from_utf8_lossy(d)
            ))),
        }
    }

    /// Lists `d`; a directory in it that is new (or replaced) is walked
    /// whole, one that is gone (or replaced) covers its old subtree.
    fn list(&mut self, d: &[u8]) -> Result<(), Inconsistent> {
        let cannot =
            |p: &[u8]| Inconsistent(format!("{} cannot be listed", String::from_utf8_lossy(p)));
        let now = list_one(self.root_fd, self.root, d, self.ex, self.started_ns)
            .ok_or_else(|| cannot(d))?;
        let prefix = prefix_of(d);
        let prev = self.prev;
        let was: Vec<&Entry> = prev
            .iter_from(prev.lower_bound(&prefix))
            .take_while(|e| e.path.starts_with(&prefix))
            .filter(|e| !e.path[prefix.len()..].contains(&b'/'))
            .collect();
        for old in &was {
            if old.kind == Kind::Dir && !now.iter().any(|n| n.path == old.path && same_dir(n, old))
            {
                self.covered.insert(old.path.clone());
            }
        }
        for new in &now {
            if new.kind == Kind::Dir && !was.iter().any(|o| o.path == new.path && same_dir(new, o))
            {
                self.covered.insert(new.path.clone());
                let below = scan::walk_subtree(
                    self.root_fd,
                    self.root,
                    &new.path,
                    self.ex,
                    self.started_ns,
                )
                .ok_or_else(|| cannot(&new.path))?;
                self.adds.extend(below);
            }
        }
        self.adds.extend(now);
        Ok(())
    }

    /// What of the previous manifest stays: not directly in a re-listed
    /// directory, not below a covered one, not replaced by a fresh own entry.
    fn keep_mask(&self) -> Vec<bool> {
        let prev = self.prev;
        let mut keep = vec![true; prev.len()];
        for i in &self.drop_own {
            keep[*i] = false;
        }
        let mut clear = |prefix: &[u8], direct_only: bool| {
            let start = prev.lower_bound(prefix);
            for (i, e) in prev.iter_from(start).enumerate() {
                if !e.path.starts_with(prefix) {
                    break;
                }
                if !direct_only || !e.path[prefix.len()..].contains(&b'/') {
                    keep[start + i] = false;
                }
            }
        };
        for d in &self.relisted {
            clear(&prefix_of(d), true);
        }
        for c in &self.covered {
            let mut prefix = c.clone();
            prefix.push(b'/');
            clear(&prefix, false);
        }
        keep
    }
}

/// The previous manifest's files with more than one link, by inode.
struct LinkGroups<'a> {
    by_ino: std::collections::HashMap<u64, Vec<&'a Entry>>,
}

impl<'a> LinkGroups<'a> {
    fn new(prev: &'a Manifest) -> Self {
        let mut by_ino: std::collections::HashMap<u64, Vec<&Entry>> =
            std::collections::HashMap::new();
        for e in prev.iter().filter(|e| e.kind == Kind::File && e.nlink > 1) {
            by_ino.entry(e.ino).or_default().push(e);
        }
        Self { by_ino }
    }

    /// Directories of linked files some of whose names are not in the
    /// manifest (outside the folder, or excluded) and not yet dirty.
    fn outside(&self, dirty: &BTreeSet<Vec<u8>>) -> Option<BTreeSet<Vec<u8>>> {
        let more: BTreeSet<Vec<u8>> = self
            .by_ino
            .values()
            .filter(|names| names.len() < names[0].nlink as usize)
            .flatten()
            .map(|e| parent(&e.path).to_vec())
            .filter(|d| !dirty.contains(d))
            .collect();
        (!more.is_empty()).then_some(more)
    }

    /// Directories holding another name of a linked file that this listing
    /// saw (fresh) or replaced (dropped from `prev`), not yet dirty.
    fn other_names(
        &self,
        prev: &Manifest,
        fresh: &[Entry],
        keep: &[bool],
        dirty: &BTreeSet<Vec<u8>>,
    ) -> Option<BTreeSet<Vec<u8>>> {
        let dropped = prev
            .iter()
            .zip(keep)
            .filter(|(e, k)| !**k && e.kind == Kind::File && e.nlink > 1)
            .map(|(e, _)| e.ino);
        let inos: HashSet<u64> = fresh
            .iter()
            .filter(|e| e.kind == Kind::File && e.nlink > 1)
            .map(|e| e.ino)
            .chain(dropped)
            .collect();
        if inos.is_empty() {
            return None;
        }
        // A new link raises no event in the old name's directory (its link
        // count changed, not the directory), and `prev` may have that name
        // with one link: look through all of it.
        let more: BTreeSet<Vec<u8>> = prev
            .iter()
            .filter(|e| e.kind == Kind::File && inos.contains(&e.ino))
            .map(|e| parent(&e.path).to_vec())
            .filter(|d| !dirty.contains(d))
            .collect();
        (!more.is_empty()).then_some(more)
    }
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

/// The stat cache for the fresh entries: each file whose stat data match
/// its previous entry takes that entry's hash; returns the ones to hash.
fn trust_stat_cache(prev: &Manifest, fresh: &mut [Entry], blobs: &Known) -> Vec<usize> {
    (0..fresh.len())
        .filter(|&i| {
            let e = &mut fresh[i];
            if e.kind != Kind::File {
                return false;
            }
            match prev.find(&e.path) {
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
        .collect()
}

/// The delta from `prev` to the spliced manifest: fresh entries that
/// differ, and dropped paths that were not listed again.
fn delta(prev: &Manifest, fresh: &[Entry], keep: &[bool]) -> (Vec<Entry>, Vec<Vec<u8>>) {
    let upserts = fresh
        .iter()
        .filter(|f| prev.find(&f.path).is_none_or(|p| p != *f))
        .cloned()
        .collect();
    let removed = prev
        .iter()
        .zip(keep)
        .filter(|(e, k)| !**k && find(fresh, &e.path).is_none())
        .map(|(e, _)| e.path.clone())
        .collect();
    (upserts, removed)
}

/// Re-lists the `dirty` directories, hashes what the stat cache cannot
/// vouch for, and splices the result into `prev`. Entries outside the
/// dirty directories are taken as they are (hash and racy flag included):
/// a write to any of them since `prev`'s scan would have made its
/// directory dirty, so none needs a re-read. Cost: the dirty directories;
/// the new manifest shares every chunk of `prev` they do not touch.
pub fn splice(
    root: &Path,
    ex: &Excludes,
    prev: &Manifest,
    dirty: &BTreeSet<Vec<u8>>,
    blobs: &Known,
    pack: &mut PackWriter,
) -> Result<Result<Spliced, Inconsistent>, std::io::Error> {
    let started_ns = scan::now_ns();
    let t0 = std::time::Instant::now();
    let root_fd = scan::open_root(root)?;
    // Hard links: a write through one name changes every name of the
    // inode, but only its own directory has an event. Directories holding
    // another name of a re-listed linked file are re-listed too (again,
    // until none is left), and a file with names outside the folder (or
    // in excluded directories) always has its directories re-listed.
    let links = LinkGroups::new(prev);
    let mut dirty = std::borrow::Cow::Borrowed(dirty);
    if let Some(more) = links.outside(dirty.as_ref()) {
        dirty.to_mut().extend(more);
    }
    let (mut fresh, keep) = loop {
        let relist = Relist {
            root,
            root_fd: &root_fd,
            ex,
            prev,
            started_ns,
            relisted: HashSet::new(),
            covered: HashSet::new(),
            adds: Vec::new(),
            drop_own: Vec::new(),
        };
        let (fresh, keep) = match relist.run(&dirty) {
            Ok(parts) => parts,
            Err(e) => return Ok(Err(e)),
        };
        match links.other_names(prev, &fresh, &keep, &dirty) {
            Some(more) => dirty.to_mut().extend(more),
            None => break (fresh, keep),
        }
    };
    let t_relist = t0.elapsed();
    let todo = trust_stat_cache(prev, &mut fresh, blobs);
    let stats = scan::hash_todo(&root_fd, &mut fresh, &todo, blobs, pack)?;
    let t_hash = t0.elapsed();
    fresh.retain(|e| !e.path.is_empty());
    let (upserts, removed) = delta(prev, &fresh, &keep);
    let merged = prev.merged(&keep, fresh);
    tracing::debug!(
        relist_us = t_relist.as_micros(),
        hash_us = (t_hash - t_relist).as_micros(),
        merge_us = (t0.elapsed() - t_hash).as_micros(),
        hashed = todo.len(),
        "splice phases"
    );
    let Some(manifest) = merged else {
        return Ok(Err(Inconsistent(
            "the spliced listing is out of order".into(),
        )));
    };
    Ok(Ok(Spliced {
        manifest,
        upserts,
        removed,
        stats,
    }))
}

/// The first difference between two manifests, ignoring the racy flag (a
/// hint that depends on when each scan ran).
pub fn first_difference(a: &Manifest, b: &Manifest) -> Option<String> {
    let show = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
    aligned([a, b]).find_map(|(path, [x, y])| match (x, y) {
        (Some(x), Some(y)) => {
            let differs = x != y && {
                let mut y = y.clone();
                y.racy = x.racy;
                *x != y
            };
            differs.then(|| format!("{} differs", show(path)))
        }
        (Some(_), None) => Some(format!("{} only in the first", show(path))),
        (None, Some(_)) => Some(format!("{} only in the second", show(path))),
        (None, None) => None,
    })
}

/// A scan's result; `delta` (upserts, removed) against the previous
/// manifest when the watcher's splice found it on the way.
pub struct Scanned {
    pub manifest: Manifest,
    pub stats: ScanStats,
    pub delta: Option<(Vec<Entry>, Vec<Vec<u8>>)>,
}

impl Scanned {
    pub(super) fn full(manifest: Manifest, stats: ScanStats) -> Self {
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
            // A watch just started gets its watches from this scan's walk.
            let filler = self.watch.filler(folder);
            let hook = filler.as_ref().map(|f| f as &dyn scan::DirHook);
            let scanned =
                scan::scan_hooked(folder, excludes, previous, self.blobs.known(), pack, hook);
            if let Some(f) = filler.map(super::watch::Filler::finish) {
                self.watch.filled(folder, scanned.is_ok().then_some(f));
            }
            let (m, stats) = scanned?;
            return Ok(Scanned::full(m, stats));
        };
        let spliced = match splice(folder, excludes, prev, &dirs, self.blobs.known(), pack)? {
            Ok(spliced) => spliced,
            Err(Inconsistent(why)) => {
                self.watch.reset(folder, &why);
                let (m, stats) = scan::scan(folder, excludes, previous, self.blobs.known(), pack)?;
                return Ok(Scanned::full(m, stats));
            }
        };
        if verify {
            let full = scan::scan(folder, excludes, previous, self.blobs.known(), pack)?;
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

    /// Whether the newest manifest `base` holds a file with names outside
    /// the folder (or excluded): a write through one sends the folder no
    /// event, so such a folder is never taken as unchanged without a look.
    /// Remembered per manifest.
    pub(super) fn has_outside_links(
        &mut self,
        folder: &Path,
        base: &str,
    ) -> Result<bool, SnapError> {
        let fs = self.folder(folder)?;
        if let Some((id, has)) = &fs.outside_links
            && id == base
        {
            return Ok(*has);
        }
        // Read back from disk if it left memory (`keep_resident`).
        let Some((id, m, _)) = self.latest(folder)? else {
            return Ok(false);
        };
        if id != base {
            return Ok(false);
        }
        let has = LinkGroups::new(&m).outside(&BTreeSet::new()).is_some();
        self.folder(folder)?.outside_links = Some((base.to_owned(), has));
        Ok(has)
    }

    /// `agentx status`: whether the folder is watched, and why not.
    pub fn watch_status(&self, folder: &Path) -> String {
        self.watch.describe(folder)
    }
}
