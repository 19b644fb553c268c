//! The `NodeWright` resource: which packages go onto which nodes, in which order, how fast.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::package::Package;
use super::status::NodeWrightStatus;

/// Desired state of a NodeWright: the packages and the nodes they go onto.
// Each printcolumn(...) repeats the same keys, which clippy mistakes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "nodewright.nvidia.com",
    version = "v1alpha1",
    kind = "NodeWright",
    plural = "nodewrights",
    singular = "nodewright",
    shortname = "nw",
    // Not "nodewright": kubectl expands a category before it resolves resource names, so a category
    // equal to NodeWright's singular turned `kubectl get nodewright NAME` into a get of both kinds.
    category = "nodewright-all",
    status = "NodeWrightStatus",
    doc = "A set of host packages, the nodes they go onto, their order, their disruption and how fast the change may roll across the fleet.",
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.status",
        description = "Roll-up status of the NodeWright"
    ),
    printcolumn(
        name = "Priority",
        type_ = "integer",
        json_path = ".spec.priority",
        description = "Lower runs first"
    ),
    printcolumn(
        name = "Nodes In-Progress",
        type_ = "integer",
        json_path = ".status.nodesInProgress",
        description = "Nodes in progress or erroring"
    ),
    printcolumn(
        name = "Complete Nodes",
        type_ = "string",
        json_path = ".status.completeNodes",
        description = "Complete nodes / targeted nodes"
    ),
    printcolumn(
        name = "Packages",
        type_ = "string",
        json_path = ".status.packageList",
        description = "name:version of every package"
    ),
    printcolumn(
        name = "Policy",
        type_ = "string",
        json_path = ".spec.deploymentPolicy",
        description = "DeploymentPolicy driving the rollout"
    ),
    printcolumn(
        name = "Waiting For",
        type_ = "string",
        json_path = ".status.waitingFor",
        description = "What holds new nodes back (a closed maintenance window)"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.deploymentPolicy) && size(self.deploymentPolicy) > 0 && has(self.interruptionBudget) && (has(self.interruptionBudget.percent) || has(self.interruptionBudget.count)))",
    "message": "deploymentPolicy and interruptionBudget are mutually exclusive: limit the rollout with one of them"
}, {
    "rule": "!(has(self.deploymentPolicy) && size(self.deploymentPolicy) > 0 && has(self.healthGates))",
    "message": "deploymentPolicy and healthGates are mutually exclusive: put the gates in the DeploymentPolicy"
}]))]
pub struct NodeWrightSpec {
    /// Run one package at a time on each node (one per reconcile pass) instead of every package whose
    /// dependencies are complete.
    #[serde(default)]
    pub serial: bool,

    /// Pods on a node matching this selector (Running or Pending) hold back the node's interrupt until
    /// they finish. Empty: never blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub pod_non_interrupt_labels: Option<LabelSelector>,

    /// How a node is drained before an interrupt (eviction or deletion, which pods, a grace period,
    /// a time bound). Unset: evict every pod that must leave, with no time bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_config: Option<super::DrainConfig>,

    /// The nodes this NodeWright targets. Empty: every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub node_selectors: Option<LabelSelector>,

    /// Name of the cluster-scoped DeploymentPolicy that drives the rollout (batches, budgets).
    /// Mutually exclusive with interruptionBudget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_policy: Option<String>,

    /// Per-NodeWright overrides of the DeploymentPolicy's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_policy_options: Option<DeploymentPolicyOptions>,

    /// Legacy rollout budget, used when no deploymentPolicy is set: how many nodes (count) or which
    /// share of the targeted nodes (percent) may be worked on at once. Not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption_budget: Option<InterruptionBudget>,

    /// Checks a node must pass after its packages finished, before it is uncordoned and counted
    /// complete, when no deploymentPolicy is set (a policy carries its own). Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_gates: Option<super::HealthGates>,

    /// The packages, keyed by name (at most 100). Dependencies between them form a graph that must
    /// have no cycles.
    #[serde(default)]
    #[schemars(extend("maxProperties" = MAX_PACKAGES))]
    // The rules about one package key live on the map (a value cannot see its key); their
    // messages name the key (see `super::cel`).
    #[schemars(extend("x-kubernetes-validations" = super::cel::packages_rules()))]
    pub packages: BTreeMap<String, Package>,

    /// Tolerations added to every package and interrupt pod, and used to decide whether a node's
    /// taints are tolerable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_tolerations: Vec<Toleration>,

    /// A node must complete this NodeWright before the runtime-required taint is removed from it.
    #[serde(default)]
    pub runtime_required: bool,

    /// With runtimeRequired: add the runtime-required taint to targeted nodes that NodeWright has never
    /// touched, so workloads wait for the packages.
    #[serde(default)]
    pub auto_taint_new_nodes: bool,

    /// With runtimeRequired: when the operator removes the runtime-required taint from a node
    /// (every runtimeRequired NodeWright targeting it is complete there), it cordons the node in the
    /// same write and marks it with the annotation nodewright.nvidia.com/runtimeRequiredCordon, so
    /// the node never takes workloads between the packages finishing and a validator checking it.
    /// Only a node that carried the taint is cordoned. The operator never lifts this cordon: the
    /// validator (or an administrator) removes the annotation and sets spec.unschedulable=false in
    /// one patch. A node uncordoned with the annotation left on it loses the annotation and is not
    /// cordoned again.
    #[serde(default)]
    pub runtime_required_cordon_after: bool,

    /// Order between NodeWrights: lower runs first; ties are broken by name.
    #[serde(default = "default_priority")]
    #[schemars(range(min = 1))]
    pub priority: i32,

    /// `node`: a node may move on to later-priority NodeWrights once done with this one. `all`: every
    /// node must finish this NodeWright before any node starts a later-priority one.
    #[serde(default)]
    pub sequencing: Sequencing,
}

/// The default `priority`.
pub const DEFAULT_PRIORITY: i32 = 200;

/// Most packages a NodeWright may hold (the CRD's `maxProperties` on `spec.packages`): the bound
/// keeps the CRD's CEL rules, which compare packages pairwise, within the apiserver's cost budget.
pub const MAX_PACKAGES: usize = 100;

fn default_priority() -> i32 {
    DEFAULT_PRIORITY
}

/// How NodeWrights of different priority are sequenced.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum Sequencing {
    /// Per node: a node moves on once it is done.
    #[default]
    #[serde(rename = "node")]
    Node,
    /// Fleet-wide: every node must be done first.
    #[serde(rename = "all")]
    All,
}

/// Per-NodeWright overrides of DeploymentPolicy settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentPolicyOptions {
    /// Reset every compartment's batch state when this NodeWright completes or a package version
    /// changes. Overrides the policy's setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub reset_batch_state_on_completion: Option<bool>,
}

/// Legacy rollout budget: at most `count` nodes, or `percent` of the targeted nodes, at once.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.percent) && has(self.count))",
    "message": "interruptionBudget: set percent or count, not both"
}]))]
pub struct InterruptionBudget {
    /// Share of the targeted nodes per batch, 0–100 (0 behaves as 1 node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub percent: Option<i32>,
    /// Nodes per batch (0 behaves as 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub count: Option<i32>,
}
