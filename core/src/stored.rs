//! The form in which the operator keeps API objects it caches or has just written: trimmed of what
//! it never reads back. Here, below both the watches that fill the caches and the writer that keeps
//! the object a write returned, so both keep the same form and neither depends on the other.

use nodewright_shared::api::NodeWright;

/// Drops what the operator never reads back from a stored NodeWright: managed fields and the
/// per-node status, which a large fleet makes a megabyte (the node annotations are its source).
pub fn trim_nodewright(nodewright: &mut NodeWright) {
    nodewright.metadata.managed_fields = None;
    if let Some(status) = nodewright.status.as_mut() {
        status.node_state.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use nodewright_shared::api::NodeWrightStatus;

    #[test]
    fn a_stored_nodewright_keeps_its_spec_and_status_but_not_node_state_or_managed_fields() {
        let mut nodewright = NodeWright::new("a", Default::default());
        nodewright.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        let mut status = NodeWrightStatus {
            observed_generation: Some(3),
            ..NodeWrightStatus::default()
        };
        status
            .node_state
            .insert("node-1".to_owned(), Default::default());
        nodewright.status = Some(status);
        trim_nodewright(&mut nodewright);
        assert_eq!(nodewright.metadata.managed_fields, None);
        let status = nodewright.status.expect("status kept");
        assert!(status.node_state.is_empty());
        assert_eq!(status.observed_generation, Some(3));
    }
}
