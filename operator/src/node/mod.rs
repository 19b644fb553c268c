//! Pure node logic: a NodeWright's per-node state as read from its annotation, the edits the
//! operator makes to a node (annotations, labels, taints, cordon) as a guarded JSON Patch, cordon
//! ownership and drain eligibility, and the node conditions. Writing them is [`crate::writes`]'s.

pub(crate) mod conditions;
pub(crate) mod cordon;
pub(crate) mod edit;
pub(crate) mod record;
pub(crate) mod state;
