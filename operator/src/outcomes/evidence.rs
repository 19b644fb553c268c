//! The `nodewright.nvidia.com/last-logs` annotation on a Job (DESIGN §4.4, Evidence): what an
//! administrator reads first when a stage failed or is stuck.
//!
//! The retained failed pods keep their own logs (the kubelet archives a terminated container's log),
//! but two cases leave nothing to read: a Job stuck at `FailureTarget` whose pod cannot finish (its
//! node is unreachable), and attempts whose container never started (an image that cannot be pulled:
//! there is no log at all, only a waiting reason). For those the annotation holds the waiting reason
//! of the container that never started, or the tail of the stuck container's log when the log call
//! succeeds. A log call that fails (the node is gone, or a simulated node that has no logs) writes
//! nothing rather than a guess. The annotation is written once; a later pass never overwrites it.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, LogParams};
use nodewright_core::jobs::classify::{
    CONTAINER_STATUS_UNKNOWN, is_admission_rejection, is_disrupted, is_genuine_failure,
    terminated_with_failure,
};
use nodewright_core::jobs::stored::{StoredContainerStatus, StoredJob, StoredPod};
use nodewright_shared::keys;
use serde_json::json;
use tracing::{debug, info};

use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::failed;

/// Most bytes of the annotation (annotations share a 256 KiB budget per object).
pub const MAX_BYTES: usize = 4096;
/// Lines of log asked for.
const TAIL_LINES: i64 = 50;

/// The container an administrator should look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stuck {
    /// It never ran: no log exists, its waiting reason explains why.
    NeverStarted {
        /// Pod name.
        pod: String,
        /// Container name (`None` when the pod has no container status at all).
        container: Option<String>,
        /// Waiting reason (`ImagePullBackOff`, ...), or the pod's phase/reason without statuses.
        reason: String,
        /// Waiting message, if any.
        message: Option<String>,
    },
    /// It ran (or runs): its log tail is the evidence.
    Ran {
        /// Pod name.
        pod: String,
        /// Container name.
        container: String,
    },
}

fn succeeded(status: &StoredContainerStatus) -> bool {
    status
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0)
}

/// The stuck (or last failing) container of the latest attempt that counts (one the cluster did
/// not disrupt and the kubelet did not reject at admission: a rejected pod ran nothing of the
/// package, so "never started: OutOfcpu" would point away from what failed): the first init
/// container, then regular container, that did not succeed.
pub fn stuck_container(pods: &[StoredPod]) -> Option<Stuck> {
    let counts = |p: &&StoredPod| !is_disrupted(p) && !is_admission_rejection(p);
    let pod = pods.iter().filter(counts).max_by(|a, b| {
        (&a.metadata.creation_timestamp, &a.metadata.name)
            .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
    })?;
    let name = pod.metadata.name.clone()?;
    let status = pod.status.as_ref()?;
    let containers: Vec<&StoredContainerStatus> = status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten()
        .collect();
    if containers.is_empty() {
        return Some(Stuck::NeverStarted {
            pod: name,
            container: None,
            reason: status
                .reason
                .clone()
                .or_else(|| status.phase.clone())
                .unwrap_or_else(|| "Pending".to_owned()),
            message: status.message.clone(),
        });
    }
    let c = containers.into_iter().find(|c| !succeeded(c))?;
    let state = c.state.as_ref();
    let ran_before = c
        .last_state
        .as_ref()
        .is_some_and(|s| s.terminated.is_some());
    if let Some(waiting) = state.and_then(|s| s.waiting.as_ref())
        && !ran_before
    {
        return Some(Stuck::NeverStarted {
            pod: name,
            container: Some(c.name.clone()),
            reason: waiting
                .reason
                .clone()
                .unwrap_or_else(|| "Waiting".to_owned()),
            message: waiting.message.clone(),
        });
    }
    // The kubelet's placeholder for a container it never ran (or lost): no log exists either.
    if let Some(placeholder) = state
        .and_then(|s| s.terminated.as_ref())
        .filter(|t| t.reason.as_deref() == Some(CONTAINER_STATUS_UNKNOWN))
        && !ran_before
    {
        return Some(Stuck::NeverStarted {
            pod: name,
            container: Some(c.name.clone()),
            reason: CONTAINER_STATUS_UNKNOWN.to_owned(),
            message: placeholder.message.clone(),
        });
    }
    Some(Stuck::Ran {
        pod: name,
        container: c.name.clone(),
    })
}

/// Whether a retained attempt ran and failed, so its own (archived) log already holds the evidence.
/// The kubelet's `ContainerStatusUnknown`/137 placeholder is not a run: a pod that only carries it
/// (e.g. a container that never started before its deadline) has no log, and gets the snapshot.
pub fn has_archived_logs(pods: &[StoredPod]) -> bool {
    pods.iter().filter(|p| is_genuine_failure(p)).any(|p| {
        p.status.as_ref().is_some_and(|s| {
            s.init_container_statuses
                .iter()
                .chain(s.container_statuses.iter())
                .flatten()
                .any(terminated_with_failure)
        })
    })
}

