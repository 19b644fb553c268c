//! Classifying stage attempts and Jobs into outcomes (DESIGN §4.4); the operator's `outcomes`
//! reconciler records what this decides.
//!
//! One predicate, [`is_genuine_failure`], decides whether an attempt failed because of the package (or
//! its time bound) rather than because of the cluster. Every path uses it: the live Pod watch (mark a
//! stage erroring), the terminal Job watch (timed out vs. rerun), the attempt count written as
//! `restarts`, and which failed pods to keep as evidence. Getting it wrong in either direction is
//! costly: counting a kubelet admission rejection as a failure marks healthy packages erroring, while
//! missing a real failure makes a broken package rerun forever.

use crate::jobs::stored::{StoredContainerStatus, StoredJob, StoredPod};

/// Pod condition set by the cluster on pods it is disrupting (preemption, eviction, graceful node
/// shutdown, pod GC of a lost node).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// Pod and Job reason for an exceeded `activeDeadlineSeconds`.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// The kubelet's placeholder for a container whose real status it lost (exit code 137).
pub const CONTAINER_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";
/// SIGKILL's exit code (128 + 9): the kubelet's `ContainerStatusUnknown` placeholder says a lost
/// container was killed, and a reboot kills the interrupt container.
const SIGKILL_EXIT_CODE: i32 = 137;

/// A finished (or stuck) Job's outcome, for the Job watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobOutcome {
    /// Not finished: keep watching.
    Running,
    /// Complete: record `(stage, complete)` and move to the next stage.
    Succeeded,
    /// The stage timed out: its retries are spent on genuine failures, or the interrupt Job's deadline
    /// passed. `(stage, erroring)` stays, the Job stays as evidence, nothing recreates the stage until
    /// the package changes, a rerun/reset, a config update, or the failure TTL.
    TimedOut,
    /// Failed without any genuine failure (only admission rejections or disruptions): record it as
    /// processed, delete the Job, run the stage again.
    OnlyRejected,
    /// The Job controller decided the Job fails (`FailureTarget`) but cannot finish it, typically
    /// because its pods sit on an unreachable node. Past a bound, it surfaces as erroring.
    Stuck,
}

/// The pod carries `DisruptionTarget=True`: the cluster, not the package, ended it.
pub fn is_disrupted(pod: &StoredPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == DISRUPTION_TARGET && c.status == "True")
        })
}

/// The kubelet refused the pod at admission (`OutOfcpu`, `NodeAffinity`, ...): Failed with no
/// container status at all and not past its own deadline. Nothing of the package ran, so it is no
/// attempt and holds no evidence of the stage.
pub fn is_admission_rejection(pod: &StoredPod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    status.phase.as_deref() == Some("Failed")
        && status.reason.as_deref() != Some(DEADLINE_EXCEEDED)
        && status
            .init_container_statuses
            .iter()
            .chain(status.container_statuses.iter())
            .flatten()
            .next()
            .is_none()
}

/// The one genuine-failure predicate (DESIGN §4.4). A disrupted pod never failed genuinely. Otherwise
/// the pod failed genuinely when it is Failed with reason `DeadlineExceeded` (its own time bound), or
/// when any init or regular container's current state is terminated with a non-zero exit code that
/// is not the kubelet's `ContainerStatusUnknown`/137 placeholder, nor the interrupt container
/// killed by its own reboot ([`terminated_with_failure`]). A Failed pod with no container statuses
/// (kubelet admission rejection such as `OutOfcpu` or `NodeAffinity`) is not genuine.
///
/// Only the current state counts, not `lastState`: for an interrupt pod (`OnFailure`) a reboot leaves
/// a killed container behind in `lastState`, which is the expected path, not a failure.
pub fn is_genuine_failure(pod: &StoredPod) -> bool {
    if is_disrupted(pod) {
        return false;
    }
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let deadline = status.phase.as_deref() == Some("Failed")
        && status.reason.as_deref() == Some(DEADLINE_EXCEEDED);
    deadline
        || status
            .init_container_statuses
            .iter()
            .chain(status.container_statuses.iter())
            .flatten()
            .any(terminated_with_failure)
}

