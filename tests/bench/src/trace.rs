//! Where a rollout's time goes, stage by stage: the moments this process's watches see each Job
//! created, its pod created and done, the Job Complete, the outcome recorded in node state (the
//! operator only), and the next Job of the chain created. Watch-observed times carry the watch's
//! own latency, the same for the operator and the floor, so their gaps compare.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use nodewright_core::jobs::PackageAnnotation;
use nodewright_shared::keys;
use nodewright_shared::node_state::{NodeState, Stage, State};
use serde::Serialize;

use crate::chain::{Chain, Step};

/// One package stage on one node.
type Key = (String, Step);

/// The moments seen for one package stage on one node.
#[derive(Debug, Default, Clone)]
struct Moments {
    job_created: Option<Instant>,
    pod_created: Option<Instant>,
    pod_done: Option<Instant>,
    job_complete: Option<Instant>,
    recorded: Option<Instant>,
}

/// Summary of one gap over every node-stage that had both ends.
#[derive(Debug, Clone, Serialize)]
pub struct Gap {
    /// What the gap is between.
    pub name: &'static str,
    /// Node-stages measured.
    pub count: usize,
    /// Mean, milliseconds.
    pub mean_ms: f64,
    /// Median, milliseconds.
    pub p50_ms: f64,
    /// 95th percentile, milliseconds.
    pub p95_ms: f64,
}

/// The trace of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// From the start (the NodeWright or the first Jobs created) to the end condition, seconds.
    pub wall_seconds: f64,
    /// Stage Jobs seen.
    pub jobs: usize,
    /// The gaps of the stage chain.
    pub gaps: Vec<Gap>,
}

/// Collects the moments of one run.
pub struct Tracer {
    nodewright: String,
    chain: Chain,
    start: Instant,
    moments: BTreeMap<Key, Moments>,
    /// Job name → its node-stage.
    jobs: BTreeMap<String, Key>,
}

impl Tracer {
    /// A trace of `nodewright`'s Jobs along `chain`, from `start`.
    pub fn new(nodewright: &str, chain: Chain, start: Instant) -> Tracer {
        Tracer {
            nodewright: nodewright.to_owned(),
            chain,
            start,
            moments: BTreeMap::new(),
            jobs: BTreeMap::new(),
        }
    }

    fn key_of(&self, job: &Job) -> Option<Key> {
        let annotation = job
            .metadata
            .annotations
            .as_ref()?
            .get(keys::PACKAGE_ANNOTATION)?;
        let package = PackageAnnotation::parse(annotation).ok()?;
        if package.nodewright != self.nodewright {
            return None;
        }
        let node = job
            .spec
            .as_ref()?
            .template
            .spec
            .as_ref()?
            .node_name
            .clone()?;
        Some((node, (package.name, package.stage)))
    }

    /// A Job event at `now`; returns its node-stage when this event is the first to show it Complete.
    pub fn job(&mut self, job: &Job, now: Instant) -> Option<Key> {
        let name = job.metadata.name.clone()?;
        let key = match self.jobs.get(&name) {
            Some(key) => key.clone(),
            None => {
                let key = self.key_of(job)?;
                self.jobs.insert(name, key.clone());
                key
            }
        };
        let m = self.moments.entry(key.clone()).or_default();
        m.job_created.get_or_insert(now);
        let complete = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Complete" && c.status == "True");
        if complete && m.job_complete.is_none() {
            m.job_complete = Some(now);
            return Some(key);
        }
        None
    }

