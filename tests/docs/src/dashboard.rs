//! The Grafana dashboard (chart/files/dashboards/nodewright.json), generated from the panel list
//! below so its layout, datasource wiring and variables are uniform; a test fails when the file is
//! stale, another when a query names a metric the code does not export.
//!
//! Every query is written to return data whenever the services run (an error or timeout panel
//! falls back to 0 rather than to no data), so the panel check against a real Prometheus
//! (`tests/docs/panels.sh`) can require a result from each.

use serde_json::{Value, json};

/// Path of the generated dashboard, from the repository root.
pub const PATH: &str = "chart/files/dashboards/nodewright.json";

/// One query of a panel.
#[derive(Debug, Clone)]
pub struct Query {
    /// PromQL, with the dashboard's variables.
    pub expr: &'static str,
    /// Legend.
    pub legend: &'static str,
}

/// How a panel shows its queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Lines over time.
    Series,
    /// One big number (the last value).
    Stat,
    /// Bars, one per series (the last value).
    Bars,
}

/// One panel.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Title.
    pub title: &'static str,
    /// What it shows and what to do about it.
    pub description: &'static str,
    /// Presentation.
    pub kind: Kind,
    /// Grafana unit (`short`, `s`, `bytes`, `percent`, `reqps`...).
    pub unit: &'static str,
    /// Width in grid columns (of 24).
    pub width: u32,
    /// The queries.
    pub queries: Vec<Query>,
}

fn q(expr: &'static str, legend: &'static str) -> Query {
    Query { expr, legend }
}

fn panel(
    title: &'static str,
    description: &'static str,
    kind: Kind,
    unit: &'static str,
    width: u32,
    queries: Vec<Query>,
) -> Panel {
    Panel {
        title,
        description,
        kind,
        unit,
        width,
        queries,
    }
}

