//! `~/.pgpass` as libpq reads it: `hostname:port:database:username:password`
//! lines, `*` wildcards, `\:` and `\\` escapes, the first match wins, and the
//! file is ignored unless only its owner can read it (`PGPASSFILE` overrides).

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::environment::Environment;

/// What a `.pgpass` line is matched against.
pub struct Wanted<'a> {
    /// The host name, or `localhost` for a Unix socket (as libpq does).
    pub host: &'a str,
    pub port: u16,
    pub database: &'a str,
    pub user: &'a str,
}

/// The file libpq would read: `PGPASSFILE`, else `~/.pgpass` (from `env`).
pub fn default_path(env: &Environment) -> Option<PathBuf> {
    if let Some(file) = env.var_os("PGPASSFILE").filter(|f| !f.is_empty()) {
        return Some(PathBuf::from(file));
    }
    env.var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".pgpass"))
}

/// The password `path` holds for `wanted`. `Err` says why the file was
/// skipped (not private, unreadable) for the log; a missing file is `Ok(None)`.
pub fn lookup(path: &Path, wanted: &Wanted<'_>) -> Result<Option<String>, String> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if !meta.is_file() {
        return Err(format!("{} is not a plain file; ignored", path.display()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} has group or world access (mode {:o}); ignored as libpq does: chmod 0600 it",
            path.display(),
            meta.mode() & 0o777
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(find(&text, wanted))
}

/// The password of the first line of `text` matching `wanted`.
pub fn find(text: &str, wanted: &Wanted<'_>) -> Option<String> {
    let port = wanted.port.to_string();
    text.lines()
        .map(|line| line.trim_end_matches('\r'))
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .filter_map(fields)
        .find(|f| {
            matches(&f[0], wanted.host)
                && matches(&f[1], &port)
                && matches(&f[2], wanted.database)
                && matches(&f[3], wanted.user)
        })
        .map(|mut f| f.swap_remove(4).text)
}

/// A field matches when it is an unescaped `*` or equals the value.
fn matches(field: &Field, value: &str) -> bool {
    field.wildcard || field.text == value
}

struct Field {
    text: String,
    wildcard: bool,
}

/// The five fields of a line (unescaped), or `None` when it has fewer. As
/// in libpq, the password ends at its first unescaped colon.
fn fields(line: &str) -> Option<Vec<Field>> {
    let mut out = Vec::with_capacity(5);
    let mut text = String::new();
    let mut escaped_any = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if out.len() < 4 => {
                escaped_any = true;
                if let Some(next) = chars.next() {
                    text.push(next);
                }
            }
            ':' if out.len() < 4 => {
                let wildcard = text == "*" && !escaped_any;
                out.push(Field {
                    text: std::mem::take(&mut text),
                    wildcard,
                });
                escaped_any = false;
            }
            '\\' => {
                if let Some(next) = chars.next() {
                    text.push(next);
                }
            }
            ':' => break,
            c => text.push(c),
        }
    }
    if out.len() < 4 {
        return None;
    }
    out.push(Field {
        text,
        wildcard: false,
    });
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn want<'a>(host: &'a str, port: u16, database: &'a str, user: &'a str) -> Wanted<'a> {
        Wanted {
            host,
            port,
            database,
            user,
        }
    }

    #[test]
    fn the_first_matching_line_wins_with_wildcards() {
        let text = "# comment\n\
                    db.example.com:5432:agentx:me:first\n\
                    *:5432:agentx:me:second\n\
                    *:*:*:*:fallback\n";
        let got = |h, p, d, u| find(text, &want(h, p, d, u));
        assert_eq!(
            got("db.example.com", 5432, "agentx", "me").as_deref(),
            Some("first")
        );
        assert_eq!(
            got("other.host", 5432, "agentx", "me").as_deref(),
            Some("second")
        );
        assert_eq!(
            got("other.host", 5433, "agentx", "me").as_deref(),
            Some("fallback")
        );
        assert_eq!(find("a:1:b:c:pw\n", &want("a", 2, "b", "c")), None);
    }

    #[test]
    fn escapes_and_colons_in_passwords() {
        let text = "h\\:x:5432:d\\\\b:u:p\\:w:cut here\r\n";
        assert_eq!(
            find(text, &want("h:x", 5432, "d\\b", "u")).as_deref(),
            Some("p:w")
        );
        // An escaped star is a literal star, not a wildcard.
        assert_eq!(find("\\*:5432:d:u:pw\n", &want("h", 5432, "d", "u")), None);
        assert_eq!(
            find("\\*:5432:d:u:pw\n", &want("*", 5432, "d", "u")).as_deref(),
            Some("pw")
        );
        // Short lines are skipped.
        assert_eq!(
            find("h:5432:d\n*:*:*:*:ok\n", &want("h", 5432, "d", "u")).as_deref(),
            Some("ok")
        );
        assert_eq!(
            find("*:*:*:*:\n", &want("h", 1, "d", "u")).as_deref(),
            Some("")
        );
    }

    #[test]
    fn a_file_others_can_read_is_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("pgpass");
        std::fs::write(&path, "*:*:*:*:secret\n").unwrap();
        let wanted = want("h", 5432, "d", "u");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = lookup(&path, &wanted).unwrap_err();
        assert!(err.contains("0600") && !err.contains("secret"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(lookup(&path, &wanted).unwrap().as_deref(), Some("secret"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(lookup(&path, &wanted).unwrap().as_deref(), Some("secret"));
        assert_eq!(lookup(&tmp.path().join("none"), &wanted), Ok(None));
    }
}
