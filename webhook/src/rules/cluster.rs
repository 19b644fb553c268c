//! What the rules read from the cluster, behind a trait so they stay pure.

/// What validation needs from the cluster. The webhook implements it over watch-backed caches; tests
/// use an in-memory impl.
pub trait ClusterView: Send + Sync {
    /// Whether a DeploymentPolicy of this name exists.
    fn policy_exists(&self, name: &str) -> bool;
    /// Names of NodeWrights whose spec.deploymentPolicy is `policy`, sorted.
    fn nodewrights_using_policy(&self, policy: &str) -> Vec<String>;
}