/// The dashboard's rows and their panels.
pub fn rows() -> Vec<(&'static str, Vec<Panel>)> {
    use Kind::*;
    vec![
        (
            "Rollout",
            vec![
                panel(
                    "NodeWrights by status",
                    "How many NodeWrights are in each status (complete, in_progress, erroring, blocked, waiting, paused, disabled).",
                    Bars,
                    "short",
                    6,
                    vec![q(
                        r#"sum by (status) (nodewright_status{nodewright_name=~"$nodewright"})"#,
                        "{{status}}",
                    )],
                ),
                panel(
                    "Rollout progress per compartment",
                    "Complete nodes of each compartment in percent (status.compartmentStatuses).",
                    Series,
                    "percent",
                    9,
                    vec![q(
                        r#"max by (nodewright_name, compartment_name) (nodewright_rollout_progress_percent{nodewright_name=~"$nodewright"})"#,
                        "{{nodewright_name}} / {{compartment_name}}",
                    )],
                ),
                panel(
                    "Nodes in progress and the budget ceiling",
                    "Nodes of each compartment in progress, against the most its budget allows at once.",
                    Series,
                    "short",
                    9,
                    vec![
                        q(
                            r#"max by (nodewright_name, compartment_name) (nodewright_rollout_in_progress{nodewright_name=~"$nodewright"})"#,
                            "in progress {{nodewright_name}} / {{compartment_name}}",
                        ),
                        q(
                            r#"max by (nodewright_name, compartment_name) (nodewright_rollout_ceiling{nodewright_name=~"$nodewright"})"#,
                            "ceiling {{nodewright_name}} / {{compartment_name}}",
                        ),
                    ],
                ),
                panel(
                    "Batches",
                    "The batch being rolled out, the size of the last one and failed batches in a row (a strategy stops its compartment at the failure threshold: should_stop).",
                    Series,
                    "short",
                    12,
                    vec![
                        q(
                            r#"max by (nodewright_name, compartment_name) (nodewright_rollout_current_batch{nodewright_name=~"$nodewright"})"#,
                            "batch {{nodewright_name}} / {{compartment_name}}",
                        ),
                        q(
                            r#"max by (nodewright_name, compartment_name) (nodewright_rollout_last_batch_size{nodewright_name=~"$nodewright"})"#,
                            "last batch size {{nodewright_name}} / {{compartment_name}}",
                        ),
                        q(
                            r#"max by (nodewright_name, compartment_name) (nodewright_rollout_consecutive_failures{nodewright_name=~"$nodewright"})"#,
                            "failed batches {{nodewright_name}} / {{compartment_name}}",
                        ),
                        q(
                            r#"max by (nodewright_name, compartment_name) (nodewright_rollout_should_stop{nodewright_name=~"$nodewright"})"#,
                            "stopped {{nodewright_name}} / {{compartment_name}}",
                        ),
                    ],
                ),
                panel(
                    "Nodes of the last batch",
                    "Complete and erroring nodes when the compartment's last batch was evaluated.",
                    Series,
                    "short",
                    12,
                    vec![
                        q(
                            r#"max by (nodewright_name, compartment_name) (nodewright_rollout_batch_completed_nodes{nodewright_name=~"$nodewright"})"#,
                            "complete {{nodewright_name}} / {{compartment_name}}",
                        ),
                        q(
                            r#"max by (nodewright_name, compartment_name) (nodewright_rollout_batch_failed_nodes{nodewright_name=~"$nodewright"})"#,
                            "erroring {{nodewright_name}} / {{compartment_name}}",
                        ),
                    ],
                ),
            ],
        ),
        (
            "Nodes and packages",
            vec![
                panel(
                    "Node states",
                    "Nodes per node status and NodeWright. Erroring nodes are listed in the Ready condition's message (kubectl describe nw).",
                    Series,
                    "short",
                    8,
                    vec![q(
                        r#"sum by (nodewright_name, status) (nodewright_node_status_count{nodewright_name=~"$nodewright"})"#,
                        "{{nodewright_name}} {{status}}",
                    )],
                ),
                panel(
                    "Package states",
                    "Nodes whose record of each package version is in each state.",
                    Series,
                    "short",
                    8,
                    vec![q(
                        r#"sum by (package_name, package_version, state) (nodewright_package_state_count{nodewright_name=~"$nodewright"})"#,
                        "{{package_name}}:{{package_version}} {{state}}",
                    )],
                ),
                panel(
                    "Failed attempts per package",
                    "Failed attempts recorded in node state (restarts), summed over the nodes.",
                    Series,
                    "short",
                    8,
                    vec![q(
                        r#"sum by (package_name, package_version) (nodewright_package_restarts_count{nodewright_name=~"$nodewright"})"#,
                        "{{package_name}}:{{package_version}}",
                    )],
                ),
            ],
        ),
        (
            "Stages",
            vec![
                panel(
                    "Stage duration (p50, p95)",
                    "From a stage Job's creation to its outcome, retries included, by stage.",
                    Series,
                    "s",
                    12,
                    vec![
                        q(
                            r#"histogram_quantile(0.5, sum by (le, stage) (rate(nodewright_stage_duration_seconds_bucket{nodewright_name=~"$nodewright"}[$__rate_interval])))"#,
                            "p50 {{stage}}",
                        ),
                        q(
                            r#"histogram_quantile(0.95, sum by (le, stage) (rate(nodewright_stage_duration_seconds_bucket{nodewright_name=~"$nodewright"}[$__rate_interval])))"#,
                            "p95 {{stage}}",
                        ),
                    ],
                ),
                panel(
                    "Stages finished",
                    "Stages finished per minute, by result (complete, timed_out).",
                    Series,
                    "short",
                    6,
                    vec![q(
                        r#"sum by (result) (rate(nodewright_stage_duration_seconds_count{nodewright_name=~"$nodewright"}[$__rate_interval])) * 60"#,
                        "{{result}}",
                    )],
                ),
                panel(
                    "Stage Jobs created",
                    "Stage Jobs created per minute, by stage.",
                    Series,
                    "short",
                    6,
                    vec![q(
                        r#"sum by (stage) (rate(nodewright_stage_jobs_created_total{nodewright_name=~"$nodewright"}[$__rate_interval])) * 60"#,
                        "{{stage}}",
                    )],
                ),
                panel(
                    "Timed-out stages",
                    "Stages that timed out, by NodeWright, package and stage (all time). kubectl get events --field-selector reason=StageTimedOut names the nodes; docs/timeouts.md says how they clear.",
                    Bars,
                    "short",
                    12,
                    vec![q(
                        r#"sum by (nodewright_name, package_name, stage) (nodewright_stage_timeouts_total{nodewright_name=~"$nodewright"}) or on () vector(0)"#,
                        "{{nodewright_name}} {{package_name}} {{stage}}",
                    )],
                ),
                panel(
                    "Attempts per finished stage",
                    "Mean attempts a finished stage took, by stage (1 = first try). Disrupted and rejected pods are not attempts.",
                    Series,
                    "short",
                    12,
                    vec![q(
                        r#"sum by (stage) (nodewright_stage_attempts_sum{nodewright_name=~"$nodewright"}) / sum by (stage) (nodewright_stage_attempts_count{nodewright_name=~"$nodewright"})"#,
                        "{{stage}}",
                    )],
                ),
            ],
        ),
        (
            "Operator",
            vec![
                panel(
                    "Leading replicas",
                    "Operator replicas holding the Lease: 1 when healthy (0: nothing rolls out).",
                    Stat,
                    "short",
                    4,
                    vec![q(
                        r#"sum(nodewright_operator_is_leader{job=~"$operator_job"})"#,
                        "leaders",
                    )],
                ),
                panel(
                    "Leader changes",
                    "Leadership gained or lost per replica over the interval; a steady climb means the Lease flaps.",
                    Series,
                    "short",
                    8,
                    vec![q(
                        r#"sum by (instance) (increase(nodewright_operator_leader_transitions_total{job=~"$operator_job"}[$__rate_interval]))"#,
                        "{{instance}}",
                    )],
                ),
                panel(
                    "Reconcile errors",
                    "Share of reconciles that returned an error, by controller (0 when none failed).",
                    Series,
                    "percentunit",
                    12,
                    vec![q(
                        r#"(sum by (controller) (rate(nodewright_reconcile_total{result="error"}[$__rate_interval])) or sum by (controller) (rate(nodewright_reconcile_total[$__rate_interval])) * 0) / sum by (controller) (rate(nodewright_reconcile_total[$__rate_interval]))"#,
                        "{{controller}}",
                    )],
                ),
                panel(
                    "Reconciles",
                    "Reconciles per second, by controller and result.",
                    Series,
                    "ops",
                    8,
                    vec![q(
                        r#"sum by (controller, result) (rate(nodewright_reconcile_total[$__rate_interval]))"#,
                        "{{controller}} {{result}}",
                    )],
                ),
                panel(
                    "API requests by verb",
                    "Requests the operator sends to the kube-apiserver per second, by verb.",
                    Series,
                    "reqps",
                    8,
                    vec![q(
                        r#"sum by (verb) (rate(nodewright_operator_api_requests_total{job=~"$operator_job"}[$__rate_interval]))"#,
                        "{{verb}}",
                    )],
                ),
                panel(
                    "API requests by resource",
                    "Requests per second by resource: a hot loop shows as one climbing line.",
                    Series,
                    "reqps",
                    8,
                    vec![q(
                        r#"sum by (resource) (rate(nodewright_operator_api_requests_total{job=~"$operator_job"}[$__rate_interval]))"#,
                        "{{resource}}",
                    )],
                ),
                panel(
                    "Operator memory",
                    "Resident memory per replica (docs/sizing.md relates it to nodes and packages).",
                    Series,
                    "bytes",
                    12,
                    vec![q(
                        r#"process_resident_memory_bytes{job=~"$operator_job"}"#,
                        "{{instance}}",
                    )],
                ),
                panel(
                    "Operator CPU and file descriptors",
                    "CPU cores used per replica, and open file descriptors as a share of the limit.",
                    Series,
                    "short",
                    12,
                    vec![
                        q(
                            r#"rate(process_cpu_seconds_total{job=~"$operator_job"}[$__rate_interval])"#,
                            "cpu {{instance}}",
                        ),
                        q(
                            r#"process_open_fds{job=~"$operator_job"} / process_max_fds{job=~"$operator_job"}"#,
                            "fds used {{instance}}",
                        ),
                    ],
                ),
            ],
        ),
        (
            "Webhook",
            vec![
                panel(
                    "Admission requests",
                    "Admission requests per second, by webhook and result (allowed, patched, denied, error).",
                    Series,
                    "reqps",
                    8,
                    vec![q(
                        r#"sum by (webhook, result) (rate(nodewright_webhook_requests_total{job=~"$webhook_job"}[$__rate_interval]))"#,
                        "{{webhook}} {{result}}",
                    )],
                ),
                panel(
                    "Denials",
                    "Denied admission requests per second, by webhook (0 when nothing was denied).",
                    Series,
                    "reqps",
                    8,
                    vec![q(
                        r#"sum by (webhook) (rate(nodewright_webhook_requests_total{job=~"$webhook_job", result="denied"}[$__rate_interval])) or sum by (webhook) (rate(nodewright_webhook_requests_total{job=~"$webhook_job"}[$__rate_interval])) * 0"#,
                        "{{webhook}}",
                    )],
                ),
                panel(
                    "Admission latency (p99)",
                    "Time to answer an admission request, by webhook; the apiserver gives up at timeoutSeconds.",
                    Series,
                    "s",
                    8,
                    vec![q(
                        r#"histogram_quantile(0.99, sum by (le, webhook) (rate(nodewright_webhook_request_duration_seconds_bucket{job=~"$webhook_job"}[$__rate_interval])))"#,
                        "{{webhook}}",
                    )],
                ),
                panel(
                    "Certificate expires in",
                    "Time until the earliest-expiring serving certificate among the replicas expires.",
                    Stat,
                    "s",
                    6,
                    vec![q(
                        r#"min(nodewright_webhook_certificate_expiry_timestamp_seconds{job=~"$webhook_job"}) - time()"#,
                        "expires in",
                    )],
                ),
                panel(
                    "Certificates loaded",
                    "Serving certificates loaded per replica since it started (each renewal adds one).",
                    Stat,
                    "short",
                    6,
                    vec![q(
                        r#"max(nodewright_webhook_certificate_loads{job=~"$webhook_job"})"#,
                        "loads",
                    )],
                ),
                panel(
                    "Webhook memory and CPU",
                    "Resident memory and CPU cores per replica.",
                    Series,
                    "short",
                    12,
                    vec![
                        q(
                            r#"process_resident_memory_bytes{job=~"$webhook_job"} / 1048576"#,
                            "MiB {{instance}}",
                        ),
                        q(
                            r#"rate(process_cpu_seconds_total{job=~"$webhook_job"}[$__rate_interval])"#,
                            "cpu {{instance}}",
                        ),
                    ],
                ),
            ],
        ),
    ]
}

