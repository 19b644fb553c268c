//! A NodeWright's records on one node, as the operator reads them from the node's annotations, and
//! the status annotation and label it writes next to them.

use k8s_openapi::api::core::v1::Node;
use kube_core::ResourceExt;
use nodewright_shared::api::Status;
use nodewright_shared::keys;
use nodewright_shared::node_state::NodeState;

use crate::node::edit::NodeEdit;

/// Adds the node status annotation and label of `nodewright` to `edit`.
pub fn status_edit(edit: &mut NodeEdit, nodewright: &str, status: Status) {
    edit.annotate(keys::node_status_key(nodewright), status.as_str());
    edit.label(keys::node_status_key(nodewright), status.as_str());
}

/// The node's state for `nodewright`: empty when absent, `None` when malformed (never overwritten).
pub fn parse_state(node: &Node, nodewright: &str) -> Option<NodeState> {
    match node.annotations().get(&keys::node_state_key(nodewright)) {
        None => Some(NodeState::default()),
        Some(text) => NodeState::parse(text).ok(),
    }
}
