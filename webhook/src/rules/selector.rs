//! Label selectors, checked as apimachinery's `LabelSelectorAsSelector` converts them.
//!
//! `nodeSelectors`, `podNonInterruptLabels` and compartment selectors are turned into selectors by the
//! operator at reconcile time. Upstream checks only `nodeSelectors` and only up to the first problem;
//! here every requirement is checked and every problem is reported, so a selector that would select
//! nothing (or break the reconcile) never gets past admission.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::labels::{label_value_errors, qualified_name_errors};

/// The operators apimachinery accepts in `matchExpressions`.
pub const OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];

/// Every problem with `selector`, each naming where inside the selector it is (`matchLabels[key]`,
/// `matchExpressions[0].operator`...). Empty when the selector is valid.
pub fn selector_errors(selector: &LabelSelector) -> Vec<String> {
    let mut errors = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        // Spelled out only for a message.
        let at = || format!("matchLabels[{key}]");
        for e in qualified_name_errors(key) {
            errors.push(format!(
                "{}: key {key:?} is not a valid label key: {e}",
                at()
            ));
        }
        for e in label_value_errors(value) {
            errors.push(format!(
                "{}: value {value:?} is not a valid label value: {e}",
                at()
            ));
        }
    }
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("matchExpressions[{i}]");
        let key = &req.key;
        for e in qualified_name_errors(key) {
            errors.push(format!("{at}.key: {key:?} is not a valid label key: {e}"));
        }
        let values = req.values.as_deref().unwrap_or_default();
        let op = req.operator.as_str();
        match op {
            "In" | "NotIn" if values.is_empty() => errors.push(format!(
                "{at}.values: operator {op} needs at least one value: list the label values to match"
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(format!(
                "{at}.values: operator {op} takes no values: remove values (or use In/NotIn to match values)"
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => errors.push(format!(
                "{at}.operator: {op:?} is not a valid label selector operator: use one of {}",
                OPERATORS.join(", ")
            )),
        }
        for (j, value) in values.iter().enumerate() {
            for e in label_value_errors(value) {
                errors.push(format!(
                    "{at}.values[{j}]: {value:?} is not a valid label value: {e}"
                ));
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            match_expressions: None,
        }
    }

    fn expr(key: &str, op: &str, values: Option<&[&str]>) -> LabelSelector {
        LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.to_owned(),
                operator: op.to_owned(),
                values: values.map(|v| v.iter().map(|s| (*s).to_owned()).collect()),
            }]),
        }
    }

    #[test]
    fn accepted_selectors() {
        let cases = [
            LabelSelector::default(),
            labels(&[]),
            labels(&[("nodewright.example.com/pool", "gpu"), ("zone", "")]),
            expr("rack", "In", Some(&["a1", "a2"])),
            expr("rack", "NotIn", Some(&["a1"])),
            expr("rack", "Exists", None),
            expr("rack", "DoesNotExist", Some(&[])),
        ];
        for s in cases {
            assert_eq!(selector_errors(&s), Vec::<String>::new(), "{s:?}");
        }
    }

    #[test]
    fn rejected_selectors_name_the_problem() {
        let cases: [(LabelSelector, &str); 9] = [
            (
                labels(&[("bad key", "x")]),
                "matchLabels[bad key]: key \"bad key\"",
            ),
            (labels(&[("a/b/c", "x")]), "at most one '/'"),
            (
                labels(&[("pool", "gpu!")]),
                "value \"gpu!\" is not a valid label value",
            ),
            (
                expr("pool", "Near", Some(&["gpu"])),
                "\"Near\" is not a valid label selector operator: use one of In, NotIn, Exists, DoesNotExist",
            ),
            (expr("pool", "in", Some(&["gpu"])), "\"in\" is not a valid"),
            (
                expr("pool", "In", None),
                "operator In needs at least one value",
            ),
            (
                expr("pool", "NotIn", Some(&[])),
                "operator NotIn needs at least one value",
            ),
            (
                expr("rack", "Exists", Some(&["a"])),
                "operator Exists takes no values",
            ),
            (
                expr("-rack", "In", Some(&["a", "b c"])),
                "matchExpressions[0].values[1]",
            ),
        ];
        for (s, want) in cases {
            let errors = selector_errors(&s);
            assert!(
                errors.iter().any(|e| e.contains(want)),
                "{want:?} not in {errors:?}"
            );
        }
    }

    #[test]
    fn every_problem_is_reported() {
        let mut s = expr("-rack", "Near", Some(&["b c"]));
        s.match_labels = labels(&[("x", "-")]).match_labels;
        assert_eq!(selector_errors(&s).len(), 4, "{:?}", selector_errors(&s));
    }
}