/// The dashboard's template variables: data source, NodeWrights, and the jobs of both services.
fn variables() -> Value {
    let query = |name: &str, label: &str, q: &str, multi: bool| {
        json!({
            "name": name,
            "label": label,
            "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "definition": q,
            "query": {"query": q, "refId": name},
            "refresh": 2,
            "includeAll": true,
            "multi": multi,
            "allValue": ".*",
            "current": {"text": "All", "value": "$__all"},
            "sort": 1
        })
    };
    json!([
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"},
        query("nodewright", "NodeWright", "label_values(nodewright_node_target_count, nodewright_name)", true),
        query("operator_job", "Operator job", "label_values(nodewright_operator_is_leader, job)", false),
        query("webhook_job", "Webhook job", "label_values(nodewright_webhook_certificate_loads, job)", false),
    ])
}

fn panel_json(id: u32, p: &Panel, x: u32, y: u32, height: u32) -> Value {
    let datasource = json!({"type": "prometheus", "uid": "${datasource}"});
    let targets: Vec<Value> = p
        .queries
        .iter()
        .enumerate()
        .map(|(i, query)| {
            json!({
                "refId": ((b'A' + u8::try_from(i).unwrap_or(25)) as char).to_string(),
                "datasource": datasource,
                "expr": query.expr,
                "legendFormat": query.legend,
                "instant": p.kind != Kind::Series,
                "range": p.kind == Kind::Series,
            })
        })
        .collect();
    let (kind, options) = match p.kind {
        Kind::Series => (
            "timeseries",
            json!({"legend": {"displayMode": "table", "placement": "bottom", "showLegend": true},
                   "tooltip": {"mode": "multi", "sort": "desc"}}),
        ),
        Kind::Stat => (
            "stat",
            json!({"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": false},
                   "colorMode": "value", "graphMode": "none", "textMode": "auto"}),
        ),
        Kind::Bars => (
            "bargauge",
            json!({"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": false},
                   "displayMode": "basic", "orientation": "horizontal", "showUnfilled": true}),
        ),
    };
    json!({
        "id": id,
        "type": kind,
        "title": p.title,
        "description": p.description,
        "datasource": datasource,
        "gridPos": {"h": height, "w": p.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
        "options": options,
        "targets": targets,
    })
}

