//! Putting paths back: plans (what an undo or rewind would change, with
//! conflicts) and applying them through directory file descriptors.
//!
//! So nothing is written outside the folder and no symlink is followed.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, OFlag, openat};
use nix::sys::stat::{Mode, UtimensatFlags, fstatat, mkdirat, utimensat};
use nix::sys::time::TimeSpec;
use nix::unistd::{UnlinkatFlags, unlinkat};
use rayon::prelude::*;

use super::blobs::Reader;
use super::manifest::{Entry, Kind};
use super::scan::MAX_FILE;

mod durable;
pub mod live;
mod path_error;
mod plan;
mod put;

use durable::{Devices, make_durable};
pub use path_error::PathError;
pub use plan::{Action, Op, Planned, Suspects, describe, escape, plan_rewind, plan_undo};
use put::put;

/// Refuses paths that could leave the folder.
fn components(path: &[u8]) -> Result<Vec<&[u8]>, PathError> {
    let parts: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    if path.is_empty()
        || parts
            .iter()
            .any(|c| c.is_empty() || *c == b"." || *c == b"..")
    {
        return Err(PathError::Unsafe(
            String::from_utf8_lossy(path).into_owned(),
        ));
    }
    Ok(parts)
}

fn open_dir(dirfd: impl AsFd, name: &[u8]) -> nix::Result<OwnedFd> {
    openat(
        dirfd,
        OsStr::from_bytes(name),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Restores of up to this many written paths are made durable by fsyncing
/// each of them and their directories at the end (a handful of fsyncs that
/// the file system commits together); larger ones by one `syncfs` per file
/// system, which is cheaper than thousands of fsyncs.
const SYNC_EACH_MAX: usize = 64;

/// Below this many files the restore runs on the calling thread.
const PARALLEL_MIN: usize = 32;

/// Threads of a restore: the machine's parallelism, at least 2, at most 8.
fn restore_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, std::num::NonZero::get)
        .clamp(2, 8)
}

/// Applies restore steps under `root` (ops left alone are not passed
/// here). Removals run deepest first, then directories parents first, then
/// files and symlinks in parallel (each written to a temp file beside it and
/// renamed over it, so a reader sees the old or the new file, never half
/// of one); files that were hard links of each other become links again.
///
/// No file is fsynced on its own: before returning, everything written is
/// made durable at once (`syncfs`, or for a small restore an fsync pass
/// over the written paths and their directories). The caller's intent
/// journal covers the window: it is removed only after this returns, and a
/// crash before then re-applies every journaled path on the next start.
/// Returns the paths that failed, with why (the rest still runs); a path
/// whose write could not be made durable counts as failed.
/// What [`apply`] could not do: paths that failed (with why), and paths
/// that changed while it ran (kept as the user has them: conflicts).
#[derive(Debug, Default)]
pub struct NotDone {
    pub failed: Vec<(Vec<u8>, String)>,
    pub moved: Vec<(Vec<u8>, String)>,
}

/// How [`apply`] writes: `token` names its temp files (recorded in the
/// restore's journal first, so only they are ever removed); `recheck`
/// compares each path with what the plan believes right before replacing
/// or removing it (off when an interrupted restore is finished);
/// `excluded`: the directory names scans leave out besides
/// [`EXCLUDED_DIRS`](super::scan::EXCLUDED_DIRS) (`snapshot_exclude`).
pub struct Writing<'a> {
    pub token: &'a str,
    pub recheck: bool,
    pub excluded: &'a [String],
}