/// A container whose current state is terminated with a non-zero exit code that is not the kubelet's
/// `ContainerStatusUnknown`/137 placeholder (a status it lost, not a run that failed), nor the
/// interrupt container killed by the reboot it asked for: it ran and failed, so its log holds
/// evidence.
pub fn terminated_with_failure(container: &StoredContainerStatus) -> bool {
    container
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| {
            t.exit_code != 0
                && !(t.reason.as_deref() == Some(CONTAINER_STATUS_UNKNOWN)
                    && t.exit_code == SIGKILL_EXIT_CODE)
                && !killed_by_reboot(&container.name, t.exit_code, t.reason.as_deref())
        })
}

/// The container runtime's exit code and reason for a container whose task it lost (containerd's
/// CRI after a restart of the host: the process is gone and its exit status with it).
const RUNTIME_LOST_EXIT_CODE: i32 = 255;
const RUNTIME_LOST_REASON: &str = "Unknown";
/// The kubelet's reason for a container the kernel's OOM killer ended (also exit 137).
const OOM_KILLED: &str = "OOMKilled";

/// The interrupt container ended the way a reboot ends it: killed (SIGKILL, not by the OOM killer)
/// or lost by the runtime across the reboot (255, `Unknown`). Until the kubelet of the new boot
/// restarts it in place (`OnFailure`), this is its *current* state, and a watch can see it (a real
/// reboot on a real node showed it): counting it would mark a reboot that went as planned erroring.
/// A failed interrupt command exits with its own code and still counts.
fn killed_by_reboot(container: &str, exit_code: i32, reason: Option<&str>) -> bool {
    container == crate::naming::INTERRUPT_CONTAINER_NAME
        && ((exit_code == RUNTIME_LOST_EXIT_CODE && reason == Some(RUNTIME_LOST_REASON))
            || (exit_code == SIGKILL_EXIT_CODE && reason != Some(OOM_KILLED)))
}

/// The last time the Job's `Suspended` condition changed (either way: suspended, or resumed).
fn last_suspension_change(job: &StoredJob) -> Option<k8s_openapi::jiff::Timestamp> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Suspended")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// The pod was killed by a suspension of its Job (pause), not by its package: it is being deleted
/// and it was created before the Job's last `Suspended` change. The Job controller deletes the
/// active pods of a suspended Job without a `DisruptionTarget`, and such a pod (exit 143 after
/// SIGTERM, or 137 past its grace period) can still be terminating after the Job was resumed:
/// counted, it would mark a stage that never failed erroring, or even time it out. A pod created
/// after the last resume belongs to the resumed run and counts as any other.
pub fn is_suspension_kill(job: &StoredJob, pod: &StoredPod) -> bool {
    if pod.metadata.deletion_timestamp.is_none() {
        return false;
    }
    let (Some(changed), Some(created)) = (
        last_suspension_change(job),
        pod.metadata.creation_timestamp.as_ref(),
    ) else {
        return false;
    };
    created.0 <= changed
}

/// The Job's pods whose outcome counts: all but those [`is_suspension_kill`] names.
pub fn counted_pods(job: &StoredJob, pods: Vec<StoredPod>) -> Vec<StoredPod> {
    pods.into_iter()
        .filter(|p| !is_suspension_kill(job, p))
        .collect()
}

/// Waiting reasons of a container whose image the kubelet cannot pull.
pub const IMAGE_PULL_REASONS: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// The container of a live pod waiting on an image the kubelet cannot pull, said as a user reads
/// it: `container C, image I: ImagePullBackOff: <the kubelet's message>`. Init containers first
/// (they run first: a main container waits on them, not on its image).
pub fn image_pull_wait(pod: &StoredPod) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten()
        .find_map(|c| {
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting.reason.as_deref()?;
            IMAGE_PULL_REASONS.contains(&reason).then(|| {
                let image = c
                    .image
                    .as_deref()
                    .filter(|i| !i.is_empty())
                    .map_or_else(String::new, |i| format!(", image {i}"));
                let message = waiting
                    .message
                    .as_deref()
                    .filter(|m| !m.is_empty())
                    .map_or_else(String::new, |m| format!(": {m}"));
                format!("container {}{image}: {reason}{message}", c.name)
            })
        })
}

