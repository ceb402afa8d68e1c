//! TLS to the remote store with rustls: when a connection uses it (loopback
//! and Unix sockets may go plain, any other host only with `sslmode=disable`)
//! and what it checks (`sslmode`, `sslrootcert`, libpq's meanings).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, Error as TlsError, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, NoTls};

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Chain to a trusted root and the host name (`verify-full`, the default).
    Full,
    /// Chain only (`verify-ca`, or `require` with a root certificate given).
    Ca,
    /// Encryption only (`require` without a root certificate, as in libpq).
    None,
}

/// Whether and how a connection uses TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tls {
    Off,
    On {
        verify: Verify,
        /// PEM roots (`sslrootcert`), else the system's.
        roots: Option<PathBuf>,
    },
}

/// The TLS decision for `sslmode` (`None`: not given) to hosts that are all
/// loopback or Unix sockets (`local`), or all Unix sockets (`unix`).
/// `root_given`: `sslrootcert` names a file (libpq then verifies `require`).
pub fn decide(
    sslmode: Option<&str>,
    local: bool,
    unix: bool,
    roots: Option<PathBuf>,
) -> Result<Tls, String> {
    let mode = sslmode.unwrap_or(if local { "disable" } else { "verify-full" });
    let verify = match mode {
        // PostgreSQL never uses TLS on a Unix socket; libpq ignores sslmode.
        _ if unix => return Ok(Tls::Off),
        "disable" => return Ok(Tls::Off),
        // Plaintext is only ever chosen explicitly for a non-local host.
        "allow" | "prefer" if local => return Ok(Tls::Off),
        "allow" | "prefer" | "verify-full" => Verify::Full,
        "require" if roots.is_some() => Verify::Ca,
        "require" => Verify::None,
        "verify-ca" => Verify::Ca,
        other => {
            return Err(format!(
                "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
            ));
        }
    };
    Ok(Tls::On { verify, roots })
}

/// `sslrootcert` as libpq finds it: `given` (the URL's, else
/// `PGSSLROOTCERT`), else `~/.postgresql/root.crt` under `home` when it
/// exists; `system` means the system's.
pub fn root_file(given: Option<&str>, home: Option<&Path>) -> Option<PathBuf> {
    match given.filter(|v| !v.is_empty()) {
        Some("system") => None,
        Some(path) => Some(PathBuf::from(path)),
        None => home
            .map(|h| h.join(".postgresql").join("root.crt"))
            .filter(|p| p.is_file()),
    }
}

/// A connection's I/O task, plain or TLS.
pub type Connection = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// Connects as `tls` says. The outer error is the TLS setup's (a root file
/// that cannot be read), the inner one the server's.
pub async fn connect(
    config: &tokio_postgres::Config,
    tls: &Tls,
) -> Result<Result<(Client, Connection), tokio_postgres::Error>, String> {
    fn boxed<F>(pair: (Client, F)) -> (Client, Connection)
    where
        F: Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
    {
        (pair.0, Box::pin(pair.1))
    }
    Ok(match tls {
        Tls::Off => config.connect(NoTls).await.map(boxed),
        Tls::On { verify, roots } => {
            let connector = RustlsConnect::new(*verify, roots.as_deref())?;
            config.connect(connector).await.map(boxed)
        }
    })
}

/// What a connection receives besides answers (notifications, notices),
/// until it ends; polling it drives the connection (plain or TLS).
pub type Messages = Pin<
    Box<
        dyn futures_util::Stream<Item = Result<tokio_postgres::AsyncMessage, tokio_postgres::Error>>
            + Send,
    >,
>;

/// Like [`connect`], for a connection whose caller drives it to receive
/// its notifications (`LISTEN`).
pub async fn connect_messages(
    config: &tokio_postgres::Config,
    tls: &Tls,
) -> Result<Result<(Client, Messages), tokio_postgres::Error>, String> {
    fn stream<S, T>(pair: (Client, tokio_postgres::Connection<S, T>)) -> (Client, Messages)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (client, mut connection) = pair;
        let messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        (client, Box::pin(messages))
    }
    Ok(match tls {
        Tls::Off => config.connect(NoTls).await.map(stream),
        Tls::On { verify, roots } => {
            let connector = RustlsConnect::new(*verify, roots.as_deref())?;
            config.connect(connector).await.map(stream)
        }
    })
}

/// The connector tokio-postgres is handed when TLS is on.
#[derive(Clone)]
pub struct RustlsConnect(Arc<rustls::ClientConfig>);

