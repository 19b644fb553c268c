//! Per-stage metrics, observed where a stage's Job is created and where its outcome is recorded:
//!
//! - `nodewright_stage_jobs_created_total{nodewright_name,package_name,package_version,stage}`:
//!   stage Jobs created (an AlreadyExists is not a new Job);
//! - `nodewright_stage_duration_seconds{…,result}`: from the Job's creation to its `Complete`
//!   (`result="complete"`) or `Failed` (`result="timed_out"`) condition, so pod scheduling, image
//!   pulls and every retry are included: what an administrator waits for;
//! - `nodewright_stage_attempts{…,result}`: attempts a finished stage took (the genuinely failed
//!   ones plus the one that succeeded; for a timed-out stage, the failed ones); a disrupted or
//!   rejected pod is not an attempt, as everywhere else ([`nodewright_core::jobs::classify`]);
//! - `nodewright_stage_timeouts_total{nodewright_name,package_name,package_version,stage}`: stages
//!   that timed out (retries spent on genuine failures, or an interrupt past its bound).
//!
//! A Complete Job's outcome is recorded by the rollout pass (with the next stage, the common path, or
//! on its own when no node write of the pass carries it) or, for a Job no reconciled NodeWright
//! owns, by the outcome controller; each calls [`StageMetrics::finished`] once the Job is marked
//! recorded, and a recorded Job is never recorded again (recorded as the Job store shows it or as
//! the term marked it before the store caught up: [`crate::writes::Writer::recorded`]), so each
//! finished stage is observed once per term. All series of a NodeWright are removed with its
//! gauges when it is deleted ([`crate::metrics::nodewright_gauges::StateMetrics::forget`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::batch::v1::Job;
use kube::runtime::reflector::Store;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use nodewright_core::jobs::PackageAnnotation;
use nodewright_core::jobs::classify::attempts;
use nodewright_core::jobs::read::package_of;
use nodewright_core::jobs::stored::{StoredJob, StoredPod};

/// The stage a series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct StageLabels {
    /// The NodeWright.
    pub nodewright_name: String,
    /// The package key.
    pub package_name: String,
    /// Its version.
    pub package_version: String,
    /// `apply`, `config`, `interrupt`, `post-interrupt`, `upgrade`, `uninstall`...
    pub stage: String,
}

/// A finished stage.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct FinishedLabels {
    /// The NodeWright.
    pub nodewright_name: String,
    /// The package key.
    pub package_name: String,
    /// Its version.
    pub package_version: String,
    /// The stage.
    pub stage: String,
    /// `complete` or `timed_out`.
    pub result: &'static str,
}

/// How a stage ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageResult {
    /// The Job completed.
    Complete,
    /// The stage timed out.
    TimedOut,
}

impl StageResult {
    /// The `result` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            StageResult::Complete => "complete",
            StageResult::TimedOut => "timed_out",
        }
    }
}

type Histograms = Family<FinishedLabels, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    // 1 s .. 4.5 h doubling: a kwok stage takes a second, a kernel build an hour.
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

fn attempts_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 16.0])
}

/// Handles on the stage families (clones share them).
#[derive(Debug, Clone)]
pub struct StageMetrics {
    created: Family<StageLabels, Counter>,
    timeouts: Family<StageLabels, Counter>,
    durations: Histograms,
    attempts: Histograms,
    /// The stages each NodeWright has series of (a Job created, an outcome observed), so
    /// [`StageMetrics::forget`] can remove them all.
    written: Arc<Mutex<BTreeMap<String, BTreeSet<StageLabels>>>>,
}

impl Default for StageMetrics {
    fn default() -> Self {
        StageMetrics {
            created: Family::default(),
            timeouts: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
            attempts: Family::new_with_constructor(attempts_histogram),
            written: Arc::default(),
        }
    }
}

/// The stage labels of a Job from its package annotation.
fn stage_labels(annotation: &PackageAnnotation) -> StageLabels {
    StageLabels {
        nodewright_name: annotation.nodewright.clone(),
        package_name: annotation.name.clone(),
        package_version: annotation.version.clone(),
        stage: annotation.stage.as_str().to_owned(),
    }
}

