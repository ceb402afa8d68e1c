//! Single instance per profile: an exclusive lock on `<profile>/agentd.pid`
//! held for the daemon's whole life (liveness is the lock, not the file).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use anyhow::Context as _;

/// The held lock; dropping it (or exiting) releases it.
#[derive(Debug)]
pub struct PidLock {
    _file: File,
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
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())?;
        file.sync_all()?;
        Ok(Acquired::Lock(PidLock { _file: file }))
    }
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
}
