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

use k8s_openapi::api::core::v1::Node;

/// Whether the node is cordoned (`spec.unschedulable`), whoever did it. Here, not in [`cordon`],
/// because [`cordon`] and [`runtime_cordon`] both read it and `cordon` reads `runtime_cordon`.
pub fn is_unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}
