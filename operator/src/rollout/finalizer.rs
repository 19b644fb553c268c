//! The finalizer `nodewright.nvidia.com/nodewright` (upstream-operator.md §7.3): added on first sight;
//! on deletion the NodeWright's marks are taken off its nodes (status annotation and label, its cordon
//! claim; the node state stays as the record of what is installed) before the finalizer is removed.
//! Jobs and ConfigMaps go with the NodeWright through their owner references.
//! Uninstall-enabled packages are uninstalled first: while one is still recorded on a node, the
//! rollout keeps running in deletion mode ([`nodewright_core::rollout::uninstall`]) and this cleanup waits.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Patch;
use kube::runtime::controller::Action;
use nodewright_core::node::cordon;
use nodewright_core::node::edit::NodeEdit;
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;
use serde_json::{Value, json};
use tracing::info;

use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::{Unchanged, failed};

/// Whether the NodeWright carries the finalizer.
pub fn has_finalizer(nodewright: &NodeWright) -> bool {
    nodewright.finalizers().iter().any(|f| f == keys::FINALIZER)
}

fn json_patch(ops: Value, what: &str) -> Result<json_patch::Patch, ReconcileError> {
    serde_json::from_value(ops).map_err(|source| ReconcileError::Json {
        what: what.to_owned(),
        source,
    })
}

/// Adds the finalizer (guarded by the resourceVersion: a concurrent edit is never overwritten).
pub async fn add(ctx: &Context, nodewright: &NodeWright) -> Result<(), ReconcileError> {
    let name = nodewright.name_any();
    let rv = nodewright.resource_version().unwrap_or_default();
    let op = if nodewright.metadata.finalizers.is_some() {
        json!({"op": "add", "path": "/metadata/finalizers/-", "value": keys::FINALIZER})
    } else {
        json!({"op": "add", "path": "/metadata/finalizers", "value": [keys::FINALIZER]})
    };
    let patch = json_patch(
        json!([{"op": "test", "path": "/metadata/resourceVersion", "value": rv}, op]),
        "finalizer patch",
    )?;
    ctx.writer
        .patch_nodewright(&name, &Patch::Json(patch))
        .await
        .map_err(failed(format!("adding the finalizer to NodeWright {name}")))?;
    info!(nodewright = %name, "added finalizer");
    Ok(())
}

/// What deleting `nodewright` removes from a node.
fn cleanup_edit(node: &Node, nodewright: &str) -> NodeEdit {
    let mut edit = NodeEdit::default();
    edit.remove_annotation(keys::node_status_key(nodewright));
    edit.remove_label(keys::node_status_key(nodewright));
    cordon::uncordon(&mut edit, node, nodewright);
    edit
}

/// Deletion: clean the nodes, then drop the finalizer.
pub async fn cleanup(ctx: &Context, nodewright: &NodeWright) -> Result<Action, ReconcileError> {
    let name = nodewright.name_any();
    if !has_finalizer(nodewright) {
        return Ok(Action::await_change());
    }
    for cached in ctx.nodes.state() {
        ctx.writer
            .write_node(&cached, Unchanged::Believe, |node| {
                Some(cleanup_edit(node, &name))
            })
            .await?;
        let patch = nodewright_core::node::conditions::remove_patch(&cached, &name);
        ctx.writer.patch_node_conditions(&cached, patch).await?;
    }
    let index = nodewright
        .finalizers()
        .iter()
        .position(|f| f == keys::FINALIZER)
        .unwrap_or_default();
    let rv = nodewright.resource_version().unwrap_or_default();
    let patch = json_patch(
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": keys::FINALIZER},
            {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
        ]),
        "finalizer removal",
    )?;
    match ctx
        .writer
        .patch_nodewright(&name, &Patch::Json(patch))
        .await
    {
        Ok(_) => info!(nodewright = %name, "nodes cleaned; removed finalizer"),
        Err(e) if e.code() == Some(404) => {}
        Err(e) => {
            return Err(e
                .context(format!("removing the finalizer of NodeWright {name}"))
                .into());
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_core::testing::node_with as node;

    #[test]
    fn deletion_releases_the_claim_but_never_an_administrators_cordon() {
        let claim = keys::cordon_key("gone");
        let admin = node(
            true,
            &[(&claim, "true"), (keys::CORDONED_BEFORE_ANNOTATION, "true")],
        );
        let edit = cleanup_edit(&admin, "gone");
        assert_eq!(edit.annotations.get(&claim), Some(&None));
        assert_eq!(edit.unschedulable, None, "the administrator's cordon stays");
        let ours = node(true, &[(&claim, "true")]);
        assert_eq!(cleanup_edit(&ours, "gone").unschedulable, Some(false));
    }

    #[test]
    fn the_runtime_required_cordon_survives_it() {
        let mark = keys::RUNTIME_REQUIRED_CORDON_ANNOTATION;
        let claim = keys::cordon_key("gone");
        for annotations in [
            vec![(mark, "true")],
            vec![(mark, "true"), (claim.as_str(), "true")],
        ] {
            let edit = cleanup_edit(&node(true, &annotations), "gone");
            assert_ne!(edit.unschedulable, Some(false), "{annotations:?}");
            assert!(!edit.annotations.contains_key(mark), "the mark stays");
        }
    }
}
