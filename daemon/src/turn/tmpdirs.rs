//! Sandboxed turns' private `TMPDIR`s: made in one directory per profile
//! under the system's temporary directory, which agentd empties when it starts.
//!
//! A turn removes its own when it ends; a turn cut off by `kill -9`, a crash
//! or a power cut cannot, and what its commands left there (a build's
//! thousands of files) would stay for good in a shared `/tmp`. One
//! directory per profile — `agentx-UID-HASH`, made 0700, trusted only when
//! it is a real directory of this user that nobody else can enter — lets
//! the next agentd of the profile (the profile's lock guarantees none other
//! runs) remove every leftover without touching another profile's. It also
//! keeps the temporary directory's own listing short, which the sandbox's
//! rules walk when the profile lives under it.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What a turn's directory is called (`agentx-tmp-` and six random characters).
const TURN_PREFIX: &str = "agentx-tmp-";

/// Where this profile's turns make their private temporary directories.
#[derive(Debug)]
pub struct TmpDirs {
    /// The temporary directory.
    base: PathBuf,
    /// The profile's directory in it, made at the first turn that needs it.
    planned: PathBuf,
    /// `planned` once made and checked, or `base` when it could not be used
    /// safely (a crash's leftovers then stay, as they would without it).
    root: OnceLock<PathBuf>,
}

impl TmpDirs {
    /// The directory of `profile`'s turns under `base`. What an earlier
    /// agentd of the profile left in it is listed now and removed on a
    /// background thread: a turn starting meanwhile makes a new name, which
    /// the removal never sees. Nothing is made until a turn needs it.
    pub fn open(base: &Path, profile: &Path) -> TmpDirs {
        let dirs = TmpDirs {
            base: base.to_path_buf(),
            planned: base.join(name(profile)),
            root: OnceLock::new(),
        };
        if std::fs::symlink_metadata(&dirs.planned).is_ok() && dirs.root() == dirs.planned {
            let stale = listed(&dirs.planned);
            if !stale.is_empty() {
                sweep(stale);
            }
        }
        dirs
    }

    /// A new private directory for one turn (0700, removed when dropped;
    /// [`remove`] also takes what a command made unwritable).
    pub fn make(&self) -> io::Result<tempfile::TempDir> {
        tempfile::Builder::new()
            .prefix(TURN_PREFIX)
            .tempdir_in(self.root())
    }

    /// Where the turns' directories go: the profile's directory (made and
    /// checked the first time), else the temporary directory itself.
    fn root(&self) -> &Path {
        self.root
            .get_or_init(|| match own_directory(&self.planned) {
                Ok(()) => self.planned.clone(),
                Err(e) => {
                    tracing::warn!(
                        "turns' private TMPDIRs go straight into {} ({} cannot be used: {e}); \
                     a crash's leftovers there are not removed",
                        self.base.display(),
                        self.planned.display()
                    );
                    self.base.clone()
                }
            })
    }
}

/// `agentx-UID-HASH`: one per user and profile path.
fn name(profile: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let hash = blake3::hash(profile.as_os_str().as_bytes()).to_hex();
    let uid = nix::unistd::geteuid();
    format!("agentx-{uid}-{}", &hash.as_str()[..16])
}

