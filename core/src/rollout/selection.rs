//! Which nodes a NodeWright targets, and which of those it may work on now (upstream-operator.md
//! §2.2–§2.3): `spec.nodeSelectors` picks the nodes (empty: all); the ignore label and taints the
//! NodeWright does not tolerate block a node (it shows as `blocked` instead of silently waiting).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint, Toleration};
use kube_core::{Selector, SelectorExt};
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;

use crate::jobs::RuntimeTaint;

/// Why the selector of a NodeWright cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("spec.nodeSelectors of NodeWright {nodewright} is not a valid label selector: {reason}")]
pub struct SelectorError {
    /// The NodeWright.
    pub nodewright: String,
    /// The parse error.
    pub reason: String,
}

/// The compiled `spec.nodeSelectors`.
#[derive(Debug, Clone)]
pub struct NodeSelection {
    selector: Option<Selector>,
}

impl NodeSelection {
    /// Compiles the NodeWright's selector (absent or empty: every node).
    pub fn of(nodewright: &NodeWright) -> Result<Self, SelectorError> {
        let selector = match nodewright.spec.node_selectors.clone() {
            None => None,
            Some(s) => Some(Selector::try_from(s).map_err(|e| SelectorError {
                nodewright: nodewright.metadata.name.clone().unwrap_or_default(),
                reason: e.to_string(),
            })?),
        };
        Ok(NodeSelection { selector })
    }

    /// Whether `labels` (a node's) are selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.as_ref().is_none_or(|s| s.matches(labels))
    }
}

/// Why a selected node may not be worked on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    /// The node carries `nodewright.nvidia.com/ignore=true`.
    Ignored,
    /// These taints (key:effect) are not tolerated.
    Taints(Vec<String>),
}

/// The tolerations a NodeWright brings when deciding whether a node is workable: a cordon
/// (`node.kubernetes.io/unschedulable`, which the operator itself causes), `additionalTolerations`,
/// and the runtime-required taint only for `runtimeRequired` NodeWrights (so that taint blocks the
/// others, upstream's rule).
pub fn selection_tolerations(nodewright: &NodeWright, runtime: &RuntimeTaint) -> Vec<Toleration> {
    let mut tolerations = vec![Toleration {
        key: Some("node.kubernetes.io/unschedulable".to_owned()),
        operator: Some("Exists".to_owned()),
        effect: Some("NoSchedule".to_owned()),
        ..Toleration::default()
    }];
    tolerations.extend(nodewright.spec.additional_tolerations.iter().cloned());
    if nodewright.spec.runtime_required {
        tolerations.push(runtime.toleration());
    }
    tolerations
}

/// Kubernetes' toleration matching: effects must match (an empty toleration effect matches all);
/// `Exists` with an empty key tolerates everything; `Exists` matches the key; `Equal` (the default)
/// matches key and value.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_ok = toleration
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    if !effect_ok {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        _ => {
            key == taint.key
                && toleration.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
    }
}

/// Whether the node may be worked on: `None`, or why not. Every taint (any effect) must be tolerated.
pub fn blocker(node: &Node, tolerations: &[Toleration]) -> Option<Blocker> {
    let ignored = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::IGNORE_LABEL))
        .is_some_and(|v| v == "true");
    if ignored {
        return Some(Blocker::Ignored);
    }
    let untolerated: Vec<String> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect();
    (!untolerated.is_empty()).then_some(Blocker::Taints(untolerated))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use nodewright_shared::api::NodeWrightSpec;

    fn node(labels: &[(&str, &str)], taints: &[(&str, Option<&str>, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|(k, v, e)| Taint {
                            key: (*k).to_owned(),
                            value: v.map(str::to_owned),
                            effect: (*e).to_owned(),
                            time_added: None,
                        })
                        .collect(),
                ),
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    fn nodewright(spec: NodeWrightSpec) -> NodeWright {
        NodeWright::new("nw", spec)
    }

    fn runtime() -> RuntimeTaint {
        RuntimeTaint {
            key: "nodewright.nvidia.com".into(),
            value: Some("runtime-required".into()),
            effect: "NoSchedule".into(),
        }
    }

    #[test]
    fn empty_selector_selects_every_node_and_labels_narrow_it() {
        let all = NodeSelection::of(&nodewright(NodeWrightSpec::default())).expect("selector");
        assert!(all.matches(&BTreeMap::new()));
        let gpu = NodeSelection::of(&nodewright(NodeWrightSpec {
            node_selectors: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("gpu".to_owned(), "yes".to_owned())])),
                match_expressions: None,
            }),
            ..NodeWrightSpec::default()
        }))
        .expect("selector");
        assert!(gpu.matches(&BTreeMap::from([("gpu".to_owned(), "yes".to_owned())])));
        assert!(!gpu.matches(&BTreeMap::from([("gpu".to_owned(), "no".to_owned())])));
        assert!(!gpu.matches(&BTreeMap::new()));
    }

    #[test]
    fn ignore_label_blocks() {
        let nw = nodewright(NodeWrightSpec::default());
        let tol = selection_tolerations(&nw, &runtime());
        assert_eq!(
            blocker(&node(&[(keys::IGNORE_LABEL, "true")], &[]), &tol),
            Some(Blocker::Ignored)
        );
        assert_eq!(
            blocker(&node(&[(keys::IGNORE_LABEL, "false")], &[]), &tol),
            None
        );
    }

    #[test]
    fn taints_block_unless_tolerated() {
        let plain = nodewright(NodeWrightSpec::default());
        let cordoned = node(
            &[],
            &[("node.kubernetes.io/unschedulable", None, "NoSchedule")],
        );
        assert_eq!(
            blocker(&cordoned, &selection_tolerations(&plain, &runtime())),
            None
        );

        let dedicated = node(&[], &[("dedicated", Some("gpu"), "NoExecute")]);
        assert_eq!(
            blocker(&dedicated, &selection_tolerations(&plain, &runtime())),
            Some(Blocker::Taints(vec!["dedicated:NoExecute".into()]))
        );
        let tolerant = nodewright(NodeWrightSpec {
            additional_tolerations: vec![Toleration {
                key: Some("dedicated".into()),
                operator: Some("Equal".into()),
                value: Some("gpu".into()),
                effect: None,
                toleration_seconds: None,
            }],
            ..NodeWrightSpec::default()
        });
        assert_eq!(
            blocker(&dedicated, &selection_tolerations(&tolerant, &runtime())),
            None
        );
    }

    #[test]
    fn runtime_required_taint_is_tolerated_only_by_runtime_required_nodewrights() {
        let tainted = node(
            &[],
            &[(
                "nodewright.nvidia.com",
                Some("runtime-required"),
                "NoSchedule",
            )],
        );
        let plain = nodewright(NodeWrightSpec::default());
        assert!(blocker(&tainted, &selection_tolerations(&plain, &runtime())).is_some());
        let required = nodewright(NodeWrightSpec {
            runtime_required: true,
            ..NodeWrightSpec::default()
        });
        assert_eq!(
            blocker(&tainted, &selection_tolerations(&required, &runtime())),
            None
        );
    }
}
