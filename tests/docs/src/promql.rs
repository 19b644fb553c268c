//! The metric names a PromQL expression selects, from a real parse (promql-parser), after the
//! Grafana variables are replaced by values Prometheus accepts: what the dashboard and alert lints
//! compare with the names the code exports.

use std::collections::BTreeSet;

use promql_parser::parser::{self, Expr};
use promql_parser::util::{ExprVisitor, walk_expr};

/// Grafana's built-in and the dashboard's own variables, with what they stand for when a query is
/// checked or run outside Grafana.
pub const VARIABLES: &[(&str, &str)] = &[
    ("$__rate_interval", "1m"),
    ("$__interval", "30s"),
    ("$__range", "1h"),
    ("${datasource}", ""),
    ("$nodewright", ".*"),
    ("$operator_job", ".*"),
    ("$webhook_job", ".*"),
];

/// `expr` with the dashboard variables replaced.
pub fn substitute(expr: &str) -> String {
    let mut out = expr.to_owned();
    for (var, value) in VARIABLES {
        out = out.replace(var, value);
    }
    out
}

struct Names(BTreeSet<String>);

impl ExprVisitor for Names {
    type Error = String;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, String> {
        let selector = match expr {
            Expr::VectorSelector(vs) => Some(vs),
            Expr::MatrixSelector(ms) => Some(&ms.vs),
            _ => None,
        };
        if let Some(vs) = selector {
            match &vs.name {
                Some(name) => {
                    self.0.insert(name.clone());
                }
                None => {
                    return Err(format!(
                        "a selector without a metric name ({vs}): name the metric"
                    ));
                }
            }
        }
        Ok(true)
    }
}

/// The metric names `expr` selects (variables substituted first), or the parse error.
pub fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    let parsed = parser::parse(&substitute(expr))?;
    let mut names = Names(BTreeSet::new());
    walk_expr(&mut names, &parsed)?;
    Ok(names.0)
}

/// The metric a Grafana `label_values(metric, label)` variable query reads.
pub fn label_values_metric(query: &str) -> Option<&str> {
    let inner = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    let (metric, _label) = inner.split_once(',')?;
    Some(metric.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_every_selector() {
        let names = metric_names(
            r#"histogram_quantile(0.95, sum by (le) (rate(a_bucket{x=~"$nodewright"}[$__rate_interval])))
               / on () group_left sum(b) or vector(0) and c offset 5m"#,
        )
        .expect("parses");
        assert_eq!(
            names,
            ["a_bucket", "b", "c"]
                .map(str::to_owned)
                .into_iter()
                .collect()
        );
        assert!(metric_names("sum(rate(x[5m]").is_err());
        assert!(metric_names(r#"{job="a"}"#).is_err());
        assert_eq!(
            label_values_metric("label_values(nodewright_node_target_count, nodewright_name)"),
            Some("nodewright_node_target_count")
        );
    }
}
