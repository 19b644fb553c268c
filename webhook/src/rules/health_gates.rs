//! Rules for `healthGates` (on a DeploymentPolicy, or on a NodeWright without one): unique names,
//! exactly one kind per gate, a timeout the planner reads as written, a selector that selects, a
//! Prometheus URL the operator can ask. The CRD's CEL carries the kind rule too; the webhook
//! reports every problem at once, naming the field and the fix.

use std::collections::BTreeSet;

use nodewright_shared::api::{HealthGates, MAX_GATE_TIMEOUT_HOURS, MAX_HEALTH_GATES};
use nodewright_shared::duration::GoDuration;

use super::findings::{Findings, child, item};
use super::selector::selector_errors;

/// Checks `gates` at `path` (`spec.healthGates`).
pub fn check(gates: &HealthGates, path: &str, f: &mut Findings) {
    let list = child(path, "gates");
    if gates.gates.len() > MAX_HEALTH_GATES {
        f.error(
            &list,
            format!(
                "{} health gates: at most {MAX_HEALTH_GATES} are allowed; merge checks into fewer gates",
                gates.gates.len()
            ),
        );
    }
    let mut names = BTreeSet::new();
    for (i, gate) in gates.gates.iter().enumerate() {
        let at = item(&list, i);
        let name_path = child(&at, "name");
        if gate.name.trim().is_empty() {
            f.error(
                &name_path,
                "a health gate needs a name (Events and `why` name it)",
            );
        } else if !names.insert(gate.name.as_str()) {
            f.error(
                &name_path,
                format!(
                    "health gate name {:?} is used twice: give every gate a unique name",
                    gate.name
                ),
            );
        }
        let kinds = [
            gate.pods_ready.is_some(),
            gate.node_condition.is_some(),
            gate.no_firing_alert.is_some(),
        ]
        .into_iter()
        .filter(|k| *k)
        .count();
        if kinds != 1 {
            f.error(
                &at,
                format!(
                    "health gate {:?} sets {kinds} kinds: set exactly one of podsReady, nodeCondition or noFiringAlert",
                    gate.name
                ),
            );
        }
        if let Some(text) = &gate.timeout {
            check_timeout(text, &child(&at, "timeout"), f);
        }
        if let Some(p) = &gate.pods_ready {
            let at = child(&at, "podsReady");
            if p.namespace.trim().is_empty() {
                f.error(
                    child(&at, "namespace"),
                    "podsReady needs the namespace of the pods it waits for",
                );
            }
            let selector_path = child(&at, "selector");
            let empty = p
                .selector
                .match_labels
                .as_ref()
                .is_none_or(|m| m.is_empty())
                && p.selector
                    .match_expressions
                    .as_ref()
                    .is_none_or(|e| e.is_empty());
            if empty {
                f.error(
                    &selector_path,
                    "podsReady.selector is empty: it would wait for every pod of the namespace on the node; select the validator's pods, e.g. matchLabels: {app: validator}",
                );
            }
            for e in selector_errors(&p.selector) {
                f.error(
                    &selector_path,
                    format!("podsReady.selector is not valid: {e}"),
                );
            }
            if let Some(min) = p.min.filter(|m| *m < 0) {
                f.error(child(&at, "min"), format!("min is {min}: use 0 or more"));
            }
        }
        if let Some(c) = &gate.node_condition
            && c.type_.trim().is_empty()
        {
            f.error(
                child(&child(&at, "nodeCondition"), "type"),
                "nodeCondition.type is empty: name the condition, e.g. GpuHealthy",
            );
        }
        if let Some(a) = &gate.no_firing_alert {
            let at = child(&at, "noFiringAlert");
            let url = a.prometheus_url.as_str();
            let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
            if !scheme_ok || url.len() <= "https://".len() || url.contains(char::is_whitespace) {
                f.error(
                    child(&at, "prometheusUrl"),
                    format!(
                        "prometheusUrl {url:?} is not an http:// or https:// URL: write the Prometheus server's base URL, e.g. http://prometheus.monitoring:9090"
                    ),
                );
            }
            if a.query.trim().is_empty() {
                f.error(
                    child(&at, "query"),
                    "query is empty: write a PromQL query that returns a series for each reason the node is unhealthy, e.g. ALERTS{alertstate=\"firing\",node=\"$NODE\"}",
                );
            }
        }
    }
}

