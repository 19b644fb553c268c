//! The runtime-required taint (upstream-operator.md §7.2): workloads stay off a node until every
//! `runtimeRequired` NodeWright targeting it is complete there; then the taint (same key and effect,
//! any value, as Kubernetes' `MatchTaint`) is removed. New nodes get the taint from
//! [`super::auto_taint`] when a NodeWright asks for it. With `runtimeRequiredCordonAfter`, the write
//! that removes the taint also cordons the node ([`crate::node::runtime_cordon`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube_core::ResourceExt;
use nodewright_shared::api::NodeWright;

use super::graph::all_done;
use super::selection::NodeSelection;
use crate::jobs::RuntimeTaint;
use crate::node::edit::NodeEdit;
use crate::node::runtime_cordon;
use crate::node::state::parse_state;
use nodewright_shared::node_state::NodeState;

/// Whether every `runtimeRequired` NodeWright of `all` that targets `node` is complete on it (and at
/// least one does). The records of one NodeWright (`own`: its name and records) can be given rather
/// than read from the node: the pass that completes a node knows its records before the node shows
/// them, and lifts the taint in the same write.
pub fn runtime_ready_with(
    all: &[Arc<NodeWright>],
    node: &Node,
    own: Option<(&str, &NodeState)>,
) -> bool {
    let mut required = all
        .iter()
        .filter(|nw| nw.spec.runtime_required)
        .filter(|nw| NodeSelection::of(nw).is_ok_and(|s| s.matches(node.labels())));
    let mut any = false;
    let done = required.all(|nw| {
        any = true;
        let name = nw.name_any();
        match own {
            Some((own, state)) if own == name => all_done(&nw.spec.packages, state),
            _ => parse_state(node, &name).is_some_and(|s| all_done(&nw.spec.packages, &s)),
        }
    });
    any && done
}

/// Whether any `runtimeRequired` NodeWright of `all` that targets `node` asks for the persistent
/// cordon (`runtimeRequiredCordonAfter`; ignored without `runtimeRequired`, as upstream).
pub fn cordon_after_wanted(all: &[Arc<NodeWright>], node: &Node) -> bool {
    all.iter()
        .filter(|nw| nw.spec.runtime_required && nw.spec.runtime_required_cordon_after)
        .any(|nw| NodeSelection::of(nw).is_ok_and(|s| s.matches(node.labels())))
}

/// Removes the runtime-required taint in `edit` when `node` carries it; with `cordon_after`, the same
/// edit holds the persistent cordon ([`runtime_cordon::hold`]), so the node never accepts workloads
/// between the two. A node without the taint is left alone (never cordoned). Call it after any
/// cordon release of the same edit: the persistent cordon wins over the release. Returns whether
/// the taint is lifted.
pub fn lift(edit: &mut NodeEdit, node: &Node, taint: &RuntimeTaint, cordon_after: bool) -> bool {
    let Some(left) = without_runtime_taint(node, taint) else {
        return false;
    };
    edit.taints = Some(left);
    if cordon_after {
        runtime_cordon::hold(edit);
    }
    true
}

