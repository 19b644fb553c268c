//! Job writes in the operator's namespace: create, delete (with its pods), and merge patches
//! (suspend on pause, the `state-recorded` mark and TTL, the `last-logs` evidence).

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use super::{WriteError, Writer};

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

    /// Merge-patches the Job `name`.
    pub async fn patch_job(&self, name: &str, merge: serde_json::Value) -> Result<Job, WriteError> {
        Ok(self
            .jobs()?
            .patch(name, &PatchParams::default(), &Patch::Merge(merge))
            .await?)
    }
}
