//! Which packages' `stageTimeout` admission filled from the operator default, so that a later change
//! of `JOB_STAGE_TIMEOUT` reaches them (docs/timeouts.md, "Changing the default").
//!
//! The mutating webhook writes the default into `stageTimeout` (what `kubectl get` shows), which alone
//! would freeze the default of the day into every object. So it also records, in the annotation
//! [`DEFAULTED_STAGE_TIMEOUTS_ANNOTATION`], a JSON object `{package: value it filled}`. The operator
//! treats a package whose stored `stageTimeout` still equals its recorded value as one that set none:
//! its next Job gets the operator's current default. A package whose value was changed since (by the
//! user, or by an edit that wrote it explicitly) keeps its own value, and the webhook drops its entry
//! on the next admission. A package that should keep today's default for good sets another value, or
//! is removed from the annotation.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::api::NodeWright;
use crate::defaults::{FieldDefault, OperatorDefaults, default_nodewright, escape_token};
pub use crate::keys::DEFAULTED_STAGE_TIMEOUTS_ANNOTATION;

/// The annotation as a field path in admission errors.
pub const RECORD_PATH: &str =
    "metadata.annotations[nodewright.nvidia.com/defaulted-stage-timeouts]";

/// Why the annotation cannot be read (the message follows the field path
/// [`RECORD_PATH`] in admission's answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "not a JSON object of package name to stageTimeout ({reason}); the webhook writes it: remove it (kubectl annotate nodewright <name> {DEFAULTED_STAGE_TIMEOUTS_ANNOTATION}-) or fix it"
)]
pub struct RecordError {
    reason: String,
}

/// The recorded `{package: value filled}`, empty when the annotation is absent.
pub fn recorded(nodewright: &NodeWright) -> Result<BTreeMap<String, String>, RecordError> {
    let Some(text) = nodewright
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULTED_STAGE_TIMEOUTS_ANNOTATION))
    else {
        return Ok(BTreeMap::new());
    };
    serde_json::from_str(text).map_err(|e| RecordError {
        reason: e.to_string(),
    })
}

/// The packages that follow the operator's current default: recorded, and their `stageTimeout` is
/// still the value admission filled. A malformed annotation makes none follow it (each package keeps
/// its stored value, the behaviour without the annotation); admission refuses one anyway.
pub fn following_default(nodewright: &NodeWright) -> BTreeSet<String> {
    recorded(nodewright)
        .unwrap_or_default()
        .into_iter()
        .filter(|(key, filled)| {
            nodewright
                .spec
                .packages
                .get(key)
                .and_then(|p| p.stage_timeout.as_ref())
                == Some(filled)
        })
        .map(|(key, _)| key)
        .collect()
}

