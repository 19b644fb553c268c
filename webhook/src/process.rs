//! The webhook process around its router: the Kubernetes client, the serving certificate (files or
//! a Secret, reloaded), the cluster cache, both listeners, and the graceful stop. `main.rs` only
//! reads the configuration and maps the outcome to an exit code.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::info;

use crate::cache::ClusterCache;
use crate::config::{CertSource, Config, LogFormat};
use crate::metrics::Metrics;
use crate::routes::{AppState, Readiness, metrics_router_with_auth, router_with};
use crate::server::{Limits, serve_tls_counted, stopped};
use crate::shed::{InFlight, InFlightLimits};
use crate::tls::{self, CertStore, TlsError};

/// Why the webhook process could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// No client: neither in-cluster configuration nor a usable KUBECONFIG.
    #[error("cannot build a Kubernetes client (in-cluster or KUBECONFIG): {0}")]
    Client(#[source] kube::Error),
    /// The serving certificate files could not be read or parsed.
    #[error(
        "cannot load the serving certificate from --tls-cert-file (WEBHOOK_TLS_CERT_FILE)={} and --tls-key-file (WEBHOOK_TLS_KEY_FILE)={}: {source}",
        cert.display(),
        key.display()
    )]
    CertFiles {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What was wrong.
        #[source]
        source: TlsError,
    },
    /// The TLS server configuration could not be built.
    #[error("cannot build the TLS server configuration: {0}")]
    Tls(#[source] rustls::Error),
    /// An address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Logging as `config` says (level filter, JSON or text).
pub fn init_tracing(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::new(&config.log_level);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match config.log_format {
        LogFormat::Json => builder.json().with_current_span(true).init(),
        LogFormat::Text => builder.init(),
    }
}

/// Returns on SIGTERM (the kubelet's stop) or Ctrl-C.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

/// Runs the webhook with `config` until SIGTERM or Ctrl-C, then drains: not ready at once, still
/// serving for `shutdown_delay` (a second signal cuts it short), then stops both listeners.
pub async fn serve(config: Config) -> Result<(), ProcessError> {
    let metrics = Metrics::new();
    let certs = CertStore::with_metrics(
        metrics.certificate_loads.clone(),
        metrics.certificate_expiry.clone(),
    );
    let client = kube::Client::try_default()
        .await
        .map_err(ProcessError::Client)?;
    let (stop_tx, stop_rx) = watch::channel(false);

    match &config.cert_source {
        CertSource::Files { cert, key } => {
            tls::load_files(&certs, cert, key)
                .await
                .map_err(|source| ProcessError::CertFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    source,
                })?;
            tokio::spawn(tls::watch_files(
                certs.clone(),
                cert.clone(),
                key.clone(),
                config.tls_reload_interval,
                stop_rx.clone(),
            ));
        }
        CertSource::Secret { namespace, name } => {
            tokio::spawn(tls::watch_secret(
                certs.clone(),
                client.clone(),
                namespace.clone(),
                name.clone(),
            ));
        }
    }

    let ready = Readiness::new(certs.clone());
    let auth = config
        .metrics_auth
        .then(|| nodewright_telemetry::MetricsAuth::new(client.clone(), "/metrics"));
    let cache = ClusterCache::start(client);
    {
        let cache = cache.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            if cache.synced().await {
                ready.caches_synced.store(true, Ordering::SeqCst);
                info!("caches synced");
            }
        });
    }

    info!(
        allow_control_plane_nodes = config.restrictions.allow_control_plane_nodes,
        allowed_images = ?config.restrictions.allowed_images,
        protected_secrets = ?config.restrictions.protected_secrets,
        "admission restrictions"
    );
    let state = Arc::new(AppState {
        defaults: config.defaults.clone(),
        restrictions: config.restrictions.clone(),
        cluster: Arc::new(cache),
        metrics: metrics.clone(),
        ready: ready.clone(),
    });
    let tls_config = Arc::new(tls::server_config(certs).map_err(ProcessError::Tls)?);
    let listener =
        TcpListener::bind(config.listen)
            .await
            .map_err(|source| ProcessError::Listen {
                address: config.listen,
                source,
            })?;
    let metrics_listener = TcpListener::bind(config.metrics_listen)
        .await
        .map_err(|source| ProcessError::Listen {
            address: config.metrics_listen,
            source,
        })?;
    info!(listen = %config.listen, metrics = %config.metrics_listen, "serving");

    let mut metrics_stop = stop_rx.clone();
    let served_metrics = metrics.clone();
    let metrics_server = tokio::spawn(async move {
        axum::serve(
            metrics_listener,
            metrics_router_with_auth(served_metrics, auth),
        )
        .with_graceful_shutdown(async move { stopped(&mut metrics_stop).await })
        .await
    });
    let in_flight = InFlight::new(
        InFlightLimits {
            max_requests: config.max_in_flight,
            max_large_bytes: config.max_in_flight_bytes,
            max_body_bytes: config.max_body_bytes,
        },
        metrics.shed_requests(),
    );
    let app = router_with(
        state,
        config.max_body_bytes,
        config.request_timeout,
        in_flight,
    );
    let limits = Limits {
        read_timeout: config.request_timeout,
        shutdown_grace: config.shutdown_grace,
        max_connections: config.max_connections,
    };
    info!(
        max_connections = config.max_connections,
        max_in_flight = config.max_in_flight,
        max_in_flight_bytes = config.max_in_flight_bytes,
        "load limits"
    );
    let server = tokio::spawn(serve_tls_counted(
        listener,
        tls_config,
        app,
        limits,
        metrics.shed_connections(),
        stop_rx,
    ));

    shutdown_signal().await;
    // Not ready from now on, but still accepting for the shutdown delay: the apiserver routes
    // admissions to this pod until the endpoint removal reaches it, and a refused connection
    // there is a failed create or update. A second signal cuts the delay short.
    ready.draining.store(true, Ordering::SeqCst);
    info!(delay = ?config.shutdown_delay, "termination requested; not ready, still serving for the shutdown delay");
    tokio::select! {
        () = tokio::time::sleep(config.shutdown_delay) => {}
        () = shutdown_signal() => info!("second termination signal: draining now"),
    }
    let _ = stop_tx.send(true);
    let _ = server.await;
    let _ = metrics_server.await;
    info!("stopped");
    Ok(())
}
