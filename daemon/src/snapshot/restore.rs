//! Putting paths back: plans (what an undo or rewind would change, with
//! conflicts) and their application through directory file descriptors, so
//! nothing is written outside the folder and no symlink is followed.

use std::ffi::OsStr;
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, OFlag, openat};
use nix::sys::stat::{Mode, UtimensatFlags, fchmod, fstatat, futimens, mkdirat, utimensat};
use nix::sys::time::TimeSpec;
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use std::collections::HashMap;

use super::blobs::Blobs;
use super::manifest::{Entry, Kind, Manifest, why};
use super::scan::{MAX_FILE, TEMP_PREFIX};

mod durable;
mod plan;

use durable::{Devices, make_durable};
pub use plan::*;

/// Refuses paths that could leave the folder.
fn components(path: &[u8]) -> Result<Vec<&[u8]>, String> {
    let parts: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    if path.is_empty()
        || parts
            .iter()
            .any(|c| c.is_empty() || *c == b"." || *c == b"..")
    {
        return Err(format!(
            "refusing unsafe path {:?}",
            String::from_utf8_lossy(path)
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
pub fn apply(root: &Path, ops: &[Op], blobs: &Blobs) -> Vec<(Vec<u8>, String)> {
    let mut errors = Vec::new();
    let root_fd = match openat(
        AT_FDCWD,
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => {
            return ops
                .iter()
                .map(|o| {
                    (
                        o.path.clone(),
                        format!("cannot open {}: {e}", root.display()),
                    )
                })
                .collect();
        }
    };
    let devices = Devices::new(&root_fd);
    // Paths changed by this restore (made durable at the end).
    let mut touched: Vec<&[u8]> = Vec::new();
    // Removals deepest first.
    let mut removals: Vec<&Op> = ops.iter().filter(|o| o.action == Action::Remove).collect();
    removals.sort_by(|a, b| b.path.cmp(&a.path));
    for op in removals {
        match remove(&root_fd, &op.path, &devices) {
            Ok(()) => touched.push(&op.path),
            Err(e) => errors.push((op.path.clone(), e)),
        }
    }
    let mut creations: Vec<&Op> = ops.iter().filter(|o| o.want.is_some()).collect();
    creations.sort_by(|a, b| a.path.cmp(&b.path));
    // Directories, parents first, on this thread.
    let mut dir_times: Vec<&Entry> = Vec::new();
    for op in creations.iter().filter(|o| is_kind(o, Kind::Dir)) {
        let Some(want) = &op.want else { continue };
        match put(&root_fd, want, blobs, None, &devices) {
            Ok(()) => {
                dir_times.push(want);
                touched.push(&op.path);
            }
            Err(e) => errors.push((op.path.clone(), e)),
        }
    }
    // Files and symlinks. Hard links, and names so long that their temp
    // names could coincide, go one after the other in path order; the rest
    // in parallel.
    let (serial, parallel): (Vec<&Op>, Vec<&Op>) = creations
        .into_iter()
        .filter(|o| !is_kind(o, Kind::Dir))
        .partition(|o| {
            o.want
                .as_ref()
                .is_some_and(|w| (w.kind == Kind::File && w.nlink > 1) || long_name(&w.path))
        });
    // Inode (in the snapshot) → a path already restored with it.
    let mut linked: HashMap<u64, &[u8]> = HashMap::new();
    for op in serial {
        let Some(want) = &op.want else { continue };
        let link_to = (want.kind == Kind::File && want.nlink > 1)
            .then(|| linked.get(&want.ino).copied())
            .flatten();
        match put(&root_fd, want, blobs, link_to, &devices) {
            Ok(()) => {
                if want.kind == Kind::File && want.nlink > 1 {
                    linked.entry(want.ino).or_insert(&want.path);
                }
                touched.push(&op.path);
            }
            Err(e) => errors.push((op.path.clone(), e)),
        }
    }
    let put_one = |op: &&Op| -> Result<(), String> {
        match &op.want {
            Some(want) => put(&root_fd, want, blobs, None, &devices),
            None => Ok(()),
        }
    };
    let results: Vec<Result<(), String>> = if parallel.len() >= PARALLEL_MIN {
        match rayon::ThreadPoolBuilder::new()
            .num_threads(restore_threads())
            .thread_name(|i| format!("agentd-restore-{i}"))
            .build()
        {
            Ok(pool) => pool.install(|| parallel.par_iter().map(put_one).collect()),
            Err(_) => parallel.iter().map(put_one).collect(),
        }
    } else {
        parallel.iter().map(put_one).collect()
    };
    for (op, result) in parallel.iter().zip(results) {
        match result {
            Ok(()) => touched.push(&op.path),
            Err(e) => errors.push((op.path.clone(), e)),
        }
    }
    // Directory mtimes last: creating their children changed them.
    for want in dir_times.into_iter().rev() {
        let _ = with_parent(&root_fd, &want.path, false, |dir, name| {
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
            .map_err(|e| e.to_string())
        });
    }
    errors.extend(make_durable(&root_fd, &touched, &devices));
    errors
}

fn is_kind(op: &Op, kind: Kind) -> bool {
    op.want.as_ref().is_some_and(|w| w.kind == kind)
}

/// A last component long enough that [`temp_name`] truncates it.
fn long_name(path: &[u8]) -> bool {
    let name = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    name.len() > TEMP_NAME_KEEP
}

/// Removes what an interrupted restore may have left of its temp files
/// beside `paths`.
pub fn remove_temps(root: &Path, paths: &[Vec<u8>]) {
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
            let tmp = temp_name(name);
            match unlinkat(dir, OsStr::from_bytes(&tmp), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => Ok(()),
                Err(e) => Err(e.to_string()),
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
    f: impl FnOnce(&OwnedFd, &[u8]) -> Result<T, String>,
) -> Result<T, String> {
    let parts = components(path)?;
    let (name, parents) = parts.split_last().ok_or_else(|| "empty path".to_owned())?;
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
                    Err(e) => return Err(e.to_string()),
                }
                open_dir(base, part).map_err(|e| e.to_string())?
            }
            Err(Errno::ENOENT) => return Err(MISSING.into()),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(PARENT_NOT_DIR.into());
            }
            Err(e) => return Err(e.to_string()),
        };
        dir = Some(next);
    }
    f(dir.as_ref().unwrap_or(root), name)
}

