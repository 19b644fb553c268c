//! Job writes in the operator's namespace: create, delete (with its pods, foreground), and merge patches
//! (suspend on pause, the `state-recorded` mark and TTL, the `last-logs` evidence).

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use tracing::info;

use nodewright_core::jobs::read::Recorded;
use nodewright_shared::keys;
use serde_json::json;

use super::{WriteError, WriteFailed, Writer, failed};

impl Writer {
    fn jobs(&self) -> Result<Api<Job>, WriteError> {
        Ok(Api::namespaced(self.gate()?.clone(), &self.namespace))
    }

    /// Creates `job`.
    pub async fn create_job(&self, job: &Job) -> Result<Job, WriteError> {
        Ok(self.jobs()?.create(&PostParams::default(), job).await?)
    }

    /// Deletes the Job `name` with foreground propagation: the Job stays (with its deletion
    /// timestamp) until its pods are gone. A deleted Job's pod can still be shutting down (a
    /// removed package's `gracefulShutdown`), and until it is, the Job must keep the node busy: a
    /// node's interrupt (of any NodeWright) waits for every unfinished package Job on it
    /// ([`nodewright_core::jobs::read::JobIndex`]), and with background propagation the Job left the
    /// store at once, so another NodeWright's interrupt could reboot the node under that pod
    /// (upstream deletes with foreground propagation too).
    pub async fn delete_job(&self, name: &str) -> Result<(), WriteError> {
        self.jobs()?
            .delete(name, &DeleteParams::foreground())
            .await?;
        Ok(())
    }

    /// Deletes the Job `name` and its pods ([`Writer::delete_job`]); gone already is fine.
    pub async fn remove_job(&self, name: &str) -> Result<(), WriteFailed> {
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
    ) -> Result<(), WriteFailed> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// D6: a Job is deleted with foreground propagation, so it stays in the Job store (an
    /// unfinished package Job keeps its node busy) until its pods are gone.
    #[tokio::test]
    async fn jobs_are_deleted_with_foreground_propagation() {
        let bodies: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Default::default();
        let log = bodies.clone();
        let (client, server) = super::super::mock::serve(move |method, path, body| {
            if method == http::Method::DELETE && path.ends_with("/jobs/j") {
                log.lock().expect("request log").push(body);
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Success"}),
                )
            } else {
                (404, super::super::mock::not_found())
            }
        });
        let writer = Writer::new(
            client,
            "nodewright",
            tokio_util::sync::CancellationToken::new(),
        );
        writer.remove_job("j").await.expect("deleted");
        drop(writer);
        server.abort();
        let bodies = bodies.lock().expect("request log").clone();
        assert_eq!(bodies.len(), 1, "{bodies:?}");
        assert_eq!(
            bodies[0]["propagationPolicy"], "Foreground",
            "{}",
            bodies[0]
        );
    }
}
