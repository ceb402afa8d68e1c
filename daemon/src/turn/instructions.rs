//! Project instructions: AGENTS.md (or the configured names) in the folder and
//! its parents up to the repository root, and the profile's own, sent on every request.

use std::io::Read as _;
use std::path::{Path, PathBuf};

/// The file name looked for when the user named none.
pub const DEFAULT_FILE: &str = "AGENTS.md";

/// Bytes read of one instructions file; the rest is left out, and said so.
const MAX_FILE: u64 = 64 << 10;

/// The instructions a request carries and the files they came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instructions {
    pub text: String,
    pub files: Vec<PathBuf>,
}

/// The files that apply to `folder`, outermost first: the profile's own,
/// then from the repository root (the nearest parent with `.git`; the
/// folder alone outside a repository) down to the folder, so the nearest
/// comes last and reads as the most specific.
pub fn files(folder: &Path, profile: &Path, names: &[String]) -> Vec<PathBuf> {
    let default = [DEFAULT_FILE.to_owned()];
    let names = if names.is_empty() {
        &default[..]
    } else {
        names
    };
    let root = folder
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(folder);
    let mut dirs: Vec<&Path> = folder
        .ancestors()
        .take_while(|dir| dir.starts_with(root))
        .collect();
    dirs.reverse();
    let mut out = Vec::new();
    for dir in std::iter::once(profile).chain(dirs) {
        for name in names {
            let path = dir.join(name);
            // Regular files only: a FIFO or device named AGENTS.md is not read.
            if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) && !out.contains(&path) {
                out.push(path);
            }
        }
    }
    out
}

/// `base` followed by every instructions file that applies to `folder`.
pub fn load(base: &str, folder: &Path, profile: &Path, names: &[String]) -> Instructions {
    let files = files(folder, profile, names);
    let mut text = base.to_owned();
    let mut read = Vec::new();
    for path in files {
        let Some(content) = read_bounded(&path) else {
            continue;
        };
        if read.is_empty() {
            text.push_str(
                "\n\n# Project instructions\n\nThe user keeps these instructions for this work; \
                 follow them (the later, nearer ones win where they disagree).",
            );
        }
        text.push_str(&format!(
            "\n\n## {}\n\n{}",
            path.display(),
            content.trim_end()
        ));
        read.push(path);
    }
    Instructions { text, files: read }
}

/// The file's text (at most [`MAX_FILE`] bytes, a cut said so), or `None`
/// when it cannot be read.
fn read_bounded(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    let mut bytes = Vec::new();
    file.take(MAX_FILE).read_to_end(&mut bytes).ok()?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if size > MAX_FILE {
        text.push_str(&format!(
            "\n\n[… the rest of this file ({} bytes in all) is left out]",
            size
        ));
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profiles_then_the_repository_roots_down_to_the_folders() {
        let home = tempfile::tempdir().unwrap();
        let profile = home.path().join("profile");
        let repo = home.path().join("repo");
        let sub = repo.join("crates/x");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir_all(&profile).unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::write(home.path().join("AGENTS.md"), "outside the repository").unwrap();
        std::fs::write(profile.join("AGENTS.md"), "everywhere").unwrap();
        std::fs::write(repo.join("AGENTS.md"), "the repo").unwrap();
        std::fs::write(sub.join("AGENTS.md"), "this crate").unwrap();
        let got = load("base", &sub, &profile, &[]);
        assert_eq!(
            got.files,
            vec![
                profile.join("AGENTS.md"),
                repo.join("AGENTS.md"),
                sub.join("AGENTS.md")
            ]
        );
        assert!(got.text.starts_with("base\n\n# Project instructions"));
        let (a, b, c) = (
            got.text.find("everywhere").unwrap(),
            got.text.find("the repo").unwrap(),
            got.text.find("this crate").unwrap(),
        );
        assert!(a < b && b < c);
        assert!(!got.text.contains("outside the repository"));
    }

    #[test]
    fn other_names_fifos_and_huge_files() {
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("p");
        std::fs::create_dir_all(&profile).unwrap();
        std::fs::write(dir.path().join("CLAUDE.md"), "x".repeat(100 << 10)).unwrap();
        nix::unistd::mkfifo(&dir.path().join("AGENTS.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let names = vec!["AGENTS.md".to_owned(), "CLAUDE.md".to_owned()];
        let got = load("", dir.path(), &profile, &names);
        assert_eq!(got.files, vec![dir.path().join("CLAUDE.md")]);
        assert!(got.text.contains("is left out"));
        assert!(got.text.len() < 70 << 10);
        assert_eq!(load("base", dir.path(), &profile, &[]).text, "base");
    }
}
