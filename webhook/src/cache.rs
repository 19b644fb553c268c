//! Watch-backed view of the cluster for the rules that need it (policy existence, policy delete guard).
//!
//! Admission sits in the apiserver's request path, so it must never wait on a GET: two reflectors keep
//! what the rules need in memory, and `/readyz` stays false until both have listed once.
//!
//! Kept small on purpose (a NodeWright's status can hold every node's state): DeploymentPolicies are
//! watched as metadata only (only their names matter), and NodeWrights are watched untyped and trimmed
//! to their name and `spec.deploymentPolicy` before they are stored. Untyped also means one object
//! this version cannot decode never poisons the watch.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use nodewright_shared::api::{DeploymentPolicy, NodeWright};
use serde_json::Value;
use tracing::warn;

use crate::rules::cluster::ClusterView;

/// The webhook's cluster view, backed by two reflector stores.
#[derive(Clone)]
pub struct ClusterCache {
    policies: Store<PartialObjectMeta<DeploymentPolicy>>,
    nodewrights: Store<DynamicObject>,
}

/// Keeps only what the rules read: the name and `spec.deploymentPolicy`.
fn trim_nodewright(obj: &mut DynamicObject) {
    let policy = obj.data.pointer("/spec/deploymentPolicy").cloned();
    obj.data = match policy {
        Some(p) => serde_json::json!({ "spec": { "deploymentPolicy": p } }),
        None => Value::Null,
    };
    obj.metadata.managed_fields = None;
    obj.metadata.annotations = None;
    obj.metadata.labels = None;
}

impl ClusterCache {
    /// Starts both reflectors on the runtime; they run (and retry with backoff) until the process ends.
    pub fn start(client: kube::Client) -> Self {
        let (policies, policy_writer) = reflector::store::<PartialObjectMeta<DeploymentPolicy>>();
        let policy_stream = reflector::reflector(
            policy_writer,
            watcher::watcher(
                Api::<PartialObjectMeta<DeploymentPolicy>>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify(|m| m.metadata.managed_fields = None),
        );
        tokio::spawn(drain("deploymentpolicies", policy_stream));

        let resource = ApiResource::erase::<NodeWright>(&());
        let nw_writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
        let nodewrights = nw_writer.as_reader();
        let nw_stream = reflector::reflector(
            nw_writer,
            watcher::watcher(
                Api::<DynamicObject>::all_with(client, &resource),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify(trim_nodewright),
        );
        tokio::spawn(drain("nodewrights", nw_stream));
        ClusterCache {
            policies,
            nodewrights,
        }
    }

    /// Resolves once both stores have completed their first list.
    pub async fn synced(&self) -> bool {
        self.policies.wait_until_ready().await.is_ok()
            && self.nodewrights.wait_until_ready().await.is_ok()
    }
}

async fn drain<S, T, E>(what: &'static str, stream: S)
where
    S: futures::Stream<Item = Result<T, E>> + Send,
    E: std::fmt::Display,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        if let Err(e) = item {
            warn!(resource = what, error = %e, "watch error; the cache keeps its last state and retries");
        }
    }
}

impl ClusterView for ClusterCache {
    fn policy_exists(&self, name: &str) -> bool {
        self.policies.get(&ObjectRef::new(name)).is_some()
    }

    fn nodewrights_using_policy(&self, policy: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .nodewrights
            .state()
            .iter()
            .filter(|nw| {
                nw.data
                    .pointer("/spec/deploymentPolicy")
                    .and_then(Value::as_str)
                    == Some(policy)
            })
            .filter_map(|nw| nw.metadata.name.clone())
            .collect();
        names.sort();
        names
    }
}

/// A fixed view, for tests and benchmarks that run without a cluster.
#[derive(Debug, Clone, Default)]
pub struct StaticView {
    /// Existing policy names.
    pub policies: Vec<String>,
    /// (NodeWright, policy) pairs.
    pub users: Vec<(String, String)>,
}

impl ClusterView for StaticView {
    fn policy_exists(&self, name: &str) -> bool {
        self.policies.iter().any(|p| p == name)
    }

    fn nodewrights_using_policy(&self, policy: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .users
            .iter()
            .filter(|(_, p)| p == policy)
            .map(|(n, _)| n.clone())
            .collect();
        names.sort();
        names
    }
}

/// A shared, dynamically typed view.
pub type SharedView = Arc<dyn ClusterView>;
