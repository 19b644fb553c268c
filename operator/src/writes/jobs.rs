//! Job writes in the operator's namespace: create, delete (with its pods, foreground), and merge patches
//! (suspend on pause, the `state-recorded` mark and TTL, the `last-logs` evidence).

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use tracing::info;

use nodewright_core::jobs::read::{Recorded, is_finished, recorded};
use nodewright_core::jobs::stored::StoredJob;
use nodewright_shared::keys;
use serde_json::json;

use super::{WriteError, WriteFailed, Writer, failed, memo};

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

    /// Marks the Job `name` (uid `uid`, when known)'s outcome as recorded in node state and starts
    /// its TTL: from then on the Job may be deleted (DESIGN §4.4: never before its outcome is
    /// recorded). The mark is remembered for the term ([`Writer::recorded`]): the Job store shows it
    /// only once the watch delivers it, and a pass or reconcile in between must not record, mark,
    /// announce and count the outcome a second time.
    pub async fn mark_job_recorded(
        &self,
        name: &str,
        uid: Option<&str>,
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
        if let Some(uid) = uid {
            self.memo()
                .remember(recorded_key(uid), memo::stamp(outcome.as_str()));
        }
        Ok(())
    }

    /// The Job's recorded outcome: its `state-recorded` annotation as stored, or else the mark this
    /// term put on it (by uid) that the store does not show yet. Only a finished Job is ever marked
    /// (its outcome is its `Complete` or `Failed` condition), so a running one, the many a pass
    /// reads, costs no lookup.
    pub fn recorded(&self, job: &StoredJob) -> Option<Recorded> {
        recorded(job).or_else(|| {
            if !is_finished(job) {
                return None;
            }
            let key = recorded_key(job.metadata.uid.as_deref()?);
            [Recorded::Complete, Recorded::TimedOut, Recorded::Rejected]
                .into_iter()
                .find(|r| self.memo().is_current(&key, memo::stamp(r.as_str())))
        })
    }

    /// `jobs` (from the Job store) with the marks this term put on them that the store does not
    /// show yet, so that a pass plans on what it wrote ([`Writer::recorded`]).
    pub fn with_own_marks(&self, jobs: Vec<Arc<StoredJob>>) -> Vec<Arc<StoredJob>> {
        jobs.into_iter()
            .map(|job| {
                if job.recorded.is_some() {
                    return job;
                }
                match self.recorded(&job) {
                    Some(outcome) => {
                        let mut marked = StoredJob::clone(&job);
                        marked.recorded = Some(outcome.as_str().to_owned());
                        Arc::new(marked)
                    }
                    None => job,
                }
            })
            .collect()
    }
}

/// The memo key of the `state-recorded` mark of the Job with this uid.
fn recorded_key(uid: &str) -> String {
    format!("job/{uid}/state-recorded")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer of a term that leads, over the mock API `client`.
    fn writer_over(client: kube::Client) -> Writer {
        Writer::new(
            client,
            "nodewright",
            tokio_util::sync::CancellationToken::new(),
        )
    }

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
        let writer = writer_over(client);
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

    /// A mark this term made counts as recorded until the store shows it, for that Job only: a
    /// later Job of the same name (another uid) is not recorded, and a failed mark is remembered
    /// by no one.
    #[tokio::test]
    async fn a_job_this_term_marked_reads_as_recorded_by_uid() {
        let (client, server) = super::super::mock::serve(|method, path, _| {
            if method == http::Method::PATCH && path.ends_with("/jobs/j") {
                let job = json!({"apiVersion": "batch/v1", "kind": "Job",
                                 "metadata": {"name": "j", "namespace": "nodewright"}});
                (200, job)
            } else {
                (404, super::super::mock::not_found())
            }
        });
        let writer = writer_over(client);
        // A finished Job (only those are marked).
        let job = |name: &str, uid: &str| {
            let job: Job = serde_json::from_value(json!({
                "metadata": {"name": name, "uid": uid},
                "status": {"conditions": [{"type": "Failed", "status": "True"}]}
            }))
            .expect("a Job of a fixed shape");
            StoredJob::of(&job)
        };
        assert_eq!(writer.recorded(&job("j", "u1")), None);
        writer
            .mark_job_recorded("j", Some("u1"), Recorded::TimedOut, 60)
            .await
            .expect("marked");
        assert_eq!(writer.recorded(&job("j", "u1")), Some(Recorded::TimedOut));
        assert_eq!(writer.recorded(&job("j", "u2")), None, "a successor Job");
        let marked =
            writer.with_own_marks(vec![Arc::new(job("j", "u1")), Arc::new(job("j", "u2"))]);
        let marks: Vec<Option<&str>> = marked.iter().map(|j| j.recorded.as_deref()).collect();
        assert_eq!(marks, [Some("timed-out"), None]);

        writer
            .mark_job_recorded("gone", Some("u3"), Recorded::Complete, 60)
            .await
            .expect_err("the Job is gone");
        assert_eq!(writer.recorded(&job("gone", "u3")), None);
        drop(writer);
        server.abort();
    }
}
