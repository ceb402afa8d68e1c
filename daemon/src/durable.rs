//! Durable file primitives: atomic replace (temp file, fsync, rename, fsync
//! the directory), fsynced appends, and quarantine of unreadable files; state
//! that is usually deleted once used may defer its syncs ([`Sync::Later`])
//! and is replaced by swapping names with a spare instead.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Makes temp file names unique within this process too (two writers of one
/// file must never share a temp file, whatever else serializes them).
static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Whether `name` is a temp file [`write_atomic`] of an earlier agentd
/// left behind (killed between writing and renaming it). Only agentd
/// writes the profile, one process at a time, so a temp file of another
/// process is nobody's now.
pub fn is_stale_temp(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    let Some((_, tail)) = rest.rsplit_once(".tmp-") else {
        return false;
    };
    let Some((pid, seq)) = tail.split_once('-') else {
        return false;
    };
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    numeric(pid) && numeric(seq) && pid.parse::<u32>().ok() != Some(std::process::id())
}

/// When a write has to be on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// Before the call returns: it survives a power loss from then on.
    Now,
    /// Whenever the kernel writes it back, or at [`sync_dir_files`]: for
    /// state that is deleted once it served (a successful one-shot's) and
    /// made durable only when it is kept. A kill of agentd loses none of
    /// it (the kernel holds it); a power loss within the writeback delay
    /// may lose or cut it, and its readers take it as damaged.
    Later,
}

/// A fresh temp file name for `name` in `dir`, of the shape
/// [`is_stale_temp`] recognizes.
fn temp_path(dir: &Path, name: &str) -> PathBuf {
    let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.tmp-{}-{seq}", std::process::id()))
}

/// Replaces `path` with `bytes` so that a crash leaves either the old or the
/// new content, never a mix; returns once the change is on disk.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_as(path, bytes, Sync::Now)
}

/// [`write_atomic`], on disk when `sync` says. A process that dies at any
/// point still leaves the old or the new content (the rename is atomic).
/// With [`Sync::Later`] the file swaps names with a spare ([`swap_in`]),
/// so rewriting it creates and frees no inode.
pub fn write_atomic_as(path: &Path, bytes: &[u8], sync: Sync) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if sync == Sync::Later
        && let Some(claim) = SpareClaim::take(dir.join(format!(".{name}{SPARE}")))
    {
        return swap_in(path, bytes, &claim.0);
    }
    let tmp = temp_path(dir, &name);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        if sync == Sync::Later {
            return std::fs::rename(&tmp, path);
        }
        file.sync_all()?;
        #[cfg(test)]
        seams::synced(path);
        std::fs::rename(&tmp, path)?;
        fsync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// What ends the name of a file's spare (`.<name>.spare`): the copy it
/// had before its last [`Sync::Later`] write.
const SPARE: &str = ".spare";

/// Spares being written now: one writer per spare, whatever the callers
/// (a second one at once takes a temp file of its own).
static SPARES: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// A spare claimed for one write, released when dropped.
struct SpareClaim(PathBuf);

impl SpareClaim {
    fn take(spare: PathBuf) -> Option<Self> {
        let mut spares = SPARES.lock().ok()?;
        if spares.contains(&spare) {
            return None;
        }
        spares.push(spare.clone());
        Some(Self(spare))
    }
}

impl Drop for SpareClaim {
    fn drop(&mut self) {
        if let Ok(mut spares) = SPARES.lock() {
            spares.retain(|s| *s != self.0);
        }
    }
}

/// Writes `bytes` over `spare` (kept from the write before, else made),
/// then swaps the names of `spare` and `path` in one step
/// (`RENAME_EXCHANGE`): `path` always names a whole version, and `spare`
/// keeps the one before. Where there is no `path` yet, or the file system
/// cannot swap names, the spare is renamed over it instead. Unlike a temp
/// file per write, no inode is created or freed after the first two: on
/// ext4 without a journal a new inode is a scan of recently freed ones,
/// and with `discard` each freed block is trimmed at once.
fn swap_in(path: &Path, bytes: &[u8], spare: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileExt as _;
    let written = (|| {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(spare)?;
        file.write_all_at(bytes, 0)?;
        file.set_len(bytes.len() as u64)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(spare);
        return Err(e);
    }
    let swapped = nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        spare,
        nix::fcntl::AT_FDCWD,
        path,
        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
    );
    match swapped {
        Ok(()) => Ok(()),
        Err(_) => std::fs::rename(spare, path).inspect_err(|_| {
            let _ = std::fs::remove_file(spare);
        }),
    }
}

/// A file written under a temp name (as [`write_atomic`] names its temp
/// files, so one a crash leaves is cleared as any other) that becomes its
/// final name only at [`Staged::commit`]; dropped before that, it is
/// removed. For content streamed to disk whose final name is known late.
pub struct Staged {
    tmp: PathBuf,
    /// `None` once committed or given up.
    file: Option<io::BufWriter<File>>,
    behind: WriteBehind,
}