pub fn apply(root: &Path, ops: &[Op], blobs: &Reader, how: &Writing<'_>) -> NotDone {
    let root_fd = match openat(
        AT_FDCWD,
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => {
            let why = format!("cannot open {}: {e}", root.display());
            return NotDone {
                failed: ops.iter().map(|o| (o.path.clone(), why.clone())).collect(),
                moved: Vec::new(),
            };
        }
    };
    let devices = Devices::new(&root_fd);
    let mut run = Applier {
        root_fd: &root_fd,
        blobs,
        devices: &devices,
        how,
        touched: Vec::new(),
        errors: Vec::new(),
        moved: Vec::new(),
    };
    // Removals deepest first.
    let mut removals: Vec<&Op> = ops.iter().filter(|o| o.action == Action::Remove).collect();
    removals.sort_by(|a, b| b.path.cmp(&a.path));
    for op in removals {
        let now = how.recheck.then_some(op.now.as_ref());
        let done = remove(&root_fd, &op.path, &devices, now, how.excluded);
        run.note_outcome(op, done);
    }
    let mut creations: Vec<&Op> = ops.iter().filter(|o| o.want.is_some()).collect();
    creations.sort_by(|a, b| a.path.cmp(&b.path));
    let dirs = run.directories(&creations);
    // Files and symlinks. Hard links go one after the other in path order;
    // the rest in parallel.
    let (serial, parallel): (Vec<&Op>, Vec<&Op>) = creations
        .into_iter()
        .filter(|o| !is_kind(o, Kind::Dir))
        .partition(|o| {
            o.want
                .as_ref()
                .is_some_and(|w| w.kind == Kind::File && w.nlink > 1)
        });
    run.one_by_one(serial);
    run.in_parallel(parallel);
    // Directory mtimes last: creating their children changed them.
    for want in dirs.into_iter().rev() {
        set_dir_mtime(&root_fd, want);
    }
    let Applier {
        touched,
        mut errors,
        moved,
        ..
    } = run;
    errors.extend(make_durable(&root_fd, &touched, &devices));
    NotDone {
        failed: errors,
        moved,
    }
}

/// One restore's progress: what it changed (made durable at the end) and
/// what failed.
struct Applier<'a> {
    root_fd: &'a OwnedFd,
    blobs: &'a Reader,
    devices: &'a Devices,
    how: &'a Writing<'a>,
    touched: Vec<&'a [u8]>,
    errors: Vec<(Vec<u8>, String)>,
    moved: Vec<(Vec<u8>, String)>,
}

impl<'a> Applier<'a> {
    fn note_outcome(&mut self, op: &'a Op, done: Result<(), PathError>) {
        match done {
            Ok(()) => self.touched.push(&op.path),
            Err(e @ (PathError::Moved(_) | PathError::Filled)) => {
                self.moved.push((op.path.clone(), e.to_string()));
            }
            Err(e) => self.errors.push((op.path.clone(), e.to_string())),
        }
    }

    fn put(&self, op: &Op, want: &Entry, link_to: Option<&[u8]>) -> Result<(), PathError> {
        let tmp = temp_name(self.how.token, &want.path);
        let how = put::Putting {
            now: op.now.as_ref(),
            recheck: self.how.recheck,
            tmp: &tmp,
        };
        let done = put(self.root_fd, want, self.blobs, link_to, self.devices, &how);
        #[cfg(test)]
        if done.is_ok() {
            super::seams::restored(&op.path);
        }
        done
    }

