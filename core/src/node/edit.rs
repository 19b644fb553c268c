//! Writing to Nodes without ever losing someone else's update (DESIGN §4.5).
//!
//! Node annotations are shared: the rollout and the outcome paths both write a NodeWright's node
//! state, other NodeWrights write theirs, users and other controllers write the rest. Every write
//! here is an RFC 6902 JSON Patch that starts with `test /metadata/resourceVersion`: the apiserver
//! applies it only to the exact version it was computed from, and answers 422 otherwise. Callers
//! re-read and recompute on a conflict (the operator's `NodeWriteError::Conflict`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

use serde_json::{Value, json};

/// The changes to make to one node; `None` values remove the key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeEdit {
    /// Annotations to set (`Some`) or remove (`None`).
    pub annotations: BTreeMap<String, Option<String>>,
    /// Labels to set or remove.
    pub labels: BTreeMap<String, Option<String>>,
    /// `spec.unschedulable` to set.
    pub unschedulable: Option<bool>,
    /// `spec.taints` to set (the whole list).
    pub taints: Option<Vec<k8s_openapi::api::core::v1::Taint>>,
}

impl NodeEdit {
    /// Sets an annotation.
    pub fn annotate(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.annotations.insert(key.into(), Some(value.into()));
    }

    /// Removes an annotation.
    pub fn remove_annotation(&mut self, key: impl Into<String>) {
        self.annotations.insert(key.into(), None);
    }

    /// Sets a label.
    pub fn label(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.labels.insert(key.into(), Some(value.into()));
    }

    /// Removes a label.
    pub fn remove_label(&mut self, key: impl Into<String>) {
        self.labels.insert(key.into(), None);
    }
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn add(path: String, value: Value) -> Value {
    json!({"op": "add", "path": path, "value": value})
}

fn map_ops(
    ops: &mut Vec<Value>,
    parent: &str,
    current: Option<&BTreeMap<String, String>>,
    changes: &BTreeMap<String, Option<String>>,
) {
    let mut created = current.is_some();
    for (key, value) in changes {
        let existing = current.and_then(|m| m.get(key));
        let path = format!("{parent}/{}", escape(key));
        match value {
            Some(v) if existing != Some(v) => {
                if !created {
                    ops.push(add(parent.to_owned(), Value::Object(Default::default())));
                    created = true;
                }
                ops.push(add(path, Value::String(v.clone())));
            }
            None if existing.is_some() => ops.push(json!({"op": "remove", "path": path})),
            _ => {}
        }
    }
}

/// The JSON Patch that applies `edit` to `node` as read, guarded by its resourceVersion; `None` when
/// the node already looks like that.
pub fn node_patch(node: &Node, edit: &NodeEdit) -> Option<json_patch::Patch> {
    let mut ops = Vec::new();
    map_ops(
        &mut ops,
        "/metadata/annotations",
        node.metadata.annotations.as_ref(),
        &edit.annotations,
    );
    map_ops(
        &mut ops,
        "/metadata/labels",
        node.metadata.labels.as_ref(),
        &edit.labels,
    );
    // `/spec` is created at most once: a second `add /spec {}` would erase what the first filled.
    let mut spec_exists = node.spec.is_some();
    let mut ensure_spec = |ops: &mut Vec<Value>| {
        if !spec_exists {
            ops.push(add("/spec".to_owned(), Value::Object(Default::default())));
            spec_exists = true;
        }
    };
    if let Some(unschedulable) = edit.unschedulable {
        let current = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if current != unschedulable {
            ensure_spec(&mut ops);
            ops.push(add(
                "/spec/unschedulable".to_owned(),
                Value::Bool(unschedulable),
            ));
        }
    }
    if let Some(taints) = &edit.taints {
        let current = node.spec.as_ref().and_then(|s| s.taints.as_ref());
        if current.map(Vec::as_slice).unwrap_or_default() != taints.as_slice() {
            ensure_spec(&mut ops);
            ops.push(add(
                "/spec/taints".to_owned(),
                serde_json::to_value(taints).unwrap_or(Value::Array(Vec::new())),
            ));
        }
    }
    if ops.is_empty() {
        return None;
    }
    let rv = node.metadata.resource_version.clone().unwrap_or_default();
    ops.insert(
        0,
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}),
    );
    // Every operation above is well-formed by construction (paths are escaped pointers).
    serde_json::from_value(Value::Array(ops)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn node(annotations: Option<&[(&str, &str)]>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                resource_version: Some("42".into()),
                annotations: annotations.map(|a| {
                    a.iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect()
                }),
                ..ObjectMeta::default()
            },
            spec: None,
            status: None,
        }
    }

    #[test]
    fn a_missing_spec_is_created_once_for_cordon_and_taints_together() {
        let edit = NodeEdit {
            unschedulable: Some(true),
            taints: Some(vec![k8s_openapi::api::core::v1::Taint {
                key: "k".into(),
                value: None,
                effect: "NoSchedule".into(),
                time_added: None,
            }]),
            ..NodeEdit::default()
        };
        let patch = node_patch(&node(None), &edit).expect("a change");
        let mut applied = json!({"metadata": {"resourceVersion": "42"}});
        json_patch::patch(&mut applied, &patch).expect("applies");
        assert_eq!(
            applied["spec"],
            json!({"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]})
        );
    }

    #[test]
    fn every_patch_is_guarded_by_the_resource_version() {
        let mut edit = NodeEdit::default();
        edit.annotate("nodewright.nvidia.com/nodeState_nw", "{}");
        edit.unschedulable = Some(true);
        let patch = node_patch(&node(None), &edit).expect("a change");
        assert_eq!(
            serde_json::to_value(&patch).expect("json"),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/metadata/annotations", "value": {}},
                {"op": "add", "path": "/metadata/annotations/nodewright.nvidia.com~1nodeState_nw", "value": "{}"},
                {"op": "add", "path": "/spec", "value": {}},
                {"op": "add", "path": "/spec/unschedulable", "value": true},
            ])
        );
    }

    #[test]
    fn no_op_edits_produce_no_patch_and_removals_only_touch_existing_keys() {
        let n = node(Some(&[("a", "1")]));
        let mut same = NodeEdit::default();
        same.annotate("a", "1");
        same.remove_annotation("absent");
        assert!(node_patch(&n, &same).is_none());
        let mut remove = NodeEdit::default();
        remove.remove_annotation("a");
        let patch = node_patch(&n, &remove).expect("a change");
        assert_eq!(
            serde_json::to_value(&patch).expect("json"),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "remove", "path": "/metadata/annotations/a"},
            ])
        );
    }
}