fn remove(root: &OwnedFd, path: &[u8], devices: &Devices) -> Result<(), String> {
    let result = with_parent(root, path, false, |dir, name| {
        devices.note(dir);
        let name = OsStr::from_bytes(name);
        let st = match fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        };
        if too_big_now(&st) {
            return Err(OVERSIZED_NOW.into());
        }
        let is_dir = st.st_mode & libc_s_ifmt() == libc_s_ifdir();
        let flag = if is_dir {
            UnlinkatFlags::RemoveDir
        } else {
            UnlinkatFlags::NoRemoveDir
        };
        match unlinkat(dir, name, flag) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            // Untracked, excluded or oversized files keep it: leave it.
            Err(Errno::ENOTEMPTY | Errno::EEXIST) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    });
    match result {
        // A missing parent: nothing left to remove.
        Err(e) if e == MISSING => Ok(()),
        other => other,
    }
}

const MISSING: &str = "a parent directory is missing";
const PARENT_NOT_DIR: &str = "a parent directory is now a symlink or a file; not following it";
const OVERSIZED_NOW: &str = "over 10 MB now: left alone";

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

/// How much of a name its temp name keeps.
const TEMP_NAME_KEEP: usize = 200;

/// A temp name beside `name` in the same directory.
fn temp_name(name: &[u8]) -> Vec<u8> {
    let mut t = TEMP_PREFIX.to_vec();
    t.extend_from_slice(&name[..name.len().min(TEMP_NAME_KEEP)]);
    t
}