/// The labels of `stage` finished with `result`.
fn finished_labels(stage: &StageLabels, result: StageResult) -> FinishedLabels {
    FinishedLabels {
        nodewright_name: stage.nodewright_name.clone(),
        package_name: stage.package_name.clone(),
        package_version: stage.package_version.clone(),
        stage: stage.stage.clone(),
        result: result.as_str(),
    }
}

/// Seconds from the Job's creation to its `condition` turning True.
pub fn seconds_to(job: &StoredJob, condition: &str) -> Option<f64> {
    let created = job.metadata.creation_timestamp.as_ref()?.0;
    let ended = job
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == condition && c.status == "True")?
        .last_transition_time
        .as_ref()?
        .0;
    let seconds = ended.duration_since(created).as_secs_f64();
    (seconds >= 0.0).then_some(seconds)
}

impl StageMetrics {
    /// New families, registered in `registry` (prefix `nodewright`).
    pub fn registered(registry: &mut Registry) -> Self {
        let m = StageMetrics::default();
        registry.register(
            "stage_jobs_created",
            "Stage Jobs created, by NodeWright, package, version and stage",
            m.created.clone(),
        );
        registry.register(
            "stage_duration_seconds",
            "Time from a stage Job's creation to its outcome (every retry included), by result",
            m.durations.clone(),
        );
        registry.register(
            "stage_attempts",
            "Attempts a finished stage took (disrupted and rejected pods are not attempts), by result",
            m.attempts.clone(),
        );
        registry.register(
            "stage_timeouts",
            "Stages that timed out: retries spent on genuine failures, or an interrupt past its bound",
            m.timeouts.clone(),
        );
        m
    }

    /// A stage Job was created (not found existing).
    pub fn created(&self, job: &Job) {
        if let Some(annotation) = package_of(&StoredJob::of(job)) {
            let stage = stage_labels(&annotation);
            self.created.get_or_create(&stage).inc();
            self.note(stage);
        }
    }

