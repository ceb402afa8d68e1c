//! Reading the files a scan cannot vouch for: each read whole through
//! directory fds, checked not to change while read, hashed and compressed.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{FileStat, Mode, fstat};
use rayon::prelude::*;

use super::{MAX_FILE, ScanStats, ns, open_dir_at};
use crate::snapshot::blobs::{Known, PackWriter, compress};
use crate::snapshot::manifest::{Entry, Hash, Kind, why};

/// Opens the file at `rel` under `root` for reading, through directory fds
/// (no symlink followed, no `PATH_MAX` limit).
pub fn open_file(root: &OwnedFd, rel: &[u8]) -> nix::Result<std::fs::File> {
    let parts: Vec<&[u8]> = rel.split(|b| *b == b'/').collect();
    let Some((name, parents)) = parts.split_last() else {
        return Err(Errno::ENOENT);
    };
    let mut dir: Option<OwnedFd> = None;
    for part in parents {
        dir = Some(open_dir_at(dir.as_ref().unwrap_or(root), part)?);
    }
    let fd = openat(
        dir.as_ref().unwrap_or(root),
        OsStr::from_bytes(name),
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY,
        Mode::empty(),
    )?;
    Ok(std::fs::File::from(fd))
}

/// Reads a file whole and checks it did not change while being read
/// (size, mtime and ctime from fstat before and after; three tries).
/// `Ok(Err(reason))`: it kept changing (a torn read is never stored as its
/// state) or grew past the limit.
type Stable = Result<(Vec<u8>, FileStat), &'static [u8]>;
fn read_stable(root: &OwnedFd, rel: &[u8]) -> std::io::Result<Stable> {
    use std::io::Read as _;
    let key = |st: &FileStat| {
        (
            st.st_size,
            st.st_mtime,
            st.st_mtime_nsec,
            st.st_ctime,
            st.st_ctime_nsec,
            st.st_ino,
        )
    };
    for _ in 0..3 {
        let mut file = open_file(root, rel)?;
        let before = fstat(&file)?;
        if before.st_size as u64 > MAX_FILE {
            return Ok(Err(why::OVERSIZED));
        }
        let mut data = Vec::with_capacity(usize::try_from(before.st_size).unwrap_or(0));
        file.read_to_end(&mut data)?;
        #[cfg(test)]
        crate::snapshot::seams::file_read(rel);
        let after = fstat(&file)?;
        if key(&before) == key(&after) && data.len() as u64 == after.st_size as u64 {
            return Ok(Ok((data, after)));
        }
    }
    Ok(Err(why::CHANGING))
}

/// Reads and hashes `entries[todo]` (and compresses what is new into `pack`)
/// in parallel, in bounded batches. A file gone meanwhile gets an empty path
/// (the caller leaves it out); one that kept changing or cannot be read is
/// recorded as [`Kind::Skipped`].
pub(crate) fn hash_todo(
    root_fd: &OwnedFd,
    entries: &mut [Entry],
    todo: &[usize],
    blobs: &Known,
    pack: &mut PackWriter,
) -> std::io::Result<ScanStats> {
    // Hash (and compress what is new) in parallel, in bounded batches, and
    // append sequentially to the pack.
    let mut stats = ScanStats {
        hashed: todo.len() as u64,
        new_blobs: 0,
    };
    for batch in todo.chunks(512) {
        let results: Vec<(usize, std::io::Result<Hashed>)> = batch
            .par_iter()
            .map(|&i| {
                let result = read_stable(root_fd, &entries[i].path).and_then(|read| {
                    let (data, st) = match read {
                        Ok(read) => read,
                        Err(reason) => return Ok(Err(reason)),
                    };
                    let hash = *blake3::hash(&data).as_bytes();
                    if blobs.contains(&hash) {
                        Ok(Ok((hash, st, None)))
                    } else {
                        Ok(Ok((hash, st, Some(compress(&data)?))))
                    }
                });
                (i, result)
            })
            .collect();
        for (i, result) in results {
            let added = record(&mut entries[i], result, pack)?;
            stats.new_blobs += u64::from(added);
        }
    }
    Ok(stats)
}

/// A file read for hashing, with its stat at the read and its compressed
/// content when the store does not have it yet; or why it was not captured.
type Hashed = Result<(Hash, FileStat, Option<Vec<u8>>), &'static [u8]>;

/// Puts what reading `entry` found into it (and new content into `pack`);
/// returns whether a blob was added.
fn record(
    entry: &mut Entry,
    result: std::io::Result<Hashed>,
    pack: &mut PackWriter,
) -> std::io::Result<bool> {
    let mut added = false;
    match result {
        Ok(Ok((hash, st, blob))) => {
            entry.hash = hash;
            if let Some(compressed) = blob
                && !pack.contains(&hash)
            {
                pack.append(hash, &compressed, st.st_size as u64)?;
                added = true;
            }
            // Changed between the walk's stat and the read: keep the
            // stat that matches what was read, and re-hash next time.
            let mtime_ns = ns(st.st_mtime, st.st_mtime_nsec);
            if st.st_size as u64 != entry.size
                || mtime_ns != entry.mtime_ns
                || ns(st.st_ctime, st.st_ctime_nsec) != entry.ctime_ns
                || st.st_ino != entry.ino
            {
                entry.size = st.st_size as u64;
                entry.mtime_ns = mtime_ns;
                entry.ctime_ns = ns(st.st_ctime, st.st_ctime_nsec);
                entry.ino = st.st_ino;
                entry.mode = st.st_mode & 0o7777;
                entry.racy = true;
            }
        }
        Ok(Err(reason)) => {
            // Kept changing while read, or grew past the limit.
            entry.kind = Kind::Skipped;
            entry.size = 0;
            entry.racy = true;
            entry.target = reason.to_vec();
        }
        Err(e) if e.raw_os_error() == Some(Errno::ENOENT as i32) => entry.path.clear(),
        Err(_) => {
            // Present but unreadable: recorded, never as absent.
            entry.kind = Kind::Skipped;
            entry.size = 0;
            entry.target = why::UNREADABLE.to_vec();
        }
    }
    Ok(added)
}
