//! Which conversations belong together across machines: a folder's
//! *project* is its git work tree's normalized `origin` plus the folder's
//! path inside the work tree, else the machine's hostname plus the
//! folder's absolute path. `.git/config` is read directly (no process).

use std::path::{Path, PathBuf};

use crate::environment::Environment;

/// This machine's name: `AGENTX_MACHINE` in `env`, else the kernel's hostname.
pub fn machine_name(env: &Environment) -> String {
    env.var("AGENTX_MACHINE")
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// The project key of absolute `folder` on `machine`.
pub fn project_key(folder: &Path, machine: &str) -> String {
    if let Some((root, origin)) = git_origin(folder) {
        let inside = folder
            .strip_prefix(&root)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        if inside.is_empty() {
            return origin;
        }
        return format!("{origin}:{inside}");
    }
    format!("{machine}:{}", folder.display())
}

/// The work tree containing `folder` and its normalized `origin` URL.
fn git_origin(folder: &Path) -> Option<(PathBuf, String)> {
    let mut dir = Some(folder);
    while let Some(d) = dir {
        let dot_git = d.join(".git");
        if dot_git.is_dir() {
            let url = origin_in(&std::fs::read_to_string(dot_git.join("config")).ok()?)?;
            return Some((d.to_path_buf(), normalize_origin(&url)?));
        }
        if dot_git.is_file() {
            // A linked work tree or submodule: `gitdir: PATH`; its config
            // is in the common directory when there is one.
            let text = std::fs::read_to_string(&dot_git).ok()?;
            let gitdir = text.trim().strip_prefix("gitdir:")?.trim();
            let gitdir = d.join(gitdir);
            let common = std::fs::read_to_string(gitdir.join("commondir"))
                .ok()
                .map(|c| gitdir.join(c.trim()))
                .unwrap_or(gitdir);
            let url = origin_in(&std::fs::read_to_string(common.join("config")).ok()?)?;
            return Some((d.to_path_buf(), normalize_origin(&url)?));
        }
        dir = d.parent();
    }
    None
}

/// `remote.origin.url` from git config text.
fn origin_in(config: &str) -> Option<String> {
    let mut in_origin = false;
    for line in config.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            let section: String = line
                .trim_start_matches('[')
                .trim_end_matches(']')
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            in_origin = section.eq_ignore_ascii_case("remote \"origin\"");
            continue;
        }
        if !in_origin {
            continue;
        }
        if let Some((key, value)) = line.split_once('=')
            && key.trim().eq_ignore_ascii_case("url")
        {
            let value = value.trim().trim_matches('"').trim();
            if !value.is_empty() {
                return Some(value.to_owned());
            }
        }
    }
    None
}

/// `git@github.com:acme/app.git`, `https://github.com/acme/app`,
/// `ssh://git@github.com:22/acme/app.git` → `github.com/acme/app`.
/// Scheme, user, port and a trailing `.git` or `/` go; the host is
/// lowercased. A local path origin stays a path.
pub fn normalize_origin(url: &str) -> Option<String> {
    let url = url.trim();
    if url.is_empty() {
        return None;
    }
    let (host_and_path, scp) = match url.split_once("://") {
        Some((scheme, rest)) if scheme != "file" => (rest, false),
        Some((_, rest)) => return Some(rest.trim_end_matches('/').to_owned()),
        None if url.starts_with('/') || url.starts_with('.') => {
            return Some(url.trim_end_matches('/').to_owned());
        }
        None => (url, true),
    };
    let (host, path) = if scp {
        // scp-like: [user@]host:path
        let (host, path) = host_and_path.split_once(':')?;
        (host, path)
    } else {
        match host_and_path.split_once('/') {
            Some((host, path)) => (host, path),
            None => (host_and_path, ""),
        }
    };
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = if host.starts_with('[') {
        host.split_once(']')
            .map_or(host, |(h, _)| h)
            .trim_start_matches('[')
    } else {
        host.split_once(':').map_or(host, |(h, _)| h)
    };
    let path = path.trim_matches('/');
    let path = path
        .strip_suffix(".git")
        .unwrap_or(path)
        .trim_end_matches('/');
    if host.is_empty() {
        return None;
    }
    let host = host.to_ascii_lowercase();
    if path.is_empty() {
        return Some(host);
    }
    Some(format!("{host}/{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_normalize_to_host_and_path() {
        for url in [
            "git@github.com:acme/app.git",
            "https://github.com/acme/app",
            "https://github.com/acme/app.git",
            "https://user:token@GitHub.com/acme/app/",
            "ssh://git@github.com:22/acme/app.git",
            "git://github.com/acme/app",
            "http://github.com:80/acme/app.git",
        ] {
            assert_eq!(
                normalize_origin(url).as_deref(),
                Some("github.com/acme/app"),
                "{url}"
            );
        }
        assert_eq!(
            normalize_origin("/srv/git/app.git").as_deref(),
            Some("/srv/git/app.git")
        );
        assert_eq!(normalize_origin(""), None);
    }

    #[test]
    fn config_text_gives_the_origin_url() {
        let config = "[core]\n\tbare = false\n[remote \"upstream\"]\n\turl = git@x:y/z\n\
                      [remote \"origin\"]\n\turl = git@github.com:acme/app.git\n\tfetch = +refs/heads/*\n";
        assert_eq!(
            origin_in(config).as_deref(),
            Some("git@github.com:acme/app.git")
        );
        assert_eq!(origin_in("[core]\n\tbare = false\n"), None);
    }

    #[test]
    fn project_is_origin_plus_path_in_the_work_tree_else_host_and_path() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        let b = tmp.path().join("elsewhere/b");
        for (root, url) in [
            (&a, "git@github.com:acme/app.git"),
            (&b, "https://github.com/acme/app"),
        ] {
            std::fs::create_dir_all(root.join(".git")).unwrap();
            std::fs::create_dir_all(root.join("sub/dir")).unwrap();
            std::fs::write(
                root.join(".git/config"),
                format!("[remote \"origin\"]\n\turl = {url}\n"),
            )
            .unwrap();
        }
        assert_eq!(project_key(&a, "m1"), "github.com/acme/app");
        assert_eq!(project_key(&b, "m2"), "github.com/acme/app");
        assert_eq!(
            project_key(&a.join("sub/dir"), "m1"),
            project_key(&b.join("sub/dir"), "m2")
        );
        assert_eq!(
            project_key(&a.join("sub/dir"), "m1"),
            "github.com/acme/app:sub/dir"
        );
        let plain = tmp.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        assert_eq!(project_key(&plain, "m1"), format!("m1:{}", plain.display()));
    }
}
