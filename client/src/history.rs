//! The REPL's prompt history across sessions: `<profile>/history` (0600), the last
//! 10,000 lines; a line starting with a space is never kept, as in shells.
//!
//! `AGENTX_HISTORY=off` keeps no history on disk (the session still has its
//! own, in memory). A line holding a newline (a multi-line paste) is not
//! kept either: it is the likeliest to carry a pasted secret.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The most lines kept.
pub const MAX_LINES: usize = 10_000;

/// Where this REPL keeps its history (`None`: nowhere).
pub struct History {
    path: Option<PathBuf>,
}

impl History {
    /// The history of the profile at `profile_dir`, unless turned off.
    pub fn of_profile(profile_dir: &Path) -> Self {
        let off = std::env::var("AGENTX_HISTORY").is_ok_and(|v| {
            matches!(
                v.trim().to_lowercase().as_str(),
                "off" | "0" | "false" | "no"
            )
        });
        Self {
            path: (!off).then(|| profile_dir.join("history")),
        }
    }

    /// No history on disk.
    pub fn none() -> Self {
        Self { path: None }
    }

    /// Whether `line` may be kept at all.
    pub fn keeps(line: &str) -> bool {
        !line.trim().is_empty() && !line.starts_with(' ') && !line.contains(['\n', '\r'])
    }

    /// The kept lines, oldest first; a file grown past [`MAX_LINES`] is cut
    /// back to its newest lines first.
    pub fn load(&self) -> Vec<String> {
        let Some(path) = &self.path else {
            return Vec::new();
        };
        let Ok(text) = std::fs::read_to_string(path) else {
            return Vec::new();
        };
        let lines: Vec<String> = text
            .lines()
            .filter(|l| Self::keeps(l))
            .map(str::to_owned)
            .collect();
        if lines.len() <= MAX_LINES {
            return lines;
        }
        let newest = lines[lines.len() - MAX_LINES..].to_vec();
        if let Err(e) = rewrite(path, &newest) {
            warn(path, &e);
        }
        newest
    }

    /// Appends `line` when it may be kept; a failure only costs the line.
    pub fn append(&self, line: &str) {
        let Some(path) = &self.path else {
            return;
        };
        if !Self::keeps(line) {
            return;
        }
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = written {
            warn(path, &e);
        }
    }
}

/// Replaces the file with `lines`, atomically, mode 0600.
fn rewrite(path: &Path, lines: &[String]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    let mut text = String::new();
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

fn warn(path: &Path, e: &std::io::Error) {
    eprintln!("agentx: prompt history {}: {e}", path.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_with_a_leading_space_or_a_newline_are_never_kept() {
        assert!(History::keeps("fix the bug"));
        assert!(!History::keeps(" sk-secret"));
        assert!(!History::keeps("a\nb"));
        assert!(!History::keeps("   "));
    }

    #[test]
    fn the_file_is_private_and_bounded_to_its_newest_lines() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let history = History {
            path: Some(dir.path().join("history")),
        };
        history.append("one");
        history.append(" secret");
        history.append("two");
        let path = dir.path().join("history");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        for n in 0..MAX_LINES + 5 {
            history.append(&format!("line {n}"));
        }
        let loaded = history.load();
        assert_eq!(loaded.len(), MAX_LINES);
        assert_eq!(loaded.last().unwrap(), &format!("line {}", MAX_LINES + 4));
        let on_disk = std::fs::read_to_string(&path).unwrap();
        assert_eq!(on_disk.lines().count(), MAX_LINES);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
