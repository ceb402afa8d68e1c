//! agentd's process environment, read once at start-up and handed to whoever
//! needs a value of it (most take typed settings parsed from it there).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// A snapshot of environment variables. agentd takes one in `run`; tests
/// build theirs with [`Environment::from_pairs`], never touching the
/// process's own.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    vars: HashMap<OsString, OsString>,
}

impl Environment {
    /// The process's environment now.
    pub fn from_process() -> Self {
        Self::from_pairs(std::env::vars_os())
    }

    /// An environment of `pairs`; of two with one name the first counts,
    /// as `getenv` finds it.
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<OsString>,
        V: Into<OsString>,
    {
        let mut vars = HashMap::new();
        for (name, value) in pairs {
            vars.entry(name.into()).or_insert_with(|| value.into());
        }
        Self { vars }
    }

    /// `name`'s value when it is set and valid UTF-8, as
    /// `std::env::var(name).ok()` says.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.var_os(name).and_then(OsStr::to_str)
    }

    /// `name`'s value, whatever its bytes, as `std::env::var_os` says.
    pub fn var_os(&self, name: &str) -> Option<&OsStr> {
        self.vars.get(OsStr::new(name)).map(OsString::as_os_str)
    }

    /// `name`'s value as a path (set, even empty).
    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.var_os(name).map(PathBuf::from)
    }

    /// `name`'s value, owned, when it is set, valid UTF-8 and not empty:
    /// the lookup `agentx_shared::config` takes.
    pub fn non_empty(&self, name: &str) -> Option<String> {
        self.var(name).filter(|v| !v.is_empty()).map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt as _;

    use super::*;

    #[test]
    fn values_are_read_as_std_env_reads_them() {
        let env = Environment::from_pairs([
            (OsString::from("A"), OsString::from("one")),
            (OsString::from("A"), OsString::from("two")),
            (OsString::from("EMPTY"), OsString::new()),
            (
                OsString::from("BYTES"),
                OsString::from_vec(vec![0xff, b'x']),
            ),
        ]);
        assert_eq!(env.var("A"), Some("one"));
        assert_eq!(env.var("EMPTY"), Some(""));
        assert_eq!(env.non_empty("EMPTY"), None);
        assert_eq!(env.non_empty("A").as_deref(), Some("one"));
        // Not UTF-8: unset for `var`, there for `var_os`.
        assert_eq!(env.var("BYTES"), None);
        assert_eq!(env.var_os("BYTES").map(OsStr::len), Some(2));
        assert_eq!(env.var("MISSING"), None);
        assert_eq!(env.path("EMPTY"), Some(PathBuf::new()));
    }
}
