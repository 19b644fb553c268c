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
use crate::node::runtime_cordon;

/// Whether `nodewright` holds a cordon on the node.
pub fn holds_cordon(node: &Node, nodewright: &str) -> bool {
    node.annotations()
        .get(&keys::cordon_key(nodewright))
        .is_some_and(|v| v == "true")
}

/// The NodeWrights holding a cordon claim on the node (`cordon_<name>: "true"`).
pub fn claimants(node: &Node) -> impl Iterator<Item = &str> {
    let prefix = keys::cordon_key("");
    node.annotations()
        .iter()
        .filter(|(_, v)| *v == "true")
        .filter_map(move |(k, _)| k.strip_prefix(prefix.as_str()))
}

pub use super::is_unschedulable;

/// Whether the node was already cordoned before the first NodeWright's claim
/// ([`keys::CORDONED_BEFORE_ANNOTATION`]).
pub fn cordoned_before(node: &Node) -> bool {
    node.annotations()
        .get(keys::CORDONED_BEFORE_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// Adds the cordon (and this NodeWright's claim on it) to `edit`. The first claim on the node also
/// records whether the node was already cordoned ([`keys::CORDONED_BEFORE_ANNOTATION`]); a later
/// claim keeps that record, which describes the node before any NodeWright touched it. A node
/// holding the persistent runtime-required cordon ([`runtime_cordon`]) is not recorded as cordoned
/// before: its mark, not that record, keeps it cordoned, and once a validator releases the mark
/// while this claim is held, the claim's release uncordons the node as usual.
pub fn cordon(edit: &mut NodeEdit, node: &Node, nodewright: &str) {
    if claimants(node).all(|n| n == nodewright) {
        if is_unschedulable(node) && !runtime_cordon::is_marked(node) {
            edit.annotate(keys::CORDONED_BEFORE_ANNOTATION, "true");
        } else {
            // A record an older operator left behind when it released the last claim.
            edit.remove_annotation(keys::CORDONED_BEFORE_ANNOTATION);
        }
    }
    edit.annotate(keys::cordon_key(nodewright), "true");
    edit.unschedulable = Some(true);
}

/// Releases this NodeWright's claim on the cordon in `edit`; the node becomes schedulable again only
/// when no other NodeWright still holds a cordon (upstream uncordoned regardless, DESIGN §9) and the
/// node was not already cordoned before the first claim (an administrator's cordon stays).
pub fn uncordon(edit: &mut NodeEdit, node: &Node, nodewright: &str) {
    if !holds_cordon(node, nodewright) {
        return;
    }
    release(edit, node, &[nodewright]);
}

/// Removes the claims of `released` (NodeWright names) in `edit`; when no other claim remains, the
/// node goes back to how it was before the first claim: schedulable, or left cordoned when it was
/// cordoned already. Whatever happens to `spec.unschedulable` between the first claim and the last
/// release cannot be told apart from the NodeWrights' own cordon: an administrator who cordons a
/// node while a NodeWright holds it sees it uncordoned at the release, as with kured. A node that
/// holds the persistent runtime-required cordon ([`runtime_cordon`]) is never uncordoned here: only
/// the validator that removes its mark releases it.
pub fn release(edit: &mut NodeEdit, node: &Node, released: &[&str]) {
    for name in released {
        edit.remove_annotation(keys::cordon_key(name));
        // A released cordon ends its drain, timed out or not.
        edit.remove_annotation(keys::drain_start_key(name));
    }
    if claimants(node).any(|n| !released.contains(&n)) {
        return;
    }
    if !cordoned_before(node) && !runtime_cordon::is_marked(node) {
        edit.unschedulable = Some(false);
    }
    edit.remove_annotation(keys::CORDONED_BEFORE_ANNOTATION);
}

/// Whether a pod on a node being drained must leave it under the default drain (upstream's
/// `ShouldEvict`; [`crate::node::drain::decide`] with [`crate::node::drain::DrainOptions`]'s
/// defaults): Running or Pending; not tolerating the cordon (the operator's own pods); not owned by
/// a DaemonSet; not in `kube-system`; not a static pod's mirror.
pub fn should_evict(pod: &Pod) -> bool {
    use crate::node::drain::{DrainOptions, PodDrain, decide};
    !matches!(decide(pod, &DrainOptions::default()), PodDrain::Ignore)
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
    use crate::testing::node_with;
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

    /// The node after `edit`, as the apiserver would apply the patch the writer sends.
    fn applied(node: &Node, edit: &NodeEdit) -> Node {
        let Some(patch) = crate::node::edit::node_patch(node, edit) else {
            return node.clone();
        };
        let mut value = serde_json::to_value(node).expect("node json");
        json_patch::patch(&mut value, &patch).expect("patch applies");
        serde_json::from_value(value).expect("node")
    }

    fn cordoned(node: &Node, nodewright: &str) -> Node {
        let mut edit = NodeEdit::default();
        cordon(&mut edit, node, nodewright);
        applied(node, &edit)
    }

    fn uncordoned(node: &Node, nodewright: &str) -> Node {
        let mut edit = NodeEdit::default();
        uncordon(&mut edit, node, nodewright);
        applied(node, &edit)
    }

    #[test]
    fn a_node_an_administrator_cordoned_stays_cordoned_after_the_release() {
        let admin = node_with(true, &[]);
        let held = cordoned(&admin, "a");
        assert!(holds_cordon(&held, "a"));
        assert!(
            cordoned_before(&held),
            "the first claim records the prior cordon"
        );
        let released = uncordoned(&held, "a");
        assert!(
            is_unschedulable(&released),
            "the administrator's cordon stays"
        );
        assert!(!holds_cordon(&released, "a"));
        assert!(
            !released
                .annotations()
                .contains_key(keys::CORDONED_BEFORE_ANNOTATION),
            "the record goes with the last claim"
        );
    }

    #[test]
    fn a_node_the_nodewright_cordoned_is_uncordoned_and_an_old_record_is_not_trusted() {
        let schedulable = node_with(false, &[]);
        let held = cordoned(&schedulable, "a");
        assert!(is_unschedulable(&held));
        assert!(!cordoned_before(&held));
        let released = uncordoned(&held, "a");
        assert!(!is_unschedulable(&released));
        assert!(
            released.annotations().is_empty(),
            "{:?}",
            released.annotations()
        );
        // A record an older operator left behind on a schedulable node is replaced by the truth.
        let stale = node_with(false, &[(keys::CORDONED_BEFORE_ANNOTATION, "true")]);
        let held = cordoned(&stale, "a");
        assert!(!cordoned_before(&held));
        assert!(!is_unschedulable(&uncordoned(&held, "a")));
    }

    #[test]
    fn with_several_nodewrights_the_state_before_the_first_claim_decides() {
        // Schedulable before `a`: `b` finds it cordoned (by `a`), which must not count as prior.
        let both = cordoned(&cordoned(&node_with(false, &[]), "a"), "b");
        assert!(!cordoned_before(&both));
        let a_gone = uncordoned(&both, "a");
        assert!(is_unschedulable(&a_gone), "b still holds it");
        assert!(!is_unschedulable(&uncordoned(&a_gone, "b")));
        // Cordoned by an administrator before `a`: released in any order, it stays cordoned.
        let both = cordoned(&cordoned(&node_with(true, &[]), "a"), "b");
        for (first, last) in [("a", "b"), ("b", "a")] {
            let released = uncordoned(&uncordoned(&both, first), last);
            assert!(is_unschedulable(&released), "released {first} then {last}");
            assert_eq!(claimants(&released).count(), 0);
        }
    }

    #[test]
    fn no_release_uncordons_a_node_under_the_runtime_required_cordon() {
        let mark = keys::RUNTIME_REQUIRED_CORDON_ANNOTATION;
        let pinned = node_with(true, &[(mark, "true")]);
        // An interrupt's claim on the pinned node records no prior cordon: the mark does that job.
        let held = cordoned(&pinned, "a");
        assert!(holds_cordon(&held, "a"));
        assert!(!cordoned_before(&held));
        let released = uncordoned(&held, "a");
        assert!(is_unschedulable(&released), "the mark keeps it cordoned");
        assert!(!holds_cordon(&released, "a"));
        assert_eq!(
            released.annotations().get(mark).map(String::as_str),
            Some("true")
        );
        // A leftover claim's release (or the finalizer's, or a reset's) keeps it too.
        let leftover = node_with(true, &[(mark, "true"), (&keys::cordon_key("gone"), "true")]);
        let mut edit = NodeEdit::default();
        release(&mut edit, &leftover, &["gone"]);
        assert_ne!(edit.unschedulable, Some(false));
        assert!(is_unschedulable(&applied(&leftover, &edit)));
        // The validator released the mark while the claim was held: the claim's release uncordons.
        let mut validated = held.clone();
        validated
            .metadata
            .annotations
            .get_or_insert_default()
            .remove(mark);
        validated.spec.get_or_insert_default().unschedulable = Some(false);
        assert!(!is_unschedulable(&uncordoned(&validated, "a")));
        // Validated while still cordoned by the claim (only the mark removed): released as usual.
        let mut mark_only = held;
        mark_only
            .metadata
            .annotations
            .get_or_insert_default()
            .remove(mark);
        assert!(!is_unschedulable(&uncordoned(&mark_only, "a")));
    }

    #[test]
    fn claims_taken_before_the_record_existed_release_as_before() {
        // An older operator's claim (no record): the release uncordons, as that operator would.
        let legacy = node_with(true, &[(&keys::cordon_key("a"), "true")]);
        assert!(!is_unschedulable(&uncordoned(&legacy, "a")));
        // Releasing leftover claims follows the same rule.
        let leftover = node_with(
            true,
            &[
                (&keys::cordon_key("gone"), "true"),
                (keys::CORDONED_BEFORE_ANNOTATION, "true"),
            ],
        );
        let mut edit = NodeEdit::default();
        release(&mut edit, &leftover, &["gone"]);
        let released = applied(&leftover, &edit);
        assert!(is_unschedulable(&released));
        assert!(released.annotations().is_empty());
    }
}
