//! Which variables a tool command sees: `[shell_environment]` in
//! config.toml, with Codex's keys and meanings, applied by agentd.
//!
//! In order: start from all of the caller's variables, the core ones, or
//! none (`inherit`); drop names that look like secrets (KEY, SECRET, TOKEN,
//! PASSWORD, CREDENTIAL, any case) unless `ignore_default_excludes`; drop
//! `exclude` patterns; add `set`; keep only `include_only` patterns when
//! given. Patterns are case-insensitive with `*` and `?`. Whatever the
//! policy, a variable holding the provider key agentx uses is removed.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use serde::Deserialize;

/// Where the variables start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Inherit {
    /// Every variable of the caller.
    #[default]
    All,
    /// Only HOME, LOGNAME, PATH, SHELL, USER, USERNAME, TMPDIR, TEMP, TMP.
    Core,
    /// None (only `set`).
    None,
}

impl Inherit {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Core => "core",
            Self::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "all" | "" => Some(Self::All),
            "core" => Some(Self::Core),
            "none" => Some(Self::None),
            _ => None,
        }
    }
}

/// What `inherit = "core"` keeps.
const CORE: &[&str] = &[
    "HOME", "LOGNAME", "PATH", "SHELL", "USER", "USERNAME", "TMPDIR", "TEMP", "TMP",
];

/// Names removed by default: they usually hold secrets.
pub const DEFAULT_EXCLUDES: &[&str] =
    &["*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*", "*CREDENTIAL*"];

/// The `[shell_environment]` table.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellEnvironment {
    #[serde(default)]
    pub inherit: Inherit,
    #[serde(default)]
    pub ignore_default_excludes: bool,
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub include_only: Vec<String>,
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

impl ShellEnvironment {
    /// The variables a command gets from `vars` (the caller's); `secrets`
    /// are values no variable may carry (the provider key).
    pub fn apply(
        &self,
        vars: Vec<(OsString, OsString)>,
        secrets: &[&str],
    ) -> Vec<(OsString, OsString)> {
        let mut out: Vec<(OsString, OsString)> = vars
            .into_iter()
            .filter(|(name, _)| match self.inherit {
                Inherit::All => true,
                Inherit::Core => CORE.iter().any(|c| OsStr::new(c) == name),
                Inherit::None => false,
            })
            .filter(|(name, _)| {
                self.ignore_default_excludes || !matches_any(DEFAULT_EXCLUDES, name)
            })
            .filter(|(name, _)| !matches_any(&self.exclude, name))
            .collect();
        for (name, value) in &self.set {
            out.retain(|(n, _)| n != name.as_str());
            out.push((name.into(), value.into()));
        }
        if !self.include_only.is_empty() {
            out.retain(|(name, _)| matches_any(&self.include_only, name));
        }
        // The key agentx uses never reaches a tool, under any name.
        out.retain(|(_, value)| {
            let value = value.as_encoded_bytes();
            !secrets.iter().any(|s| {
                let s = s.as_bytes();
                !s.is_empty() && value.windows(s.len()).any(|w| w == s)
            })
        });
        out
    }

    /// One line for `/status`: what the policy does.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("inherit {}", self.inherit.as_str())];
        if !self.ignore_default_excludes {
            parts.push("secrets removed (*KEY* *SECRET* *TOKEN* *PASSWORD* *CREDENTIAL*)".into());
        }
        if !self.exclude.is_empty() {
            parts.push(format!("exclude {}", self.exclude.join(" ")));
        }
        if !self.set.is_empty() {
            let names: Vec<&str> = self.set.keys().map(String::as_str).collect();
            parts.push(format!("set {}", names.join(" ")));
        }
        if !self.include_only.is_empty() {
            parts.push(format!("only {}", self.include_only.join(" ")));
        }
        parts.push("the provider key never".into());
        parts.join(", ")
    }
}

fn matches_any<S: AsRef<str>>(patterns: &[S], name: &OsStr) -> bool {
    let name = name.to_string_lossy().to_ascii_uppercase();
    patterns
        .iter()
        .any(|p| wildcard(p.as_ref().to_ascii_uppercase().as_bytes(), name.as_bytes()))
}

