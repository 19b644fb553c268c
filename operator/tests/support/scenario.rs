//! One test's ground in a shared cluster: the suite's cluster, a client, and a namespace of the
//! test's own, which is also the operator's namespace and the prefix of every name the test
//! creates (fake nodes, NodeWrights), so tests of one binary run side by side without seeing each
//! other.

use nodewright_e2e::Cluster;

use super::{cluster, own_node};

/// The shared cluster, an admin client of it, and a new namespace named after `prefix`
/// (`<prefix>-<n>-<random>`): `let (cluster, client, ns) = scenario("rollout").await;`.
pub async fn scenario(prefix: &str) -> (&'static Cluster, kube::Client, String) {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let ns = cluster.create_namespace(prefix).await.expect("namespace");
    (cluster, client, ns)
}

/// [`scenario`] plus a fake node of the test's own (`<ns>-n0`):
/// `let (cluster, client, ns, node) = scenario_with_node("stuck").await;`.
pub async fn scenario_with_node(prefix: &str) -> (&'static Cluster, kube::Client, String, String) {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let (ns, node) = own_node(cluster, &client, prefix).await;
    (cluster, client, ns, node)
}
