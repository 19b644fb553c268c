//! The HTTPS server: TLS handshakes with the current certificate, HTTP/1.1 and h2, read deadlines
//! and a connection cap against slow or too many clients ([`crate::connections`]), and a graceful
//! drain on shutdown.
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
use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;
use tracing::{debug, info, warn};

use crate::connections::{Admitted, Deadlined, Registry, Timeouts};

/// How long an idle keep-alive connection stays open waiting for its next request. It must be
/// longer than the kube-apiserver's: its webhook client (Go's net/http, HTTP/1.1 so that requests
/// spread over the Service's endpoints) keeps idle connections for 90 s and reuses them. A server
/// that closed them sooner would, now and then, close one just as the apiserver sent an admission
/// request on it, and that request would fail (a POST is not retried): with `failurePolicy: Fail`,
/// a refused object. Found by tests/e2e/tests/rotation_load.rs; guarded by `tls_rotation.rs`.
pub const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(120);

/// Bounds on slow, stalled or too many clients.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time for the TLS handshake and, separately, for a request's head from its first byte. A
    /// connection waiting for a request (its first or its next) gets [`KEEP_ALIVE_IDLE`] (or
    /// this, if longer) to start it.
    pub read_timeout: Duration,
    /// Time in-flight requests get to finish once a stop is requested.
    pub shutdown_grace: Duration,
    /// Connections open at once; see [`crate::connections`] for what happens at the cap.
    pub max_connections: usize,
}

/// Default of [`Limits::max_connections`] (`WEBHOOK_MAX_CONNECTIONS`): a few per apiserver
/// replica is what the apiserver uses; each connection costs up to ~100 KiB (TLS and HTTP
/// buffers), so the cap also bounds that memory (~50 MiB).
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// Largest HTTP/1.1 read buffer, which bounds a request head: hyper's default (~400 KiB) times the
/// connection cap would be more memory than the pod has.
const MAX_HEAD_BUFFER: usize = 64 * 1024;
/// Largest HTTP/2 header list, for the same reason.
const MAX_HEADER_LIST: u32 = 64 * 1024;
/// HTTP/2 flow-control windows: what a client may send ahead of the webhook reading it, per stream
/// and per connection (hyper's default is 1 MiB each).
const H2_WINDOW: u32 = 256 * 1024;
/// Streams a client may open at once on one HTTP/2 connection (the in-flight limits apply on top).
const H2_MAX_STREAMS: u32 = 32;

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
    stop: watch::Receiver<bool>,
) {
    serve_tls_counted(listener, tls, app, limits, Counter::default(), stop).await;
}

/// As [`serve_tls`], counting the connections refused or evicted at the cap in `shed`.
pub async fn serve_tls_counted(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    limits: Limits,
    shed: Counter,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let registry = Registry::new(
        limits.max_connections,
        Timeouts {
            read: limits.read_timeout,
            idle: limits.read_timeout.max(KEEP_ALIVE_IDLE),
        },
    );
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
        let slot = match registry.open() {
            Some(Admitted::Opened(slot)) => slot,
            Some(Admitted::Evicted(slot)) => {
                shed.inc();
                debug!(%peer, "at the connection cap: evicted a connection without a request");
                slot
            }
            None => {
                shed.inc();
                debug!(%peer, "at the connection cap with every connection in a request: refused");
                drop(tcp);
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let serve = async {
                let stream =
                    match tokio::time::timeout(limits.read_timeout, acceptor.accept(tcp)).await {
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
                slot.handshaken();
                let requests = slot.clone();
                let service =
                    hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                        let busy = requests.request();
                        let answer = app.clone().oneshot(request);
                        async move {
                            let response = answer.await;
                            drop(busy);
                            response
                        }
                    });
                let mut builder = auto::Builder::new(TokioExecutor::new());
                // The deadlines of `crate::connections` replace hyper's header-read timer.
                builder
                    .http1()
                    .timer(TokioTimer::new())
                    .header_read_timeout(None)
                    .max_buf_size(MAX_HEAD_BUFFER);
                builder
                    .http2()
                    .timer(TokioTimer::new())
                    .max_header_list_size(MAX_HEADER_LIST)
                    .max_concurrent_streams(H2_MAX_STREAMS)
                    .initial_stream_window_size(H2_WINDOW)
                    .initial_connection_window_size(H2_WINDOW);
                let io = TokioIo::new(Deadlined::new(stream, slot.clone()));
                let connection = builder.serve_connection_with_upgrades(io, service);
                if let Err(e) = watcher.watch(connection.into_owned()).await {
                    debug!(%peer, error = %e, "connection ended with an error");
                }
            };
            tokio::select! {
                () = serve => {}
                () = slot.evicted() => debug!(%peer, "connection evicted"),
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
