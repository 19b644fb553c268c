//! Health gates on one node (`healthGates`, issue 24 §1): whether the node waits at its gates, the
//! record of that wait on the node ([`keys::gates_key`]), what the operator observed of each gate,
//! and the verdict. Pure: the operator observes (pods, the node read fresh, a Prometheus query) and
//! writes; `why` and `plan` read the record.
//!
//! A node reaches its gates in the pass that finds its packages finished while its recorded status
//! for the NodeWright is not yet `complete`: that write records the wait (`since`) and keeps the
//! node in progress and cordoned. Every later pass observes the gates again; the write that finds
//! them all passed removes the record, releases the cordon and records the node complete, in one
//! patch guarded by the node's resourceVersion, so a node is never uncordoned on an observation
//! older than the node it writes. Past a gate's timeout the node is `erroring` (reason
//! `GateFailed`), a failed node of its batch; it still completes if its gates pass later.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube_core::ResourceExt;
use nodewright_shared::api::{
    DEFAULT_GATE_TIMEOUT, HealthGate, HealthGates, NODE_PLACEHOLDER, Status,
};
use nodewright_shared::duration::GoDuration;
use nodewright_shared::keys;
use serde::{Deserialize, Serialize};

use crate::node::edit::NodeEdit;

/// The reason a node that failed a gate is erroring with (Event reason and `why`).
pub const GATE_FAILED: &str = "GateFailed";
/// How long a gate's observation text may be on the node (a long list of pods is cut).
const MAX_SAW: usize = 400;

/// The wait at the gates, as recorded on the node (JSON in [`keys::gates_key`]).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct GateMark {
    /// When the node's packages finished and the wait began (RFC 3339): the timeouts count from it.
    pub since: String,
    /// The gate the node waits for (the first not passed), if observed yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    /// What the operator saw of that gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saw: Option<String>,
    /// The gate's timeout passed: the node is erroring (`GateFailed`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

impl GateMark {
    /// A new wait beginning at `now`.
    pub fn starting(now: Timestamp) -> Self {
        GateMark {
            since: now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            gate: None,
            saw: None,
            failed: false,
        }
    }

    /// When the wait began; an unreadable record counts from `now` (it is rewritten with it).
    pub fn since_or(&self, now: Timestamp) -> Timestamp {
        self.since.parse().unwrap_or(now)
    }

    /// The record after `verdict` (`None`: the gates passed, the record goes).
    pub fn after(&self, verdict: &Verdict, now: Timestamp) -> Option<GateMark> {
        let since = if self.since.parse::<Timestamp>().is_ok() {
            self.since.clone()
        } else {
            GateMark::starting(now).since
        };
        match verdict {
            Verdict::Passed => None,
            Verdict::Waiting { gate, saw, .. } | Verdict::Failed { gate, saw } => Some(GateMark {
                since,
                gate: Some(gate.clone()),
                saw: Some(saw.clone()),
                failed: matches!(verdict, Verdict::Failed { .. }),
            }),
        }
    }
}

/// The node's record of its wait at `nodewright`'s gates; `None` when there is none. A record
/// that cannot be read counts as a wait that began now (never as passed).
pub fn mark(node: &Node, nodewright: &str) -> Option<GateMark> {
    let text = node.annotations().get(&keys::gates_key(nodewright))?;
    Some(serde_json::from_str(text).unwrap_or_else(|_| GateMark {
        since: String::new(),
        gate: None,
        saw: Some(format!("unreadable record {text:?}")),
        failed: false,
    }))
}

/// Whether the gates in effect have any gate.
pub fn configured(gates: Option<&HealthGates>) -> Option<&HealthGates> {
    gates.filter(|g| !g.gates.is_empty())
}

