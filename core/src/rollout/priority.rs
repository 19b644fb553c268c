//! Ordering between NodeWrights (upstream-operator.md §2.5): a NodeWright works on a node only once
//! every NodeWright before it (lower `priority`, then name) that targets the node is complete there,
//! or, for one with `sequencing: all`, complete on all of its nodes. Disabled NodeWrights never hold
//! others back; paused ones do (their nodes stay incomplete), as upstream.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube_core::ResourceExt;
use nodewright_shared::api::{NodeWright, Sequencing};
use nodewright_shared::keys;

use super::graph::all_done;
use super::selection::NodeSelection;
use crate::node::state::parse_state;

/// Whether `other` comes before `this`.
pub fn precedes(other: &NodeWright, this: &NodeWright) -> bool {
    (other.spec.priority, other.name_any()) < (this.spec.priority, this.name_any())
}

fn complete_on(nodewright: &NodeWright, node: &Node) -> bool {
    parse_state(node, &nodewright.name_any())
        .is_some_and(|s| all_done(&nodewright.spec.packages, &s))
}

/// A NodeWright that can hold `this` back, compiled once per pass.
pub struct Gate<'a> {
    nodewright: &'a NodeWright,
    selection: NodeSelection,
    /// `sequencing: all` and not complete on every node it selects: it holds back every node.
    holds_everywhere: bool,
}

/// The NodeWrights that can hold `this` back (preceding and not disabled), each with its selector
/// compiled and, for `sequencing: all`, its fleet-wide completion computed once over `nodes` (every
/// node), so [`waits`] is a cheap per-node check.
pub fn gates<'a>(this: &NodeWright, all: &'a [Arc<NodeWright>], nodes: &[&Node]) -> Vec<Gate<'a>> {
    all.iter()
        .filter(|o| o.name_any() != this.name_any() && precedes(o, this))
        .filter(|o| !super::parts::annotation_on(o, keys::DISABLE_ANNOTATION))
        .filter_map(|o| {
            let selection = NodeSelection::of(o).ok()?;
            let holds_everywhere = o.spec.sequencing == Sequencing::All
                && nodes
                    .iter()
                    .filter(|n| selection.matches(n.labels()))
                    .any(|n| !complete_on(o, n));
            Some(Gate {
                nodewright: o,
                selection,
                holds_everywhere,
            })
        })
        .collect()
}

/// Whether `node` must wait for an earlier NodeWright.
pub fn waits(gates: &[Gate<'_>], node: &Node) -> bool {
    gates.iter().any(|g| match g.nodewright.spec.sequencing {
        Sequencing::All => g.holds_everywhere,
        Sequencing::Node => g.selection.matches(node.labels()) && !complete_on(g.nodewright, node),
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
        let all = [first.clone(), second.clone()].map(Arc::new);
        let (done, busy) = (node("a", &["first"]), node("b", &[]));
        let nodes = [&done, &busy];
        let g = gates(&second, &all, &nodes);
        assert_eq!(g.len(), 1);
        assert!(gates(&first, &all, &nodes).is_empty());
        assert!(!waits(&g, &done));
        assert!(waits(&g, &busy));
    }

    #[test]
    fn sequencing_all_holds_every_node_until_all_are_done() {
        let first = nodewright("first", 1, Sequencing::All);
        let second = nodewright("second", 2, Sequencing::Node);
        let all = [first, second.clone()].map(Arc::new);
        let (done, busy) = (node("a", &["first"]), node("b", &[]));
        assert!(waits(&gates(&second, &all, &[&done, &busy]), &done));
        let other_done = node("b", &["first"]);
        assert!(!waits(&gates(&second, &all, &[&done, &other_done]), &done));
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
        let all = [first, second.clone()].map(Arc::new);
        assert!(gates(&second, &all, &[]).is_empty());
    }
}
