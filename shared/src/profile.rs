//! The profile directory (`~/.agentx`, `~/.agentx-NAME`, or `AGENTX_HOME`) and
//! every path inside it, with the permission checks both binaries enforce.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::folder::{NameError, check_component};

/// Environment variable that sets the profile directory outright.
pub const ENV_HOME: &str = "AGENTX_HOME";
/// Environment variable that sets the socket path.
pub const ENV_SOCKET: &str = "AGENTX_SOCKET";
/// `sun_path` holds 108 bytes including the terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

#[derive(Debug, Error)]
pub enum ProfileError {
    #[error("cannot find your home directory: set HOME or {ENV_HOME}")]
    NoHome,
    #[error("profile name: {0}")]
    BadName(#[from] NameError),
    #[error(
        "socket path {path} is {len} bytes, over the {MAX_SOCKET_PATH}-byte Unix socket limit: \
         set {ENV_SOCKET} to a shorter path (or {ENV_HOME} to a shorter profile directory)"
    )]
    SocketPathTooLong { path: PathBuf, len: usize },
    #[error(
        "cannot create profile directory {dir}: {source} (set {ENV_HOME} to a writable directory)"
    )]
    Create { dir: PathBuf, source: io::Error },
    #[error("cannot read profile directory {dir}: {source}")]
    Inspect { dir: PathBuf, source: io::Error },
    #[error("profile path {dir} exists but is not a directory: move it aside or set {ENV_HOME}")]
    NotADirectory { dir: PathBuf },
    #[error(
        "profile directory {dir} is owned by uid {owner}, not by you (uid {me}): \
         refusing to use it; set {ENV_HOME} to a directory of your own"
    )]
    WrongOwner { dir: PathBuf, owner: u32, me: u32 },
    #[error(
        "profile directory {dir} has mode {mode:04o}, readable by others: refusing to use it; \
         run `chmod 700 {dir}`"
    )]
    TooOpen { dir: PathBuf, mode: u32 },
}

/// A resolved profile: where state, the socket and the locks live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub dir: PathBuf,
    pub socket: PathBuf,
}

impl Profile {
    /// Resolves the profile from `AGENTX_HOME`, then `--profile NAME`
    /// (`~/.agentx-NAME`), then `~/.agentx`; the socket from `AGENTX_SOCKET`
    /// or `<profile>/agentd.sock`. Touches no file.
    pub fn resolve(profile_name: Option<&str>) -> Result<Self, ProfileError> {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Self::resolve_with(profile_name, env(ENV_HOME), env(ENV_SOCKET), env("HOME"))
    }

    /// [`Profile::resolve`] with the environment passed in (for tests).
    pub fn resolve_with(
        profile_name: Option<&str>,
        home_override: Option<PathBuf>,
        socket_override: Option<PathBuf>,
        home: Option<PathBuf>,
    ) -> Result<Self, ProfileError> {
        let dir = match (home_override, profile_name) {
            (Some(dir), _) => absolute(dir),
            (None, name) => {
                let home = home
                    .or_else(|| directories::BaseDirs::new().map(|b| b.home_dir().to_path_buf()))
                    .ok_or(ProfileError::NoHome)?;
                match name {
                    Some(name) => {
                        check_component("profile name", name)?;
                        home.join(format!(".agentx-{name}"))
                    }
                    None => home.join(".agentx"),
                }
            }
        };
        let socket = socket_override.map_or_else(|| dir.join("agentd.sock"), absolute);
        let len = socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(ProfileError::SocketPathTooLong { path: socket, len });
        }
        Ok(Self { dir, socket })
    }

    pub fn pid_file(&self) -> PathBuf {
        self.dir.join("agentd.pid")
    }
    pub fn startup_lock(&self) -> PathBuf {
        self.dir.join("agentd.startup.lock")
    }
    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("log")
    }
    pub fn sessions_dir(&self) -> PathBuf {
        self.dir.join("sessions")
    }
    /// Where folder snapshots live (`checkpoints/` on disk, the name the
    /// storage layout has always had).
    pub fn snapshots_dir(&self) -> PathBuf {
        self.dir.join("checkpoints")
    }
    pub fn config_file(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    /// Creates the profile directory (mode 0700) if needed, then checks it.
    pub fn ensure_dir(&self) -> Result<(), ProfileError> {
        if let Err(source) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
        {
            return Err(match source.kind() {
                io::ErrorKind::AlreadyExists | io::ErrorKind::NotADirectory => {
                    ProfileError::NotADirectory {
                        dir: self.dir.clone(),
                    }
                }
                _ => ProfileError::Create {
                    dir: self.dir.clone(),
                    source,
                },
            });
        }
        self.check_dir()
    }

    /// Refuses a profile directory owned by another user or accessible to
    /// group or others.
    pub fn check_dir(&self) -> Result<(), ProfileError> {
        let meta = std::fs::metadata(&self.dir).map_err(|source| ProfileError::Inspect {
            dir: self.dir.clone(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(ProfileError::NotADirectory {
                dir: self.dir.clone(),
            });
        }
        let me = nix::unistd::geteuid().as_raw();
        if meta.uid() != me {
            return Err(ProfileError::WrongOwner {
                dir: self.dir.clone(),
                owner: meta.uid(),
                me,
            });
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(ProfileError::TooOpen {
                dir: self.dir.clone(),
                mode,
            });
        }
        Ok(())
    }
}

/// Makes a path absolute against the current directory without touching it.
fn absolute(p: PathBuf) -> PathBuf {
    std::path::absolute(&p).unwrap_or(p)
}

/// Creates `dir` (and parents) with mode 0700 when missing.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> Option<PathBuf> {
        Some(PathBuf::from("/home/me"))
    }

    #[test]
    fn resolution_order_is_home_override_then_profile_then_default() {
        let p = Profile::resolve_with(None, None, None, home()).unwrap();
        assert_eq!(p.dir, PathBuf::from("/home/me/.agentx"));
        assert_eq!(p.socket, PathBuf::from("/home/me/.agentx/agentd.sock"));
        let p = Profile::resolve_with(Some("work"), None, None, home()).unwrap();
        assert_eq!(p.dir, PathBuf::from("/home/me/.agentx-work"));
        let p = Profile::resolve_with(Some("work"), Some("/tmp/h".into()), None, home()).unwrap();
        assert_eq!(p.dir, PathBuf::from("/tmp/h"));
        let p = Profile::resolve_with(None, None, Some("/run/a.sock".into()), home()).unwrap();
        assert_eq!(p.socket, PathBuf::from("/run/a.sock"));
    }

    #[test]
    fn hostile_profile_names_are_refused() {
        for bad in ["..", "a/b", "../../etc"] {
            assert!(Profile::resolve_with(Some(bad), None, None, home()).is_err());
        }
    }

    #[test]
    fn an_overlong_socket_path_names_the_override() {
        let long = PathBuf::from(format!("/tmp/{}", "x".repeat(120)));
        let err = Profile::resolve_with(None, Some(long), None, home()).unwrap_err();
        assert!(err.to_string().contains(ENV_SOCKET), "{err}");
    }

    #[test]
    fn directory_is_created_private_and_open_modes_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let p = Profile::resolve_with(None, Some(tmp.path().join("prof")), None, home()).unwrap();
        p.ensure_dir().unwrap();
        let mode = std::fs::metadata(&p.dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&p.dir, std::fs::Permissions::from_mode(0o750)).unwrap();
        let err = p.check_dir().unwrap_err();
        assert!(matches!(err, ProfileError::TooOpen { .. }), "{err}");
        assert!(err.to_string().contains("chmod 700"));
    }
}
