//! Compartments (upstream-api.md §5.1–§5.3): the groups of nodes that share a budget. Without a
//! DeploymentPolicy a NodeWright has one, `__default__`: its legacy `interruptionBudget` as a fixed
//! strategy whose batches are as large as the budget (upstream-api.md §5.8).
//! With one, each node goes to the safest matching compartment (fixed before linear before
//! exponential before none, then the smaller ceiling, then the name), else to `__default__`.
//! Each compartment carries its strategy; [`super::batches`] turns it into batch sizes, and the
//! ceiling caps the nodes in progress either way (DESIGN §5).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube_core::ResourceExt;
use kube_core::{Selector, SelectorExt};
use nodewright_shared::api::{
    BatchParameters, DEFAULT_COMPARTMENT, DeploymentPolicy, DeploymentStrategy, NodeWright,
};

use super::budget::{legacy_batch, legacy_ceiling, policy_ceiling};

/// One compartment of a NodeWright's nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compartment {
    /// Name (`__default__` for the rest).
    pub name: String,
    /// Most nodes in progress at once.
    pub ceiling: usize,
    /// Node names, in rollout order.
    pub nodes: Vec<String>,
    /// The batch strategy (`None`: no strategy, batches as large as the ceiling allows).
    pub strategy: Option<DeploymentStrategy>,
}

fn safety(strategy: Option<&DeploymentStrategy>) -> u32 {
    match strategy {
        Some(s) if s.fixed.is_some() => 0,
        Some(s) if s.linear.is_some() => 1,
        Some(s) if s.exponential.is_some() => 2,
        _ => 999,
    }
}

/// The fixed strategy a legacy `interruptionBudget` stands for (upstream-api.md §5.8): batches of
/// `batch` nodes, a batch failed unless all its nodes succeed, no failure threshold (a legacy rollout
/// never stops by itself). Batches are evaluated and persisted like a policy's.
fn legacy_strategy(batch: usize) -> DeploymentStrategy {
    DeploymentStrategy {
        fixed: Some(BatchParameters {
            initial_batch: Some(i32::try_from(batch).unwrap_or(i32::MAX)),
            batch_threshold: Some(100),
            failure_threshold: None,
            safety_limit: Some(50),
            soak: None,
        }),
        ..DeploymentStrategy::default()
    }
}

