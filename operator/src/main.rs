//! The operator binary: installs the rustls crypto provider, reads and validates the environment
//! (exit 1 with every problem listed), sets up logging, the Kubernetes client and the admin server,
//! then runs [`nodewright_operator::process::serve`] (client, admin server, reconcilers) until
//! SIGTERM or Ctrl-C, stopping gracefully. Wiring only: what runs is in the library.

use std::process::ExitCode;

use nodewright_operator::runtime::config::OperatorConfig;
use nodewright_operator::runtime::telemetry;
use tracing::error;

fn main() -> ExitCode {
    // The operator is configured by its environment only; `--version` is the one argument.
    match std::env::args().nth(1).as_deref() {
        None => {}
        Some("--version" | "-V") => {
            println!("nodewright-operator {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!(
                "nodewright-operator: unknown argument {other:?}: the only argument is --version; \
                 the operator is configured by environment variables (the chart's ConfigMap)"
            );
            return ExitCode::from(2);
        }
    }
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
    match runtime.block_on(nodewright_operator::process::serve(config, webhook_certs)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %e, "stopped with an error");
            ExitCode::from(1)
        }
    }
}
