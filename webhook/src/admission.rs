//! AdmissionReview in, AdmissionReview out: decoding, dispatch to the rules, JSON Patch responses.
//!
//! Everything here is synchronous and free of I/O (the cluster view is an in-memory cache), so one
//! request costs a decode, the rules and an encode. Malformed input never panics: it gets an
//! AdmissionReview error response that says what was wrong.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, Resource};
use nodewright_shared::api::{DeploymentPolicy, NodeWright};
use nodewright_shared::defaults::{
    FieldDefault, OperatorDefaults, default_deployment_policy, default_nodewright,
};
use nodewright_shared::keys::GROUP;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::rules::{self, ClusterView, Verdict};

/// The four admission endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    /// `/mutate-nodewright`.
    MutateNodeWright,
    /// `/validate-nodewright`.
    ValidateNodeWright,
    /// `/mutate-deploymentpolicy`.
    MutateDeploymentPolicy,
    /// `/validate-deploymentpolicy`.
    ValidateDeploymentPolicy,
}

impl Webhook {
    /// Every endpoint.
    pub const ALL: [Webhook; 4] = [
        Webhook::MutateNodeWright,
        Webhook::ValidateNodeWright,
        Webhook::MutateDeploymentPolicy,
        Webhook::ValidateDeploymentPolicy,
    ];

    /// Name used in paths, metrics and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Webhook::MutateNodeWright => "mutate-nodewright",
            Webhook::ValidateNodeWright => "validate-nodewright",
            Webhook::MutateDeploymentPolicy => "mutate-deploymentpolicy",
            Webhook::ValidateDeploymentPolicy => "validate-deploymentpolicy",
        }
    }

    /// The kind this endpoint admits.
    pub const fn kind(self) -> &'static str {
        match self {
            Webhook::MutateNodeWright | Webhook::ValidateNodeWright => "NodeWright",
            Webhook::MutateDeploymentPolicy | Webhook::ValidateDeploymentPolicy => {
                "DeploymentPolicy"
            }
        }
    }
}

/// What became of a request, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted unchanged.
    Allowed,
    /// Admitted with a patch.
    Patched,
    /// Rejected by a rule.
    Denied,
    /// The request itself was malformed.
    Error,
}

impl Outcome {
    /// Metric label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Patched => "patched",
            Outcome::Denied => "denied",
            Outcome::Error => "error",
        }
    }
}

/// The answer to one HTTP request.
#[derive(Debug)]
pub struct Answer {
    /// 200 for any review that could be read, 400 for one that could not.
    pub http_status: u16,
    /// The AdmissionReview to send back.
    pub review: AdmissionReview<DynamicObject>,
    /// For metrics and logs.
    pub outcome: Outcome,
    /// The operation, when the request could be read.
    pub operation: &'static str,
}

impl Answer {
    /// The response body. kube serialises `response.patch` (a `Vec<u8>`) as an array of numbers;
    /// the AdmissionReview API defines it as base64 (Go's `[]byte`), so it is encoded here.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        use base64::Engine;
        let mut value = serde_json::to_value(&self.review)?;
        let patch = self.review.response.as_ref().and_then(|r| r.patch.as_ref());
        if let (Some(patch), Some(slot)) = (patch, value.pointer_mut("/response/patch")) {
            *slot = Value::String(base64::engine::general_purpose::STANDARD.encode(patch));
        }
        serde_json::to_vec(&value)
    }
}

fn operation_name(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

fn malformed(reason: String) -> Answer {
    Answer {
        http_status: 400,
        review: AdmissionResponse::invalid(reason).into_review(),
        outcome: Outcome::Error,
        operation: "unknown",
    }
}

/// Decodes one request body and answers it.
pub fn review(
    webhook: Webhook,
    body: &[u8],
    defaults: &OperatorDefaults,
    cluster: &dyn ClusterView,
) -> Answer {
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return malformed(format!("request body is not JSON: {e}")),
    };
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "AdmissionReview" || api_version != "admission.k8s.io/v1" {
        return malformed(format!(
            "expected an AdmissionReview of apiVersion admission.k8s.io/v1, got kind {kind:?} apiVersion {api_version:?}: \
             register this webhook with admissionReviewVersions [v1]"
        ));
    }
    let review: AdmissionReview<DynamicObject> = match serde_json::from_value(value) {
        Ok(r) => r,
        Err(e) => return malformed(format!("malformed AdmissionReview: {e}")),
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(_) => return malformed("AdmissionReview has no request".to_owned()),
    };
    let operation = operation_name(&request.operation);
    let (response, outcome) = decide(webhook, &request, defaults, cluster);
    Answer {
        http_status: 200,
        review: response.into_review(),
        outcome,
        operation,
    }
}

