//! The per-NodeWright node conditions (upstream-operator.md §6.4, renamed), so `kubectl describe
//! node` says which NodeWright is not done on the node and whether a package there is failing:
//! - `nodewright.nvidia.com/<nw>/NotReady`: True (`Incomplete`) until the node is complete for the
//!   NodeWright, then False (`Complete`);
//! - `nodewright.nvidia.com/<nw>/Erroring`: True (`Package(s) Erroring or Unknown`) while a package
//!   record on the node is erroring or unknown, else False (`Not Erroring`).
//!
//! They live in `node.status.conditions` and are written with a strategic-merge status patch keyed
//! by condition type, so the kubelet's own conditions are never touched. A condition is rewritten
//! only when its status or reason changes (its transition time then moves), so a steady fleet sends
//! nothing; the finalizer removes both.

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use nodewright_shared::keys::GROUP;
use serde_json::{Value, json};

/// `nodewright.nvidia.com/<nw>/NotReady`.
pub fn not_ready_type(nodewright: &str) -> String {
    format!("{GROUP}/{nodewright}/NotReady")
}

/// `nodewright.nvidia.com/<nw>/Erroring`.
pub fn erroring_type(nodewright: &str) -> String {
    format!("{GROUP}/{nodewright}/Erroring")
}

/// A stage the cluster keeps from running, named in the Erroring condition (the Job and the
/// cluster's own words), so `kubectl describe node` says what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageProblem {
    /// What keeps it.
    pub kind: ProblemKind,
    /// The Job (`namespace/name`).
    pub job: String,
    /// The apiserver's refusal, or the image and the kubelet's message.
    pub message: String,
}

/// What keeps a stage from running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// The cluster refuses the stage's pod (Pod Security, a quota, an admission webhook).
    PodsNotCreated,
    /// The stage's pod waits on an image the kubelet cannot pull (`ImagePullBackOff`, ...).
    ImagePullFailing,
}

impl ProblemKind {
    /// The condition's reason.
    pub fn reason(self) -> &'static str {
        match self {
            ProblemKind::PodsNotCreated => PODS_NOT_CREATED_REASON,
            ProblemKind::ImagePullFailing => IMAGE_PULL_FAILING_REASON,
        }
    }

    fn what(self) -> &'static str {
        match self {
            ProblemKind::PodsNotCreated => "cannot create its pod",
            ProblemKind::ImagePullFailing => "cannot pull an image",
        }
    }
}

/// Reason of the Erroring condition for [`ProblemKind::PodsNotCreated`].
pub const PODS_NOT_CREATED_REASON: &str = "PodsNotCreated";
/// Reason of the Erroring condition for [`ProblemKind::ImagePullFailing`].
pub const IMAGE_PULL_FAILING_REASON: &str = "ImagePullFailing";

/// The two conditions the node should carry for this NodeWright.
pub fn desired(
    nodewright: &str,
    complete: bool,
    erroring: bool,
    now: Timestamp,
) -> [NodeCondition; 2] {
    desired_with(nodewright, complete, erroring, None, now)
}

/// [`desired`], with the Erroring condition naming a stage the cluster keeps from running.
pub fn desired_with(
    nodewright: &str,
    complete: bool,
    erroring: bool,
    problem: Option<&StageProblem>,
    now: Timestamp,
) -> [NodeCondition; 2] {
    let condition = |type_: String, status: bool, reason: &str, message: String| NodeCondition {
        type_,
        status: if status { "True" } else { "False" }.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_transition_time: Some(Time(now)),
        last_heartbeat_time: Some(Time(now)),
    };
    [
        condition(
            not_ready_type(nodewright),
            !complete,
            if complete { "Complete" } else { "Incomplete" },
            format!("NodeWright {nodewright} Ready"),
        ),
        match problem {
            Some(p) => condition(
                erroring_type(nodewright),
                true,
                p.kind.reason(),
                format!(
                    "NodeWright {nodewright}: Job {} {}: {}",
                    p.job,
                    p.kind.what(),
                    p.message
                ),
            ),
            None => condition(
                erroring_type(nodewright),
                erroring,
                if erroring {
                    "Package(s) Erroring or Unknown"
                } else {
                    "Not Erroring"
                },
                format!("Package Erroring or Unknown for {nodewright}"),
            ),
        },
    ]
}

/// The conditions of `desired` that the node lacks or carries with another status or reason.
pub fn changed<'a>(node: &Node, desired: &'a [NodeCondition]) -> Vec<&'a NodeCondition> {
    let current = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    desired
        .iter()
        .filter(|want| {
            !current.iter().any(|have| {
                have.type_ == want.type_ && have.status == want.status && have.reason == want.reason
            })
        })
        .collect()
}

