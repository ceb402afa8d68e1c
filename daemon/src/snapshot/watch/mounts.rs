//! The mount table, followed: a mount or unmount inside a watched folder
//! sends no inotify event, but `/proc/self/mountinfo` signals POLLPRI.
//!
//! A poll with no timeout tells whether the table changed since it was last
//! read (the kernel clears the signal with that poll); only then is it read
//! and parsed again.

use std::fs::File;
use std::io::{Read as _, Seek as _};
use std::os::fd::AsFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// One mounted file system: where, and its type (`ext4`, `tmpfs`, `nfs4`,
/// `fuse.sshfs`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mount {
    pub(super) point: PathBuf,
    pub(super) fstype: String,
}

impl Mount {
    /// A file system whose changes inotify does not see in full (made by
    /// other clients or by the server).
    pub(super) fn is_remote(&self) -> bool {
        let t = self.fstype.as_str();
        t.starts_with("nfs")
            || t.starts_with("fuse")
            || t.starts_with("smb")
            || matches!(
                t,
                "cifs" | "9p" | "ceph" | "afs" | "coda" | "glusterfs" | "lustre" | "virtiofs"
            )
    }
}

/// agentd's view of the mount table.
pub(super) struct MountTable {
    file: Option<File>,
    mounts: Vec<Mount>,
}

impl MountTable {
    pub(super) fn open() -> Self {
        let mut table = Self {
            file: File::open("/proc/self/mountinfo").ok(),
            mounts: Vec::new(),
        };
        table.reread();
        table
    }

    /// Whether the table changed since the last call (then it is read
    /// again). Without `/proc`, never.
    pub(super) fn refresh(&mut self) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLPRI)];
        let changed = matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
            && fds[0]
                .revents()
                .is_some_and(|r| r.intersects(PollFlags::POLLPRI | PollFlags::POLLERR));
        if changed {
            self.reread();
        }
        changed
    }

    fn reread(&mut self) {
        let Some(file) = &mut self.file else {
            return;
        };
        let mut text = Vec::new();
        if file.rewind().is_ok() && file.read_to_end(&mut text).is_ok() {
            self.mounts = parse(&text);
        }
    }

    /// The file systems mounted strictly below `root`, in table order.
    pub(super) fn inside(&self, root: &Path) -> Vec<Mount> {
        self.mounts
            .iter()
            .filter(|m| m.point != root && m.point.starts_with(root))
            .cloned()
            .collect()
    }
}

/// Where file systems are mounted now (agentd's mount namespace).
pub(crate) fn mount_points() -> std::collections::HashSet<PathBuf> {
    std::fs::read("/proc/self/mountinfo")
        .map(|text| parse(&text).into_iter().map(|m| m.point).collect())
        .unwrap_or_default()
}

/// The mounts of a `mountinfo` text: field 5 is the mount point (octal
/// escapes for space, tab, newline and backslash), the field after ` - `
/// the type.
fn parse(text: &[u8]) -> Vec<Mount> {
    text.split(|b| *b == b'\n')
        .filter_map(|line| {
            let fields: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
            let point = fields.get(4)?;
            let dash = fields.iter().position(|f| *f == b"-")?;
            let fstype = fields.get(dash + 1)?;
            Some(Mount {
                point: PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(point))),
                fstype: String::from_utf8_lossy(fstype).into_owned(),
            })
        })
        .collect()
}

fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(
                    d.iter()
                        .fold(0u8, |n, c| n.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_points_and_types_with_escapes_undone() {
        let text = b"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
            40 22 0:35 / /home/u/my\\040proj/mnt rw - tmpfs tmpfs rw\n\
            41 22 0:36 / /home/u/p/remote rw shared:5 master:2 - fuse.sshfs host: rw\n";
        let m = parse(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].point, Path::new("/home/u/my proj/mnt"));
        assert_eq!(m[1].fstype, "tmpfs");
        assert!(!m[1].is_remote());
        assert!(m[2].is_remote());
        let table = MountTable {
            file: None,
            mounts: m,
        };
        let inside = table.inside(Path::new("/home/u/my proj"));
        assert_eq!(inside.len(), 1);
        assert!(table.inside(Path::new("/home/u/my")).is_empty());
    }

    #[test]
    fn the_live_table_lists_the_root_mount() {
        let table = MountTable::open();
        assert!(table.mounts.iter().any(|m| m.point == Path::new("/")));
    }
}
