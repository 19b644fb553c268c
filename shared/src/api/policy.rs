//! The `DeploymentPolicy` resource: how fast a change may roll across groups of nodes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The compartment for nodes that match no named compartment; reserved.
pub const DEFAULT_COMPARTMENT: &str = "__default__";

/// Rollout rules shared by NodeWrights that name this policy in `spec.deploymentPolicy`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "nodewright.nvidia.com",
    version = "v1alpha1",
    kind = "DeploymentPolicy",
    plural = "deploymentpolicies",
    singular = "deploymentpolicy",
    shortname = "nwdp",
    // Not "nodewright": kubectl expands a category before it resolves resource names, so a category
    // equal to NodeWright's singular turned `kubectl get nodewright NAME` into a get of both kinds.
    category = "nodewright-all",
    doc = "Rollout rules (budgets and batch strategies per group of nodes) that NodeWrights reference by name."
)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentPolicySpec {
    /// Budget and strategy for nodes that match no compartment (the `__default__` compartment).
    pub default: PolicyDefault,

    /// Named groups of nodes, each with its own budget and strategy. A node matching several is put in
    /// the safest one (fixed before linear before exponential, then the smallest, then by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["name"],
        "maxItems" = 100,
        "x-kubernetes-validations" = [{
            "rule": "self.all(c, c.name != '__default__')",
            "message": "compartment name \"__default__\" is reserved for nodes that match no compartment"
        }]
    ))]
    pub compartments: Vec<Compartment>,

    /// When new nodes may start: outside every window no node is admitted into the rollout (nodes
    /// already in progress finish their stages). Unset or empty: any time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 20))]
    pub windows: Vec<MaintenanceWindow>,

    /// Checks every node must pass after its packages finished, before it is uncordoned and counted
    /// complete for its batch (validator pods Ready, a node condition, no firing alert). Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_gates: Option<super::HealthGates>,

    /// Reset every compartment's batch state when a NodeWright using this policy completes or a
    /// package version changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub reset_batch_state_on_completion: Option<bool>,

    /// When the failure threshold stops a compartment's rollout, write the NodeWright's previous
    /// revision (`status.revisions`) back as its spec, once, with a Warning Event naming both
    /// revisions: the nodes return to it through this policy's budget and batches. The rollout
    /// of the rollback is never rolled back again. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_on_failure: Option<bool>,
}

/// The longest `soak` a strategy may have, in hours (admission refuses more; the planner caps at
/// it). One copy for the webhook and the planner.
pub const MAX_SOAK_HOURS: i64 = 168;

/// Budget and strategy of the default compartment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDefault {
    /// Most nodes in progress at once.
    pub budget: DeploymentBudget,
    /// How batch sizes evolve.
    pub strategy: DeploymentStrategy,
}

/// A named group of nodes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Compartment {
    /// Unique name (status key). `__default__` is reserved.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The nodes in this compartment.
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub selector: LabelSelector,
    /// Most nodes in progress at once in this compartment.
    pub budget: DeploymentBudget,
    /// How batch sizes evolve. Unset: every batch is as large as the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<DeploymentStrategy>,
}

/// Ceiling of nodes in progress at once: exactly one of percent or count.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.percent) != has(self.count)",
    "message": "budget: set exactly one of percent or count"
}]))]
pub struct DeploymentBudget {
    /// Share of the compartment's nodes, 1–100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub percent: Option<i32>,
    /// Number of nodes, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub count: Option<i32>,
}

/// Batch strategy: exactly one of fixed, linear or exponential.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.fixed) ? 1 : 0) + (has(self.linear) ? 1 : 0) + (has(self.exponential) ? 1 : 0) == 1",
    "message": "strategy: set exactly one of fixed, linear or exponential"
}]))]
pub struct DeploymentStrategy {
    /// Every batch has initialBatch nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<BatchParameters>,
    /// Batches grow by delta after a successful batch and shrink by it after a failed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear: Option<LinearStrategy>,
    /// Batches multiply by growthFactor after a successful batch and divide after a failed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exponential: Option<ExponentialStrategy>,
}

/// Parameters every strategy has.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchParameters {
    /// Size of the first batch (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub initial_batch: Option<i32>,
    /// Percent of a batch's nodes that must succeed for the batch to pass, 1–100 (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub batch_threshold: Option<i32>,
    /// Consecutive failed batches that stop the rollout while below safetyLimit (default: never stop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub failure_threshold: Option<i32>,
    /// Progress percent below which failures shrink batches and count toward failureThreshold, 1–100
    /// (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub safety_limit: Option<i32>,
    /// How long the nodes of a finished batch must stay healthy before the batch is judged and the
    /// next one starts (a Go duration, e.g. `10m`; at most 168h). A node of the batch that goes
    /// erroring meanwhile keeps the batch open and counts as its failure if it does not recover.
    /// Unset or `0`: the next batch starts at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub soak: Option<String>,
}

/// Linear strategy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinearStrategy {
    /// Common parameters.
    #[serde(flatten)]
    pub batch: BatchParameters,
    /// Nodes added to (or removed from) the batch size each time (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub delta: Option<i32>,
}

/// Exponential strategy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExponentialStrategy {
    /// Common parameters.
    #[serde(flatten)]
    pub batch: BatchParameters,
    /// Factor the batch size is multiplied (or divided) by each time, at least 2 (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2))]
    pub growth_factor: Option<i32>,
}

/// A recurring maintenance window: on each of `days`, from `start` to `end` in `timeZone`. An `end`
/// at or before `start` crosses midnight into the next day (`22:00`-`04:00`), and `start` equal to
/// `end` is the whole day from `start`. Checked at admission, where a bad time or zone is refused
/// with the field and the fix.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// The days the window opens on (in `timeZone`), e.g. `[Mon, Tue]`. Unset or empty: every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 7))]
    pub days: Vec<Weekday>,
    /// Local opening time, `HH:MM` (24-hour clock).
    #[schemars(length(max = 16))]
    pub start: String,
    /// Local closing time, `HH:MM` (24-hour clock); at or before `start`: the next day.
    #[schemars(length(max = 16))]
    pub end: String,
    /// IANA time zone of `start` and `end`, e.g. `Europe/Berlin` (the operator carries the time
    /// zone database; daylight saving time is followed). Unset: `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
}

/// A day of the week, as a maintenance window names it.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum Weekday {
    /// Monday.
    Mon,
    /// Tuesday.
    Tue,
    /// Wednesday.
    Wed,
    /// Thursday.
    Thu,
    /// Friday.
    Fri,
    /// Saturday.
    Sat,
    /// Sunday.
    Sun,
}
