//! The ConfigMaps package Jobs mount (upstream-operator.md §3.3): one per package with `configMap`
//! files, and one node-metadata ConfigMap per (NodeWright, node) with the node's labels, annotations
//! and the package list, which the agent reads. Both are owned by the NodeWright (garbage-collected
//! with it) and written with server-side apply, so a write is idempotent and one call. Pure builders: the
//! rollout writes them (the operator's `rollout::configmaps`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube_core::ResourceExt;
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;
use serde_json::{Map, Value, json};

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

/// `packages.json` of the node-metadata ConfigMap (agent contract): the agent version
/// ([`agent_version`]) and every package's identity and interrupts.
pub fn packages_json(
    nodewright: &NodeWright,
    agent_image: &str,
) -> Result<String, serde_json::Error> {
    let agent_version = agent_version(agent_image);
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

/// The agent version recorded in `packages.json`: the image's tag (upstream records the text after
/// the last `:`, which for an image pinned by digest, `agent:v6.4.1@sha256:…`, is the digest's hex,
/// not a version). Without a tag, the digest (`sha256:…`) is the only true name of what runs; a `:`
/// before the last `/` is a registry port, not a tag.
pub fn agent_version(agent_image: &str) -> &str {
    let (name, digest) = match agent_image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (agent_image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        Some((_, tag)) if !tag.is_empty() => tag,
        _ => digest.unwrap_or_default(),
    }
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

/// Whether a node label or annotation key is the operator's own per-stage bookkeeping
/// (`nodewright.nvidia.com/nodeState_<nw>`, `status_<nw>`): it changes with every stage, says
/// nothing a package needs (a package is told its stage by its arguments), and would be stale in
/// the ConfigMap by the time the Job reads it. Leaving it out keeps a node's metadata ConfigMap
/// unchanged across the stages of a rollout, so it is written once instead of before every Job.
pub fn is_stage_bookkeeping(key: &str) -> bool {
    key.strip_prefix(keys::PREFIX)
        .is_some_and(|k| k.starts_with("nodeState_") || k.starts_with("status_"))
}

fn without_bookkeeping(map: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    map.iter()
        .filter(|(k, _)| !is_stage_bookkeeping(k))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Why a ConfigMap could not be built: a part of its content did not serialise to JSON.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct ConfigMapError {
    /// What was being serialised, naming the node and the NodeWright.
    pub what: String,
    /// The error.
    #[source]
    pub source: serde_json::Error,
}

/// The node-metadata ConfigMap of `node` for `nodewright`: the node's labels and annotations (but
/// the operator's per-stage bookkeeping, [`is_stage_bookkeeping`]) and `packages.json`. Returns its
/// name and content.
pub fn node_metadata_configmap(
    nodewright: &NodeWright,
    node: &Node,
    namespace: &str,
    agent_image: &str,
) -> Result<(String, ConfigMap), ConfigMapError> {
    let name = nodewright.name_any();
    let node_name = node.name_any();
    let cm_name = naming::node_metadata_configmap_name(&name, &node_name);
    let json_err = |what: &str| {
        let what = format!("{what} of node {node_name} for NodeWright {name}");
        move |source| ConfigMapError { what, source }
    };
    let data = BTreeMap::from([
        (
            "annotations.json".to_owned(),
            serde_json::to_string(&without_bookkeeping(node.annotations()))
                .map_err(json_err("annotations"))?,
        ),
        (
            "labels.json".to_owned(),
            serde_json::to_string(&without_bookkeeping(node.labels()))
                .map_err(json_err("labels"))?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn agent_version_is_the_tag_even_when_a_digest_pins_the_image() {
        for (image, version) in [
            (crate::jobs::DEFAULT_AGENT_IMAGE, "v6.4.1"),
            ("ghcr.io/nvidia/skyhook/agent:6.2.0", "6.2.0"),
            ("registry:5000/agent:7", "7"),
            ("registry:5000/agent@sha256:abc", "sha256:abc"),
            ("agent@sha256:abc", "sha256:abc"),
            ("registry:5000/agent", ""),
        ] {
            assert_eq!(agent_version(image), version, "{image}");
        }
        let json = packages_json(
            &crate::jobs::test_support::nodewright(),
            crate::jobs::DEFAULT_AGENT_IMAGE,
        )
        .expect("packages.json");
        let value: serde_json::Value = serde_json::from_str(&json).expect("json");
        assert_eq!(value["agentVersion"], "v6.4.1");
    }

    #[test]
    fn node_metadata_leaves_out_only_the_per_stage_bookkeeping() {
        let nw = crate::jobs::test_support::nodewright();
        let mut node = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        let annotations = [
            ("nodewright.nvidia.com/nodeState_gpu", "{}"),
            ("nodewright.nvidia.com/status_gpu", "in_progress"),
            ("nodewright.nvidia.com/cordon_gpu", "true"),
            ("team.example.com/rack", "r12"),
        ];
        node.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        node.metadata.labels = Some(
            [
                ("nodewright.nvidia.com/status_gpu", "in_progress"),
                ("pool", "gpu"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        );
        let (_, cm) = node_metadata_configmap(&nw, &node, "ns", "agent:1").expect("cm");
        let data = cm.data.expect("data");
        let annotations: BTreeMap<String, String> =
            serde_json::from_str(&data["annotations.json"]).expect("annotations.json");
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["nodewright.nvidia.com/cordon_gpu", "team.example.com/rack"]
        );
        let labels: BTreeMap<String, String> =
            serde_json::from_str(&data["labels.json"]).expect("labels.json");
        assert_eq!(labels.keys().collect::<Vec<_>>(), ["pool"]);

        // A new stage record changes nothing in it: the same content, no new write.
        let before = serde_json::to_string(
            &node_metadata_configmap(&nw, &node, "ns", "agent:1")
                .expect("cm")
                .1,
        );
        if let Some(a) = node.metadata.annotations.as_mut() {
            a.insert(
                "nodewright.nvidia.com/nodeState_gpu".into(),
                r#"{"x":1}"#.into(),
            );
        }
        let after = serde_json::to_string(
            &node_metadata_configmap(&nw, &node, "ns", "agent:1")
                .expect("cm")
                .1,
        );
        assert_eq!(before.ok(), after.ok());
    }
}
