//! Pod writes: pruning a Job's middle failed attempts (operator namespace), and evicting pods from a
//! node being drained (any namespace, through the Eviction API so PodDisruptionBudgets hold).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, EvictParams};

use super::{WriteError, Writer};

impl Writer {
    /// Deletes the pod `name` of the operator's namespace.
    pub async fn delete_pod(&self, name: &str) -> Result<(), WriteError> {
        Api::<Pod>::namespaced(self.gate()?.clone(), &self.namespace)
            .delete(name, &DeleteParams::default())
            .await?;
        Ok(())
    }

    /// Evicts the pod `namespace/name` (a 429 means a PodDisruptionBudget refuses it for now).
    pub async fn evict(&self, namespace: &str, name: &str) -> Result<(), WriteError> {
        Api::<Pod>::namespaced(self.gate()?.clone(), namespace)
            .evict(name, &EvictParams::default())
            .await?;
        Ok(())
    }
}
