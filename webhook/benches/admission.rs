//! Decode + validate + patch of a 20-package NodeWright, the webhook's per-request work.
//! Run: `cargo bench -p nodewright-webhook --bench admission`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use nodewright_shared::defaults::OperatorDefaults;
use nodewright_webhook::admission::{Webhook, review};
use nodewright_webhook::cache::StaticView;
use serde_json::{Value, json};

/// An AdmissionReview for a NodeWright with 20 packages in a dependency chain, each with a
/// configMap, env, resources and an interrupt, as the apiserver would send it.
fn review_body(with_defaults: bool) -> Vec<u8> {
    let mut packages = serde_json::Map::new();
    for i in 0..20 {
        let mut p = json!({
            "version": format!("1.{i}.0"),
            "image": format!("registry.example.com:5000/team/package-{i}"),
            "configMap": {"config.toml": "key = \"value\"\n".repeat(20), "install.sh": "#!/bin/sh\necho hi\n"},
            "configInterrupts": {"config.toml": {"type": "service", "services": ["svc"]}},
            "env": [{"name": "MODE", "value": "fast"}],
            "resources": {"cpuRequest": "250m", "cpuLimit": "1", "memoryRequest": "256Mi", "memoryLimit": "512Mi"},
            "interrupt": {"type": "reboot"},
        });
        if i > 0 {
            p["dependsOn"] = json!({ format!("package-{}", i - 1): format!("1.{}.0", i - 1) });
        }
        if with_defaults {
            p["name"] = json!(format!("package-{i}"));
            p["stageTimeout"] = json!("1h");
        }
        packages.insert(format!("package-{i}"), p);
    }
    let object = json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
        "metadata": {"name": "bench", "uid": "0d0c7a0e-8d37-4d59-9c55-2a0b0d7c1e11"},
        "spec": {"deploymentPolicy": "policy", "nodeSelectors": {"matchLabels": {"pool": "gpu"}}, "packages": packages},
    });
    let review: Value = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "6a1f2e3d-4c5b-6a79-8b0c-1d2e3f4a5b6c",
            "kind": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "kind": "NodeWright"},
            "resource": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "resource": "nodewrights"},
            "name": "bench", "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": object, "oldObject": null, "dryRun": false,
        }
    });
    serde_json::to_vec(&review).unwrap_or_default()
}

fn benches(c: &mut Criterion) {
    let defaults = OperatorDefaults::default();
    let view = StaticView {
        policies: vec!["policy".into()],
        users: vec![],
    };
    let raw = review_body(false);
    let defaulted = review_body(true);
    c.bench_function("mutate_nodewright_20_packages", |b| {
        b.iter(|| review(Webhook::MutateNodeWright, black_box(&raw), &defaults, &view))
    });
    c.bench_function("validate_nodewright_20_packages", |b| {
        b.iter(|| {
            review(
                Webhook::ValidateNodeWright,
                black_box(&defaulted),
                &defaults,
                &view,
            )
        })
    });
    c.bench_function("mutate_and_validate_then_encode_20_packages", |b| {
        b.iter(|| {
            let m = review(Webhook::MutateNodeWright, black_box(&raw), &defaults, &view);
            let v = review(
                Webhook::ValidateNodeWright,
                black_box(&defaulted),
                &defaults,
                &view,
            );
            (serde_json::to_vec(&m.review), serde_json::to_vec(&v.review))
        })
    });
}

criterion_group!(admission, benches);
criterion_main!(admission);
