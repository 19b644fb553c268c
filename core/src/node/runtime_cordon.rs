//! The persistent cordon of `runtimeRequiredCordonAfter` (upstream #401): a node whose
//! runtime-required taint is lifted is cordoned in the same write and marked with
//! [`keys::RUNTIME_REQUIRED_CORDON_ANNOTATION`], so that it never accepts workloads between its
//! packages finishing and a validator checking it.
//!
//! The mark belongs to no NodeWright: only an external actor (the validator) releases it, by
//! removing the mark and uncordoning in one patch. While the mark is there, no NodeWright's cordon
//! release uncordons the node ([`crate::node::cordon::release`]). A node found schedulable with the
//! mark still on it was uncordoned by someone else: the mark is stale and goes ([`clear_stale`]);
//! the node is not cordoned again.

use k8s_openapi::api::core::v1::Node;
use kube_core::ResourceExt;
use nodewright_shared::keys;

use crate::node::edit::NodeEdit;
use crate::node::is_unschedulable;

/// Whether the node carries the persistent cordon's mark (whatever `spec.unschedulable` says). The
/// key's presence counts, whatever its value, as upstream's `hasSkyhookCordon`: a mark edited by hand
/// still pins the node rather than letting a NodeWright's release uncordon it.
pub fn is_marked(node: &Node) -> bool {
    node.annotations()
        .contains_key(keys::RUNTIME_REQUIRED_CORDON_ANNOTATION)
}

/// Adds the persistent cordon to `edit`: the mark and `spec.unschedulable=true`. Called last when an
/// edit is built, so a cordon release computed earlier in the same edit cannot undo it.
pub fn hold(edit: &mut NodeEdit) {
    edit.annotate(keys::RUNTIME_REQUIRED_CORDON_ANNOTATION, "true");
    edit.unschedulable = Some(true);
}

/// Whether the node shows a stale mark: it carries the annotation (any value) but is schedulable,
/// i.e. someone uncordoned it without removing the mark.
pub fn is_stale(node: &Node) -> bool {
    is_marked(node) && !is_unschedulable(node)
}

/// Removes a stale mark in `edit` ([`is_stale`]); touches nothing else, so the node stays
/// schedulable. Nothing is added to `edit` for a node whose mark is not stale, so the caller writes
/// only when there is something to write.
pub fn clear_stale(edit: &mut NodeEdit, node: &Node) {
    if is_stale(node) {
        edit.remove_annotation(keys::RUNTIME_REQUIRED_CORDON_ANNOTATION);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::node_with;

    const MARK: &str = keys::RUNTIME_REQUIRED_CORDON_ANNOTATION;

    #[test]
    fn a_schedulable_node_with_the_mark_loses_only_the_mark() {
        let mut edit = NodeEdit::default();
        clear_stale(&mut edit, &node_with(false, &[(MARK, "true")]));
        assert_eq!(edit.annotations.get(MARK), Some(&None));
        assert_eq!(edit.unschedulable, None, "never cordoned again");
        assert!(edit.taints.is_none() && edit.labels.is_empty());
    }

    #[test]
    fn a_held_or_unmarked_node_is_left_alone() {
        for node in [
            node_with(true, &[(MARK, "true")]),
            node_with(false, &[]),
            node_with(true, &[]),
        ] {
            let mut edit = NodeEdit::default();
            clear_stale(&mut edit, &node);
            assert_eq!(edit, NodeEdit::default(), "{:?}", node.annotations());
        }
    }

    #[test]
    fn holding_cordons_and_marks() {
        let mut edit = NodeEdit {
            unschedulable: Some(false),
            ..NodeEdit::default()
        };
        hold(&mut edit);
        assert_eq!(edit.unschedulable, Some(true));
        assert_eq!(edit.annotations.get(MARK), Some(&Some("true".to_owned())));
        assert!(is_marked(&node_with(true, &[(MARK, "true")])));
        assert!(!is_marked(&node_with(true, &[])));
    }
}
