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

/// A usable remote URL: the connection settings and how to show them.
#[derive(Clone)]
pub struct RemoteUrl {
    pub config: tokio_postgres::Config,
    /// `postgresql://user@host:port/db`, never the password.
    pub shown: String,
    /// The password, only to scrub it from foreign error messages.
    secret: Option<String>,
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
}

impl Env {
    pub fn from_process() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v| !v.is_empty());
        Self {
            pgpassword: var("PGPASSWORD"),
            pgpass: pgpass::default_path(),
            sslmode: var("PGSSLMODE"),
            sslrootcert: var("PGSSLROOTCERT"),
        }
    }
}

impl RemoteUrl {
    /// Parses `url`. The password comes from the URL, else `PGPASSWORD`,
    /// else the password file; TLS as [`tls::decide`] says.
    pub fn parse(url: &str, env: Env) -> Result<Self, RemoteError> {
        let url = url.trim();
        let url_secret = password_in(url);
        let scrub = |text: String| match &url_secret {
            Some(p) if !p.is_empty() => text.replace(p.as_str(), "***"),
            _ => text,
        };
        if !(url.starts_with("postgresql://") || url.starts_with("postgres://")) {
            return Err(RemoteError::Config(format!(
                "remote_url {} must start with postgresql:// (AGENTX_REMOTE_URL or remote_url in config.toml)",
                scrub(format!("{url:?}"))
            )));
        }
        let (rest, ssl) = take_ssl_params(url);
        let mut config = tokio_postgres::Config::from_str(&rest).map_err(|e| {
            RemoteError::Config(format!(
                "remote_url {} is not a valid PostgreSQL URL: {}",
                redact_url(url),
                scrub(e.to_string())
            ))
        })?;
        fill_defaults(&mut config);
        if config.get_password().is_none()
            && let Some(p) = env
                .pgpassword
                .clone()
                .or_else(|| from_pgpass(&config, &env))
        {
            config.password(p);
        }
        let secret = config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned());
        config.application_name("agentd");
        config.connect_timeout(std::time::Duration::from_secs(5));
        let shown = shown(&config);
        let hosts = config.get_hosts();
        let local = hosts.iter().all(is_local);
        let unix = hosts.iter().all(|h| matches!(h, Host::Unix(_)));
        let sslmode = ssl.sslmode.or(env.sslmode);
        let roots = tls::root_file(ssl.sslrootcert.or(env.sslrootcert).as_deref());
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
            secret,
            tls,
        })
    }

    /// `text` with the password (if any) replaced by `***`.
    pub fn redact(&self, text: &str) -> String {
        match &self.secret {
            Some(p) if !p.is_empty() => text.replace(p.as_str(), "***"),
            _ => text.to_owned(),
        }
    }
}

/// User (`PGUSER`, `USER`, else `postgres`), database (the user's name)
/// and host (`localhost`) when the URL leaves them out, as libpq does.
fn fill_defaults(config: &mut tokio_postgres::Config) {
    if config.get_user().is_none() {
        let user = std::env::var("PGUSER")
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| "postgres".to_owned());
        config.user(user);
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
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect::<Vec<_>>()
        .join(",");
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("");
    format!("postgresql://{user}@{host}:{port}/{db}")
}

/// The password part of a `scheme://user:password@host…` URL, if any.
fn password_in(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    let password = userinfo.split_once(':')?.1;
    Some(password.to_owned())
}

/// `url` with any password replaced by `***` (for URLs that did not parse).
pub fn redact_url(url: &str) -> String {
    match password_in(url) {
        Some(p) if !p.is_empty() => url.replacen(&format!(":{p}@"), ":***@", 1),
        _ => url.to_owned(),
    }
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
                roots: tls::root_file(None),
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
    fn bad_urls_are_clear_and_redacted() {
        let err = parse("mysql://me:hunter2@host/db").unwrap_err().to_string();
        assert!(err.contains("postgresql://"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let err = parse("postgresql://me:hunter2@127.0.0.1:notaport/db")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert_eq!(
            redact_url("postgresql://a:b@c/d"),
            "postgresql://a:***@c/d".to_owned()
        );
        assert_eq!(percent_decode("a%2Fb%zz%"), "a/b%zz%");
    }
}
