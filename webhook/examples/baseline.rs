//! The load run's baseline: the webhook's HTTPS stack with an empty handler, so that
//! `tests/bench/webhook-load.sh` can report each admission endpoint's throughput as a share of
//! what the stack alone sustains (the difference is the handler's cost).
//!
//! Same flags and defaults as `nodewright-webhook` (its `Args`), same rustls configuration and
//! certificate store, same HTTP server (`serve_tls`: HTTP/1.1 and h2, header-read timeout), same
//! body limit and request timeout layers (`routes::limited`). `POST /baseline` reads the body, as
//! the admission endpoints do, and answers a fixed allowed AdmissionReview; `GET /healthz` as the
//! webhook's. An example, not a flag
//! of the webhook, so the empty handler is never part of the shipped binary (the image builds
//! `--bin nodewright-webhook` only).
//!
//! Usage: `baseline --listen ADDR --tls-cert-file CRT --tls-key-file KEY` (other webhook flags are
//! accepted; no cluster is needed). Stops on SIGINT or SIGTERM.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::routing::{get, post};
use clap::Parser;
use nodewright_webhook::config::{Args, CertSource};
use nodewright_webhook::routes::limited;
use nodewright_webhook::server::{Limits, serve_tls};
use nodewright_webhook::tls::{self, CertStore};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// An allowed answer, as `/validate-nodewright` gives for a valid object.
const ALLOWED: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":true,"status":{},"uid":"00000000-0000-4000-8000-000000000001"}}"#;

#[tokio::main]
async fn main() -> Result<(), String> {
    let config = Args::parse().validate().map_err(|e| e.to_string())?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let CertSource::Files { cert, key } = &config.cert_source else {
        return Err("the baseline serves from --tls-cert-file and --tls-key-file".to_owned());
    };
    let certs = CertStore::new();
    tls::load_files(&certs, cert, key)
        .await
        .map_err(|e| format!("cannot load the serving certificate: {e}"))?;
    let tls_config = Arc::new(tls::server_config(certs).map_err(|e| e.to_string())?);
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let app = limited(
        Router::new()
            .route(
                "/baseline",
                post(|body: Bytes| async move {
                    drop(body);
                    ([(header::CONTENT_TYPE, "application/json")], ALLOWED)
                }),
            )
            .route("/healthz", get(|| async { "ok" })),
        config.max_body_bytes,
        config.request_timeout,
    );
    let limits = Limits {
        read_timeout: config.request_timeout,
        shutdown_grace: config.shutdown_grace,
        max_connections: nodewright_webhook::server::DEFAULT_MAX_CONNECTIONS,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let server = tokio::spawn(serve_tls(listener, tls_config, app, limits, stop_rx));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    let _ = stop_tx.send(true);
    let _ = server.await;
    Ok(())
}
