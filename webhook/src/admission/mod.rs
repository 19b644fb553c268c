//! AdmissionReview in, AdmissionReview out: decoding, dispatch to the rules, JSON Patch responses.
//!
//! Everything here is synchronous and free of I/O (the cluster view is an in-memory cache), so one
//! request costs a decode, the rules and an encode. Malformed input never panics: it gets an
//! AdmissionReview error response that says what was wrong.
//!
//! The body is decoded once, straight into the typed object of the endpoint's kind ([`decode`]);
//! only a body that does not decode that way (malformed, or not the kind the endpoint admits) takes
//! the slower exact path, whose error messages are the ones users see. The response is written
//! straight to bytes ([`encode`]).

mod decode;
mod encode;
mod patch;

use json_patch::Patch;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, Resource};
use nodewright_shared::api::{DeploymentPolicy, NodeWright};
use nodewright_shared::defaulted::default_nodewright_object;
use nodewright_shared::defaults::{FieldDefault, OperatorDefaults, default_deployment_policy};
use nodewright_shared::keys::GROUP;
use serde::de::DeserializeOwned;

use crate::rules::cluster::ClusterView;
use crate::rules::findings::Verdict;
use crate::rules::{self, Restrictions};

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
    /// the AdmissionReview API defines it as base64 (Go's `[]byte`), so it is encoded as base64.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        encode::review(&self.review)
    }
}

/// A kind the webhook admits: how its endpoints default and validate it.
trait Admitted: DeserializeOwned + Resource<DynamicType = ()> {
    /// Fills the defaults and says what was filled.
    fn fill_defaults(&mut self, defaults: &OperatorDefaults) -> Vec<FieldDefault>;
    /// Validates the object on CREATE (`old` is `None`) or UPDATE, within the administrator's
    /// restrictions.
    fn validate(
        &self,
        old: Option<&Self>,
        cluster: &dyn ClusterView,
        restrictions: &Restrictions,
    ) -> Verdict;
    /// Why the object exceeds the CRD's size bounds (so the mutating endpoint denies it rather than
    /// default it), `None` within them.
    fn oversized(&self) -> Option<String> {
        None
    }
}

impl Admitted for NodeWright {
    fn fill_defaults(&mut self, defaults: &OperatorDefaults) -> Vec<FieldDefault> {
        default_nodewright_object(self, defaults)
    }

    fn validate(
        &self,
        old: Option<&Self>,
        cluster: &dyn ClusterView,
        restrictions: &Restrictions,
    ) -> Verdict {
        rules::validate_nodewright(self, old, cluster, restrictions)
    }

    fn oversized(&self) -> Option<String> {
        rules::nodewright_oversized(self)
    }
}

impl Admitted for DeploymentPolicy {
    fn fill_defaults(&mut self, _: &OperatorDefaults) -> Vec<FieldDefault> {
        default_deployment_policy(&mut self.spec)
    }

    fn validate(&self, _: Option<&Self>, _: &dyn ClusterView, _: &Restrictions) -> Verdict {
        rules::validate_deployment_policy(self)
    }
}

/// The objects of a request, in the typed form of the endpoint's kind.
struct Objects<K> {
    /// The object to admit: `None` when the request carries none, `Err` (the reason, which a
    /// validating endpoint reports) when it does not match the kind's schema.
    object: Option<Result<K, String>>,
    /// The stored object of an UPDATE; `None` when there is none or it cannot be read (an
    /// unreadable old object cannot guard anything, so the new one is validated alone).
    old_object: Option<K>,
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

/// Decodes one request body and answers it, with the chart's default [`Restrictions`] (no
/// control-plane tolerations, any image). For tests, benchmarks and tools; the server answers with
/// the configured ones ([`review_restricted`]).
pub fn review(
    webhook: Webhook,
    body: &[u8],
    defaults: &OperatorDefaults,
    cluster: &dyn ClusterView,
) -> Answer {
    review_restricted(webhook, body, defaults, &Restrictions::default(), cluster)
}

/// Decodes one request body and answers it within the administrator's `restrictions`.
pub fn review_restricted(
    webhook: Webhook,
    body: &[u8],
    defaults: &OperatorDefaults,
    restrictions: &Restrictions,
    cluster: &dyn ClusterView,
) -> Answer {
    let context = Context {
        defaults,
        restrictions,
        cluster,
    };
    match webhook {
        Webhook::MutateNodeWright | Webhook::ValidateNodeWright => {
            review_as::<NodeWright>(webhook, body, &context)
        }
        Webhook::MutateDeploymentPolicy | Webhook::ValidateDeploymentPolicy => {
            review_as::<DeploymentPolicy>(webhook, body, &context)
        }
    }
}

/// What answering a request needs besides the request.
struct Context<'a> {
    defaults: &'a OperatorDefaults,
    restrictions: &'a Restrictions,
    cluster: &'a dyn ClusterView,
}

