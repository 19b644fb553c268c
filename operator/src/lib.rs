//! The NodeWright operator's pure building blocks (DESIGN §4): everything the reconcilers decide or
//! build that needs no API call, so it can be tested exhaustively without a cluster.
//!
//! - [`naming`]: deterministic, DNS-valid names of Jobs, ConfigMaps and containers, and safe label
//!   values;
//! - [`jobs`]: the package-stage Job (§4.1) and the merged, node-wide interrupt Job (§4.2), built from
//!   a NodeWright, a package and the operator configuration;
//! - [`outcome`]: the one genuine-failure predicate over a Pod and the classification of a finished
//!   Job (§4.4), plus which failed attempts to keep as evidence;
//! - [`drift`]: the hash of what makes an unfinished package Job stale (§4.4, Drift).
//!
//! And the running operator:
//! - [`run::run`]: node cache, leader election and, per leadership term, the reconcilers;
//! - [`rollout`]: the NodeWright reconciler (selection, budget, stage machine, config updates,
//!   uninstall, reboots, status, finalizer);
//! - [`outcomes`]: the Job/Pod reconciler that records outcomes in node state;
//! - [`node_patch`], [`interrupts`], [`configmaps`], [`nodes`]: its writes and caches;
//! - [`evidence`]: the `last-logs` annotation of a failed or stuck Job;
//! - [`metrics`], [`state_metrics`]: the `nodewright_*` metrics served at `/metrics`;
//! - [`webhook_certs`]: the webhook's CA, serving certificate and caBundle (leader only).

pub mod admin;
pub mod api_metrics;
pub mod cache_trim;
pub mod config;
pub mod configmaps;
pub mod context;
pub mod drift;
pub mod error;
pub mod evidence;
pub mod interrupts;
pub mod job_state;
pub mod jobs;
pub mod leader;
pub mod metrics;
pub mod naming;
pub mod node_conditions;
pub mod node_patch;
pub mod nodes;
pub mod outcome;
pub mod outcomes;
pub mod rollout;
pub mod run;
pub mod state_metrics;
pub mod telemetry;
pub mod webhook_certs;
pub mod writes;

pub use context::{JobHook, RunOptions};
pub use run::{run, run_instrumented};
