//! The parts of a pass read from the cluster's objects, shared by the rollout and the preview: the
//! nodes a NodeWright selects, its Jobs, its policy as defaulted, the gates, tolerations,
//! compartments and maintenance windows it decides with, and whether pause or disable is on.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Toleration};
use kube_core::ResourceExt;
use nodewright_shared::api::{DeploymentPolicy, HealthGates, NodeWright};

use super::selection::{NodeSelection, selection_tolerations};
use super::{batches, compartments, priority, windows};
use crate::jobs::RuntimeTaint;
use crate::jobs::read::JobIndex;
use crate::jobs::stored::StoredJob;
use crate::naming;

/// The annotation value that turns pause or disable on.
const ON: &str = "true";

/// Whether the annotation `key` of `nodewright` is on (`"true"`).
pub fn annotation_on(nodewright: &NodeWright, key: &str) -> bool {
    nodewright.annotations().get(key).is_some_and(|v| v == ON)
}

/// The nodes `selection` picks from `every_node`, in rollout order: creation time, then name.
pub fn selected_nodes(selection: &NodeSelection, every_node: &[Arc<Node>]) -> Vec<Arc<Node>> {
    let mut nodes: Vec<Arc<Node>> = every_node
        .iter()
        .filter(|n| selection.matches(n.labels()))
        .cloned()
        .collect();
    nodes.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, a.metadata.name.as_deref())
            .cmp(&(&b.metadata.creation_timestamp, b.metadata.name.as_deref()))
    });
    nodes
}

/// The Jobs of the NodeWright `name` (by its name label) among `every_job` (every Job the operator
/// owns), and the nodes busy with a package Job of any NodeWright.
pub fn own_jobs(name: &str, every_job: &[Arc<StoredJob>]) -> JobIndex {
    let label = naming::label_value(name);
    JobIndex::with_fleet(
        every_job
            .iter()
            .filter(|j| j.nodewright.as_ref() == Some(&label))
            .cloned(),
        every_job,
    )
}

/// A DeploymentPolicy as the pass reads it: with the defaults admission would have filled in.
pub fn defaulted_policy(found: &DeploymentPolicy) -> DeploymentPolicy {
    let mut p = found.clone();
    nodewright_shared::defaults::default_deployment_policy(&mut p.spec);
    p
}

/// What a pass decides with besides the NodeWright, its nodes and its Jobs.
pub struct PassParts<'a> {
    /// The earlier NodeWrights that can hold a node back.
    pub gates: Vec<priority::Gate<'a>>,
    /// The taints the NodeWright's packages tolerate.
    pub tolerations: Vec<Toleration>,
    /// Its compartments, each with its nodes (in rollout order), ceiling and strategy.
    pub compartments: Vec<compartments::Compartment>,
    /// `resetBatchStateOnCompletion` in effect.
    pub reset_batches: bool,
    /// The policy's maintenance windows: when new nodes may start.
    pub windows: windows::Schedule,
    /// The health gates in effect: the policy's when the NodeWright names one, else its own.
    pub health_gates: Option<HealthGates>,
}

/// Assembles the [`PassParts`] of `nw` (defaulted, effective) over its selected `nodes`, every node
/// in the cache and every NodeWright; `policy` is defaulted ([`defaulted_policy`]).
pub fn pass_parts<'a>(
    nw: &NodeWright,
    all_nodewrights: &'a [Arc<NodeWright>],
    every_node: &[Arc<Node>],
    nodes: &[Arc<Node>],
    policy: Option<&DeploymentPolicy>,
    runtime_taint: &RuntimeTaint,
) -> PassParts<'a> {
    let node_refs: Vec<&Node> = nodes.iter().map(|n| n.as_ref()).collect();
    let every_node: Vec<&Node> = every_node.iter().map(|n| n.as_ref()).collect();
    PassParts {
        gates: priority::gates(nw, all_nodewrights, &every_node),
        tolerations: selection_tolerations(nw, runtime_taint),
        compartments: compartments::compartments(nw, policy, &node_refs),
        windows: windows::Schedule::of(policy),
        health_gates: match policy {
            Some(p) => p.spec.health_gates.clone(),
            None if nw
                .spec
                .deployment_policy
                .as_deref()
                .is_some_and(|p| !p.is_empty()) =>
            {
                None
            }
            None => nw.spec.health_gates.clone(),
        },
        reset_batches: batches::reset_enabled(
            nw,
            policy.map_or(batches::LEGACY_RESET, |p| {
                p.spec.reset_batch_state_on_completion
            }),
        ),
    }
}
