//! Scanning a folder into a manifest: a parallel walk pruning excluded
//! directories, and the stat cache; `read` hashes what it cannot vouch for.
//!
//! The stat cache reuses the previous hash when size, times, inode and mode
//! match and the entry was not racy.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{Mode, fstatat};
use rayon::prelude::*;

use super::blobs::{Known, PackWriter};
use super::manifest::{Entry, Kind, Manifest, why};

mod read;

pub(super) use read::hash_todo;

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

/// The (device, inode) the path `root` leads to now.
pub(crate) fn identity(root: &Path) -> Option<[u64; 2]> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(root).ok().map(|m| [m.dev(), m.ino()])
}

pub(super) fn ns(secs: i64, nsec: i64) -> i64 {
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

/// Opens a directory below `dir` without following a symlink.
pub fn open_dir_at(dir: impl AsFd, name: &[u8]) -> nix::Result<OwnedFd> {
    openat(
        dir,
        OsStr::from_bytes(name),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// The names in the directory open at `dir` (without `.` and `..`).
pub fn list_dir(dir: &OwnedFd) -> nix::Result<Vec<Vec<u8>>> {
    let mut listing = Dir::from_fd(dir.try_clone().map_err(|_| Errno::EMFILE)?)?;
    let mut names = Vec::new();
    for entry in listing.iter() {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    Ok(names)
}

/// `rel` joined under `parent` (both relative, `/`-separated).
fn child_path(rel: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = Vec::with_capacity(rel.len() + 1 + name.len());
    if !rel.is_empty() {
        path.extend_from_slice(rel);
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// One path's entry from an lstat through its directory's fd: files over
/// the size limit, excluded directories and special files are recorded as
/// [`Kind::Skipped`] with the reason (present, never touched by a restore).
/// `None`: it vanished. (A file watcher re-stats single paths with this.)
pub fn stat_entry(
    dir: &OwnedFd,
    full_dir: &Path,
    rel: &[u8],
    name: &[u8],
    ex: &Excludes,
    started_ns: i64,
) -> Option<Entry> {
    let st = fstatat(dir, OsStr::from_bytes(name), AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    let fmt = st.st_mode & 0o170000;
    let mut skipped: Option<&[u8]> = None;
    let kind = match fmt {
        0o040000 => {
            if excluded(name, &ex.names)
                || ex
                    .paths
                    .iter()
                    .any(|p| *p == full_dir.join(OsStr::from_bytes(name)))
            {
                skipped = Some(why::EXCLUDED);
            }
            Kind::Dir
        }
        0o120000 => Kind::Symlink,
        0o100000 => {
            if st.st_size as u64 > MAX_FILE {
                skipped = Some(why::OVERSIZED);
            }
            Kind::File
        }
        _ => {
            skipped = Some(why::special_kind(fmt));
            Kind::File
        }
    };
    let mtime_ns = ns(st.st_mtime, st.st_mtime_nsec);
    let mut e = Entry {
        path: child_path(rel, name),
        kind,
        mode: st.st_mode & 0o7777,
        size: if kind == Kind::File {
            st.st_size as u64
        } else {
            0
        },
        mtime_ns,
        ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
        ino: st.st_ino,
        racy: mtime_ns > started_ns - RACY_NS,
        hash: [0; 32],
        target: Vec::new(),
        uid: st.st_uid,
        gid: st.st_gid,
        nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
    };
    if let Some(reason) = skipped {
        e.kind = Kind::Skipped;
        e.size = 0;
        e.target = reason.to_vec();
    } else if kind == Kind::Symlink {
        match readlinkat(dir, OsStr::from_bytes(name)) {
            Ok(t) => e.target = t.as_bytes().to_vec(),
            Err(Errno::ENOENT) => return None,
            Err(_) => {
                e.kind = Kind::Skipped;
                e.target = why::UNREADABLE.to_vec();
            }
        }
    }
    Some(e)
}

/// Lists one directory through its fd (opened with `O_NOFOLLOW`, so paths
/// of any length are reached and no symlink is followed) and, in parallel,
/// the directories below it. A directory that cannot be listed is recorded
/// as [`Kind::Skipped`] (unreadable), never as absent. The result is in
/// byte order of the full paths: entries sort by name, and a
/// subdirectory's contents by its name plus `/` — so no global sort.
fn walk_dir(
    dir: &OwnedFd,
    full_dir: &Path,
    rel: &[u8],
    ex: &Excludes,
    started_ns: i64,
    hook: Option<&dyn DirHook>,
) -> Vec<Entry> {
    walk_listed(dir, full_dir, rel, ex, started_ns, hook).unwrap_or_default()
}

/// [`walk_dir`], or None when `dir` itself cannot be listed (the caller
/// marks it).
fn walk_listed(
    dir: &OwnedFd,
    full_dir: &Path,
    rel: &[u8],
    ex: &Excludes,
    started_ns: i64,
    hook: Option<&dyn DirHook>,
) -> Option<Vec<Entry>> {
    if let Some(hook) = hook {
        hook.entering(dir, rel);
    }
    let names = list_dir(dir).ok()?;
    let mut out = Vec::new();
    let mut subdirs = Vec::new();
    for name in names {
        let Some(e) = stat_entry(dir, full_dir, rel, &name, ex, started_ns) else {
            continue;
        };
        if e.kind == Kind::Dir {
            subdirs.push((e.path.clone(), name));
        }
        out.push(e);
    }
    let nested: Vec<(Vec<Entry>, bool)> = subdirs
        .par_iter()
        .map(|(sub, name)| match open_dir_at(dir, name) {
            Ok(fd) => {
                let full = full_dir.join(OsStr::from_bytes(name));
                match walk_listed(&fd, &full, sub, ex, started_ns, hook) {
                    Some(entries) => (entries, true),
                    None => (Vec::new(), false),
                }
            }
            Err(Errno::ENOENT) => (Vec::new(), true),
            Err(_) => (Vec::new(), false),
        })
        .collect();
    // Directories that could not be opened or listed: present, unreadable.
    for ((sub, _), (_, listed)) in subdirs.iter().zip(&nested) {
        if !listed && let Some(e) = out.iter_mut().find(|e| e.path == *sub) {
            e.kind = Kind::Skipped;
            e.target = why::UNREADABLE.to_vec();
        }
    }
    let subdirs: Vec<Vec<u8>> = subdirs.into_iter().map(|(p, _)| p).collect();
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
    let mut nested: Vec<Option<Vec<Entry>>> = nested.into_iter().map(|(v, _)| Some(v)).collect();
    let mut sorted = Vec::with_capacity(parts.len());
    for part in parts {
        match part {
            Part::One(e) => sorted.push(e),
            Part::Tree(i) => sorted.extend(nested[i].take().unwrap_or_default()),
        }
    }
    Some(sorted)
}

/// Told of every directory a full scan is about to list (the watcher puts
/// its watch there first, so the scan and the watch start in one walk).
pub trait DirHook: Sync {
    fn entering(&self, dir: &OwnedFd, rel: &[u8]);
}

/// Walks `root` and builds its manifest, storing new content in `pack`.
pub fn scan(
    root: &Path,
    excludes: &Excludes,
    previous: Option<&Manifest>,
    blobs: &Known,
    pack: &mut PackWriter,
) -> std::io::Result<(Manifest, ScanStats)> {
    scan_hooked(root, excludes, previous, blobs, pack, None)
}

/// [`scan`], telling `hook` of each directory before it is listed.
pub fn scan_hooked(
    root: &Path,
    excludes: &Excludes,
    previous: Option<&Manifest>,
    blobs: &Known,
    pack: &mut PackWriter,
    hook: Option<&dyn DirHook>,
) -> std::io::Result<(Manifest, ScanStats)> {
    scan_with(root, previous, blobs, pack, |root_fd, started_ns| {
        walk_dir(root_fd, root, &[], excludes, started_ns, hook)
    })
}

/// Opens the directory at `rel` below `root_fd` through directory fds (no
/// symlink followed, no `PATH_MAX` limit).
pub(super) fn open_rel_dir(root_fd: &OwnedFd, rel: &[u8]) -> nix::Result<OwnedFd> {
    let mut dir = root_fd.try_clone().map_err(|_| Errno::EMFILE)?;
    if rel.is_empty() {
        return Ok(dir);
    }
    for part in rel.split(|b| *b == b'/') {
        dir = open_dir_at(&dir, part)?;
    }
    Ok(dir)
}

/// Everything below the directory `rel` in path order (not `rel` itself),
/// as a full walk lists it; None when it cannot be opened or listed.
pub(super) fn walk_subtree(
    root_fd: &OwnedFd,
    root: &Path,
    rel: &[u8],
    ex: &Excludes,
    started_ns: i64,
) -> Option<Vec<Entry>> {
    let fd = open_rel_dir(root_fd, rel).ok()?;
    list_dir(&fd).ok()?;
    let full = root.join(OsStr::from_bytes(rel));
    Some(walk_dir(&fd, &full, rel, ex, started_ns, None))
}

/// [`scan`] with the listing supplied: `walk(root_fd, started_ns)` returns
/// every entry of the folder in path order, unhashed (the watcher's splice).
pub(super) fn scan_with(
    root: &Path,
    previous: Option<&Manifest>,
    blobs: &Known,
    pack: &mut PackWriter,
    walk: impl FnOnce(&OwnedFd, i64) -> Vec<Entry>,
) -> std::io::Result<(Manifest, ScanStats)> {
    let started_ns = now_ns();
    let root_fd = open_root(root)?;
    // Already in path order (see walk_dir).
    let mut entries = walk(&root_fd, started_ns);
    let mut needs_hash: Vec<bool> = entries.iter().map(|e| e.kind == Kind::File).collect();

    // The stat cache: walk the previous manifest (sorted too) alongside and
    // reuse a file's hash when nothing about it changed.
    if let Some(prev) = previous {
        let mut old = prev.iter().peekable();
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

    let todo: Vec<usize> = (0..entries.len()).filter(|i| needs_hash[*i]).collect();
    let stats = hash_todo(&root_fd, &mut entries, &todo, blobs, pack)?;
    // Still sorted: entries are only left out, never reordered.
    entries.retain(|e| !e.path.is_empty());
    let manifest = Manifest::from_entries(entries);
    Ok((manifest, stats))
}

/// Now in nanoseconds since the epoch (a scan's start).
pub(super) fn now_ns() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_nanos()).unwrap_or(i64::MAX)
}

/// Opens the folder being scanned.
pub(super) fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
    let root_fd = openat(
        AT_FDCWD,
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(std::io::Error::from)?;
    list_dir(&root_fd).map_err(std::io::Error::from)?;
    Ok(root_fd)
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
        let fd = open_dir_at(AT_FDCWD, root.as_os_str().as_bytes()).unwrap();
        let entries = walk_dir(&fd, root, &[], &Excludes::default(), 0, None);
        let paths: Vec<&[u8]> = entries.iter().map(|e| e.path.as_slice()).collect();
        let mut sorted = paths.clone();
        sorted.sort();
        assert_eq!(paths, sorted);
        assert_eq!(paths.len(), 15);
    }
}
