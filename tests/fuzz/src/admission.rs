//! The admission property: the webhook's whole per-request path for all four endpoints.
//!
//! Input layout: byte 0 picks the endpoint (low 2 bits) and whether the rest is a raw request body
//! (bit 2 set) or an object to wrap in a well-formed AdmissionReview CREATE (so the fuzzer spends
//! its time in the rules rather than in envelope errors).

use nodewright_shared::defaults::OperatorDefaults;
use nodewright_webhook::admission::{Outcome, Webhook, review};
use nodewright_webhook::cache::StaticView;
use serde_json::{Value, json};

fn envelope(webhook: Webhook, object: &Value) -> Vec<u8> {
    let (resource, kind) = match webhook {
        Webhook::MutateNodeWright | Webhook::ValidateNodeWright => ("nodewrights", "NodeWright"),
        _ => ("deploymentpolicies", "DeploymentPolicy"),
    };
    let body = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "resource": resource},
            "name": object.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
            "operation": "CREATE",
            "userInfo": {"username": "fuzz"},
            "object": object, "oldObject": null, "dryRun": false,
        }
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// See the crate documentation.
pub fn admission(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let webhook = Webhook::ALL[usize::from(selector & 3)];
    let defaults = OperatorDefaults::default();
    let view = StaticView {
        policies: vec!["policy".into()],
        users: vec![("in-use".into(), "policy".into())],
        ..StaticView::default()
    };
    let wrapped: Option<Value> = if selector & 4 == 0 {
        serde_json::from_slice(rest).ok()
    } else {
        None
    };
    let body = match &wrapped {
        Some(object) => envelope(webhook, object),
        None => rest.to_vec(),
    };
    let answer = review(webhook, &body, &defaults, &view);
    assert!(answer.to_json().is_ok(), "answer does not encode");

    let (Some(object), Outcome::Patched) = (&wrapped, answer.outcome) else {
        return;
    };
    let patch_bytes = answer
        .review
        .response
        .as_ref()
        .and_then(|r| r.patch.clone())
        .expect("a patched answer carries a patch");
    let patch: json_patch::Patch =
        serde_json::from_slice(&patch_bytes).expect("the patch is a JSON Patch");
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).expect("the patch applies to its object");
    let again = review(webhook, &envelope(webhook, &patched), &defaults, &view);
    assert_ne!(
        again.outcome,
        Outcome::Patched,
        "defaults are not idempotent: a patched object was patched again"
    );
}
