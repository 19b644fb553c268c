//! `nodewright-webhook`: see the crate documentation of `nodewright_webhook`.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use clap::Parser;
use nodewright_webhook::cache::ClusterCache;
use nodewright_webhook::config::{Args, CertSource, Config, LogFormat};
use nodewright_webhook::metrics::Metrics;
use nodewright_webhook::routes::{AppState, Readiness, metrics_router_with_auth, router_with};
use nodewright_webhook::server::{Limits, serve_tls_counted, stopped};
use nodewright_webhook::shed::{InFlight, InFlightLimits};
use nodewright_webhook::tls::{self, CertStore};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{error, info};

fn init_tracing(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::new(&config.log_level);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match config.log_format {
        LogFormat::Json => builder.json().with_current_span(true).init(),
        LogFormat::Text => builder.init(),
    }
}

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

#[tokio::main]
async fn main() -> ExitCode {
    // clap refuses a non-UTF-8 value without naming its variable: name it first.
    let non_utf8 = nodewright_webhook::config::non_utf8_env();
    if !non_utf8.is_empty() {
        eprintln!(
            "nodewright-webhook: invalid configuration:\n  {}",
            non_utf8.join("\n  ")
        );
        return ExitCode::from(2);
    }
    let config = match Args::parse().validate() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nodewright-webhook: {e}");
            return ExitCode::from(2);
        }
    };
    init_tracing(&config);
    // ring is the only provider compiled in; installing it explicitly makes that a fact, not a hope.
    let _ = rustls::crypto::ring::default_provider().install_default();
    match run(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %e, "webhook failed");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let metrics = Metrics::new();
    let certs = CertStore::with_metrics(
        metrics.certificate_loads.clone(),
        metrics.certificate_expiry.clone(),
    );
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("cannot build a Kubernetes client (in-cluster or KUBECONFIG): {e}"))?;
    let (stop_tx, stop_rx) = watch::channel(false);

    match &config.cert_source {
        CertSource::Files { cert, key } => {
            tls::load_files(&certs, cert, key).await.map_err(|e| {
                format!(
                    "cannot load the serving certificate from --tls-cert-file (WEBHOOK_TLS_CERT_FILE)={} and --tls-key-file (WEBHOOK_TLS_KEY_FILE)={}: {e}",
                    cert.display(),
                    key.display()
                )
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
    let tls_config = Arc::new(tls::server_config(certs)?);
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let metrics_listener = TcpListener::bind(config.metrics_listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.metrics_listen))?;
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
