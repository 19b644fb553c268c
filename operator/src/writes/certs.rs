//! The webhook certificate controller's writes: its two Secrets (operator namespace) and the
//! caBundle of the webhook configurations.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};

use super::{WriteError, Writer};

impl Writer {
    /// Replaces the Secret `name` (its resourceVersion guards the write).
    pub async fn replace_secret(&self, name: &str, secret: &Secret) -> Result<Secret, WriteError> {
        Ok(
            Api::<Secret>::namespaced(self.gate()?.clone(), &self.namespace)
                .replace(name, &PostParams::default(), secret)
                .await?,
        )
    }

    /// Creates `secret`.
    pub async fn create_secret(&self, secret: &Secret) -> Result<Secret, WriteError> {
        Ok(
            Api::<Secret>::namespaced(self.gate()?.clone(), &self.namespace)
                .create(&PostParams::default(), secret)
                .await?,
        )
    }

    /// Strategic-merge-patches the cluster-scoped webhook configuration `name` of kind `K`.
    pub async fn patch_webhook_configuration<K>(
        &self,
        name: &str,
        body: serde_json::Value,
    ) -> Result<K, WriteError>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        Ok(Api::<K>::all(self.gate()?.clone())
            .patch(name, &PatchParams::default(), &Patch::Strategic(body))
            .await?)
    }
}
