//! AdmissionReview responses to bytes.
//!
//! The wire form is what serialising kube's `AdmissionReview` through a `serde_json::Value` gives
//! (keys in alphabetical order, since `Value` maps are sorted) with `response.patch` as base64, the
//! AdmissionReview API's encoding of Go's `[]byte`. Every answer this webhook builds is written
//! straight in that form; anything else (a request echoed back, status details) goes the general
//! way, so the bytes never depend on which path wrote them.

use std::collections::BTreeMap;

use base64::Engine;
use base64::display::Base64Display;
use base64::engine::general_purpose::STANDARD;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview};
use kube::core::response::StatusSummary;
use serde::{Serialize, Serializer};
use serde_json::Value;

/// `AdmissionReview`, keys sorted.
#[derive(Serialize)]
struct WireReview<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<WireResponse<'a>>,
}

/// `AdmissionResponse`, keys sorted.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireResponse<'a> {
    allowed: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    audit_annotations: BTreeMap<&'a str, &'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Base64<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    status: WireStatus<'a>,
    uid: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a [String]>,
}

/// `Status` without `details` and `metadata` (answers never carry them), keys sorted.
#[derive(Serialize)]
struct WireStatus<'a> {
    #[serde(skip_serializing_if = "is_zero")]
    code: u16,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a StatusSummary>,
}

fn is_zero(code: &u16) -> bool {
    *code == 0
}

/// Bytes as a base64 JSON string, written without an intermediate `String`.
struct Base64<'a>(&'a [u8]);

impl Serialize for Base64<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&Base64Display::new(self.0, &STANDARD))
    }
}

/// The response body for `review`.
pub(super) fn review(
    review: &AdmissionReview<DynamicObject>,
) -> Result<Vec<u8>, serde_json::Error> {
    match wire(review) {
        Some(wire) => {
            let mut out = Vec::with_capacity(256 + wire_patch_len(review));
            serde_json::to_writer(&mut out, &wire)?;
            Ok(out)
        }
        None => general(review),
    }
}

fn wire_patch_len(review: &AdmissionReview<DynamicObject>) -> usize {
    let patch = review.response.as_ref().and_then(|r| r.patch.as_ref());
    patch.map_or(0, |p| p.len().div_ceil(3) * 4)
}

/// The sorted form of `review`, when it has the shape of the webhook's answers.
fn wire(review: &AdmissionReview<DynamicObject>) -> Option<WireReview<'_>> {
    if review.request.is_some() {
        return None;
    }
    let response = match &review.response {
        Some(r) => Some(wire_response(r)?),
        None => None,
    };
    Some(WireReview {
        api_version: &review.types.api_version,
        kind: &review.types.kind,
        response,
    })
}

fn wire_response(r: &AdmissionResponse) -> Option<WireResponse<'_>> {
    let status = &r.result;
    if status.details.is_some() || status.metadata.is_some() {
        return None;
    }
    Some(WireResponse {
        allowed: r.allowed,
        audit_annotations: r
            .audit_annotations
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        patch: r.patch.as_deref().map(Base64),
        // `patchType` is private to kube and set exactly when a patch is (`with_patch`, the only
        // way this webhook sets one).
        patch_type: r.patch.as_ref().map(|_| "JSONPatch"),
        status: WireStatus {
            code: status.code,
            message: &status.message,
            reason: &status.reason,
            status: status.status.as_ref(),
        },
        uid: &r.uid,
        warnings: r.warnings.as_deref(),
    })
}

/// Through a `Value`, with the patch bytes replaced by their base64.
fn general(review: &AdmissionReview<DynamicObject>) -> Result<Vec<u8>, serde_json::Error> {
    let mut value = serde_json::to_value(review)?;
    let patch = review.response.as_ref().and_then(|r| r.patch.as_ref());
    if let (Some(patch), Some(slot)) = (patch, value.pointer_mut("/response/patch")) {
        *slot = Value::String(STANDARD.encode(patch));
    }
    serde_json::to_vec(&value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, Patch, PatchOperation};
    use kube::core::Status;
    use kube::core::admission::AdmissionRequest;
    use kube::core::response::StatusDetails;

    fn request() -> AdmissionRequest<DynamicObject> {
        let body = include_str!("../../tests/fixtures/validate-create-nodewright.json");
        let review: AdmissionReview<DynamicObject> =
            serde_json::from_str(body).expect("fixture decodes");
        review.try_into().expect("fixture has a request")
    }

    /// Every shape of answer the webhook sends, plus ones it never sends.
    fn answers() -> Vec<AdmissionReview<DynamicObject>> {
        let request = request();
        let allowed = AdmissionResponse::from(&request);
        let mut denied = AdmissionResponse::from(&request).deny("a: \"quoted\"\nb: é <&>");
        denied.result.code = 403;
        denied.result.reason = "Forbidden".to_owned();
        let mut warned = AdmissionResponse::from(&request);
        warned.warnings = Some(vec!["w1 \u{1}".to_owned(), "w2".to_owned()]);
        let patch = Patch(vec![PatchOperation::Add(AddOperation {
            path: PointerBuf::parse("/spec/packages/a~1b/name").expect("pointer"),
            value: Value::String("a/b".to_owned()),
        })]);
        let patched = AdmissionResponse::from(&request)
            .with_patch(patch)
            .expect("patch encodes");
        let mut annotated = AdmissionResponse::from(&request);
        annotated.audit_annotations = [
            ("z".to_owned(), "1".to_owned()),
            ("a".to_owned(), "2".to_owned()),
        ]
        .into();
        let mut detailed = AdmissionResponse::invalid("bad");
        detailed.result.details = Some(StatusDetails {
            name: "x".to_owned(),
            group: "g".to_owned(),
            kind: "NodeWright".to_owned(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 3,
        });
        let mut summarised = AdmissionResponse::from(&request);
        summarised.result = Status::success();
        let mut echoed = allowed.clone().into_review();
        echoed.request = Some(request.clone());
        vec![
            allowed.into_review(),
            denied.into_review(),
            warned.into_review(),
            patched.into_review(),
            annotated.into_review(),
            AdmissionResponse::invalid("not JSON").into_review(),
            detailed.into_review(),
            summarised.into_review(),
            echoed,
            AdmissionReview {
                types: request.types.clone(),
                request: None,
                response: None,
            },
        ]
    }

    #[test]
    fn the_direct_form_is_byte_for_byte_the_general_one() {
        for answer in answers() {
            let direct = review(&answer).expect("encodes");
            let general = general(&answer).expect("encodes");
            assert_eq!(
                String::from_utf8_lossy(&direct),
                String::from_utf8_lossy(&general)
            );
        }
    }

    #[test]
    fn the_patch_is_base64_of_the_json_patch() {
        let answers = answers();
        let body: Value =
            serde_json::from_slice(&review(&answers[3]).expect("encodes")).expect("JSON");
        let patch = STANDARD
            .decode(body["response"]["patch"].as_str().expect("a string"))
            .expect("base64");
        assert_eq!(
            String::from_utf8_lossy(&patch),
            r#"[{"op":"add","path":"/spec/packages/a~1b/name","value":"a/b"}]"#
        );
        assert_eq!(body["response"]["patchType"], "JSONPatch");
    }
}