/// What the mutating webhook applies to a NodeWright: [`default_nodewright`], plus the record of the
/// `stageTimeout`s filled now and earlier ones still in force. Returns every filled field, the
/// annotation included when it changes. A malformed annotation is left as it is (admission refuses
/// it with [`RecordError`]'s message).
pub fn default_nodewright_object(
    nodewright: &mut NodeWright,
    defaults: &OperatorDefaults,
) -> Vec<FieldDefault> {
    let unset: Vec<String> = nodewright
        .spec
        .packages
        .iter()
        .filter(|(_, p)| p.stage_timeout.is_none())
        .map(|(key, _)| key.clone())
        .collect();
    let mut filled = default_nodewright(&mut nodewright.spec, defaults);
    let Ok(previous) = recorded(nodewright) else {
        return filled;
    };
    let mut record: BTreeMap<String, String> = previous
        .iter()
        .filter(|(key, value)| {
            nodewright
                .spec
                .packages
                .get(*key)
                .and_then(|p| p.stage_timeout.as_ref())
                == Some(*value)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for key in unset {
        record.insert(key, defaults.stage_timeout.clone());
    }
    let present = nodewright
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(DEFAULTED_STAGE_TIMEOUTS_ANNOTATION));
    if record == previous && (present || record.is_empty()) {
        return filled;
    }
    let text = serde_json::to_string(&record).unwrap_or_else(|_| "{}".to_owned());
    // JSON Patch `add` needs the parent: a request without `annotations` gets the whole map.
    let parent_existed = nodewright.metadata.annotations.is_some();
    nodewright
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(DEFAULTED_STAGE_TIMEOUTS_ANNOTATION.to_owned(), text.clone());
    filled.push(if parent_existed {
        FieldDefault {
            pointer: format!(
                "/metadata/annotations/{}",
                escape_token(DEFAULTED_STAGE_TIMEOUTS_ANNOTATION)
            ),
            value: Value::String(text),
        }
    } else {
        FieldDefault {
            pointer: "/metadata/annotations".to_owned(),
            value: Value::Object(
                [(
                    DEFAULTED_STAGE_TIMEOUTS_ANNOTATION.to_owned(),
                    Value::String(text),
                )]
                .into_iter()
                .collect(),
            ),
        }
    });
    filled
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::{NodeWrightSpec, Package};

    fn nodewright(packages: &[(&str, Option<&str>)], annotation: Option<&str>) -> NodeWright {
        let mut nw = NodeWright::new(
            "nw",
            NodeWrightSpec {
                packages: packages
                    .iter()
                    .map(|(key, timeout)| {
                        let package = Package {
                            version: "1.0.0".into(),
                            image: "ghcr.io/acme/tool".into(),
                            stage_timeout: timeout.map(str::to_owned),
                            ..Package::default()
                        };
                        ((*key).to_owned(), package)
                    })
                    .collect(),
                ..NodeWrightSpec::default()
            },
        );
        if let Some(text) = annotation {
            nw.metadata.annotations = Some(BTreeMap::from([(
                DEFAULTED_STAGE_TIMEOUTS_ANNOTATION.to_owned(),
                text.to_owned(),
            )]));
        }
        nw
    }

    fn defaults(stage_timeout: &str) -> OperatorDefaults {
        OperatorDefaults::from_lookup(|var| {
            (var == crate::defaults::ENV_JOB_STAGE_TIMEOUT).then(|| stage_timeout.to_owned())
        })
        .expect("defaults")
    }

    fn pointers(filled: &[FieldDefault]) -> Vec<(&str, &Value)> {
        filled
            .iter()
            .map(|f| (f.pointer.as_str(), &f.value))
            .collect()
    }

    #[test]
    fn a_filled_stage_timeout_is_recorded_and_follows_the_default() {
        let mut nw = nodewright(&[("a", None), ("b", Some("5m"))], None);
        let filled = default_nodewright_object(&mut nw, &defaults("1h"));
        assert_eq!(
            pointers(&filled),
            [
                ("/spec/packages/a/name", &json!("a")),
                ("/spec/packages/a/stageTimeout", &json!("1h")),
                ("/spec/packages/b/name", &json!("b")),
                (
                    "/metadata/annotations",
                    &json!({DEFAULTED_STAGE_TIMEOUTS_ANNOTATION: r#"{"a":"1h"}"#})
                ),
            ]
        );
        assert_eq!(following_default(&nw), BTreeSet::from(["a".to_owned()]));
        // A second admission of the stored object changes nothing.
        assert_eq!(default_nodewright_object(&mut nw, &defaults("1h")), []);
        // Nor does one after the default changed: the stored value stays, the operator follows.
        assert_eq!(default_nodewright_object(&mut nw, &defaults("2h")), []);
        assert_eq!(following_default(&nw), BTreeSet::from(["a".to_owned()]));
    }

    #[test]
    fn a_value_changed_since_keeps_its_own_and_its_entry_goes() {
        let mut nw = nodewright(&[("a", Some("30m")), ("b", None)], Some(r#"{"a":"1h"}"#));
        assert_eq!(following_default(&nw), BTreeSet::new(), "a was changed");
        let filled = default_nodewright_object(&mut nw, &defaults("2h"));
        let key = format!(
            "/metadata/annotations/{}",
            DEFAULTED_STAGE_TIMEOUTS_ANNOTATION.replace('/', "~1")
        );
        assert_eq!(
            pointers(&filled).last(),
            Some(&(key.as_str(), &json!(r#"{"b":"2h"}"#)))
        );
        assert_eq!(following_default(&nw), BTreeSet::from(["b".to_owned()]));
        // Once b is set explicitly too, the record empties.
        if let Some(b) = nw.spec.packages.get_mut("b") {
            b.stage_timeout = Some("10m".into());
        }
        let filled = default_nodewright_object(&mut nw, &defaults("2h"));
        assert_eq!(pointers(&filled), [(key.as_str(), &json!("{}"))]);
        assert_eq!(following_default(&nw), BTreeSet::new());
    }

    #[test]
    fn nothing_is_recorded_when_nothing_was_filled() {
        let mut nw = nodewright(&[("a", Some("5m"))], None);
        let filled = default_nodewright_object(&mut nw, &defaults("1h"));
        assert_eq!(pointers(&filled), [("/spec/packages/a/name", &json!("a"))]);
        assert_eq!(nw.metadata.annotations, None);
    }

    #[test]
    fn a_malformed_record_is_refused_by_name_and_follows_nothing() {
        let mut nw = nodewright(&[("a", Some("1h"))], Some("a=1h"));
        let err = recorded(&nw).expect_err("malformed").to_string();
        assert!(
            err.contains("not a JSON object") && err.contains("remove it"),
            "{err}"
        );
        assert_eq!(following_default(&nw), BTreeSet::new());
        let filled = default_nodewright_object(&mut nw, &defaults("1h"));
        assert_eq!(pointers(&filled), [("/spec/packages/a/name", &json!("a"))]);
        assert!(RECORD_PATH.contains(DEFAULTED_STAGE_TIMEOUTS_ANNOTATION));
    }
}
