//! `autoTaintNewNodes` (upstream-operator.md §7.2): a node that joins the fleet is tainted with the
//! runtime-required taint before any NodeWright touches it, so workloads stay off it until every
//! `runtimeRequired` NodeWright is complete there (then [`nodewright_core::rollout::runtime_taint`] lifts the taint).
//!
//! A node is new when it carries no `nodewright.nvidia.com/` annotation at all: a node the operator
//! has worked on, or tainted before, is never tainted again (the taint, once lifted, stays lifted).
//! The taint is added together with the `autoTaint_<taintKey>` marker annotation in one write, so the
//! marker doubles as "touched" for every later pass.
//!
//! Ordering is what makes this safe: every reconcile runs this step before it writes anything to its
//! nodes, and it considers every `autoTaintNewNodes` NodeWright that selects the node, not only the one
//! being reconciled. So whichever NodeWright reaches a new node first taints it on behalf of the
//! others; the resourceVersion guard makes two concurrent attempts converge on one write.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::ResourceExt;
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;
use tracing::info;

use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::Unchanged;
use nodewright_core::jobs::RuntimeTaint;
use nodewright_core::naming;
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::rollout::selection::NodeSelection;

/// The marker value.
const TAINTED: &str = "true";

/// Whether no NodeWright has ever written to the node (no annotation under our prefix).
fn is_new(node: &Node) -> bool {
    !node
        .annotations()
        .keys()
        .any(|k| k.starts_with(keys::PREFIX))
}

/// Whether the node carries a taint matching `taint` (same key and effect; the value is ignored, as
/// Kubernetes' `MatchTaint`).
pub(crate) fn has_taint(node: &Node, taint: &RuntimeTaint) -> bool {
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .any(|t| taint.matches(t))
}

/// Whether a NodeWright asks for new nodes to be tainted: `runtimeRequired` and `autoTaintNewNodes`
/// (the latter means nothing without the former), and not being deleted.
pub(crate) fn wants_auto_taint(nodewright: &NodeWright) -> bool {
    nodewright.spec.runtime_required
        && nodewright.spec.auto_taint_new_nodes
        && nodewright.metadata.deletion_timestamp.is_none()
}

/// Whether `node` must be tainted now: it is new, lacks the taint, and some NodeWright of `all` that
/// wants auto-tainting selects it.
pub fn needs_taint(all: &[Arc<NodeWright>], node: &Node, taint: &RuntimeTaint) -> bool {
    is_new(node)
        && !has_taint(node, taint)
        && all
            .iter()
            .filter(|nw| wants_auto_taint(nw))
            .any(|nw| NodeSelection::of(nw).is_ok_and(|s| s.matches(node.labels())))
}

/// The node's taints plus the runtime-required one.
pub(crate) fn with_taint(node: &Node, taint: &RuntimeTaint) -> Vec<Taint> {
    let mut taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    taints.push(Taint {
        key: taint.key.clone(),
        value: taint.value.clone(),
        effect: taint.effect.clone(),
        time_added: None,
    });
    taints
}

/// The write that taints `node`: its taints plus the runtime-required one, and the marker.
pub fn taint_edit(node: &Node, taint: &RuntimeTaint) -> NodeEdit {
    let mut edit = NodeEdit {
        taints: Some(with_taint(node, taint)),
        ..NodeEdit::default()
    };
    edit.annotate(naming::auto_taint_annotation(&taint.key), TAINTED);
    edit
}

