//! The per-NodeWright gauges and the reconcile counters (upstream-operator.md §6.6, renamed
//! `skyhook_*` → `nodewright_*` and `skyhook_name` → `nodewright_name`):
//!
//! - `nodewright_status{nodewright_name,status}`: 1 for the NodeWright's status, 0 for the others;
//! - `nodewright_node_status_count{nodewright_name,status}`: nodes per node status (all statuses);
//! - `nodewright_node_target_count{nodewright_name}`: selected nodes;
//! - `nodewright_package_state_count{…,package_name,package_version,state}` and
//!   `nodewright_package_stage_count{…,stage}`: nodes whose record of the package's current version
//!   is in that state / stage (summed over stages, unlike upstream which overwrote per pair);
//! - `nodewright_package_restarts_count{…}`: failed attempts summed over the nodes;
//! - `nodewright_rollout_*{nodewright_name,policy_name,compartment_name,strategy}`: per compartment
//!   (matched_nodes, ceiling, in_progress, completed, progress_percent, and from the batch state
//!   current_batch, consecutive_failures, should_stop, batch_completed_nodes, batch_failed_nodes,
//!   last_batch_size, last_batch_failed, soaking — 0 without a strategy);
//! - `nodewright_rollout_waiting_for_window{nodewright_name,policy_name}`: 1 while a closed
//!   maintenance window holds nodes back (`status.waitingFor`);
//! - `nodewright_rollout_waiting_for_disruption_cap{nodewright_name,policy_name}`: 1 while the
//!   cluster-wide disruption cap holds a node's cordon back (`status.waitingFor`);
//! - `nodewright_rollout_nodes_at_health_gates{nodewright_name,policy_name}`: nodes waiting at
//!   their health gates, not failed (`status.waitingFor`);
//! - `nodewright_reconcile_total{controller,result}`: reconciles run, by outcome.
//!
//! The values are computed by the pure [`samples`] from the status the rollout reconciler just
//! computed, so metrics and status never disagree. Series a NodeWright no longer has (a package
//! removed, a compartment gone) are removed, and all of its series when it is deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use nodewright_shared::api::{NodeWright, NodeWrightStatus, Status};
use nodewright_shared::node_state::{Stage, State};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::stage_jobs::StageMetrics;

/// Label pairs of one series.
pub type Labels = Vec<(String, String)>;

/// The series written last, per NodeWright.
type Written = BTreeMap<String, BTreeSet<(Gauges, Labels)>>;

const STATUSES: [Status; 8] = [
    Status::Complete,
    Status::InProgress,
    Status::Erroring,
    Status::Blocked,
    Status::Waiting,
    Status::Paused,
    Status::Disabled,
    Status::Unknown,
];

const STATES: [State; 5] = [
    State::Complete,
    State::InProgress,
    State::Skipped,
    State::Erroring,
    State::Unknown,
];

/// The policy label of a NodeWright without a DeploymentPolicy (upstream-api.md §5.10).
pub const LEGACY_POLICY: &str = "legacy";

/// The gauges, by name without the `nodewright_` prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gauges {
    /// `status`.
    Status,
    /// `node_status_count`.
    NodeStatusCount,
    /// `node_target_count`.
    NodeTargetCount,
    /// `package_state_count`.
    PackageStateCount,
    /// `package_stage_count`.
    PackageStageCount,
    /// `package_restarts_count`.
    PackageRestartsCount,
    /// `rollout_matched_nodes`.
    RolloutMatchedNodes,
    /// `rollout_ceiling`.
    RolloutCeiling,
    /// `rollout_in_progress`.
    RolloutInProgress,
    /// `rollout_completed`.
    RolloutCompleted,
    /// `rollout_progress_percent`.
    RolloutProgressPercent,
    /// `rollout_current_batch`.
    RolloutCurrentBatch,
    /// `rollout_consecutive_failures`.
    RolloutConsecutiveFailures,
    /// `rollout_should_stop`.
    RolloutShouldStop,
    /// `rollout_batch_completed_nodes`.
    RolloutBatchCompletedNodes,
    /// `rollout_batch_failed_nodes`.
    RolloutBatchFailedNodes,
    /// `rollout_last_batch_size`.
    RolloutLastBatchSize,
    /// `rollout_last_batch_failed`.
    RolloutLastBatchFailed,
    /// `rollout_waiting_for_window`.
    RolloutWaitingForWindow,
    /// `rollout_soaking`.
    RolloutSoaking,
    /// `rollout_waiting_for_disruption_cap`.
    RolloutWaitingForDisruptionCap,
    /// `rollout_nodes_at_health_gates`.
    RolloutNodesAtHealthGates,
}

