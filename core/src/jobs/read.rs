//! Reading the Jobs the operator owns: whether one finished, whether its outcome is already in node
//! state (`nodewright.nvidia.com/state-recorded`), which package, stage and node it runs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::jobs::PackageAnnotation;
use crate::jobs::stored::StoredJob;

/// Value of `nodewright.nvidia.com/state-recorded`: which outcome was written to node state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// `(stage, complete)` was recorded.
    Complete,
    /// The stage timed out: `(stage, erroring)` stays and the Job is the evidence.
    TimedOut,
    /// Only admission rejections: processed; the Job is deleted and the stage reruns.
    Rejected,
}

impl Recorded {
    /// The annotation value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Recorded::Complete => "complete",
            Recorded::TimedOut => "timed-out",
            Recorded::Rejected => "rejected",
        }
    }

    /// Parses the annotation value (anything else: not recorded by this version).
    pub fn parse(value: &str) -> Option<Recorded> {
        match value {
            "complete" => Some(Recorded::Complete),
            "timed-out" => Some(Recorded::TimedOut),
            "rejected" => Some(Recorded::Rejected),
            _ => None,
        }
    }
}

/// The recorded outcome of a Job, if any.
pub fn recorded(job: &StoredJob) -> Option<Recorded> {
    job.recorded.as_deref().and_then(Recorded::parse)
}

/// Whether the Job reached a terminal condition (`Complete` or `Failed`).
pub fn is_finished(job: &StoredJob) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

/// Whether the Job has or had a pod (one active, failed or succeeded): a Job that never had one is
/// a stage whose pods the cluster refused (or has not created yet).
pub fn had_pods(job: &StoredJob) -> bool {
    job.status.as_ref().is_some_and(|s| {
        s.active.unwrap_or(0) > 0 || s.failed.unwrap_or(0) > 0 || s.succeeded.unwrap_or(0) > 0
    })
}

/// A stage that ended timed out without ever getting a pod (its pods refused until its bound,
/// `PODS_NOT_CREATED_TIMEOUT` or `stageTimeout`): nothing ran on the node, so it holds no cordon.
pub fn ended_unstarted(job: &StoredJob) -> bool {
    is_finished(job) && recorded(job) == Some(Recorded::TimedOut) && !had_pods(job)
}

/// Whether the Job is suspended.
pub fn is_suspended(job: &StoredJob) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false)
}

/// The package annotation of a Job (which package, version, NodeWright and stage it runs).
pub fn package_of(job: &StoredJob) -> Option<PackageAnnotation> {
    job.package
        .as_deref()
        .and_then(|v| PackageAnnotation::parse(v).ok())
}

/// The node a Job is pinned to (its pod template's `nodeName`; the node label may be shortened).
pub fn node_of(job: &StoredJob) -> Option<&str> {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.node_name.as_deref())
}

/// A NodeWright's Jobs by name (shared with the Job store, not copied), and the nodes where a package
/// Job of ANY NodeWright is unfinished.
#[derive(Debug, Default)]
pub struct JobIndex {
    jobs: BTreeMap<String, Arc<StoredJob>>,
    /// Nodes with an unfinished package (not interrupt) Job of any NodeWright: a node's interrupt
    /// waits for every one of them (DESIGN §4.4), since a package pod tolerates the cordon and
    /// nothing else stops it from running through a reboot.
    busy_nodes: BTreeSet<String>,
}

impl JobIndex {
    /// Indexes a NodeWright's own `jobs` by name; only they count as busy nodes (tests of one
    /// NodeWright). The rollout's index is [`JobIndex::with_fleet`].
    #[cfg(test)]
    pub fn new<J: Into<Arc<StoredJob>>>(jobs: impl IntoIterator<Item = J>) -> Self {
        let jobs: Vec<Arc<StoredJob>> = jobs.into_iter().map(Into::into).collect();
        let busy_nodes = busy_nodes(&jobs);
        JobIndex {
            jobs: by_name(jobs),
            busy_nodes,
        }
    }

    /// Indexes `own` (one NodeWright's Jobs) by name, and the busy nodes from `all` (every Job the
    /// operator owns, of every NodeWright), scanned once per pass instead of once per node.
    pub fn with_fleet(
        own: impl IntoIterator<Item = Arc<StoredJob>>,
        all: &[Arc<StoredJob>],
    ) -> Self {
        JobIndex {
            jobs: by_name(own),
            busy_nodes: busy_nodes(all),
        }
    }

    /// The Job named `name`.
    pub fn get(&self, name: &str) -> Option<&StoredJob> {
        self.jobs.get(name).map(AsRef::as_ref)
    }

    /// Every Job.
    pub fn iter(&self) -> impl Iterator<Item = &StoredJob> {
        self.jobs.values().map(AsRef::as_ref)
    }

    /// Whether a package (not interrupt) Job of any indexed NodeWright is unfinished on `node`: an
    /// interrupt waits for those only (DESIGN §9: not for any pod of any NodeWright).
    pub fn unfinished_package_job_on(&self, node: &str) -> bool {
        self.busy_nodes.contains(node)
    }
}

fn by_name(jobs: impl IntoIterator<Item = Arc<StoredJob>>) -> BTreeMap<String, Arc<StoredJob>> {
    jobs.into_iter()
        .filter_map(|j| j.metadata.name.clone().map(|n| (n, j)))
        .collect()
}

fn busy_nodes(jobs: &[Arc<StoredJob>]) -> BTreeSet<String> {
    jobs.iter()
        .filter(|j| !crate::jobs::classify::is_interrupt_job(j) && !is_finished(j))
        .filter_map(|j| node_of(j).map(str::to_owned))
        .collect()
}