    /// Directories, parents first, on this thread; returns the ones made.
    fn directories(&mut self, creations: &[&'a Op]) -> Vec<&'a Entry> {
        let mut made = Vec::new();
        for op in creations.iter().filter(|o| is_kind(o, Kind::Dir)) {
            let Some(want) = &op.want else { continue };
            let done = self.put(op, want, None);
            if done.is_ok() {
                made.push(want);
            }
            self.note_outcome(op, done);
        }
        made
    }

    /// Files in path order; a file of a hard-link group after the first
    /// becomes a link to it.
    fn one_by_one(&mut self, ops: Vec<&'a Op>) {
        // Inode (in the snapshot) → a path already restored with it.
        let mut linked: HashMap<u64, &[u8]> = HashMap::new();
        for op in ops {
            let Some(want) = &op.want else { continue };
            let group = want.kind == Kind::File && want.nlink > 1;
            let link_to = group.then(|| linked.get(&want.ino).copied()).flatten();
            let done = self.put(op, want, link_to);
            if done.is_ok() && group {
                linked.entry(want.ino).or_insert(&want.path);
            }
            self.note_outcome(op, done);
        }
    }

    /// Independent files and symlinks, on a thread pool when there are many.
    fn in_parallel(&mut self, ops: Vec<&'a Op>) {
        let put_one = |op: &&Op| -> Result<(), PathError> {
            match &op.want {
                Some(want) => self.put(op, want, None),
                None => Ok(()),
            }
        };
        let results: Vec<Result<(), PathError>> = if ops.len() >= PARALLEL_MIN {
            match rayon::ThreadPoolBuilder::new()
                .num_threads(restore_threads())
                .thread_name(|i| format!("agentd-restore-{i}"))
                .build()
            {
                Ok(pool) => pool.install(|| ops.par_iter().map(put_one).collect()),
                Err(_) => ops.iter().map(put_one).collect(),
            }
        } else {
            ops.iter().map(put_one).collect()
        };
        for (op, done) in ops.into_iter().zip(results) {
            self.note_outcome(op, done);
        }
    }
}

/// Puts back a restored directory's mtime (best effort).
fn set_dir_mtime(root_fd: &OwnedFd, want: &Entry) {
    let _ = with_parent(root_fd, &want.path, false, |dir, name| {
        let t = TimeSpec::new(
            want.mtime_ns.div_euclid(1_000_000_000),
            want.mtime_ns.rem_euclid(1_000_000_000),
        );
        utimensat(
            dir,
            OsStr::from_bytes(name),
            &t,
            &t,
            UtimensatFlags::NoFollowSymlink,
        )
        .map_err(PathError::from)
    });
}

fn is_kind(op: &Op, kind: Kind) -> bool {
    op.want.as_ref().is_some_and(|w| w.kind == kind)
}

/// Removes what an interrupted restore may have left of its temp files
/// beside `paths`: exactly the names made from its `token` (recorded in
/// its journal before any was created), never another file. A journal of
/// an older agentd has no token: its temp names were `.agentx-restore-NAME`.
pub fn remove_temps(root: &Path, paths: &[Vec<u8>], token: &str) {
    let Ok(root_fd) = openat(
        AT_FDCWD,
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    for path in paths {
        let _ = with_parent(&root_fd, path, false, |dir, name| {
            let tmp = if token.is_empty() {
                legacy_temp_name(name)
            } else {
                temp_name(token, path)
            };
            match unlinkat(dir, OsStr::from_bytes(&tmp), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => Ok(()),
                Err(e) => Err(PathError::Sys(e)),
            }
        });
    }
}

/// Runs `f` with the parent directory of `path` (opened without following
/// any symlink) and the last component. With `create`, missing parents are
/// made (0755) — never through a symlink or a file.
fn with_parent<T>(
    root: &OwnedFd,
    path: &[u8],
    create: bool,
    f: impl FnOnce(&OwnedFd, &[u8]) -> Result<T, PathError>,
) -> Result<T, PathError> {
    let parts = components(path)?;
    // `components` refuses an empty path.
    let (name, parents) = parts
        .split_last()
        .ok_or_else(|| PathError::Unsafe(String::new()))?;
    let mut dir: Option<OwnedFd> = None;
    for part in parents {
        let base = dir.as_ref().unwrap_or(root);
        let next = match open_dir(base, part) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if create => {
                // Another restore thread may make it first.
                match mkdirat(
                    base,
                    OsStr::from_bytes(part),
                    Mode::from_bits_truncate(0o755),
                ) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(PathError::Sys(e)),
                }
                open_dir(base, part)?
            }
            Err(Errno::ENOENT) => return Err(PathError::Missing),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(PathError::ParentNotDir);
            }
            Err(e) => return Err(PathError::Sys(e)),
        };
        dir = Some(next);
    }
    f(dir.as_ref().unwrap_or(root), name)
}

