//! Making a restore durable: the touched files and directories synced,
//! one device at a time (syncfs) or each path, whichever is cheaper.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

use super::path_error::PathError;
use super::{SYNC_EACH_MAX, open_dir, with_parent};

/// The file systems a restore wrote to: the folder's, and one directory fd
/// on each other one met on the way (a mount inside the folder), so that
/// each can be synced.
pub(super) struct Devices {
    root: Option<u64>,
    others: std::sync::Mutex<HashMap<u64, OwnedFd>>,
}

impl Devices {
    pub(super) fn new(root: &OwnedFd) -> Self {
        Self {
            root: nix::sys::stat::fstat(root).ok().map(|st| st.st_dev),
            others: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Notes the file system of `dir`, a directory this restore wrote in.
    pub(super) fn note(&self, dir: &OwnedFd) {
        let dev = nix::sys::stat::fstat(dir).ok().map(|st| st.st_dev);
        if dev.is_some() && dev == self.root {
            return;
        }
        let Ok(mut others) = self.others.lock() else {
            return;
        };
        let key = dev.unwrap_or(u64::MAX);
        if !others.contains_key(&key)
            && let Ok(fd) = dir.try_clone()
        {
            others.insert(key, fd);
        }
    }
}

/// Makes what a restore wrote durable; the paths that could not be.
pub(super) fn make_durable(
    root: &OwnedFd,
    touched: &[&[u8]],
    devices: &Devices,
) -> Vec<(Vec<u8>, String)> {
    if touched.is_empty() {
        return Vec::new();
    }
    if touched.len() > SYNC_EACH_MAX {
        let others: Vec<OwnedFd> = devices
            .others
            .lock()
            .map(|mut m| m.drain().map(|(_, fd)| fd).collect())
            .unwrap_or_default();
        let all_synced = nix::unistd::syncfs(root).is_ok()
            && others.iter().all(|fd| nix::unistd::syncfs(fd).is_ok());
        if all_synced {
            return Vec::new();
        }
        // A file system reported a write-back error: find out which paths.
    }
    sync_each(root, touched)
}

/// Fsyncs each path (files; symlinks are covered by their directory) and
/// each directory holding one; the paths that could not be made durable.
pub(super) fn sync_each(root: &OwnedFd, touched: &[&[u8]]) -> Vec<(Vec<u8>, String)> {
    let mut errors = Vec::new();
    let mut parents: Vec<&[u8]> = Vec::new();
    for path in touched {
        let file = with_parent(root, path, false, |dir, name| {
            match openat(
                dir,
                OsStr::from_bytes(name),
                OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => nix::unistd::fsync(&fd).map_err(PathError::Sys),
                // Removed, replaced by a later step, or a symlink: the
                // directory holding it is synced below.
                Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR) => Ok(()),
                Err(e) => Err(PathError::Sys(e)),
            }
        });
        match file {
            Ok(()) => {}
            // A directory above it was removed or replaced by a later step
            // of this restore: that step's path is synced itself.
            Err(PathError::Missing | PathError::ParentNotDir) => {}
            Err(e) => errors.push((path.to_vec(), format!("not made durable: {e}"))),
        }
        let parent = path
            .iter()
            .rposition(|b| *b == b'/')
            .map_or(&b""[..], |i| &path[..i]);
        parents.push(parent);
    }
    parents.sort_unstable();
    parents.dedup();
    for parent in parents {
        let synced = if parent.is_empty() {
            nix::unistd::fsync(root).map_err(PathError::Sys)
        } else {
            with_parent(root, parent, false, |dir, name| match open_dir(dir, name) {
                Ok(fd) => nix::unistd::fsync(&fd).map_err(PathError::Sys),
                // Removed or replaced too: its own parent's fsync covers that.
                Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => Ok(()),
                Err(e) => Err(PathError::Sys(e)),
            })
        };
        match synced {
            Ok(()) => {}
            Err(PathError::Missing | PathError::ParentNotDir) => {}
            Err(e) => {
                for path in touched.iter().filter(|p| {
                    if parent.is_empty() {
                        !p.contains(&b'/')
                    } else {
                        p.len() > parent.len() && p.starts_with(parent) && p[parent.len()] == b'/'
                    }
                }) {
                    errors.push((path.to_vec(), format!("not made durable: {e}")));
                }
            }
        }
    }
    errors.sort();
    errors.dedup_by(|a, b| a.0 == b.0);
    errors
}
