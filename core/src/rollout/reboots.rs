//! Reboot tracking (upstream-operator.md §7.5): the NodeWright keeps each node's last seen boot ID in
//! `status.nodeBootIds`. With `REAPPLY_ON_REBOOT=true` (hosts whose root filesystem does not survive a
//! reboot), a changed boot ID resets the node for this NodeWright: its node state, status annotation
//! and label are dropped, so every package is applied again. Otherwise the boot ID is only recorded.
//!
//! This module decides (which nodes rebooted, what a reset removes); the operator writes the resets.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube_core::ResourceExt;
use nodewright_shared::keys;

use crate::node::edit::NodeEdit;

/// The node's current boot ID, if the kubelet reported one.
pub fn boot_id(node: &Node) -> Option<&str> {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.as_str())
        .filter(|b| !b.is_empty())
}

/// The boot IDs to record for `nodes`: the current one, or the previous record while the kubelet
/// reports none.
pub fn current_ids(
    previous: &BTreeMap<String, String>,
    nodes: &[Arc<Node>],
) -> BTreeMap<String, String> {
    nodes
        .iter()
        .filter_map(|n| {
            let name = n.name_any();
            let id = boot_id(n)
                .map(str::to_owned)
                .or_else(|| previous.get(&name).cloned())?;
            Some((name, id))
        })
        .collect()
}

/// Nodes that rebooted since the recorded boot ID (a node seen for the first time did not).
pub fn rebooted<'a>(previous: &BTreeMap<String, String>, nodes: &'a [Arc<Node>]) -> Vec<&'a Node> {
    nodes
        .iter()
        .filter(|n| {
            let name = n.name_any();
            matches!((previous.get(&name), boot_id(n)), (Some(old), Some(new)) if old != new)
        })
        .map(|n| n.as_ref())
        .collect()
}

/// What a reset removes from a node: the NodeWright's node state and its status marks.
pub fn reset_edit(nodewright: &str) -> NodeEdit {
    let mut edit = NodeEdit::default();
    edit.remove_annotation(keys::node_state_key(nodewright));
    edit.remove_annotation(keys::node_status_key(nodewright));
    edit.remove_label(keys::node_status_key(nodewright));
    edit
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeStatus, NodeSystemInfo};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str, boot: &str) -> Arc<Node> {
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(NodeStatus {
                node_info: Some(NodeSystemInfo {
                    boot_id: boot.into(),
                    ..NodeSystemInfo::default()
                }),
                ..NodeStatus::default()
            }),
        })
    }

    #[test]
    fn a_changed_boot_id_is_a_reboot_a_new_node_is_not() {
        let previous = BTreeMap::from([
            ("a".to_owned(), "1".to_owned()),
            ("b".to_owned(), "1".to_owned()),
        ]);
        let nodes = vec![
            node("a", "2"),
            node("b", "1"),
            node("c", "9"),
            node("d", ""),
        ];
        let names: Vec<String> = rebooted(&previous, &nodes)
            .iter()
            .map(|n| n.name_any())
            .collect();
        assert_eq!(names, ["a"]);
        let ids = current_ids(&previous, &nodes);
        assert_eq!(
            ids,
            BTreeMap::from([
                ("a".to_owned(), "2".to_owned()),
                ("b".to_owned(), "1".to_owned()),
                ("c".to_owned(), "9".to_owned()),
            ])
        );
    }

    #[test]
    fn a_reset_drops_the_state_and_the_status_marks() {
        let edit = reset_edit("nw");
        assert_eq!(
            edit.annotations.get(&keys::node_state_key("nw")),
            Some(&None)
        );
        assert_eq!(edit.labels.get(&keys::node_status_key("nw")), Some(&None));
        assert_eq!(edit.unschedulable, None);
    }
}
