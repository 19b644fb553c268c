//! Fixtures for the unit tests of the crates that build on this one (the operator and the command
//! line test their node edits on the same objects as the core's own tests). Behind the `testing`
//! feature, which only their dev-dependencies turn on.

use k8s_openapi::api::core::v1::Node;
use serde_json::json;

/// A node `n` with `resourceVersion` 1, cordoned when `unschedulable`, with `annotations`.
pub fn node_with(unschedulable: bool, annotations: &[(&str, &str)]) -> Node {
    let annotations: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "n", "resourceVersion": "1", "annotations": annotations},
        "spec": {"unschedulable": unschedulable},
    }))
    .expect("a node fixture of a fixed shape")
}