/// Whether the node, whose packages for `nodewright` are all done (`all_done`), waits at its gates
/// rather than counting complete: gates are configured, and the node already waits (its record),
/// or it has not been recorded complete yet (its packages finished in this rollout).
pub fn at_gates(
    gates: Option<&HealthGates>,
    node: &Node,
    nodewright: &str,
    all_done: bool,
) -> bool {
    if !all_done || configured(gates).is_none() {
        return false;
    }
    mark(node, nodewright).is_some()
        || node
            .annotations()
            .get(&keys::node_status_key(nodewright))
            .map(String::as_str)
            != Some(Status::Complete.as_str())
}

/// Whether the node failed a gate (its record says the timeout passed) while it waits there.
pub fn failed(gates: Option<&HealthGates>, node: &Node, nodewright: &str, all_done: bool) -> bool {
    at_gates(gates, node, nodewright, all_done) && mark(node, nodewright).is_some_and(|m| m.failed)
}

/// Writes `mark` (or removes the record with `None`) in `edit`, when it differs from the node's.
pub fn record(edit: &mut NodeEdit, node: &Node, nodewright: &str, mark: Option<&GateMark>) {
    let key = keys::gates_key(nodewright);
    let current = node.annotations().get(&key);
    match mark {
        None if current.is_some() => edit.remove_annotation(&key),
        None => {}
        Some(m) => {
            let text = serde_json::to_string(m).unwrap_or_default();
            if current != Some(&text) {
                edit.annotate(&key, text);
            }
        }
    }
}

/// What the operator observed of one gate on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// The gate's pods on the node: those Ready, and the others (`namespace/name`).
    Pods {
        /// Ready pods.
        ready: usize,
        /// Pods not Ready (not counting finished ones).
        not_ready: Vec<String>,
    },
    /// The node condition's status (`None`: the node has no such condition).
    Condition(Option<String>),
    /// The series the query returned (each as its labels).
    Series(Vec<String>),
    /// The gate could not be observed (a failed list or query): it does not pass (fail closed).
    Unobservable(String),
}

/// The pods of a pods-Ready gate on the node, as an observation: every pod listed (the caller
/// lists the gate's namespace, selector and node) that has not finished counts.
pub fn observe_pods(pods: &[Pod]) -> Observation {
    let mut ready = 0;
    let mut not_ready = Vec::new();
    for pod in pods {
        let status = pod.status.as_ref();
        if matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ) {
            continue;
        }
        let is_ready = pod.metadata.deletion_timestamp.is_none()
            && status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if is_ready {
            ready += 1;
        } else {
            not_ready.push(format!(
                "{}/{}",
                pod.namespace().unwrap_or_default(),
                pod.name_any()
            ));
        }
    }
    not_ready.sort();
    Observation::Pods { ready, not_ready }
}

/// The node condition of a node-condition gate, as an observation.
pub fn observe_condition(node: &Node, type_: &str) -> Observation {
    Observation::Condition(
        node.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
            .map(|c| c.status.clone()),
    )
}

/// A no-firing-alert gate's query for `node`: `$NODE` replaced by the node's name, quoted for a
/// PromQL string (node names are DNS names; the escaping only keeps a hand-made name harmless).
pub fn query_for(query: &str, node: &str) -> String {
    let escaped = node.replace('\\', "\\\\").replace('"', "\\\"");
    query.replace(NODE_PLACEHOLDER, &escaped)
}

