//! Job writes in the operator's namespace: create, delete (with its pods), and merge patches
//! (suspend on pause, the `state-recorded` mark and TTL, the `last-logs` evidence).

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use tracing::info;

use nodewright_core::jobs::read::Recorded;
use nodewright_shared::keys;
use serde_json::json;

use super::{WriteError, Writer, failed};
use crate::error::ReconcileError;

impl Writer {
    fn jobs(&self) -> Result<Api<Job>, WriteError> {
        Ok(Api::namespaced(self.gate()?.clone(), &self.namespace))
    }

    /// Creates `job`.
    pub async fn create_job(&self, job: &Job) -> Result<Job, WriteError> {
        Ok(self.jobs()?.create(&PostParams::default(), job).await?)
    }

    /// Deletes the Job `name` and, in the background, its pods.
    pub async fn delete_job(&self, name: &str) -> Result<(), WriteError> {
        self.jobs()?
            .delete(name, &DeleteParams::background())
            .await?;
        Ok(())
    }

    /// Deletes the Job `name` and its pods (background propagation); gone already is fine.
    pub async fn remove_job(&self, name: &str) -> Result<(), ReconcileError> {
        match self.delete_job(name).await {
            Ok(()) => {
                info!(job = %name, "deleted Job");
                Ok(())
            }
            Err(e) if e.code() == Some(404) => Ok(()),
            Err(e) => Err(e.context(format!("deleting Job {}/{name}", self.namespace))),
        }
    }

    /// Merge-patches the Job `name`.
    pub async fn patch_job(&self, name: &str, merge: serde_json::Value) -> Result<Job, WriteError> {
        Ok(self
            .jobs()?
            .patch(name, &PatchParams::default(), &Patch::Merge(merge))
            .await?)
    }

    /// Marks the Job `name`'s outcome as recorded in node state and starts its TTL: from then on
    /// the Job may be deleted (DESIGN §4.4: never before its outcome is recorded).
    pub async fn mark_job_recorded(
        &self,
        name: &str,
        outcome: Recorded,
        ttl_seconds: i32,
    ) -> Result<(), ReconcileError> {
        let patch = json!({
            "metadata": {"annotations": {keys::STATE_RECORDED_ANNOTATION: outcome.as_str()}},
            "spec": {"ttlSecondsAfterFinished": ttl_seconds},
        });
        self.patch_job(name, patch)
            .await
            .map_err(failed(format!("marking Job {name} as recorded")))?;
        Ok(())
    }
}
