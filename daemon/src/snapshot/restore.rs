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
use serde::{Deserialize, Serialize};

use super::blobs::Blobs;
use super::manifest::{Entry, Kind, Manifest};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Created since: remove it.
    Remove,
    /// Modified since: put the old content back.
    RestoreModified,
    /// Deleted since: put it back.
    RestoreDeleted,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    pub path: String,
    pub action: Action,
    /// Changed again since the message being undone.
    pub conflict: bool,
}

/// One step of a restore: make `path` be `want` (or absent).
#[derive(Debug, Clone)]
pub struct Op {
    pub path: Vec<u8>,
    pub want: Option<Entry>,
    pub action: Action,
    pub conflict: bool,
}

fn action_for(current: Option<&Entry>, want: Option<&Entry>) -> Option<Action> {
    match (current, want) {
        (None, None) => None,
        (Some(_), None) => Some(Action::Remove),
        (None, Some(_)) => Some(Action::RestoreDeleted),
        (Some(c), Some(w)) if c.same_content(w) && (c.kind != Kind::Dir || c.mode == w.mode) => {
            None
        }
        (Some(_), Some(_)) => Some(Action::RestoreModified),
    }
}

/// Walks sorted manifests side by side: each path once, with its entry
/// (or none) in each list.
fn aligned<'a, const N: usize>(lists: [&'a [Entry]; N]) -> Vec<(&'a [u8], [Option<&'a Entry>; N])> {
    let mut at = [0usize; N];
    let mut out = Vec::new();
    loop {
        let mut min: Option<&'a [u8]> = None;
        for k in 0..N {
            if let Some(e) = lists[k].get(at[k])
                && min.is_none_or(|m| e.path.as_slice() < m)
            {
                min = Some(e.path.as_slice());
            }
        }
        let Some(path) = min else { break };
        let mut row = [None; N];
        for k in 0..N {
            if let Some(e) = lists[k].get(at[k])
                && e.path.as_slice() == path
            {
                row[k] = Some(e);
                at[k] += 1;
            }
        }
        out.push((path, row));
    }
    out
}

/// Undo: the paths `before`→`after` changed, put back as `before` had them;
/// a path whose current state differs from `after` is a conflict.
pub fn plan_undo(before: &Manifest, after: &Manifest, current: &Manifest) -> Vec<Op> {
    let mut ops = Vec::new();
    for (p, [was, became, now]) in aligned([&before.entries, &after.entries, &current.entries]) {
        let changed = match (was, became) {
            (Some(x), Some(y)) => !x.same_content(y),
            (None, None) => false,
            _ => true,
        };
        if !changed {
            continue;
        }
        let Some(action) = action_for(now, was) else {
            continue;
        };
        let conflict = match (now, became) {
            (Some(n), Some(y)) => !n.same_content(y),
            (None, None) => false,
            _ => true,
        };
        ops.push(Op {
            path: p.to_vec(),
            want: was.cloned(),
            action,
            conflict,
        });
    }
    ops
}

/// Rewind: every path made as `target` has it.
pub fn plan_rewind(target: &Manifest, current: &Manifest) -> Vec<Op> {
    aligned([&target.entries, &current.entries])
        .into_iter()
        .filter_map(|(p, [want, now])| {
            action_for(now, want).map(|action| Op {
                path: p.to_vec(),
                want: want.cloned(),
                action,
                conflict: false,
            })
        })
        .collect()
}

pub fn describe(ops: &[Op]) -> Vec<Planned> {
    ops.iter()
        .map(|o| Planned {
            path: String::from_utf8_lossy(&o.path).into_owned(),
            action: o.action,
            conflict: o.conflict,
        })
        .collect()
}

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

fn err(path: &[u8], e: impl std::fmt::Display) -> String {
    format!("{}: {e}", String::from_utf8_lossy(path))
}

