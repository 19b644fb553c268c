//! The NodeWright store of the rollout (DESIGN §4.5: caches trimmed, watches scoped).
//!
//! A NodeWright's status carries every selected node's records (`status.nodeState`): on a fleet,
//! a megabyte of JSON that the operator writes but never reads back (each pass derives the records
//! from the nodes themselves). The store keeps the NodeWright without them, and the status write
//! compares them by a stamp of what it last wrote ([`crate::writes::Writer::status_unchanged`]).
//!
//! Triggers: a change of the spec, metadata or the status fields a pass reads as inputs (batch
//! states, config updates, boot IDs) wakes the rollout; the pass's own status write (node counts,
//! conditions, records) does not, so a pass does not wake itself.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use nodewright_shared::api::NodeWright;

/// Drops what the operator never reads back from a stored NodeWright.
pub fn trim(nodewright: &mut NodeWright) {
    nodewright.metadata.managed_fields = None;
    if let Some(status) = nodewright.status.as_mut() {
        status.node_state.clear();
    }
}

/// Hash of what should wake a pass; equal hashes are not forwarded as triggers.
pub fn trigger_relevant(nodewright: &NodeWright) -> Option<u64> {
    let mut h = DefaultHasher::new();
    let m = &nodewright.metadata;
    (
        &m.name,
        &m.uid,
        m.generation,
        &m.labels,
        &m.annotations,
        &m.finalizers,
        m.deletion_timestamp.is_some(),
    )
        .hash(&mut h);
    if let Some(status) = &nodewright.status {
        status.node_boot_ids.hash(&mut h);
        status.config_updates.hash(&mut h);
        crate::writes::memo::stamp_json(
            &status
                .compartment_statuses
                .iter()
                .map(|(name, c)| (name, &c.batch_state))
                .collect::<Vec<_>>(),
        )
        .hash(&mut h);
    }
    Some(h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{NodeWrightSpec, NodeWrightStatus, Status};
    use nodewright_shared::node_state::NodeState;

    #[test]
    fn the_records_are_not_kept_and_the_pass_outputs_do_not_trigger() {
        let mut nw = NodeWright::new("nw", NodeWrightSpec::default());
        nw.status = Some(NodeWrightStatus {
            node_state: [("n1".to_owned(), NodeState::default())].into(),
            ..NodeWrightStatus::default()
        });
        let before = trigger_relevant(&nw);
        trim(&mut nw);
        assert!(nw.status.as_ref().is_some_and(|s| s.node_state.is_empty()));
        // The pass's own outputs: no trigger.
        if let Some(s) = nw.status.as_mut() {
            s.status = Some(Status::InProgress);
            s.node_status.insert("n1".into(), Status::InProgress);
            s.complete_nodes = "0/1".into();
        }
        assert_eq!(trigger_relevant(&nw), before);
        // An input of the next pass (a batch state reset, a pause): a trigger.
        let mut reset = nw.clone();
        if let Some(s) = reset.status.as_mut() {
            s.compartment_statuses
                .entry("__default__".into())
                .or_default()
                .batch_state = Some(Default::default());
        }
        assert_ne!(trigger_relevant(&reset), before);
        let mut paused = nw.clone();
        paused.metadata.annotations =
            Some([("nodewright.nvidia.com/pause".to_owned(), "true".to_owned())].into());
        assert_ne!(trigger_relevant(&paused), before);
    }
}
