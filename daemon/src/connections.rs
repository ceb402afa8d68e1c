//! Serves gRPC on every accepted connection with hyper's HTTP/2 server, so
//! what waits in agentd for a client that does not read stays small.
//!
//! tonic's own server sets no bound on a stream's HTTP/2 send buffer (h2
//! keeps up to 400 KiB per stream for a reader that stopped reading); here
//! each stream keeps at most [`SEND_BUFFER`]. Everything else is as tonic
//! serves it: HTTP/2 only, the peer's credentials (`UdsConnectInfo`) in
//! every request's extensions, and on stop no new connections, each open
//! one told to finish its streams (GOAWAY), and the end once all are closed.
//! One thing tonic's server does is left out: it ends a call whose
//! `grpc-timeout` passed before its response began; a client whose deadline
//! passes resets the stream itself (agentx sends no `grpc-timeout`).

use std::convert::Infallible;
use std::future::Future;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_stream::{Stream, StreamExt as _};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::server::Connected;
use tower::ServiceExt as _;

/// Bytes one stream may have waiting in HTTP/2 for its reader: one frame
/// and a little (live output beyond it waits, bounded, or is dropped).
pub const SEND_BUFFER: usize = 32 << 10;

/// Serves `service` on each connection `incoming` yields until `stop`
/// resolves; then stops accepting, lets open connections finish their
/// streams, and returns once every connection is closed.
pub async fn serve<S, B, I, IO, E>(service: S, incoming: I, stop: impl Future<Output = ()>)
where
    S: tower::Service<http::Request<Body>, Response = http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: Stream<Item = Result<IO, E>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IO::ConnectInfo: Clone + Send + Sync + 'static,
    E: std::fmt::Display,
{
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    // As tonic configures it, plus the bounded send buffer.
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(None)
        .max_local_error_reset_streams(None)
        .max_pending_accept_reset_streams(None)
        .max_send_buf_size(SEND_BUFFER);
    let (stopping, stop_seen) = tokio::sync::watch::channel(());
    {
        // Dropped when accepting ends, which closes the listening socket.
        let mut incoming = std::pin::pin!(incoming);
        let mut stop = std::pin::pin!(stop);
        loop {
            let io = tokio::select! {
                () = &mut stop => break,
                io = incoming.next() => io,
            };
            match io {
                None => break,
                Some(Err(e)) => tracing::debug!("cannot accept a connection: {e}"),
                Some(Ok(io)) => {
                    let info = io.connect_info();
                    // Who the peer is does not change while it is connected.
                    let verdict = crate::peer::Verdict::default();
                    let service = service
                        .clone()
                        .map_request(move |r: http::Request<Incoming>| {
                            let mut r = r.map(Body::new);
                            r.extensions_mut().insert(info.clone());
                            r.extensions_mut().insert(verdict.clone());
                            r
                        });
                    let conn = builder
                        .serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
                    let mut stop = stop_seen.clone();
                    // One connection until it closes; told to finish on stop.
                    tokio::spawn(async move {
                        let mut conn = std::pin::pin!(conn);
                        let mut told = false;
                        loop {
                            tokio::select! {
                                done = conn.as_mut() => {
                                    if let Err(e) = done {
                                        tracing::debug!("a connection ended with an error: {e}");
                                    }
                                    return;
                                }
                                changed = stop.changed(), if !told => {
                                    told = true;
                                    if changed.is_ok() {
                                        conn.as_mut().graceful_shutdown();
                                    }
                                }
                            }
                        }
                    });
                }
            }
        }
    }
    // Every connection holds a receiver until it ends.
    drop(stop_seen);
    let _ = stopping.send(());
    stopping.closed().await;
}
