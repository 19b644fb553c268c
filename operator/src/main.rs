//! The operator binary: installs the rustls crypto provider, reads and validates the environment
//! (exit 1 with every problem listed), sets up logging, the Kubernetes client and the admin server,
//! then runs [`nodewright_operator::run`] until SIGTERM or Ctrl-C, stopping gracefully.

use std::process::ExitCode;
use std::sync::Arc;

use nodewright_operator::RunOptions;
use nodewright_operator::metrics::Metrics;
use nodewright_operator::runtime::admin::{self, Readiness};
use nodewright_operator::runtime::client;
use nodewright_operator::runtime::config::OperatorConfig;
use nodewright_operator::runtime::telemetry;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

fn main() -> ExitCode {
    // Exactly one provider, ring, chosen explicitly: two in the graph make rustls panic at first use.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match OperatorConfig::from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let webhook_certs = match nodewright_operator::webhook_certs::Settings::from_env() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    telemetry::init(&config);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error!(error = %e, "cannot start the async runtime");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(serve(config, webhook_certs))
}

async fn serve(
    config: OperatorConfig,
    webhook_certs: Option<nodewright_operator::webhook_certs::Settings>,
) -> ExitCode {
    info!(version = env!("CARGO_PKG_VERSION"), namespace = %config.jobs.namespace, metrics_auth = config.metrics_auth, "starting");
    let metrics = Metrics::new();
    // Every request of the operator's client is counted (nodewright_operator_api_requests_total).
    let client = match kube::Config::infer()
        .await
        .map_err(|e| e.to_string())
        .and_then(|config| client::build(config, &metrics.api()).map_err(|e| e.to_string()))
    {
        Ok(client) => client,
        Err(e) => {
            error!(error = %e, "cannot build a Kubernetes client (in-cluster or KUBECONFIG)");
            return ExitCode::from(1);
        }
    };
    let leader_metrics = metrics.leader();
    let state_metrics = metrics.state();
    let readiness = Readiness::waiting_for(["nodes"]);
    // METRICS_AUTH: scrapes are reviewed with the operator's own client (TokenReview, then
    // SubjectAccessReview of get /metrics).
    let auth = config
        .metrics_auth
        .then(|| nodewright_telemetry::MetricsAuth::new(client.clone(), "/metrics"));
    // /metrics on METRICS_LISTEN only, the probes on PROBE_LISTEN only.
    let served = match admin::bind_split(
        config.metrics_listen,
        config.probe_listen,
        Arc::new(metrics),
        readiness.clone(),
        auth,
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            error!(error = %e, "cannot start the admin server");
            return ExitCode::from(1);
        }
    };
    let shutdown = CancellationToken::new();
    let admin_stop = CancellationToken::new();
    let admin_task = tokio::spawn(admin::serve_each(served, admin_stop.clone()));
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let options = RunOptions {
        readiness: Some(readiness),
        webhook_certs,
        ..RunOptions::default()
    };
    let result = nodewright_operator::run::run_instrumented(
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
    match result {
        Ok(()) => {
            info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            error!(error = %e, "operator failed");
            ExitCode::from(1)
        }
    }
}

/// Cancels `shutdown` on SIGTERM (the kubelet's stop) or Ctrl-C.
async fn stop_on_signal(shutdown: CancellationToken) {
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
