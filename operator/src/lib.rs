//! The NodeWright operator: the runtime, the writes, and the code that carries out decisions. What
//! it decides (the Jobs, the node edits, the rollout planner) is the pure `nodewright-core` crate;
//! the folders here show the rest:
//!
//! - [`runtime`]: the process around the reconcilers: configuration, leader election, the admin
//!   server, telemetry and the watch-fed caches;
//! - [`run::run`]: wires the caches, leader election and, per leadership term, the reconcilers;
//! - [`writes`]: every API write, through one term-gated [`writes::Writer`];
//! - [`rollout`]: the NodeWright reconciler: reads a NodeWright's nodes, Jobs and policy, runs the
//!   core's pass decision and carries it out (node edits, Jobs, drains, status);
//! - [`outcomes`]: the Job/Pod reconciler that records outcomes in node state, and the `last-logs`
//!   evidence;
//! - [`metrics`]: the `nodewright_*` metrics served at `/metrics`;
//! - [`webhook_certs`]: the webhook's CA, serving certificate and caBundle (leader only).

pub(crate) mod context;
pub(crate) mod error;
pub mod metrics;
pub(crate) mod outcomes;
pub mod process;
pub(crate) mod rollout;
pub mod run;
pub mod runtime;
pub mod webhook_certs;
pub(crate) mod writes;

pub use context::{Clock, JobHook, RunOptions};
pub use outcomes::{STUCK_BOUND, STUCK_RECHECK};
pub use run::{run, run_instrumented};
