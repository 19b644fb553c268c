//! What the NodeWright webhook and operator share, so they can never disagree:
//!
//! - [`api`]: the `NodeWright` and `DeploymentPolicy` types (the CRDs are generated from them, [`crd`]);
//! - [`node_state`]: the per-node package state kept in node annotations;
//! - [`defaults`]: the operator defaults read from the environment, and the defaulting functions both
//!   the mutating webhook and the operator apply;
//! - [`defaulted`]: the record of the `stageTimeout`s admission filled, which keep following the
//!   operator default;
//! - [`duration`] and [`deadline`]: Go duration syntax and the `stageTimeout` → `activeDeadlineSeconds`
//!   arithmetic with its int32 clamp;
//! - [`keys`]: every label, annotation and finalizer key the product owns;
//! - [`glob`]: the `configInterrupts` key patterns (Go's `filepath.Match`), which admission validates
//!   and the operator uses to pick the interrupt a config change calls for;
//! - [`window`]: the DeploymentPolicy's maintenance windows, which admission checks and the operator,
//!   the preview and the command line evaluate.

pub mod api;
pub mod crd;
pub mod deadline;
pub mod defaulted;
pub mod defaults;
pub mod duration;
pub mod glob;
pub mod keys;
pub mod node_state;
pub mod window;
