//! The operator's Kubernetes client, built in one place for the binary and for every embedding
//! (the suites' in-process operators, the docs harness), so that what the tests run is what ships.
//! Every request is counted by [`crate::metrics::api`].

use crate::metrics::api::ApiMetrics;

/// The operator's client for `config`, its requests counted in `api`.
pub fn build(config: kube::Config, api: &ApiMetrics) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&api.layer())
        .build())
}