/// Splits `nodes` (already in rollout order) into compartments.
pub fn compartments(
    nodewright: &NodeWright,
    policy: Option<&DeploymentPolicy>,
    nodes: &[&Node],
) -> Vec<Compartment> {
    let Some(policy) = policy else {
        let budget = nodewright.spec.interruption_budget.as_ref();
        return vec![Compartment {
            name: DEFAULT_COMPARTMENT.to_owned(),
            ceiling: legacy_ceiling(budget, nodes.len()),
            nodes: nodes.iter().map(|n| n.name_any()).collect(),
            strategy: Some(legacy_strategy(legacy_batch(budget, nodes.len()))),
        }];
    };
    let selectors: Vec<Option<Selector>> = policy
        .spec
        .compartments
        .iter()
        .map(|c| Selector::try_from(c.selector.clone()).ok())
        .collect();
    let matches = |i: usize, node: &Node| {
        selectors
            .get(i)
            .and_then(|s| s.as_ref())
            .is_some_and(|s| s.matches(node.labels()))
    };
    // Ceiling of each compartment's selector over this NodeWright's nodes (the overlap tie-break).
    let selector_ceiling: Vec<usize> = policy
        .spec
        .compartments
        .iter()
        .enumerate()
        .map(|(i, c)| {
            policy_ceiling(&c.budget, nodes.iter().filter(|n| matches(i, n)).count()).max(1)
        })
        .collect();
    let mut assigned: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for node in nodes {
        let best = policy
            .spec
            .compartments
            .iter()
            .enumerate()
            .filter(|(i, _)| matches(*i, node))
            .min_by(|(i, a), (j, b)| {
                (
                    safety(a.strategy.as_ref()),
                    selector_ceiling.get(*i),
                    &a.name,
                )
                    .cmp(&(
                        safety(b.strategy.as_ref()),
                        selector_ceiling.get(*j),
                        &b.name,
                    ))
            })
            .map(|(_, c)| c.name.clone())
            .unwrap_or_else(|| DEFAULT_COMPARTMENT.to_owned());
        assigned.entry(best).or_default().push(node.name_any());
    }
    let mut out: Vec<Compartment> = policy
        .spec
        .compartments
        .iter()
        .map(|c| {
            let nodes = assigned.remove(&c.name).unwrap_or_default();
            Compartment {
                name: c.name.clone(),
                ceiling: policy_ceiling(&c.budget, nodes.len()),
                nodes,
                strategy: c.strategy.clone().filter(super::batches::is_set),
            }
        })
        .collect();
    let rest = assigned.remove(DEFAULT_COMPARTMENT).unwrap_or_default();
    out.push(Compartment {
        name: DEFAULT_COMPARTMENT.to_owned(),
        ceiling: policy_ceiling(&policy.spec.default.budget, rest.len()),
        nodes: rest,
        strategy: Some(policy.spec.default.strategy.clone()).filter(super::batches::is_set),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use nodewright_shared::api::{
        BatchParameters, Compartment as PolicyCompartment, DeploymentBudget, DeploymentPolicySpec,
        InterruptionBudget, NodeWrightSpec, PolicyDefault,
    };

    fn node(name: &str, zone: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([("zone".to_owned(), zone.to_owned())])),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    #[test]
    fn legacy_budget_is_one_default_compartment() {
        let nw = NodeWright::new(
            "nw",
            NodeWrightSpec {
                interruption_budget: Some(InterruptionBudget {
                    percent: None,
                    count: Some(1),
                }),
                ..NodeWrightSpec::default()
            },
        );
        let (a, b) = (node("a", "x"), node("b", "y"));
        let c = compartments(&nw, None, &[&a, &b]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].ceiling, 1);
        assert_eq!(c[0].nodes, vec!["a", "b"]);
        let fixed = c[0].strategy.as_ref().and_then(|s| s.fixed.as_ref());
        assert_eq!(fixed.and_then(|f| f.initial_batch), Some(1));
        assert_eq!(fixed.and_then(|f| f.batch_threshold), Some(100));
        assert_eq!(fixed.and_then(|f| f.failure_threshold), None);
        // No budget: one batch of every node.
        let all = compartments(
            &NodeWright::new("nw", NodeWrightSpec::default()),
            None,
            &[&a, &b],
        );
        assert_eq!(all[0].ceiling, 2);
        assert_eq!(
            all[0]
                .strategy
                .as_ref()
                .and_then(|s| s.fixed.as_ref())
                .and_then(|f| f.initial_batch),
            Some(2)
        );
    }

    #[test]
    fn policy_nodes_go_to_the_matching_compartment_or_default() {
        let nw = NodeWright::new("nw", NodeWrightSpec::default());
        let policy = DeploymentPolicy::new(
            "p",
            DeploymentPolicySpec {
                default: PolicyDefault {
                    budget: DeploymentBudget {
                        percent: Some(100),
                        count: None,
                    },
                    strategy: DeploymentStrategy::default(),
                },
                compartments: vec![PolicyCompartment {
                    name: "east".into(),
                    selector: LabelSelector {
                        match_labels: Some(BTreeMap::from([(
                            "zone".to_owned(),
                            "east".to_owned(),
                        )])),
                        match_expressions: None,
                    },
                    budget: DeploymentBudget {
                        percent: None,
                        count: Some(1),
                    },
                    strategy: Some(DeploymentStrategy {
                        fixed: Some(BatchParameters::default()),
                        ..DeploymentStrategy::default()
                    }),
                }],
                windows: Vec::new(),
                health_gates: None,
                reset_batch_state_on_completion: None,
                rollback_on_failure: None,
            },
        );
        let (a, b, c) = (node("a", "east"), node("b", "west"), node("c", "east"));
        let out = compartments(&nw, Some(&policy), &[&a, &b, &c]);
        assert_eq!(out[0].name, "east");
        assert_eq!(out[0].nodes, vec!["a", "c"]);
        assert_eq!(out[0].ceiling, 1);
        assert_eq!(out[1].name, DEFAULT_COMPARTMENT);
        assert_eq!(out[1].nodes, vec!["b"]);
        assert_eq!(out[1].ceiling, 1);
    }
}
