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
/// ones no package needs any more (an old version after an upgrade). Returns the names of the
/// ConfigMaps whose content changed.
pub async fn sync_package_configmaps(
    writer: &Writer,
    nodewright: &NodeWright,
    existing: &[ConfigMap],
    hold: &std::collections::BTreeSet<String>,
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
        if !wanted.contains_key(&cm_name) {
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
