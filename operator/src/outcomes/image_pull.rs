//! An attempt waiting on an image the kubelet cannot pull (upstream #306, #655): a typo in a
//! package's `image`, a tag that moved away, a registry that wants credentials. The kubelet only
//! says so in the pod's container status (`ErrImagePull`, `ImagePullBackOff`, `InvalidImageName`)
//! and retries with back-off; the stage looks `in_progress` until its `stageTimeout`. Surfaced once
//! an attempt has waited so for `IMAGE_PULL_FAILING_AFTER` (default 1m): the Job carries the
//! container, the image and the kubelet's message (annotation
//! `nodewright.nvidia.com/image-pull-failing`, shown by `kubectl nodewright why`), the node's
//! Erroring condition names them (reason `ImagePullFailing`), and a Warning
//! `StageImagePullFailing` Event on the NodeWright and the node says so. Nothing else changes: the
//! stage's attempts, record and `stageTimeout` are those of any running stage, and the note goes
//! once no attempt waits on an image any more (pulled, or the Job finished).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use nodewright_core::jobs::PackageAnnotation;
use nodewright_core::jobs::classify::image_pull_wait;
use nodewright_core::jobs::stored::{StoredJob, StoredPod};
use nodewright_shared::keys;
use tracing::info;

use crate::context::Context;
use crate::error::ReconcileError;

/// The Job's note: `nodewright.nvidia.com/image-pull-failing`.
const NOTE: &str = keys::IMAGE_PULL_FAILING_ANNOTATION;

/// Event reason of a stage whose attempt waits on an image the kubelet cannot pull.
pub const STAGE_IMAGE_PULL_FAILING: &str = "StageImagePullFailing";

/// What the Job's live attempts (`pods`) say at `now`: `Ok(wait)` for the first one that has
/// waited on an image for `after` since it was created, `Err(left)` when one waits but not that
/// long yet (the time until it has), `None` when none waits on an image.
pub fn failing(
    pods: &[StoredPod],
    after: Duration,
    now: Timestamp,
) -> Option<Result<String, Duration>> {
    let mut left: Option<Duration> = None;
    for pod in pods {
        let Some(wait) = image_pull_wait(pod) else {
            continue;
        };
        let waited = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(Duration::ZERO, |t| super::age(t, now));
        if waited >= after {
            return Some(Ok(wait));
        }
        let this = after - waited;
        left = Some(left.map_or(this, |l| l.min(this)));
    }
    left.map(Err)
}

/// Brings the Job's note in line with its attempts (see the module doc); returns when to look
/// again (an attempt that waits but not long enough yet).
pub async fn sync(
    ctx: &Context,
    job: &StoredJob,
    node: &str,
    annotation: &PackageAnnotation,
    pods: &[StoredPod],
) -> Result<Option<Duration>, ReconcileError> {
    let now = Timestamp::now();
    match failing(pods, ctx.config.image_pull_failing_after, now) {
        Some(Ok(wait)) => {
            // Written once: the kubelet alternates ErrImagePull and ImagePullBackOff (and their
            // messages) on every retry, which would rewrite the note and repeat the Event.
            if job.image_pull_failing.is_none() {
                let name = kube::ResourceExt::name_any(job);
                super::job_note(ctx, job, NOTE, Some(&wait), "image-pull").await?;
                info!(job = %name, node, package = %annotation.name, stage = %annotation.stage, "an attempt waits on an image it cannot pull");
                let note = format!(
                    "Package [{}:{}] stage [{}] on node [{node}]: Job {}/{name} waits on an image \
                     the kubelet cannot pull: {wait}",
                    annotation.name,
                    annotation.version,
                    annotation.stage,
                    ctx.config.jobs.namespace,
                );
                super::warn_about_job(
                    ctx,
                    job,
                    &annotation.nodewright,
                    node,
                    STAGE_IMAGE_PULL_FAILING,
                    note,
                )
                .await;
            }
            Ok(None)
        }
        Some(Err(left)) => Ok(Some(left)),
        None => {
            if job.image_pull_failing.is_some() {
                clear(ctx, job).await?;
            }
            Ok(None)
        }
    }
}

/// Removes the note (no attempt waits on an image any more).
pub async fn clear(ctx: &Context, job: &StoredJob) -> Result<(), ReconcileError> {
    super::job_note(ctx, job, NOTE, None, "image-pull").await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(created: &str, reason: &str) -> StoredPod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "creationTimestamp": created},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": "dax-init", "image": "ghcr.io/x/pkg:9",
                 "state": {"waiting": {"reason": reason, "message": "not found"}}}]},
        }))
        .expect("pod")
    }

    #[test]
    fn an_attempt_is_named_once_it_has_waited_on_its_image_for_the_bound() {
        let now: Timestamp = "2026-12-03T10:01:00Z".parse().expect("time");
        let after = Duration::from_secs(60);
        let young = pod("2026-12-03T10:00:30Z", "ImagePullBackOff");
        assert_eq!(
            failing(std::slice::from_ref(&young), after, now),
            Some(Err(Duration::from_secs(30)))
        );
        let old = pod("2026-12-03T10:00:00Z", "ErrImagePull");
        assert_eq!(
            failing(&[young.clone(), old], after, now),
            Some(Ok(
                "container dax-init, image ghcr.io/x/pkg:9: ErrImagePull: not found".to_owned()
            ))
        );
        let pulling = pod("2026-12-03T09:00:00Z", "ContainerCreating");
        assert_eq!(failing(&[pulling], after, now), None);
    }
}