/// A Prometheus `/api/v1/query` answer as an observation: the series of a vector or matrix result,
/// a non-zero scalar, or the error the server reported.
pub fn observe_query_answer(body: &[u8]) -> Observation {
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return Observation::Unobservable(format!("the answer is not JSON: {e}")),
    };
    if value.get("status").and_then(|s| s.as_str()) != Some("success") {
        let error = value
            .get("error")
            .and_then(|e| e.as_str())
            .unwrap_or("no error message");
        return Observation::Unobservable(format!("the query failed: {error}"));
    }
    let data = &value["data"];
    match data.get("resultType").and_then(|t| t.as_str()) {
        Some("vector" | "matrix") => Observation::Series(
            data["result"]
                .as_array()
                .map(|series| {
                    series
                        .iter()
                        .map(|s| series_name(&s["metric"]))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        ),
        Some("scalar") => {
            let v = data["result"][1].as_str().unwrap_or("0");
            if v.parse::<f64>().is_ok_and(|x| x != 0.0) {
                Observation::Series(vec![format!("scalar {v}")])
            } else {
                Observation::Series(Vec::new())
            }
        }
        other => Observation::Unobservable(format!("unexpected result type {other:?}")),
    }
}

/// A series as PromQL prints it: `name{label="value", ...}`.
fn series_name(metric: &serde_json::Value) -> String {
    let Some(labels) = metric.as_object() else {
        return "{}".to_owned();
    };
    let name = labels
        .get("__name__")
        .and_then(|n| n.as_str())
        .unwrap_or_default();
    let rest: Vec<String> = labels
        .iter()
        .filter(|(k, _)| *k != "__name__")
        .map(|(k, v)| format!("{k}={:?}", v.as_str().unwrap_or_default()))
        .collect();
    format!("{name}{{{}}}", rest.join(", "))
}

/// Whether `observation` passes `gate`; `Err` says what was seen instead.
pub fn check(gate: &HealthGate, observation: &Observation) -> Result<(), String> {
    match (observation, gate) {
        (Observation::Unobservable(why), _) => Err(why.clone()),
        (
            Observation::Pods { ready, not_ready },
            HealthGate {
                pods_ready: Some(p),
                ..
            },
        ) => {
            let min = usize::try_from(p.min.unwrap_or(1)).unwrap_or(0);
            if not_ready.is_empty() && *ready >= min {
                return Ok(());
            }
            let mut saw = format!(
                "{ready} of {} pods Ready in namespace {} (at least {min} wanted)",
                ready + not_ready.len(),
                p.namespace
            );
            if !not_ready.is_empty() {
                saw.push_str(&format!("; not Ready: {}", not_ready.join(", ")));
            }
            Err(saw)
        }
        (
            Observation::Condition(status),
            HealthGate {
                node_condition: Some(c),
                ..
            },
        ) => {
            let wanted = c.wanted().as_str();
            match status {
                Some(s) if s == wanted => Ok(()),
                Some(s) => Err(format!("condition {} is {s}, {wanted} wanted", c.type_)),
                None => Err(format!(
                    "the node has no condition {} ({wanted} wanted)",
                    c.type_
                )),
            }
        }
        (
            Observation::Series(series),
            HealthGate {
                no_firing_alert: Some(_),
                ..
            },
        ) => {
            if series.is_empty() {
                return Ok(());
            }
            let shown: Vec<&str> = series.iter().take(3).map(String::as_str).collect();
            let more = series.len().saturating_sub(shown.len());
            let mut saw = format!("{} series returned: {}", series.len(), shown.join(", "));
            if more > 0 {
                saw.push_str(&format!(" (+{more} more)"));
            }
            Err(saw)
        }
        _ => Err("the observation does not fit the gate's kind".to_owned()),
    }
}

/// A gate's timeout: its `timeout`, or [`DEFAULT_GATE_TIMEOUT`]; one admission refused (it cannot
/// be parsed, or is negative) counts as the default.
pub fn timeout(gate: &HealthGate) -> Duration {
    let default = || {
        GoDuration::parse(DEFAULT_GATE_TIMEOUT)
            .ok()
            .and_then(GoDuration::to_std)
            .unwrap_or(Duration::from_secs(600))
    };
    gate.timeout
        .as_deref()
        .and_then(|t| GoDuration::parse(t).ok())
        .and_then(GoDuration::to_std)
        .unwrap_or_else(default)
}

/// The verdict on a node's gates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every gate passed: the node is uncordoned and counted complete.
    Passed,
    /// A gate has not passed yet; its timeout has not passed either.
    Waiting {
        /// The first gate not passed.
        gate: String,
        /// What was seen of it.
        saw: String,
        /// When its timeout passes.
        deadline: Timestamp,
    },
    /// A gate's timeout passed before it did: the node is erroring (`GateFailed`).
    Failed {
        /// That gate.
        gate: String,
        /// What was seen of it.
        saw: String,
    },
}

