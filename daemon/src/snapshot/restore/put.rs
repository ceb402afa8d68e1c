//! Putting one path back as a snapshot has it: a directory in place, a file
//! or symlink through a temp name renamed over it, owner and mode restored.

use std::ffi::OsStr;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;

use nix::errno::Errno;
use nix::fcntl::{OFlag, RenameFlags, openat, renameat2};
use nix::sys::stat::{Mode, fchmod, fstatat, futimens, mkdirat};
use nix::sys::time::TimeSpec;
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

use super::durable::Devices;
use super::live::still;
use super::path_error::PathError;
use super::{libc_s_ifdir, libc_s_ifmt, open_dir, too_big_now, with_parent};
use crate::snapshot::blobs::Reader;
use crate::snapshot::manifest::{Entry, Kind};

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

/// How one path is put back: what the plan believes stands there now
/// (checked again right before it is replaced, unless `recheck` is off, as
/// when an interrupted restore is finished), and the temp name to write it
/// under.
pub(super) struct Putting<'a> {
    pub(super) now: Option<&'a Entry>,
    pub(super) recheck: bool,
    pub(super) tmp: &'a [u8],
}

pub(super) fn put(
    root: &OwnedFd,
    want: &Entry,
    blobs: &Reader,
    link_to: Option<&[u8]>,
    devices: &Devices,
    how: &Putting<'_>,
) -> Result<(), PathError> {
    // Read the content first: never leave a half-written path behind.
    let data = match want.kind {
        Kind::File if link_to.is_none() => Some(blobs.read(&want.hash)?),
        Kind::Skipped => return Err(PathError::NotCaptured),
        _ => None,
    };
    // A file's folder is never made here: the plan puts back the folders
    // it needs first, so a missing one was moved away meanwhile (putting
    // the file back would make a second copy of the folder).
    let make_parents = want.kind == Kind::Dir || !how.recheck;
    let parented = with_parent(root, &want.path, make_parents, |dir, name| {
        devices.note(dir);
        let os_name = OsStr::from_bytes(name);
        let existing = fstatat(dir, os_name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok();
        if existing.as_ref().is_some_and(too_big_now) {
            return Err(PathError::OversizedNow);
        }
        let existing_is_dir =
            existing.is_some_and(|st| st.st_mode & libc_s_ifmt() == libc_s_ifdir());
        match want.kind {
            Kind::Skipped => Err(PathError::NotCaptured),
            Kind::Dir => put_dir(dir, name, existing.is_some(), existing_is_dir, want),
            Kind::File | Kind::Symlink => {
                if how.recheck {
                    still(dir, name, how.now)?;
                }
                let mut expect_nothing = how.now.is_none();
                if existing_is_dir {
                    // A directory stands where a file belongs: only an empty
                    // one can go (anything in it is not ours to delete).
                    unlinkat(dir, os_name, UnlinkatFlags::RemoveDir)
                        .map_err(PathError::InTheWay)?;
                    expect_nothing = true;
                }
                let tmp_os = OsStr::from_bytes(how.tmp);
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
                        .map_err(PathError::Sys)
                    })?;
                } else if want.kind == Kind::Symlink {
                    symlinkat(OsStr::from_bytes(&want.target), dir, tmp_os)?;
                    restore_owner(dir, tmp_os, None, want);
                } else {
                    write_temp(dir, tmp_os, want, data.as_deref().unwrap_or_default())?;
                }
                replace(dir, tmp_os, name, how, expect_nothing).inspect_err(|_| {
                    let _ = unlinkat(dir, tmp_os, UnlinkatFlags::NoRemoveDir);
                })
            }
        }
    });
    match parented {
        Err(PathError::Missing) if how.recheck => Err(PathError::Moved("its folder is gone")),
        other => other,
    }
}

/// Renames the written temp file over `name`, only if what stands there is
/// still what the plan believes: checked right before, and where nothing
/// may stand the rename itself refuses to replace anything.
fn replace(
    dir: &OwnedFd,
    tmp: &OsStr,
    name: &[u8],
    how: &Putting<'_>,
    expect_nothing: bool,
) -> Result<(), PathError> {
    let os_name = OsStr::from_bytes(name);
    if !how.recheck {
        return nix::fcntl::renameat(dir, tmp, dir, os_name).map_err(PathError::Sys);
    }
    if expect_nothing {
        return match renameat2(dir, tmp, dir, os_name, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => Ok(()),
            Err(Errno::EEXIST) => Err(PathError::Moved("something new stands there")),
            // File systems without RENAME_NOREPLACE: check, then rename.
            Err(Errno::EINVAL) => {
                still(dir, name, None)?;
                nix::fcntl::renameat(dir, tmp, dir, os_name).map_err(PathError::Sys)
            }
            Err(e) => Err(PathError::Sys(e)),
        };
    }
    still(dir, name, how.now)?;
    nix::fcntl::renameat(dir, tmp, dir, os_name).map_err(PathError::Sys)
}

/// The directory `name` in `dir` as `want` has it (what is in it is left).
fn put_dir(
    dir: &OwnedFd,
    name: &[u8],
    exists: bool,
    is_dir: bool,
    want: &Entry,
) -> Result<(), PathError> {
    let os_name = OsStr::from_bytes(name);
    if exists && !is_dir {
        unlinkat(dir, os_name, UnlinkatFlags::NoRemoveDir)?;
    }
    if !is_dir || !exists {
        match mkdirat(dir, os_name, Mode::from_bits_truncate(0o700)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(PathError::Sys(e)),
        }
    }
    let fd = open_dir(dir, name)?;
    let mode = restore_owner(dir, os_name, Some(&fd), want);
    fchmod(&fd, Mode::from_bits_truncate(mode))?;
    Ok(())
}

/// Writes `data` to the new temp file `tmp` in `dir` with `want`'s owner,
/// mode and mtime; removes it again if that fails.
fn write_temp(dir: &OwnedFd, tmp: &OsStr, want: &Entry, data: &[u8]) -> Result<(), PathError> {
    let fd = openat(
        dir,
        tmp,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    let mut file = std::fs::File::from(fd);
    let write = (|| -> std::io::Result<()> {
        file.write_all(data)?;
        let owned = OwnedFd::from(file.try_clone()?);
        let mode = restore_owner(dir, tmp, Some(&owned), want);
        fchmod(&file, Mode::from_bits_truncate(mode)).map_err(std::io::Error::from)?;
        let t = TimeSpec::new(
            want.mtime_ns.div_euclid(1_000_000_000),
            want.mtime_ns.rem_euclid(1_000_000_000),
        );
        // No fsync here: `apply` makes the whole restore durable at its
        // end (the intent journal covers a crash before then).
        futimens(&file, &t, &t).map_err(std::io::Error::from)
    })();
    write.map_err(|e| {
        let _ = unlinkat(dir, tmp, UnlinkatFlags::NoRemoveDir);
        PathError::Io(e)
    })
}
