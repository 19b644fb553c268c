//! `nodewright-webhook`: see the crate documentation of `nodewright_webhook`.

use std::process::ExitCode;

use clap::Parser;
use nodewright_webhook::config::Args;
use nodewright_webhook::process::{self, init_tracing};
use tracing::error;

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
    match process::serve(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %e, "webhook failed");
            ExitCode::FAILURE
        }
    }
}
