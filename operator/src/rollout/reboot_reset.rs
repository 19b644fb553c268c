//! The reset of rebooted nodes (REAPPLY_ON_REBOOT, upstream-operator.md §7.5), carried out: which
//! nodes rebooted and what a reset removes are decided in [`nodewright_core::rollout::reboots`].
//!
//! The reset is written before the new boot ID: a crash in between resets the node once more (its
//! state is already empty), whereas the other order could record the reboot and never reset.
//!
//! A NodeWright with `runtimeRequired` and `autoTaintNewNodes` also puts the runtime-required taint
//! back in the same write (upstream #273): a rebooted node whose packages run again must keep
//! workloads off until they are done, as a new node does; the taint is lifted again once every
//! runtime-required NodeWright is complete there.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_core::rollout::reboots::{current_ids, rebooted, reset_edit};
use nodewright_shared::api::NodeWright;
use tracing::info;

use super::auto_taint;
use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::{StatusRecords, StatusWrite, Unchanged};

/// With REAPPLY_ON_REBOOT: resets the rebooted nodes, then records the new boot IDs. Returns whether
/// any node was reset (the caller plans again on the fresh nodes).
pub async fn reset_rebooted(
    ctx: &Context,
    nodewright: &NodeWright,
    nodes: &[Arc<Node>],
) -> Result<bool, ReconcileError> {
    if !ctx.config.reapply_on_reboot {
        return Ok(false);
    }
    let name = nodewright.name_any();
    let previous = nodewright
        .status
        .as_ref()
        .map(|s| s.node_boot_ids.clone())
        .unwrap_or_default();
    let rebooted = rebooted(&previous, nodes);
    if rebooted.is_empty() {
        return Ok(false);
    }
    let taint = &ctx.config.jobs.runtime_required_taint;
    let retaint = auto_taint::wants_auto_taint(nodewright);
    for cached in rebooted {
        let node_name = cached.name_any();
        ctx.writer
            .write_node(cached, Unchanged::Believe, |node| {
                let mut edit = reset_edit(&name);
                if retaint && !auto_taint::has_taint(node, taint) {
                    edit.taints = Some(auto_taint::with_taint(node, taint));
                }
                Some(edit)
            })
            .await?;
        info!(nodewright = %name, node = %node_name, retaint, "node rebooted: reset its state (REAPPLY_ON_REBOOT)");
        ctx.events
            .on_node(
                cached,
                "Reboot",
                format!(
                    "node [{node_name}] rebooted: packages of [nodewright:{name}] are applied again"
                ),
                None,
            )
            .await;
    }
    // The new boot IDs are the record that these reboots were handled: written before the pass
    // plans (which ends it), so a crash before this write only repeats the resets above.
    let records = StatusRecords::new(format!("recording the boot IDs of NodeWright {name}")).map(
        "nodeBootIds",
        &previous,
        &current_ids(&previous, nodes),
    )?;
    ctx.writer
        .write_status(nodewright, StatusWrite::Records(records))
        .await?;
    Ok(true)
}
