//! The live check: before a restore touches a path, what stands there now
//! must be what its plan believes (one `lstat` per path, no rescan).
//!
//! A watcher can miss a change (a renamed ancestor, a mount, a write through
//! a hard link from outside the folder, a shared mapping), so the plan's
//! picture of the folder may be stale. Compared per path: file type, size,
//! mtime and ctime (ns), inode, permission bits, and a symlink's target; for
//! a directory its type, inode and mode (its times change with its
//! children). The path's parent directory must be the one the plan knows
//! (same inode), so a mount or a replaced directory on the way is caught
//! too. Any difference is reported, never written over.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use nix::errno::Errno;
use nix::sys::stat::fstatat;

use super::path_error::PathError;
use super::plan::Op;
use super::{components, libc_s_ifmt};
use crate::snapshot::manifest::{Entry, Kind, Manifest};
use crate::snapshot::scan;

/// A parent directory opened for the check, with its inode.
struct Parent {
    rel: Vec<u8>,
    fd: Option<OwnedFd>,
    ino: u64,
}

fn parent_of(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (b"", path),
    }
}

/// The ops whose path is not what the plan believes, with why. `current`
/// is the manifest the plan was made against (for the parents' identity).
/// Ops already left alone are not checked.
pub fn check(root: &Path, ops: &[Op], current: &Manifest) -> Vec<(Vec<u8>, String)> {
    let root_fd = match scan::open_root(root) {
        Ok(fd) => fd,
        Err(e) => {
            let why = format!("cannot open {}: {e}", root.display());
            return ops
                .iter()
                .filter(|o| o.left_alone.is_none())
                .map(|o| (o.path.clone(), why.clone()))
                .collect();
        }
    };
    let mut parent: Option<Parent> = None;
    let mut out = Vec::new();
    for op in ops.iter().filter(|o| o.left_alone.is_none()) {
        if let Err(why) = check_one(&root_fd, op, current, &mut parent) {
            out.push((op.path.clone(), why.to_string()));
        }
    }
    out
}

fn check_one(
    root_fd: &OwnedFd,
    op: &Op,
    current: &Manifest,
    cache: &mut Option<Parent>,
) -> Result<(), PathError> {
    components(&op.path)?;
    let (par, name) = parent_of(&op.path);
    if cache.as_ref().is_none_or(|p| p.rel != par) {
        *cache = Some(open_parent(root_fd, par)?);
    }
    let Some(parent) = cache.as_ref() else {
        return Err(PathError::NoFolder);
    };
    // The parent must be the directory the plan knows (a mount, or a
    // directory replaced by another, changes its inode); where the plan
    // knows no directory (nothing, a file, a symlink), none may stand.
    if !par.is_empty() {
        let known = current.find(par).filter(|e| e.kind == Kind::Dir);
        match (known, &parent.fd) {
            (Some(e), Some(_)) if e.ino == parent.ino => {}
            (None, None) => {}
            (Some(_), None) => return Err(PathError::Changed("its folder is gone")),
            _ => {
                return Err(PathError::Changed(
                    "its folder was replaced or mounted over",
                ));
            }
        }
    }
    let Some(dir) = &parent.fd else {
        // No parent: nothing stands at the path, as a plan with no parent
        // entry believes.
        return match &op.now {
            None => Ok(()),
            Some(_) => Err(PathError::Changed("it is gone")),
        };
    };
    match (&op.now, lstat(dir, name)?) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(PathError::Changed("something new stands there")),
        (Some(_), None) => Err(PathError::Changed("it is gone")),
        (Some(want), Some(st)) => same(dir, name, want, &st),
    }
}

/// Whether `name` in `dir` is still what the plan believes stands there
/// (`now`; `None`: nothing), asked right before the restore replaces or
/// removes it: a save that lands while the restore writes is kept.
pub(super) fn still(dir: &OwnedFd, name: &[u8], now: Option<&Entry>) -> Result<(), PathError> {
    match (now, lstat(dir, name)?) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(PathError::Moved("something new stands there")),
        (Some(_), None) => Err(PathError::Moved("it is gone")),
        (Some(want), Some(st)) => {
            // Replacing one name of a hard-linked file changes the others'
            // ctime (their link count): compared without it. A write
            // through any name still changes the mtime.
            let mut want = want.clone();
            if want.nlink > 1 {
                want.ctime_ns = scan::ns(st.st_ctime, st.st_ctime_nsec);
            }
            same(dir, name, &want, &st).map_err(|e| match e {
                PathError::Changed(why) => PathError::Moved(why),
                other => other,
            })
        }
    }
}

/// What stands at `name` in `dir` (never followed), `None` when nothing.
fn lstat(dir: &OwnedFd, name: &[u8]) -> Result<Option<nix::sys::stat::FileStat>, PathError> {
    match fstatat(
        dir,
        OsStr::from_bytes(name),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    ) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(PathError::Unchecked(e)),
    }
}

fn open_parent(root_fd: &OwnedFd, rel: &[u8]) -> Result<Parent, PathError> {
    let fd = if rel.is_empty() {
        Some(root_fd.try_clone()?)
    } else {
        match scan::open_rel_dir(root_fd, rel) {
            Ok(fd) => Some(fd),
            // Nothing, or not a directory (a file, a symlink: never followed).
            Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR) => None,
            Err(e) => return Err(PathError::Unchecked(e)),
        }
    };
    let ino = match &fd {
        Some(fd) => nix::sys::stat::fstat(fd)?.st_ino,
        None => 0,
    };
    Ok(Parent {
        rel: rel.to_vec(),
        fd,
        ino,
    })
}

/// Whether the live `st` is the entry the plan holds.
fn same(
    dir: &OwnedFd,
    name: &[u8],
    want: &Entry,
    st: &nix::sys::stat::FileStat,
) -> Result<(), PathError> {
    let kind = match st.st_mode & libc_s_ifmt() {
        0o040000 => Kind::Dir,
        0o120000 => Kind::Symlink,
        _ => Kind::File,
    };
    // Not captured then: compared by what can be (a restore leaves it anyway).
    let want_kind = if want.kind == Kind::Skipped {
        kind
    } else {
        want.kind
    };
    if kind != want_kind {
        return Err(PathError::Changed("its type changed"));
    }
    if st.st_ino != want.ino {
        return Err(PathError::Changed("another file stands there"));
    }
    if st.st_mode & 0o7777 != want.mode {
        return Err(PathError::Changed("its mode changed"));
    }
    if kind == Kind::Dir {
        return Ok(());
    }
    let mtime = scan::ns(st.st_mtime, st.st_mtime_nsec);
    let ctime = scan::ns(st.st_ctime, st.st_ctime_nsec);
    if (kind == Kind::File && want.kind != Kind::Skipped && st.st_size as u64 != want.size)
        || mtime != want.mtime_ns
        || ctime != want.ctime_ns
    {
        return Err(PathError::Changed("it was written to"));
    }
    if kind == Kind::Symlink && want.kind == Kind::Symlink {
        let target =
            nix::fcntl::readlinkat(dir, OsStr::from_bytes(name)).map_err(PathError::Unchecked)?;
        if target.as_bytes() != want.target.as_slice() {
            return Err(PathError::Changed("its target changed"));
        }
    }
    Ok(())
}
