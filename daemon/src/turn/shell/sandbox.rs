//! The command sandbox: agentd turns a policy into a Landlock ruleset (a
//! file descriptor; making one confines nobody), and the supervisor it
//! inherits confines itself with it before it starts `sh`.
//!
//! Landlock only grants, so "read everything but the profile" is read on
//! every entry of each directory on the way down to the profile except the
//! one leading to it, and "list" on `/` (names in the profile can be listed,
//! nothing in it opened). Writable trees that hold the profile (a folder
//! that is the home folder) are split the same way. A turn makes its rules
//! at its first command, so they see the tree as it is then.

use std::path::{Path, PathBuf};

use agentx_shared::sandbox::{SandboxMode, SandboxPolicy};
use landlock::{
    ABI, Access as _, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible as _, PathBeneath,
    Ruleset, RulesetAttr as _, RulesetCreatedAttr as _,
};
use std::os::fd::OwnedFd;

use serde::{Deserialize, Serialize};

/// The variable that names the supervisor's ruleset descriptor (removed
/// before `sh`).
pub(super) use crate::supervisor::SANDBOX_FD_ENV as ENV;

/// The test hook: `AGENTX_SANDBOX_ABI=N` makes agentd act as if the kernel
/// offered Landlock ABI N at most (0: none).
pub const PRETEND_ENV: &str = "AGENTX_SANDBOX_ABI";

/// Device files every command may write (and read).
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// What one confined command may do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// Trees (or files) readable and executable.
    read: Vec<PathBuf>,
    /// Trees writable (and readable).
    write: Vec<PathBuf>,
    /// Devices writable.
    devices: Vec<PathBuf>,
    /// No TCP connect or bind.
    deny_tcp: bool,
    /// The profile (its real path), which no rule but listing may reach.
    hidden: PathBuf,
}

impl Rules {
    /// The rules of `policy` for a command in `folder` with its private
    /// `tmpdir`, keeping `profile` out of reach. `None` for
    /// danger-full-access (nothing to confine).
    pub fn new(
        policy: &SandboxPolicy,
        folder: &Path,
        tmpdir: &Path,
        profile: &Path,
    ) -> Option<Self> {
        let profile = canonical(profile);
        let mut roots: Vec<PathBuf> = vec![canonical(tmpdir)];
        match policy.mode {
            SandboxMode::DangerFullAccess => return None,
            SandboxMode::ReadOnly => {}
            SandboxMode::WorkspaceWrite => {
                roots.push(canonical(folder));
                roots.extend(policy.writable_roots.iter().map(|r| canonical(r)));
            }
        }
        let mut write = Vec::new();
        for root in roots {
            write.extend(around(&root, &profile));
        }
        Some(Self {
            read: around(Path::new("/"), &profile),
            write,
            devices: DEVICES.iter().map(PathBuf::from).collect(),
            deny_tcp: !policy.network,
            hidden: profile,
        })
    }

    /// The ruleset of these rules, ready for a supervisor to enforce (made
    /// once a turn: a command then costs only the enforcing).
    pub fn ruleset(&self) -> std::io::Result<std::sync::Arc<OwnedFd>> {
        self.create()
            .map_err(std::io::Error::other)?
            .map(std::sync::Arc::new)
            .ok_or_else(|| std::io::Error::other("the kernel made no Landlock ruleset"))
    }

    /// Makes the ruleset; the first error stops it.
    fn create(&self) -> Result<Option<OwnedFd>, landlock::RulesetError> {
        let abi = ABI::V3;
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))?;
        if self.deny_tcp {
            ruleset = ruleset.handle_access(AccessNet::from_all(ABI::V4))?;
        }
        let mut created = ruleset.create()?;
        // `/` itself (and so every directory) may be listed.
        created = add(
            created,
            Path::new("/"),
            AccessFs::ReadDir.into(),
            &Forbidden::new(),
        )?;
        let read = AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute;
        let forbidden = forbidden(&self.hidden);
        for path in &self.read {
            created = add(created, path, read, &forbidden)?;
        }
        for path in &self.write {
            created = add(created, path, AccessFs::from_all(abi), &forbidden)?;
        }
        for path in &self.devices {
            created = add(created, path, AccessFs::from_file(abi), &forbidden)?;
        }
        Ok(created.into())
    }
}