/// Genuine failed attempts among a Job's pods: the `restarts` written with `(stage, erroring)`.
/// Saturates at `i32::MAX` (the node-state field's type).
pub fn attempts(pods: &[StoredPod]) -> i32 {
    let count = pods.iter().filter(|p| is_genuine_failure(p)).count();
    i32::try_from(count).unwrap_or(i32::MAX)
}

/// Names of the genuine failed pods to delete so only the first and the last remain as evidence (the
/// first shows what went wrong originally, the last what it looks like now). Pods are ordered by
/// creation time, then name; pods already being deleted are not listed again.
pub fn evidence_to_prune(pods: &[StoredPod]) -> Vec<String> {
    let mut failed: Vec<&StoredPod> = pods.iter().filter(|p| is_genuine_failure(p)).collect();
    failed.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, &a.metadata.name)
            .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
    });
    if failed.len() <= 2 {
        return Vec::new();
    }
    let middle = failed.get(1..failed.len() - 1).unwrap_or_default();
    middle
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// An interrupt Job (label `nodewright.nvidia.com/interrupt=True`).
pub fn is_interrupt_job(job: &StoredJob) -> bool {
    job.interrupt
}

/// Evidence of a genuine failure that is not in the Job's retained pods: the node's entry for the
/// Job's stage is already `erroring`, written by the live path when it saw a genuine failure. Those
/// pods may be gone since (the node was deleted, pod GC), so the record must count on its own
/// (DESIGN §4.4: either path's evidence suffices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordedEvidence {
    /// The node's entry for this stage is `erroring`.
    Erroring,
    /// It is not (or there is no entry).
    #[default]
    None,
}

/// Classifies a Job from its conditions, its (retained) pods and what the live path recorded:
/// - `Complete=True` ⇒ [`JobOutcome::Succeeded`];
/// - `Failed=True` with a genuine failure among the pods (a pod killed by a suspension of the Job
///   never is one, [`is_suspension_kill`]), or the node's entry for the stage already
///   erroring, or an interrupt Job's `DeadlineExceeded` ⇒ [`JobOutcome::TimedOut`] (rerunning a
///   stage that failed genuinely would loop);
/// - `Failed=True` with no genuine evidence on either path ⇒ [`JobOutcome::OnlyRejected`];
/// - `FailureTarget=True` without a terminal condition ⇒ [`JobOutcome::Stuck`];
/// - anything else ⇒ [`JobOutcome::Running`] (including `SuccessCriteriaMet` while the Job waits for
///   its pods to terminate).
pub fn classify_job(job: &StoredJob, pods: &[StoredPod], recorded: RecordedEvidence) -> JobOutcome {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let active = |type_: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    };
    if active("Complete").is_some() {
        return JobOutcome::Succeeded;
    }
    if let Some(failed) = active("Failed") {
        let reason = failed.reason.as_deref();
        if is_interrupt_job(job) && reason == Some(DEADLINE_EXCEEDED) {
            return JobOutcome::TimedOut;
        }
        let genuine = pods
            .iter()
            .filter(|p| !is_suspension_kill(job, p))
            .any(is_genuine_failure);
        return if genuine || recorded == RecordedEvidence::Erroring {
            JobOutcome::TimedOut
        } else {
            JobOutcome::OnlyRejected
        };
    }
    if active("FailureTarget").is_some() {
        return JobOutcome::Stuck;
    }
    JobOutcome::Running
}

