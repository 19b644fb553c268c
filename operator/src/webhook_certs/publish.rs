//! The `caBundle` of both webhook configurations: read what is published, and patch only the
//! entries that differ from the stored bundle.
//!
//! The configurations belong to the chart (Helm creates them, without caBundle in self-managed
//! mode); this controller never creates or deletes them and touches nothing but
//! `webhooks[*].clientConfig.caBundle`. A strategic merge patch keyed by webhook name does exactly
//! that, and leaves the rest of each entry to its owner.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::Api;
use nodewright_certs::material::needs_publish;
use serde_json::json;
use tracing::info;

use super::{Error, write_err};
use crate::writes::Writer;

/// The webhook entries of one configuration: name and published caBundle (PEM text).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    /// Whether the configuration exists.
    pub exists: bool,
    /// `(webhook name, caBundle)` per entry.
    pub entries: Vec<(String, String)>,
}

impl Published {
    /// The published bundles, for the policy.
    pub fn bundles(&self) -> impl Iterator<Item = String> + '_ {
        self.entries.iter().map(|(_, b)| b.clone())
    }

    /// The names of the entries whose caBundle is not `bundle`.
    pub fn stale(&self, bundle: &str) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(_, published)| needs_publish(bundle, published))
            .map(|(name, _)| name.clone())
            .collect()
    }
}

fn pem(bundle: Option<&ByteString>) -> String {
    bundle
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

fn kube_err(action: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Kube { action, source }
}

/// Reads the configuration `name` of kind `K`; `entries` lists its webhooks as (name, caBundle).
async fn read<K>(
    api: &Api<K>,
    name: &str,
    entries: impl FnOnce(K) -> Vec<(String, String)>,
) -> Result<Published, Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let found = api
        .get_opt(name)
        .await
        .map_err(kube_err(format!("reading {} {name}", K::kind(&()))))?;
    Ok(found.map_or_else(Published::default, |c| Published {
        exists: true,
        entries: entries(c),
    }))
}

/// Reads the MutatingWebhookConfiguration `name`.
pub async fn read_mutating(
    api: &Api<MutatingWebhookConfiguration>,
    name: &str,
) -> Result<Published, Error> {
    read(api, name, |c| {
        c.webhooks
            .into_iter()
            .flatten()
            .map(|w| (w.name, pem(w.client_config.ca_bundle.as_ref())))
            .collect()
    })
    .await
}

/// Reads the ValidatingWebhookConfiguration `name`.
pub async fn read_validating(
    api: &Api<ValidatingWebhookConfiguration>,
    name: &str,
) -> Result<Published, Error> {
    read(api, name, |c| {
        c.webhooks
            .into_iter()
            .flatten()
            .map(|w| (w.name, pem(w.client_config.ca_bundle.as_ref())))
            .collect()
    })
    .await
}

/// The strategic merge patch setting `bundle` as the caBundle of the entries `names`.
pub fn patch_body(names: &[String], bundle: &str) -> serde_json::Value {
    let ca = ByteString(bundle.as_bytes().to_vec());
    let webhooks: Vec<serde_json::Value> = names
        .iter()
        .map(|n| json!({"name": n, "clientConfig": {"caBundle": ca}}))
        .collect();
    json!({ "webhooks": webhooks })
}

/// Patches the stale entries of one configuration (of kind `K`). Returns whether it wrote.
pub async fn publish<K>(
    writer: &Writer,
    kind: &str,
    name: &str,
    published: &Published,
    bundle: &str,
) -> Result<bool, Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let stale = published.stale(bundle);
    if !published.exists || stale.is_empty() {
        return Ok(false);
    }
    writer
        .patch_webhook_configuration::<K>(name, patch_body(&stale, bundle))
        .await
        .map_err(write_err(format!("patching caBundle of {kind} {name}")))?;
    info!(%kind, configuration = %name, webhooks = ?stale, "published the webhook CA bundle");
    Ok(true)
}
