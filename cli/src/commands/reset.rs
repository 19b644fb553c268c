//! `reset NAME` (every node) and `deployment-policy reset NAME` (batch state only).

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_core::node::cordon::uncordon;
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::node::state::parse_state;
use nodewright_core::rollout::batches;
use nodewright_core::rollout::reboots::reset_edit;
use nodewright_shared::api::NodeWrightStatus;
use nodewright_shared::keys;
use serde_json::{Map, Value, json};

use crate::args::{DpResetArgs, ResetArgs};
use crate::cluster;
use crate::context::Ctx;
use crate::error::Result;
use crate::prompt::confirm;
use crate::summary::has_records;
use crate::writes::Writer;

/// What resetting `nodewright` removes from `node`: its node state and status marks (the
/// operator's own reset edit), its version mark, and its cordon (the node becomes schedulable
/// again unless another NodeWright holds a cordon on it or it was cordoned before the first
/// NodeWright cordoned it, `nodewright.nvidia.com/cordonedBefore`).
pub fn reset_node_edit(node: &Node, nodewright: &str) -> NodeEdit {
    let mut edit = reset_edit(nodewright);
    edit.remove_annotation(keys::node_version_key(nodewright));
    uncordon(&mut edit, node, nodewright);
    edit
}

/// Resets `nodewright` on each of `nodes` ([`reset_node_edit`]).
pub async fn reset_nodes(writer: &mut Writer<'_>, nodes: &[&Node], nodewright: &str) -> Result<()> {
    for node in nodes {
        writer
            .edit_node(
                &node.name_any(),
                &format!("reset NodeWright {nodewright} (node state, status, version and cordon)"),
                |n| Some(reset_node_edit(n, nodewright)),
            )
            .await?;
    }
    Ok(())
}

/// The status patch that resets the batch state of every compartment; `full` (a reset of every
/// node): batch 1 from nothing, and `SKYHOOK_NODE_ORDER` from 0 again. Otherwise the checkpoints
/// stay at the compartment's complete and failed nodes, so those never count as batch 1's outcome.
fn batch_reset_patch(status: &NodeWrightStatus, full: bool) -> Option<Value> {
    let mut compartments = Map::new();
    for (name, c) in &status.compartment_statuses {
        let Some(b) = &c.batch_state else { continue };
        let fresh = if full {
            batches::initial(0, 0)
        } else {
            batches::initial(
                usize::try_from(c.completed).unwrap_or(0),
                usize::try_from(b.failed_nodes).unwrap_or(0),
            )
        };
        compartments.insert(
            name.clone(),
            json!({"batchState": serde_json::to_value(fresh).unwrap_or(Value::Null)}),
        );
    }
    let mut patch = Map::new();
    if !compartments.is_empty() {
        patch.insert("compartmentStatuses".into(), Value::Object(compartments));
    }
    if full {
        patch.insert("nodeOrderOffset".into(), json!(0));
        patch.insert("nodePriority".into(), Value::Null);
    }
    (!patch.is_empty()).then(|| json!({"status": patch}))
}

/// Runs `reset NAME`.
pub async fn run(ctx: &Ctx, args: &ResetArgs) -> Result<()> {
    let name = &args.name;
    let nw = cluster::nodewright(ctx, name).await?;
    let nodes = cluster::nodes(ctx).await?;
    let with_state: Vec<&Node> = nodes.iter().filter(|n| has_records(n, name)).collect();
    let mut writer = Writer::new(ctx);
    let listing: Vec<String> = with_state
        .iter()
        .map(|n| {
            let packages = parse_state(n, name).map_or(0, |s| s.iter().count());
            format!("{} ({packages} package records)", n.name_any())
        })
        .collect();
    writer.note(if listing.is_empty() {
        format!("NodeWright {name} has no state on any node")
    } else {
        format!(
            "NodeWright {name} has state on {} node(s): {}",
            listing.len(),
            listing.join(", ")
        )
    });
    let status_patch = (!args.skip_batch_reset)
        .then(|| batch_reset_patch(&nw.status.clone().unwrap_or_default(), true))
        .flatten();
    if with_state.is_empty() && status_patch.is_none() {
        return writer.print(ctx.format());
    }
    if !ctx.dry_run() {
        confirm(
            args.confirm.yes,
            &format!("reset NodeWright {name}"),
            &format!(
                "Reset NodeWright {name} on {} node(s)? Every package runs again from the start there.",
                with_state.len()
            ),
        )?;
    }
    reset_nodes(&mut writer, &with_state, name).await?;
    if let Some(patch) = status_patch {
        writer
            .patch_nodewright_status(
                name,
                "reset the batch state (batch 1) and the node order",
                patch,
            )
            .await?;
    }
    writer.print(ctx.format())
}

/// Runs `deployment-policy reset NAME`.
pub async fn run_dp(ctx: &Ctx, args: &DpResetArgs) -> Result<()> {
    let name = &args.name;
    let nw = cluster::nodewright(ctx, name).await?;
    let status = nw.status.clone().unwrap_or_default();
    let mut writer = Writer::new(ctx);
    for (c, s) in &status.compartment_statuses {
        if let Some(b) = &s.batch_state {
            writer.note(format!(
                "compartment {c}: batch {}, {} complete, {} failed, {} consecutive failed batches{}",
                b.current_batch,
                s.completed,
                b.failed_nodes,
                b.consecutive_failures,
                if b.should_stop { ", stopped" } else { "" }
            ));
        }
    }
    let Some(patch) = batch_reset_patch(&status, false) else {
        writer.note(format!(
            "NodeWright {name} has no batch state to reset (no compartment with a strategy has started)"
        ));
        return writer.print(ctx.format());
    };
    if !ctx.dry_run() {
        confirm(
            args.confirm.yes,
            &format!("reset the batch state of NodeWright {name}"),
            &format!(
                "Reset the batch state of NodeWright {name} (its rollout goes on from batch 1)?"
            ),
        )?;
    }
    writer
        .patch_nodewright_status(name, "reset the batch state of every compartment", patch)
        .await?;
    writer.print(ctx.format())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::testing::node_with as node;

    #[test]
    fn a_reset_releases_the_claim_but_never_an_administrators_cordon() {
        let claim = keys::cordon_key("gpu");
        let admin = node(
            true,
            &[(&claim, "true"), (keys::CORDONED_BEFORE_ANNOTATION, "true")],
        );
        let edit = reset_node_edit(&admin, "gpu");
        assert_eq!(edit.annotations.get(&claim), Some(&None));
        assert_eq!(
            edit.annotations.get(keys::CORDONED_BEFORE_ANNOTATION),
            Some(&None)
        );
        assert_eq!(edit.unschedulable, None, "the administrator's cordon stays");
        let ours = node(true, &[(&claim, "true")]);
        assert_eq!(reset_node_edit(&ours, "gpu").unschedulable, Some(false));
    }

    #[test]
    fn the_runtime_required_cordon_survives_it() {
        let mark = keys::RUNTIME_REQUIRED_CORDON_ANNOTATION;
        let claim = keys::cordon_key("gpu");
        for annotations in [
            vec![(mark, "true")],
            vec![(mark, "true"), (claim.as_str(), "true")],
        ] {
            let edit = reset_node_edit(&node(true, &annotations), "gpu");
            assert_ne!(edit.unschedulable, Some(false), "{annotations:?}");
            assert!(!edit.annotations.contains_key(mark), "the mark stays");
        }
    }
}
