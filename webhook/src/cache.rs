//! Watch-backed view of the cluster for the rules that need it (policy existence, policy delete guard,
//! the blast-radius warnings).
//!
//! Admission sits in the apiserver's request path, so it must never wait on a GET: three reflectors
//! keep what the rules need in memory, and `/readyz` stays false until all have listed once.
//!
//! Kept small on purpose (a NodeWright's status can hold every node's state, a node's annotations
//! every NodeWright's): DeploymentPolicies are watched untyped without their status and managed
//! fields (their specs are small; the warnings count batches from them), NodeWrights untyped and
//! trimmed to their name and `spec.deploymentPolicy`, and nodes as metadata only, trimmed to their
//! name and labels (what the operator's node selection reads). Untyped also means one object this
//! version cannot decode never poisons the watch.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use nodewright_core::rollout::selection::NodeSelection;
use nodewright_shared::api::{DeploymentPolicy, NodeWright};
use serde_json::Value;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::listed;

use crate::rules::cluster::{ClusterView, PolicyAtSource, PolicyLookup};
use crate::rules::env::EnvNames;

/// The webhook's cluster view, backed by three reflector stores.
#[derive(Clone)]
pub struct ClusterCache {
    policies: Store<DynamicObject>,
    /// DeploymentPolicies at the source, for the one read a policy the store has not seen yet
    /// costs ([`ClusterView::look_up_policy`]).
    policy_api: Api<DynamicObject>,
    nodewrights: Store<DynamicObject>,
    nodes: Store<PartialObjectMeta<Node>>,
    /// The policy and NodeWright stores have listed ([`listed`]: any number of waiters).
    policies_listed: watch::Receiver<bool>,
    nodewrights_listed: watch::Receiver<bool>,
    /// The node store has listed. Readiness does not wait for it: the nodes only feed warnings,
    /// and admission (the emergency pause among it) must not depend on them, e.g. when the
    /// webhook may not list nodes (an older ClusterRole); until then no blast-radius warning.
    nodes_listed: watch::Receiver<bool>,
    /// Which environment variable names the kube-apiserver accepts ([`follow_server_version`]):
    /// [`ENV_NAMES_UNKNOWN`] until its version has been read, then strict or relaxed.
    env_names: Arc<std::sync::atomic::AtomicU8>,
}

