//! CEL rules whose rejection names the offending map key (a package key, a dependsOn entry).
//!
//! The apiserver checks the schema, CEL included, before any validating webhook is called, so for a
//! rule that exists in both places users only ever see the CEL message. A rule on a map value cannot
//! see its key, so these rules stay on the map and their `messageExpression`s find the key.
//!
//! Every messageExpression here has one shape, [`smallest`]: collect the offending keys with
//! `filter`, bind that list (`[list].map(v, ...)[0]` is the only binding this CEL has: `cel.bind`
//! is not in the Kubernetes environment), take the smallest key, bind it, and build one message.
//! The shape is dictated by the apiserver's cost rules. It was checked with a real kube-apiserver
//! 1.37 (the end-to-end suite, `tests/e2e/tests/crds.rs`) and with the CRD validation of
//! `k8s.io/apiextensions-apiserver` v0.31.0 (cel-go 0.20, Kubernetes 1.31: the oldest release the
//! chart supports), which accept and refuse the same variants:
//! - the smallest key, not the first: the apiserver iterates a map in no fixed order, and a retry
//!   should get the same message;
//! - not `min()`: its result has no estimated length, so concatenating it into a message is costed
//!   as unbounded and the CRD is refused. An element taken from a `filter` result keeps the length
//!   the schema gives the key;
//! - one message, built after the choice: building a message per offender (`self.map(k,
//!   <offends>, <message>)`) exceeds the 1M per-call runtime limit for the largest objects (100
//!   packages of 100 wrong dependsOn entries), and choosing with `self.all(j, <j offends> || k <=
//!   j)` re-evaluates the offence for every pair, which for dependsOn (packages² × entries) is
//!   estimated at nearly ten times the 10M per-expression limit. This shape is estimated at about 550k
//!   for the dependsOn rule on spec.packages and 54k for the key and name rules.
//!
//! Each rule keeps its static `message`: the apiserver falls back to it when a messageExpression
//! cannot produce one (over 5 KiB, a line break in a key).

use serde_json::{Value, json};

use super::patterns::{PACKAGE_NAME_PATTERN, PACKAGE_VERSION_PATTERN};

/// A CEL expression that binds to `var` the smallest element of the list of strings `offenders`
/// and evaluates to `message` (which may use `var`). `var` must not be used by the enclosing
/// expression; `<var>s` and `<var>2` are used internally.
fn smallest(offenders: &str, var: &str, message: &str) -> String {
    format!(
        "[{offenders}].map({var}s, [{var}s.filter({var}, {var}s.all({var}2, {var} <= {var}2))[0]].map({var}, {message})[0])[0]"
    )
}