/// Makes `dir` (0700) unless it exists; either way checks, without
/// following a link, that it is a directory of this user that no one else
/// can enter or write. In a shared `/tmp` anyone can make that name first.
fn own_directory(dir: &Path) -> io::Result<()> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.file_type().is_dir() {
        return Err(io::Error::other("it is not a directory"));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(io::Error::other(format!(
            "it belongs to user {}",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "others may use it (mode {:o})",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Every entry in `dir`.
fn listed(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(e) => {
            tracing::warn!("cannot list {}: {e}", dir.display());
            Vec::new()
        }
    }
}

/// Removes `paths` on a thread of their own, at background priority.
fn sweep(paths: Vec<PathBuf>) {
    let spawned = std::thread::Builder::new()
        .name("agentd-tmp-sweep".into())
        .spawn(move || {
            crate::priority::lower_this_thread();
            for path in &paths {
                remove(path);
            }
            tracing::info!(
                "removed {} private TMPDIR(s) an earlier agentd left",
                paths.len()
            );
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start removing earlier turns' TMPDIRs: {e}");
    }
}

/// Removes the tree at `path` (never following a link), also when a command
/// took the write permission from its own directories.
pub fn remove(path: &Path) {
    match std::fs::remove_dir_all(path) {
        Ok(()) => return,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            let _ = std::fs::remove_file(path);
            return;
        }
        Err(_) => {}
    }
    writable(path);
    if let Err(e) = std::fs::remove_dir_all(path) {
        tracing::warn!("cannot remove {}: {e}", path.display());
    }
}

/// Gives this user full access to every directory under `top` (itself
/// included), opening each without following a link.
fn writable(top: &Path) {
    let mut pending = vec![top.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(opened) = open_directory(&dir) else {
            continue;
        };
        let _ = opened.set_permissions(Permissions::from_mode(0o700));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(entry.path());
            }
        }
    }
}

/// `dir` opened as a directory, failing on a link.
fn open_directory(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    /// Waits (10 s at most) until `path` is gone.
    fn gone(path: &Path) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if std::fs::symlink_metadata(path).is_err() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn turns_go_in_one_private_directory_per_profile() {
        let base = base();
        let a = TmpDirs::open(base.path(), Path::new("/home/a/.agentx"));
        let b = TmpDirs::open(base.path(), Path::new("/home/b/.agentx"));
        // Nothing is made before a turn needs it.
        assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
        let turn = a.make().unwrap();
        assert_ne!(a.root(), b.root());
        assert_eq!(a.root().parent(), Some(base.path()));
        let meta = std::fs::metadata(a.root()).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o700);
        assert_eq!(turn.path().parent(), Some(a.root()));
        let name = turn.path().file_name().unwrap().to_string_lossy();
        assert!(name.starts_with(TURN_PREFIX), "{name}");
        // The same profile finds the same directory again.
        let again = TmpDirs::open(base.path(), Path::new("/home/a/.agentx"));
        assert_eq!(again.root(), a.root());
    }

    #[test]
    fn an_earlier_agentds_leftovers_go_and_another_profiles_stay() {
        let base = base();
        let profile = Path::new("/home/a/.agentx");
        let first = TmpDirs::open(base.path(), profile);
        let left = first.make().unwrap().keep();
        std::fs::create_dir_all(left.join("build/deep")).unwrap();
        std::fs::write(left.join("build/deep/object.o"), b"x").unwrap();
        // A command took away its own write permission.
        std::fs::set_permissions(left.join("build"), Permissions::from_mode(0o500)).unwrap();
        let other = TmpDirs::open(base.path(), Path::new("/home/b/.agentx"));
        let others = other.make().unwrap().keep();

        let second = TmpDirs::open(base.path(), profile);
        assert!(gone(&left), "{} is still there", left.display());
        assert!(others.exists(), "another profile's turn directory went");
        assert!(second.root().exists());
    }

    #[test]
    fn a_link_or_a_shared_directory_at_the_name_is_not_used() {
        let base = base();
        let profile = Path::new("/home/a/.agentx");
        let target = base.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep.txt"), b"mine").unwrap();
        std::os::unix::fs::symlink(&target, base.path().join(name(profile))).unwrap();
        let dirs = TmpDirs::open(base.path(), profile);
        assert_eq!(dirs.root(), base.path());
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(std::fs::read(target.join("keep.txt")).unwrap(), b"mine");

        let shared = tempfile::tempdir().unwrap();
        let at = shared.path().join(name(profile));
        std::fs::create_dir(&at).unwrap();
        std::fs::set_permissions(&at, Permissions::from_mode(0o777)).unwrap();
        std::fs::write(at.join("planted"), b"x").unwrap();
        let dirs = TmpDirs::open(shared.path(), profile);
        assert_eq!(dirs.root(), shared.path());
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(at.join("planted").exists());
    }

    #[test]
    fn unlocking_a_tree_never_follows_a_link_out_of_it() {
        let base = base();
        let outside = base.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::set_permissions(&outside, Permissions::from_mode(0o500)).unwrap();
        let tree = base.path().join("tree");
        std::fs::create_dir_all(tree.join("locked/inner")).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("locked/link")).unwrap();
        std::fs::set_permissions(tree.join("locked/inner"), Permissions::from_mode(0o500)).unwrap();
        std::fs::set_permissions(tree.join("locked"), Permissions::from_mode(0o500)).unwrap();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o777;

        writable(&tree);
        writable(&tree.join("locked/link"));
        assert_eq!(mode(&tree.join("locked")), 0o700);
        assert_eq!(mode(&tree.join("locked/inner")), 0o700);
        assert_eq!(mode(&outside), 0o500, "the link's target was changed");

        remove(&tree);
        assert!(!tree.exists());
        assert!(outside.exists());
        std::fs::set_permissions(&outside, Permissions::from_mode(0o700)).unwrap();
    }
}
