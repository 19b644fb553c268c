//! A stage whose pods cannot be created (issue 22 item 7): the Job controller reports each refusal
//! of a pod (Pod Security admission, a ResourceQuota, an admission webhook) only as a `FailedCreate`
//! Event on the Job and retries for ever; the Job shows no pod and no condition. Without this, a
//! NodeWright looked `in_progress` for ever while, for an interrupt, its node stayed cordoned and
//! drained.
//!
//! Surfaced within seconds of the Event ([`crate::runtime::failed_create_feed`]): the stage is
//! `erroring` on the node (so `kubectl get nw` shows erroring and the node's Erroring condition is
//! True), the apiserver's message goes on the Job (annotation
//! `nodewright.nvidia.com/pods-not-created`, which `kubectl nodewright why` shows), and a Warning
//! `StagePodsNotCreated` Event on the NodeWright and the node names the Job and the message. The
//! Job is left alone: once the cause is fixed the Job controller creates the pod, the annotation
//! goes, and the stage's own outcome is recorded as usual.

use kube::runtime::reflector::Store;
use nodewright_core::jobs::PackageAnnotation;
use nodewright_core::jobs::read::had_pods;
use nodewright_core::jobs::stored::StoredJob;
use nodewright_core::node::record::Record;
use nodewright_shared::keys;
use serde_json::json;
use tracing::info;

use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::failed;

/// Event reason of a stage whose pods cannot be created.
pub const STAGE_PODS_NOT_CREATED: &str = "StagePodsNotCreated";
/// Most bytes of the apiserver's message kept on the Job.
const MAX_MESSAGE: usize = 2048;

/// The apiserver's message of the newest `FailedCreate` Event about `job`, when the Job has never
/// had a pod (none active, failed or succeeded): its stage cannot start. `None` for a Job that has
/// or had a pod, whose outcome the pods tell.
pub fn refusal(
    events: &Store<k8s_openapi::api::core::v1::Event>,
    job: &StoredJob,
) -> Option<String> {
    if had_pods(job) {
        return None;
    }
    let uid = job.metadata.uid.as_deref()?;
    events
        .state()
        .into_iter()
        .filter(|e| e.involved_object.uid.as_deref() == Some(uid))
        .max_by_key(|e| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
        })
        .and_then(|e| e.message.clone())
        .map(|m| truncate(m, MAX_MESSAGE))
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// Surfaces the stage of `job` on `node` as not able to create its pods (see the module doc).
pub async fn surface(
    ctx: &Context,
    job: &StoredJob,
    node: &str,
    annotation: &PackageAnnotation,
    interrupt: bool,
    message: &str,
) -> Result<(), ReconcileError> {
    let name = kube::ResourceExt::name_any(job);
    super::record(ctx, node, annotation, interrupt, Record::Erroring(0)).await?;
    if job.pods_not_created.as_deref() != Some(message) {
        super::job_note(
            ctx,
            job,
            keys::PODS_NOT_CREATED_ANNOTATION,
            Some(message),
            "pods-not-created",
        )
        .await?;
        info!(job = %name, node, package = %annotation.name, stage = %annotation.stage, "the stage's pods cannot be created");
    }
    let note = format!(
        "Package [{}:{}] stage [{}] on node [{node}] cannot start: Job {}/{name} cannot create its pod: {message}",
        annotation.name, annotation.version, annotation.stage, ctx.config.jobs.namespace,
    );
    super::warn_about_job(
        ctx,
        job,
        &annotation.nodewright,
        node,
        STAGE_PODS_NOT_CREATED,
        note,
    )
    .await;
    Ok(())
}

/// When a stage whose pods are refused must end (the operator's `PODS_NOT_CREATED_TIMEOUT`
/// `bound` after its Job started, which never had a pod): `Ok(deadline)`, the
/// `activeDeadlineSeconds` that makes the Job controller fail it now (`DeadlineExceeded`, then
/// recorded timed out like any stage out of time, and its cordon released: nothing ran on the
/// node); `Err(left)` while within the bound. `None`: nothing to do (the Job had a pod, or its own
/// deadline already ended it).
pub fn end_deadline(
    job: &StoredJob,
    bound: std::time::Duration,
    now: k8s_openapi::jiff::Timestamp,
) -> Option<Result<i64, std::time::Duration>> {
    if had_pods(job) {
        return None;
    }
    let started = job
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .or(job.metadata.creation_timestamp.as_ref())?;
    let elapsed = super::age(started, now);
    if elapsed < bound {
        return Some(Err(bound - elapsed));
    }
    let deadline = i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX).max(1);
    let current = job.spec.as_ref().and_then(|s| s.active_deadline_seconds);
    if current.is_some_and(|c| c <= deadline) {
        return None;
    }
    Some(Ok(deadline))
}

