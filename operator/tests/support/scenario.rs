//! One test's ground in a shared cluster: the suite's cluster, a client, and a namespace of the
//! test's own, which is also the operator's namespace and the prefix of every name the test
//! creates (fake nodes, NodeWrights), so tests of one binary run side by side without seeing each
//! other.

use super::cluster;
use nodewright_e2e::Cluster;

/// The cluster, a client and a fresh namespace, from [`Scenario::start`].
pub struct Scenario {
    /// The local control plane the tests of this binary share.
    pub cluster: &'static Cluster,
    /// An admin client of it.
    pub client: kube::Client,
    /// The test's own namespace (`<prefix>-<n>-<random>`).
    pub ns: String,
}

impl Scenario {
    /// The shared cluster, a client, and a new namespace named after `prefix`.
    pub async fn start(prefix: &str) -> Self {
        let cluster = cluster().await;
        let client = cluster.client().await.expect("client");
        let ns = cluster.create_namespace(prefix).await.expect("namespace");
        Self {
            cluster,
            client,
            ns,
        }
    }
}
