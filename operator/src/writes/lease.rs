//! The leader-election Lease: read, created and renewed by [`crate::runtime::leader`]. These are
//! the only writes not gated by a term, because they are what decides the term: the Lease's
//! resourceVersion (`replace` carries it) is their guard instead.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};

/// The Lease named `name` in one namespace.
#[derive(Clone)]
pub struct LeaseWriter {
    api: Api<Lease>,
    name: String,
}

impl LeaseWriter {
    /// The Lease `name` in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        LeaseWriter {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
        }
    }

    /// Reads the Lease; `None` when it does not exist yet.
    pub async fn get(&self) -> Result<Option<Lease>, kube::Error> {
        self.api.get_opt(&self.name).await
    }

    /// Creates the Lease (fails with 409 when another replica created it first).
    pub async fn create(&self, lease: &Lease) -> Result<Lease, kube::Error> {
        self.api.create(&PostParams::default(), lease).await
    }

    /// Replaces the Lease; its resourceVersion makes this fail with 409 when another replica wrote
    /// it since it was read.
    pub async fn replace(&self, lease: &Lease, params: &PostParams) -> Result<Lease, kube::Error> {
        self.api.replace(&self.name, params, lease).await
    }
}