/// The verdict on `gates` from one observation per gate (in order), for a wait that began at
/// `since`: a gate past its timeout fails the node, else the first gate not passed holds it.
pub fn judge(
    gates: &HealthGates,
    observations: &[Observation],
    since: Timestamp,
    now: Timestamp,
) -> Verdict {
    let mut waiting: Option<Verdict> = None;
    for (gate, observation) in gates.gates.iter().zip(observations) {
        let Err(saw) = check(gate, observation) else {
            continue;
        };
        let saw = cut(saw);
        let deadline = SignedDuration::try_from(timeout(gate))
            .ok()
            .and_then(|d| since.checked_add(d).ok())
            .unwrap_or(Timestamp::MAX);
        if now >= deadline {
            return Verdict::Failed {
                gate: gate.name.clone(),
                saw,
            };
        }
        waiting.get_or_insert(Verdict::Waiting {
            gate: gate.name.clone(),
            saw,
            deadline,
        });
    }
    if observations.len() < gates.gates.len() {
        // A gate without an observation never passes.
        return waiting.unwrap_or_else(|| Verdict::Waiting {
            gate: gates.gates[observations.len()].name.clone(),
            saw: "not observed".to_owned(),
            deadline: Timestamp::MAX,
        });
    }
    waiting.unwrap_or(Verdict::Passed)
}

/// `saw` cut to [`MAX_SAW`] characters.
fn cut(saw: String) -> String {
    if saw.chars().count() <= MAX_SAW {
        return saw;
    }
    let mut short: String = saw.chars().take(MAX_SAW).collect();
    short.push('…');
    short
}

/// One line for `why`, Events and logs: which gate the node waits for and what was seen.
pub fn describe(mark: &GateMark) -> String {
    let gate = mark.gate.as_deref().unwrap_or("(not observed yet)");
    let saw = mark.saw.as_deref().unwrap_or("nothing yet");
    if mark.failed {
        format!(
            "health gate {gate} failed (waiting since {}): {saw}",
            mark.since
        )
    } else {
        format!("waiting for health gate {gate} since {}: {saw}", mark.since)
    }
}

