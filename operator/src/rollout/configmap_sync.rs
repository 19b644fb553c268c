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
                    return Err(e
                        .context(format!("deleting stale ConfigMap {namespace}/{cm_name}"))
                        .into());
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
                return Err(e
                    .context(format!(
                        "deleting the old-named ConfigMap {namespace}/{legacy}"
                    ))
                    .into());
            }
        }
    }
    ctx.writer.memo().remember(memo_key, stamp);
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The ConfigMap acts against the mock API server: what is applied, what is left alone, what
    //! is deleted, and that an old-named node-metadata ConfigMap goes only when this NodeWright
    //! owns it.

    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::{Arc, Mutex};

    use serde_json::{Value, json};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::writes::mock;

    type Seen = Arc<Mutex<Vec<(String, String)>>>;

    fn nodewright(version: &str, config: &[(&str, &str)]) -> NodeWright {
        let package = nodewright_shared::api::Package {
            version: version.into(),
            image: "example.com/pkg".into(),
            config_map: config
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        };
        let mut nw = NodeWright::new(
            "nw",
            nodewright_shared::api::NodeWrightSpec {
                packages: BTreeMap::from([("a".to_owned(), package)]),
                ..Default::default()
            },
        );
        nw.metadata.uid = Some("uid-nw".into());
        nw
    }

    fn configmap(name: &str, data: &[(&str, &str)]) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "nodewright"},
            "data": data.iter().map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
                .collect::<serde_json::Map<_, _>>(),
        }))
        .expect("configmap")
    }

    /// A client that answers every write with its body (a 200) and logs the requests.
    fn recording(answer_get: Option<Value>) -> (kube::Client, tokio::task::JoinHandle<()>, Seen) {
        let seen = Seen::default();
        let log = seen.clone();
        let (client, server) = mock::serve(move |method, path, body| {
            log.lock()
                .expect("request log")
                .push((method.to_string(), path.to_owned()));
            match method.as_str() {
                "GET" => answer_get
                    .clone()
                    .map_or_else(|| (404, mock::not_found()), |found| (200, found)),
                "DELETE" => (
                    200,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Success"}),
                ),
                _ => (200, body),
            }
        });
        (client, server, seen)
    }

    async fn sync(
        nw: &NodeWright,
        existing: &[ConfigMap],
        hold: &BTreeSet<String>,
        in_use: &BTreeSet<String>,
    ) -> (Vec<String>, Vec<(String, String)>) {
        let (client, server, seen) = recording(None);
        let writer = Writer::new(client, "nodewright", CancellationToken::new());
        let changed = sync_package_configmaps(&writer, nw, existing, hold, in_use)
            .await
            .expect("sync");
        server.abort();
        let seen = seen.lock().expect("request log").clone();
        (changed, seen)
    }

    fn wanted_name(nw: &NodeWright) -> String {
        wanted_package_configmaps(nw)
            .into_keys()
            .next()
            .expect("one package ConfigMap")
    }

    #[tokio::test]
    async fn a_missing_configmap_is_applied_and_not_reported_as_changed() {
        let nw = nodewright("1.0.0", &[("k", "v")]);
        let name = wanted_name(&nw);
        let (changed, seen) = sync(&nw, &[], &BTreeSet::new(), &BTreeSet::new()).await;
        assert!(changed.is_empty(), "a new ConfigMap is no config change");
        assert_eq!(
            seen,
            vec![(
                "PATCH".to_owned(),
                format!("/api/v1/namespaces/nodewright/configmaps/{name}")
            )]
        );
    }

    #[tokio::test]
    async fn an_unchanged_configmap_costs_no_write() {
        let nw = nodewright("1.0.0", &[("k", "v")]);
        let name = wanted_name(&nw);
        let (changed, seen) = sync(
            &nw,
            &[configmap(&name, &[("k", "v")])],
            &BTreeSet::new(),
            &BTreeSet::new(),
        )
        .await;
        assert!(changed.is_empty());
        assert!(seen.is_empty(), "{seen:?}");
    }

    #[tokio::test]
    async fn changed_content_is_applied_and_reported_unless_held() {
        let nw = nodewright("1.0.0", &[("k", "new")]);
        let name = wanted_name(&nw);
        let existing = [configmap(&name, &[("k", "old")])];
        let (changed, seen) = sync(&nw, &existing, &BTreeSet::new(), &BTreeSet::new()).await;
        assert_eq!(changed, vec![name.clone()]);
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].0, "PATCH");

        let hold = BTreeSet::from([name.clone()]);
        let (changed, seen) = sync(&nw, &existing, &hold, &BTreeSet::new()).await;
        assert!(changed.is_empty());
        assert!(seen.is_empty(), "a held config change waits: {seen:?}");
    }

    /// After an upgrade the old version's ConfigMap goes, unless an unfinished Job still mounts it.
    #[tokio::test]
    async fn a_stale_configmap_is_deleted_unless_in_use() {
        let old = nodewright("1.0.0", &[("k", "v")]);
        let new = nodewright("2.0.0", &[("k", "v")]);
        let (old_name, new_name) = (wanted_name(&old), wanted_name(&new));
        assert_ne!(old_name, new_name);
        let existing = [
            configmap(&old_name, &[("k", "v")]),
            configmap(&new_name, &[("k", "v")]),
        ];
        let (_, seen) = sync(&new, &existing, &BTreeSet::new(), &BTreeSet::new()).await;
        assert_eq!(
            seen,
            vec![(
                "DELETE".to_owned(),
                format!("/api/v1/namespaces/nodewright/configmaps/{old_name}")
            )]
        );
        let in_use = BTreeSet::from([old_name]);
        let (_, seen) = sync(&new, &existing, &BTreeSet::new(), &in_use).await;
        assert!(seen.is_empty(), "{seen:?}");
    }

    fn node(name: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("node")
    }

    /// The old-named node-metadata ConfigMap is deleted only when this NodeWright owns it (under
    /// the old names two NodeWrights could share one), and the answer is remembered for the term.
    #[tokio::test]
    async fn a_legacy_node_metadata_configmap_is_deleted_only_when_owned() {
        let nw = nodewright("1.0.0", &[]);
        let legacy = naming::legacy_node_metadata_configmap_name("nw", "n1");
        for (owner_uid, deleted) in [("uid-nw", true), ("uid-other", false)] {
            let found = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": legacy, "namespace": "nodewright", "ownerReferences": [
                    {"apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
                     "name": "nw", "uid": owner_uid}]}});
            let (client, server, seen) = recording(Some(found));
            let ctx = crate::context::Context::over(client);
            delete_legacy_node_metadata(&ctx, &nw, &node("n1"))
                .await
                .expect("delete");
            delete_legacy_node_metadata(&ctx, &nw, &node("n1"))
                .await
                .expect("remembered");
            drop(ctx);
            server.abort();
            let seen = seen.lock().expect("request log").clone();
            let path = format!("/api/v1/namespaces/nodewright/configmaps/{legacy}");
            let mut expected = vec![("GET".to_owned(), path.clone())];
            if deleted {
                expected.push(("DELETE".to_owned(), path));
            }
            assert_eq!(seen, expected, "owner {owner_uid}");
        }
    }
}
