//! NodeWright's pure core: everything the operator decides, as functions of what it has read.
//!
//! - [`jobs`]: the package-stage and interrupt Jobs (DESIGN §4.1, §4.2) and their package
//!   ConfigMaps, their drift hash, reading a Job's state, and the classification of a finished Job
//!   (§4.4);
//! - [`node`]: the per-node state of a NodeWright, the node edits (annotations, labels, taints,
//!   cordon) as guarded JSON Patches, cordon ownership and the node conditions;
//! - [`rollout`]: the rollout planner: selection, budget, batches, priority, the stage machine,
//!   the pass decision and the status it writes;
//! - [`preview`]: the command line's rollout preview, run on the same planner;
//! - [`naming`]: the names of the objects the operator creates;
//! - [`stored`]: the trimmed form in which the operator keeps the objects it caches.
//!
//! Why a crate of its own, with no kube client and no async runtime: the operator and the command
//! line (`kubectl nodewright`) share these decisions, so the command line does not link the
//! operator's runtime (its server, metrics and leader election) to reach them; and the compiler
//! keeps them pure: nothing here can call the API or wait, so it is tested exhaustively without a
//! cluster. Reading the cluster, writing to it and carrying out the decisions is the operator's
//! (`nodewright-operator`).

pub mod jobs;
pub mod naming;
pub mod node;
pub mod preview;
pub mod rollout;
pub mod stored;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
