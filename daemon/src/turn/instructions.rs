//! Project instructions: AGENTS.md (or the configured names) in the folder and
//! its parents up to the repository root, and the profile's own, sent on every request.

use std::io::Read as _;
use std::path::{Path, PathBuf};

/// The file name looked for when the user named none.
pub const DEFAULT_FILE: &str = "AGENTS.md";

/// Bytes read of one instructions file; the rest is left out, and said so.
const MAX_FILE: u64 = 64 << 10;

/// The instructions a request carries, the files they came from, and the
/// files found but not read (each with why).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instructions {
    pub text: String,
    pub files: Vec<PathBuf>,
    /// Bytes read of each of `files`, in order.
    pub sizes: Vec<u64>,
    pub skipped: Vec<String>,
}

/// The files that may apply to `folder`, outermost first, each with the
/// directory it must stay inside: the profile's own, then from the
/// repository root (the nearest parent with `.git`; the folder alone
/// outside a repository) down to the folder, so the nearest comes last
/// and reads as the most specific.
fn candidates(folder: &Path, profile: &Path, names: &[String]) -> Vec<(PathBuf, PathBuf)> {
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
    let mut out: Vec<(PathBuf, PathBuf)> = Vec::new();
    let places = std::iter::once((profile, profile)).chain(dirs.into_iter().map(|d| (d, root)));
    for (dir, inside) in places {
        for name in names {
            let path = dir.join(name);
            // Anything by that name (a link, a FIFO) is a candidate: what
            // it is decides whether it is read, and a skip is reported.
            if std::fs::symlink_metadata(&path).is_ok() && !out.iter().any(|(p, _)| *p == path) {
                out.push((path, inside.to_path_buf()));
            }
        }
    }
    out
}

/// `base` followed by every instructions file that applies to `folder`.
/// Only regular files whose real path lies inside the repository (or the
/// folder) or the profile are read: a link to `/proc/self/environ`, a
/// file outside, a FIFO or a device is skipped, and said so in `skipped`.
pub fn load(base: &str, folder: &Path, profile: &Path, names: &[String]) -> Instructions {
    let mut text = base.to_owned();
    let mut read = Vec::new();
    let mut sizes = Vec::new();
    let mut skipped = Vec::new();
    for (path, inside) in candidates(folder, profile, names) {
        let content = match read_inside(&path, &inside) {
            Ok(content) => content,
            Err(why) => {
                skipped.push(format!("{}: {why}", path.display()));
                continue;
            }
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
        sizes.push(content.len() as u64);
    }
    Instructions {
        text,
        files: read,
        sizes,
        skipped,
    }
}

/// How long a turn waits for the instruction files: a folder on a hung
/// network or FUSE mount would otherwise hold the turn (and a worker).
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(3);

/// [`load`] on the blocking pool, bounded by [`PATIENCE`]: when the files
/// do not answer in time the request goes without them and `skipped` says
/// why.
pub async fn load_bounded(
    base: &str,
    folder: &Path,
    profile: &Path,
    names: &[String],
) -> Instructions {
    let (b, f, p, n) = (
        base.to_owned(),
        folder.to_path_buf(),
        profile.to_path_buf(),
        names.to_vec(),
    );
    let loading = tokio::task::spawn_blocking(move || load(&b, &f, &p, &n));
    match tokio::time::timeout(PATIENCE, loading).await {
        Ok(Ok(loaded)) => loaded,
        Ok(Err(e)) => Instructions {
            text: base.to_owned(),
            skipped: vec![format!("instruction files: {e}")],
            ..Instructions::default()
        },
        Err(_) => Instructions {
            text: base.to_owned(),
            skipped: vec![format!(
                "{}: instruction files did not answer within {} s (a hung network mount?)",
                folder.display(),
                PATIENCE.as_secs()
            )],
            ..Instructions::default()
        },
    }
}

/// The text of `path` (at most [`MAX_FILE`] bytes, a cut said so) when it
/// is a regular file whose real path lies inside `inside`; else why not.
/// Checked on the real path before opening (nothing outside is opened)
/// and again on what was opened (a link swapped meanwhile is caught).
fn read_inside(path: &Path, inside: &Path) -> Result<String, String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let inside = std::fs::canonicalize(inside).map_err(|e| format!("cannot resolve: {e}"))?;
    let outside = |real: &Path| {
        format!(
            "not read: it resolves to {}, outside {}",
            real.display(),
            inside.display()
        )
    };
    let real = std::fs::canonicalize(path).map_err(|e| format!("cannot resolve: {e}"))?;
    if !real.starts_with(&inside) {
        return Err(outside(&real));
    }
    if !std::fs::metadata(&real).is_ok_and(|m| m.is_file()) {
        return Err("not read: not a regular file".to_owned());
    }
    // Non-blocking: a FIFO put there meanwhile cannot hold the turn up.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(&real)
        .map_err(|e| format!("cannot open: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err("not read: not a regular file".to_owned());
    }
    let opened = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&file)
    ))
    .map_err(|e| format!("cannot check: {e}"))?;
    if !opened.starts_with(&inside) {
        return Err(outside(&opened));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if meta.len() > MAX_FILE {
        text.push_str(&format!(
            "\n\n[… the rest of this file ({} bytes in all) is left out]",
            meta.len()
        ));
    }
    Ok(text)
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

    #[test]
    fn links_out_of_the_repository_and_into_proc_are_skipped_with_a_note() {
        let home = tempfile::tempdir().unwrap();
        let profile = home.path().join("profile");
        let repo = home.path().join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("docs")).unwrap();
        std::fs::create_dir_all(&profile).unwrap();
        std::fs::write(home.path().join("secret.txt"), "the user's secret").unwrap();
        std::fs::write(repo.join("docs/agents.md"), "inside, through a link").unwrap();
        let names: Vec<String> = ["AGENTS.md", "CLAUDE.md", "GEMINI.md", "OK.md"]
            .map(str::to_owned)
            .into();
        std::os::unix::fs::symlink("/proc/self/environ", repo.join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink("../secret.txt", repo.join("CLAUDE.md")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", repo.join("GEMINI.md")).unwrap();
        std::os::unix::fs::symlink("docs/agents.md", repo.join("OK.md")).unwrap();
        let got = load("base", &repo, &profile, &names);
        assert_eq!(got.files, vec![repo.join("OK.md")]);
        assert!(got.text.contains("inside, through a link"));
        assert!(!got.text.contains("the user's secret"));
        assert!(
            !got.text.contains("PATH="),
            "an environment reached the text"
        );
        assert_eq!(got.skipped.len(), 3, "{:?}", got.skipped);
        assert!(got.skipped[0].contains("outside"), "{:?}", got.skipped);
        assert!(got.skipped[1].contains("outside"), "{:?}", got.skipped);
    }
}
