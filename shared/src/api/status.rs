//! `NodeWright.status`: what the operator observed. Written only by the operator (status subresource).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::node_state::NodeState;

/// Observed state of a NodeWright.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeWrightStatus {
    /// The metadata.generation the operator last saw complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,

    /// Roll-up status over the targeted nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,

    /// Per node, the package records (mirror of the node's `nodewright.nvidia.com/nodeState_<name>`
    /// annotation, which is the source of truth).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_state: BTreeMap<String, NodeState>,

    /// Per node, its status for this NodeWright.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_status: BTreeMap<String, Status>,

    /// Ready, TaintNotTolerable, NodesIgnored, NodeStateMalformed, DeploymentPolicyNotFound...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Per node, the boot ID last seen (reboot detection).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_boot_ids: BTreeMap<String, String>,

    /// Nodes picked into the active batch, with the time they were picked.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_priority: BTreeMap<String, Time>,

    /// How many nodes have left nodePriority; the base of each node's `SKYHOOK_NODE_ORDER`.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub node_order_offset: i32,

    /// Per package, the configMap keys changed since the last completed config rollout.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_updates: BTreeMap<String, Vec<String>>,

    /// Per compartment (including `__default__`), rollout progress and batch state.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub compartment_statuses: BTreeMap<String, CompartmentStatus>,

    /// Nodes in progress or erroring.
    #[serde(default)]
    #[schemars(extend("default" = 0))]
    pub nodes_in_progress: i32,

    /// `<complete>/<targeted>` nodes.
    #[serde(default = "default_complete_nodes")]
    pub complete_nodes: String,

    /// `name:version` of every package, sorted, comma-separated.
    #[serde(default)]
    pub package_list: String,

    /// What holds new nodes back while the rollout has nodes left to start, e.g. `waiting for
    /// window (opens 2026-12-03T22:00+01:00)`; absent when nothing does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,

    /// The last specs (their packages) that completed on at least one node, oldest first, at most
    /// the operator's `REVISION_HISTORY_LIMIT`: what `kubectl nodewright history` lists and
    /// `kubectl nodewright rollback` writes back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = super::history::MAX_REVISIONS))]
    pub revisions: Vec<super::history::Revision>,

    /// The last automatic rollback (the DeploymentPolicy's `rollbackOnFailure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<super::history::AutomaticRollback>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

fn default_complete_nodes() -> String {
    "0/0".to_owned()
}

/// Status of a node for one NodeWright, and the roll-up status of the NodeWright.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default, JsonSchema)]
pub enum Status {
    /// Every package finished.
    #[serde(rename = "complete")]
    Complete,
    /// Work is running.
    #[serde(rename = "in_progress")]
    InProgress,
    /// A package is failing.
    #[serde(rename = "erroring")]
    Erroring,
    /// Prevented: untolerated taints, the ignore label, or a missing DeploymentPolicy.
    #[serde(rename = "blocked")]
    Blocked,
    /// Queued: not yet in a batch, or behind a higher-priority NodeWright.
    #[serde(rename = "waiting")]
    Waiting,
    /// This NodeWright (and those after it on its nodes) is paused.
    #[serde(rename = "paused")]
    Paused,
    /// This NodeWright is skipped.
    #[serde(rename = "disabled")]
    Disabled,
    /// Not determined yet. Unrecognised values read as unknown.
    #[default]
    #[serde(rename = "unknown", other)]
    Unknown,
}

impl Status {
    /// The name used in status, annotations and labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Complete => "complete",
            Status::InProgress => "in_progress",
            Status::Erroring => "erroring",
            Status::Blocked => "blocked",
            Status::Waiting => "waiting",
            Status::Paused => "paused",
            Status::Disabled => "disabled",
            Status::Unknown => "unknown",
        }
    }

    /// Parses a status; anything unrecognised is `Unknown`, as upstream does.
    pub fn parse_lenient(s: &str) -> Status {
        serde_json::from_value(serde_json::Value::from(s)).unwrap_or(Status::Unknown)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Rollout progress of one compartment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompartmentStatus {
    /// Targeted nodes in the compartment.
    pub matched: i32,
    /// Most nodes in progress at once, from the budget.
    pub ceiling: i32,
    /// Nodes in progress.
    pub in_progress: i32,
    /// Complete nodes.
    pub completed: i32,
    /// completed × 100 / matched.
    pub progress_percent: i32,
    /// Batch state, for compartments with a strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_state: Option<BatchState>,
}

/// Persisted state of a compartment's batch strategy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchState {
    /// The batch being rolled out, from 1.
    #[serde(default)]
    pub current_batch: i32,
    /// Failed batches in a row.
    #[serde(default)]
    pub consecutive_failures: i32,
    /// Complete nodes at the last batch evaluation.
    #[serde(default)]
    pub completed_nodes: i32,
    /// Erroring nodes at the last batch evaluation.
    #[serde(default)]
    pub failed_nodes: i32,
    /// The failure threshold was reached: the rollout stops until reset.
    #[serde(default)]
    pub should_stop: bool,
    /// Size of the last batch.
    #[serde(default)]
    pub last_batch_size: i32,
    /// Whether the last batch failed its threshold.
    #[serde(default)]
    pub last_batch_failed: bool,
    /// While the batch that just finished soaks (the strategy's `soak`): when it is judged and
    /// the next batch may start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak_until: Option<Time>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_status_strings_read_as_unknown() {
        assert_eq!(Status::parse_lenient("complete"), Status::Complete);
        assert_eq!(Status::parse_lenient("in_progress"), Status::InProgress);
        assert_eq!(Status::parse_lenient("finished"), Status::Unknown);
        let s: NodeWrightStatus = serde_json::from_str(
            r#"{"status":"exploded","nodeStatus":{"n1":"waiting","n2":"??"}}"#,
        )
        .expect("lenient status");
        assert_eq!(s.status, Some(Status::Unknown));
        assert_eq!(s.node_status.get("n2"), Some(&Status::Unknown));
        assert_eq!(s.complete_nodes, "0/0");
    }
}