/// Ends the refused stage of `job` now (see [`end_deadline`]).
pub async fn end(ctx: &Context, job: &StoredJob, deadline: i64) -> Result<(), ReconcileError> {
    let name = kube::ResourceExt::name_any(job);
    ctx.writer
        .patch_job(&name, json!({"spec": {"activeDeadlineSeconds": deadline}}))
        .await
        .map_err(failed(format!(
            "ending Job {name}, whose pods were refused past PODS_NOT_CREATED_TIMEOUT"
        )))?;
    info!(job = %name, deadline, "ended a stage whose pods were refused past PODS_NOT_CREATED_TIMEOUT");
    Ok(())
}

/// Once the Job has (had) a pod, the refusal is history: its annotation goes.
pub async fn clear(ctx: &Context, job: &StoredJob) -> Result<(), ReconcileError> {
    super::job_note(
        ctx,
        job,
        keys::PODS_NOT_CREATED_ANNOTATION,
        None,
        "pods-not-created",
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Event;
    use kube::runtime::{reflector, watcher};

    fn job(uid: &str, status: serde_json::Value) -> StoredJob {
        serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": "ns", "uid": uid},
            "status": status,
        }))
        .expect("job")
    }

    fn event(name: &str, uid: &str, at: &str, message: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "involvedObject": {"kind": "Job", "name": "j", "uid": uid},
            "reason": "FailedCreate",
            "message": message,
            "lastTimestamp": at,
        }))
        .expect("event")
    }

    /// The stage ends at `PODS_NOT_CREATED_TIMEOUT` after its Job started, by a deadline of the
    /// time it has run; not before, not once it had a pod, not when its own deadline ends it first.
    #[test]
    fn a_refused_stage_ends_at_its_bound() {
        let started = "2026-12-03T10:00:00Z";
        let at = |t: &str| t.parse::<k8s_openapi::jiff::Timestamp>().expect("time");
        let bound = std::time::Duration::from_secs(600);
        let refused = job("u", json!({"startTime": started}));
        assert_eq!(
            end_deadline(&refused, bound, at("2026-12-03T10:04:00Z")),
            Some(Err(std::time::Duration::from_secs(360)))
        );
        assert_eq!(
            end_deadline(&refused, bound, at("2026-12-03T10:10:05Z")),
            Some(Ok(605))
        );
        let ran = job("u", json!({"startTime": started, "failed": 1}));
        assert_eq!(end_deadline(&ran, bound, at("2026-12-03T11:00:00Z")), None);
        let mut bounded = job("u", json!({"startTime": started}));
        bounded.spec = Some(nodewright_core::jobs::stored::StoredJobSpec {
            active_deadline_seconds: Some(300),
            ..Default::default()
        });
        assert_eq!(
            end_deadline(&bounded, bound, at("2026-12-03T10:10:05Z")),
            None,
            "its own stageTimeout ends it"
        );
    }

    #[test]
    fn a_job_without_pods_and_a_failed_create_is_refused_with_the_newest_message() {
        let (store, mut writer) = reflector::store::<Event>();
        for e in [
            event("a", "u-1", "2026-12-03T10:00:00Z", "exceeded quota"),
            event("b", "u-1", "2026-12-03T10:05:00Z", "violates PodSecurity"),
            event("c", "u-2", "2026-12-03T10:09:00Z", "another Job"),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(e));
        }
        assert_eq!(
            refusal(&store, &job("u-1", json!({}))).as_deref(),
            Some("violates PodSecurity")
        );
        assert_eq!(refusal(&store, &job("u-3", json!({}))), None, "no Event");
        for had in [
            json!({"active": 1}),
            json!({"failed": 1}),
            json!({"succeeded": 1}),
        ] {
            assert_eq!(refusal(&store, &job("u-1", had.clone())), None, "{had}");
        }
    }

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary() {
        let cut = truncate("é".repeat(3000), MAX_MESSAGE);
        assert!(cut.len() <= MAX_MESSAGE + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }
}
