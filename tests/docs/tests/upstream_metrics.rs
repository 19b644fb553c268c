//! The upstream-compatibility recording rules (chart/files/prometheus/upstream-compat.rules.yaml)
//! that let dashboards and alerts written for the upstream operator's `skyhook_*` gauges read
//! NodeWright's `nodewright_*` ones:
//!
//! - `promtool check rules` accepts the file and `promtool test rules` runs its unit tests
//!   (tests/docs/alerts/upstream-compat.test.yaml) against it;
//! - every upstream gauge (upstream-operator.md §6.6, written out below) is recorded, from the
//!   `nodewright_*` gauge of the same name, which the operator exports with upstream's labels but
//!   `nodewright_name` for `skyhook_name`. A rule removed, or a gauge renamed or relabelled in the
//!   operator, fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Path of the rule file, from the repository root.
const RULES: &str = "chart/files/prometheus/upstream-compat.rules.yaml";
/// Path of its promtool unit tests, from the repository root.
const TESTS: &str = "tests/docs/alerts/upstream-compat.test.yaml";

const ROLLOUT: &[&str] = &[
    "skyhook_name",
    "policy_name",
    "compartment_name",
    "strategy",
];

/// The upstream operator's gauges and their labels (upstream-operator.md §6.6).
const UPSTREAM: &[(&str, &[&str])] = &[
    ("skyhook_status", &["skyhook_name", "status"]),
    ("skyhook_node_status_count", &["skyhook_name", "status"]),
    ("skyhook_node_target_count", &["skyhook_name"]),
    (
        "skyhook_package_state_count",
        &["skyhook_name", "package_name", "package_version", "state"],
    ),
    (
        "skyhook_package_stage_count",
        &["skyhook_name", "package_name", "package_version", "stage"],
    ),
    (
        "skyhook_package_restarts_count",
        &["skyhook_name", "package_name", "package_version"],
    ),
    ("skyhook_rollout_matched_nodes", ROLLOUT),
    ("skyhook_rollout_ceiling", ROLLOUT),
    ("skyhook_rollout_in_progress", ROLLOUT),
    ("skyhook_rollout_completed", ROLLOUT),
    ("skyhook_rollout_progress_percent", ROLLOUT),
    ("skyhook_rollout_current_batch", ROLLOUT),
    ("skyhook_rollout_consecutive_failures", ROLLOUT),
    ("skyhook_rollout_should_stop", ROLLOUT),
];

fn path(relative: &str) -> PathBuf {
    nodewright_docs::repo_dir().join(relative)
}

/// (record, expr) of every rule in the file.
fn rules() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path(RULES)).expect("the rule file");
    let doc: serde_json::Value = yaml_serde::from_str(&text).expect("rule file YAML");
    let mut out = Vec::new();
    for group in doc["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let record = rule["record"]
                .as_str()
                .unwrap_or_else(|| panic!("a rule without `record`: {rule}"));
            let expr = rule["expr"].as_str().expect("expr");
            out.push((record.to_owned(), expr.to_owned()));
        }
    }
    out
}

#[test]
fn the_upstream_compat_rules_pass_promtool_and_their_unit_tests() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The test file's `rule_files:` names the rule file by its base name, next to it.
    std::fs::copy(path(RULES), dir.path().join("upstream-compat.rules.yaml")).expect("copy rules");
    std::fs::copy(path(TESTS), dir.path().join("upstream-compat.test.yaml")).expect("copy tests");
    nodewright_docs::tools::promtool_in(
        dir.path(),
        &[
            &["check", "rules", "upstream-compat.rules.yaml"],
            &["test", "rules", "upstream-compat.test.yaml"],
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn every_upstream_gauge_is_recorded_from_ours() {
    let rules = rules();
    let recorded: BTreeSet<&str> = rules.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        recorded.len(),
        rules.len(),
        "a record name twice: {rules:?}"
    );
    let upstream: BTreeSet<&str> = UPSTREAM.iter().map(|(n, _)| *n).collect();
    let missing: Vec<_> = upstream.difference(&recorded).collect();
    let extra: Vec<_> = recorded.difference(&upstream).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "not recorded: {missing:?}; not upstream gauges: {extra:?}"
    );

    let families = nodewright_docs::catalogue::families().unwrap_or_else(|e| panic!("{e}"));
    let exported: BTreeMap<&str, &nodewright_docs::catalogue::Family> =
        families.iter().map(|f| (f.name.as_str(), f)).collect();
    let tests = std::fs::read_to_string(path(TESTS)).expect("the unit tests");
    let mut problems = Vec::new();
    for (record, expr) in &rules {
        let ours = record.replacen("skyhook_", "nodewright_", 1);
        // Each rule reads exactly the NodeWright gauge of the same name.
        match nodewright_docs::promql::metric_names(expr) {
            Ok(names) if names == BTreeSet::from([ours.clone()]) => {}
            Ok(names) => problems.push(format!("{record}: reads {names:?}, not {ours}")),
            Err(e) => problems.push(format!("{record}: does not parse ({e})")),
        }
        // That gauge exists, with upstream's labels but `nodewright_name` for `skyhook_name`.
        let want: Vec<String> = UPSTREAM
            .iter()
            .find(|(n, _)| n == record)
            .map(|(_, labels)| labels.iter().map(|l| l.replace("skyhook_", "nodewright_")))
            .into_iter()
            .flatten()
            .collect();
        match exported.get(ours.as_str()) {
            None => problems.push(format!("{record}: the operator exports no {ours}")),
            Some(f) if f.kind != "gauge" => {
                problems.push(format!("{record}: {ours} is a {}, not a gauge", f.kind))
            }
            Some(f) if f.labels != want => problems.push(format!(
                "{record}: {ours} has labels {:?}, upstream's map to {want:?}",
                f.labels
            )),
            Some(_) => {}
        }
        // And the unit tests evaluate the recorded series.
        if !tests.contains(&format!("- expr: {record}\n")) {
            problems.push(format!(
                "{record}: no promql_expr_test evaluates it in {TESTS}"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // The metrics reference tells upstream users about the file.
    let page = nodewright_docs::metrics_doc::render(&families);
    for wanted in [
        "## Coming from upstream (Skyhook) dashboards",
        &format!("(../../{RULES})"),
    ] {
        assert!(
            page.contains(wanted),
            "the metrics reference lacks {wanted:?}"
        );
    }
}