/// The profile and every directory above it, by inode: no rule may be on
/// one (a rule on a directory reaches everything below it).
type Forbidden = std::collections::HashSet<(u64, u64)>;

fn forbidden(hidden: &Path) -> Forbidden {
    hidden
        .ancestors()
        .filter_map(|p| nix::sys::stat::stat(p).ok())
        .map(|st| (st.st_dev, st.st_ino))
        .collect()
}

/// Grants `access` on `path` (file rights only for a file). The path is
/// opened without following a final link, and checked as opened: a path
/// that does not exist (any more), a link (what it leads to outside the
/// profile is granted as an entry of its own; into it, never), and the
/// profile or a directory above it get no rule. The lists were made from
/// names, and a name may have been made a link into the profile since (a
/// command of another turn can make one in a writable home folder).
fn add(
    created: landlock::RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
    forbidden: &Forbidden,
) -> Result<landlock::RulesetCreated, landlock::RulesetError> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Ok(fd) = nix::fcntl::open(path, flags, nix::sys::stat::Mode::empty()) else {
        return Ok(created);
    };
    // What was opened, not what the name leads to now.
    let Ok(meta) = nix::sys::stat::fstat(&fd) else {
        return Ok(created);
    };
    let kind = meta.st_mode & libc::S_IFMT;
    if kind == libc::S_IFLNK || forbidden.contains(&(meta.st_dev, meta.st_ino)) {
        return Ok(created);
    }
    let access = if kind == libc::S_IFDIR {
        access
    } else {
        access & AccessFs::from_file(ABI::V3)
    };
    if access.is_empty() {
        return Ok(created);
    }
    created.add_rule(PathBeneath::new(fd, access))
}

/// `root`, or when it holds `hidden` the entries around the way down to
/// it: every entry of each directory on that way except the next step and
/// links (what a link leads to outside `hidden` is an entry of its own on
/// the way, or below one; a link grants nothing).
fn around(root: &Path, hidden: &Path) -> Vec<PathBuf> {
    if hidden.starts_with(root) && hidden != root {
        let mut out = Vec::new();
        let mut dir = root.to_path_buf();
        for step in hidden
            .strip_prefix(root)
            .into_iter()
            .flat_map(Path::components)
        {
            let next = dir.join(step);
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path == next || entry.file_type().is_ok_and(|t| t.is_symlink()) {
                        continue;
                    }
                    out.push(path);
                }
            }
            dir = next;
        }
        out
    } else if root.starts_with(hidden) {
        Vec::new()
    } else {
        vec![root.to_path_buf()]
    }
}

