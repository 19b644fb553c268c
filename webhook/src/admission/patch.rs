//! The defaults a mutating endpoint filled, as the bytes of a JSON Patch of `add` operations.
//!
//! Written straight from the pointer and value of each default, as serialising json_patch's
//! `Patch` of `PatchOperation::Add`s writes them (`{"op":"add","path":…,"value":…}`), without
//! building the operations first.

use json_patch::jsonptr::{Pointer, PointerBuf};
use nodewright_shared::defaults::FieldDefault;

/// Why the patch could not be built; both are internal errors (the defaulting functions build
/// valid pointers and plain values), reported as the request's denial.
#[derive(Debug, thiserror::Error)]
pub(super) enum PatchError {
    /// A pointer that is not a JSON Pointer.
    #[error("internal error building the defaults patch: {0}")]
    Pointer(String),
    /// A value that does not serialise.
    #[error("internal error encoding the defaults patch: failed to serialize patch: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The JSON Patch adding every filled default, in order.
pub(super) fn add_operations(filled: &[FieldDefault]) -> Result<Vec<u8>, PatchError> {
    let mut out = Vec::with_capacity(filled.len() * 80);
    out.push(b'[');
    for (i, f) in filled.iter().enumerate() {
        if Pointer::parse(&f.pointer).is_err() {
            // The same check; the owned parse has the detailed message.
            let reason = PointerBuf::parse(f.pointer.clone())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            return Err(PatchError::Pointer(reason));
        }
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"op":"add","path":"#);
        serde_json::to_writer(&mut out, &f.pointer)?;
        out.extend_from_slice(br#","value":"#);
        serde_json::to_writer(&mut out, &f.value)?;
        out.push(b'}');
    }
    out.push(b']');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use json_patch::{AddOperation, Patch, PatchOperation};
    use serde_json::{Value, json};

    use super::*;

    fn default(pointer: &str, value: Value) -> FieldDefault {
        FieldDefault {
            pointer: pointer.to_owned(),
            value,
        }
    }

    #[test]
    fn the_bytes_are_those_of_the_json_patch() {
        let filled = vec![
            default("/spec/packages/tools/name", json!("tools")),
            default("/spec/packages/a~1b~0c/stageTimeout", json!("1h")),
            default(
                "/spec/packages/\"quoted\" é\n/name",
                json!("\"quoted\" é\n"),
            ),
            default("/spec/default/strategy/fixed/initialBatch", json!(1)),
            default("/spec/x", json!({"b": [1, 2.5, null], "a": true})),
        ];
        let patch = Patch(
            filled
                .iter()
                .map(|f| {
                    PatchOperation::Add(AddOperation {
                        path: PointerBuf::parse(f.pointer.clone()).expect("pointer"),
                        value: f.value.clone(),
                    })
                })
                .collect(),
        );
        let expected = serde_json::to_vec(&patch).expect("encodes");
        let got = add_operations(&filled).expect("builds");
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&expected)
        );
        assert_eq!(add_operations(&[]).expect("builds"), b"[]");
    }

    #[test]
    fn a_pointer_that_is_not_one_is_an_internal_error() {
        let err = add_operations(&[default("spec/x", json!(1))]).expect_err("refused");
        let PatchError::Pointer(reason) = &err else {
            panic!("{err}");
        };
        let expected = PointerBuf::parse("spec/x")
            .expect_err("refused")
            .to_string();
        assert_eq!(reason, &expected);
        assert!(
            err.to_string()
                .starts_with("internal error building the defaults patch: ")
        );
    }
}