/// The status patch that brings the node's conditions for this NodeWright to `complete` and
/// `erroring`; `None` when they already say so (one status patch at most, only on a change).
pub fn sync_patch(
    node: &Node,
    nodewright: &str,
    complete: bool,
    erroring: bool,
    problem: Option<&StageProblem>,
    now: Timestamp,
) -> Option<Value> {
    let want = desired_with(nodewright, complete, erroring, problem, now);
    let changed = changed(node, &want);
    if changed.is_empty() {
        return None;
    }
    let conditions: Vec<Value> = changed
        .into_iter()
        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
        .collect();
    Some(json!({ "status": { "conditions": conditions } }))
}

/// The status patch that removes both conditions (NodeWright deletion); `None` when neither is
/// there.
pub fn remove_patch(node: &Node, nodewright: &str) -> Option<Value> {
    let types = [not_ready_type(nodewright), erroring_type(nodewright)];
    let present = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| types.contains(&c.type_));
    if !present {
        return None;
    }
    let deletions: Vec<Value> = types
        .iter()
        .map(|t| json!({ "type": t, "$patch": "delete" }))
        .collect();
    Some(json!({ "status": { "conditions": deletions } }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, NodeStatus};

    use super::*;

    fn node_with(conditions: Vec<NodeCondition>) -> Node {
        Node {
            status: Some(NodeStatus {
                conditions: Some(conditions),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn a_refused_pod_names_its_job_and_the_refusal_in_the_erroring_condition() {
        let now = Timestamp::now();
        let refused = StageProblem {
            kind: ProblemKind::PodsNotCreated,
            job: "nodewright/gpu-apply".into(),
            message: "violates PodSecurity \"baseline:latest\"".into(),
        };
        let [_, erroring] = desired_with("gpu", false, true, Some(&refused), now);
        assert_eq!(erroring.status, "True");
        assert_eq!(erroring.reason.as_deref(), Some(PODS_NOT_CREATED_REASON));
        let message = erroring.message.unwrap_or_default();
        assert!(
            message.contains("nodewright/gpu-apply") && message.contains("PodSecurity"),
            "{message}"
        );
        // From the generic erroring reason to this one is a change to write, and back again.
        let generic = node_with(desired("gpu", false, true, now).to_vec());
        assert!(sync_patch(&generic, "gpu", false, true, Some(&refused), now).is_some());
        let named = node_with(desired_with("gpu", false, true, Some(&refused), now).to_vec());
        assert!(sync_patch(&named, "gpu", false, true, Some(&refused), now).is_none());
        assert!(sync_patch(&named, "gpu", false, true, None, now).is_some());
    }

    #[test]
    fn incomplete_then_complete_then_erroring() {
        let now = Timestamp::UNIX_EPOCH;
        let [not_ready, erroring] = desired("gpu", false, false, now);
        assert_eq!(not_ready.type_, "nodewright.nvidia.com/gpu/NotReady");
        assert_eq!(
            (not_ready.status.as_str(), not_ready.reason.as_deref()),
            ("True", Some("Incomplete"))
        );
        assert_eq!(
            (erroring.status.as_str(), erroring.reason.as_deref()),
            ("False", Some("Not Erroring"))
        );
        let [done, _] = desired("gpu", true, false, now);
        assert_eq!(
            (done.status.as_str(), done.reason.as_deref()),
            ("False", Some("Complete"))
        );
        let [_, failing] = desired("gpu", false, true, now);
        assert_eq!(failing.status, "True");
    }

    #[test]
    fn only_changed_conditions_are_written() {
        let now = Timestamp::UNIX_EPOCH;
        let want = desired("gpu", false, false, now);
        assert_eq!(
            changed(&Node::default(), &want).len(),
            2,
            "a fresh node gets both"
        );
        // Same status and reason, other times: nothing to write.
        let later = desired("gpu", false, false, Timestamp::now());
        let node = node_with(later.to_vec());
        assert!(changed(&node, &want).is_empty());
        // The node completes: only NotReady changes.
        let done = desired("gpu", true, false, now);
        let diff = changed(&node, &done);
        assert_eq!(diff.len(), 1);
        assert_eq!(diff[0].type_, "nodewright.nvidia.com/gpu/NotReady");
        // Another NodeWright's conditions are not ours.
        let other = node_with(desired("cpu", true, false, now).to_vec());
        assert_eq!(changed(&other, &done).len(), 2);
    }
}