/// How often the apiserver's version is read again: a control-plane upgrade (1.31 to 1.32) changes
/// which environment variable names it accepts.
const VERSION_RECHECK: std::time::Duration = std::time::Duration::from_secs(600);
/// [`ClusterCache::env_names`] before the apiserver's version was read.
const ENV_NAMES_UNKNOWN: u8 = 0;
const ENV_NAMES_STRICT: u8 = 1;
const ENV_NAMES_RELAXED: u8 = 2;
/// How soon a failed read of the version is retried.
const VERSION_RETRY: std::time::Duration = std::time::Duration::from_secs(10);
/// How long admission waits for the read of a DeploymentPolicy the store has not seen: well within
/// the apiserver's webhook timeout (the chart's `timeoutSeconds`), so a slow read answers "not
/// found" instead of failing the request.
const POLICY_LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads the kube-apiserver's `/version` now and every [`VERSION_RECHECK`], and records whether it
/// accepts the relaxed environment variable names. Until the first read succeeds (and when the
/// version is not one to reason about), the strict names, which every supported minor accepts, are
/// required.
async fn follow_server_version(client: kube::Client, env_names: Arc<std::sync::atomic::AtomicU8>) {
    let mut known: Option<EnvNames> = None;
    loop {
        let wait = match client.apiserver_version().await {
            Ok(info) => {
                let rule = EnvNames::for_server(&info.major, &info.minor);
                if rule.is_none() {
                    warn!(
                        kubernetes = %info.git_version,
                        "unexpected kube-apiserver version; package environment variable names are checked with the rule every supported minor accepts"
                    );
                }
                let rule = rule.unwrap_or_default();
                if known != Some(rule) {
                    info!(kubernetes = %info.git_version, env_names = ?rule, "package environment variable names are checked as this kube-apiserver checks them");
                    known = Some(rule);
                }
                let value = match rule {
                    EnvNames::Strict => ENV_NAMES_STRICT,
                    EnvNames::Relaxed => ENV_NAMES_RELAXED,
                };
                env_names.store(value, std::sync::atomic::Ordering::SeqCst);
                VERSION_RECHECK
            }
            Err(e) => {
                warn!(error = %e, "cannot read the kube-apiserver's version; package environment variable names are checked with the rule every supported minor accepts until it can");
                VERSION_RETRY
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// Keeps a DeploymentPolicy's spec and name.
fn trim_policy(obj: &mut DynamicObject) {
    if let Some(map) = obj.data.as_object_mut() {
        map.retain(|k, _| k == "spec");
    }
    obj.metadata = ObjectMeta {
        name: obj.metadata.name.take(),
        resource_version: obj.metadata.resource_version.take(),
        ..ObjectMeta::default()
    };
}

/// Keeps a node's name and labels: what selecting nodes reads (5,000 nodes stay a few MiB).
fn trim_node(node: &mut PartialObjectMeta<Node>) {
    node.metadata = ObjectMeta {
        name: node.metadata.name.take(),
        labels: node.metadata.labels.take(),
        resource_version: node.metadata.resource_version.take(),
        ..ObjectMeta::default()
    };
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
        let env_names = Arc::new(std::sync::atomic::AtomicU8::new(ENV_NAMES_UNKNOWN));
        tokio::spawn(follow_server_version(client.clone(), env_names.clone()));
        let policy_resource = ApiResource::erase::<DeploymentPolicy>(&());
        let policy_writer = reflector::store::Writer::<DynamicObject>::new(policy_resource.clone());
        let policies = policy_writer.as_reader();
        let policy_api = Api::<DynamicObject>::all_with(client.clone(), &policy_resource);
        let policy_stream = reflector::reflector(
            policy_writer,
            watcher::watcher(policy_api.clone(), watcher::Config::default())
                .default_backoff()
                .modify(trim_policy),
        );
        tokio::spawn(drain("deploymentpolicies", policy_stream));

        let (nodes, node_writer) = reflector::store::<PartialObjectMeta<Node>>();
        let node_stream = reflector::reflector(
            node_writer,
            watcher::watcher(
                Api::<PartialObjectMeta<Node>>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify(trim_node),
        );
        tokio::spawn(drain("nodes", node_stream));

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
            policies_listed: listed::flag(policies.clone()),
            nodewrights_listed: listed::flag(nodewrights.clone()),
            nodes_listed: listed::flag(nodes.clone()),
            policies,
            policy_api,
            nodewrights,
            nodes,
            env_names,
        }
    }

    /// Resolves once the stores admission depends on (policies, NodeWrights) have completed their
    /// first list and the apiserver's version has been read (which environment variable names are
    /// admitted depends on it).
    pub async fn synced(&self) -> bool {
        let synced = listed::wait(&self.policies_listed).await
            && listed::wait(&self.nodewrights_listed).await;
        while self.env_names.load(std::sync::atomic::Ordering::SeqCst) == ENV_NAMES_UNKNOWN {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        synced
    }

    /// Resolves once the node store has listed too (tests and tools that want the warnings).
    pub async fn nodes_synced(&self) -> bool {
        listed::wait(&self.nodes_listed).await
    }

    /// Nodes in the cache.
    pub fn node_count(&self) -> usize {
        self.nodes.state().len()
    }

    /// The DeploymentPolicy `name` as stored (policies are few: a scan, no keyed lookup needs the
    /// dynamic type).
    fn stored_policy(&self, name: &str) -> Option<Arc<DynamicObject>> {
        self.policies
            .state()
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
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

/// The DeploymentPolicy `name` from its stored (trimmed) form; `None` when its spec does not
/// decode.
fn as_policy(name: &str, stored: &DynamicObject) -> Option<DeploymentPolicy> {
    let spec = serde_json::from_value(stored.data.get("spec")?.clone()).ok()?;
    let mut policy = DeploymentPolicy::new(name, spec);
    policy.metadata.resource_version = stored.metadata.resource_version.clone();
    Some(policy)
}

/// A node as the rules read it: its name and labels.
fn as_node(meta: &PartialObjectMeta<Node>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: meta.metadata.name.clone(),
            labels: meta.metadata.labels.clone(),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

impl ClusterView for ClusterCache {
    fn env_names(&self) -> EnvNames {
        match self.env_names.load(std::sync::atomic::Ordering::SeqCst) {
            ENV_NAMES_RELAXED => EnvNames::Relaxed,
            _ => EnvNames::Strict,
        }
    }

    fn policy_exists(&self, name: &str) -> bool {
        self.stored_policy(name).is_some()
    }

    fn policy(&self, name: &str) -> Option<DeploymentPolicy> {
        as_policy(name, &*self.stored_policy(name)?)
    }

    fn look_up_policy(&self, name: &str) -> Option<PolicyLookup<'_>> {
        let name = name.to_owned();
        Some(Box::pin(async move {
            match tokio::time::timeout(POLICY_LOOKUP_TIMEOUT, self.policy_api.get_opt(&name)).await
            {
                Ok(Ok(Some(mut found))) => {
                    trim_policy(&mut found);
                    PolicyAtSource::Exists(as_policy(&name, &found).map(Box::new))
                }
                Ok(Ok(None)) => PolicyAtSource::Missing,
                Ok(Err(e)) => {
                    warn!(policy = %name, error = %e, "cannot read a DeploymentPolicy the cache has not seen; answering from the cache");
                    PolicyAtSource::Missing
                }
                Err(_) => {
                    warn!(policy = %name, timeout = ?POLICY_LOOKUP_TIMEOUT, "reading a DeploymentPolicy the cache has not seen timed out; answering from the cache");
                    PolicyAtSource::Missing
                }
            }
        }))
    }

    fn selected_nodes(&self, selection: &NodeSelection) -> Option<Vec<Node>> {
        if !listed::is_listed(&self.nodes_listed) {
            return None;
        }
        let empty = std::collections::BTreeMap::new();
        Some(
            self.nodes
                .state()
                .iter()
                .filter(|n| selection.matches(n.metadata.labels.as_ref().unwrap_or(&empty)))
                .map(|n| as_node(n))
                .collect(),
        )
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
    /// Policies with a spec (their names need not be in `policies`).
    pub policy_specs: Vec<DeploymentPolicy>,
    /// Nodes (`None`: the view knows no nodes, so no blast-radius warning).
    pub nodes: Option<Vec<Node>>,
    /// The environment variable names the (imagined) apiserver accepts.
    pub env_names: EnvNames,
}

impl ClusterView for StaticView {
    fn env_names(&self) -> EnvNames {
        self.env_names
    }

    fn policy_exists(&self, name: &str) -> bool {
        self.policies.iter().any(|p| p == name)
            || self
                .policy_specs
                .iter()
                .any(|p| p.metadata.name.as_deref() == Some(name))
    }

    fn policy(&self, name: &str) -> Option<DeploymentPolicy> {
        crate::rules::cluster::find_policy(&self.policy_specs, name)
    }

    fn selected_nodes(&self, selection: &NodeSelection) -> Option<Vec<Node>> {
        self.nodes
            .as_ref()
            .map(|nodes| crate::rules::cluster::select(nodes, selection))
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
