//! Which NodeWrights a node change concerns, so a node event wakes those instead of every
//! NodeWright (the model kube-rs codebases use: a `watches` mapper, not `reconcile_all_on`).
//!
//! A NodeWright is concerned when it selects the node now (its labels), or selected it before (the
//! node is in its status: a label removed or the node deleted must drop it from there), or when a
//! NodeWright it waits for with `sequencing: all` is concerned (that NodeWright finishing on this
//! node can release the later one on nodes it does not share). A NodeWright whose selector does not
//! compile is always woken, so its error is reported.

use k8s_openapi::api::core::v1::Node;
use kube_core::ResourceExt;
use nodewright_shared::api::{NodeWright, Sequencing};

use super::priority::precedes;
use super::selection::NodeSelection;

/// Whether `nodewright` selects `node`, or had it in its status.
fn concerns(nodewright: &NodeWright, node: &Node) -> bool {
    let name = node.name_any();
    let selects =
        NodeSelection::of(nodewright).map_or(true, |selection| selection.matches(node.labels()));
    selects
        || nodewright
            .status
            .as_ref()
            .is_some_and(|s| s.node_status.contains_key(&name))
}

/// The NodeWrights to reconcile after `node` changed.
pub fn concerned<'a>(
    nodewrights: impl IntoIterator<Item = &'a NodeWright> + Clone,
    node: &Node,
) -> Vec<&'a NodeWright> {
    let gates: Vec<&NodeWright> = nodewrights
        .clone()
        .into_iter()
        .filter(|nw| nw.spec.sequencing == Sequencing::All && concerns(nw, node))
        .collect();
    nodewrights
        .into_iter()
        .filter(|nw| concerns(nw, node) || gates.iter().any(|g| precedes(g, nw)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use nodewright_shared::api::{NodeWrightSpec, NodeWrightStatus, Status};

    fn nw(name: &str, pool: Option<&str>, priority: i32, sequencing: Sequencing) -> NodeWright {
        NodeWright::new(
            name,
            NodeWrightSpec {
                node_selectors: pool.map(|p| LabelSelector {
                    match_labels: Some(BTreeMap::from([("pool".to_owned(), p.to_owned())])),
                    match_expressions: None,
                }),
                priority,
                sequencing,
                ..NodeWrightSpec::default()
            },
        )
    }

    fn node(name: &str, pool: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([("pool".to_owned(), pool.to_owned())])),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn names(concerned: Vec<&NodeWright>) -> Vec<String> {
        concerned.into_iter().map(|nw| nw.name_any()).collect()
    }

    #[test]
    fn a_node_change_wakes_the_nodewrights_that_select_it_or_did() {
        let gpu = nw("gpu", Some("gpu"), 200, Sequencing::Node);
        let cpu = nw("cpu", Some("cpu"), 200, Sequencing::Node);
        let everywhere = nw("all-nodes", None, 200, Sequencing::Node);
        let mut left = nw("left", Some("old"), 200, Sequencing::Node);
        left.status = Some(NodeWrightStatus {
            node_status: BTreeMap::from([("n1".to_owned(), Status::Complete)]),
            ..NodeWrightStatus::default()
        });
        let all = [gpu, cpu, everywhere, left];
        assert_eq!(
            names(concerned(&all, &node("n1", "gpu"))),
            ["gpu", "all-nodes", "left"]
        );
        assert_eq!(
            names(concerned(&all, &node("n2", "cpu"))),
            ["cpu", "all-nodes"]
        );
    }

    #[test]
    fn a_fleet_wide_gate_wakes_the_nodewrights_it_holds_back() {
        // `first` (sequencing: all) runs on gpu nodes only; `later` on cpu nodes waits for it to be
        // complete everywhere, so a gpu node finishing must wake `later` too.
        let first = nw("first", Some("gpu"), 100, Sequencing::All);
        let later = nw("later", Some("cpu"), 200, Sequencing::Node);
        let earlier = nw("earlier", Some("cpu"), 50, Sequencing::Node);
        let all = [first, later, earlier];
        assert_eq!(
            names(concerned(&all, &node("g1", "gpu"))),
            ["first", "later"]
        );
        // Per-node sequencing does not reach across nodes.
        let per_node = [
            nw("first", Some("gpu"), 100, Sequencing::Node),
            nw("later", Some("cpu"), 200, Sequencing::Node),
        ];
        assert_eq!(names(concerned(&per_node, &node("g1", "gpu"))), ["first"]);
    }
}
