//! What the rules read from the cluster, behind a trait so they stay pure.

use std::future::Future;
use std::pin::Pin;

use k8s_openapi::api::core::v1::Node;
use nodewright_core::rollout::selection::NodeSelection;
use nodewright_shared::api::DeploymentPolicy;

use super::env::EnvNames;

/// What validation needs from the cluster. The webhook implements it over watch-backed caches; tests
/// use an in-memory impl.
pub trait ClusterView: Send + Sync {
    /// Whether a DeploymentPolicy of this name exists.
    fn policy_exists(&self, name: &str) -> bool;
    /// Names of NodeWrights whose spec.deploymentPolicy is `policy`, sorted.
    fn nodewrights_using_policy(&self, policy: &str) -> Vec<String>;
    /// The DeploymentPolicy `name` as stored (for the blast-radius warnings' batches).
    fn policy(&self, name: &str) -> Option<DeploymentPolicy>;
    /// The nodes `selection` picks, with their names and labels only (the webhook watches node
    /// metadata, nothing else); `None` when the view knows no nodes.
    fn selected_nodes(&self, selection: &NodeSelection) -> Option<Vec<Node>>;
    /// The environment variable names the cluster's kube-apiserver accepts in a pod (it depends on
    /// the Kubernetes minor). The default, [`EnvNames::Strict`], is what every supported minor
    /// accepts; a view that knows the server's version says which rule it has.
    fn env_names(&self) -> EnvNames {
        EnvNames::default()
    }
    /// Reads the DeploymentPolicy `name` at its source, for a policy this view has not seen (a
    /// watch-backed view lags its writes: `kubectl apply` of a policy and a NodeWright naming it,
    /// in one file, sends the second before the watch delivers the first). `None`: this view has
    /// no source beyond itself (the in-memory views).
    fn look_up_policy(&self, _name: &str) -> Option<PolicyLookup<'_>> {
        None
    }
}

/// A pending [`ClusterView::look_up_policy`].
pub type PolicyLookup<'a> = Pin<Box<dyn Future<Output = PolicyAtSource> + Send + 'a>>;

/// What [`ClusterView::look_up_policy`] found.
#[derive(Debug, Clone)]
pub enum PolicyAtSource {
    /// The policy does not exist, or could not be read in time (the view's answer stands).
    Missing,
    /// The policy exists; its spec when this version can decode it (boxed: a policy is large and
    /// `Missing` is the common answer).
    Exists(Option<Box<DeploymentPolicy>>),
}

/// The nodes of `nodes` that `selection` picks (the views kept in memory: tests, benchmarks).
pub fn select(nodes: &[Node], selection: &NodeSelection) -> Vec<Node> {
    let empty = std::collections::BTreeMap::new();
    nodes
        .iter()
        .filter(|n| selection.matches(n.metadata.labels.as_ref().unwrap_or(&empty)))
        .cloned()
        .collect()
}

/// The policy `name` among `specs` (the views kept in memory: tests, benchmarks).
pub fn find_policy(specs: &[DeploymentPolicy], name: &str) -> Option<DeploymentPolicy> {
    specs
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .cloned()
}