    /// A pod event at `now`.
    pub fn pod(&mut self, pod: &Pod, now: Instant) {
        let Some(job) = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("batch.kubernetes.io/job-name"))
        else {
            return;
        };
        let Some(key) = self.jobs.get(job) else {
            return;
        };
        let m = self.moments.entry(key.clone()).or_default();
        m.pod_created.get_or_insert(now);
        if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded") {
            m.pod_done.get_or_insert(now);
        }
    }

    /// A node event at `now`: the stages its node state shows as done are recorded.
    pub fn node(&mut self, node: &Node, now: Instant) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        let Some(text) = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&keys::node_state_key(&self.nodewright)))
        else {
            return;
        };
        let Ok(state) = NodeState::parse(text) else {
            return;
        };
        for record in state.iter() {
            let position = position(record.stage);
            for stage in [Stage::Apply, Stage::Config] {
                let done = position > self::position(stage)
                    || (position == self::position(stage) && record.state == Some(State::Complete));
                if done {
                    let key = (name.clone(), (record.name.clone(), stage));
                    self.moments
                        .entry(key)
                        .or_default()
                        .recorded
                        .get_or_insert(now);
                }
            }
        }
    }

    /// Whether every node-stage of `nodes` nodes has completed.
    pub fn all_complete(&self, nodes: usize) -> bool {
        let complete = self
            .moments
            .values()
            .filter(|m| m.job_complete.is_some())
            .count();
        complete >= nodes * self.chain.len()
    }

    /// The report, for a run that ended at `end`. `recorded`: the run records outcomes in node
    /// state (the operator), so the gaps through the record are reported too.
    pub fn report(&self, end: Instant, recorded: bool) -> Report {
        let mut gaps: Vec<(&'static str, Vec<Duration>)> = Vec::new();
        let mut push = |name: &'static str, d: Option<Duration>| {
            let Some(d) = d else { return };
            match gaps.iter_mut().find(|(n, _)| *n == name) {
                Some((_, v)) => v.push(d),
                None => gaps.push((name, vec![d])),
            }
        };
        let between =
            |a: Option<Instant>, b: Option<Instant>| Some(b?.saturating_duration_since(a?));
        for ((node, step), m) in &self.moments {
            if m.job_created.is_none() {
                continue;
            }
            let preds = self.chain.predecessors(step);
            if preds.is_empty() {
                push(
                    "start -> first Job created",
                    between(Some(self.start), m.job_created),
                );
            } else {
                let of = |f: fn(&Moments) -> Option<Instant>| {
                    preds
                        .iter()
                        .map(|p| self.moments.get(&(node.clone(), p.clone())).and_then(f))
                        .collect::<Option<Vec<_>>>()
                        .and_then(|v| v.into_iter().max())
                };
                push(
                    "predecessor Job Complete -> Job created",
                    between(of(|m| m.job_complete), m.job_created),
                );
                if recorded {
                    push(
                        "predecessor outcome recorded -> Job created",
                        between(of(|m| m.recorded), m.job_created),
                    );
                }
            }
            push(
                "Job created -> pod created",
                between(m.job_created, m.pod_created),
            );
            push(
                "pod created -> pod done",
                between(m.pod_created, m.pod_done),
            );
            push(
                "pod done -> Job Complete",
                between(m.pod_done, m.job_complete),
            );
            if recorded {
                push(
                    "Job Complete -> outcome recorded",
                    between(m.job_complete, m.recorded),
                );
            }
        }
        Report {
            wall_seconds: end.saturating_duration_since(self.start).as_secs_f64(),
            jobs: self.jobs.len(),
            gaps: gaps
                .into_iter()
                .map(|(name, mut v)| {
                    v.sort();
                    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
                    let at = |q: f64| {
                        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
                        v.get(i).map_or(0.0, ms)
                    };
                    Gap {
                        name,
                        count: v.len(),
                        mean_ms: v.iter().map(ms).sum::<f64>() / v.len().max(1) as f64,
                        p50_ms: at(0.5),
                        p95_ms: at(0.95),
                    }
                })
                .collect(),
        }
    }
}

/// A stage's place in the chain (`upgrade` stands where `apply` does).
fn position(stage: Stage) -> u8 {
    match stage {
        Stage::Apply | Stage::Upgrade => 0,
        Stage::Config => 1,
        Stage::Interrupt => 2,
        Stage::PostInterrupt => 3,
        Stage::Uninstall | Stage::UninstallInterrupt => 4,
    }
}

impl Report {
    /// The report as text, one gap per line.
    pub fn print(&self, label: &str) {
        println!(
            "{label}: wall time {:.1} s, {} stage Jobs",
            self.wall_seconds, self.jobs
        );
        println!(
            "  {:<46} {:>6} {:>10} {:>10} {:>10}",
            "gap", "n", "mean ms", "p50 ms", "p95 ms"
        );
        for g in &self.gaps {
            println!(
                "  {:<46} {:>6} {:>10.0} {:>10.0} {:>10.0}",
                g.name, g.count, g.mean_ms, g.p50_ms, g.p95_ms
            );
        }
    }
}
