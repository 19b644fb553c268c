//! The operator's leader-election Lease as the suites read it: who leads the replicas of a test.

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

/// The Lease the operator's replicas elect their leader on, in the operator's namespace.
pub const OPERATOR_LEASE: &str = "nodewright-operator";

/// The identity holding the operator's Lease in `namespace`, if anyone does. A failed read counts
/// as no holder: the callers poll until the holder they wait for shows.
pub async fn operator_leader(client: &kube::Client, namespace: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(OPERATOR_LEASE)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}
