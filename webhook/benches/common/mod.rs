//! The AdmissionReview bodies the benchmarks and the load run send, built in the shape the
//! kube-apiserver sends them. Shared by `benches/admission.rs`, `benches/admission_callgrind.rs` and
//! `examples/loadgen.rs` (`--write-bodies`, for `tests/bench/webhook-load.sh`), so every
//! measurement admits the same objects.

// Each user needs a different subset.
#![allow(dead_code)]

use nodewright_webhook::admission::Webhook;
use serde_json::{Value, json};

/// The uid every bench review carries.
const UID: &str = "6a1f2e3d-4c5b-6a79-8b0c-1d2e3f4a5b6c";

/// A NodeWright with 20 packages in a dependency chain, each with a configMap, configInterrupts,
/// env, resources and an interrupt. `with_defaults`: the object as the mutating webhook leaves it
/// (package names and stage timeouts filled), which is what the validating webhook receives.
pub fn nodewright(with_defaults: bool) -> Value {
    // Package names end with a letter (the name pattern): package-a .. package-t.
    let name = |i: u8| format!("package-{}", char::from(b'a' + i));
    let mut packages = serde_json::Map::new();
    for i in 0..20u8 {
        let mut p = json!({
            "version": format!("1.{i}.0"),
            "image": format!("registry.example.com:5000/team/{}", name(i)),
            "configMap": {"config.toml": "key = \"value\"\n".repeat(20), "install.sh": "#!/bin/sh\necho hi\n"},
            "configInterrupts": {"config.toml": {"type": "service", "services": ["svc"]}},
            "env": [{"name": "MODE", "value": "fast"}],
            "resources": {"cpuRequest": "250m", "cpuLimit": "1", "memoryRequest": "256Mi", "memoryLimit": "512Mi"},
            "interrupt": {"type": "reboot"},
        });
        if i > 0 {
            p["dependsOn"] = json!({ name(i - 1): format!("1.{}.0", i - 1) });
        }
        if with_defaults {
            p["name"] = json!(name(i));
            p["stageTimeout"] = json!("1h");
        }
        packages.insert(name(i), p);
    }
    json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
        "metadata": {"name": "bench", "uid": "0d0c7a0e-8d37-4d59-9c55-2a0b0d7c1e11"},
        "spec": {"deploymentPolicy": "policy", "nodeSelectors": {"matchLabels": {"pool": "gpu"}}, "packages": packages},
    })
}

/// A DeploymentPolicy with an exponential default and four compartments (fixed, linear, exponential
/// strategies and label selectors). `with_defaults`: with the strategy defaults filled in.
pub fn deployment_policy(with_defaults: bool) -> Value {
    let batch = |initial: i32| {
        if with_defaults {
            json!({"initialBatch": initial, "batchThreshold": 100, "safetyLimit": 50})
        } else {
            json!({"initialBatch": initial})
        }
    };
    let mut exponential = batch(2);
    let mut linear = batch(1);
    if with_defaults {
        exponential["growthFactor"] = json!(2);
        linear["delta"] = json!(1);
    }
    let compartments: Vec<Value> = (0..4)
        .map(|i| {
            let strategy = match i % 3 {
                0 => json!({"fixed": batch(1)}),
                1 => json!({"linear": linear.clone()}),
                _ => json!({"exponential": exponential.clone()}),
            };
            json!({
                "name": format!("rack-{i}"),
                "selector": {"matchExpressions": [{"key": "topology.example.com/rack", "operator": "In", "values": [format!("r{i}a"), format!("r{i}b")]}]},
                "budget": {"count": i + 1},
                "strategy": strategy,
            })
        })
        .collect();
    json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
        "metadata": {"name": "policy", "uid": "1e1d8b1f-9e48-4e6a-8d66-3b1c1e8d2f22"},
        "spec": {"default": {"budget": {"percent": 25}, "strategy": {"exponential": exponential}}, "compartments": compartments},
    })
}

/// A CREATE AdmissionReview of `object`, as the apiserver sends it to `webhook`.
pub fn review(webhook: Webhook, object: &Value) -> Vec<u8> {
    let (resource, kind) = match webhook.kind() {
        "NodeWright" => ("nodewrights", "NodeWright"),
        _ => ("deploymentpolicies", "DeploymentPolicy"),
    };
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "resource": resource},
            "requestKind": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "kind": kind},
            "requestResource": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "resource": resource},
            "name": object["metadata"]["name"], "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-client-side-apply"},
        }
    });
    serde_json::to_vec(&review).unwrap_or_default()
}

/// The body each endpoint gets in a mutate-then-validate admission: the mutating endpoints see the
/// object as written, the validating ones the object with its defaults filled.
pub fn body(webhook: Webhook) -> Vec<u8> {
    let object = match webhook {
        Webhook::MutateNodeWright => nodewright(false),
        Webhook::ValidateNodeWright => nodewright(true),
        Webhook::MutateDeploymentPolicy => deployment_policy(false),
        Webhook::ValidateDeploymentPolicy => deployment_policy(true),
    };
    review(webhook, &object)
}
