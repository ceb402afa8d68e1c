//! The listening socket: inherited from systemd (LISTEN_FDS, never unlinked)
//! or bound at the profile's socket path (0600), replacing a stale socket.

use std::io;
use std::os::fd::FromRawFd as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use tokio::net::UnixListener;

use agentx_shared::profile::create_private_dir;

pub struct Listener {
    pub listener: UnixListener,
    /// Set when we bound the socket ourselves and must remove it on exit.
    pub owned_path: Option<OwnedSocket>,
}

/// The socket file we bound: its path and the identity (device, inode) of
/// what we bound there, so we never unlink a successor's socket.
#[derive(Debug, Clone)]
pub struct OwnedSocket {
    pub path: PathBuf,
    id: (u64, u64),
}

impl OwnedSocket {
    /// `None` while the path is still our socket; else what happened to it.
    pub fn check(&self) -> Option<String> {
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.id => None,
            Ok(_) => Some(format!("{} was replaced", self.path.display())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Some(format!("{} was deleted", self.path.display()))
            }
            Err(e) => Some(format!("cannot inspect {}: {e}", self.path.display())),
        }
    }
}

impl Listener {
    /// Takes the systemd-provided socket when there is one, else binds `path`.
    /// Must run inside the tokio runtime.
    pub fn acquire(path: &Path) -> anyhow::Result<Self> {
        if let Some(listener) = inherited()? {
            tracing::info!("using the socket inherited from systemd");
            return Ok(Self {
                listener,
                owned_path: None,
            });
        }
        remove_stale(path)?;
        if let Some(parent) = path.parent() {
            create_private_dir(parent)
                .with_context(|| format!("cannot create socket directory {}", parent.display()))?;
        }
        let listener = UnixListener::bind(path)
            .with_context(|| format!("cannot listen on {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot set permissions on {}", path.display()))?;
        let meta = std::fs::symlink_metadata(path)
            .with_context(|| format!("cannot inspect {}", path.display()))?;
        tracing::info!(socket = %path.display(), "listening");
        Ok(Self {
            listener,
            owned_path: Some(OwnedSocket {
                path: path.to_path_buf(),
                id: (meta.dev(), meta.ino()),
            }),
        })
    }
}

/// Removes the socket file we bound (`None`: inherited, left to systemd) —
/// only while it is still ours: a successor's socket at that path stays.
pub fn remove_owned_socket(owned: Option<&OwnedSocket>) {
    let Some(owned) = owned else { return };
    if let Some(what) = owned.check() {
        tracing::info!("leaving the socket path alone: {what}");
        return;
    }
    if let Err(err) = std::fs::remove_file(&owned.path)
        && err.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!("cannot remove socket {}: {err}", owned.path.display());
    }
}

/// The first socket passed by systemd socket activation, if any.
fn inherited() -> anyhow::Result<Option<UnixListener>> {
    let mut fds = sd_notify::listen_fds().context("invalid LISTEN_FDS/LISTEN_PID")?;
    let Some(fd) = fds.next() else {
        return Ok(None);
    };
    // SAFETY: systemd passed this descriptor to us (LISTEN_PID matched our
    // pid) and nothing else in this process owns it.
    let std_listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) };
    std_listener.set_nonblocking(true)?;
    Ok(Some(UnixListener::from_std(std_listener)?))
}

/// A socket file nobody answers on is stale: remove it. A live one means
/// another daemon serves this path, which the pid lock should have prevented.
fn remove_stale(path: &Path) -> anyhow::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err).with_context(|| format!("cannot inspect {}", path.display())),
    };
    if !meta.file_type().is_socket() {
        bail!(
            "{} exists and is not a socket: move it aside (or set AGENTX_SOCKET)",
            path.display()
        );
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => bail!(
            "another process already serves {}: stop it or set AGENTX_SOCKET",
            path.display()
        ),
        Err(err) if err.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(socket = %path.display(), "replacing stale socket");
            std::fs::remove_file(path)
                .with_context(|| format!("cannot remove stale socket {}", path.display()))
        }
        Err(err) => Err(err).with_context(|| format!("cannot probe socket {}", path.display())),
    }
}