impl Gauges {
    const ALL: [Gauges; 22] = [
        Gauges::Status,
        Gauges::NodeStatusCount,
        Gauges::NodeTargetCount,
        Gauges::PackageStateCount,
        Gauges::PackageStageCount,
        Gauges::PackageRestartsCount,
        Gauges::RolloutMatchedNodes,
        Gauges::RolloutCeiling,
        Gauges::RolloutInProgress,
        Gauges::RolloutCompleted,
        Gauges::RolloutProgressPercent,
        Gauges::RolloutCurrentBatch,
        Gauges::RolloutConsecutiveFailures,
        Gauges::RolloutShouldStop,
        Gauges::RolloutBatchCompletedNodes,
        Gauges::RolloutBatchFailedNodes,
        Gauges::RolloutLastBatchSize,
        Gauges::RolloutLastBatchFailed,
        Gauges::RolloutWaitingForWindow,
        Gauges::RolloutSoaking,
        Gauges::RolloutWaitingForDisruptionCap,
        Gauges::RolloutNodesAtHealthGates,
    ];

    /// Every gauge.
    pub fn all() -> [Gauges; 22] {
        Self::ALL
    }

    /// Its name without the `nodewright_` prefix.
    pub fn name(self) -> &'static str {
        self.describe().0
    }

    /// Name (registered with the `nodewright` prefix) and help.
    fn describe(self) -> (&'static str, &'static str) {
        match self {
            Gauges::Status => ("status", "1 for the NodeWright's current status, else 0"),
            Gauges::NodeStatusCount => ("node_status_count", "Nodes per node status"),
            Gauges::NodeTargetCount => ("node_target_count", "Nodes the NodeWright selects"),
            Gauges::PackageStateCount => (
                "package_state_count",
                "Nodes whose record of the package version is in this state",
            ),
            Gauges::PackageStageCount => (
                "package_stage_count",
                "Nodes whose record of the package version is at this stage",
            ),
            Gauges::PackageRestartsCount => (
                "package_restarts_count",
                "Failed attempts of the package version, summed over the nodes",
            ),
            Gauges::RolloutMatchedNodes => ("rollout_matched_nodes", "Nodes in the compartment"),
            Gauges::RolloutCeiling => (
                "rollout_ceiling",
                "Most nodes of the compartment in progress at once",
            ),
            Gauges::RolloutInProgress => (
                "rollout_in_progress",
                "Nodes of the compartment in progress",
            ),
            Gauges::RolloutCompleted => ("rollout_completed", "Complete nodes of the compartment"),
            Gauges::RolloutProgressPercent => (
                "rollout_progress_percent",
                "Complete nodes of the compartment in percent",
            ),
            Gauges::RolloutCurrentBatch => (
                "rollout_current_batch",
                "The compartment's batch being rolled out (0 without a strategy)",
            ),
            Gauges::RolloutConsecutiveFailures => (
                "rollout_consecutive_failures",
                "Failed batches in a row in the compartment",
            ),
            Gauges::RolloutShouldStop => (
                "rollout_should_stop",
                "1 when failed batches stopped the compartment's rollout",
            ),
            Gauges::RolloutBatchCompletedNodes => (
                "rollout_batch_completed_nodes",
                "Complete nodes of the compartment at the last batch evaluation",
            ),
            Gauges::RolloutBatchFailedNodes => (
                "rollout_batch_failed_nodes",
                "Erroring nodes of the compartment at the last batch evaluation",
            ),
            Gauges::RolloutLastBatchSize => (
                "rollout_last_batch_size",
                "Nodes in the compartment's last batch",
            ),
            Gauges::RolloutLastBatchFailed => (
                "rollout_last_batch_failed",
                "1 when the compartment's last batch failed its threshold",
            ),
            Gauges::RolloutWaitingForWindow => (
                "rollout_waiting_for_window",
                "1 while nodes wait for the DeploymentPolicy's next maintenance window",
            ),
            Gauges::RolloutSoaking => (
                "rollout_soaking",
                "1 while the compartment's finished batch soaks before the next starts",
            ),
            Gauges::RolloutWaitingForDisruptionCap => (
                "rollout_waiting_for_disruption_cap",
                "1 while the operator's cluster-wide disruption cap holds a node's cordon back",
            ),
            Gauges::RolloutNodesAtHealthGates => (
                "rollout_nodes_at_health_gates",
                "Nodes whose packages finished that wait at their health gates (not failed) before they are uncordoned and counted complete",
            ),
        }
    }

    /// The label names of the gauge's series, in order (what the metrics reference documents; a
    /// test checks every sample carries exactly these).
    pub fn label_names(self) -> &'static [&'static str] {
        match self {
            Gauges::Status | Gauges::NodeStatusCount => &["nodewright_name", "status"],
            Gauges::NodeTargetCount => &["nodewright_name"],
            Gauges::PackageStateCount => &[
                "nodewright_name",
                "package_name",
                "package_version",
                "state",
            ],
            Gauges::PackageStageCount => &[
                "nodewright_name",
                "package_name",
                "package_version",
                "stage",
            ],
            Gauges::PackageRestartsCount => &["nodewright_name", "package_name", "package_version"],
            Gauges::RolloutWaitingForWindow
            | Gauges::RolloutWaitingForDisruptionCap
            | Gauges::RolloutNodesAtHealthGates => &["nodewright_name", "policy_name"],
            _ => &[
                "nodewright_name",
                "policy_name",
                "compartment_name",
                "strategy",
            ],
        }
    }
}

