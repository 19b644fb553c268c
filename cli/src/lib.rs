//! `kubectl-nodewright`, the command line of the NodeWright operator (a kubectl plugin). The
//! binary is `src/main.rs`; everything is here so the commands can be tested as functions too.
//!
//! - [`args`]: the command line and each command's manual;
//! - [`context`]: global flags and the API client;
//! - [`cluster`]: what commands read (and the operator's Deployment);
//! - [`writes`]: every write, recorded, with `--dry-run` as a server-side dry run;
//! - [`summary`]: a NodeWright's standing on a node, from the operator's node-state code;
//! - [`patterns`], [`prompt`], [`output`], [`manifest`]: node patterns, confirmations, formats,
//!   `-f` files;
//! - [`commands`]: one module per command.

pub mod args;
pub mod cluster;
pub mod commands;
pub mod connection;
pub mod context;
pub mod error;
pub mod manifest;
pub mod output;
pub mod patterns;
pub mod prompt;
pub mod summary;
pub mod writes;

use std::process::ExitCode;

use clap::Parser;

/// Runs the command line; returns the exit status (0 success, 1 failure, 2 usage).
pub fn main_exit() -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        // Usage errors exit 2, --help and --version 0 (clap's own convention).
        Err(e) => e.exit(),
    };
    init_tracing(cli.global.verbose);
    // One crypto provider, installed before any TLS (two make rustls panic at first use).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

/// `-v`: this crate's and the operator library's debug lines; `-vv`: the client's requests too.
fn init_tracing(verbose: u8) {
    let filter = match verbose {
        0 => return,
        1 => "nodewright_cli=debug,nodewright_core=info",
        _ => "nodewright_cli=trace,nodewright_core=debug,kube=debug",
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .try_init();
}
