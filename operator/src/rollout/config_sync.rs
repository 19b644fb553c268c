//! Config updates carried out (upstream-operator.md §2.10): the changes detected by
//! [`nodewright_core::rollout::config_updates`] recorded in the status, the reruns queued on the
//! nodes, then the package ConfigMaps written.
//!
//! Order of writes, so that a crash never loses a change: `status.configUpdates`, then the queued
//! node records, then the ConfigMap itself (the ConfigMap still differing from the spec is what makes
//! the next pass redo the first two, which are idempotent).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_core::jobs::read;
use nodewright_core::naming;
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::node::state::parse_state;
use nodewright_core::rollout::config_updates::{Detected, detect, queue};
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;
use nodewright_shared::node_state::NodeState;

use super::configmap_sync;
use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::memo;
use crate::writes::{StatusRecords, StatusWrite, Unchanged};

/// Detects config changes ([`detect`]), records them (`status.configUpdates`, in the API and in
/// `nodewright`), queues the reruns on `nodes` (the NodeWright's selected nodes), then writes the
/// package ConfigMaps. A change is held back (its ConfigMap not written) while a node is inside that
/// package's interrupt. Returns whether `status.configUpdates` was written (the caller then ends the
/// pass: the status it computed would be for the object as it was before that write).
pub async fn sync(
    ctx: &Context,
    nodewright: &mut NodeWright,
    nodes: &[Arc<Node>],
) -> Result<bool, ReconcileError> {
    let name = nodewright.name_any();
    let namespace = ctx.config.jobs.namespace.as_str();
    // A generation whose ConfigMaps this term brought in line with no change pending needs no
    // LIST on every pass (the memo expires, so a ConfigMap edited behind the operator's back is
    // still caught).
    let memo_key = format!("package-configmaps/{name}");
    let memo_stamp = memo::stamp((&nodewright.metadata.uid, nodewright.metadata.generation));
    if ctx.writer.memo().is_current(&memo_key, memo_stamp) {
        return Ok(false);
    }
    let existing = configmap_sync::list_package_configmaps(&ctx.client, namespace, &name).await?;
    let previous = nodewright
        .status
        .as_ref()
        .map(|s| s.config_updates.clone())
        .unwrap_or_default();
    let states: Vec<NodeState> = nodes.iter().filter_map(|n| parse_state(n, &name)).collect();
    let Detected {
        updates,
        changes,
        hold,
    } = detect(nodewright, &existing, &states);
    let written = updates != previous;
    if written {
        // The record comes first (see the module doc): the new updates in the status.
        let records = StatusRecords::new(format!(
            "recording the config updates of NodeWright {name}"
        ))
        .map("configUpdates", &previous, &updates)?;
        ctx.writer
            .write_status(nodewright, StatusWrite::Records(records))
            .await?;
        let mut status = nodewright.status.clone().unwrap_or_default();
        status.config_updates = updates;
        nodewright.status = Some(status);
    }
    for node in nodes {
        queue_on_node(ctx, &name, node, &changes).await?;
    }
    // ConfigMaps under the names earlier operators gave them stay while an unfinished Job of that
    // package version may still mount them (deleting one holds a pending pod in ContainerCreating).
    let label = naming::label_value(&name);
    let in_use: BTreeSet<String> = ctx
        .jobs
        .state()
        .iter()
        .filter(|j| j.nodewright.as_ref() == Some(&label) && !read::is_finished(j))
        .filter_map(|j| read::package_of(j))
        .map(|p| naming::legacy_package_configmap_name(&name, &p.name, &p.version))
        .collect();
    let lingering = existing.iter().any(|c| in_use.contains(&c.name_any()));
    configmap_sync::sync_package_configmaps(&ctx.writer, nodewright, &existing, &hold, &in_use)
        .await?;
    if !written && hold.is_empty() && changes.is_empty() && !lingering {
        ctx.writer.memo().remember(memo_key, memo_stamp);
    }
    Ok(written)
}

/// Queues the reruns of `changes` (package, version) in the node's state.
async fn queue_on_node(
    ctx: &Context,
    nodewright: &str,
    node: &Node,
    changes: &[(String, String)],
) -> Result<(), ReconcileError> {
    if changes.is_empty() {
        return Ok(());
    }
    ctx.writer
        .write_node(node, Unchanged::Believe, |node| {
            let mut state = parse_state(node, nodewright)?;
            let mut changed = false;
            for (package, version) in changes {
                changed |= queue(&mut state, package, version);
            }
            changed.then(|| {
                let mut edit = NodeEdit::default();
                edit.annotate(keys::node_state_key(nodewright), state.to_annotation());
                edit
            })
        })
        .await?;
    Ok(())
}