/// One gauge value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Which gauge.
    pub gauge: Gauges,
    /// Its labels.
    pub labels: Labels,
    /// Its value.
    pub value: i64,
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The gauges of one NodeWright from the status the rollout computed. `strategies` names each
/// compartment's strategy (fixed, linear, exponential, unknown).
pub fn samples(
    nodewright: &NodeWright,
    status: &NodeWrightStatus,
    strategies: &BTreeMap<String, &'static str>,
) -> Vec<Sample> {
    let name = nodewright.metadata.name.as_deref().unwrap_or_default();
    let policy = nodewright
        .spec
        .deployment_policy
        .as_deref()
        .filter(|p| !p.is_empty())
        .unwrap_or(LEGACY_POLICY);
    let mut out = Samples::default();
    status_samples(&mut out, name, status);
    package_samples(&mut out, name, nodewright, status);
    waiting_samples(&mut out, name, policy, status);
    compartment_samples(&mut out, name, policy, status, strategies);
    out.0
}

/// The samples of one NodeWright, collected in order.
#[derive(Default)]
struct Samples(Vec<Sample>);

impl Samples {
    fn push(&mut self, gauge: Gauges, labels: Labels, value: i64) {
        self.0.push(Sample {
            gauge,
            labels,
            value,
        });
    }

    /// A count as a gauge value (saturating: a count never overflows i64 in practice).
    fn count(&mut self, gauge: Gauges, labels: Labels, count: usize) {
        self.push(gauge, labels, i64::try_from(count).unwrap_or(i64::MAX));
    }
}