/// The mode to set after giving `fd` (at `name` in `dir` when it is a
/// symlink) the snapshot's owner: as root the owner and group are put back;
/// when they cannot be, setuid/setgid bits are never left on a file whose
/// owner changed.
fn restore_owner(dir: &OwnedFd, name: &OsStr, fd: Option<&OwnedFd>, want: &Entry) -> u32 {
    let euid = nix::unistd::geteuid();
    if want.uid == u32::MAX {
        return want.mode & 0o1777; // owner unknown: no setuid/setgid
    }
    if want.uid == euid.as_raw() && (!euid.is_root() || want.gid == u32::MAX) {
        return want.mode;
    }
    let (uid, gid) = (
        Some(nix::unistd::Uid::from_raw(want.uid)),
        Some(nix::unistd::Gid::from_raw(want.gid)),
    );
    let done = if euid.is_root() {
        match fd {
            Some(fd) => nix::unistd::fchown(fd, uid, gid).is_ok(),
            None => nix::unistd::fchownat(
                dir,
                name,
                uid,
                gid,
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .is_ok(),
        }
    } else {
        false
    };
    if done { want.mode } else { want.mode & !0o6000 }
}

fn put(
    root: &OwnedFd,
    want: &Entry,
    blobs: &Blobs,
    link_to: Option<&[u8]>,
    devices: &Devices,
) -> Result<(), String> {
    // Read the content first: never leave a half-written path behind.
    let data = match want.kind {
        Kind::File if link_to.is_none() => Some(blobs.read(&want.hash).map_err(|e| e.to_string())?),
        Kind::Skipped => return Err("not captured: left alone".into()),
        _ => None,
    };
    with_parent(root, &want.path, true, |dir, name| {
        devices.note(dir);
        let os_name = OsStr::from_bytes(name);
        let existing = fstatat(dir, os_name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok();
        if existing.as_ref().is_some_and(too_big_now) {
            return Err(OVERSIZED_NOW.into());
        }
        let existing_is_dir =
            existing.is_some_and(|st| st.st_mode & libc_s_ifmt() == libc_s_ifdir());
        match want.kind {
            Kind::Skipped => Err("not captured: left alone".into()),
            Kind::Dir => {
                if existing.is_some() && !existing_is_dir {
                    unlinkat(dir, os_name, UnlinkatFlags::NoRemoveDir)
                        .map_err(|e| e.to_string())?;
                }
                if !existing_is_dir || existing.is_none() {
                    match mkdirat(dir, os_name, Mode::from_bits_truncate(0o700)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(e.to_string()),
                    }
                }
                let fd = open_dir(dir, name).map_err(|e| e.to_string())?;
                let mode = restore_owner(dir, os_name, Some(&fd), want);
                fchmod(&fd, Mode::from_bits_truncate(mode)).map_err(|e| e.to_string())?;
                Ok(())
            }
            Kind::File | Kind::Symlink => {
                if existing_is_dir {
                    // A directory stands where a file belongs: only an empty
                    // one can go (anything in it is not ours to delete).
                    unlinkat(dir, os_name, UnlinkatFlags::RemoveDir)
                        .map_err(|e| format!("a directory is in the way ({e})"))?;
                }
                let tmp = temp_name(name);
                let tmp_os = OsStr::from_bytes(&tmp);
                let _ = unlinkat(dir, tmp_os, UnlinkatFlags::NoRemoveDir);
                if let Some(first) = link_to {
                    // A hard link of a path this restore already put back.
                    with_parent(root, first, false, |odir, oname| {
                        nix::unistd::linkat(
                            odir,
                            OsStr::from_bytes(oname),
                            dir,
                            tmp_os,
                            nix::fcntl::AtFlags::empty(),
                        )
                        .map_err(|e| e.to_string())
                    })?;
                } else if want.kind == Kind::Symlink {
                    symlinkat(OsStr::from_bytes(&want.target), dir, tmp_os)
                        .map_err(|e| e.to_string())?;
                    restore_owner(dir, tmp_os, None, want);
                } else {
                    let fd = openat(
                        dir,
                        tmp_os,
                        OFlag::O_WRONLY
                            | OFlag::O_CREAT
                            | OFlag::O_EXCL
                            | OFlag::O_NOFOLLOW
                            | OFlag::O_CLOEXEC,
                        Mode::from_bits_truncate(0o600),
                    )
                    .map_err(|e| e.to_string())?;
                    let mut file = std::fs::File::from(fd);
                    let write = (|| -> std::io::Result<()> {
                        file.write_all(data.as_deref().unwrap_or_default())?;
                        let owned = OwnedFd::from(file.try_clone()?);
                        let mode = restore_owner(dir, tmp_os, Some(&owned), want);
                        fchmod(&file, Mode::from_bits_truncate(mode))
                            .map_err(std::io::Error::from)?;
                        let t = TimeSpec::new(
                            want.mtime_ns.div_euclid(1_000_000_000),
                            want.mtime_ns.rem_euclid(1_000_000_000),
                        );
                        // No fsync here: `apply` makes the whole restore
                        // durable at its end (the intent journal covers
                        // a crash before then).
                        futimens(&file, &t, &t).map_err(std::io::Error::from)
                    })();
                    if let Err(e) = write {
                        let _ = unlinkat(dir, tmp_os, UnlinkatFlags::NoRemoveDir);
                        return Err(e.to_string());
                    }
                }
                nix::fcntl::renameat(dir, tmp_os, dir, os_name).map_err(|e| {
                    let _ = unlinkat(dir, tmp_os, UnlinkatFlags::NoRemoveDir);
                    e.to_string()
                })
            }
        }
    })
}

#[cfg(test)]
#[path = "restore_tests.rs"]
mod tests;