fn open_dir(dirfd: impl AsFd, name: &[u8]) -> nix::Result<OwnedFd> {
    openat(
        dirfd,
        OsStr::from_bytes(name),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Applies restore steps under `root`. Removals run deepest first, then
/// creations parents first. Returns per-path errors (the rest still runs).
pub fn apply(root: &Path, ops: &[Op], blobs: &Blobs) -> Vec<String> {
    let mut errors = Vec::new();
    let root_fd = match openat(
        AT_FDCWD,
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => return vec![format!("cannot open {}: {e}", root.display())],
    };
    // Removals (and kind changes) deepest first.
    let mut removals: Vec<&Op> = ops
        .iter()
        .filter(|o| {
            o.action == Action::Remove || o.want.as_ref().is_some_and(|w| w.kind != Kind::Dir)
        })
        .collect();
    removals.sort_by(|a, b| b.path.cmp(&a.path));
    for op in removals {
        if op.action == Action::Remove
            && let Err(e) = remove(&root_fd, &op.path)
        {
            errors.push(err(&op.path, e));
        }
    }
    let mut creations: Vec<&Op> = ops.iter().filter(|o| o.want.is_some()).collect();
    creations.sort_by(|a, b| a.path.cmp(&b.path));
    let mut dir_times: Vec<&Entry> = Vec::new();
    for op in creations {
        let Some(want) = &op.want else { continue };
        match put(&root_fd, want, blobs) {
            Ok(()) => {
                if want.kind == Kind::Dir {
                    dir_times.push(want);
                }
            }
            Err(e) => errors.push(err(&op.path, e)),
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
    errors
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
                mkdirat(
                    base,
                    OsStr::from_bytes(part),
                    Mode::from_bits_truncate(0o755),
                )
                .map_err(|e| e.to_string())?;
                open_dir(base, part).map_err(|e| e.to_string())?
            }
            Err(Errno::ENOENT) => return Err(MISSING.into()),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(
                    "a parent directory is now a symlink or a file; not following it".into(),
                );
            }
            Err(e) => return Err(e.to_string()),
        };
        dir = Some(next);
    }
    f(dir.as_ref().unwrap_or(root), name)
}

fn remove(root: &OwnedFd, path: &[u8]) -> Result<(), String> {
    let result = with_parent(root, path, false, |dir, name| {
        let name = OsStr::from_bytes(name);
        let st = match fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        };
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

const fn libc_s_ifmt() -> u32 {
    0o170000
}
const fn libc_s_ifdir() -> u32 {
    0o040000
}

/// A temp name beside `name` in the same directory.
fn temp_name(name: &[u8]) -> Vec<u8> {
    let mut t = b".agentx-restore-".to_vec();
    t.extend_from_slice(std::process::id().to_string().as_bytes());
    t.push(b'-');
    t.extend_from_slice(&name[..name.len().min(100)]);
    t
}

fn put(root: &OwnedFd, want: &Entry, blobs: &Blobs) -> Result<(), String> {
    // Read the content first: never leave a half-written path behind.
    let data = match want.kind {
        Kind::File => Some(blobs.read(&want.hash).map_err(|e| e.to_string())?),
        _ => None,
    };
    with_parent(root, &want.path, true, |dir, name| {
        let os_name = OsStr::from_bytes(name);
        let existing = fstatat(dir, os_name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok();
        let existing_is_dir =
            existing.is_some_and(|st| st.st_mode & libc_s_ifmt() == libc_s_ifdir());
        match want.kind {
            Kind::Dir => {
                if existing.is_some() && !existing_is_dir {
                    unlinkat(dir, os_name, UnlinkatFlags::NoRemoveDir)
                        .map_err(|e| e.to_string())?;
                }
                if !existing_is_dir || existing.is_none() {
                    match mkdirat(dir, os_name, Mode::from_bits_truncate(want.mode)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(e.to_string()),
                    }
                }
                let fd = open_dir(dir, name).map_err(|e| e.to_string())?;
                fchmod(&fd, Mode::from_bits_truncate(want.mode)).map_err(|e| e.to_string())?;
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
                if want.kind == Kind::Symlink {
                    symlinkat(OsStr::from_bytes(&want.target), dir, tmp_os)
                        .map_err(|e| e.to_string())?;
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
                        fchmod(&file, Mode::from_bits_truncate(want.mode))
                            .map_err(std::io::Error::from)?;
                        let t = TimeSpec::new(
                            want.mtime_ns.div_euclid(1_000_000_000),
                            want.mtime_ns.rem_euclid(1_000_000_000),
                        );
                        futimens(&file, &t, &t).map_err(std::io::Error::from)?;
                        file.sync_data()
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