/// Removes `path`; with `recheck` (`Some(now)`), only if it still is what
/// the plan believes (`now`) — gone already is fine. A directory that is
/// not empty stays: quietly when all it holds is what snapshots leave out
/// by rule (excluded directories, `excluded` among them, files over the
/// size limit, FIFOs, sockets and devices), otherwise — with `recheck` —
/// as [`PathError::Filled`]: the user's files in it are kept, a conflict.
fn remove(
    root: &OwnedFd,
    path: &[u8],
    devices: &Devices,
    recheck: Option<Option<&Entry>>,
    excluded: &[String],
) -> Result<(), PathError> {
    let result = with_parent(root, path, false, |dir, raw| {
        devices.note(dir);
        let name = OsStr::from_bytes(raw);
        let st = match fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(PathError::Sys(e)),
        };
        if let Some(now) = recheck {
            live::still(dir, raw, now)?;
        }
        if too_big_now(&st) {
            return Err(PathError::OversizedNow);
        }
        let is_dir = st.st_mode & libc_s_ifmt() == libc_s_ifdir();
        let flag = if is_dir {
            UnlinkatFlags::RemoveDir
        } else {
            UnlinkatFlags::NoRemoveDir
        };
        match unlinkat(dir, name, flag) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            // Excluded, oversized or special files keep it: leave it. Files
            // the restore would have removed or put there keep it too (added
            // since the plan, or conflicts): the folder is not restored.
            Err(Errno::ENOTEMPTY | Errno::EEXIST) if is_dir && recheck.is_some() => {
                match only_kept_by_rule(dir, raw, excluded, 0) {
                    Ok(true) => Ok(()),
                    Ok(false) | Err(_) => Err(PathError::Filled),
                }
            }
            Err(Errno::ENOTEMPTY | Errno::EEXIST) => Ok(()),
            Err(e) => Err(PathError::Sys(e)),
        }
    });
    match result {
        // A missing parent: nothing left to remove.
        Err(PathError::Missing) => Ok(()),
        other => other,
    }
}

/// Directories nested deeper than this below a directory being removed are
/// not looked into: it counts as holding files of the user's.
const KEPT_DEPTH: usize = 32;

/// Whether directory `name` in `dir` holds only what snapshots leave out by
/// rule: excluded directories, files over the size limit, special files,
/// and directories holding nothing else.
fn only_kept_by_rule(
    dir: &OwnedFd,
    name: &[u8],
    excluded: &[String],
    depth: usize,
) -> nix::Result<bool> {
    if depth > KEPT_DEPTH {
        return Ok(false);
    }
    let fd = super::scan::open_dir_at(dir, name)?;
    for child in super::scan::list_dir(&fd)? {
        let st = match fstatat(
            &fd,
            OsStr::from_bytes(&child),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => st,
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        let kept = match st.st_mode & libc_s_ifmt() {
            0o040000 => {
                super::scan::excluded(&child, excluded)
                    || only_kept_by_rule(&fd, &child, excluded, depth + 1)?
            }
            0o100000 => too_big_now(&st),
            0o120000 => false,
            _ => true, // a FIFO, socket or device: never captured
        };
        if !kept {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A regular file over the size limit stands there now (never replaced).
fn too_big_now(st: &nix::sys::stat::FileStat) -> bool {
    st.st_mode & libc_s_ifmt() == 0o100000 && st.st_size as u64 > MAX_FILE
}

const fn libc_s_ifmt() -> u32 {
    0o170000
}
const fn libc_s_ifdir() -> u32 {
    0o040000
}

/// The temp name a restore whose token is `token` writes `path` under,
/// beside it: short, and agentd's own beyond doubt (the token is random and
/// journaled before the first temp file is made).
pub(super) fn temp_name(token: &str, path: &[u8]) -> Vec<u8> {
    let hash = blake3::hash(path);
    format!(".agentx-restore-{token}-{}", &hash.to_hex().as_str()[..16]).into_bytes()
}

/// A fresh token for a restore's temp names.
pub fn new_token() -> String {
    use std::hash::{BuildHasher as _, RandomState};
    let seed = (agentx_shared::time::now_ms(), std::process::id());
    format!("{:016x}", RandomState::new().hash_one(seed))
}

/// The temp name an older agentd used (`.agentx-restore-` and the name).
fn legacy_temp_name(name: &[u8]) -> Vec<u8> {
    let mut t = b".agentx-restore-".to_vec();
    t.extend_from_slice(&name[..name.len().min(200)]);
    t
}

#[cfg(test)]
mod tests;
