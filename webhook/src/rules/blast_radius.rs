//! The blast radius of a NodeWright create or edit, as AdmissionReview warnings (never a denial):
//! per package that runs again, what it does (reboots, restarts services, cordons and drains), on
//! how many nodes the NodeWright selects now, in how many batches under its policy
//! ([`nodewright_core::rollout::blast`]). The nodes come from the webhook's metadata-only node
//! watch and are selected, compartmented and batched by the operator's own planner, so the warning
//! counts what the operator will do.

use k8s_openapi::api::core::v1::Node;
use nodewright_core::rollout::blast::{self, Pace};
use nodewright_core::rollout::compartments::compartments;
use nodewright_core::rollout::parts::defaulted_policy;
use nodewright_core::rollout::selection::NodeSelection;
use nodewright_shared::api::NodeWright;
use tracing::debug;

use super::cluster::ClusterView;
use super::findings::Findings;

/// Warns what `new` (created, or edited from `old`) will make run. Says nothing when nothing runs
/// again, when no node is selected, when the selector does not compile or the policy is missing
/// (those are errors reported elsewhere), or when the view knows no nodes.
pub(super) fn check(
    new: &NodeWright,
    old: Option<&NodeWright>,
    cluster: &dyn ClusterView,
    findings: &mut Findings,
) {
    let impacts = blast::impacts(old.map(|o| &o.spec.packages), &new.spec.packages);
    if impacts.is_empty() {
        return;
    }
    // Each silent way out is logged at debug level (RUST_LOG=nodewright_webhook=debug): a warning
    // the user expected and did not get is otherwise hard to trace back.
    let nodewright = new.metadata.name.as_deref().unwrap_or_default();
    let Ok(selection) = NodeSelection::of(new) else {
        debug!(
            nodewright,
            "no blast-radius warning: the node selector does not compile"
        );
        return;
    };
    let Some(nodes) = cluster.selected_nodes(&selection) else {
        debug!(
            nodewright,
            "no blast-radius warning: the node watch has not listed yet"
        );
        return;
    };
    let policy_name = new
        .spec
        .deployment_policy
        .as_deref()
        .filter(|p| !p.is_empty());
    let policy = match policy_name {
        Some(name) => match cluster.policy(name) {
            Some(found) => Some(defaulted_policy(&found)),
            None => {
                debug!(
                    nodewright,
                    policy = name,
                    "no blast-radius warning: the DeploymentPolicy is unknown or its spec does not decode"
                );
                return;
            }
        },
        None => None,
    };
    if nodes.is_empty() {
        debug!(
            nodewright,
            "no blast-radius warning: the selector picks no node the watch knows"
        );
    }
    let refs: Vec<&Node> = nodes.iter().collect();
    let pace = Pace::of(&compartments(new, policy.as_ref(), &refs), policy_name);
    for warning in blast::warnings(&impacts, nodes.len(), &pace) {
        findings.warn(warning);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::{Cluster, nodewright, package};
    use nodewright_shared::api::{
        DeploymentPolicy, DeploymentPolicySpec, Interrupt, InterruptType, InterruptionBudget,
    };
    use serde_json::json;

    fn nodes(count: usize, gpu: usize) -> Vec<Node> {
        (0..count)
            .map(|i| {
                serde_json::from_value(json!({"metadata": {"name": format!("n{i}"),
                    "labels": {"gpu": if i < gpu { "yes" } else { "no" }}}}))
                .expect("node")
            })
            .collect()
    }

    fn rebooting(version: &str) -> nodewright_shared::api::Package {
        nodewright_shared::api::Package {
            interrupt: Some(Interrupt {
                kind: InterruptType::Reboot,
                services: Vec::new(),
            }),
            ..package(version)
        }
    }

    fn warnings(new: &NodeWright, old: Option<&NodeWright>, cluster: &Cluster) -> Vec<String> {
        let mut findings = Findings::default();
        check(new, old, cluster, &mut findings);
        findings.finish().warnings
    }

    #[test]
    fn an_upgrade_says_how_many_selected_nodes_reboot_in_how_many_batches() {
        let policy: DeploymentPolicy = serde_json::from_value(json!({
            "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
            "metadata": {"name": "gpu-rollout"},
            "spec": {"default": {"budget": {"count": 10},
                                 "strategy": {"fixed": {"initialBatch": 10}}}},
        }))
        .expect("policy");
        let cluster = Cluster {
            policy_specs: vec![policy],
            nodes: Some(nodes(150, 120)),
            ..Cluster::default()
        };
        let mut old = nodewright("gpu", [("driver", rebooting("1.4.0"))]);
        old.spec.node_selectors =
            Some(serde_json::from_value(json!({"matchLabels": {"gpu": "yes"}})).expect("selector"));
        old.spec.deployment_policy = Some("gpu-rollout".into());
        let mut new = old.clone();
        new.spec
            .packages
            .insert("driver".into(), rebooting("1.5.0"));
        assert_eq!(
            warnings(&new, Some(&old), &cluster),
            [
                "this change reboots 120 nodes (package driver 1.4.0 → 1.5.0), 12 batches of at most 10 nodes at once under DeploymentPolicy gpu-rollout"
            ]
        );
        // The same spec again: nothing runs, nothing said.
        assert!(warnings(&new, Some(&new), &cluster).is_empty());
    }

    #[test]
    fn silent_without_nodes_a_policy_or_a_match() {
        let mut nw = nodewright("nw", [("a", package("1.0.0"))]);
        // The view knows no nodes.
        assert!(warnings(&nw, None, &Cluster::default()).is_empty());
        // A named policy that does not exist (an error of its own).
        nw.spec.deployment_policy = Some("missing".into());
        let with_nodes = Cluster {
            nodes: Some(nodes(3, 0)),
            ..Cluster::default()
        };
        assert!(warnings(&nw, None, &with_nodes).is_empty());
        // The legacy budget: every selected node, batches of the budget.
        nw.spec.deployment_policy = None;
        nw.spec.interruption_budget = Some(InterruptionBudget {
            count: Some(2),
            percent: None,
        });
        assert_eq!(
            warnings(&nw, None, &with_nodes),
            [
                "this change runs package stages on 3 nodes (package a 1.0.0 installed), 2 batches of at most 2 nodes at once under its interruptionBudget"
            ]
        );
        let _ = DeploymentPolicySpec::default;
    }
}
