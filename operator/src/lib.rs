//! The NodeWright operator. The folders show its architecture:
//!
//! - [`runtime`]: the process around the reconcilers: configuration, leader election, the admin
//!   server, telemetry and the watch-fed caches;
//! - [`jobs`]: pure: the package-stage and interrupt Jobs (DESIGN §4.1, §4.2) and their package
//!   ConfigMaps, their drift hash, reading a Job's state, and the classification of a finished Job
//!   (§4.4);
//! - [`node`]: pure: the per-node state of a NodeWright, the node edits (annotations, labels,
//!   taints, cordon) and the node conditions;
//! - [`writes`]: every API write, through one term-gated [`writes::Writer`];
//! - [`rollout`]: the NodeWright reconciler (selection, budget, a pure pass decision, then its acts);
//! - [`outcomes`]: the Job/Pod reconciler that records outcomes in node state, and the `last-logs`
//!   evidence;
//! - [`metrics`]: the `nodewright_*` metrics served at `/metrics`;
//! - [`preview`]: the command line's window: a rollout preview from the same pure planner, and the
//!   pure node-state pieces `kubectl nodewright` writes with;
//! - [`webhook_certs`]: the webhook's CA, serving certificate and caBundle (leader only);
//! - [`run::run`]: wires the caches, leader election and, per leadership term, the reconcilers.
//!
//! Everything under `jobs/` and `node/` needs no API call, so it is tested exhaustively without a
//! cluster.

pub(crate) mod context;
pub(crate) mod error;
pub mod jobs;
pub mod metrics;
pub(crate) mod naming;
pub(crate) mod node;
pub(crate) mod outcomes;
pub mod preview;
pub(crate) mod rollout;
pub mod run;
pub mod runtime;
pub mod webhook_certs;
pub(crate) mod writes;

pub use context::{JobHook, RunOptions};
pub use outcomes::{STUCK_BOUND, STUCK_RECHECK};
pub use run::{run, run_instrumented};
