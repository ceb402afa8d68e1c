//! `remote_url`: parsed with tokio-postgres's libpq-style parser, the
//! password taken from the URL, `PGPASSWORD` or `~/.pgpass`, TLS decided,
//! and a redacted form for every message and log line.

use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr as _;

use tokio_postgres::config::{Host, SslMode};

use super::RemoteError;
use super::pgpass;
use super::tls::{self, Tls};
use crate::environment::Environment;

/// A usable remote URL: the connection settings and how to show them.
#[derive(Clone)]
pub struct RemoteUrl {
    pub config: tokio_postgres::Config,
    /// `postgresql://user@host:port/db`, never the password.
    pub shown: String,
    /// The password and every secret written in the URL (as written and
    /// decoded), only to scrub them from foreign error messages.
    secrets: Vec<String>,
    /// Whether and how connections use TLS.
    pub tls: Tls,
}

impl std::fmt::Debug for RemoteUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// What libpq would also read from the environment.
#[derive(Default)]
pub struct Env {
    pub pgpassword: Option<String>,
    /// `PGPASSFILE`, else `~/.pgpass`.
    pub pgpass: Option<PathBuf>,
    pub sslmode: Option<String>,
    pub sslrootcert: Option<String>,
    /// The user when the URL names none: `PGUSER`, else `USER`.
    pub user: Option<String>,
    /// `HOME`, where `~/.postgresql/root.crt` is looked for.
    pub home: Option<PathBuf>,
}

impl Env {
    /// What `env` (agentd's environment) says of these.
    pub fn from_environment(env: &Environment) -> Self {
        Self {
            pgpassword: env.non_empty("PGPASSWORD"),
            pgpass: pgpass::default_path(env),
            sslmode: env.non_empty("PGSSLMODE"),
            sslrootcert: env.non_empty("PGSSLROOTCERT"),
            user: env.non_empty("PGUSER").or_else(|| env.non_empty("USER")),
            home: env.path("HOME"),
        }
    }
}

impl RemoteUrl {
    /// Parses `url`. The password comes from the URL, else `PGPASSWORD`,
    /// else the password file; TLS as [`tls::decide`] says.
    pub fn parse(url: &str, env: Env) -> Result<Self, RemoteError> {
        let url = url.trim();
        let mut secrets = secrets_in(url);
        // A URL that is not used is never shown, not even redacted: where
        // its secrets are cannot be told for sure.
        if !(url.starts_with("postgresql://") || url.starts_with("postgres://")) {
            return Err(RemoteError::Config(
                "remote_url must start with postgresql:// (AGENTX_REMOTE_URL or remote_url in config.toml; not shown, as it may hold a password)".to_owned(),
            ));
        }
        let (rest, ssl) = take_ssl_params(url);
        let mut config = tokio_postgres::Config::from_str(&rest).map_err(|e| {
            RemoteError::Config(format!(
                "remote_url is not a valid PostgreSQL URL (not shown, as it may hold a password): {}",
                scrub(&secrets, &e.to_string())
            ))
        })?;
        fill_defaults(&mut config, env.user.as_deref());
        if config.get_password().is_none()
            && let Some(p) = env
                .pgpassword
                .clone()
                .or_else(|| from_pgpass(&config, &env))
        {
            config.password(p);
        }
        if let Some(p) = config.get_password() {
            secrets.push(String::from_utf8_lossy(p).into_owned());
        }
        // Longest first, so that no part of one is left by a shorter one.
        secrets.retain(|s| !s.is_empty());
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        config.application_name("agentd");
        config.connect_timeout(std::time::Duration::from_secs(5));
        let shown = shown(&config);
        let hosts = config.get_hosts();
        let local = hosts.iter().all(is_local);
        let unix = hosts.iter().all(|h| matches!(h, Host::Unix(_)));
        let sslmode = ssl.sslmode.or(env.sslmode);
        let roots = tls::root_file(
            ssl.sslrootcert.or(env.sslrootcert).as_deref(),
            env.home.as_deref(),
        );
        let tls = tls::decide(sslmode.as_deref(), local, unix, roots)
            .map_err(|e| RemoteError::Config(format!("remote_url {shown}: {e}")))?;
        config.ssl_mode(if tls == Tls::Off {
            SslMode::Disable
        } else {
            SslMode::Require
        });
        Ok(Self {
            config,
            shown,
            secrets,
            tls,
        })
    }