fn deny(
    request: &AdmissionRequest<DynamicObject>,
    message: String,
) -> (AdmissionResponse, Outcome) {
    let mut response = AdmissionResponse::from(request).deny(message);
    response.result.code = 403;
    response.result.reason = "Forbidden".to_owned();
    (response, Outcome::Denied)
}

fn with_verdict(
    request: &AdmissionRequest<DynamicObject>,
    verdict: Verdict,
) -> (AdmissionResponse, Outcome) {
    let warnings = (!verdict.warnings.is_empty()).then(|| verdict.warnings.clone());
    let (mut response, outcome) = if verdict.is_allowed() {
        (AdmissionResponse::from(request), Outcome::Allowed)
    } else {
        deny(request, verdict.message())
    };
    response.warnings = warnings;
    (response, outcome)
}

/// Decodes an object of the request into its typed form.
fn typed<K: DeserializeOwned>(object: &DynamicObject, what: &str) -> Result<K, String> {
    let value =
        serde_json::to_value(object).map_err(|e| format!("cannot re-encode the {what}: {e}"))?;
    serde_json::from_value(value).map_err(|e| format!("the {what} does not match its schema: {e}"))
}

fn decide(
    webhook: Webhook,
    request: &AdmissionRequest<DynamicObject>,
    defaults: &OperatorDefaults,
    cluster: &dyn ClusterView,
) -> (AdmissionResponse, Outcome) {
    if request.kind.group != GROUP || request.kind.kind != webhook.kind() {
        return deny(
            request,
            format!(
                "/{} admits {}.{} objects, but received {}.{}: check the webhook configuration's rules",
                webhook.name(),
                webhook.kind(),
                GROUP,
                request.kind.kind,
                request.kind.group
            ),
        );
    }
    let object = request.object.as_ref();
    match (webhook, &request.operation, object) {
        (Webhook::ValidateDeploymentPolicy, Operation::Delete, _) => with_verdict(
            request,
            rules::validate_deployment_policy_delete(&request.name, cluster),
        ),
        // Every other endpoint only acts on objects being created or updated.
        (_, Operation::Create | Operation::Update, Some(object)) => match webhook {
            Webhook::MutateNodeWright => mutate::<NodeWright>(request, object, |nw| {
                default_nodewright(&mut nw.spec, defaults)
            }),
            Webhook::MutateDeploymentPolicy => mutate::<DeploymentPolicy>(request, object, |p| {
                default_deployment_policy(&mut p.spec)
            }),
            Webhook::ValidateNodeWright => {
                let new: NodeWright = match typed(object, "NodeWright") {
                    Ok(n) => n,
                    Err(e) => return deny(request, e),
                };
                let old = match request
                    .old_object
                    .as_ref()
                    .map(|o| typed::<NodeWright>(o, "old NodeWright"))
                {
                    Some(Ok(o)) => Some(o),
                    // An unreadable old object cannot guard anything; validate the new one alone.
                    Some(Err(_)) | None => None,
                };
                with_verdict(
                    request,
                    rules::validate_nodewright(&new, old.as_ref(), cluster),
                )
            }
            Webhook::ValidateDeploymentPolicy => {
                match typed::<DeploymentPolicy>(object, "DeploymentPolicy") {
                    Ok(p) => with_verdict(request, rules::validate_deployment_policy(&p)),
                    Err(e) => deny(request, e),
                }
            }
        },
        (_, Operation::Create | Operation::Update, None) => deny(
            request,
            format!(
                "{} request carries no object to admit",
                operation_name(&request.operation)
            ),
        ),
        _ => (AdmissionResponse::from(request), Outcome::Allowed),
    }
}

/// Applies the shared defaulting function to the typed object and answers with JSON Patch `add`
/// operations for exactly what it filled, so nothing the user wrote is rewritten.
fn mutate<K: DeserializeOwned + Resource>(
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
    apply: impl FnOnce(&mut K) -> Vec<FieldDefault>,
) -> (AdmissionResponse, Outcome) {
    let mut typed_object: K = match typed(object, "object") {
        Ok(o) => o,
        // Not decodable: the apiserver's schema validation, which runs next, reports it precisely.
        Err(_) => return (AdmissionResponse::from(request), Outcome::Allowed),
    };
    let filled = apply(&mut typed_object);
    if filled.is_empty() {
        return (AdmissionResponse::from(request), Outcome::Allowed);
    }
    let mut ops = Vec::with_capacity(filled.len());
    for f in filled {
        match PointerBuf::parse(f.pointer.as_str()) {
            Ok(path) => ops.push(PatchOperation::Add(AddOperation {
                path,
                value: f.value,
            })),
            Err(e) => {
                return deny(
                    request,
                    format!("internal error building the defaults patch: {e}"),
                );
            }
        }
    }
    match AdmissionResponse::from(request).with_patch(Patch(ops)) {
        Ok(r) => (r, Outcome::Patched),
        Err(e) => deny(
            request,
            format!("internal error encoding the defaults patch: {e}"),
        ),
    }
}
