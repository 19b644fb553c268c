//! Taking a node out of service before a disruptive package runs (upstream-operator.md §4.1–§4.2):
//! cordon (the NodeWright records that it holds the cordon), then drain through the Eviction API, so
//! PodDisruptionBudgets are respected (a 429 means "not now"; the node simply is not drained yet).
//! Unlike upstream, a node counts as drained only once the evicted pods are gone, not when the
//! evictions were merely accepted.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_core::ResourceExt;
use kube_core::{Selector, SelectorExt};
use nodewright_shared::keys;

use crate::node::edit::NodeEdit;

/// Whether `nodewright` holds a cordon on the node.
pub fn holds_cordon(node: &Node, nodewright: &str) -> bool {
    node.annotations()
        .get(&keys::cordon_key(nodewright))
        .is_some_and(|v| v == "true")
}

/// Adds the cordon (and this NodeWright's claim on it) to `edit`.
pub fn cordon(edit: &mut NodeEdit, nodewright: &str) {
    edit.annotate(keys::cordon_key(nodewright), "true");
    edit.unschedulable = Some(true);
}

/// Releases this NodeWright's claim on the cordon in `edit`; the node becomes schedulable again only
/// when no other NodeWright still holds a cordon (upstream uncordoned regardless, DESIGN §9).
pub fn uncordon(edit: &mut NodeEdit, node: &Node, nodewright: &str) {
    if !holds_cordon(node, nodewright) {
        return;
    }
    edit.remove_annotation(keys::cordon_key(nodewright));
    let own = keys::cordon_key(nodewright);
    let prefix = keys::cordon_key("");
    let others = node
        .annotations()
        .iter()
        .any(|(k, v)| k.starts_with(&prefix) && *k != own && v == "true");
    if !others {
        edit.unschedulable = Some(false);
    }
}

/// Whether a pod on a node being drained must leave it (upstream's `ShouldEvict`): Running or
/// Pending; not tolerating the cordon (that covers the operator's own pods and DaemonSet pods); not
/// owned by a DaemonSet; not in `kube-system`.
pub fn should_evict(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !matches!(phase, Some("Running" | "Pending")) {
        return false;
    }
    if pod.namespace().as_deref() == Some("kube-system") {
        return false;
    }
    let tolerates_cordon = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| t.key.as_deref() == Some("node.kubernetes.io/unschedulable"));
    let daemonset = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
    !tolerates_cordon && !daemonset
}

/// The Running or Pending pods matching `selector` (`podNonInterruptLabels`; absent or empty: none),
/// as `namespace/name`. Errs when the selector cannot be compiled.
pub fn holding_pods(pods: &[Pod], selector: Option<&LabelSelector>) -> Result<Vec<String>, String> {
    let Some(selector) = selector.filter(|s| {
        s.match_labels.as_ref().is_some_and(|m| !m.is_empty())
            || s.match_expressions.as_ref().is_some_and(|e| !e.is_empty())
    }) else {
        return Ok(Vec::new());
    };
    let selector = Selector::try_from(selector.clone()).map_err(|e| e.to_string())?;
    Ok(pods
        .iter()
        .filter(|p| {
            matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Running" | "Pending")
            ) && p.metadata.deletion_timestamp.is_none()
                && selector.matches(p.labels())
        })
        .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("pod")
    }

    #[test]
    fn only_ordinary_running_pods_are_evicted() {
        assert!(should_evict(&pod(
            json!({"metadata": {"name": "a", "namespace": "app"}, "status": {"phase": "Running"}})
        )));
        assert!(!should_evict(&pod(
            json!({"metadata": {"name": "a", "namespace": "app"}, "status": {"phase": "Succeeded"}})
        )));
        assert!(!should_evict(&pod(
            json!({"metadata": {"name": "a", "namespace": "kube-system"}, "status": {"phase": "Running"}})
        )));
        assert!(!should_evict(&pod(
            json!({"metadata": {"name": "a", "namespace": "app"},
            "spec": {"containers": [], "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
            "status": {"phase": "Running"}})
        )));
        assert!(!should_evict(&pod(
            json!({"metadata": {"name": "a", "namespace": "app",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]},
            "status": {"phase": "Pending"}})
        )));
    }

    #[test]
    fn pods_matching_pod_non_interrupt_labels_hold_the_interrupt() {
        let pods = vec![
            pod(
                json!({"metadata": {"name": "train", "namespace": "ml", "labels": {"job": "training"}},
                "status": {"phase": "Running"}}),
            ),
            pod(
                json!({"metadata": {"name": "done", "namespace": "ml", "labels": {"job": "training"}},
                "status": {"phase": "Succeeded"}}),
            ),
            pod(
                json!({"metadata": {"name": "web", "namespace": "app", "labels": {"job": "web"}},
                "status": {"phase": "Running"}}),
            ),
        ];
        let selector: LabelSelector =
            serde_json::from_value(json!({"matchLabels": {"job": "training"}})).expect("selector");
        assert_eq!(
            holding_pods(&pods, Some(&selector)),
            Ok(vec!["ml/train".to_owned()])
        );
        assert_eq!(holding_pods(&pods, None), Ok(vec![]));
        assert_eq!(
            holding_pods(&pods, Some(&LabelSelector::default())),
            Ok(vec![])
        );
        let bad: LabelSelector = serde_json::from_value(
            json!({"matchExpressions": [{"key": "job", "operator": "Bogus"}]}),
        )
        .expect("selector");
        assert!(holding_pods(&pods, Some(&bad)).is_err());
    }

    #[test]
    fn uncordon_keeps_the_node_cordoned_while_another_nodewright_holds_it() {
        let node = |annotations: &[(&str, &str)]| Node {
            metadata: ObjectMeta {
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        let mine = keys::cordon_key("a");
        let theirs = keys::cordon_key("b");
        let mut edit = NodeEdit::default();
        uncordon(&mut edit, &node(&[(&mine, "true"), (&theirs, "true")]), "a");
        assert_eq!(edit.unschedulable, None);
        assert_eq!(edit.annotations.get(&mine), Some(&None));
        let mut edit = NodeEdit::default();
        uncordon(&mut edit, &node(&[(&mine, "true")]), "a");
        assert_eq!(edit.unschedulable, Some(false));
        let mut edit = NodeEdit::default();
        uncordon(&mut edit, &node(&[(&theirs, "true")]), "a");
        assert_eq!(edit, NodeEdit::default());
    }
}