fn review_as<K: Admitted>(webhook: Webhook, body: &[u8], context: &Context<'_>) -> Answer {
    // Both decoders cost memory by the body's elements: refuse what is too large for them first.
    if let Err(reason) = decode::bounded(body) {
        return malformed(reason);
    }
    if let Some((request, objects)) = decode::typed::<K>(body) {
        return answer(webhook, &request, objects, context);
    }
    match decode::exact::<K>(body) {
        Ok((request, objects)) => answer(webhook, &request, objects, context),
        Err(reason) => malformed(reason),
    }
}

fn answer<T: Resource, K: Admitted>(
    webhook: Webhook,
    request: &AdmissionRequest<T>,
    objects: Objects<K>,
    context: &Context<'_>,
) -> Answer {
    let (response, outcome) = decide(webhook, request, objects, context);
    Answer {
        http_status: 200,
        review: response.into_review(),
        outcome,
        operation: operation_name(&request.operation),
    }
}

fn deny<T: Resource>(
    request: &AdmissionRequest<T>,
    message: String,
) -> (AdmissionResponse, Outcome) {
    let mut response = AdmissionResponse::from(request).deny(message);
    response.result.code = 403;
    response.result.reason = "Forbidden".to_owned();
    (response, Outcome::Denied)
}

fn with_verdict<T: Resource>(
    request: &AdmissionRequest<T>,
    verdict: Verdict,
) -> (AdmissionResponse, Outcome) {
    let (mut response, outcome) = if verdict.is_allowed() {
        (AdmissionResponse::from(request), Outcome::Allowed)
    } else {
        deny(request, verdict.message())
    };
    response.warnings = (!verdict.warnings.is_empty()).then_some(verdict.warnings);
    (response, outcome)
}

