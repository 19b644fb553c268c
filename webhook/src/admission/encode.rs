//! AdmissionReview responses to bytes.
//!
//! The wire form is what serialising kube's `AdmissionReview` through a `serde_json::Value` gives
//! (keys in alphabetical order, since `Value` maps are sorted) with `response.patch` as base64, the
//! AdmissionReview API's encoding of Go's `[]byte`. Every answer this webhook builds is written
//! straight in that form, field by field; anything else (a request echoed back, status details)
//! goes the general way, so the bytes never depend on which path wrote them.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview};
use kube::core::response::StatusSummary;
use serde::Serialize;
use serde_json::Value;

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

/// The response body for `review`.
pub(super) fn review(
    review: &AdmissionReview<DynamicObject>,
) -> Result<Vec<u8>, serde_json::Error> {
    let unusual = review.request.is_some()
        || review
            .response
            .as_ref()
            .is_some_and(|r| r.result.details.is_some() || r.result.metadata.is_some());
    if unusual {
        return general(review);
    }
    let patch = review.response.as_ref().and_then(|r| r.patch.as_deref());
    let mut out = Vec::with_capacity(256 + patch.map_or(0, |p| p.len().div_ceil(3) * 4));
    out.extend_from_slice(br#"{"apiVersion":"#);
    serde_json::to_writer(&mut out, &review.types.api_version)?;
    out.extend_from_slice(br#","kind":"#);
    serde_json::to_writer(&mut out, &review.types.kind)?;
    if let Some(r) = &review.response {
        write_response(&mut out, r)?;
    }
    out.push(b'}');
    Ok(out)
}

/// `,"response":{...}`, keys sorted.
fn write_response(out: &mut Vec<u8>, r: &AdmissionResponse) -> Result<(), serde_json::Error> {
    out.extend_from_slice(br#","response":{"allowed":"#);
    out.extend_from_slice(if r.allowed { b"true" } else { b"false" });
    if !r.audit_annotations.is_empty() {
        let sorted: BTreeMap<&str, &str> = r
            .audit_annotations
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        out.extend_from_slice(br#","auditAnnotations":"#);
        serde_json::to_writer(&mut *out, &sorted)?;
    }
    if let Some(patch) = &r.patch {
        // Base64 needs no JSON escaping: written straight into the body.
        out.extend_from_slice(br#","patch":""#);
        let start = out.len();
        out.resize(start + patch.len().div_ceil(3) * 4, 0);
        let written = STANDARD
            .encode_slice(patch, &mut out[start..])
            .map_err(serde::ser::Error::custom)?;
        out.truncate(start + written);
        // `patchType` is private to kube and set exactly when a patch is (`with_patch`, the only
        // way this webhook sets one).
        out.extend_from_slice(br#"","patchType":"JSONPatch""#);
    }
    let status = &r.result;
    out.extend_from_slice(br#","status":"#);
    serde_json::to_writer(
        &mut *out,
        &WireStatus {
            code: status.code,
            message: &status.message,
            reason: &status.reason,
            status: status.status.as_ref(),
        },
    )?;
    out.extend_from_slice(br#","uid":"#);
    serde_json::to_writer(&mut *out, &r.uid)?;
    if let Some(warnings) = &r.warnings {
        out.extend_from_slice(br#","warnings":"#);
        serde_json::to_writer(&mut *out, warnings)?;
    }
    out.push(b'}');
    Ok(())
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