/// `path` with its links resolved, or as it is when it cannot be.
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The Landlock ABI this kernel offers (0: none), at most what `pretend`
/// (the test hook) says.
pub fn kernel_abi(pretend: Option<u32>) -> u32 {
    // SAFETY: the version query takes no attributes and changes nothing.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    let real = u32::try_from(v).unwrap_or(0);
    pretend.map_or(real, |p| p.min(real))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_is_left_out_of_what_is_readable_and_writable() {
        let top = tempfile::tempdir().unwrap();
        let top = canonical(top.path());
        let home = top.join("home");
        let profile = home.join(".agentx");
        std::fs::create_dir_all(profile.join("sessions")).unwrap();
        std::fs::create_dir_all(home.join("project")).unwrap();
        std::fs::write(home.join(".bashrc"), "").unwrap();
        std::os::unix::fs::symlink(&profile, home.join("alias")).unwrap();
        let tmp = top.join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        // The folder is the home folder: writable around the profile.
        let rules = Rules::new(&SandboxPolicy::default(), &home, &tmp, &profile).unwrap();
        assert!(rules.write.contains(&home.join("project")));
        assert!(rules.write.contains(&home.join(".bashrc")));
        assert!(rules.write.contains(&tmp));
        for list in [&rules.read, &rules.write] {
            assert!(!list.iter().any(|p| p.starts_with(&profile)), "{list:?}");
            assert!(!list.contains(&home.join("alias")), "{list:?}");
            assert!(!list.iter().any(|p| profile.starts_with(p)), "{list:?}");
        }
        assert!(rules.read.contains(&home.join("project")));
        assert!(rules.deny_tcp);
        // read-only: the temporary directory only.
        let ro = SandboxPolicy {
            mode: SandboxMode::ReadOnly,
            network: true,
            ..SandboxPolicy::default()
        };
        let rules = Rules::new(&ro, &home, &tmp, &profile).unwrap();
        assert_eq!(rules.write, std::slice::from_ref(&tmp));
        assert!(!rules.deny_tcp);
        let full = SandboxPolicy {
            mode: SandboxMode::DangerFullAccess,
            ..SandboxPolicy::default()
        };
        assert_eq!(Rules::new(&full, &home, &tmp, &profile), None);
        if kernel_abi(None) >= 4 {
            assert!(rules.ruleset().is_ok());
        }
    }

    /// Whether a thread confined by `ruleset` can read `file`.
    fn confined_can_read(ruleset: &OwnedFd, file: &Path) -> bool {
        use std::os::fd::AsRawFd as _;
        let fd = ruleset.as_raw_fd();
        let file = file.to_path_buf();
        std::thread::spawn(move || {
            // SAFETY: as in the supervisor's `confine`; both apply to this
            // thread only, which ends after the read.
            unsafe {
                assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
                assert_eq!(libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32), 0);
            }
            std::fs::read(&file).is_ok()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn an_entry_made_a_link_into_the_profile_after_listing_gets_no_rule() {
        if kernel_abi(None) < 4 {
            return;
        }
        let top = tempfile::tempdir().unwrap();
        let home = canonical(top.path()).join("home");
        let profile = home.join(".agentx");
        std::fs::create_dir_all(profile.join("sessions")).unwrap();
        std::fs::write(profile.join("secret"), "key").unwrap();
        std::fs::write(profile.join("sessions/chat"), "chat").unwrap();
        std::fs::create_dir(home.join("work")).unwrap();
        std::fs::write(home.join("work/notes"), "notes").unwrap();
        std::fs::create_dir(home.join("keep")).unwrap();
        std::fs::write(home.join("keep/file"), "kept").unwrap();
        let tmp = canonical(top.path()).join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        // The folder is the home folder: `work` is listed as writable.
        let rules = Rules::new(&SandboxPolicy::default(), &home, &tmp, &profile).unwrap();
        assert!(rules.write.contains(&home.join("work")));
        let before = rules.ruleset().unwrap();
        assert!(confined_can_read(&before, &home.join("work/notes")));
        // Then `work` becomes a link to the profile before the rules are made.
        std::fs::rename(home.join("work"), home.join("old")).unwrap();
        std::os::unix::fs::symlink(&profile, home.join("work")).unwrap();
        let after = rules.ruleset().unwrap();
        assert!(!confined_can_read(&after, &profile.join("secret")));
        assert!(!confined_can_read(&after, &home.join("work/secret")));
        // Or a link to a directory inside the profile.
        std::fs::remove_file(home.join("work")).unwrap();
        std::os::unix::fs::symlink(profile.join("sessions"), home.join("work")).unwrap();
        let inside = rules.ruleset().unwrap();
        assert!(!confined_can_read(&inside, &profile.join("sessions/chat")));
        assert!(!confined_can_read(&inside, &home.join("work/chat")));
        // What was not touched is still readable.
        assert!(confined_can_read(&inside, &home.join("keep/file")));
    }

    #[test]
    fn the_test_hook_only_lowers_the_abi() {
        let real = kernel_abi(None);
        assert_eq!(kernel_abi(Some(0)), 0);
        assert_eq!(kernel_abi(Some(real + 5)), real);
    }
}
