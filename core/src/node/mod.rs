//! Pure node logic: a NodeWright's per-node state as read from its annotation, the edits the
//! operator makes to a node (annotations, labels, taints, cordon) as a guarded JSON Patch, cordon
//! ownership and drain eligibility, the persistent cordon of `runtimeRequiredCordonAfter`, and the
//! node conditions. Writing them is the operator's.

pub mod conditions;
pub mod cordon;
pub mod drain;
pub mod edit;
pub mod health_gates;
pub mod record;
pub mod runtime_cordon;
pub mod state;