/// Why a stage timed out, as a user reads it in an Event: the cause seen on the last genuine failed
/// attempt, or, when no retained pod shows one, the evidence that was used instead.
pub fn timeout_cause(job: &StoredJob, pods: &[StoredPod]) -> String {
    let failed_reason = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .and_then(|c| c.reason.as_deref());
    if is_interrupt_job(job) && failed_reason == Some(DEADLINE_EXCEEDED) {
        let bound = job
            .spec
            .as_ref()
            .and_then(|s| s.active_deadline_seconds)
            .map_or_else(String::new, |s| format!(" of {s}s"));
        return format!("deadline exceeded: the interrupt stage's time bound{bound} passed");
    }
    let last = pods
        .iter()
        .filter(|p| is_genuine_failure(p))
        .max_by(|a, b| {
            (&a.metadata.creation_timestamp, &a.metadata.name)
                .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
        });
    let Some(status) = last.and_then(|p| p.status.as_ref()) else {
        return "genuine failure recorded while it ran (its pods are gone)".to_owned();
    };
    if status.reason.as_deref() == Some(DEADLINE_EXCEEDED) {
        return "deadline exceeded".to_owned();
    }
    status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten()
        .filter(|c| terminated_with_failure(c))
        .find_map(|c| {
            let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
            Some(format!("exit code {code} in container {}", c.name))
        })
        .unwrap_or_else(|| "genuine failure".to_owned())
}

