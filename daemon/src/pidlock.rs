//! Single instance per profile: an exclusive lock on `<profile>/agentd.pid`
//! held for the daemon's whole life (liveness is the lock, not the file),
//! re-checked while serving so a deleted or replaced pid file is noticed.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The held lock; dropping it (or exiting) releases it.
#[derive(Debug)]
pub struct PidLock {
    file: File,
    path: PathBuf,
    /// The profile directory's identity when the lock was taken: a profile
    /// deleted and made anew is not ours to re-lock.
    dir: Option<(u64, u64)>,
}

/// What [`PidLock::check`] found at the pid file's path.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// The path is the file we hold locked.
    Ours,
    /// The file had been deleted or replaced and nobody held the new one:
    /// we locked it, so single-instance holds again.
    Readopted(String),
    /// Another process holds the lock at that path now (or it cannot be
    /// taken): a second agentd may be serving this profile.
    Lost(String),
}

pub enum Acquired {
    Lock(PidLock),
    /// Another live agentd holds the lock; its pid as written in the file.
    HeldBy(String),
}

impl PidLock {
    pub fn acquire(path: &Path) -> anyhow::Result<Acquired> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                // Best effort: the holder may be between truncate and write.
                let _ = file.read_to_string(&mut pid);
                return Ok(Acquired::HeldBy(pid.trim().to_owned()));
            }
            Err(TryLockError::Error(err)) => {
                return Err(err).with_context(|| format!("cannot lock {}", path.display()));
            }
        }
        write_pid(&mut file)?;
        Ok(Acquired::Lock(PidLock {
            file,
            path: path.to_path_buf(),
            dir: dir_id(path),
        }))
    }

    /// Whether the pid file at our path is still the one we hold. A user
    /// may delete it (or the whole profile): then the next client could
    /// start a second agentd beside us. Re-creating and re-locking it closes
    /// that door; finding it locked by someone else means we lost it.
    pub fn check(&mut self) -> Check {
        let held = self.file.metadata().map(|m| (m.dev(), m.ino()));
        let at_path = std::fs::metadata(&self.path).map(|m| (m.dev(), m.ino()));
        let why = match (held, at_path) {
            (Ok(a), Ok(b)) if a == b => return Check::Ours,
            (_, Err(e)) if e.kind() == std::io::ErrorKind::NotFound => "was deleted",
            (_, Ok(_)) => "was replaced",
            (_, Err(e)) => return Check::Lost(format!("cannot inspect the pid file: {e}")),
        };
        if dir_id(&self.path) != self.dir {
            return Check::Lost(format!(
                "{} {why} with its profile directory (deleted or replaced)",
                self.path.display()
            ));
        }
        match Self::acquire(&self.path) {
            Ok(Acquired::Lock(lock)) => {
                *self = lock;
                Check::Readopted(format!(
                    "{} {why}; re-created and locked it",
                    self.path.display()
                ))
            }
            Ok(Acquired::HeldBy(pid)) => Check::Lost(format!(
                "{} {why} and is now locked by pid {pid}",
                self.path.display()
            )),
            Err(e) => Check::Lost(format!(
                "{} {why} and cannot be re-created: {e:#}",
                self.path.display()
            )),
        }
    }
}

/// The (device, inode) of the directory holding `path`.
fn dir_id(path: &Path) -> Option<(u64, u64)> {
    let dir = path.parent()?;
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

fn write_pid(file: &mut File) -> std::io::Result<()> {
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "{}", std::process::id())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_sees_the_first_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agentd.pid");
        let first = match PidLock::acquire(&path).unwrap() {
            Acquired::Lock(l) => l,
            Acquired::HeldBy(_) => panic!("fresh lock reported held"),
        };
        match PidLock::acquire(&path).unwrap() {
            Acquired::HeldBy(pid) => assert_eq!(pid, std::process::id().to_string()),
            Acquired::Lock(_) => panic!("lock acquired twice"),
        }
        drop(first);
        assert!(matches!(
            PidLock::acquire(&path).unwrap(),
            Acquired::Lock(_)
        ));
    }

    #[test]
    fn a_deleted_pid_file_is_readopted_and_a_taken_one_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agentd.pid");
        let Acquired::Lock(mut lock) = PidLock::acquire(&path).unwrap() else {
            panic!("fresh lock reported held");
        };
        assert_eq!(lock.check(), Check::Ours);
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(lock.check(), Check::Readopted(_)));
        // The re-created file is locked: nobody else can take it.
        assert!(matches!(
            PidLock::acquire(&path).unwrap(),
            Acquired::HeldBy(_)
        ));
        assert_eq!(lock.check(), Check::Ours);
        // Deleted, then taken by another instance before we looked.
        std::fs::remove_file(&path).unwrap();
        let Acquired::Lock(_other) = PidLock::acquire(&path).unwrap() else {
            panic!("the new file was already locked");
        };
        assert!(matches!(lock.check(), Check::Lost(_)));
        // The whole profile gone: lost as well, and also once it is made
        // anew (another agentd's profile, not ours to re-lock).
        drop(_other);
        std::fs::remove_dir_all(dir.path()).unwrap();
        assert!(matches!(lock.check(), Check::Lost(_)));
        std::fs::create_dir(dir.path()).unwrap();
        assert!(matches!(lock.check(), Check::Lost(_)));
    }
}