/// The node's taints without the runtime-required one, when it carries it.
pub fn without_runtime_taint(node: &Node, taint: &RuntimeTaint) -> Option<Vec<Taint>> {
    let taints = node.spec.as_ref()?.taints.as_ref()?;
    taints.iter().any(|t| taint.matches(t)).then(|| {
        taints
            .iter()
            .filter(|t| !taint.matches(t))
            .cloned()
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use nodewright_shared::api::{NodeWrightSpec, Package};
    use nodewright_shared::keys;
    use nodewright_shared::node_state::{NodeState, PackageStatus, Stage, State};

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(str::to_owned),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn runtime() -> RuntimeTaint {
        RuntimeTaint {
            key: "nodewright.nvidia.com".into(),
            value: Some("runtime-required".into()),
            effect: "NoSchedule".into(),
        }
    }

    fn nodewright(name: &str, required: bool) -> NodeWright {
        NodeWright::new(
            name,
            NodeWrightSpec {
                runtime_required: required,
                packages: BTreeMap::from([(
                    "p".to_owned(),
                    Package {
                        version: "1".into(),
                        image: "i".into(),
                        ..Package::default()
                    },
                )]),
                ..NodeWrightSpec::default()
            },
        )
    }

    /// One package complete.
    fn complete_state() -> NodeState {
        let mut state = NodeState::default();
        state.upsert(PackageStatus {
            name: "p".into(),
            version: "1".into(),
            image: "i".into(),
            container_sha: String::new(),
            stage: Stage::Config,
            state: Some(State::Complete),
            restarts: 0,
        });
        state
    }

    fn node(done_for: &[&str], taints: Vec<Taint>) -> Node {
        let state = complete_state();
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                annotations: Some(
                    done_for
                        .iter()
                        .map(|nw| (keys::node_state_key(nw), state.to_annotation()))
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

    #[test]
    fn the_taint_goes_only_when_every_runtime_required_nodewright_is_done() {
        let all = [
            nodewright("a", true),
            nodewright("b", true),
            nodewright("c", false),
        ]
        .map(Arc::new);
        assert!(!runtime_ready_with(&all, &node(&["a"], vec![]), None));
        assert!(runtime_ready_with(&all, &node(&["a", "b"], vec![]), None));
        assert!(!runtime_ready_with(
            &[Arc::new(nodewright("c", false))],
            &node(&["c"], vec![]),
            None
        ));
    }

    #[test]
    fn the_pass_completing_a_node_counts_its_own_records() {
        let all = [nodewright("a", true), nodewright("b", true)].map(Arc::new);
        let complete = complete_state();
        // The node shows b done, not a yet: a's pass knows a is done now.
        let n = node(&["b"], vec![]);
        assert!(!runtime_ready_with(&all, &n, None));
        assert!(runtime_ready_with(&all, &n, Some(("a", &complete))));
        assert!(!runtime_ready_with(
            &all,
            &n,
            Some(("a", &NodeState::default()))
        ));
    }

    fn cordon_after(name: &str, required: bool, after: bool) -> Arc<NodeWright> {
        let mut nw = nodewright(name, required);
        nw.spec.runtime_required_cordon_after = after;
        Arc::new(nw)
    }

    #[test]
    fn any_runtime_required_nodewright_asking_for_it_wants_the_cordon() {
        let n = node(&[], vec![]);
        assert!(!cordon_after_wanted(&[cordon_after("a", true, false)], &n));
        assert!(cordon_after_wanted(
            &[
                cordon_after("a", true, false),
                cordon_after("b", true, true)
            ],
            &n
        ));
        // Only respected with runtimeRequired.
        assert!(!cordon_after_wanted(&[cordon_after("c", false, true)], &n));
        // Only from NodeWrights that target the node.
        let mut elsewhere = nodewright("d", true);
        elsewhere.spec.runtime_required_cordon_after = true;
        elsewhere.spec.node_selectors =
            serde_json::from_value(serde_json::json!({"matchLabels": {"pool": "other"}}))
                .expect("selector");
        assert!(!cordon_after_wanted(&[Arc::new(elsewhere)], &n));
    }

    #[test]
    fn lifting_the_taint_cordons_in_the_same_edit_only_when_asked_and_tainted() {
        let mark = keys::RUNTIME_REQUIRED_CORDON_ANNOTATION;
        let tainted = node(
            &[],
            vec![
                taint(
                    "nodewright.nvidia.com",
                    Some("runtime-required"),
                    "NoSchedule",
                ),
                taint("dedicated", Some("gpu"), "NoSchedule"),
            ],
        );
        // A release computed first in the same edit (the completing NodeWright's claim) loses.
        let mut edit = NodeEdit {
            unschedulable: Some(false),
            ..NodeEdit::default()
        };
        assert!(lift(&mut edit, &tainted, &runtime(), true));
        assert_eq!(edit.unschedulable, Some(true));
        assert_eq!(edit.annotations.get(mark), Some(&Some("true".to_owned())));
        assert_eq!(
            edit.taints.as_deref().map(|t| t.len()),
            Some(1),
            "only the runtime taint goes"
        );

        // Not asked: the taint goes, the node stays schedulable, no mark.
        let mut edit = NodeEdit::default();
        assert!(lift(&mut edit, &tainted, &runtime(), false));
        assert!(edit.taints.is_some());
        assert_eq!(edit.unschedulable, None);
        assert!(!edit.annotations.contains_key(mark));

        // Never tainted: nothing at all, even when asked.
        let untainted = node(&[], vec![taint("dedicated", Some("gpu"), "NoSchedule")]);
        let mut edit = NodeEdit::default();
        assert!(!lift(&mut edit, &untainted, &runtime(), true));
        assert_eq!(edit, NodeEdit::default());
    }

    #[test]
    fn only_the_runtime_taint_is_removed_whatever_its_value() {
        let n = node(
            &[],
            vec![
                taint("nodewright.nvidia.com", Some("other"), "NoSchedule"),
                taint("dedicated", Some("gpu"), "NoSchedule"),
                taint("nodewright.nvidia.com", None, "NoExecute"),
            ],
        );
        let left = without_runtime_taint(&n, &runtime()).expect("carries it");
        assert_eq!(
            left.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["dedicated", "nodewright.nvidia.com"]
        );
        assert!(without_runtime_taint(&node(&[], vec![]), &runtime()).is_none());
    }
}