/// The NodeWright's status (one series per status, 1 for the current one), its nodes per status
/// and how many nodes it targets.
fn status_samples(out: &mut Samples, name: &str, status: &NodeWrightStatus) {
    let current = status.status.unwrap_or_default();
    for s in STATUSES {
        let at = labels(&[("nodewright_name", name), ("status", s.as_str())]);
        out.push(Gauges::Status, at.clone(), i64::from(s == current));
        let count = status.node_status.values().filter(|n| **n == s).count();
        out.count(Gauges::NodeStatusCount, at, count);
    }
    out.count(
        Gauges::NodeTargetCount,
        labels(&[("nodewright_name", name)]),
        status.node_status.len(),
    );
}

/// Per package version: its nodes per state and per stage, and the restarts summed over nodes.
fn package_samples(
    out: &mut Samples,
    name: &str,
    nodewright: &NodeWright,
    status: &NodeWrightStatus,
) {
    for (package, spec) in &nodewright.spec.packages {
        let version = spec.version.as_str();
        let base = [
            ("nodewright_name", name),
            ("package_name", package.as_str()),
            ("package_version", version),
        ];
        let records: Vec<_> = status
            .node_state
            .values()
            .filter_map(|s| s.get(package, version))
            .collect();
        for state in STATES {
            let count = records.iter().filter(|r| r.state == Some(state)).count();
            let mut l = labels(&base);
            l.push(("state".to_owned(), state.as_str().to_owned()));
            out.count(Gauges::PackageStateCount, l, count);
        }
        for stage in Stage::ALL {
            let count = records.iter().filter(|r| r.stage == stage).count();
            let mut l = labels(&base);
            l.push(("stage".to_owned(), stage.as_str().to_owned()));
            out.count(Gauges::PackageStageCount, l, count);
        }
        let restarts: i64 = records.iter().map(|r| i64::from(r.restarts.max(0))).sum();
        out.push(Gauges::PackageRestartsCount, labels(&base), restarts);
    }
}

/// What the rollout waits for, read from `status.waitingFor`: a maintenance window, the
/// cluster-wide disruption cap, and how many nodes are at health gates.
fn waiting_samples(out: &mut Samples, name: &str, policy: &str, status: &NodeWrightStatus) {
    let at = || labels(&[("nodewright_name", name), ("policy_name", policy)]);
    let parts = || {
        status
            .waiting_for
            .as_deref()
            .into_iter()
            .flat_map(|w| w.split("; "))
    };
    let waiting = status
        .waiting_for
        .as_deref()
        .is_some_and(|w| w.starts_with(nodewright_shared::window::WAITING));
    out.push(Gauges::RolloutWaitingForWindow, at(), i64::from(waiting));
    let capped =
        parts().any(|part| part.starts_with(nodewright_core::rollout::disruption::WAITING));
    out.push(
        Gauges::RolloutWaitingForDisruptionCap,
        at(),
        i64::from(capped),
    );
    // `waiting for health gates on N node(s)`: N.
    let at_gates = parts()
        .find_map(|part| part.strip_prefix(nodewright_core::rollout::pass::GATES_WAITING))
        .and_then(|rest| rest.trim_start_matches(" on ").split(' ').next())
        .and_then(|n| n.parse::<i64>().ok())
        .unwrap_or(0);
    out.push(Gauges::RolloutNodesAtHealthGates, at(), at_gates);
}

/// Per compartment: its nodes, ceiling, progress and batch state.
fn compartment_samples(
    out: &mut Samples,
    name: &str,
    policy: &str,
    status: &NodeWrightStatus,
    strategies: &BTreeMap<String, &'static str>,
) {
    for (compartment, c) in &status.compartment_statuses {
        let strategy = strategies.get(compartment).copied().unwrap_or("unknown");
        let l = labels(&[
            ("nodewright_name", name),
            ("policy_name", policy),
            ("compartment_name", compartment.as_str()),
            ("strategy", strategy),
        ]);
        let batch = c.batch_state.clone().unwrap_or_default();
        for (gauge, value) in [
            (Gauges::RolloutMatchedNodes, c.matched),
            (Gauges::RolloutCeiling, c.ceiling),
            (Gauges::RolloutInProgress, c.in_progress),
            (Gauges::RolloutCompleted, c.completed),
            (Gauges::RolloutProgressPercent, c.progress_percent),
            (Gauges::RolloutCurrentBatch, batch.current_batch),
            (
                Gauges::RolloutConsecutiveFailures,
                batch.consecutive_failures,
            ),
            (Gauges::RolloutShouldStop, i32::from(batch.should_stop)),
            (Gauges::RolloutBatchCompletedNodes, batch.completed_nodes),
            (Gauges::RolloutBatchFailedNodes, batch.failed_nodes),
            (Gauges::RolloutLastBatchSize, batch.last_batch_size),
            (
                Gauges::RolloutLastBatchFailed,
                i32::from(batch.last_batch_failed),
            ),
            (
                Gauges::RolloutSoaking,
                i32::from(batch.soak_until.is_some()),
            ),
        ] {
            out.push(gauge, l.clone(), i64::from(value));
        }
    }
}