/// The dashboard as Grafana's JSON model.
pub fn dashboard() -> Value {
    let mut panels = Vec::new();
    let (mut id, mut y) = (1u32, 0u32);
    for (row, row_panels) in rows() {
        panels.push(json!({
            "id": id, "type": "row", "title": row, "collapsed": false,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []
        }));
        id += 1;
        y += 1;
        let mut x = 0;
        for p in &row_panels {
            let height = if p.kind == Kind::Stat { 5 } else { 8 };
            if x + p.width > 24 {
                x = 0;
                y += 8;
            }
            panels.push(panel_json(id, p, x, y, height));
            id += 1;
            x += p.width;
        }
        y += 8;
    }
    json!({
        "title": "NodeWright",
        "uid": "nodewright-overview",
        "description": "Rollouts, node and package states, stage durations and timeouts, the operator's reconciles and API load, and the admission webhook. Generated by tests/docs (docgen); edit tests/docs/src/dashboard.rs, not this file.",
        "tags": ["nodewright", "kubernetes"],
        "editable": true,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "",
        "templating": {"list": variables()},
        "annotations": {"list": []},
        "links": [],
        "panels": panels,
    })
}

/// The generated file's text.
pub fn render() -> String {
    let mut text = serde_json::to_string_pretty(&dashboard()).unwrap_or_default();
    text.push('\n');
    text
}

/// Every (panel title, query) of a dashboard JSON, rows' nested panels included, and the
/// `label_values` metric of each query variable as `(variable name, metric)` pseudo-queries.
pub fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("?").to_owned();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push((title.clone(), expr.to_owned()));
                }
            }
            walk(&p["panels"], out);
        }
    }
    walk(&dashboard["panels"], &mut out);
    for v in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(query) = v["query"]["query"].as_str()
            && let Some(metric) = crate::promql::label_values_metric(query)
        {
            out.push((
                format!("variable {}", v["name"].as_str().unwrap_or("?")),
                metric.to_owned(),
            ));
        }
    }
    out
}
