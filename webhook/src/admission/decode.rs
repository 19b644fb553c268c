//! Request bodies into typed requests, two ways that always agree.
//!
//! [`typed`] is the path every well-formed review takes: one pass of the JSON parser straight into
//! the envelope and the endpoint's typed object, no `serde_json::Value` and no intermediate
//! `DynamicObject`. [`exact`] is the general path (a `Value`, the kube `AdmissionReview`, then each
//! object converted on its own), whose outcomes and error messages are the webhook's contract.
//!
//! `typed` answers only where it is sure to reach what `exact` reaches, and gives up (`None`)
//! otherwise, so that `exact` runs and decides:
//! - the envelope mirrors kube's `AdmissionRequest` field for field (same types, same defaults), so
//!   it accepts exactly what kube accepts there; the review and the objects must be JSON objects,
//!   as kube's flattened `AdmissionReview` and `DynamicObject` require;
//! - an object that does not decode as the kind (which `exact` reports, or treats as absent for the
//!   old object) fails the whole typed decode;
//! - a JSON parse into `Value` checks the whole document, while a typed decode only skims the
//!   fields it ignores: [`strict_as_value`] rejects what only the skim would let through.

use std::marker::PhantomData;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, META_API_VERSION_V1, META_KIND, Operation,
};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};
use serde::de::{self, DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{Admitted, Objects};

/// The AdmissionReview envelope: kube's `AdmissionReview` without its flattened `TypeMeta` (a
/// flattened field makes serde buffer the whole document before decoding it).
#[derive(Deserialize)]
struct Envelope<K> {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    request: Option<Request<K>>,
    // Never sent to a webhook, but kube decodes it, so a malformed one must fail here too.
    #[serde(default)]
    #[allow(dead_code)]
    response: Option<AdmissionResponse>,
}

/// kube's `AdmissionRequest`, field for field, with the objects decoded as `K`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request<K> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<GroupVersionResource>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: UserInfo,
    object: Option<JsonObject<K>>,
    old_object: Option<JsonObject<K>>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    options: Option<RawExtension>,
}

/// A `K` written as a JSON object (a derived struct would also take an array of its fields in
/// order, which a `DynamicObject` refuses).
struct JsonObject<K>(K);

impl<'de, K: Deserialize<'de>> Deserialize<'de> for JsonObject<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<K>(PhantomData<K>);
        impl<'de, K: Deserialize<'de>> Visitor<'de> for ObjectVisitor<K> {
            type Value = K;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<K, A::Error> {
                K::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(ObjectVisitor(PhantomData))
            .map(JsonObject)
    }
}

/// The single-pass decode: `None` whenever [`exact`] might answer differently (see the module
/// documentation), never a different answer.
pub(super) fn typed<K: Admitted>(body: &[u8]) -> Option<(AdmissionRequest<K>, Objects<K>)> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let envelope: Envelope<K> = serde_json::from_slice(body).ok()?;
    if envelope.kind != META_KIND || envelope.api_version != META_API_VERSION_V1 {
        return None;
    }
    let r = envelope.request?;
    if !strict_as_value(body) {
        return None;
    }
    let objects = Objects {
        object: r.object.map(|o| Ok(o.0)),
        old_object: r.old_object.map(|o| o.0),
    };
    let request = AdmissionRequest {
        types: TypeMeta {
            api_version: envelope.api_version,
            kind: envelope.kind,
        },
        uid: r.uid,
        kind: r.kind,
        resource: r.resource,
        sub_resource: r.sub_resource,
        request_kind: r.request_kind,
        request_resource: r.request_resource,
        request_sub_resource: r.request_sub_resource,
        name: r.name,
        namespace: r.namespace,
        operation: r.operation,
        user_info: r.user_info,
        object: None,
        old_object: None,
        dry_run: r.dry_run,
        options: r.options,
    };
    Some((request, objects))
}

/// The general decode; `Err` is the reason a malformed request is refused with.
pub(super) fn exact<K: Admitted>(
    body: &[u8],
) -> Result<(AdmissionRequest<DynamicObject>, Objects<K>), String> {
    bounded(body)?;
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("request body is not JSON: {e}"))?;
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != META_KIND || api_version != META_API_VERSION_V1 {
        return Err(format!(
            "expected an AdmissionReview of apiVersion admission.k8s.io/v1, got kind {kind:?} apiVersion {api_version:?}: \
             register this webhook with admissionReviewVersions [v1]"
        ));
    }
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(value).map_err(|e| format!("malformed AdmissionReview: {e}"))?;
    let request: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|_| "AdmissionReview has no request".to_owned())?;
    let what = K::kind(&());
    let objects = Objects {
        object: request.object.as_ref().map(|o| convert(o, &what)),
        old_object: request
            .old_object
            .as_ref()
            .and_then(|o| convert(o, &format!("old {what}")).ok()),
    };
    Ok((request, objects))
}

/// Decodes an object of the request into its typed form.
fn convert<K: DeserializeOwned>(object: &DynamicObject, what: &str) -> Result<K, String> {
    let value =
        serde_json::to_value(object).map_err(|e| format!("cannot re-encode the {what}: {e}"))?;
    serde_json::from_value(value).map_err(|e| format!("the {what} does not match its schema: {e}"))
}

