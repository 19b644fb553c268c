//! The ConfigMaps package Jobs mount (upstream-operator.md §3.3): one per package with `configMap`
//! files, and one node-metadata ConfigMap per (NodeWright, node) with the node's labels, annotations
//! and the package list, which the agent reads. Both are owned by the NodeWright (garbage-collected
//! with it) and written with server-side apply, so a write is idempotent and one call. Pure builders: the
//! rollout writes them ([`crate::rollout::configmaps`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;
use serde_json::{Map, Value, json};

use crate::error::ReconcileError;
use crate::naming;

/// Field manager of every server-side apply of the operator.
pub const FIELD_MANAGER: &str = "nodewright-operator";
/// Label of node-metadata ConfigMaps: the NodeWright's name.
pub const NODE_META_LABEL: &str = "nodewright.nvidia.com/node-meta";

fn owner(nodewright: &NodeWright) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: format!("{}/{}", keys::GROUP, keys::VERSION),
        kind: "NodeWright".to_owned(),
        name: nodewright.name_any(),
        uid: nodewright.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The package ConfigMaps a NodeWright needs: name → data.
pub fn wanted_package_configmaps(
    nodewright: &NodeWright,
) -> BTreeMap<String, (String, String, BTreeMap<String, String>)> {
    let name = nodewright.name_any();
    nodewright
        .spec
        .packages
        .iter()
        .filter(|(_, p)| !p.config_map.is_empty())
        .map(|(key, p)| {
            (
                naming::package_configmap_name(&name, key, &p.version),
                (key.clone(), p.version.clone(), p.config_map.clone()),
            )
        })
        .collect()
}

/// `packages.json` of the node-metadata ConfigMap (agent contract): the agent version (text after the
/// last `:` of the agent image, upstream's rule) and every package's identity and interrupts.
pub fn packages_json(
    nodewright: &NodeWright,
    agent_image: &str,
) -> Result<String, serde_json::Error> {
    let agent_version = agent_image
        .rsplit_once(':')
        .map(|(_, t)| t)
        .unwrap_or_default();
    let mut packages = Map::new();
    for (key, p) in &nodewright.spec.packages {
        let mut entry = Map::new();
        entry.insert("name".into(), json!(key));
        entry.insert("version".into(), json!(p.version));
        entry.insert("image".into(), json!(p.image));
        if let Some(o) = p.agent_image_override.as_ref().filter(|o| !o.is_empty()) {
            entry.insert("agentImageOverride".into(), json!(o));
        }
        if let Some(i) = &p.interrupt {
            entry.insert("interrupt".into(), serde_json::to_value(i)?);
        }
        if !p.config_interrupts.is_empty() {
            entry.insert(
                "configInterrupts".into(),
                serde_json::to_value(&p.config_interrupts)?,
            );
        }
        packages.insert(key.clone(), Value::Object(entry));
    }
    serde_json::to_string(&json!({"agentVersion": agent_version, "packages": packages}))
}

/// The package ConfigMap `cm_name` of `package` at `version` with `data` (labelled with the
/// NodeWright's name, owned by it).
pub fn package_configmap(
    nodewright: &NodeWright,
    namespace: &str,
    cm_name: &str,
    package: &str,
    version: &str,
    data: &BTreeMap<String, String>,
) -> ConfigMap {
    let name = nodewright.name_any();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(cm_name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                keys::NAME_LABEL.to_owned(),
                naming::label_value(&name),
            )])),
            annotations: Some(BTreeMap::from([
                (keys::NAME_LABEL.to_owned(), name.clone()),
                (format!("{}Package.Name", keys::PREFIX), package.to_owned()),
                (
                    format!("{}Package.Version", keys::PREFIX),
                    version.to_owned(),
                ),
            ])),
            owner_references: owner(nodewright).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(data.clone()),
        ..ConfigMap::default()
    }
}

/// The node-metadata ConfigMap of `node` for `nodewright`: the node's labels and annotations and
/// `packages.json`. Returns its name and content.
pub fn node_metadata_configmap(
    nodewright: &NodeWright,
    node: &Node,
    namespace: &str,
    agent_image: &str,
) -> Result<(String, ConfigMap), ReconcileError> {
    let name = nodewright.name_any();
    let node_name = node.name_any();
    let cm_name = naming::node_metadata_configmap_name(&name, &node_name);
    let json_err = |what: &str| {
        let what = format!("{what} of node {node_name} for NodeWright {name}");
        move |source| ReconcileError::Json { what, source }
    };
    let data = BTreeMap::from([
        (
            "annotations.json".to_owned(),
            serde_json::to_string(node.annotations()).map_err(json_err("annotations"))?,
        ),
        (
            "labels.json".to_owned(),
            serde_json::to_string(node.labels()).map_err(json_err("labels"))?,
        ),
        (
            "packages.json".to_owned(),
            packages_json(nodewright, agent_image).map_err(json_err("packages.json"))?,
        ),
    ]);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(cm_name.clone()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([
                (keys::NAME_LABEL.to_owned(), naming::label_value(&name)),
                (NODE_META_LABEL.to_owned(), naming::label_value(&name)),
            ])),
            annotations: Some(BTreeMap::from([
                (keys::NAME_LABEL.to_owned(), name.clone()),
                (format!("{}Node.name", keys::PREFIX), node_name.clone()),
            ])),
            owner_references: owner(nodewright).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    };
    Ok((cm_name, cm))
}