/// `*` (any run) and `?` (one byte) matching of the whole `text`.
fn wildcard(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

impl From<&ShellEnvironment> for crate::proto::ShellEnvironmentPolicy {
    fn from(p: &ShellEnvironment) -> Self {
        Self {
            inherit: p.inherit.as_str().to_owned(),
            ignore_default_excludes: p.ignore_default_excludes,
            exclude: p.exclude.clone(),
            include_only: p.include_only.clone(),
            set: p.set.clone().into_iter().collect(),
        }
    }
}

impl TryFrom<crate::proto::ShellEnvironmentPolicy> for ShellEnvironment {
    type Error = String;

    fn try_from(p: crate::proto::ShellEnvironmentPolicy) -> Result<Self, Self::Error> {
        Ok(Self {
            inherit: Inherit::parse(&p.inherit).ok_or_else(|| {
                format!(
                    "shell_environment inherit {:?} is not all, core or none",
                    p.inherit
                )
            })?,
            ignore_default_excludes: p.ignore_default_excludes,
            exclude: p.exclude,
            include_only: p.include_only,
            set: p.set.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(n, v)| (n.into(), v.into())).collect()
    }

    fn names(vars: &[(OsString, OsString)]) -> Vec<String> {
        vars.iter()
            .map(|(n, _)| n.to_string_lossy().into_owned())
            .collect()
    }

    const CALLER: &[(&str, &str)] = &[
        ("PATH", "/usr/bin"),
        ("HOME", "/home/u"),
        ("OPENAI_API_KEY", "sk-secret"),
        ("GITHUB_TOKEN", "ghp"),
        ("aws_secret_access_key", "x"),
        ("DB_PASSWORD", "p"),
        ("GCP_CREDENTIALS", "c"),
        ("MY_OPENAI", "prefix sk-secret suffix"),
        ("EDITOR", "vi"),
    ];

    #[test]
    fn secrets_are_removed_by_default_and_the_key_under_any_name() {
        let out = ShellEnvironment::default().apply(vars(CALLER), &["sk-secret"]);
        assert_eq!(names(&out), ["PATH", "HOME", "EDITOR"]);
        // Even with the default excludes off, the key itself never goes.
        let all = ShellEnvironment {
            ignore_default_excludes: true,
            ..ShellEnvironment::default()
        };
        let out = all.apply(vars(CALLER), &["sk-secret"]);
        assert_eq!(
            names(&out),
            [
                "PATH",
                "HOME",
                "GITHUB_TOKEN",
                "aws_secret_access_key",
                "DB_PASSWORD",
                "GCP_CREDENTIALS",
                "EDITOR"
            ]
        );
    }

    #[test]
    fn inherit_exclude_set_and_include_only_mean_what_codex_says() {
        let core = ShellEnvironment {
            inherit: Inherit::Core,
            ..ShellEnvironment::default()
        };
        assert_eq!(names(&core.apply(vars(CALLER), &[])), ["PATH", "HOME"]);
        let none = ShellEnvironment {
            inherit: Inherit::None,
            set: [("CI".to_owned(), "1".to_owned())].into(),
            ..ShellEnvironment::default()
        };
        assert_eq!(names(&none.apply(vars(CALLER), &[])), ["CI"]);
        let picky = ShellEnvironment {
            exclude: vec!["ed*".into()],
            include_only: vec!["p?th".into(), "LANG".into()],
            set: [("LANG".to_owned(), "C".to_owned())].into(),
            ..ShellEnvironment::default()
        };
        assert_eq!(names(&picky.apply(vars(CALLER), &[])), ["PATH", "LANG"]);
    }

    #[test]
    fn wildcards_match_whole_names() {
        assert!(wildcard(b"*KEY*", b"OPENAI_API_KEY"));
        assert!(wildcard(b"*KEY*", b"KEY"));
        assert!(!wildcard(b"KEY", b"KEYS"));
        assert!(wildcard(b"A*B*C", b"AXXBYYC"));
        assert!(!wildcard(b"A*B*C", b"AXXBYY"));
        assert!(wildcard(b"?", b"X"));
        assert!(!wildcard(b"?", b""));
    }
}
