//! Pod writes: pruning a Job's middle failed attempts (operator namespace), and evicting pods from a
//! node being drained (any namespace, through the Eviction API so PodDisruptionBudgets hold, or
//! deleted when the NodeWright's `drainConfig.disableEviction` asks for it).

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

    /// Evicts the pod `namespace/name` (a 429 means a PodDisruptionBudget refuses it for now),
    /// with `grace_period_seconds` instead of the pod's own when given.
    pub async fn evict(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: Option<u32>,
    ) -> Result<(), WriteError> {
        let params = EvictParams {
            delete_options: grace_period_seconds.map(|grace| DeleteParams {
                grace_period_seconds: Some(grace),
                ..DeleteParams::default()
            }),
            ..EvictParams::default()
        };
        Api::<Pod>::namespaced(self.gate()?.clone(), namespace)
            .evict(name, &params)
            .await?;
        Ok(())
    }

    /// Deletes the pod `namespace/name` of a node being drained with `drainConfig.disableEviction`:
    /// no PodDisruptionBudget is consulted.
    pub async fn delete_drained_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: Option<u32>,
    ) -> Result<(), WriteError> {
        let params = DeleteParams {
            grace_period_seconds,
            ..DeleteParams::default()
        };
        Api::<Pod>::namespaced(self.gate()?.clone(), namespace)
            .delete(name, &params)
            .await?;
        Ok(())
    }
}
