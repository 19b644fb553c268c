//! The rollout's ConfigMap acts: list a NodeWright's package ConfigMaps, bring them in line with its
//! packages, and apply a node's metadata ConfigMap before a Job mounts it. What they contain is
//! built by [`nodewright_core::jobs::configmaps`].

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use nodewright_core::jobs::configmaps::{
    NODE_META_LABEL, node_metadata_configmap, package_configmap, wanted_package_configmaps,
};
use nodewright_core::naming;
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;

use crate::error::ReconcileError;
use crate::writes::{Writer, failed};

/// The package ConfigMaps of the NodeWright: labelled with its name, not node-metadata ones (one
/// per node: listing those on every pass would cost a fleet-sized payload for nothing).
pub async fn list_package_configmaps(
    client: &kube::Client,
    namespace: &str,
    nodewright: &str,
) -> Result<Vec<ConfigMap>, ReconcileError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default().labels(&format!(
            "{}={},!{NODE_META_LABEL}",
            keys::NAME_LABEL,
            naming::label_value(nodewright)
        )))
        .await
        .map_err(ReconcileError::api(format!(
            "listing the ConfigMaps of NodeWright {nodewright}"
        )))?
        .items)
}

/// Creates or updates every package ConfigMap of the NodeWright (`existing`: as listed by
/// [`list_package_configmaps`]), except those named in `hold` (a config change that must wait), and deletes the
/// ones no package needs any more (an old version after an upgrade, a name an earlier operator
/// gave), except those in `in_use` (an unfinished Job may still mount them). Returns the names of
/// the ConfigMaps whose content changed.
pub async fn sync_package_configmaps(
    writer: &Writer,
    nodewright: &NodeWright,
    existing: &[ConfigMap],
    hold: &std::collections::BTreeSet<String>,
    in_use: &std::collections::BTreeSet<String>,
) -> Result<Vec<String>, ReconcileError> {
    let name = nodewright.name_any();
    let namespace = writer.namespace();
    let wanted = wanted_package_configmaps(nodewright);
    let mut changed = Vec::new();
    for (cm_name, (package, version, data)) in &wanted {
        if hold.contains(cm_name) {
            continue;
        }
        let current = existing
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(cm_name.as_str()));
        if current.and_then(|c| c.data.as_ref()) == Some(data) {
            continue;
        }
        let cm = package_configmap(nodewright, namespace, cm_name, package, version, data);
        writer
            .apply_configmap(cm_name, &cm)
            .await
            .map_err(failed(format!(
                "applying ConfigMap {namespace}/{cm_name} of NodeWright {name}"
            )))?;
        if current.is_some() {
            changed.push(cm_name.clone());
        }
    }
    for cm in existing {
        let cm_name = cm.name_any();
        if !wanted.contains_key(&cm_name) && !in_use.contains(&cm_name) {
            match writer.delete_configmap(&cm_name).await {
                Ok(()) => {}
                Err(e) if e.code() == Some(404) => {}
                Err(e) => {
                    return Err(
                        e.context(format!("deleting stale ConfigMap {namespace}/{cm_name}"))
                    );
                }
            }
        }
    }
    Ok(changed)
}

/// Applies the node-metadata ConfigMap of `node` (before a Job that mounts it is created), unless
/// this term already wrote the same content.
pub async fn apply_node_metadata(
    writer: &Writer,
    nodewright: &NodeWright,
    node: &Node,
    agent_image: &str,
) -> Result<(), ReconcileError> {
    let (cm_name, cm) = node_metadata_configmap(nodewright, node, writer.namespace(), agent_image)?;
    writer
        .apply_configmap_if_changed(&cm_name, &cm)
        .await
        .map_err(failed(format!(
            "applying ConfigMap {}/{cm_name}",
            writer.namespace()
        )))?;
    Ok(())
}

/// Deletes the node-metadata ConfigMap an earlier operator named `<nw>-<node>-metadata`
/// ([`naming::legacy_node_metadata_configmap_name`]) once no unfinished package Job of the
/// NodeWright on the node may still mount it, and only when this NodeWright owns it (under the old
/// names two NodeWrights could share one). Remembered per term: one GET per node and term.
pub async fn delete_legacy_node_metadata(
    ctx: &crate::context::Context,
    nodewright: &NodeWright,
    node: &Node,
) -> Result<(), ReconcileError> {
    let name = nodewright.name_any();
    let node_name = node.name_any();
    let memo_key = format!("legacy-node-meta/{name}/{node_name}");
    let stamp = crate::writes::memo::stamp(&nodewright.metadata.uid);
    if ctx.writer.memo().is_current(&memo_key, stamp) {
        return Ok(());
    }
    let label = naming::label_value(&name);
    let busy = ctx.jobs.state().iter().any(|j| {
        j.nodewright.as_ref() == Some(&label)
            && !j.interrupt
            && !nodewright_core::jobs::read::is_finished(j)
            && nodewright_core::jobs::read::node_of(j) == Some(node_name.as_str())
    });
    if busy {
        return Ok(());
    }
    let legacy = naming::legacy_node_metadata_configmap_name(&name, &node_name);
    let namespace = ctx.writer.namespace();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    let found = api
        .get_opt(&legacy)
        .await
        .map_err(ReconcileError::api(format!(
            "reading the old-named ConfigMap {namespace}/{legacy}"
        )))?;
    let ours = found.as_ref().is_some_and(|cm| {
        cm.owner_references()
            .iter()
            .any(|o| o.kind == "NodeWright" && Some(&o.uid) == nodewright.metadata.uid.as_ref())
    });
    if ours {
        match ctx.writer.delete_configmap(&legacy).await {
            Ok(()) => {
                tracing::info!(configmap = %legacy, "deleted the old-named node-metadata ConfigMap")
            }
            Err(e) if e.code() == Some(404) => {}
            Err(e) => {
                return Err(e.context(format!(
                    "deleting the old-named ConfigMap {namespace}/{legacy}"
                )));
            }
        }
    }
    ctx.writer.memo().remember(memo_key, stamp);
    Ok(())
}