/// How much a file being written lets pile up in the page cache before its
/// write-back is started: a file system's journal commit (any fsync, of
/// any conversation) would otherwise wait for all of it at once.
const WRITE_BEHIND: u64 = 8 << 20;

/// Write-back of a big file started as it is written, every
/// [`WRITE_BEHIND`] bytes: at most two windows wait for the final sync.
#[derive(Debug, Default)]
pub struct WriteBehind {
    written: u64,
    pushed: u64,
}

impl WriteBehind {
    /// Counts `n` more bytes written; true when a window is due.
    pub fn due(&mut self, n: usize) -> bool {
        self.written += n as u64;
        self.written - self.pushed >= WRITE_BEHIND
    }

    /// Starts write-back of what `file` got since the last push (all of
    /// it in the kernel's hands) and waits for what came before that.
    pub fn push(&mut self, file: &File) {
        use std::os::fd::AsRawFd as _;
        let (Ok(from), Ok(len)) = (
            i64::try_from(self.pushed),
            i64::try_from(self.written - self.pushed),
        ) else {
            return;
        };
        // SAFETY: sync_file_range takes a descriptor `file` owns and plain
        // integers. Advice only: a file system without it (EINVAL,
        // ENOSYS) is left to the final sync.
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                from,
                len,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE,
            );
        }
        self.pushed = self.written;
    }
}

impl Staged {
    /// A new temp file in `dir`, named after `name`.
    pub fn create(dir: &Path, name: &str) -> io::Result<Self> {
        let tmp = temp_path(dir, name);
        let file = create_new(&tmp)?;
        Ok(Self {
            tmp,
            file: Some(io::BufWriter::new(file)),
            behind: WriteBehind::default(),
        })
    }

    fn writer(&mut self) -> io::Result<&mut io::BufWriter<File>> {
        self.file
            .as_mut()
            .ok_or_else(|| io::Error::other("the staged file is closed"))
    }

    /// Syncs what was written and renames it to `to` (in the same
    /// directory), durably.
    pub fn commit(mut self, to: &Path) -> io::Result<()> {
        let file = self.writer()?;
        file.flush()?;
        file.get_ref().sync_all()?;
        std::fs::rename(&self.tmp, to)?;
        self.file = None;
        fsync_dir(to.parent().unwrap_or(Path::new(".")))
    }
}

impl io::Write for Staged {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.writer()?.write(buf)?;
        if self.behind.due(n)
            && let Some(file) = &mut self.file
        {
            file.flush()?;
            self.behind.push(file.get_ref());
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.writer()?.flush()
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // Given up: what is buffered is dropped unwritten, the file removed.
        if let Some(file) = self.file.take() {
            drop(file.into_parts());
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Makes a directory entry change (create, rename, unlink) durable.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(test)]
    seams::synced(dir);
    File::open(dir)?.sync_all()
}

/// Creates `path` (0600) for writing; it must not exist yet.
pub fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Opens `path` for appending (created 0600 when missing).
pub fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

/// Opens `path`, which must exist, for appending.
pub fn open_existing_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().append(true).open(path)
}

/// Appends `bytes`, on disk when `sync` says.
pub fn append_as(file: &mut File, bytes: &[u8], sync: Sync) -> io::Result<()> {
    file.write_all(bytes)?;
    match sync {
        Sync::Now => {
            #[cfg(test)]
            seams::synced_file(file);
            file.sync_data()
        }
        Sync::Later => Ok(()),
    }
}

/// Makes a directory entry change durable when `sync` says so now.
pub fn fsync_dir_as(dir: &Path, sync: Sync) -> io::Result<()> {
    match sync {
        Sync::Now => fsync_dir(dir),
        Sync::Later => Ok(()),
    }
}

/// Makes what was written in `dir` with [`Sync::Later`] durable: every
/// regular file in it (not below), the directory, and its entry in its
/// parent. Spares (older copies) are removed, not kept.
pub fn sync_dir_files(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.ends_with(SPARE) {
            std::fs::remove_file(entry.path())?;
            continue;
        }
        if entry.file_type()?.is_file() {
            #[cfg(test)]
            seams::synced(&entry.path());
            File::open(entry.path())?.sync_all()?;
        }
    }
    fsync_dir(dir)?;
    match dir.parent() {
        Some(parent) => fsync_dir(parent),
        None => Ok(()),
    }
}

/// Moves an unreadable file aside as `<name>.corrupt-<unix_ms>` (never
/// deletes it) and returns the new path.
pub fn quarantine(path: &Path) -> io::Result<PathBuf> {
    let target = quarantine_name(path);
    std::fs::rename(path, &target)?;
    if let Some(dir) = path.parent() {
        fsync_dir(dir)?;
    }
    Ok(target)
}

