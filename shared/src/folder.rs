//! Path rules for per-folder state: the folder key used in directory names
//! and the validation of agent names and ids that become path components.

use thiserror::Error;

/// Whether snapshots (and so undo and rewind) are off in `folder`: it is
/// `/`, or `home` (the user's home folder) or a folder above it.
pub fn undo_off(folder: &std::path::Path, home: Option<&std::path::Path>) -> bool {
    // Real paths: HOME or the folder may be reached through a symlink.
    let real = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let real_folder = real(folder);
    let at_or_above_home =
        home.is_some_and(|h| h.starts_with(folder) || real(h).starts_with(&real_folder));
    at_or_above_home || real_folder == std::path::Path::new("/")
}

/// A name that will become one path component was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum NameError {
    #[error("{what} must not be empty")]
    Empty { what: &'static str },
    #[error(
        "{what} {name:?} is not allowed: use letters, digits, '.', '_' or '-' (not '.' or '..')"
    )]
    Invalid { what: &'static str, name: String },
    #[error("{what} is longer than {max} bytes")]
    TooLong { what: &'static str, max: usize },
}

/// The directory name for a folder: its full path with every character
/// outside `A-Z a-z 0-9 . _ -` replaced by `-`. Distinct folders can share a
/// key (`/a/b-c`, `/a/b/c`), so the real path is always stored alongside.
pub fn folder_key(folder: &std::path::Path) -> String {
    folder
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Checks a name (agent, session id, one-shot id) that becomes one path
/// component: non-empty, at most 128 bytes, only `A-Z a-z 0-9 . _ -`, and
/// not `.` or `..`.
pub fn check_component(what: &'static str, name: &str) -> Result<(), NameError> {
    const MAX: usize = 128;
    if name.is_empty() {
        return Err(NameError::Empty { what });
    }
    if name.len() > MAX {
        return Err(NameError::TooLong { what, max: MAX });
    }
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok_chars || name == "." || name == ".." {
        return Err(NameError::Invalid {
            what,
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Absolute folder `to` as seen from absolute folder `from` (`../b`,
/// `sub`, `.`): how a listing names another checkout of the same project.
pub fn relative(from: &str, to: &str) -> String {
    let a: Vec<&str> = from.split('/').filter(|c| !c.is_empty()).collect();
    let b: Vec<&str> = to.split('/').filter(|c| !c.is_empty()).collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out: Vec<&str> = vec![".."; a.len() - common];
    out.extend(&b[common..]);
    if out.is_empty() {
        ".".to_owned()
    } else {
        out.join("/")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn relative_paths_between_checkouts() {
        use super::relative;
        assert_eq!(relative("/w/clone2", "/w/clone1"), "../clone1");
        assert_eq!(relative("/w/a/b", "/w/c"), "../../c");
        assert_eq!(relative("/w", "/w/sub/x"), "sub/x");
        assert_eq!(relative("/w/x", "/w/x/"), ".");
        assert_eq!(relative("/", "/w"), "w");
    }

    use super::*;
    use std::path::Path;

    #[test]
    fn folder_key_replaces_everything_outside_the_safe_set() {
        assert_eq!(
            folder_key(Path::new("/home/me/my project")),
            "-home-me-my-project"
        );
        assert_eq!(
            folder_key(Path::new("/a/b-c")),
            folder_key(Path::new("/a/b/c"))
        );
        assert_eq!(folder_key(Path::new("/x/é.rs_1")), "-x--.rs_1");
    }

    #[test]
    fn component_names_reject_traversal_and_separators() {
        assert!(check_component("agent", "default").is_ok());
        assert!(check_component("agent", "a.b_c-1").is_ok());
        for bad in ["", ".", "..", "a/b", "../x", "a b", "x\0"] {
            assert!(check_component("agent", bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_component("agent", &"a".repeat(129)).is_err());
    }
}
