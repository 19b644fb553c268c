//! The operator process around [`crate::run`]: its Kubernetes client, the admin server (metrics
//! and probes, bound before anything else so a bad address fails the start) and the stop signals.
//! `main.rs` only reads the environment and maps the outcome to an exit code; this is the part a
//! test or another binary can start too.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::RunOptions;
use crate::metrics::Metrics;
use crate::run::RunError;
use crate::runtime::admin::{self, AdminError, Readiness};
use crate::runtime::client;
use crate::runtime::config::OperatorConfig;
use crate::webhook_certs::Settings as WebhookCertSettings;

/// Why the operator process stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// No client: neither in-cluster configuration nor a usable KUBECONFIG.
    #[error("cannot build a Kubernetes client (in-cluster or KUBECONFIG): {0}")]
    Client(String),
    /// The metrics or probe address could not be bound.
    #[error("cannot start the admin server: {0}")]
    Admin(#[from] AdminError),
    /// The reconcilers failed.
    #[error("operator failed: {0}")]
    Run(#[from] RunError),
}

/// Runs the operator with `config` until SIGTERM or Ctrl-C: builds the client (every request
/// counted in `nodewright_operator_api_requests_total`), serves `/metrics` on `METRICS_LISTEN` and
/// the probes on `PROBE_LISTEN` (scrapes reviewed with the operator's own client when
/// `METRICS_AUTH` is on), runs the reconcilers, and stops the admin server after them.
pub async fn serve(
    config: OperatorConfig,
    webhook_certs: Option<WebhookCertSettings>,
) -> Result<(), ProcessError> {
    info!(version = env!("CARGO_PKG_VERSION"), namespace = %config.jobs.namespace, metrics_auth = config.metrics_auth, "starting");
    let metrics = Metrics::new();
    let client = kube::Config::infer()
        .await
        .map_err(|e| e.to_string())
        .and_then(|kube_config| {
            client::build(kube_config, &metrics.api()).map_err(|e| e.to_string())
        })
        .map_err(ProcessError::Client)?;
    let leader_metrics = metrics.leader();
    let state_metrics = metrics.state();
    let readiness = Readiness::waiting_for(["nodes"]);
    let auth = config
        .metrics_auth
        .then(|| nodewright_telemetry::MetricsAuth::new(client.clone(), "/metrics"));
    let served = admin::bind_split(
        config.metrics_listen,
        config.probe_listen,
        Arc::new(metrics),
        readiness.clone(),
        auth,
    )
    .await?;
    let shutdown = CancellationToken::new();
    let admin_stop = CancellationToken::new();
    let admin_task = tokio::spawn(admin::serve_each(served, admin_stop.clone()));
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let options = RunOptions {
        readiness: Some(readiness),
        webhook_certs,
        ..RunOptions::default()
    };
    let result = crate::run::run_instrumented(
        config,
        client,
        options,
        Some(leader_metrics),
        state_metrics,
        shutdown,
    )
    .await;
    admin_stop.cancel();
    let _ = admin_task.await;
    result?;
    info!("stopped");
    Ok(())
}

/// Cancels `shutdown` on SIGTERM (the kubelet's stop) or Ctrl-C.
pub async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    error!(error = %e, "cannot listen for SIGTERM");
                    let _ = ctrl_c.await;
                    shutdown.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    info!("stop signal received; stopping gracefully");
    shutdown.cancel();
}