/// The outcome label of a reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It returned an action.
    Success,
    /// It returned an error (retried by its error policy).
    Error,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Error => "error",
        }
    }
}

/// The families, shared by every clone (a clone is a handle).
#[derive(Debug, Clone, Default)]
pub struct StateMetrics {
    gauges: BTreeMap<Gauges, Family<Labels, Gauge>>,
    reconciles: Family<Labels, Counter>,
    stages: StageMetrics,
    /// Series written last per NodeWright, so the ones it no longer has are removed.
    written: Arc<Mutex<Written>>,
}

impl StateMetrics {
    /// New families, registered in `registry` (whose prefix is `nodewright`).
    pub fn registered(registry: &mut Registry) -> Self {
        let mut metrics = StateMetrics::default();
        for gauge in Gauges::ALL {
            let family = Family::<Labels, Gauge>::default();
            let (name, help) = gauge.describe();
            registry.register(name, help, family.clone());
            metrics.gauges.insert(gauge, family);
        }
        registry.register(
            "reconcile",
            "Reconciles run, by controller and result",
            metrics.reconciles.clone(),
        );
        metrics.stages = StageMetrics::registered(registry);
        metrics
    }

    /// The per-stage durations, attempts, timeouts and Job creations ([`crate::metrics::stage_jobs`]).
    pub fn stages(&self) -> &StageMetrics {
        &self.stages
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Written> {
        // The map is only ever replaced entry by entry; a panic elsewhere cannot corrupt it.
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the gauges of one NodeWright and removes the series it no longer has.
    pub fn report(&self, nodewright: &str, samples: Vec<Sample>) {
        let mut now = BTreeSet::new();
        for s in samples {
            if let Some(family) = self.gauges.get(&s.gauge) {
                family.get_or_create(&s.labels).set(s.value);
            }
            now.insert((s.gauge, s.labels));
        }
        let mut written = self.lock();
        if let Some(before) = written.get(nodewright) {
            for (gauge, labels) in before.difference(&now) {
                if let Some(family) = self.gauges.get(gauge) {
                    family.remove(labels);
                }
            }
        }
        written.insert(nodewright.to_owned(), now);
    }

    /// Removes every series of a NodeWright (it is being deleted), its stage series too.
    pub fn forget(&self, nodewright: &str) {
        self.stages.forget(nodewright);
        let before = self.lock().remove(nodewright).unwrap_or_default();
        for (gauge, labels) in before {
            if let Some(family) = self.gauges.get(&gauge) {
                family.remove(&labels);
            }
        }
    }

    /// Removes every series of the NodeWrights `live` says are gone (after a relist of the
    /// NodeWrights, which reports no deletions).
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        for name in self.nodewrights().iter().filter(|n| !live(n)) {
            self.forget(name);
        }
    }

    /// The NodeWrights that have series.
    pub fn nodewrights(&self) -> BTreeSet<String> {
        let mut names: BTreeSet<String> = self.lock().keys().cloned().collect();
        names.extend(self.stages.nodewrights());
        names
    }

    /// Removes every NodeWright's gauges: this replica stopped leading. A standby then reports
    /// none, so a dashboard or an alert never reads a former leader's frozen values next to the
    /// new leader's. Counters and histograms stay (they count what this replica did).
    pub fn forget_gauges(&self) {
        let all = std::mem::take(&mut *self.lock());
        for (gauge, labels) in all.into_values().flatten() {
            if let Some(family) = self.gauges.get(&gauge) {
                family.remove(&labels);
            }
        }
    }

    /// Counts one reconcile of `controller` (`nodewright` or `job`).
    pub fn count_reconcile(&self, controller: &str, outcome: Outcome) {
        self.reconciles
            .get_or_create(&labels(&[
                ("controller", controller),
                ("result", outcome.as_str()),
            ]))
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{BatchState, CompartmentStatus, NodeWrightSpec, Package};
    use nodewright_shared::node_state::{NodeState, PackageStatus};

    fn record(stage: Stage, state: State, restarts: i32) -> PackageStatus {
        PackageStatus {
            name: "dax".into(),
            version: "1.0.0".into(),
            image: "img".into(),
            container_sha: String::new(),
            stage,
            state: Some(state),
            restarts,
        }
    }

    fn fixture() -> (NodeWright, NodeWrightStatus) {
        let nw = NodeWright::new(
            "nw",
            NodeWrightSpec {
                packages: BTreeMap::from([(
                    "dax".to_owned(),
                    Package {
                        version: "1.0.0".into(),
                        ..Package::default()
                    },
                )]),
                ..NodeWrightSpec::default()
            },
        );
        let mut a = NodeState::default();
        a.upsert(record(Stage::Config, State::Complete, 0));
        let mut b = NodeState::default();
        b.upsert(record(Stage::Apply, State::Erroring, 2));
        let mut c = NodeState::default();
        c.upsert(record(Stage::Config, State::InProgress, 1));
        let status = NodeWrightStatus {
            status: Some(Status::InProgress),
            node_state: BTreeMap::from([
                ("a".to_owned(), a),
                ("b".to_owned(), b),
                ("c".to_owned(), c),
            ]),
            node_status: BTreeMap::from([
                ("a".to_owned(), Status::Complete),
                ("b".to_owned(), Status::Erroring),
                ("c".to_owned(), Status::InProgress),
            ]),
            compartment_statuses: BTreeMap::from([(
                "__default__".to_owned(),
                CompartmentStatus {
                    matched: 3,
                    ceiling: 2,
                    in_progress: 2,
                    completed: 1,
                    progress_percent: 33,
                    batch_state: Some(BatchState {
                        current_batch: 2,
                        consecutive_failures: 1,
                        completed_nodes: 1,
                        failed_nodes: 1,
                        last_batch_size: 2,
                        last_batch_failed: true,
                        ..BatchState::default()
                    }),
                },
            )]),
            ..NodeWrightStatus::default()
        };
        (nw, status)
    }

    fn value(samples: &[Sample], gauge: Gauges, pairs: &[(&str, &str)]) -> Option<i64> {
        samples
            .iter()
            .find(|s| {
                s.gauge == gauge && pairs.iter().all(|p| s.labels.contains(&labels(&[*p])[0]))
            })
            .map(|s| s.value)
    }

    #[test]
    fn samples_follow_the_status() {
        let (nw, status) = fixture();
        let strategies = BTreeMap::from([("__default__".to_owned(), "exponential")]);
        let s = samples(&nw, &status, &strategies);
        assert_eq!(
            value(&s, Gauges::Status, &[("status", "in_progress")]),
            Some(1)
        );
        assert_eq!(
            value(&s, Gauges::Status, &[("status", "complete")]),
            Some(0)
        );
        assert_eq!(
            s.iter().filter(|x| x.gauge == Gauges::Status).count(),
            8,
            "every status is emitted"
        );
        assert_eq!(
            value(&s, Gauges::NodeStatusCount, &[("status", "erroring")]),
            Some(1)
        );
        assert_eq!(
            value(&s, Gauges::NodeStatusCount, &[("status", "waiting")]),
            Some(0)
        );
        assert_eq!(value(&s, Gauges::NodeTargetCount, &[]), Some(3));
        // Summed over stages: the complete and the in-progress record are both at config.
        assert_eq!(
            value(&s, Gauges::PackageStageCount, &[("stage", "config")]),
            Some(2)
        );
        assert_eq!(
            value(&s, Gauges::PackageStateCount, &[("state", "erroring")]),
            Some(1)
        );
        assert_eq!(
            value(&s, Gauges::PackageStateCount, &[("state", "skipped")]),
            Some(0)
        );
        assert_eq!(value(&s, Gauges::PackageRestartsCount, &[]), Some(3));
        let rollout = [
            ("policy_name", LEGACY_POLICY),
            ("compartment_name", "__default__"),
            ("strategy", "exponential"),
        ];
        assert_eq!(value(&s, Gauges::RolloutCeiling, &rollout), Some(2));
        assert_eq!(value(&s, Gauges::RolloutCurrentBatch, &rollout), Some(2));
        assert_eq!(
            value(&s, Gauges::RolloutConsecutiveFailures, &rollout),
            Some(1)
        );
        assert_eq!(value(&s, Gauges::RolloutShouldStop, &rollout), Some(0));
        assert_eq!(
            value(&s, Gauges::RolloutProgressPercent, &rollout),
            Some(33)
        );
    }

    #[test]
    fn every_sample_carries_exactly_the_documented_labels() {
        let (nw, status) = fixture();
        let s = samples(&nw, &status, &BTreeMap::new());
        for gauge in Gauges::ALL {
            assert!(s.iter().any(|x| x.gauge == gauge), "{gauge:?} sampled");
        }
        for sample in &s {
            let names: Vec<&str> = sample.labels.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(names, sample.gauge.label_names(), "{:?}", sample.gauge);
        }
        let rollout = [
            ("policy_name", LEGACY_POLICY),
            ("compartment_name", "__default__"),
        ];
        assert_eq!(
            value(&s, Gauges::RolloutBatchCompletedNodes, &rollout),
            Some(1)
        );
        assert_eq!(value(&s, Gauges::RolloutLastBatchSize, &rollout), Some(2));
        assert_eq!(value(&s, Gauges::RolloutLastBatchFailed, &rollout), Some(1));
    }

    #[test]
    fn series_a_nodewright_no_longer_has_are_removed() {
        let mut registry = Registry::with_prefix("nodewright");
        let metrics = StateMetrics::registered(&mut registry);
        let (nw, status) = fixture();
        metrics.report("nw", samples(&nw, &status, &BTreeMap::new()));
        metrics.count_reconcile("nodewright", Outcome::Success);
        metrics.count_reconcile("nodewright", Outcome::Success);
        metrics.count_reconcile("job", Outcome::Error);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains(r#"nodewright_status{nodewright_name="nw",status="in_progress"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"nodewright_rollout_matched_nodes{nodewright_name="nw",policy_name="legacy",compartment_name="__default__",strategy="unknown"} 3"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"nodewright_reconcile_total{controller="nodewright",result="success"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"nodewright_reconcile_total{controller="job",result="error"} 1"#),
            "{text}"
        );

        // The compartment goes: its series go; the others stay.
        let mut fewer = status.clone();
        fewer.compartment_statuses.clear();
        metrics.report("nw", samples(&nw, &fewer, &BTreeMap::new()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            !text.contains("nodewright_rollout_matched_nodes{"),
            "{text}"
        );
        assert!(text.contains("nodewright_node_target_count{"), "{text}");

        metrics.forget("nw");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(!text.contains(r#"nodewright_name="nw""#), "{text}");

        // Leadership lost: every gauge goes, the counters stay.
        metrics.report("a", samples(&nw, &status, &BTreeMap::new()));
        metrics.report("b", samples(&nw, &status, &BTreeMap::new()));
        metrics.forget_gauges();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(!text.contains("nodewright_status{"), "{text}");
        assert!(text.contains("nodewright_reconcile_total{"), "{text}");
    }
}