    /// `text` with the password and every other secret of the URL replaced
    /// by `***`, and any URL-style secret in it too ([`redact_text`]).
    pub fn redact(&self, text: &str) -> String {
        scrub(&self.secrets, text)
    }
}

/// `text` without `secrets` (each replaced by `***`) nor any secret written
/// URL- or libpq-style ([`redact_text`]).
fn scrub(secrets: &[String], text: &str) -> String {
    let mut text = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        text = text.replace(secret.as_str(), "***");
    }
    redact_text(&text)
}

/// User (`user`: `PGUSER` or `USER`, else `postgres`), database (the
/// user's name) and host (`localhost`) when the URL leaves them out, as
/// libpq does.
fn fill_defaults(config: &mut tokio_postgres::Config, user: Option<&str>) {
    if config.get_user().is_none() {
        config.user(user.unwrap_or("postgres"));
    }
    if config.get_dbname().is_none()
        && let Some(user) = config.get_user().map(str::to_owned)
    {
        config.dbname(user);
    }
    if config.get_hosts().is_empty() {
        config.host("localhost");
    }
}

/// The password file's entry for the first host (a Unix socket matches as
/// `localhost`, as in libpq). A file not used is logged, never fatal.
fn from_pgpass(config: &tokio_postgres::Config, env: &Env) -> Option<String> {
    let path = env.pgpass.as_ref()?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.as_str(),
        _ => "localhost",
    };
    let wanted = pgpass::Wanted {
        host,
        port: config.get_ports().first().copied().unwrap_or(5432),
        database: config.get_dbname().unwrap_or(""),
        user: config.get_user().unwrap_or(""),
    };
    match pgpass::lookup(path, &wanted) {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!("remote store: password file not used: {e}");
            None
        }
    }
}

/// `sslmode` and `sslrootcert` from the URL's query.
#[derive(Default)]
struct SslParams {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
}

/// `url` without `sslmode` and `sslrootcert` (tokio-postgres knows neither
/// `verify-ca`/`verify-full` nor root files; agentx handles both).
fn take_ssl_params(url: &str) -> (String, SslParams) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), SslParams::default());
    };
    let mut ssl = SslParams::default();
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some(("sslmode", v)) => {
                ssl.sslmode = Some(percent_decode(v));
                false
            }
            Some(("sslrootcert", v)) => {
                ssl.sslrootcert = Some(percent_decode(v));
                false
            }
            _ => true,
        })
        .collect();
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, ssl)
}

/// `%XX` escapes decoded (a malformed one is kept as it is).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Loopback addresses, `localhost` and Unix sockets.
fn is_local(host: &Host) -> bool {
    match host {
        Host::Unix(_) => true,
        Host::Tcp(name) => {
            let name = name.trim_start_matches('[').trim_end_matches(']');
            name.eq_ignore_ascii_case("localhost")
                || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
    }
}

fn shown(config: &tokio_postgres::Config) -> String {
    let user = config.get_user().unwrap_or("");
    let host = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            // An IPv6 literal in brackets, as in the URL.
            Host::Tcp(name) if name.contains(':') => format!("[{name}]"),
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect::<Vec<_>>()
        .join(",");
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("");
    format!("postgresql://{user}@{host}:{port}/{db}")
}

/// Parameters whose value is a secret, as libpq names them.
const SECRET_PARAMS: [&str; 2] = ["password", "sslpassword"];

/// Where secrets are written in `text` (byte ranges, in order): the password
/// of each `scheme://user:password@host` and the value of each `password`
/// or `sslpassword` parameter, in a URL's query (`?password=…&…`) or a
/// libpq key=value string (`password = '…'`).
fn secret_spans(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let ends_authority =
        |c: char| c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | '`' | '<' | '>');
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let start = from + found + 3;
        let end = text[start..]
            .find(ends_authority)
            .map_or(text.len(), |e| start + e);
        let authority = &text[start..end];
        if let Some(at) = authority.rfind('@')
            && let Some(colon) = authority[..at].find(':')
            && colon + 1 < at
        {
            spans.push((start + colon + 1, start + at));
        }
        from = start;
    }
    // Byte positions are the same in the lowercase copy (ASCII only).
    let lower = text.to_ascii_lowercase();
    let ends_value =
        |b: u8| b.is_ascii_whitespace() || matches!(b, b'&' | b'#' | b'"' | b'\'' | b'`');
    for key in SECRET_PARAMS {
        let mut from = 0;
        while let Some(found) = lower[from..].find(key) {
            let k = from + found;
            from = k + key.len();
            // A word of its own (`sslpassword` is not `password`).
            if k > 0 && (bytes[k - 1].is_ascii_alphanumeric() || bytes[k - 1] == b'_') {
                continue;
            }
            let mut i = from;
            while bytes.get(i) == Some(&b' ') {
                i += 1;
            }
            if bytes.get(i) != Some(&b'=') {
                continue;
            }
            i += 1;
            while bytes.get(i) == Some(&b' ') {
                i += 1;
            }
            let start = i;
            if bytes.get(i) == Some(&b'\'') {
                // libpq quoting: up to the closing quote, `\'` escaped.
                i += 1;
                while i < bytes.len() && bytes[i] != b'\'' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
            } else {
                while i < bytes.len() && !ends_value(bytes[i]) {
                    i += 1;
                }
            }
            if i > start {
                spans.push((start, i));
            }
        }
    }
    spans.sort_unstable();
    spans
}

