//! The operator's Prometheus registry (metric names `nodewright_*`, DESIGN §10, and the standard
//! `process_*`). Built mutable at startup so each reconciler registers its own metrics, then shared
//! read-only with the admin server that encodes it on every scrape. The NodeWright gauges and
//! reconcile counters live in [`crate::metrics::nodewright_gauges`], the per-stage metrics in
//! [`crate::metrics::stage_jobs`]. [`catalogue`] names the labels of every family, for the generated
//! metrics reference (docs/reference/metrics.md).

pub mod api;
pub mod nodewright_gauges;
pub mod stage_jobs;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::api::ApiMetrics;
use crate::metrics::nodewright_gauges::StateMetrics;

/// The metrics of the leader election, updated by [`crate::runtime::leader::Elector::with_metrics`].
#[derive(Debug, Clone, Default)]
pub struct LeaderMetrics {
    /// `nodewright_operator_is_leader`: 1 while this replica leads, else 0. Alert when the sum over
    /// replicas is not 1 for longer than a lease duration.
    pub is_leader: Gauge,
    /// `nodewright_operator_leader_transitions_total`: times this replica gained or lost leadership.
    /// A steady climb means the lease flaps (a slow apiserver, too tight timings).
    pub transitions: Counter,
}

/// The registry and the metrics owned by the process itself.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    leader: LeaderMetrics,
    state: StateMetrics,
    api: ApiMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with the process collector, and under the `nodewright` prefix the leader-election,
    /// NodeWright, stage and API metrics.
    pub fn new() -> Self {
        let mut root = Registry::default();
        nodewright_telemetry::ProcessCollector::register(&mut root);
        let registry = root.sub_registry_with_prefix("nodewright");
        let leader = LeaderMetrics::default();
        registry.register(
            "operator_is_leader",
            "Whether this operator replica holds the leader Lease (1) or stands by (0)",
            leader.is_leader.clone(),
        );
        registry.register(
            "operator_leader_transitions",
            "Times this operator replica gained or lost leadership",
            leader.transitions.clone(),
        );
        let state = StateMetrics::registered(registry);
        let api = ApiMetrics::registered(registry);
        Metrics {
            registry: root,
            leader,
            state,
            api,
        }
    }

    /// Handles on the NodeWright gauges and reconcile counters ([`crate::metrics::nodewright_gauges`]).
    pub fn state(&self) -> StateMetrics {
        self.state.clone()
    }

    /// The client's request counter ([`crate::metrics::api`]).
    pub fn api(&self) -> ApiMetrics {
        self.api.clone()
    }

    /// Handles on the leader-election metrics (they share state with the registered ones).
    pub fn leader(&self) -> LeaderMetrics {
        self.leader.clone()
    }

    /// Where reconcilers register their metrics; names get the `nodewright_` prefix.
    pub fn registry_mut(&mut self) -> &mut Registry {
        self.registry.sub_registry_with_prefix("nodewright")
    }

    /// A registry with one series in every family (families without series are not in an
    /// exposition at all): what the generated metrics reference reads names, types, help and
    /// labels from.
    pub fn exemplified() -> Self {
        use nodewright_shared::api::{
            BatchState, CompartmentStatus, NodeWright, NodeWrightSpec, NodeWrightStatus, Package,
        };
        use nodewright_shared::node_state::{NodeState, PackageStatus, Stage, State};
        let metrics = Metrics::new();
        let spec = NodeWrightSpec {
            packages: [(
                "example".to_owned(),
                Package {
                    version: "1.0.0".into(),
                    ..Package::default()
                },
            )]
            .into(),
            ..NodeWrightSpec::default()
        };
        let nodewright = NodeWright::new("example", spec);
        let mut node = NodeState::default();
        node.upsert(PackageStatus {
            name: "example".into(),
            version: "1.0.0".into(),
            image: "example".into(),
            container_sha: String::new(),
            stage: Stage::Apply,
            state: Some(State::Complete),
            restarts: 0,
        });
        let status = NodeWrightStatus {
            node_state: [("node".to_owned(), node)].into(),
            compartment_statuses: [(
                "__default__".to_owned(),
                CompartmentStatus {
                    batch_state: Some(BatchState::default()),
                    ..CompartmentStatus::default()
                },
            )]
            .into(),
            ..NodeWrightStatus::default()
        };
        let state = metrics.state();
        state.report(
            "example",
            nodewright_gauges::samples(&nodewright, &status, &Default::default()),
        );
        state.count_reconcile("nodewright", nodewright_gauges::Outcome::Success);
        let annotation = nodewright_core::jobs::PackageAnnotation {
            name: "example".into(),
            version: "1.0.0".into(),
            nodewright: "example".into(),
            stage: Stage::Apply,
            image: "example".into(),
            container_sha: None,
        };
        let mut job = k8s_openapi::api::batch::v1::Job::default();
        job.metadata.annotations = annotation
            .to_json()
            .ok()
            .map(|a| [(nodewright_shared::keys::PACKAGE_ANNOTATION.to_owned(), a)].into());
        state.stages().created(&job);
        let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        );
        job.metadata.creation_timestamp = Some(at.clone());
        job.status = Some(k8s_openapi::api::batch::v1::JobStatus {
            conditions: Some(vec![k8s_openapi::api::batch::v1::JobCondition {
                type_: "Failed".into(),
                status: "True".into(),
                last_transition_time: Some(at),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let stored = nodewright_core::jobs::stored::StoredJob::of(&job);
        state
            .stages()
            .finished(&stored, &[], stage_jobs::StageResult::TimedOut);
        if let Ok(request) = http::Request::get("/api/v1/nodes").body(()) {
            metrics.api().observe(&request);
        }
        metrics
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; a metric's own encoder failing would leave a partial
        // exposition, which Prometheus rejects visibly.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding the metrics failed");
        }
        out
    }
}

/// The label names of every metric family the operator exports, by full name (without the
/// `_total`, `_bucket`, `_sum`, `_count` suffixes of the exposition). Histograms also carry `le`.
pub fn catalogue() -> Vec<(String, Vec<&'static str>)> {
    let mut out: Vec<(String, Vec<&'static str>)> = vec![
        ("nodewright_operator_is_leader".into(), vec![]),
        ("nodewright_operator_leader_transitions".into(), vec![]),
        (
            "nodewright_operator_api_requests".into(),
            vec!["verb", "resource"],
        ),
        ("nodewright_reconcile".into(), vec!["controller", "result"]),
    ];
    for gauge in nodewright_gauges::Gauges::all() {
        out.push((
            format!("nodewright_{}", gauge.name()),
            gauge.label_names().to_vec(),
        ));
    }
    let stage = vec![
        "nodewright_name",
        "package_name",
        "package_version",
        "stage",
    ];
    let finished = vec![
        "nodewright_name",
        "package_name",
        "package_version",
        "stage",
        "result",
    ];
    out.push(("nodewright_stage_jobs_created".into(), stage.clone()));
    out.push(("nodewright_stage_timeouts".into(), stage));
    out.push(("nodewright_stage_duration_seconds".into(), finished.clone()));
    out.push(("nodewright_stage_attempts".into(), finished));
    for process in nodewright_telemetry::process::NAMES {
        out.push(((*process).into(), vec![]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_metrics_are_registered_under_the_product_prefix() {
        let mut metrics = Metrics::new();
        let extra = Gauge::<i64>::default();
        metrics
            .registry_mut()
            .register("packages_in_progress", "test", extra.clone());
        extra.set(4);
        let leader = metrics.leader();
        leader.is_leader.set(1);
        leader.transitions.inc();
        let text = metrics.encode();
        assert!(text.contains("nodewright_operator_is_leader 1"), "{text}");
        assert!(
            text.contains("nodewright_operator_leader_transitions_total 1"),
            "{text}"
        );
        assert!(text.contains("nodewright_packages_in_progress 4"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(text.contains("\nprocess_resident_memory_bytes "), "{text}");
            assert!(!text.contains("nodewright_process_"), "{text}");
        }
    }
}
