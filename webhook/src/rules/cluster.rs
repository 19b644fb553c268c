//! What the rules read from the cluster, behind a trait so they stay pure.

use k8s_openapi::api::core::v1::Node;
use nodewright_core::rollout::selection::NodeSelection;
use nodewright_shared::api::DeploymentPolicy;

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