/// Taints every node of `nodes` that [`needs_taint`]; returns how many were tainted. A node that
/// changed meanwhile is read again and decided afresh (someone else may have tainted or touched it).
pub async fn taint_new_nodes(
    ctx: &Context,
    all: &[Arc<NodeWright>],
    nodes: &[&Node],
) -> Result<usize, ReconcileError> {
    let taint = &ctx.config.jobs.runtime_required_taint;
    let mut tainted = 0;
    for cached in nodes.iter().filter(|n| needs_taint(all, n, taint)) {
        let written = ctx
            .writer
            .write_node(cached, Unchanged::Believe, |node| {
                needs_taint(all, node, taint).then(|| taint_edit(node, taint))
            })
            .await?;
        if written.is_some() {
            info!(node = %cached.name_any(), taint = %taint.key, "tainted a new node until its runtime-required NodeWrights complete");
            tainted += 1;
        }
    }
    Ok(tainted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use nodewright_shared::api::NodeWrightSpec;

    fn runtime() -> RuntimeTaint {
        RuntimeTaint {
            key: "nodewright.nvidia.com".into(),
            value: Some("runtime-required".into()),
            effect: "NoSchedule".into(),
        }
    }

    fn nodewright(required: bool, auto: bool, zone: &str) -> NodeWright {
        NodeWright::new(
            "nw",
            NodeWrightSpec {
                runtime_required: required,
                auto_taint_new_nodes: auto,
                node_selectors: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("zone".to_owned(), zone.to_owned())])),
                    match_expressions: None,
                }),
                ..NodeWrightSpec::default()
            },
        )
    }

    fn node(annotations: &[(&str, &str)], taints: Vec<Taint>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                labels: Some(BTreeMap::from([("zone".to_owned(), "a".to_owned())])),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: None,
            effect: effect.into(),
            time_added: None,
        }
    }

    #[test]
    fn only_new_selected_nodes_of_an_auto_tainting_runtime_nodewright_are_tainted() {
        let wanted = [Arc::new(nodewright(true, true, "a"))];
        let fresh = node(&[("kwok.x-k8s.io/node", "fake")], vec![]);
        assert!(needs_taint(&wanted, &fresh, &runtime()));
        // autoTaintNewNodes without runtimeRequired, or neither: nothing.
        assert!(!needs_taint(
            &[Arc::new(nodewright(false, true, "a"))],
            &fresh,
            &runtime()
        ));
        assert!(!needs_taint(
            &[Arc::new(nodewright(true, false, "a"))],
            &fresh,
            &runtime()
        ));
        // Not selected.
        assert!(!needs_taint(
            &[Arc::new(nodewright(true, true, "b"))],
            &fresh,
            &runtime()
        ));
        // A node any NodeWright has written to is never tainted again.
        let touched = node(
            &[("nodewright.nvidia.com/status_other", "complete")],
            vec![],
        );
        assert!(!needs_taint(&wanted, &touched, &runtime()));
        // Already tainted (any value, same key and effect): nothing to add.
        let tainted = node(&[], vec![taint("nodewright.nvidia.com", "NoSchedule")]);
        assert!(!needs_taint(&wanted, &tainted, &runtime()));
        // Same key, other effect: still needs ours.
        let other = node(&[], vec![taint("nodewright.nvidia.com", "NoExecute")]);
        assert!(needs_taint(&wanted, &other, &runtime()));
    }

    #[test]
    fn a_nodewright_being_deleted_taints_nothing() {
        let mut nw = nodewright(true, true, "a");
        nw.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(!needs_taint(
            &[Arc::new(nw)],
            &node(&[], vec![]),
            &runtime()
        ));
    }

    #[test]
    fn the_edit_keeps_other_taints_and_marks_the_node() {
        let n = node(&[], vec![taint("dedicated", "NoSchedule")]);
        let edit = taint_edit(&n, &runtime());
        let taints = edit.taints.as_ref().expect("taints");
        assert_eq!(
            taints
                .iter()
                .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
                .collect::<Vec<_>>(),
            [
                ("dedicated", None, "NoSchedule"),
                (
                    "nodewright.nvidia.com",
                    Some("runtime-required"),
                    "NoSchedule"
                )
            ]
        );
        assert_eq!(
            edit.annotations
                .get("nodewright.nvidia.com/autoTaint_nodewright.nvidia.com"),
            Some(&Some("true".to_owned()))
        );
        // After the write the node is no longer new: applying the edit makes needs_taint false.
        let mut after = n.clone();
        after.spec.as_mut().expect("spec").taints = edit.taints.clone();
        after.metadata.annotations = Some(BTreeMap::from([(
            "nodewright.nvidia.com/autoTaint_nodewright.nvidia.com".to_owned(),
            "true".to_owned(),
        )]));
        assert!(!needs_taint(
            &[Arc::new(nodewright(true, true, "a"))],
            &after,
            &runtime()
        ));
    }
}
