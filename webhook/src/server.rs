//! The HTTPS server: TLS handshakes with the current certificate, HTTP/1.1 and h2, a header-read
//! timeout against slow clients, and a graceful drain on shutdown.
//!
//! Written on hyper-util directly (rather than a higher-level server crate) for three guarantees:
//! every handshake asks the [`crate::tls::CertStore`] for the certificate, so a reload never touches
//! an established connection; a stop closes the listener first and then waits for in-flight requests;
//! and a client that never finishes its handshake or headers is dropped after a bound.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;
use tracing::{debug, info, warn};

/// How long an idle HTTP/1.1 keep-alive connection stays open. hyper's header-read timer starts as
/// soon as a connection waits for its next request, so it is also the idle timeout. It must be
/// longer than the kube-apiserver's: its webhook client (Go's net/http, HTTP/1.1 so that requests
/// spread over the Service's endpoints) keeps idle connections for 90 s and reuses them. A server
/// that closed them sooner would, now and then, close one just as the apiserver sent an admission
/// request on it, and that request would fail (a POST is not retried): with `failurePolicy: Fail`,
/// a refused object. Found by tests/e2e/tests/rotation_load.rs; guarded by `tls_rotation.rs`.
pub const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(120);

/// Bounds on slow or stalled clients.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time for the TLS handshake and, separately, for reading a request's headers; an idle
    /// keep-alive connection gets at least [`KEEP_ALIVE_IDLE`] to send its next request.
    pub read_timeout: Duration,
    /// Time in-flight requests get to finish once a stop is requested.
    pub shutdown_grace: Duration,
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, so callers' futures stay `Send`.
    let _ = stop.wait_for(|s| *s).await;
}

/// Serves `app` over TLS on `listener` until `stop` turns true, then drains.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut stop) => break,
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(limits.read_timeout, acceptor.accept(tcp)).await
            {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                app.clone().oneshot(request)
            });
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.read_timeout.max(KEEP_ALIVE_IDLE));
            builder.http2().timer(TokioTimer::new());
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(connection.into_owned()).await {
                debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    info!("stopped accepting connections; draining in-flight requests");
    tokio::select! {
        _ = graceful.shutdown() => info!("all connections drained"),
        _ = tokio::time::sleep(limits.shutdown_grace) => warn!("shutdown grace elapsed with connections still open"),
    }
}
