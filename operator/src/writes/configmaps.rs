//! ConfigMap writes in the operator's namespace: package and node-metadata ConfigMaps, applied
//! server-side under the operator's field manager, and stale ones deleted.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};

use super::{WriteError, Writer};
use crate::jobs::configmaps::FIELD_MANAGER;

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

    /// Deletes the ConfigMap `name`.
    pub async fn delete_configmap(&self, name: &str) -> Result<(), WriteError> {
        self.configmaps()?
            .delete(name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}