/// How many attempts the Job allows (`backoffLimit + 1`), for "N of M attempts" in messages; `None`
/// for an interrupt Job, whose bound is its deadline, not a count.
pub fn attempt_limit(job: &StoredJob) -> Option<i64> {
    if is_interrupt_job(job) {
        return None;
    }
    job.spec
        .as_ref()
        .and_then(|s| s.backoff_limit)
        .map(|b| i64::from(b) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(value: Value) -> StoredPod {
        serde_json::from_value(value).expect("valid pod JSON")
    }

    fn job(value: Value) -> StoredJob {
        serde_json::from_value(value).expect("valid job JSON")
    }

    fn terminated(name: &str, exit_code: i32, reason: &str) -> Value {
        json!({"name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
               "state": {"terminated": {"exitCode": exit_code, "reason": reason}}})
    }

    fn waiting(name: &str, reason: &str) -> Value {
        json!({"name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
               "state": {"waiting": {"reason": reason}}})
    }

    fn failed_init(name: &str, exit_code: i32) -> StoredPod {
        pod(json!({
            "metadata": {"name": name},
            "status": {"phase": "Failed", "initContainerStatuses": [
                terminated("dax-init", 0, "Completed"),
                terminated("dax-apply", exit_code, "Error"),
            ]}
        }))
    }

    #[test]
    fn predicate_table() {
        let cases: Vec<(&str, StoredPod, bool)> = vec![
            ("exit 1 in an init container", failed_init("p", 1), true),
            (
                "exit 2 in a regular container",
                pod(
                    json!({"status": {"phase": "Failed", "containerStatuses": [terminated("pause", 2, "Error")]}}),
                ),
                true,
            ),
            (
                "pod deadline exceeded",
                pod(
                    json!({"status": {"phase": "Failed", "reason": "DeadlineExceeded",
                    "initContainerStatuses": [waiting("dax-init", "PodInitializing")]}}),
                ),
                true,
            ),
            (
                "pod deadline exceeded, no statuses",
                pod(json!({"status": {"phase": "Failed", "reason": "DeadlineExceeded"}})),
                true,
            ),
            (
                "ContainerStatusUnknown placeholder",
                pod(
                    json!({"status": {"phase": "Failed", "initContainerStatuses": [
                    terminated("dax-apply", 137, "ContainerStatusUnknown")]}}),
                ),
                false,
            ),
            (
                "137 for another reason is genuine (OOMKilled)",
                pod(
                    json!({"status": {"phase": "Failed", "initContainerStatuses": [
                    terminated("dax-apply", 137, "OOMKilled")]}}),
                ),
                true,
            ),
            (
                "the interrupt container killed by its reboot (SIGKILL), before its restart",
                pod(json!({"status": {"phase": "Running", "containerStatuses": [
                    terminated("interrupt", 137, "Error")]}})),
                false,
            ),
            (
                "the interrupt container lost by the runtime across its reboot",
                pod(json!({"status": {"phase": "Running", "containerStatuses": [
                    terminated("interrupt", 255, "Unknown")]}})),
                false,
            ),
            (
                "the interrupt command failing is genuine",
                pod(json!({"status": {"phase": "Running", "containerStatuses": [
                    terminated("interrupt", 1, "Error")]}})),
                true,
            ),
            (
                "the interrupt container OOM-killed is genuine",
                pod(json!({"status": {"phase": "Running", "containerStatuses": [
                    terminated("interrupt", 137, "OOMKilled")]}})),
                true,
            ),
            (
                "a package stage killed (SIGKILL) is genuine",
                pod(json!({"status": {"phase": "Failed", "containerStatuses": [
                    terminated("dax-apply", 137, "Error")]}})),
                true,
            ),
            (
                "admission rejection, no statuses (OutOfcpu)",
                pod(json!({"status": {"phase": "Failed", "reason": "OutOfcpu"}})),
                false,
            ),
            (
                "admission rejection, no statuses (NodeAffinity)",
                pod(
                    json!({"status": {"phase": "Failed", "reason": "NodeAffinity", "containerStatuses": []}}),
                ),
                false,
            ),
            (
                "disrupted, even with a non-zero exit",
                pod(json!({"status": {"phase": "Failed",
                    "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
                    "initContainerStatuses": [terminated("dax-apply", 137, "Error")]}})),
                false,
            ),
            (
                "disrupted and past its deadline",
                pod(
                    json!({"status": {"phase": "Failed", "reason": "DeadlineExceeded",
                    "conditions": [{"type": "DisruptionTarget", "status": "True"}]}}),
                ),
                false,
            ),
            (
                "DisruptionTarget=False does not protect",
                pod(json!({"status": {"phase": "Failed",
                    "conditions": [{"type": "DisruptionTarget", "status": "False"}],
                    "initContainerStatuses": [terminated("dax-apply", 1, "Error")]}})),
                true,
            ),
            (
                "succeeded",
                pod(
                    json!({"status": {"phase": "Succeeded", "initContainerStatuses": [
                    terminated("dax-init", 0, "Completed")], "containerStatuses": [terminated("pause", 0, "Completed")]}}),
                ),
                false,
            ),
            (
                "running",
                pod(
                    json!({"status": {"phase": "Pending", "initContainerStatuses": [
                    terminated("dax-init", 0, "Completed"), waiting("dax-apply", "PodInitializing")]}}),
                ),
                false,
            ),
            (
                "only lastState failed (interrupt restarted in place)",
                pod(
                    json!({"status": {"phase": "Pending", "initContainerStatuses": [{
                    "name": "interrupt", "image": "i", "imageID": "", "ready": false, "restartCount": 1,
                    "state": {"running": {}},
                    "lastState": {"terminated": {"exitCode": 143, "reason": "Error"}}}]}}),
                ),
                false,
            ),
            ("no status at all", StoredPod::default(), false),
        ];
        for (what, pod, genuine) in cases {
            assert_eq!(is_genuine_failure(&pod), genuine, "{what}");
        }
    }

    #[test]
    fn disruption_detection() {
        assert!(is_disrupted(&pod(json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "DisruptionTarget", "status": "True"}]}}))));
        assert!(!is_disrupted(&pod(json!({"status": {"conditions": [
            {"type": "DisruptionTarget", "status": "False"}]}}))));
        assert!(!is_disrupted(&StoredPod::default()));
    }

    fn job_with(conditions: Value, interrupt: bool) -> StoredJob {
        let labels = if interrupt {
            json!({"nodewright.nvidia.com/interrupt": "True"})
        } else {
            json!({})
        };
        job(
            json!({"metadata": {"name": "j", "labels": labels}, "status": {"conditions": conditions}}),
        )
    }

    fn rejected() -> StoredPod {
        pod(json!({"status": {"phase": "Failed", "reason": "OutOfcpu"}}))
    }

    #[test]
    fn classification() {
        let genuine = vec![failed_init("a", 1)];
        let only_rejected = vec![rejected(), rejected()];
        let cases: Vec<(&str, StoredJob, &[StoredPod], JobOutcome)> = vec![
            (
                "complete",
                job_with(json!([{"type": "Complete", "status": "True"}]), false),
                &[],
                JobOutcome::Succeeded,
            ),
            (
                "complete after SuccessCriteriaMet",
                job_with(
                    json!([{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]),
                    false,
                ),
                &genuine,
                JobOutcome::Succeeded,
            ),
            (
                "backoff limit with a genuine failure",
                job_with(
                    json!([{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                           {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]),
                    false,
                ),
                &genuine,
                JobOutcome::TimedOut,
            ),
            (
                "backoff limit with only rejections",
                job_with(
                    json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]),
                    false,
                ),
                &only_rejected,
                JobOutcome::OnlyRejected,
            ),
            (
                "backoff limit, pods gone, nothing recorded",
                job_with(
                    json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]),
                    false,
                ),
                &[],
                JobOutcome::OnlyRejected,
            ),
            (
                "interrupt deadline",
                job_with(
                    json!([{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]),
                    true,
                ),
                &[],
                JobOutcome::TimedOut,
            ),
            (
                "package Job deadline (none is set) without a genuine failure",
                job_with(
                    json!([{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]),
                    false,
                ),
                &only_rejected,
                JobOutcome::OnlyRejected,
            ),
            (
                "failure target only",
                job_with(
                    json!([{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"}]),
                    false,
                ),
                &genuine,
                JobOutcome::Stuck,
            ),
            (
                "failure target, interrupt",
                job_with(
                    json!([{"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"}]),
                    true,
                ),
                &[],
                JobOutcome::Stuck,
            ),
            (
                "success criteria met, pods terminating",
                job_with(
                    json!([{"type": "SuccessCriteriaMet", "status": "True"}]),
                    false,
                ),
                &[],
                JobOutcome::Running,
            ),
            (
                "suspended",
                job_with(json!([{"type": "Suspended", "status": "True"}]), false),
                &[],
                JobOutcome::Running,
            ),
            (
                "Failed=False is not failed",
                job_with(json!([{"type": "Failed", "status": "False"}]), false),
                &genuine,
                JobOutcome::Running,
            ),
            (
                "no status",
                StoredJob::default(),
                &genuine,
                JobOutcome::Running,
            ),
        ];
        for (what, job, pods, outcome) in cases {
            assert_eq!(
                classify_job(&job, pods, RecordedEvidence::None),
                outcome,
                "{what}"
            );
        }
    }

    #[test]
    fn the_live_paths_erroring_record_is_evidence_when_the_pods_are_gone() {
        let backoff = job_with(
            json!([{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                   {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]),
            false,
        );
        // The retained pods were collected (node deleted, pod GC), or only rejections remain: the
        // record the live path wrote still says the stage failed genuinely.
        for pods in [vec![], vec![rejected()]] {
            assert_eq!(
                classify_job(&backoff, &pods, RecordedEvidence::Erroring),
                JobOutcome::TimedOut
            );
            assert_eq!(
                classify_job(&backoff, &pods, RecordedEvidence::None),
                JobOutcome::OnlyRejected
            );
        }
        // A Job that went from a stale FailureTarget to Failed once its pods were collected.
        let stale = job_with(
            json!([{"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                   {"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}]),
            false,
        );
        assert_eq!(
            classify_job(&stale, &[], RecordedEvidence::Erroring),
            JobOutcome::TimedOut
        );
        // The record never turns success or running into a failure.
        let complete = job_with(json!([{"type": "Complete", "status": "True"}]), false);
        assert_eq!(
            classify_job(&complete, &[], RecordedEvidence::Erroring),
            JobOutcome::Succeeded
        );
        let running = job_with(json!([]), false);
        assert_eq!(
            classify_job(&running, &[], RecordedEvidence::Erroring),
            JobOutcome::Running
        );
    }

    fn failed_at(name: &str, created: &str) -> StoredPod {
        pod(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "status": {"phase": "Failed", "initContainerStatuses": [terminated("dax-apply", 1, "Error")]}
        }))
    }

    #[test]
    fn an_attempt_waiting_on_an_image_it_cannot_pull_is_named_with_the_kubelets_words() {
        let waiting_on = |reason: &str, message: &str| {
            pod(
                json!({"status": {"phase": "Pending", "initContainerStatuses": [
                    {"name": "dax-init", "image": "ghcr.io/x/pkg:1.0", "imageID": "", "ready": false,
                     "restartCount": 0,
                     "state": {"waiting": {"reason": reason, "message": message}}}
                ]}}),
            )
        };
        assert_eq!(
            image_pull_wait(&waiting_on("ImagePullBackOff", "Back-off pulling image")).as_deref(),
            Some(
                "container dax-init, image ghcr.io/x/pkg:1.0: ImagePullBackOff: Back-off pulling image"
            )
        );
        assert!(image_pull_wait(&waiting_on("ErrImagePull", "")).is_some());
        assert!(image_pull_wait(&waiting_on("InvalidImageName", "")).is_some());
        assert_eq!(image_pull_wait(&waiting_on("PodInitializing", "")), None);
        assert_eq!(
            image_pull_wait(&pod(json!({"status": {"phase": "Running",
                "containerStatuses": [waiting("pause", "CrashLoopBackOff")]}}))),
            None
        );
        let mut gone = waiting_on("ImagePullBackOff", "");
        gone.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(
            image_pull_wait(&gone),
            None,
            "a pod being deleted waits on nothing"
        );
    }

    #[test]
    fn attempts_count_only_genuine_failures() {
        let pods = vec![
            failed_init("a", 1),
            rejected(),
            failed_init("b", 3),
            pod(json!({"status": {"phase": "Failed",
                "conditions": [{"type": "DisruptionTarget", "status": "True"}],
                "initContainerStatuses": [terminated("dax-apply", 137, "Error")]}})),
            pod(json!({"status": {"phase": "Running"}})),
        ];
        assert_eq!(attempts(&pods), 2);
        assert_eq!(attempts(&[]), 0);
    }

    #[test]
    fn evidence_keeps_the_first_and_the_last_genuine_failure() {
        let mut pods = vec![
            failed_at("p3", "2025-01-01T00:03:00Z"),
            failed_at("p1", "2025-01-01T00:01:00Z"),
            rejected(),
            failed_at("p4", "2025-01-01T00:04:00Z"),
            failed_at("p2", "2025-01-01T00:02:00Z"),
        ];
        assert_eq!(evidence_to_prune(&pods), ["p2", "p3"]);
        // Two or fewer: nothing to prune.
        assert!(evidence_to_prune(&pods[..2]).is_empty());
        // A pod already being deleted is not listed again.
        pods[0].metadata.deletion_timestamp = pods[1].metadata.creation_timestamp.clone();
        assert_eq!(evidence_to_prune(&pods), ["p2"]);
        // Same creation time: ordered by name.
        let tied = vec![
            failed_at("b", "2025-01-01T00:00:00Z"),
            failed_at("c", "2025-01-01T00:00:00Z"),
            failed_at("a", "2025-01-01T00:00:00Z"),
        ];
        assert_eq!(evidence_to_prune(&tied), ["b"]);
    }

    #[test]
    fn the_timeout_cause_names_what_the_last_attempt_shows() {
        let backoff = |interrupt: bool, reason: &str| {
            let mut j = job_with(
                json!([{"type": "Failed", "status": "True", "reason": reason}]),
                interrupt,
            );
            j.spec = Some(Default::default());
            if let Some(spec) = j.spec.as_mut() {
                spec.backoff_limit = Some(3);
                spec.active_deadline_seconds = Some(60);
            }
            j
        };
        let package = backoff(false, "BackoffLimitExceeded");
        assert_eq!(
            timeout_cause(
                &package,
                &[
                    failed_at("p1", "2025-01-01T00:01:00Z"),
                    failed_init("p0", 7)
                ]
            ),
            "exit code 1 in container dax-apply"
        );
        let deadline = pod(
            json!({"metadata": {"name": "d", "creationTimestamp": "2025-01-01T00:09:00Z"},
            "status": {"phase": "Failed", "reason": "DeadlineExceeded"}}),
        );
        assert_eq!(
            timeout_cause(
                &package,
                &[failed_at("p1", "2025-01-01T00:01:00Z"), deadline]
            ),
            "deadline exceeded"
        );
        assert_eq!(
            timeout_cause(&package, &[rejected()]),
            "genuine failure recorded while it ran (its pods are gone)"
        );
        assert_eq!(attempt_limit(&package), Some(4));
        let interrupt = backoff(true, "DeadlineExceeded");
        assert_eq!(
            timeout_cause(&interrupt, &[]),
            "deadline exceeded: the interrupt stage's time bound of 60s passed"
        );
        assert_eq!(attempt_limit(&interrupt), None);
    }

    /// A paused Job's pod killed by the suspension (exit 143, no `DisruptionTarget`) that is still
    /// terminating after the resume is no genuine failure: it neither marks the stage erroring nor
    /// times it out. A pod of the resumed run that fails does count.
    #[test]
    fn a_pod_killed_by_a_suspension_never_counts_after_the_resume() {
        let resumed = |failed: bool| {
            let mut conditions = vec![json!({"type": "Suspended", "status": "False",
                "reason": "JobResumed", "lastTransitionTime": "2025-01-01T00:05:00Z"})];
            if failed {
                conditions.push(json!({"type": "Failed", "status": "True",
                    "reason": "BackoffLimitExceeded"}));
            }
            job(json!({"metadata": {"name": "j"}, "status": {"conditions": conditions}}))
        };
        let sigterm = |name: &str, created: &str, deleted: Option<&str>| {
            pod(json!({
                "metadata": {"name": name, "creationTimestamp": created,
                    "deletionTimestamp": deleted},
                "status": {"phase": "Failed", "initContainerStatuses": [
                    terminated("dax-apply", 143, "Error")]}
            }))
        };
        // Killed by the suspension, still terminating after the resume at 00:05.
        let killed = sigterm("old", "2025-01-01T00:01:00Z", Some("2025-01-01T00:05:30Z"));
        assert!(
            is_genuine_failure(&killed),
            "143 alone looks like a failure"
        );
        assert!(is_suspension_kill(&resumed(false), &killed));
        let pods = counted_pods(&resumed(false), vec![killed.clone()]);
        assert_eq!(attempts(&pods), 0, "no erroring record from the live path");
        assert_eq!(
            classify_job(
                &resumed(true),
                std::slice::from_ref(&killed),
                RecordedEvidence::None
            ),
            JobOutcome::OnlyRejected,
            "a suspension kill never times a stage out"
        );
        // The resumed run's own failure counts (created after the resume), and so does a pod that
        // failed on its own before the suspension and is not being deleted.
        let own = sigterm("new", "2025-01-01T00:05:01Z", Some("2025-01-01T00:06:00Z"));
        let before = sigterm("before", "2025-01-01T00:00:00Z", None);
        for counted in [own, before] {
            assert!(!is_suspension_kill(&resumed(false), &counted));
            assert_eq!(
                classify_job(
                    &resumed(true),
                    &[killed.clone(), counted],
                    RecordedEvidence::None
                ),
                JobOutcome::TimedOut
            );
        }
        // A Job never suspended: a deleted pod counts as it did.
        let never = job(json!({"metadata": {"name": "j"}}));
        assert!(!is_suspension_kill(&never, &killed));
    }

    #[test]
    fn interrupt_jobs_are_recognised_by_label() {
        assert!(is_interrupt_job(&job_with(json!([]), true)));
        assert!(!is_interrupt_job(&job_with(json!([]), false)));
    }
}