fn decide<T: Resource, K: Admitted>(
    webhook: Webhook,
    request: &AdmissionRequest<T>,
    objects: Objects<K>,
    context: &Context<'_>,
) -> (AdmissionResponse, Outcome) {
    let Context {
        restrictions,
        cluster,
        ..
    } = *context;
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
    match (webhook, &request.operation, objects.object) {
        (Webhook::ValidateDeploymentPolicy, Operation::Delete, _) => with_verdict(
            request,
            rules::validate_deployment_policy_delete(&request.name, cluster),
        ),
        // Every other endpoint only acts on objects being created or updated.
        (_, Operation::Create | Operation::Update, Some(object)) => match webhook {
            Webhook::MutateNodeWright | Webhook::MutateDeploymentPolicy => match object {
                Ok(object) => match object.oversized() {
                    Some(why) => deny(request, why),
                    None => mutate(request, object, objects.old_object.as_ref(), context),
                },
                // Not decodable: the apiserver's schema validation, which runs next, reports it
                // precisely.
                Err(_) => (AdmissionResponse::from(request), Outcome::Allowed),
            },
            Webhook::ValidateNodeWright | Webhook::ValidateDeploymentPolicy => match object {
                Ok(object) => with_verdict(
                    request,
                    object.validate(objects.old_object.as_ref(), cluster, restrictions),
                ),
                Err(e) => deny(request, e),
            },
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
///
/// An object the validating endpoint would refuse is refused here already, with the same full,
/// sorted list of errors: the apiserver runs mutating webhooks before the CRD's schema and CEL
/// rules, and CEL names only one offender per rule (a NodeWright with two missing dependencies
/// would otherwise be refused naming the first). CEL stays the safety net for when the webhook is
/// not asked. The defaulted object is the one checked, as the validating endpoint sees it.
fn mutate<T: Resource, K: Admitted>(
    request: &AdmissionRequest<T>,
    mut object: K,
    old: Option<&K>,
    context: &Context<'_>,
) -> (AdmissionResponse, Outcome) {
    let filled = object.fill_defaults(context.defaults);
    let verdict = object.validate(old, context.cluster, context.restrictions);
    if !verdict.is_allowed() {
        return deny(request, verdict.message());
    }
    if filled.is_empty() {
        return (AdmissionResponse::from(request), Outcome::Allowed);
    }
    let bytes = match patch::add_operations(&filled) {
        Ok(bytes) => bytes,
        Err(e) => return deny(request, e.to_string()),
    };
    // `with_patch` is the only way to set kube's private `patchType`; the operations are already
    // bytes, so it gets an empty patch and the bytes replace it.
    match AdmissionResponse::from(request).with_patch(Patch(Vec::new())) {
        Ok(mut response) => {
            response.patch = Some(bytes);
            (response, Outcome::Patched)
        }
        Err(e) => deny(
            request,
            format!("internal error encoding the defaults patch: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use serde_json::{Value, json};

    use super::*;
    use crate::cache::StaticView;

    fn cluster() -> StaticView {
        StaticView {
            policies: vec!["gpu-rollout".into()],
            users: vec![("gpu-host-setup".into(), "gpu-rollout".into())],
            ..StaticView::default()
        }
    }

    /// What the general decode alone answers: the reference for the single-pass one.
    fn exact_review(webhook: Webhook, body: &[u8]) -> Answer {
        fn exact_as<K: Admitted>(webhook: Webhook, body: &[u8]) -> Answer {
            let (defaults, cluster) = (OperatorDefaults::default(), cluster());
            let context = Context {
                defaults: &defaults,
                restrictions: &Restrictions::default(),
                cluster: &cluster,
            };
            match decode::exact::<K>(body) {
                Ok((request, objects)) => answer(webhook, &request, objects, &context),
                Err(reason) => malformed(reason),
            }
        }
        match webhook.kind() {
            "NodeWright" => exact_as::<NodeWright>(webhook, body),
            _ => exact_as::<DeploymentPolicy>(webhook, body),
        }
    }

    fn typed_decodes(webhook: Webhook, body: &[u8]) -> bool {
        match webhook.kind() {
            "NodeWright" => decode::typed::<NodeWright>(body).is_some(),
            _ => decode::typed::<DeploymentPolicy>(body).is_some(),
        }
    }

    /// The answer as the HTTP layer sends it.
    fn sent(answer: &Answer) -> (u16, Outcome, &'static str, String) {
        let body = answer
            .to_json()
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        (
            answer.http_status,
            answer.outcome,
            answer.operation,
            body.unwrap_or_else(|e| format!("encoding failed: {e}")),
        )
    }

    fn assert_same_answer(webhook: Webhook, body: &[u8], what: &str) {
        let got = review(webhook, body, &OperatorDefaults::default(), &cluster());
        assert_eq!(
            sent(&got),
            sent(&exact_review(webhook, body)),
            "{} {what}",
            webhook.name()
        );
    }

    fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == ext))
            .collect();
        paths.sort();
        paths
    }

    fn fixtures() -> Vec<(String, Vec<u8>)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut out = Vec::new();
        for dir in [root.clone(), root.join("recorded")] {
            for path in files(&dir, "json") {
                let body =
                    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                out.push((path.display().to_string(), body));
            }
        }
        out
    }

    fn envelope(webhook: Webhook, operation: &str, object: &Value, old: &Value) -> Vec<u8> {
        let (resource, kind) = match webhook.kind() {
            "NodeWright" => ("nodewrights", "NodeWright"),
            _ => ("deploymentpolicies", "DeploymentPolicy"),
        };
        let review = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "00000000-0000-0000-0000-000000000001",
                "kind": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "kind": kind},
                "resource": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "resource": resource},
                "name": "x", "operation": operation, "userInfo": {"username": "test"},
                "object": object, "oldObject": old,
            }
        });
        serde_json::to_vec(&review).unwrap_or_default()
    }

    /// Every manifest of examples/ (valid and invalid) as JSON.
    fn example_objects() -> Vec<Value> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut out = Vec::new();
        for dir in [root.clone(), root.join("invalid")] {
            for path in files(&dir, "yaml") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for doc in yaml_serde::Deserializer::from_str(&text) {
                    if let Ok(v) = <Value as serde::Deserialize>::deserialize(doc)
                        && v.get("kind").is_some()
                    {
                        out.push(v);
                    }
                }
            }
        }
        out
    }

    /// The mutating endpoint refuses what the validating one refuses, with the same full, sorted
    /// list (CEL, which the apiserver runs between the two, would name one missing dependency), and
    /// still defaults a valid object.
    #[test]
    fn mutation_refuses_an_invalid_object_with_every_error() {
        let nodewright = |depends_on: Value| {
            json!({
                "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
                "metadata": {"name": "x"},
                "spec": {"packages": {"app": {
                    "version": "1.0.0", "image": "ghcr.io/example/app", "dependsOn": depends_on
                }}}
            })
        };
        let ask = |webhook: Webhook, object: &Value| {
            let body = envelope(webhook, "CREATE", object, &Value::Null);
            review(webhook, &body, &OperatorDefaults::default(), &cluster())
        };
        let bad = nodewright(json!({"zeta": "1.0.0", "alpha": "2.0.0"}));
        let mutated = ask(Webhook::MutateNodeWright, &bad);
        let validated = ask(Webhook::ValidateNodeWright, &bad);
        assert_eq!(mutated.outcome, Outcome::Denied);
        let message = |a: &Answer| {
            a.review
                .response
                .as_ref()
                .map(|r| r.result.message.clone())
                .unwrap_or_default()
        };
        let text = message(&mutated);
        assert_eq!(
            text,
            message(&validated),
            "the same refusal at both endpoints"
        );
        let (alpha, zeta) = (
            text.find("spec.packages.app.dependsOn.alpha"),
            text.find("spec.packages.app.dependsOn.zeta"),
        );
        assert!(
            alpha.is_some() && zeta.is_some() && alpha < zeta,
            "both missing dependencies, sorted: {text}"
        );

        let good = nodewright(json!({}));
        assert_eq!(
            ask(Webhook::MutateNodeWright, &good).outcome,
            Outcome::Patched
        );
    }

    #[test]
    fn well_formed_reviews_take_the_single_pass_decode() {
        for (name, body) in fixtures() {
            let value: Value = serde_json::from_slice(&body).unwrap_or_default();
            if value["apiVersion"] != "admission.k8s.io/v1" {
                continue;
            }
            let kind = value["request"]["kind"]["kind"]
                .as_str()
                .unwrap_or_default();
            let webhook = match kind {
                "NodeWright" => Webhook::ValidateNodeWright,
                "DeploymentPolicy" => Webhook::ValidateDeploymentPolicy,
                _ => continue,
            };
            if value["request"]["object"].is_object() || value["request"]["oldObject"].is_object() {
                assert!(typed_decodes(webhook, &body), "{name}");
            }
        }
    }

    #[test]
    fn both_decodes_answer_alike() {
        for (name, body) in fixtures() {
            for webhook in Webhook::ALL {
                assert_same_answer(webhook, &body, &name);
            }
        }
        let objects = example_objects();
        assert!(objects.len() > 30, "examples missing");
        let old = objects
            .iter()
            .find(|o| o["kind"] == "NodeWright")
            .cloned()
            .unwrap_or_default();
        for object in &objects {
            for webhook in Webhook::ALL {
                for (operation, object, old) in [
                    ("CREATE", object, &Value::Null),
                    ("UPDATE", object, &old),
                    ("DELETE", &Value::Null, object),
                ] {
                    let body = envelope(webhook, operation, object, old);
                    assert_same_answer(webhook, &body, &format!("{operation} {object}"));
                }
            }
        }
    }

    /// Inputs where a typed decode alone would accept more than the `Value` parse (or a
    /// `DynamicObject`) does: the single-pass decode must leave them to the exact one.
    #[test]
    fn what_only_the_exact_decode_refuses_is_left_to_it() {
        let object = json!({"apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
            "metadata": {"name": "x"}, "spec": {"packages": {}}});
        let valid = String::from_utf8(envelope(
            Webhook::ValidateNodeWright,
            "CREATE",
            &object,
            &Value::Null,
        ))
        .unwrap_or_default();
        assert!(typed_decodes(Webhook::ValidateNodeWright, valid.as_bytes()));
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let with = |extra: &str| {
            valid.replacen(
                "\"metadata\":{",
                &format!("\"metadata\":{{\"zz\":{extra},"),
                1,
            )
        };
        let cases: Vec<(String, Vec<u8>)> = vec![
            ("deep ignored value".into(), with(&deep).into_bytes()),
            ("number beyond f64".into(), with("1e400").into_bytes()),
            ("lone surrogate".into(), with("\"\\ud800\"").into_bytes()),
            ("invalid UTF-8 in an ignored string".into(), {
                let mut b = with("\"\u{e9}\"").into_bytes();
                if let Some(i) = b.iter().position(|&c| c == 0xc3) {
                    b[i + 1] = 0x28;
                }
                b
            }),
            (
                "duplicate key".into(),
                valid
                    .replacen("\"uid\":", "\"uid\":\"a\",\"uid\":", 1)
                    .into_bytes(),
            ),
            (
                "object as an array".into(),
                envelope(
                    Webhook::ValidateNodeWright,
                    "CREATE",
                    &json!([{}, {"packages": {}}]),
                    &Value::Null,
                ),
            ),
            (
                "object without metadata".into(),
                envelope(
                    Webhook::ValidateNodeWright,
                    "CREATE",
                    &json!({"spec": {}}),
                    &Value::Null,
                ),
            ),
            (
                "review as an array".into(),
                b"[\"admission.k8s.io/v1\",\"AdmissionReview\",null]".to_vec(),
            ),
            (
                "v1beta1".into(),
                valid
                    .replacen("admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1)
                    .into_bytes(),
            ),
            (
                "no userInfo".into(),
                valid
                    .replacen("\"userInfo\"", "\"userInfoX\"", 1)
                    .into_bytes(),
            ),
        ];
        for (what, body) in &cases {
            assert!(!typed_decodes(Webhook::ValidateNodeWright, body), "{what}");
            for webhook in Webhook::ALL {
                assert_same_answer(webhook, body, what);
            }
        }
    }
}