/// The annotation text for a container that never started.
pub fn never_started_text(
    pod: &str,
    container: Option<&str>,
    reason: &str,
    message: Option<&str>,
) -> String {
    let what = container.map_or_else(
        || format!("pod {pod} never started"),
        |c| format!("pod {pod}: container {c} never started"),
    );
    let text = match message.filter(|m| !m.is_empty()) {
        Some(m) => format!("{what}: {reason}: {m}"),
        None => format!("{what}: {reason}"),
    };
    tail(&text, MAX_BYTES)
}

/// The annotation text for a log tail.
pub fn log_text(pod: &str, container: &str, log: &str) -> String {
    let header = format!("pod {pod}: container {container}, last log lines:\n");
    let room = MAX_BYTES.saturating_sub(header.len());
    format!("{header}{}", tail(log, room))
}

/// The last `max` bytes of `text`, cut on a character boundary (the end of a log is what matters).
pub fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text.get(start..).unwrap_or_default().to_owned()
}

/// Writes the annotation on `job` from its `pods`, unless it is already there. `only_without_archive`:
/// skip when a retained failed attempt has its own log (the `FailureTarget` rule).
pub async fn write_last_logs(
    ctx: &Context,
    job: &StoredJob,
    pods: &[StoredPod],
    only_without_archive: bool,
) -> Result<(), ReconcileError> {
    if job.has_last_logs || (only_without_archive && has_archived_logs(pods)) {
        return Ok(());
    }
    let job_name = job.name_any();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.config.jobs.namespace);
    let text = match stuck_container(pods) {
        None => return Ok(()),
        Some(Stuck::NeverStarted {
            pod,
            container,
            reason,
            message,
        }) => never_started_text(&pod, container.as_deref(), &reason, message.as_deref()),
        Some(Stuck::Ran { pod, container }) => {
            let params = LogParams {
                container: Some(container.clone()),
                tail_lines: Some(TAIL_LINES),
                limit_bytes: Some(i64::try_from(MAX_BYTES).unwrap_or(i64::MAX)),
                ..LogParams::default()
            };
            match pods_api.logs(&pod, &params).await {
                Ok(log) => log_text(&pod, &container, &log),
                Err(error) => {
                    debug!(job = %job_name, %pod, %container, %error, "no log to keep as evidence");
                    return Ok(());
                }
            }
        }
    };
    ctx.writer
        .patch_job(
            &job_name,
            json!({"metadata": {"annotations": {keys::LAST_LOGS_ANNOTATION: text}}}),
        )
        .await
        .map_err(failed(format!("writing the last logs of Job {job_name}")))?;
    info!(job = %job_name, "kept the last logs as evidence");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(value: Value) -> StoredPod {
        serde_json::from_value(value).expect("valid pod JSON")
    }

    fn status(name: &str, state: Value) -> Value {
        json!({"name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0, "state": state})
    }

    fn never_pulled(name: &str, created: &str) -> StoredPod {
        pod(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "status": {"phase": "Failed", "reason": "DeadlineExceeded", "initContainerStatuses": [
                status("dax-init", json!({"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}})),
                status("dax-apply", json!({"waiting": {"reason": "PodInitializing"}})),
            ]}
        }))
    }

    #[test]
    fn a_container_that_never_started_gives_its_waiting_reason() {
        let pods = vec![
            never_pulled("old", "2025-01-01T00:00:00Z"),
            never_pulled("new", "2025-01-01T00:01:00Z"),
        ];
        assert_eq!(
            stuck_container(&pods),
            Some(Stuck::NeverStarted {
                pod: "new".into(),
                container: Some("dax-init".into()),
                reason: "ImagePullBackOff".into(),
                message: Some("Back-off pulling image".into()),
            })
        );
        assert!(!has_archived_logs(&pods), "nothing ever ran");
        assert_eq!(
            never_started_text(
                "new",
                Some("dax-init"),
                "ImagePullBackOff",
                Some("Back-off pulling image")
            ),
            "pod new: container dax-init never started: ImagePullBackOff: Back-off pulling image"
        );
        assert_eq!(
            never_started_text("p", None, "Pending", None),
            "pod p never started: Pending"
        );
    }

    #[test]
    fn a_running_or_failed_container_is_read_from_its_log() {
        let running = pod(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Running", "initContainerStatuses": [
                status("dax-init", json!({"terminated": {"exitCode": 0}})),
                status("dax-apply", json!({"running": {}})),
            ]}
        }));
        assert_eq!(
            stuck_container(std::slice::from_ref(&running)),
            Some(Stuck::Ran {
                pod: "p".into(),
                container: "dax-apply".into()
            })
        );
        assert!(!has_archived_logs(&[running]));
        let failed = pod(json!({
            "metadata": {"name": "f"},
            "status": {"phase": "Failed", "initContainerStatuses": [
                status("dax-init", json!({"terminated": {"exitCode": 0}})),
                status("dax-apply", json!({"terminated": {"exitCode": 2, "reason": "Error"}})),
            ]}
        }));
        assert!(matches!(
            stuck_container(std::slice::from_ref(&failed)),
            Some(Stuck::Ran { ref container, .. }) if container == "dax-apply"
        ));
        assert!(has_archived_logs(&[failed]));
        // Past its deadline with only the kubelet's ContainerStatusUnknown/137 placeholder: the
        // pod is a genuine failure (DeadlineExceeded) but nothing ran, so no log holds evidence.
        let placeholder = pod(json!({
            "metadata": {"name": "u"},
            "status": {"phase": "Failed", "reason": "DeadlineExceeded", "initContainerStatuses": [
                status("dax-init", json!({"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown"}})),
            ]}
        }));
        assert!(is_genuine_failure(&placeholder));
        assert!(!has_archived_logs(std::slice::from_ref(&placeholder)));
        assert_eq!(
            stuck_container(&[placeholder]),
            Some(Stuck::NeverStarted {
                pod: "u".into(),
                container: Some("dax-init".into()),
                reason: "ContainerStatusUnknown".into(),
                message: None,
            })
        );
        // Restarted after a crash: waiting now, but it ran, so its log is the evidence.
        let restarted = pod(json!({
            "metadata": {"name": "r"},
            "status": {"phase": "Running", "initContainerStatuses": [{
                "name": "interrupt", "image": "i", "imageID": "", "ready": false, "restartCount": 1,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1}}}]}
        }));
        assert!(matches!(
            stuck_container(&[restarted]),
            Some(Stuck::Ran { .. })
        ));
    }

    #[test]
    fn disrupted_attempts_and_empty_lists_are_skipped() {
        let disrupted = pod(json!({
            "metadata": {"name": "d", "creationTimestamp": "2025-01-01T00:05:00Z"},
            "status": {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True"}],
                "initContainerStatuses": [status("dax-init", json!({"running": {}}))]}
        }));
        let pods = vec![never_pulled("a", "2025-01-01T00:00:00Z"), disrupted];
        assert!(matches!(
            stuck_container(&pods),
            Some(Stuck::NeverStarted { ref pod, .. }) if pod == "a"
        ));
        assert_eq!(stuck_container(&[]), None);
        let unscheduled = pod(json!({"metadata": {"name": "u"}, "status": {"phase": "Pending"}}));
        assert_eq!(
            stuck_container(&[unscheduled]),
            Some(Stuck::NeverStarted {
                pod: "u".into(),
                container: None,
                reason: "Pending".into(),
                message: None
            })
        );
    }

    /// D3: a timed-out Job whose last attempt was a kubelet admission rejection: the snapshot is
    /// taken from the last attempt that counts, never from the rejected pod; with nothing but
    /// rejections there is none.
    #[test]
    fn a_rejected_last_attempt_is_not_the_evidence() {
        let failed = pod(json!({
            "metadata": {"name": "ran", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "status": {"phase": "Failed", "initContainerStatuses": [
                status("dax-init", json!({"terminated": {"exitCode": 0}})),
                status("dax-apply", json!({"terminated": {"exitCode": 3, "reason": "Error"}})),
            ]}
        }));
        let rejected = |name: &str| {
            pod(json!({
                "metadata": {"name": name, "creationTimestamp": "2025-01-01T00:09:00Z"},
                "status": {"phase": "Failed", "reason": "OutOfcpu",
                    "message": "Pod was rejected: Node didn't have enough resource: cpu"}
            }))
        };
        assert_eq!(
            stuck_container(&[failed, rejected("rejected")]),
            Some(Stuck::Ran {
                pod: "ran".into(),
                container: "dax-apply".into()
            })
        );
        assert_eq!(stuck_container(&[rejected("a"), rejected("b")]), None);
    }

    #[test]
    fn the_tail_keeps_the_end_on_a_character_boundary() {
        assert_eq!(tail("abcdef", 3), "def");
        assert_eq!(tail("abc", 10), "abc");
        // "é" is two bytes: a cut in its middle moves forward.
        assert_eq!(tail("aébc", 3), "bc");
        let long = "x".repeat(MAX_BYTES * 2);
        let text = log_text("p", "c", &long);
        assert!(text.len() <= MAX_BYTES, "{}", text.len());
        assert!(text.starts_with("pod p: container c, last log lines:\n"));
    }
}
