//! `remote_url`: parsed with tokio-postgres's libpq-style parser, the
//! password taken from the URL or `PGPASSWORD`, and a redacted form for
//! every message and log line.

use std::net::IpAddr;
use std::str::FromStr as _;

use tokio_postgres::config::{Host, SslMode};

use super::RemoteError;

/// A usable remote URL: the connection settings and how to show them.
#[derive(Clone)]
pub struct RemoteUrl {
    pub config: tokio_postgres::Config,
    /// `postgresql://user@host:port/db`, never the password.
    pub shown: String,
    /// The password, only to scrub it from foreign error messages.
    secret: Option<String>,
}

impl std::fmt::Debug for RemoteUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl RemoteUrl {
    /// Parses `url`; `pgpassword` is `PGPASSWORD` (used when the URL has no
    /// password). Plaintext is refused for anything but loopback or a Unix
    /// socket unless the URL says `sslmode=disable`: TLS is not built yet.
    pub fn parse(url: &str, pgpassword: Option<String>) -> Result<Self, RemoteError> {
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
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| {
            RemoteError::Config(format!(
                "remote_url {} is not a valid PostgreSQL URL: {}",
                redact_url(url),
                scrub(e.to_string())
            ))
        })?;
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
        if config.get_password().is_none()
            && let Some(p) = pgpassword.filter(|p| !p.is_empty())
        {
            config.password(p);
        }
        let secret = config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned());
        config.application_name("agentd");
        config.connect_timeout(std::time::Duration::from_secs(5));
        let shown = shown(&config);
        let plaintext_ok =
            config.get_ssl_mode() == SslMode::Disable || config.get_hosts().iter().all(is_local);
        if !plaintext_ok {
            return Err(RemoteError::Config(format!(
                "remote_url {shown}: TLS to a non-loopback server is not built yet; \
                 use a loopback host or Unix socket, or add sslmode=disable to send plaintext deliberately"
            )));
        }
        if config.get_ssl_mode() == SslMode::Require {
            return Err(RemoteError::Config(format!(
                "remote_url {shown}: sslmode=require, but TLS is not built yet"
            )));
        }
        Ok(Self {
            config,
            shown,
            secret,
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
    use super::*;

    #[test]
    fn loopback_urls_parse_and_the_password_is_never_shown() {
        let url = RemoteUrl::parse("postgresql://me:hunter2@127.0.0.1:5433/agentx", None).unwrap();
        assert_eq!(url.shown, "postgresql://me@127.0.0.1:5433/agentx");
        assert_eq!(url.config.get_password(), Some(&b"hunter2"[..]));
        assert_eq!(url.redact("auth hunter2 failed"), "auth *** failed");
        assert!(!format!("{url:?}").contains("hunter2"));
        let url = RemoteUrl::parse("postgres://me@localhost/db", Some("pw".into())).unwrap();
        assert_eq!(url.config.get_password(), Some(&b"pw"[..]));
        assert!(RemoteUrl::parse("postgresql://me@[::1]:5432/db", None).is_ok());
        let url = RemoteUrl::parse("postgresql://me@%2Ftmp%2Fpg/db", None).unwrap();
        assert!(matches!(url.config.get_hosts()[0], Host::Unix(_)));
    }

    #[test]
    fn remote_hosts_are_refused_without_tls_unless_plaintext_is_asked_for() {
        let err = RemoteUrl::parse("postgresql://me:hunter2@db.example.com/agentx", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("TLS"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        assert!(
            RemoteUrl::parse(
                "postgresql://me@db.example.com/agentx?sslmode=disable",
                None
            )
            .is_ok()
        );
        let err = RemoteUrl::parse("postgresql://me@127.0.0.1/x?sslmode=require", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("TLS is not built yet"), "{err}");
    }

    #[test]
    fn bad_urls_are_clear_and_redacted() {
        let err = RemoteUrl::parse("mysql://me:hunter2@host/db", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("postgresql://"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let err = RemoteUrl::parse("postgresql://me:hunter2@127.0.0.1:notaport/db", None)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert_eq!(
            redact_url("postgresql://a:b@c/d"),
            "postgresql://a:***@c/d".to_owned()
        );
    }
}