/// serde_json's `Value` parser refuses nesting deeper than this; a conservative bound below it.
pub const MAX_DEPTH: usize = 120;
/// Most JSON elements (array items, object members and the containers themselves) a body may
/// hold. What a decode costs is set by its elements, not its bytes: a `Value` is 32 bytes, and
/// an array of 8 MiB of `0,` is 4 Mi of them, ~128 MiB before its vector doubles, so that two
/// such bodies in parallel would exceed the chart's 256 Mi limit. A review of a 10,000-package
/// NodeWright (100 times more than admitted) holds ~30,000; an UPDATE twice that.
pub const MAX_ELEMENTS: usize = 1 << 17;

/// Refuses, before any tree is built, what would make a decode's memory unbounded: a top level
/// that is not a JSON object (an AdmissionReview is one), nesting deeper than [`MAX_DEPTH`], more
/// than [`MAX_ELEMENTS`] elements. One pass over the bytes, no allocation; it does not check the
/// syntax (the decoders do), so it only ever refuses early what they would refuse or could not
/// afford.
pub fn bounded(body: &[u8]) -> Result<(), String> {
    let first = body.iter().position(|b| !b.is_ascii_whitespace());
    match first.map(|i| body[i]) {
        Some(b'{') => {}
        Some(other) => {
            return Err(format!(
                "request body is not an AdmissionReview: it must be a JSON object, it starts with {:?}",
                char::from(other)
            ));
        }
        None => return Err("request body is empty: send an AdmissionReview".to_owned()),
    }
    let (mut depth, mut elements) = (0usize, 0usize);
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                // Skip the string: to the next quote not escaped by a backslash.
                i += 1;
                while i < body.len() {
                    match body[i..].iter().position(|&b| b == b'"' || b == b'\\') {
                        Some(at) if body[i + at] == b'\\' => i += at + 2,
                        Some(at) => {
                            i += at;
                            break;
                        }
                        None => i = body.len(),
                    }
                }
            }
            b'[' | b'{' => {
                depth += 1;
                elements += 1;
                if depth > MAX_DEPTH {
                    return Err(format!(
                        "request body nests JSON deeper than {MAX_DEPTH} levels (at byte {i}): no Kubernetes object does"
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' => elements += 1,
            _ => {}
        }
        if elements > MAX_ELEMENTS {
            return Err(format!(
                "request body holds more than {MAX_ELEMENTS} JSON elements (at byte {i}): \
                 more than any admissible object, refused before decoding"
            ));
        }
        i += 1;
    }
    Ok(())
}
/// Integer digits beyond which a number may not fit an `f64` (`Value` refuses infinite numbers).
const MAX_DIGITS: usize = 300;

/// For a body the typed decode accepted: true when a parse into `Value` is sure to accept it too.
///
/// The typed decode checks the syntax of the fields it ignores, but not what only a full parse
/// checks: UTF-8 in strings, the nesting limit, numbers too large for an `f64`, and lone UTF-16
/// surrogates in `\u` escapes. This checks the whole body for those, conservatively: any exponent
/// and any `\uD8..`-`\uDF..` escape (even a valid surrogate pair) make it false, so such a body
/// takes the exact path, which decides.
///
/// The syntax is known to be valid, so quotes and backslashes alone say where strings are; only
/// the few bytes between strings are looked at one by one.
fn strict_as_value(body: &[u8]) -> bool {
    if !body.is_ascii() && std::str::from_utf8(body).is_err() {
        return false;
    }
    let mut outside = Outside::default();
    // Start of the bytes between strings.
    let mut from = 0;
    while let Some(offset) = body[from..].iter().position(|&b| b == b'"') {
        // Outside strings a valid body has no backslash: this quote opens a string.
        if !outside.check(&body[from..from + offset]) {
            return false;
        }
        match string_end(body, from + offset + 1) {
            Some(end) => from = end + 1,
            None => return false,
        }
    }
    outside.check(&body[from..])
}

/// The index of the quote that ends the string whose contents start at `i`; `None` when the
/// string has a `\uD800`..`\uDFFF` escape (either case) or does not end. Contents are skipped
/// eight bytes at a time.
fn string_end(body: &[u8], mut i: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Non-zero exactly when a byte of `v` is zero; its lowest set bit is in the first such byte.
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    loop {
        // The next quote or backslash.
        let mut at = None;
        while let Some(chunk) = body.get(i..i + 8) {
            let word = u64::from_le_bytes(<[u8; 8]>::try_from(chunk).ok()?);
            let hits = zero_byte(word ^ (ONES * u64::from(b'"')))
                | zero_byte(word ^ (ONES * u64::from(b'\\')));
            if hits != 0 {
                at = Some(i + (hits.trailing_zeros() / 8) as usize);
                break;
            }
            i += 8;
        }
        let at = match at {
            Some(at) => at,
            None => {
                i + body
                    .get(i..)?
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\')?
            }
        };
        if body[at] == b'"' {
            return Some(at);
        }
        if body.get(at + 1) == Some(&b'u')
            && matches!(body.get(at + 2), Some(b'd' | b'D'))
            && matches!(
                body.get(at + 3),
                Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
            )
        {
            return None;
        }
        i = at + 2;
    }
}

/// The structure between strings: nesting depth so far.
#[derive(Default)]
struct Outside {
    depth: usize,
}

impl Outside {
    /// Checks one run of bytes between strings (numbers never span a string).
    fn check(&mut self, bytes: &[u8]) -> bool {
        let mut digits = 0;
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'[' | b'{' => {
                    self.depth += 1;
                    if self.depth > MAX_DEPTH {
                        return false;
                    }
                }
                b']' | b'}' => self.depth = self.depth.saturating_sub(1),
                b'0'..=b'9' => {
                    digits += 1;
                    if digits > MAX_DIGITS {
                        return false;
                    }
                    continue;
                }
                // An `e` after a digit or a `.` is an exponent (`true`/`false` have theirs after
                // a letter).
                b'e' | b'E' if i > 0 && matches!(bytes[i - 1], b'0'..=b'9' | b'.') => return false,
                _ => {}
            }
            digits = 0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strictness_matches_the_value_parser() {
        let ok = [
            r#"{"a":"x\"y\\","b":[1,2.5,-3],"c":true,"d":false,"e":null,"f":"\u00e9\n"}"#,
            r#"{"deep":[[[[[[[[[[1]]]]]]]]]]}"#,
        ];
        for body in ok {
            assert!(
                serde_json::from_str::<Value>(body).is_ok(),
                "{body} is valid JSON"
            );
            assert!(strict_as_value(body.as_bytes()), "{body}");
        }
        let deep = format!("{{\"x\":{}{}}}", "[".repeat(200), "]".repeat(200));
        let long = format!("{{\"x\":1{}}}", "0".repeat(400));
        let refused = [
            r#"{"x":1e400}"#,
            r#"{"x":"\ud800"}"#,
            r#"{"x":"\uDFFF"}"#,
            deep.as_str(),
            long.as_str(),
        ];
        for body in refused {
            assert!(serde_json::from_str::<Value>(body).is_err(), "{body}");
            assert!(!strict_as_value(body.as_bytes()), "{body}");
        }
        // Invalid UTF-8 inside a string.
        assert!(!strict_as_value(b"{\"x\":\"\xc3\x28\"}"));
    }

    #[test]
    fn bounded_refuses_a_non_object_an_over_deep_and_an_over_large_body() {
        for (body, needle) in [
            (&b""[..], "empty"),
            (b"  \n", "empty"),
            (b"[1]", "must be a JSON object, it starts with '['"),
            (b"\"x\"", "starts with '\"'"),
            (b"0", "starts with '0'"),
            (b"\xff", "starts with '\u{ff}'"),
        ] {
            let e = bounded(body).expect_err(needle);
            assert!(e.contains(needle), "{e}");
        }
        let deep = format!(
            "{{\"x\":{}{}}}",
            "[".repeat(MAX_DEPTH),
            "]".repeat(MAX_DEPTH)
        );
        let e = bounded(deep.as_bytes()).expect_err("deep");
        assert!(e.contains("deeper than 120 levels"), "{e}");
        let ok = format!(
            "{{\"x\":{}{}}}",
            "[".repeat(MAX_DEPTH - 1),
            "]".repeat(MAX_DEPTH - 1)
        );
        assert_eq!(bounded(ok.as_bytes()), Ok(()));
        // The elements of 8 MiB of `0,`: refused at the bound, long before the end.
        let wide = format!("{{\"x\":[{}0]}}", "0,".repeat(4 << 20));
        let e = bounded(wide.as_bytes()).expect_err("wide");
        assert!(e.contains("more than 131072 JSON elements"), "{e}");
        let e = bounded(format!("{{\"x\":[{}0]}}", "0,".repeat(MAX_ELEMENTS)).as_bytes())
            .expect_err("one over");
        assert!(e.contains("131072"), "{e}");
        assert_eq!(
            bounded(format!("{{\"x\":[{}0]}}", "0,".repeat(MAX_ELEMENTS - 2)).as_bytes()),
            Ok(())
        );
        // Brackets, braces and commas inside strings (and escaped quotes) are not structure.
        let quoted = format!(
            "{{\"x\":\"{}\\\"{}\"}}",
            "[,{".repeat(MAX_ELEMENTS),
            "[".repeat(MAX_DEPTH * 2)
        );
        assert_eq!(bounded(quoted.as_bytes()), Ok(()));
        // An unterminated string ends the scan without a panic.
        assert_eq!(bounded(b"{\"x\":\"abc\\"), Ok(()));
    }

    #[test]
    fn the_depth_bound_is_below_the_value_parsers() {
        // What serde_json's `Value` parser refuses for its depth, `bounded` refuses first.
        let deep = format!("{{\"x\":{}{}}}", "[".repeat(130), "]".repeat(130));
        assert!(serde_json::from_str::<Value>(&deep).is_err());
        assert!(bounded(deep.as_bytes()).is_err());
    }
}
