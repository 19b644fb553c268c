//! The dashboard and the alerts query only what the code exports: every PromQL expression parses,
//! and every metric it selects is a series one of the services' registries exposes. A renamed or
//! removed metric fails here.

use std::collections::BTreeSet;

use nodewright_docs::{catalogue, dashboard, promql};

fn exported() -> BTreeSet<String> {
    let families = catalogue::families().unwrap_or_else(|e| panic!("{e}"));
    catalogue::series_names(&families)
}

fn check(what: &str, expr: &str, exported: &BTreeSet<String>, problems: &mut Vec<String>) {
    match promql::metric_names(expr) {
        Ok(names) if names.is_empty() => {
            problems.push(format!("{what}: selects no metric: {expr}"))
        }
        Ok(names) => {
            for n in names {
                if !exported.contains(&n) {
                    problems.push(format!("{what}: {n} is not exported by either service"));
                }
            }
        }
        Err(e) => problems.push(format!("{what}: does not parse ({e}): {expr}")),
    }
}

#[test]
fn every_dashboard_query_names_exported_metrics() {
    let exported = exported();
    let text = std::fs::read_to_string(nodewright_docs::repo_dir().join(dashboard::PATH))
        .expect("the dashboard file");
    let json: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let queries = dashboard::queries(&json);
    assert!(queries.len() > 25, "{}", queries.len());
    let mut problems = Vec::new();
    for (title, expr) in &queries {
        check(&format!("panel {title:?}"), expr, &exported, &mut problems);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // The panels the issue asks for.
    let titles: BTreeSet<&str> = queries.iter().map(|(t, _)| t.as_str()).collect();
    for wanted in [
        "Rollout progress per compartment",
        "Node states",
        "Stage duration (p50, p95)",
        "Timed-out stages",
        "Attempts per finished stage",
        "Reconcile errors",
        "API requests by verb",
        "Admission latency (p99)",
        "Denials",
    ] {
        assert!(titles.contains(wanted), "no panel {wanted:?}");
    }
}

#[test]
fn a_renamed_metric_is_caught() {
    let mut exported = exported();
    exported.remove("nodewright_stage_timeouts_total");
    let mut problems = Vec::new();
    check(
        "panel",
        "sum(nodewright_stage_timeouts_total)",
        &exported,
        &mut problems,
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
}

#[test]
fn every_alert_expression_names_exported_metrics() {
    let exported = exported();
    let rules = nodewright_docs::tools::rendered_rules(&[]).unwrap_or_else(|e| panic!("{e}"));
    let mut problems = Vec::new();
    let mut alerts = 0;
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            alerts += 1;
            let name = rule["alert"].as_str().unwrap_or("?");
            let expr = rule["expr"].as_str().expect("expr");
            // `time()` and `vector(0)` select nothing; every alert still names a metric.
            check(&format!("alert {name}"), expr, &exported, &mut problems);
        }
    }
    assert_eq!(alerts, 6);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
