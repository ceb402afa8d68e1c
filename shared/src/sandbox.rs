//! The command sandbox's modes and policy, as config.toml, `--sandbox` and
//! `/sandbox` name them, and what a kernel's Landlock ABI can enforce of them.

use std::path::PathBuf;

use serde::Deserialize;

/// How much a tool command may change, named as Codex names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// No writes but the private temporary directory.
    ReadOnly,
    /// Writes in the folder, the temporary directory and configured roots.
    #[default]
    WorkspaceWrite,
    /// No sandbox: commands run with the user's full rights.
    DangerFullAccess,
}

impl SandboxMode {
    pub const NAMES: &'static str = "read-only, workspace-write or danger-full-access";

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
            Self::DangerFullAccess => "danger-full-access",
        }
    }

    /// The mode `s` names; `""` is the default.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "read-only" => Some(Self::ReadOnly),
            "workspace-write" | "" => Some(Self::WorkspaceWrite),
            "danger-full-access" => Some(Self::DangerFullAccess),
            _ => None,
        }
    }
}

/// The sandbox one turn's commands run in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxPolicy {
    pub mode: SandboxMode,
    /// TCP allowed (`sandbox_network = true`).
    pub network: bool,
    /// Writable besides the folder and the temporary directory
    /// (workspace-write only).
    pub writable_roots: Vec<PathBuf>,
}

/// The name (argv[0]) of a tool supervisor whose command is confined:
/// agentd refuses every call from it and from all it started, so a
/// sandboxed command cannot drive agentd through its socket.
pub const CONFINED_SUPERVISOR: &str = "agentd-sandbox";

/// The first Landlock ABI with truncate rights: below it a confined command
/// could still empty a file outside the folder.
pub const ABI_FILES: u32 = 3;
/// The first Landlock ABI with TCP connect and bind rules.
pub const ABI_TCP: u32 = 4;

/// Whether a kernel can hold commands to a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enforcement {
    /// Confined as the mode says.
    Enforced,
    /// danger-full-access: nothing to enforce.
    Unconfined,
    /// The kernel cannot: why, in a few words.
    Unavailable(String),
}

impl SandboxPolicy {
    /// The Landlock ABI the policy needs (`None`: none, it confines nothing).
    pub fn required_abi(&self) -> Option<u32> {
        match self.mode {
            SandboxMode::DangerFullAccess => None,
            _ if self.network => Some(ABI_FILES),
            _ => Some(ABI_TCP),
        }
    }

    /// What a kernel offering Landlock ABI `abi` (0: none) makes of it.
    pub fn enforcement(&self, abi: u32) -> Enforcement {
        match self.required_abi() {
            None => Enforcement::Unconfined,
            Some(need) if abi >= need => Enforcement::Enforced,
            Some(need) => Enforcement::Unavailable(if abi == 0 {
                "this kernel has no Landlock".to_owned()
            } else {
                format!(
                    "this kernel's Landlock is ABI {abi}; {} needs ABI {need}",
                    self.describe_mode()
                )
            }),
        }
    }

    /// `workspace-write` or `workspace-write, network on`.
    pub fn describe_mode(&self) -> String {
        match (self.mode, self.network) {
            (SandboxMode::DangerFullAccess, _) | (_, false) => self.mode.as_str().to_owned(),
            (mode, true) => format!("{} with network", mode.as_str()),
        }
    }

    /// One line for the banner and `/status`: the mode and whether the
    /// kernel enforces it.
    pub fn line(&self, abi: u32) -> String {
        match self.enforcement(abi) {
            Enforcement::Enforced => format!("{} (enforced)", self.describe_mode()),
            Enforcement::Unconfined => {
                format!("{} (commands are not confined)", self.mode.as_str())
            }
            Enforcement::Unavailable(why) => {
                format!("{} (NOT enforced: {why})", self.describe_mode())
            }
        }
    }
}

impl From<&SandboxPolicy> for crate::proto::SandboxPolicy {
    fn from(p: &SandboxPolicy) -> Self {
        Self {
            mode: p.mode.as_str().to_owned(),
            network: p.network,
            writable_roots: p
                .writable_roots
                .iter()
                .map(|r| r.to_string_lossy().into_owned())
                .collect(),
        }
    }
}

impl TryFrom<crate::proto::SandboxPolicy> for SandboxPolicy {
    type Error = String;

    fn try_from(p: crate::proto::SandboxPolicy) -> Result<Self, Self::Error> {
        let mode = SandboxMode::parse(&p.mode)
            .ok_or_else(|| format!("sandbox mode {:?} is not {}", p.mode, SandboxMode::NAMES))?;
        let writable_roots: Vec<PathBuf> =
            p.writable_roots.into_iter().map(PathBuf::from).collect();
        if let Some(bad) = writable_roots.iter().find(|r| !r.is_absolute()) {
            return Err(format!(
                "sandbox writable root {} is not an absolute path",
                bad.display()
            ));
        }
        Ok(Self {
            mode,
            network: p.network,
            writable_roots,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_need_the_abi_of_what_they_deny() {
        let mut p = SandboxPolicy::default();
        assert_eq!(p.mode, SandboxMode::WorkspaceWrite);
        assert_eq!(p.enforcement(7), Enforcement::Enforced);
        assert_eq!(p.enforcement(4), Enforcement::Enforced);
        assert!(matches!(p.enforcement(3), Enforcement::Unavailable(_)));
        assert!(
            matches!(p.enforcement(0), Enforcement::Unavailable(w) if w.contains("no Landlock"))
        );
        p.network = true;
        assert_eq!(p.enforcement(3), Enforcement::Enforced);
        p.mode = SandboxMode::DangerFullAccess;
        assert_eq!(p.enforcement(0), Enforcement::Unconfined);
        for mode in ["read-only", "workspace-write", "danger-full-access"] {
            assert_eq!(
                SandboxMode::parse(mode).map(SandboxMode::as_str),
                Some(mode)
            );
        }
        assert_eq!(SandboxMode::parse("full"), None);
    }

    #[test]
    fn the_wire_form_round_trips_and_refuses_relative_roots() {
        let p = SandboxPolicy {
            mode: SandboxMode::ReadOnly,
            network: true,
            writable_roots: vec![PathBuf::from("/data")],
        };
        let wire = crate::proto::SandboxPolicy::from(&p);
        assert_eq!(SandboxPolicy::try_from(wire), Ok(p));
        let relative = crate::proto::SandboxPolicy {
            writable_roots: vec!["data".into()],
            ..Default::default()
        };
        assert!(SandboxPolicy::try_from(relative).is_err());
        let unknown = crate::proto::SandboxPolicy {
            mode: "open".into(),
            ..Default::default()
        };
        assert!(SandboxPolicy::try_from(unknown).is_err());
    }
}
