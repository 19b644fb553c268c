//! Reboot tracking (upstream-operator.md §7.5): the NodeWright keeps each node's last seen boot ID in
//! `status.nodeBootIds`. With `REAPPLY_ON_REBOOT=true` (hosts whose root filesystem does not survive a
//! reboot), a changed boot ID resets the node for this NodeWright: its node state, status annotation
//! and label are dropped, so every package is applied again. Otherwise the boot ID is only recorded.
//!
//! The reset is written before the new boot ID: a crash in between resets the node once more (its
//! state is already empty), whereas the other order could record the reboot and never reset.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;
use tracing::info;

use crate::context::Context;
use crate::error::ReconcileError;
use crate::node::edit::NodeEdit;
use crate::writes::Unchanged;

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

/// With REAPPLY_ON_REBOOT: resets the rebooted nodes, then records the new boot IDs. Returns whether
/// any node was reset (the caller plans again on the fresh nodes).
pub async fn reset_rebooted(
    ctx: &Context,
    nodewright: &NodeWright,
    nodes: &[Arc<Node>],
) -> Result<bool, ReconcileError> {
    if !ctx.config.reapply_on_reboot {
        return Ok(false);
    }
    let name = nodewright.name_any();
    let previous = nodewright
        .status
        .as_ref()
        .map(|s| s.node_boot_ids.clone())
        .unwrap_or_default();
    let rebooted = rebooted(&previous, nodes);
    if rebooted.is_empty() {
        return Ok(false);
    }
    for cached in rebooted {
        let node_name = cached.name_any();
        ctx.writer
            .write_node(cached, Unchanged::Believe, |_| Some(reset_edit(&name)))
            .await?;
        info!(nodewright = %name, node = %node_name, "node rebooted: reset its state (REAPPLY_ON_REBOOT)");
        ctx.events
            .on_node(
                cached,
                "Reboot",
                format!(
                    "node [{node_name}] rebooted: packages of [nodewright:{name}] are applied again"
                ),
                None,
            )
            .await;
    }
    // The new boot IDs are the record that these reboots were handled: written before the pass
    // plans (which ends it), so a crash before this write only repeats the resets above.
    ctx.writer
        .set_status_map(
            nodewright,
            "nodeBootIds",
            &previous,
            &current_ids(&previous, nodes),
        )
        .await?;
    Ok(true)
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
