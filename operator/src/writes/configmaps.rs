//! ConfigMap writes in the operator's namespace: package and node-metadata ConfigMaps, applied
//! server-side under the operator's field manager, and stale ones deleted.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nodewright_core::jobs::configmaps::FIELD_MANAGER;

use super::{WriteError, Writer};

impl Writer {
    fn configmaps(&self) -> Result<Api<ConfigMap>, WriteError> {
        Ok(Api::namespaced(self.gate()?.clone(), &self.namespace))
    }

    /// Server-side applies `cm` (named by its metadata), taking ownership of its fields.
    pub async fn apply_configmap(
        &self,
        name: &str,
        cm: &ConfigMap,
    ) -> Result<ConfigMap, WriteError> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        Ok(self
            .configmaps()?
            .patch(name, &params, &Patch::Apply(cm))
            .await?)
    }

    /// [`Writer::apply_configmap`], unless this term already applied the same content less than
    /// [`super::memo::MEMO_TTL`] ago. Returns whether a request was sent.
    pub async fn apply_configmap_if_changed(
        &self,
        name: &str,
        cm: &ConfigMap,
    ) -> Result<bool, WriteError> {
        let key = format!("configmap/{name}");
        // The applied object's JSON is its content (metadata, data and owner included).
        let content = serde_json::to_string(cm).unwrap_or_default();
        let stamp = super::memo::stamp(&content);
        if self.memo.is_current(&key, stamp) {
            return Ok(false);
        }
        match self.apply_configmap(name, cm).await {
            Ok(_) => {
                self.memo.remember(key, stamp);
                Ok(true)
            }
            Err(e) => {
                self.memo.forget(&key);
                Err(e)
            }
        }
    }

    /// Deletes the ConfigMap `name`.
    pub async fn delete_configmap(&self, name: &str) -> Result<(), WriteError> {
        self.memo.forget(&format!("configmap/{name}"));
        self.configmaps()?
            .delete(name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}