/// The secrets written in `url`, as written and percent-decoded.
fn secrets_in(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    for (start, end) in secret_spans(url) {
        let Some(raw) = url.get(start..end) else {
            continue;
        };
        let raw = raw.trim_matches('\'');
        secrets.push(raw.to_owned());
        secrets.push(percent_decode(raw));
    }
    secrets
}

/// `text` with every secret written in it URL- or libpq-style (see
/// [`secret_spans`]) replaced by `***`: for messages that may quote a URL.
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for (start, end) in secret_spans(text) {
        if end <= pos {
            continue;
        }
        let start = start.max(pos);
        out.push_str(text.get(pos..start).unwrap_or_default());
        out.push_str("***");
        pos = end;
    }
    out.push_str(text.get(pos..).unwrap_or_default());
    out
}

/// `text` with the whole user-info of every URL in it (`scheme://user:pass@`
/// or `scheme://token@`) replaced by `***`, and every other URL-style
/// secret too ([`redact_text`]): for model-server and proxy URLs, whose
/// user name may itself be a key.
pub fn redact_userinfo(text: &str) -> String {
    let ends_authority = |c: char| {
        c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | '`' | '<' | '>' | ')')
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(found) = rest.find("://") {
        let start = found + 3;
        let end = rest[start..]
            .find(ends_authority)
            .map_or(rest.len(), |e| start + e);
        out.push_str(&rest[..start]);
        match rest[start..end].rfind('@') {
            Some(at) => {
                out.push_str("***");
                out.push_str(&rest[start + at..end]);
            }
            None => out.push_str(&rest[start..end]),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    redact_text(&out)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::remote::tls::Verify;

    fn parse(url: &str) -> Result<RemoteUrl, RemoteError> {
        RemoteUrl::parse(url, Env::default())
    }

    #[test]
    fn loopback_urls_parse_and_the_password_is_never_shown() {
        let url = parse("postgresql://me:hunter2@127.0.0.1:5433/agentx").unwrap();
        assert_eq!(url.shown, "postgresql://me@127.0.0.1:5433/agentx");
        assert_eq!(url.config.get_password(), Some(&b"hunter2"[..]));
        assert_eq!(url.redact("auth hunter2 failed"), "auth *** failed");
        assert!(!format!("{url:?}").contains("hunter2"));
        assert_eq!(url.tls, Tls::Off);
        let env = Env {
            pgpassword: Some("pw".into()),
            ..Env::default()
        };
        let url = RemoteUrl::parse("postgres://me@localhost/db", env).unwrap();
        assert_eq!(url.config.get_password(), Some(&b"pw"[..]));
        assert!(parse("postgresql://me@[::1]:5432/db").is_ok());
        let url = parse("postgresql://me@%2Ftmp%2Fpg/db").unwrap();
        assert!(matches!(url.config.get_hosts()[0], Host::Unix(_)));
    }

    #[test]
    fn passwords_come_from_the_url_then_pgpassword_then_the_password_file() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("pgpass");
        std::fs::write(
            &file,
            "db.example.com:5432:agentx:me:from-file\\:x\\\\y\nlocalhost:*:*:sock:socket-pw\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let env = |pgpassword: Option<&str>| Env {
            pgpassword: pgpassword.map(str::to_owned),
            pgpass: Some(file.clone()),
            ..Env::default()
        };
        let password = |url: &str, e| {
            RemoteUrl::parse(url, e)
                .unwrap()
                .config
                .get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        };
        let far = "postgresql://me@db.example.com/agentx";
        assert_eq!(password(far, env(None)).as_deref(), Some("from-file:x\\y"));
        assert_eq!(password(far, env(Some("env"))).as_deref(), Some("env"));
        let with = "postgresql://me:inline@db.example.com/agentx";
        assert_eq!(password(with, env(Some("env"))).as_deref(), Some("inline"));
        // Another database, user or port: no entry.
        assert_eq!(
            password("postgresql://me@db.example.com/other", env(None)),
            None
        );
        assert_eq!(
            password("postgresql://me@db.example.com:5433/agentx", env(None)),
            None
        );
        // A Unix socket matches as localhost; the password is redacted too.
        let url = RemoteUrl::parse("postgresql://sock@%2Ftmp%2Fpg/db", env(None)).unwrap();
        assert_eq!(url.config.get_password(), Some(&b"socket-pw"[..]));
        assert_eq!(url.redact("x socket-pw y"), "x *** y");
        // A file others can read is not used.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(password(far, env(None)), None);
    }

    #[test]
    fn tls_is_used_for_other_hosts_unless_plaintext_is_asked_for() {
        let url = parse("postgresql://me:hunter2@db.example.com/agentx").unwrap();
        assert_eq!(
            url.tls,
            Tls::On {
                verify: Verify::Full,
                roots: tls::root_file(None, None),
            }
        );
        assert_eq!(url.config.get_ssl_mode(), SslMode::Require);
        let plain = parse("postgresql://me@db.example.com/agentx?sslmode=disable").unwrap();
        assert_eq!(plain.tls, Tls::Off);
        assert_eq!(plain.config.get_ssl_mode(), SslMode::Disable);
        // libpq's modes tokio-postgres does not know, with a root file.
        let url = parse(
            "postgresql://me@127.0.0.1/x?sslmode=verify-ca&sslrootcert=%2Fetc%2Fca.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(
            url.tls,
            Tls::On {
                verify: Verify::Ca,
                roots: Some(PathBuf::from("/etc/ca.pem")),
            }
        );
        let env = Env {
            sslmode: Some("require".into()),
            sslrootcert: Some("system".into()),
            ..Env::default()
        };
        let url = RemoteUrl::parse("postgresql://me@127.0.0.1/x", env).unwrap();
        assert_eq!(
            url.tls,
            Tls::On {
                verify: Verify::None,
                roots: None,
            }
        );
        let err = parse("postgresql://me:hunter2@h/x?sslmode=bogus")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sslmode=bogus") && !err.contains("hunter2"),
            "{err}"
        );
    }

    #[test]
    fn only_loopback_ip_literals_go_plain_when_the_url_does_not_say() {
        // An IP literal is not local because it is a literal.
        let verified = Tls::On {
            verify: Verify::Full,
            roots: tls::root_file(None, None),
        };
        for host in [
            "192.0.2.7",
            "10.1.2.3",
            "[2001:db8::1]",
            "[fd00::2]",
            "db.example.com",
        ] {
            let url = parse(&format!("postgresql://me@{host}:5432/db")).unwrap();
            assert_eq!(url.tls, verified, "{host}");
            assert_eq!(url.config.get_ssl_mode(), SslMode::Require, "{host}");
            assert_eq!(url.shown, format!("postgresql://me@{host}:5432/db"));
        }
        for host in ["127.0.0.1", "127.9.8.7", "[::1]", "localhost", "LocalHost"] {
            let url = parse(&format!("postgresql://me@{host}:5432/db")).unwrap();
            assert_eq!(url.tls, Tls::Off, "{host}");
            assert_eq!(url.config.get_ssl_mode(), SslMode::Disable, "{host}");
        }
        // Several hosts: plain only when every one is local.
        let url = parse("postgresql://me@127.0.0.1:5432,192.0.2.7:5432/db").unwrap();
        assert_eq!(url.tls, verified);
    }

    #[test]
    fn bad_urls_are_clear_and_redacted() {
        let err = parse("mysql://me:hunter2@host/db").unwrap_err().to_string();
        assert!(err.contains("postgresql://"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let err = parse("postgresql://me:hunter2@127.0.0.1:notaport/db")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert_eq!(
            redact_text("postgresql://a:b@c/d"),
            "postgresql://a:***@c/d".to_owned()
        );
        assert_eq!(percent_decode("a%2Fb%zz%"), "a/b%zz%");
    }

    #[test]
    fn libpq_variables_come_from_agentds_environment_as_read() {
        let tmp = tempfile::tempdir().unwrap();
        let roots = tmp.path().join(".postgresql").join("root.crt");
        std::fs::create_dir_all(roots.parent().unwrap()).unwrap();
        std::fs::write(&roots, "").unwrap();
        let read = |pairs: &[(&str, &std::ffi::OsStr)]| {
            let env = Environment::from_pairs(pairs.iter().copied());
            RemoteUrl::parse("postgresql://db.example.com", Env::from_environment(&env)).unwrap()
        };
        let home = tmp.path().as_os_str();
        // The user (and so the database): PGUSER, else USER, else postgres.
        let url = read(&[("USER", "alice".as_ref()), ("HOME", home)]);
        assert_eq!(url.config.get_user(), Some("alice"));
        assert_eq!(url.config.get_dbname(), Some("alice"));
        // ~/.postgresql/root.crt under the environment's HOME.
        assert_eq!(
            url.tls,
            Tls::On {
                verify: Verify::Full,
                roots: Some(roots.clone()),
            }
        );
        let url = read(&[("PGUSER", "bob".as_ref()), ("USER", "alice".as_ref())]);
        assert_eq!(url.config.get_user(), Some("bob"));
        assert_eq!(read(&[]).config.get_user(), Some("postgres"));
        // PGPASSFILE, else ~/.pgpass under HOME.
        let env = Environment::from_pairs([("HOME", "/h"), ("PGPASSWORD", "")]);
        let libpq = Env::from_environment(&env);
        assert_eq!(libpq.pgpass, Some(PathBuf::from("/h/.pgpass")));
        assert_eq!(libpq.pgpassword, None);
        let env = Environment::from_pairs([("HOME", "/h"), ("PGPASSFILE", "/p")]);
        assert_eq!(
            Env::from_environment(&env).pgpass,
            Some(PathBuf::from("/p"))
        );
    }

    #[test]
    fn user_info_of_any_url_is_redacted_whole() {
        assert_eq!(
            redact_userinfo(
                "cannot reach http://u:KEY@host/v1 through the proxy http://user:pass@p:3128: \
                 (url (https://sk-token@api.example/v1/responses)) and http://plain/v1"
            ),
            "cannot reach http://***@host/v1 through the proxy http://***@p:3128: \
             (url (https://***@api.example/v1/responses)) and http://plain/v1"
        );
        assert_eq!(redact_userinfo("x://a@"), "x://***@");
        assert_eq!(redact_userinfo("no url here"), "no url here");
    }

    #[test]
    fn every_form_of_a_secret_in_a_url_is_redacted() {
        assert_eq!(
            redact_text("x postgresql://u@h/d?password=s1&sslmode=require&sslpassword=s2#f y"),
            "x postgresql://u@h/d?password=***&sslmode=require&sslpassword=***#f y"
        );
        assert_eq!(
            redact_text("host=h password = 'a b\\' c' user=u PASSWORD=z"),
            "host=h password = *** user=u PASSWORD=***"
        );
        assert_eq!(
            redact_text("\"postgres://u:p:q@h:1/d\" and password authentication failed"),
            "\"postgres://u:***@h:1/d\" and password authentication failed"
        );
        // The password parameter is used, never shown, scrubbed as written
        // and decoded.
        let url = parse("postgresql://me@127.0.0.1/x?password=p%40ss&sslmode=disable").unwrap();
        assert_eq!(url.config.get_password(), Some(&b"p@ss"[..]));
        assert_eq!(url.redact("a p@ss b p%40ss"), "a *** b ***");
        assert_eq!(url.shown, "postgresql://me@127.0.0.1:5432/x");
        // A URL that is not used is not shown at all.
        for bad in [
            "postgresql://me:hunter2@h/x?sslpassword=k3y&bogus=1",
            "postgresql://me@h/x?bogus=hunter2",
            "host=h password=hunter2",
            "postgresql://me:hunter2@h:notaport/x",
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(
                !err.contains("hunter2") && !err.contains("k3y") && !err.contains("me@"),
                "{err}"
            );
        }
    }
}