/// A Go duration above 0 and at most [`MAX_GATE_TIMEOUT_HOURS`].
fn check_timeout(text: &str, path: &str, f: &mut Findings) {
    let most = MAX_GATE_TIMEOUT_HOURS.unsigned_abs() * 3600;
    match GoDuration::parse(text) {
        Err(e) => f.error(path, format!("health gate timeout: {e}")),
        Ok(d) if d.is_negative() || d.as_nanos() == 0 => f.error(
            path,
            format!(
                "health gate timeout {text:?} must be positive: use a duration up to {MAX_GATE_TIMEOUT_HOURS}h, e.g. \"10m\""
            ),
        ),
        Ok(d) if d.to_std().is_some_and(|d| d.as_secs() > most) => f.error(
            path,
            format!(
                "health gate timeout {text:?} is longer than {MAX_GATE_TIMEOUT_HOURS}h: a node waits at its gates at most a week"
            ),
        ),
        Ok(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{AlertGate, HealthGate, NodeConditionGate, PodsReadyGate};
    use serde_json::json;

    fn lines(gates: &HealthGates) -> Vec<String> {
        let mut f = Findings::default();
        check(gates, "spec.healthGates", &mut f);
        f.finish()
            .errors
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    }

    #[test]
    fn good_gates_pass() {
        let gates = HealthGates {
            gates: vec![
                HealthGate {
                    name: "validator".into(),
                    timeout: Some("10m".into()),
                    pods_ready: Some(PodsReadyGate {
                        namespace: "gpu-operator".into(),
                        selector: serde_json::from_value(json!({"matchLabels": {"app": "v"}}))
                            .expect("selector"),
                        min: Some(1),
                    }),
                    ..HealthGate::default()
                },
                HealthGate {
                    name: "healthy".into(),
                    node_condition: Some(NodeConditionGate {
                        type_: "GpuHealthy".into(),
                        status: None,
                    }),
                    ..HealthGate::default()
                },
                HealthGate {
                    name: "alerts".into(),
                    no_firing_alert: Some(AlertGate {
                        prometheus_url: "http://prometheus.monitoring:9090".into(),
                        query: "ALERTS{node=\"$NODE\"}".into(),
                    }),
                    ..HealthGate::default()
                },
            ],
            on_failure: None,
        };
        assert_eq!(lines(&gates), Vec::<String>::new());
    }

    #[test]
    fn every_problem_is_named_with_its_field_and_fix() {
        let gates = HealthGates {
            gates: vec![
                HealthGate {
                    name: "a".into(),
                    timeout: Some("-1m".into()),
                    pods_ready: Some(PodsReadyGate {
                        namespace: String::new(),
                        selector: Default::default(),
                        min: Some(-1),
                    }),
                    ..HealthGate::default()
                },
                HealthGate {
                    name: "a".into(),
                    timeout: Some("10 minutes".into()),
                    no_firing_alert: Some(AlertGate {
                        prometheus_url: "prometheus:9090".into(),
                        query: " ".into(),
                    }),
                    node_condition: Some(NodeConditionGate::default()),
                    ..HealthGate::default()
                },
                HealthGate {
                    name: "c".into(),
                    timeout: Some("200h".into()),
                    ..HealthGate::default()
                },
            ],
            on_failure: None,
        };
        let got = lines(&gates);
        for want in [
            "spec.healthGates.gates[0].timeout: health gate timeout \"-1m\" must be positive",
            "spec.healthGates.gates[0].podsReady.namespace: podsReady needs the namespace",
            "spec.healthGates.gates[0].podsReady.selector: podsReady.selector is empty",
            "spec.healthGates.gates[0].podsReady.min: min is -1: use 0 or more",
            "spec.healthGates.gates[1].name: health gate name \"a\" is used twice",
            "spec.healthGates.gates[1]: health gate \"a\" sets 2 kinds: set exactly one of podsReady, nodeCondition or noFiringAlert",
            "spec.healthGates.gates[1].timeout: health gate timeout: unknown unit",
            "spec.healthGates.gates[1].noFiringAlert.prometheusUrl: prometheusUrl \"prometheus:9090\" is not an http:// or https:// URL",
            "spec.healthGates.gates[1].noFiringAlert.query: query is empty",
            "spec.healthGates.gates[1].nodeCondition.type: nodeCondition.type is empty",
            "spec.healthGates.gates[2]: health gate \"c\" sets 0 kinds",
            "spec.healthGates.gates[2].timeout: health gate timeout \"200h\" is longer than 168h",
        ] {
            assert!(
                got.iter().any(|l| l.starts_with(want)),
                "missing {want:?} in {got:#?}"
            );
        }
    }
}