/// A CEL string literal holding `text` (single-quoted; quotes and backslashes escaped).
fn lit(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `dependsOn` entry `d` of package `k` names no package of this NodeWright at that version.
const BAD_DEPENDENCY: &str = "!(d in self) || self[d].version != self[k].dependsOn[d]";

/// The `x-kubernetes-validations` of `spec.packages`: key pattern, `name` equal to the key, and
/// every dependsOn entry naming a package of this NodeWright at its exact version. The messages
/// follow the webhook's wording (`webhook/src/rules/package.rs`, `graph.rs`), which reports every
/// offending key where these name one.
pub(crate) fn packages_rules() -> Value {
    let pattern = lit(PACKAGE_NAME_PATTERN);
    let key_message = format!(
        "'spec.packages.' + k + ': package name \"' + k + '\" is not valid: ' + {}",
        lit("use 2 to 43 lowercase letters, digits or '-', starting and ending with a letter")
    );
    let name_message = "'spec.packages.' + k + '.name: name \"' + self[k].name + '\" differs from the package key \"' + k + '\": leave name unset (it is filled from the key) or set it to \"' + k + '\"'";
    let dependency_message = "'spec.packages.' + k + '.dependsOn.' + d + ': ' + (!(d in self) ? 'depends on \"' + d + '|' + self[k].dependsOn[d] + '\", but there is no package \"' + d + '\" in this NodeWright: add it to spec.packages or remove this entry' : self[k].dependsOn[d] == '' ? 'the version of \"' + d + '\" is empty: write the exact version of ' + d + ' this package needs (this NodeWright has ' + d + ' ' + self[d].version + ')' : 'depends on \"' + d + '|' + self[k].dependsOn[d] + '\", which is not in this NodeWright (it has \"' + d + '|' + self[d].version + '\"): set the dependency to \"' + self[d].version + '\", or change the version of ' + d)";
    json!([
        {
            "rule": format!("self.all(k, k.matches({pattern}))"),
            "message": "package names (the keys of spec.packages) must be 2 to 43 lowercase letters, digits or '-', starting and ending with a letter",
            "messageExpression": smallest(&format!("self.filter(k, !k.matches({pattern}))"), "k", &key_message)
        },
        {
            "rule": "self.all(k, !has(self[k].name) || self[k].name == k)",
            "message": "packages.<key>.name must equal its key: leave it unset and it is filled in",
            "messageExpression": smallest("self.filter(k, has(self[k].name) && self[k].name != k)", "k", name_message)
        },
        {
            "rule": "self.all(k, !has(self[k].dependsOn) || self[k].dependsOn.all(d, d in self && self[d].version == self[k].dependsOn[d]))",
            "message": "every dependsOn entry must name another package of this NodeWright with its exact version",
            "messageExpression": smallest(
                &format!("self.filter(k, has(self[k].dependsOn) && self[k].dependsOn.exists(d, {BAD_DEPENDENCY}))"),
                "k",
                &smallest(&format!("self[k].dependsOn.filter(d, {BAD_DEPENDENCY})"), "d", dependency_message),
            )
        }
    ])
}

/// The `x-kubernetes-validations` of `spec.packages.<key>.dependsOn`: no empty version. The package
/// key is not visible here; the apiserver's field path (`spec.packages[<key>].dependsOn`) names it.
pub(crate) fn depends_on_rules() -> Value {
    json!([{
        "rule": "self.all(d, size(self[d]) > 0)",
        "message": "every dependsOn entry needs the exact version of the package it depends on",
        "messageExpression": smallest(
            "self.filter(d, size(self[d]) == 0)",
            "d",
            "'dependsOn.' + d + ': the version of \"' + d + '\" is empty: write the exact version of ' + d + ' this package needs'"
        )
    }])
}

/// The `x-kubernetes-validations` of `spec.packages.<key>.version`: the webhook's shape
/// ([`PACKAGE_VERSION_PATTERN`], not ending in `-`), so that with the webhook down and
/// `failurePolicy: Ignore` no version with a space, `/` or `..` reaches host paths and labels. The
/// apiserver's field path (`spec.packages[<key>].version`) names the package.
pub(crate) fn version_rules() -> Value {
    json!([{
        "rule": format!("self.matches({}) && !self.endsWith('-')", lit(PACKAGE_VERSION_PATTERN)),
        "message": "version must be a semantic version such as 1.2.3 or 1.2.3-rc.1 (MAJOR[.MINOR[.PATCH]] with an optional -PRERELEASE, no +BUILD): it is also the image tag and part of host paths and labels"
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_binds_the_list_then_the_smallest_element() {
        assert_eq!(
            smallest("self.filter(k, P)", "k", "'x' + k"),
            "[self.filter(k, P)].map(ks, [ks.filter(k, ks.all(k2, k <= k2))[0]].map(k, 'x' + k)[0])[0]"
        );
    }

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(lit(r"it's a \d"), r"'it\'s a \\d'");
    }

    /// The rules themselves did not change with the messages: objects admitted before are admitted.
    #[test]
    fn rules_are_the_documented_ones() {
        let rules = packages_rules();
        assert_eq!(
            rules[0]["rule"],
            "self.all(k, k.matches('^[a-z][-a-z0-9]{0,41}[a-z]$'))"
        );
        for rule in rules.as_array().into_iter().flatten() {
            assert!(rule["message"].is_string() && rule["messageExpression"].is_string());
        }
    }
}
