//! The plain-HTTP admin server: `/healthz`, `/readyz` and `/metrics`.
//!
//! - `/healthz` answers while the process runs: the kubelet restarts a process that stops answering,
//!   never one that is merely a standby.
//! - `/readyz` answers once the caches the reconcilers read from have synced ([`Readiness`]).
//!   Leadership plays no part: standbys keep their caches warm and are ready, so a failover needs
//!   no relist, and a rollout is not blocked by pods that are (correctly) not leading.
//! - `/metrics` is the OpenMetrics exposition of [`Metrics`]; with `METRICS_AUTH=true` only for a
//!   bearer token the apiserver authenticates and authorises for `get` on `/metrics`
//!   ([`nodewright_telemetry::auth`]). The probes never need a token (the kubelet sends none).
//!
//! `/metrics` is served only on `METRICS_LISTEN` and the probes only on `PROBE_LISTEN`
//! ([`bind_split`]): the probe port must stay reachable by the kubelet (the chart's NetworkPolicy
//! leaves it open), so it must not hand out metrics (issue 22). Equal addresses are bound once and
//! serve both.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use nodewright_telemetry::MetricsAuth;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span};

use crate::metrics::Metrics;

/// Which caches have synced. Cheap to clone; every clone shares the state.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    caches: Arc<Mutex<BTreeMap<String, bool>>>,
}

impl Readiness {
    /// Not ready until every one of `caches` is marked synced (none given: ready at once).
    pub fn waiting_for<I, S>(caches: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let caches = caches.into_iter().map(|c| (c.into(), false)).collect();
        Readiness {
            caches: Arc::new(Mutex::new(caches)),
        }
    }

    /// Records that `cache` has completed its initial list.
    pub fn mark_synced(&self, cache: &str) {
        self.lock().insert(cache.to_owned(), true);
    }

    /// The caches still listing, in name order.
    pub fn pending(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, synced)| !**synced)
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, bool>> {
        // A panic while holding this lock cannot leave the map half-written; keep serving.
        self.caches.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why the admin server could not run.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The address could not be bound (in use, no permission).
    #[error("admin server: cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// Serving stopped with an I/O error.
    #[error("admin server on {addr}: {source}")]
    Serve {
        /// The address.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A listener task panicked.
    #[error("admin server task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// `/healthz`, `/readyz` and `/metrics`, all open.
pub fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    router_with_auth(metrics, readiness, None)
}

/// [`router`], with `/metrics` behind `auth` when given: what one address serving both the
/// probes and the metrics answers.
pub fn router_with_auth(
    metrics: Arc<Metrics>,
    readiness: Readiness,
    auth: Option<MetricsAuth>,
) -> Router {
    probe_router(readiness).merge(metrics_router(metrics, auth))
}

/// `/healthz` and `/readyz` only: the probe port.
pub fn probe_router(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(readiness)
}

/// `/metrics` only (behind `auth` when given): the metrics port.
pub fn metrics_router(metrics: Arc<Metrics>, auth: Option<MetricsAuth>) -> Router {
    let mut metrics_route = get(metrics_text);
    if let Some(auth) = auth {
        metrics_route = metrics_route.layer(axum::middleware::from_fn_with_state(
            auth,
            nodewright_telemetry::auth::require,
        ));
    }
    Router::new()
        .route("/metrics", metrics_route)
        .with_state(metrics)
}

/// Binds `METRICS_LISTEN` and `PROBE_LISTEN` and pairs each listener with what it serves:
/// `/metrics` on the metrics address, `/healthz` and `/readyz` on the probe address, all three on
/// one listener when the addresses are equal. Serve the pairs with [`serve_each`].
pub async fn bind_split(
    metrics_addr: SocketAddr,
    probe_addr: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    auth: Option<MetricsAuth>,
) -> Result<Vec<(TcpListener, Router)>, AdminError> {
    if metrics_addr == probe_addr {
        let listener = bind_one(metrics_addr).await?;
        return Ok(vec![(listener, router_with_auth(metrics, readiness, auth))]);
    }
    Ok(vec![
        (bind_one(metrics_addr).await?, metrics_router(metrics, auth)),
        (bind_one(probe_addr).await?, probe_router(readiness)),
    ])
}

async fn readyz(State(readiness): State<Readiness>) -> Response {
    let pending = readiness.pending();
    if pending.is_empty() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("waiting for caches to sync: {}", pending.join(", ")),
        )
            .into_response()
    }
}

async fn metrics_text(State(metrics): State<Arc<Metrics>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.encode(),
    )
        .into_response()
}

async fn bind_one(addr: SocketAddr) -> Result<TcpListener, AdminError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| AdminError::Bind { addr, source })
}

/// Binds each distinct address (so `METRICS_LISTEN == PROBE_LISTEN` is one listener).
pub async fn bind(addrs: &[SocketAddr]) -> Result<Vec<TcpListener>, AdminError> {
    let mut distinct: Vec<SocketAddr> = Vec::new();
    for addr in addrs {
        if !distinct.contains(addr) {
            distinct.push(*addr);
        }
    }
    let mut listeners = Vec::with_capacity(distinct.len());
    for addr in distinct {
        listeners.push(bind_one(addr).await?);
    }
    Ok(listeners)
}

/// Serves `router` on every listener until `shutdown`, then lets in-flight requests finish.
pub async fn serve(
    listeners: Vec<TcpListener>,
    router: Router,
    shutdown: CancellationToken,
) -> Result<(), AdminError> {
    let served = listeners.into_iter().map(|l| (l, router.clone())).collect();
    serve_each(served, shutdown).await
}

/// Serves each listener's own router until `shutdown`, then lets in-flight requests finish.
pub async fn serve_each(
    served: Vec<(TcpListener, Router)>,
    shutdown: CancellationToken,
) -> Result<(), AdminError> {
    let mut tasks = tokio::task::JoinSet::new();
    for (listener, router) in served {
        let addr = listener.local_addr().map_err(|source| AdminError::Serve {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            source,
        })?;
        let shutdown = shutdown.clone();
        tasks.spawn(
            async move {
                info!("admin server listening");
                axum::serve(listener, router)
                    .with_graceful_shutdown(shutdown.cancelled_owned())
                    .await
                    .map_err(|source| AdminError::Serve { addr, source })
            }
            .instrument(info_span!("admin_server", %addr)),
        );
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}
