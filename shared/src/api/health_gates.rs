//! `healthGates` (on a DeploymentPolicy, or on a NodeWright without one): checks a node must pass
//! after its packages finished and before it is uncordoned and counted complete for its batch (the
//! GPU operator's validator wait, kured's alert gate). A node that does not pass them within a
//! gate's timeout is `erroring` with reason `GateFailed`, which counts as a failed node of its batch.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most gates one policy or NodeWright may name.
pub const MAX_HEALTH_GATES: usize = 10;
/// A gate's timeout when it sets none (as the GPU operator's validator wait).
pub const DEFAULT_GATE_TIMEOUT: &str = "10m";
/// The longest timeout a gate may have, in hours (admission refuses more).
pub const MAX_GATE_TIMEOUT_HOURS: i64 = 168;
/// What a no-firing-alert query writes where the node's name goes.
pub const NODE_PLACEHOLDER: &str = "$NODE";

/// The gates, and what happens to a node that fails them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthGates {
    /// Checked in order after a node's packages finished; all must pass before the node is
    /// uncordoned and counted complete.
    #[serde(default)]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["name"],
        "maxItems" = MAX_HEALTH_GATES,
    ))]
    pub gates: Vec<HealthGate>,
    /// What happens to a node whose gate timed out: `StayCordoned` (default: nothing is scheduled
    /// onto a node that failed its checks; an administrator looks at it) or `Uncordon` (it takes
    /// workloads again, still reported erroring). Either way it counts as a failed node of its
    /// batch, and it completes if its gates pass later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<GateFailureAction>,
}

impl HealthGates {
    /// Whether a node failing a gate is uncordoned (`onFailure: Uncordon`).
    pub fn uncordons_on_failure(&self) -> bool {
        self.on_failure == Some(GateFailureAction::Uncordon)
    }
}

/// What happens to a node whose gate timed out.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum GateFailureAction {
    /// The node stays cordoned (the default).
    #[default]
    StayCordoned,
    /// The NodeWright releases its cordon.
    Uncordon,
}

/// One gate: exactly one of `podsReady`, `nodeCondition` or `noFiringAlert`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.podsReady) ? 1 : 0) + (has(self.nodeCondition) ? 1 : 0) + (has(self.noFiringAlert) ? 1 : 0) == 1",
    "message": "a health gate sets exactly one of podsReady, nodeCondition or noFiringAlert"
}]))]
pub struct HealthGate {
    /// The gate's name, unique in the list (Events, `why` and the node's status name it).
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// How long a node may wait for this gate, from the moment its packages finished (a Go
    /// duration such as "10m"; at most 168h). Default 10m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "self.matches('^[-+]?(0|(([0-9]+(\\\\.[0-9]*)?|\\\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$')",
            "message": "a health gate's timeout must be a Go duration such as \"10m\""
        },
        {
            "rule": "!self.startsWith('-')",
            "message": "a health gate's timeout must not be negative"
        }
    ]))]
    pub timeout: Option<String>,
    /// The pods matching a selector in a namespace that run on the node must all be Ready, and at
    /// least `min` of them (e.g. a validator DaemonSet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_ready: Option<PodsReadyGate>,
    /// A condition of the node must have a status (e.g. `GpuHealthy` True).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_condition: Option<NodeConditionGate>,
    /// A Prometheus query must return no series for the node (e.g. its firing alerts). A query
    /// that fails counts as not passed (fail closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_firing_alert: Option<AlertGate>,
}

/// Pods that must be Ready on the node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodsReadyGate {
    /// The pods' namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The pods (on the node) the gate looks at; an empty selector is refused.
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub selector: LabelSelector,
    /// How many matching pods must be on the node and Ready at least (default 1: a node where the
    /// validator has not been scheduled yet waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub min: Option<i32>,
}

impl Eq for PodsReadyGate {}

/// A node condition that must have a status.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeConditionGate {
    /// The condition type, e.g. `GpuHealthy`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// The status it must have: `True` (default) or `False`. A node without the condition waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ConditionStatus>,
}

impl NodeConditionGate {
    /// The status the condition must have.
    pub fn wanted(&self) -> ConditionStatus {
        self.status.unwrap_or(ConditionStatus::True)
    }
}

/// A condition status a gate asks for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ConditionStatus {
    /// `True`.
    #[default]
    True,
    /// `False`.
    False,
}

impl ConditionStatus {
    /// As a node condition writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
        }
    }
}

/// A Prometheus query that must return nothing for the node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertGate {
    /// The Prometheus server's base URL (`http://` or `https://`), e.g.
    /// `http://prometheus.monitoring:9090`; the operator calls its `/api/v1/query`.
    #[schemars(length(min = 1, max = 2048))]
    pub prometheus_url: String,
    /// A PromQL instant query that returns a series for each reason the node is not healthy, with
    /// `$NODE` where the node's name goes, e.g. `ALERTS{alertstate="firing",node="$NODE"}`. Any
    /// series returned holds the node.
    #[schemars(length(min = 1, max = 4096))]
    pub query: String,
}