/// Keeps a copy of an unreadable file as `<name>.corrupt-<unix_ms>` (made
/// durable) and leaves the original in place, so the caller can replace it
/// atomically afterwards: no crash window loses either version.
pub fn quarantine_copy(path: &Path) -> io::Result<PathBuf> {
    let bytes = std::fs::read(path)?;
    let target = quarantine_name(path);
    write_atomic(&target, &bytes)?;
    Ok(target)
}

/// `<name>.corrupt-<unix_ms>` beside `path`.
fn quarantine_name(path: &Path) -> PathBuf {
    let ms = agentx_shared::time::unix_ms(std::time::SystemTime::now());
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{name}.corrupt-{ms}"))
}

/// Test seam: which paths were synced (the syncs themselves still run).
#[cfg(test)]
pub(crate) mod seams {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    static SYNCED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    pub(super) fn synced(path: &Path) {
        if let Ok(mut all) = SYNCED.lock() {
            all.push(path.to_path_buf());
        }
    }

    pub(super) fn synced_file(file: &std::fs::File) {
        use std::os::fd::AsRawFd as _;
        if let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            synced(&path);
        }
    }

    /// The paths at or under `dir` synced so far, in order.
    pub(crate) fn synced_under(dir: &Path) -> Vec<PathBuf> {
        SYNCED
            .lock()
            .map(|all| all.iter().filter(|p| p.starts_with(dir)).cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn only_temp_files_of_another_process_are_stale() {
        let own = std::process::id();
        let other = own.wrapping_add(1);
        assert!(is_stale_temp(&format!(".a.json.tmp-{other}-3")));
        assert!(is_stale_temp(&format!(".x-y.jsonl.tmp-{other}-0")));
        assert!(!is_stale_temp(&format!(".a.json.tmp-{own}-3")));
        for kept in [
            "a.json",
            ".a.json",
            "a.json.tmp-1-2",
            ".a.json.tmp-1",
            ".a.json.tmp--2",
            ".a.json.tmp-1-x",
            ".notes.tmp-12-abc",
            ".agentx-restore-notes.tmp",
        ] {
            assert!(!is_stale_temp(kept), "{kept}");
        }
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    /// Rewriting a file written without syncs moves between two inodes
    /// (it and its spare) instead of making a new one each time, and its
    /// name always holds a whole version, shorter ones included.
    #[test]
    fn later_writes_swap_with_a_spare_and_leave_a_whole_version() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let spare = dir.path().join(".state.json.spare");
        let mut inodes = std::collections::HashSet::new();
        for i in 0..6 {
            // Long and short versions: a shorter one must not keep the
            // longer one's tail.
            let version = format!(
                "v{i}{}",
                "x".repeat(if (i / 2) % 2 == 0 { 9000 } else { 3 })
            );
            write_atomic_as(&path, version.as_bytes(), Sync::Later).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), version);
            inodes.insert(std::fs::metadata(&path).unwrap().ino());
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(inodes.len(), 2, "each write made a new file");
        assert!(std::fs::read_to_string(&spare).unwrap().starts_with("v4"));

        // A write cut short leaves the spare torn, never the file.
        std::fs::write(&spare, "torn").unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().starts_with("v5"));
        write_atomic_as(&path, b"next", Sync::Later).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"next");

        // A second writer of the same file at once takes a temp file.
        let held = SpareClaim::take(spare.clone()).unwrap();
        write_atomic_as(&path, b"beside", Sync::Later).unwrap();
        drop(held);
        assert_eq!(std::fs::read(&path).unwrap(), b"beside");
        assert!(std::fs::read_to_string(&spare).unwrap().starts_with("v5"));

        // Made durable, the directory keeps no spare.
        sync_dir_files(dir.path()).unwrap();
        assert!(!spare.exists());
        assert_eq!(std::fs::read(&path).unwrap(), b"beside");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn quarantine_keeps_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, b"garbage").unwrap();
        let moved = quarantine(&path).unwrap();
        assert!(!path.exists());
        assert_eq!(std::fs::read(moved).unwrap(), b"garbage");
    }

    #[test]
    fn a_staged_file_starts_its_write_back_as_it_grows() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let mut staged = Staged::create(dir.path(), "big").unwrap();
        let piece = vec![7u8; 64 << 10];
        let total = 2 * WRITE_BEHIND + WRITE_BEHIND / 2;
        let mut written = 0;
        while written < total {
            staged.write_all(&piece).unwrap();
            written += piece.len() as u64;
        }
        // Pushed at each whole window, the last half window not yet.
        assert_eq!(staged.behind.pushed, 2 * WRITE_BEHIND);
        let to = dir.path().join("big.jsonl");
        staged.commit(&to).unwrap();
        assert_eq!(std::fs::metadata(&to).unwrap().len(), total);
    }
}