impl RustlsConnect {
    pub fn new(verify: Verify, roots: Option<&Path>) -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let store = Arc::new(root_store(roots)?);
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?;
        let config = match verify {
            Verify::Full => builder.with_root_certificates(store),
            other => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Lenient {
                    chain: (other == Verify::Ca).then_some(store),
                    algorithms: provider.signature_verification_algorithms,
                })),
        }
        .with_no_client_auth();
        Ok(Self(Arc::new(config)))
    }
}

fn root_store(roots: Option<&Path>) -> Result<rustls::RootCertStore, String> {
    let mut store = rustls::RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = match roots {
        Some(path) => CertificateDer::pem_file_iter(path)
            .and_then(Iterator::collect)
            .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?,
        None => rustls_native_certs::load_native_certs().certs,
    };
    let (added, _) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(match roots {
            Some(path) => format!("sslrootcert {} holds no certificate", path.display()),
            None => "no trusted root certificates found on this system; set sslrootcert".into(),
        });
    }
    Ok(store)
}

/// `verify-ca` (the chain, not the name) and `require` (neither): the
/// handshake's signatures are always checked.
#[derive(Debug)]
struct Lenient {
    /// The roots the chain must reach; `None`: the chain is not checked.
    chain: Option<Arc<rustls::RootCertStore>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        if let Some(roots) = &self.chain {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl<S> MakeTlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type TlsConnect = Handshake;
    type Error = std::io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> std::io::Result<Handshake> {
        let name = ServerName::try_from(domain.to_owned()).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{domain:?} is not a host name TLS can check: {e}"),
            )
        })?;
        Ok(Handshake {
            connector: tokio_rustls::TlsConnector::from(Arc::clone(&self.0)),
            name,
        })
    }
}

/// One TLS handshake to one host.
pub struct Handshake {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

type Handshaking<S> = Pin<Box<dyn Future<Output = std::io::Result<TlsStream<S>>> + Send>>;

impl<S> TlsConnect<S> for Handshake
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type Error = std::io::Error;
    type Future = Handshaking<S>;

    fn connect(self, stream: S) -> Handshaking<S> {
        Box::pin(async move {
            let tls = self.connector.connect(self.name, stream).await?;
            Ok(TlsStream(Box::new(tls)))
        })
    }
}

/// A TLS session to the server (no channel binding: SCRAM without `-PLUS`).
pub struct TlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for TlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_only_to_local_hosts_or_when_asked_for() {
        let on = |verify| {
            Ok(Tls::On {
                verify,
                roots: None,
            })
        };
        // Not given: plain on loopback, fully verified anywhere else.
        assert_eq!(decide(None, true, false, None), Ok(Tls::Off));
        assert_eq!(decide(None, false, false, None), on(Verify::Full));
        // Unix sockets never use TLS; disable is always honoured.
        assert_eq!(decide(Some("verify-full"), true, true, None), Ok(Tls::Off));
        assert_eq!(decide(Some("disable"), false, false, None), Ok(Tls::Off));
        // prefer/allow never fall back to plaintext on a non-local host.
        assert_eq!(decide(Some("prefer"), false, false, None), on(Verify::Full));
        assert_eq!(decide(Some("allow"), true, false, None), Ok(Tls::Off));
        // Asked for on loopback: used.
        assert_eq!(
            decide(Some("verify-full"), true, false, None),
            on(Verify::Full)
        );
        assert_eq!(
            decide(Some("verify-ca"), false, false, None),
            on(Verify::Ca)
        );
        // require: encryption only, as libpq, unless a root cert is given.
        assert_eq!(
            decide(Some("require"), false, false, None),
            on(Verify::None)
        );
        let root = PathBuf::from("/etc/ca.pem");
        assert_eq!(
            decide(Some("require"), false, false, Some(root.clone())),
            Ok(Tls::On {
                verify: Verify::Ca,
                roots: Some(root)
            })
        );
        let err = decide(Some("sometimes"), false, false, None).unwrap_err();
        assert!(err.contains("sslmode=sometimes"), "{err}");
    }

    #[test]
    fn a_root_file_without_certificates_is_refused_clearly() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = RustlsConnect::new(Verify::Full, Some(&path)).err().unwrap();
        assert!(err.contains("holds no certificate"), "{err}");
        let err = RustlsConnect::new(Verify::Full, Some(&tmp.path().join("none.pem")))
            .err()
            .unwrap();
        assert!(err.contains("none.pem"), "{err}");
    }
}
