//! What the load suites (NodeWright churn, admission under rotation) create: a NodeWright no node
//! matches, so the operator has nothing to roll out but a full object to reconcile, and the
//! webhooks a full object to default and validate.

use nodewright_shared::api::NodeWright;

/// A NodeWright named `name`, labelled `nodewright-e2e/load=<load>`, selecting no node, with two
/// packages (one depending on the other, one with an interrupt).
pub fn unmatched_nodewright(name: &str, load: &str) -> NodeWright {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": name, "labels": {"nodewright-e2e/load": load}},
        "spec": {
            "nodeSelectors": {"matchLabels": {"nodewright-e2e/none": "none"}},
            "packages": {
                "base": {"version": "1.0.0", "image": "ghcr.io/example/base"},
                "tool": {"version": "1.2.0", "image": "ghcr.io/example/tool",
                         "dependsOn": {"base": "1.0.0"},
                         "interrupt": {"type": "service", "services": ["tool"]}},
            },
        },
    }))
    .expect("a valid NodeWright")
}
