//! Ordering between NodeWrights (upstream-operator.md §2.5): a NodeWright works on a node only once
//! every NodeWright before it (lower `priority`, then name) that targets the node is complete there,
//! or, for one with `sequencing: all`, complete on all of its nodes. Disabled NodeWrights never hold
//! others back; paused ones do (their nodes stay incomplete), as upstream.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_shared::api::{NodeWright, Sequencing};
use nodewright_shared::keys;

use super::graph::all_done;
use super::node_work::parse_state;
use super::selection::NodeSelection;

/// Whether `other` comes before `this`.
pub fn precedes(other: &NodeWright, this: &NodeWright) -> bool {
    (other.spec.priority, other.name_any()) < (this.spec.priority, this.name_any())
}

fn complete_on(nodewright: &NodeWright, node: &Node) -> bool {
    parse_state(node, &nodewright.name_any())
        .is_some_and(|s| all_done(&nodewright.spec.packages, &s))
}

/// The NodeWrights that can hold `this` back: preceding and not disabled.
pub fn gates<'a>(this: &NodeWright, all: &'a [NodeWright]) -> Vec<&'a NodeWright> {
    all.iter()
        .filter(|o| o.name_any() != this.name_any() && precedes(o, this))
        .filter(|o| {
            o.annotations()
                .get(keys::DISABLE_ANNOTATION)
                .is_none_or(|v| v != "true")
        })
        .collect()
}

/// Whether `node` must wait for an earlier NodeWright. `nodes` is every node (for `sequencing: all`).
pub fn waits(gates: &[&NodeWright], node: &Node, nodes: &[&Node]) -> bool {
    gates.iter().any(|o| {
        let Ok(selection) = NodeSelection::of(o) else {
            return false;
        };
        match o.spec.sequencing {
            Sequencing::All => nodes
                .iter()
                .filter(|n| selection.matches(n.labels()))
                .any(|n| !complete_on(o, n)),
            Sequencing::Node => selection.matches(node.labels()) && !complete_on(o, node),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use nodewright_shared::api::{NodeWrightSpec, Package};
    use nodewright_shared::node_state::{NodeState, PackageStatus, Stage, State};

    fn nodewright(name: &str, priority: i32, sequencing: Sequencing) -> NodeWright {
        NodeWright::new(
            name,
            NodeWrightSpec {
                priority,
                sequencing,
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

    fn node(name: &str, done_for: &[&str]) -> Node {
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
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: Some(
                    done_for
                        .iter()
                        .map(|nw| (keys::node_state_key(nw), state.to_annotation()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    #[test]
    fn a_node_waits_for_earlier_nodewrights_on_that_node_only() {
        let first = nodewright("first", 1, Sequencing::Node);
        let second = nodewright("second", 2, Sequencing::Node);
        let all = [first.clone(), second.clone()];
        let g = gates(&second, &all);
        assert_eq!(g.len(), 1);
        assert!(gates(&first, &all).is_empty());
        let (done, busy) = (node("a", &["first"]), node("b", &[]));
        let nodes = [&done, &busy];
        assert!(!waits(&g, &done, &nodes));
        assert!(waits(&g, &busy, &nodes));
    }

    #[test]
    fn sequencing_all_holds_every_node_until_all_are_done() {
        let first = nodewright("first", 1, Sequencing::All);
        let second = nodewright("second", 2, Sequencing::Node);
        let all = [first, second.clone()];
        let g = gates(&second, &all);
        let (done, busy) = (node("a", &["first"]), node("b", &[]));
        assert!(waits(&g, &done, &[&done, &busy]));
        let other_done = node("b", &["first"]);
        assert!(!waits(&g, &done, &[&done, &other_done]));
    }

    #[test]
    fn disabled_nodewrights_hold_nothing_back_and_ties_go_by_name() {
        let mut first = nodewright("a-first", 5, Sequencing::Node);
        let second = nodewright("b-second", 5, Sequencing::Node);
        assert!(precedes(&first, &second));
        first.metadata.annotations = Some(BTreeMap::from([(
            keys::DISABLE_ANNOTATION.to_owned(),
            "true".to_owned(),
        )]));
        let all = [first, second.clone()];
        assert!(gates(&second, &all).is_empty());
    }
}