/// The gates in effect, one line each, for `plan`: what each checks and its timeout, then what a
/// failure does.
pub fn describe_gates(gates: Option<&HealthGates>) -> Vec<String> {
    let Some(gates) = configured(gates) else {
        return Vec::new();
    };
    let mut lines: Vec<String> = gates
        .gates
        .iter()
        .map(|g| {
            let what = if let Some(p) = &g.pods_ready {
                let selector = kube_core::Selector::try_from(p.selector.clone())
                    .map(|s| s.to_string())
                    .unwrap_or_else(|e| format!("(invalid selector: {e})"));
                format!(
                    "pods {selector} in namespace {} Ready on the node (at least {})",
                    p.namespace,
                    p.min.unwrap_or(1)
                )
            } else if let Some(c) = &g.node_condition {
                format!("node condition {} {}", c.type_, c.wanted().as_str())
            } else if let Some(a) = &g.no_firing_alert {
                format!("no series from {} at {}", a.query, a.prometheus_url)
            } else {
                "nothing (no kind set)".to_owned()
            };
            let timeout = g.timeout.as_deref().unwrap_or(DEFAULT_GATE_TIMEOUT);
            format!("{}: {what}, timeout {timeout}", g.name)
        })
        .collect();
    lines.push(if gates.uncordons_on_failure() {
        "a node that fails a gate is uncordoned (onFailure: Uncordon) and counts as failed"
            .to_owned()
    } else {
        "a node that fails a gate stays cordoned and counts as failed".to_owned()
    });
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{AlertGate, ConditionStatus, NodeConditionGate, PodsReadyGate};
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn pods_gate(min: Option<i32>) -> HealthGate {
        HealthGate {
            name: "validator".into(),
            timeout: Some("5m".into()),
            pods_ready: Some(PodsReadyGate {
                namespace: "gpu".into(),
                selector: serde_json::from_value(json!({"matchLabels": {"app": "v"}}))
                    .expect("selector"),
                min,
            }),
            ..HealthGate::default()
        }
    }

    fn condition_gate(status: Option<ConditionStatus>) -> HealthGate {
        HealthGate {
            name: "gpu-healthy".into(),
            timeout: Some("1m".into()),
            node_condition: Some(NodeConditionGate {
                type_: "GpuHealthy".into(),
                status,
            }),
            ..HealthGate::default()
        }
    }

    fn pod(name: &str, phase: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "gpu"},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]}
        }))
        .expect("pod")
    }

    #[test]
    fn pods_must_all_be_ready_and_at_least_min() {
        let gate = pods_gate(None);
        let none = observe_pods(&[]);
        assert_eq!(
            check(&gate, &none),
            Err("0 of 0 pods Ready in namespace gpu (at least 1 wanted)".into())
        );
        assert_eq!(check(&pods_gate(Some(0)), &none), Ok(()));
        let mixed = observe_pods(&[
            pod("a", "Running", true),
            pod("b", "Running", false),
            pod("old", "Succeeded", false),
        ]);
        assert_eq!(
            check(&gate, &mixed),
            Err("1 of 2 pods Ready in namespace gpu (at least 1 wanted); not Ready: gpu/b".into())
        );
        assert_eq!(
            check(&gate, &observe_pods(&[pod("a", "Running", true)])),
            Ok(())
        );
        assert!(
            check(
                &pods_gate(Some(2)),
                &observe_pods(&[pod("a", "Running", true)])
            )
            .is_err()
        );
    }

    #[test]
    fn a_condition_must_have_the_wanted_status_and_a_missing_one_waits() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "GpuHealthy", "status": "False"}]}
        }))
        .expect("node");
        let seen = observe_condition(&node, "GpuHealthy");
        assert_eq!(
            check(&condition_gate(None), &seen),
            Err("condition GpuHealthy is False, True wanted".into())
        );
        assert_eq!(
            check(&condition_gate(Some(ConditionStatus::False)), &seen),
            Ok(())
        );
        assert_eq!(
            check(&condition_gate(None), &observe_condition(&node, "Other")),
            Err("the node has no condition GpuHealthy (True wanted)".into())
        );
    }

    #[test]
    fn prometheus_answers_become_series_and_failures_fail_closed() {
        let gate = HealthGate {
            name: "alerts".into(),
            no_firing_alert: Some(AlertGate {
                prometheus_url: "http://p".into(),
                query: "ALERTS{node=\"$NODE\"}".into(),
            }),
            ..HealthGate::default()
        };
        let firing = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"__name__":"ALERTS","alertname":"GpuXid","node":"n1"},"value":[1,"1"]}]}}"#;
        assert_eq!(
            check(&gate, &observe_query_answer(firing)),
            Err("1 series returned: ALERTS{alertname=\"GpuXid\", node=\"n1\"}".into())
        );
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(check(&gate, &observe_query_answer(empty)), Ok(()));
        let bad = br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        assert_eq!(
            check(&gate, &observe_query_answer(bad)),
            Err("the query failed: parse error".into())
        );
        assert!(check(&gate, &observe_query_answer(b"<html>")).is_err());
        assert_eq!(
            query_for("ALERTS{node=\"$NODE\"}", "gpu-1"),
            "ALERTS{node=\"gpu-1\"}"
        );
        assert_eq!(
            query_for("up{node=\"$NODE\"}", "a\"b"),
            "up{node=\"a\\\"b\"}"
        );
    }

    #[test]
    fn a_gate_past_its_timeout_fails_the_node_and_the_first_open_gate_holds_it() {
        let gates = HealthGates {
            gates: vec![pods_gate(None), condition_gate(None)],
            on_failure: None,
        };
        let since = at("2026-12-04T10:00:00Z");
        let no_pods = observe_pods(&[]);
        let healthy = Observation::Condition(Some("True".into()));
        let sick = Observation::Condition(Some("False".into()));
        assert_eq!(
            judge(
                &gates,
                &[observe_pods(&[pod("a", "Running", true)]), healthy.clone()],
                since,
                at("2026-12-04T10:00:01Z")
            ),
            Verdict::Passed
        );
        let verdict = judge(
            &gates,
            &[no_pods.clone(), healthy.clone()],
            since,
            at("2026-12-04T10:01:00Z"),
        );
        assert!(
            matches!(verdict, Verdict::Waiting { ref gate, deadline, .. }
            if gate == "validator" && deadline == at("2026-12-04T10:05:00Z")),
            "{verdict:?}"
        );
        // The condition gate's 1m passed while the pods gate (5m) still waits: the node fails.
        let verdict = judge(
            &gates,
            &[no_pods.clone(), sick],
            since,
            at("2026-12-04T10:01:00Z"),
        );
        assert!(
            matches!(verdict, Verdict::Failed { ref gate, .. } if gate == "gpu-healthy"),
            "{verdict:?}"
        );
        let verdict = judge(
            &gates,
            &[no_pods, healthy],
            since,
            at("2026-12-04T10:05:00Z"),
        );
        assert!(
            matches!(verdict, Verdict::Failed { ref gate, .. } if gate == "validator"),
            "{verdict:?}"
        );
        // Too few observations never pass.
        assert!(matches!(
            judge(&gates, &[], since, since),
            Verdict::Waiting { .. }
        ));
    }

    #[test]
    fn a_node_waits_at_its_gates_from_the_pass_its_packages_finish_until_they_pass() {
        use crate::testing::node_with;
        let gates = HealthGates {
            gates: vec![condition_gate(None)],
            on_failure: None,
        };
        let status = keys::node_status_key("nw");
        let in_progress = node_with(true, &[(&status, "in_progress")]);
        assert!(at_gates(Some(&gates), &in_progress, "nw", true));
        assert!(
            !at_gates(Some(&gates), &in_progress, "nw", false),
            "packages still run"
        );
        assert!(!at_gates(None, &in_progress, "nw", true), "no gates");
        assert!(!at_gates(
            Some(&HealthGates::default()),
            &in_progress,
            "nw",
            true
        ));
        let complete = node_with(false, &[(&status, "complete")]);
        assert!(
            !at_gates(Some(&gates), &complete, "nw", true),
            "already counted complete"
        );
        let now = at("2026-12-04T10:00:00Z");
        let failed = GateMark {
            failed: true,
            ..GateMark::starting(now)
        };
        let text = serde_json::to_string(&failed).expect("json");
        let held = node_with(
            true,
            &[(&status, "erroring"), (&keys::gates_key("nw"), &text)],
        );
        assert!(failed_at(&gates, &held));
        assert_eq!(mark(&held, "nw"), Some(failed.clone()));
        // The record is written only when it changes, and removed once passed.
        let mut edit = NodeEdit::default();
        record(&mut edit, &held, "nw", Some(&failed));
        assert_eq!(edit, NodeEdit::default());
        record(&mut edit, &held, "nw", None);
        assert_eq!(edit.annotations.get(&keys::gates_key("nw")), Some(&None));
        // An unreadable record is a wait that restarts now, never a pass.
        let garbled = node_with(true, &[(&keys::gates_key("nw"), "{")]);
        let m = mark(&garbled, "nw").expect("a record");
        assert_eq!(m.since_or(now), now);
        let verdict = Verdict::Waiting {
            gate: "g".into(),
            saw: "s".into(),
            deadline: now,
        };
        assert_eq!(
            m.after(&verdict, now).map(|m| m.since),
            Some("2026-12-04T10:00:00Z".into())
        );
    }

    fn failed_at(gates: &HealthGates, node: &Node) -> bool {
        failed(Some(gates), node, "nw", true)
    }
}