    /// Remembers that `stage` has series (its NodeWright's are removed when it is deleted, whether
    /// or not its stages finished).
    fn note(&self, stage: StageLabels) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(stage.nodewright_name.clone())
            .or_default()
            .insert(stage);
    }

    /// A stage's outcome was recorded (its Job just marked `state-recorded`). `pods` are the Job's
    /// failed attempts as known (any disrupted or rejected ones among them are not counted).
    pub fn finished(&self, job: &StoredJob, pods: &[StoredPod], result: StageResult) {
        let Some(annotation) = package_of(job) else {
            return;
        };
        let stage = stage_labels(&annotation);
        let failed = u32::try_from(attempts(pods)).unwrap_or(u32::MAX);
        let (condition, tries) = match result {
            StageResult::Complete => ("Complete", failed.saturating_add(1)),
            StageResult::TimedOut => ("Failed", failed.max(1)),
        };
        let labels = finished_labels(&stage, result);
        if let Some(seconds) = seconds_to(job, condition) {
            self.durations.get_or_create(&labels).observe(seconds);
        }
        self.attempts
            .get_or_create(&labels)
            .observe(f64::from(tries));
        if result == StageResult::TimedOut {
            self.timeouts.get_or_create(&stage).inc();
        }
        self.note(stage);
    }

    /// A Complete Job the rollout pass recorded with the node's next stage ([`crate::rollout`]'s
    /// absorb path) was just marked: observed with its pods from the pod store.
    pub fn absorbed(&self, job: &StoredJob, pods: &Store<StoredPod>) {
        let uid = job.metadata.uid.as_deref();
        let pods: Vec<StoredPod> = pods
            .state()
            .iter()
            .filter(|p| uid.is_some() && p.job_uid.as_deref() == uid)
            .map(|p| StoredPod::clone(p))
            .collect();
        self.finished(job, &pods, StageResult::Complete);
    }

    /// Removes every series of a NodeWright (it is being deleted).
    pub fn forget(&self, nodewright: &str) {
        let written = self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(nodewright)
            .unwrap_or_default();
        for stage in written {
            for result in [StageResult::Complete, StageResult::TimedOut] {
                let labels = finished_labels(&stage, result);
                self.durations.remove(&labels);
                self.attempts.remove(&labels);
            }
            self.timeouts.remove(&stage);
            self.created.remove(&stage);
        }
    }

    /// The NodeWrights that have stage series.
    pub fn nodewrights(&self) -> Vec<String> {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::keys;
    use nodewright_shared::node_state::Stage;
    use serde_json::json;

    fn annotation(stage: Stage) -> PackageAnnotation {
        PackageAnnotation {
            name: "dax".into(),
            version: "1.0.0".into(),
            nodewright: "nw".into(),
            stage,
            image: "img".into(),
            container_sha: None,
        }
    }

    fn job(stage: Stage, condition: &str) -> StoredJob {
        serde_json::from_value(json!({
            "metadata": {"name": "j", "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {keys::PACKAGE_ANNOTATION: annotation(stage).to_json().expect("json")}},
            "status": {"conditions": [
                {"type": condition, "status": "True", "lastTransitionTime": "2026-01-01T00:01:30Z"}]}
        }))
        .expect("job")
    }

    fn genuine_failure(name: &str) -> StoredPod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "c", "state": {"terminated": {"exitCode": 2}}}]}
        }))
        .expect("pod")
    }

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).expect("encode");
        out
    }

    #[test]
    fn durations_attempts_and_timeouts_are_observed_per_stage() {
        let mut registry = Registry::with_prefix("nodewright");
        let m = StageMetrics::registered(&mut registry);
        m.finished(
            &job(Stage::Apply, "Complete"),
            &[genuine_failure("a")],
            StageResult::Complete,
        );
        m.finished(
            &job(Stage::Config, "Failed"),
            &[genuine_failure("a"), genuine_failure("b")],
            StageResult::TimedOut,
        );
        let t = text(&registry);
        let base = r#"nodewright_name="nw",package_name="dax",package_version="1.0.0""#;
        for line in [
            format!(
                r#"nodewright_stage_duration_seconds_sum{{{base},stage="apply",result="complete"}} 90.0"#
            ),
            format!(
                r#"nodewright_stage_duration_seconds_bucket{{le="128.0",{base},stage="apply",result="complete"}} 1"#
            ),
            format!(
                r#"nodewright_stage_duration_seconds_bucket{{le="64.0",{base},stage="apply",result="complete"}} 0"#
            ),
            // One genuine failure, then the success: 2 attempts.
            format!(
                r#"nodewright_stage_attempts_sum{{{base},stage="apply",result="complete"}} 2.0"#
            ),
            format!(
                r#"nodewright_stage_attempts_sum{{{base},stage="config",result="timed_out"}} 2.0"#
            ),
            format!(r#"nodewright_stage_timeouts_total{{{base},stage="config"}} 1"#),
        ] {
            assert!(t.contains(&line), "{line} in:\n{t}");
        }
        assert!(
            !t.contains(r#"nodewright_stage_timeouts_total{nodewright_name="nw",package_name="dax",package_version="1.0.0",stage="apply"}"#),
            "{t}"
        );
        m.forget("nw");
        let t = text(&registry);
        assert!(!t.contains(r#"nodewright_name="nw""#), "{t}");
    }

    #[test]
    fn a_created_job_is_counted_by_its_package_annotation() {
        let mut registry = Registry::with_prefix("nodewright");
        let m = StageMetrics::registered(&mut registry);
        let mut job = Job::default();
        job.metadata.annotations = Some(
            [(
                keys::PACKAGE_ANNOTATION.to_owned(),
                annotation(Stage::Apply).to_json().expect("json"),
            )]
            .into(),
        );
        m.created(&job);
        m.created(&job);
        m.created(&Job::default()); // not a stage Job: ignored
        assert!(text(&registry).contains(
            r#"nodewright_stage_jobs_created_total{nodewright_name="nw",package_name="dax",package_version="1.0.0",stage="apply"} 2"#
        ));
        // Deleted while the stage still ran (no outcome observed): its series go too.
        m.forget("nw");
        let t = text(&registry);
        assert!(!t.contains(r#"nodewright_name="nw""#), "{t}");
        assert!(m.nodewrights().is_empty());
    }
}
