//! `why`: why a NodeWright is not complete on a node, in one screen — each unfinished package's
//! stage, the attempts used of its Job's backoff limit, whether the stage timed out and from which
//! evidence, the first and last attempt pods, the last-logs snapshot, what holds the node back
//! (from the same preview `plan` computes), and the exact command that clears it.
//!
//! Every judgement is the operator's: the genuine-failure predicate, the timeout cause, the
//! attempt limit (`jobs::classify`), the recorded outcome (`state-recorded`), the blockers
//! ([`nodewright_core::preview`]).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use nodewright_core::jobs::classify::{
    DEADLINE_EXCEEDED, attempt_limit, attempts, is_disrupted, is_genuine_failure,
    terminated_with_failure, timeout_cause,
};
use nodewright_core::jobs::read::{Recorded, is_finished, recorded};
use nodewright_core::jobs::stored::{StoredJob, StoredPod};
use nodewright_core::naming::{interrupt_job_name, package_job_name};
use nodewright_core::node::state::parse_state;
use nodewright_core::preview::{Blocker, NodePreview, preview};
use nodewright_core::rollout::stages::package_done;
use nodewright_shared::api::{NodeWright, Status};
use nodewright_shared::keys;
use nodewright_shared::node_state::{Stage, State};
use serde::Serialize;

use super::plan::{explain, rerun_command, snapshot};
use crate::args::WhyArgs;
use crate::cluster;
use crate::context::Ctx;
use crate::error::{CliError, Result};
use crate::output::{Render, print};

/// What `why` found.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WhyReport {
    nodewright: String,
    /// Nodes explained (the one asked for, or every node that is not complete).
    nodes: Vec<NodeWhy>,
    /// Selected nodes already complete (when no node was named).
    complete_nodes: usize,
}

/// One node.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeWhy {
    node: String,
    /// Its status as the operator computes it now.
    status: Status,
    complete: bool,
    compartment: Option<String>,
    batch: Option<i32>,
    /// What holds it back, each with the command that clears it.
    blockers: Vec<Reason>,
    /// Its packages that are not done (or the one asked for).
    packages: Vec<PackageWhy>,
}

/// A reason with its fix.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Reason {
    text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    detail: Blocker,
}

/// One package on the node.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PackageWhy {
    package: String,
    version: String,
    /// Its record's stage and state (absent: it has not started here).
    stage: Option<Stage>,
    state: Option<State>,
    done: bool,
    /// The Job of its current stage.
    job: Option<String>,
    /// running, suspended, succeeded, failed (reason), failure-target.
    job_state: Option<String>,
    /// Genuine failed attempts.
    attempts: Option<i64>,
    /// backoffLimit + 1 (none for an interrupt, bounded by its deadline).
    attempt_limit: Option<i64>,
    timed_out: bool,
    /// The cause, as the operator states it in its StageTimedOut Event.
    cause: Option<String>,
    /// Which evidence says so: DeadlineExceeded, an exit code, a kubelet rejection.
    evidence: Vec<String>,
    first_attempt: Option<Attempt>,
    last_attempt: Option<Attempt>,
    last_logs: Option<String>,
    /// The apiserver's refusal of the Job's pod, while the Job has never had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pods_not_created: Option<String>,
    /// An attempt waiting on an image the kubelet cannot pull: the container, image and message.
    #[serde(skip_serializing_if = "Option::is_none")]
    image_pull_failing: Option<String>,
    /// StageTimedOut Events about it on the node.
    events: Vec<String>,
    /// What to do.
    next: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
}

/// An attempt pod.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Attempt {
    pod: String,
    phase: Option<String>,
    /// Why it ended: DeadlineExceeded, `exit code N in container C`, a rejection reason...
    reason: String,
}

impl Render for WhyReport {
    fn table(&self, wide: bool) -> String {
        let mut out = String::new();
        if self.nodes.is_empty() {
            out.push_str(&format!(
                "NodeWright {} is complete on every node it selects ({} node(s)).\n",
                self.nodewright, self.complete_nodes
            ));
            return out;
        }
        let several = self.nodes.len() > 1;
        if several {
            out.push_str(&format!(
                "NodeWright {}: {} node(s) not complete, {} complete.\n\n",
                self.nodewright,
                self.nodes.len(),
                self.complete_nodes
            ));
        }
        for n in &self.nodes {
            out.push_str(&format!(
                "Node {}: {}{}\n",
                n.node,
                n.status,
                match (&n.compartment, n.batch) {
                    (Some(c), Some(b)) => format!(" (compartment {c}, batch {b})"),
                    (Some(c), None) => format!(" (compartment {c})"),
                    _ => String::new(),
                }
            ));
            for b in &n.blockers {
                out.push_str(&format!("  blocked: {}\n", b.text));
                if let Some(c) = &b.command {
                    out.push_str(&format!("    clear it: {c}\n"));
                }
            }
            for p in &n.packages {
                if several && !wide && p.done {
                    continue;
                }
                let at = match (p.stage, p.state) {
                    (Some(stage), Some(state)) => format!("stage {stage}, {state}"),
                    (Some(stage), None) => format!("stage {stage}"),
                    _ => "not started".to_owned(),
                };
                out.push_str(&format!("  package {}:{} — {at}", p.package, p.version));
                if let (Some(used), Some(limit)) = (p.attempts, p.attempt_limit) {
                    out.push_str(&format!(", {used} of {limit} attempts used"));
                } else if let Some(used) = p.attempts.filter(|a| *a > 0) {
                    out.push_str(&format!(", {used} failed attempt(s)"));
                }
                out.push('\n');
                if let (Some(job), Some(state)) = (&p.job, &p.job_state) {
                    out.push_str(&format!("    job: {job} ({state})\n"));
                }
                if p.timed_out {
                    out.push_str(&format!(
                        "    timed out: {}\n",
                        p.cause
                            .as_deref()
                            .unwrap_or("retries spent on genuine failures")
                    ));
                }
                for e in &p.evidence {
                    out.push_str(&format!("    evidence: {e}\n"));
                }
                if let Some(a) = &p.first_attempt {
                    out.push_str(&format!(
                        "    first attempt: pod {} — {}\n",
                        a.pod, a.reason
                    ));
                }
                if let Some(a) = &p.last_attempt {
                    out.push_str(&format!(
                        "    last attempt:  pod {} — {}\n",
                        a.pod, a.reason
                    ));
                }
                if let Some(refusal) = &p.pods_not_created {
                    out.push_str(&format!("    pods not created: {refusal}\n"));
                }
                if let Some(wait) = &p.image_pull_failing {
                    out.push_str(&format!("    image not pulled: {wait}\n"));
                }
                if let Some(logs) = &p.last_logs {
                    out.push_str("    last-logs:\n");
                    for line in logs.lines().take(if several { 3 } else { 20 }) {
                        out.push_str(&format!("      {line}\n"));
                    }
                }
                for e in &p.events {
                    out.push_str(&format!("    event: {e}\n"));
                }
                out.push_str(&format!("    next: {}\n", p.next));
                if let Some(c) = &p.command {
                    out.push_str(&format!("    clear it: {c}\n"));
                }
            }
            if several {
                out.push('\n');
            }
        }
        out
    }
}

/// The Job of `stage` of a package on a node (the node's interrupt Job for interrupt stages).
fn stage_job<'a>(
    jobs: &'a [Job],
    nodewright: &str,
    package: &str,
    version: &str,
    stage: Stage,
    node: &str,
) -> Option<&'a Job> {
    let name = if stage.is_interrupt() {
        interrupt_job_name(nodewright, node)
    } else {
        package_job_name(nodewright, package, version, stage, node)
    };
    jobs.iter()
        .find(|j| j.metadata.name.as_deref() == Some(&name))
}

/// A Job's state in a word or two.
fn job_state(job: &Job) -> String {
    let stored = StoredJob::of(job);
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let active = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t && c.status == "True")
    };
    let recorded_text = recorded(&stored)
        .map(|r| format!(", recorded {}", r.as_str()))
        .unwrap_or_default();
    if active("Complete").is_some() {
        return format!("succeeded{recorded_text}");
    }
    if let Some(c) = active("Failed") {
        return format!(
            "failed: {}{recorded_text}",
            c.reason.as_deref().unwrap_or("unknown reason")
        );
    }
    if active("FailureTarget").is_some() {
        return "failing (FailureTarget: its pods have not terminated)".into();
    }
    if job.spec.as_ref().and_then(|s| s.suspend) == Some(true) {
        return "suspended (paused)".into();
    }
    "running".into()
}

/// Why an attempt pod ended (or where it is); `stored` is its form the operator's predicates read.
fn attempt_reason(pod: &Pod, stored: &StoredPod) -> String {
    let Some(status) = stored.status.as_ref() else {
        return "no status yet".into();
    };
    if is_disrupted(stored) {
        return format!(
            "disrupted by the cluster ({}): does not count as an attempt",
            status.reason.as_deref().unwrap_or("DisruptionTarget")
        );
    }
    if status.reason.as_deref() == Some(DEADLINE_EXCEEDED) {
        return format!(
            "DeadlineExceeded: ran past its stageTimeout (activeDeadlineSeconds {})",
            pod.spec
                .as_ref()
                .and_then(|s| s.active_deadline_seconds)
                .map_or_else(|| "-".to_owned(), |s| s.to_string())
        );
    }
    let containers: Vec<_> = status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten()
        .collect();
    if let Some((c, code)) = containers.iter().find_map(|c| {
        terminated_with_failure(c)
            .then(|| {
                c.state
                    .as_ref()?
                    .terminated
                    .as_ref()
                    .map(|t| (c, t.exit_code))
            })
            .flatten()
    }) {
        return format!("exit code {code} in container {}", c.name);
    }
    if status.phase.as_deref() == Some("Failed") && containers.is_empty() {
        return format!(
            "rejected by the kubelet: {}{} (never started: not an attempt)",
            status.reason.as_deref().unwrap_or("unknown reason"),
            status
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        );
    }
    if let Some((c, reason)) = containers.iter().find_map(|c| {
        c.state
            .as_ref()?
            .waiting
            .as_ref()
            .map(|w| (c, w.reason.clone().unwrap_or_default()))
    }) {
        return format!("container {} waiting: {reason}", c.name);
    }
    status.phase.clone().unwrap_or_else(|| "Pending".into())
}

/// The evidence a stage's pods give: deadlines, exit codes, kubelet rejections.
fn evidence(pods: &[StoredPod]) -> Vec<String> {
    let mut out = Vec::new();
    let genuine: Vec<&StoredPod> = pods.iter().filter(|p| is_genuine_failure(p)).collect();
    let deadline = genuine
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.reason.as_deref()) == Some(DEADLINE_EXCEEDED))
        .count();
    if deadline > 0 {
        out.push(format!("DeadlineExceeded on {deadline} attempt(s)"));
    }
    let exits = genuine.len() - deadline;
    if exits > 0 {
        out.push(format!("a non-zero exit code on {exits} attempt(s)"));
    }
    let rejected: Vec<String> = pods
        .iter()
        .filter(|p| {
            p.status.as_ref().is_some_and(|s| {
                s.phase.as_deref() == Some("Failed")
                    && s.init_container_statuses.as_ref().is_none_or(Vec::is_empty)
                    && s.container_statuses.as_ref().is_none_or(Vec::is_empty)
                    && s.reason.as_deref() != Some(DEADLINE_EXCEEDED)
            })
        })
        .filter_map(|p| p.status.as_ref()?.reason.clone())
        .collect();
    if !rejected.is_empty() {
        out.push(format!(
            "kubelet rejections (not counted): {}",
            rejected.join(", ")
        ));
    }
    out
}

/// The pods of a Job.
fn job_pods<'a>(pods: &'a [Pod], job: &Job) -> Vec<&'a Pod> {
    let uid = job.metadata.uid.as_deref();
    let mut v: Vec<&Pod> = pods
        .iter()
        .filter(|p| {
            p.owner_references()
                .iter()
                .any(|o| o.kind == "Job" && Some(o.uid.as_str()) == uid)
        })
        .collect();
    v.sort_by(|a, b| {
        (a.creation_timestamp(), a.name_any()).cmp(&(b.creation_timestamp(), b.name_any()))
    });
    v
}

/// Explains one package on one node.
fn package_why(
    nw: &NodeWright,
    node: &Node,
    package: &str,
    jobs: &[Job],
    pods: &[Pod],
    events: &[String],
    preview: &NodePreview,
) -> PackageWhy {
    let name = nw.name_any();
    let node_name = node.name_any();
    let spec = nw.spec.packages.get(package);
    let version = spec.map(|p| p.version.clone()).unwrap_or_default();
    let record = parse_state(node, &name).and_then(|s| s.get(package, &version).cloned());
    let done = spec.is_some_and(|p| package_done(p, record.as_ref()));
    let job = record
        .as_ref()
        .and_then(|r| stage_job(jobs, &name, package, &version, r.stage, &node_name));
    let job_pods = job.map(|j| job_pods(pods, j)).unwrap_or_default();
    // The forms the operator's predicates read.
    let stored_job = job.map(StoredJob::of);
    let stored: Vec<StoredPod> = job_pods.iter().map(|p| StoredPod::of(p)).collect();
    let genuine = attempts(&stored);
    let timed_out = stored_job.as_ref().and_then(recorded) == Some(Recorded::TimedOut)
        && record.as_ref().and_then(|r| r.state) == Some(State::Erroring);
    let used = record
        .as_ref()
        .map(|r| i64::from(r.restarts).max(i64::from(genuine)));
    let (first_attempt, last_attempt) = shown_attempts(&job_pods, &stored);
    let stage = record.as_ref().map(|r| r.stage);
    let pkg_events: Vec<String> = events
        .iter()
        .filter(|e| e.contains(&format!("[{package}:{version}]")))
        .cloned()
        .collect();
    let erroring = record.as_ref().and_then(|r| r.state) == Some(State::Erroring);
    let running = stored_job.as_ref().is_some_and(|j| !is_finished(j));
    let situation = Situation {
        nodewright: &name,
        package,
        node: &node_name,
        stage,
        job,
        done,
        timed_out,
        erroring,
        running,
    };
    let (next, command) = next_step(&situation, preview);
    PackageWhy {
        package: package.to_owned(),
        version,
        stage,
        state: record.as_ref().and_then(|r| r.state),
        done,
        job: job.map(ResourceExt::name_any),
        job_state: job.map(job_state),
        attempts: used,
        attempt_limit: stored_job.as_ref().and_then(attempt_limit),
        timed_out,
        cause: timed_out
            .then(|| stored_job.as_ref().map(|j| timeout_cause(j, &stored)))
            .flatten(),
        evidence: evidence(&stored),
        first_attempt,
        last_attempt,
        last_logs: job.and_then(|j| j.annotations().get(keys::LAST_LOGS_ANNOTATION).cloned()),
        pods_not_created: job.and_then(|j| {
            j.annotations()
                .get(keys::PODS_NOT_CREATED_ANNOTATION)
                .cloned()
        }),
        image_pull_failing: job.filter(|_| running).and_then(|j| {
            j.annotations()
                .get(keys::IMAGE_PULL_FAILING_ANNOTATION)
                .cloned()
        }),
        events: pkg_events,
        next,
        command,
    }
}

/// What `why` knows of one package on one node when it chooses the next step.
struct Situation<'a> {
    nodewright: &'a str,
    package: &'a str,
    node: &'a str,
    /// The recorded stage, if any.
    stage: Option<Stage>,
    /// The Job of the recorded stage, if any.
    job: Option<&'a Job>,
    done: bool,
    timed_out: bool,
    erroring: bool,
    /// The stage's Job has not finished.
    running: bool,
}

/// The next step for the package (what `why` prints after "next:") and the command that takes it,
/// if one does: the first that applies of done, timed out, pods not created, image not pulled, a
/// genuine failure retried, running, and what the preview says the node waits for.
fn next_step(s: &Situation<'_>, preview: &NodePreview) -> (String, Option<String>) {
    if s.done {
        ("done".to_owned(), None)
    } else if s.timed_out {
        (
            "fix the cause (see the evidence and logs), then rerun the stage".to_owned(),
            s.stage
                .map(|stage| rerun_command(s.nodewright, s.package, s.node, stage)),
        )
    } else if s.running
        && s.job.is_some_and(|j| {
            j.annotations()
                .contains_key(keys::PODS_NOT_CREATED_ANNOTATION)
        })
    {
        (
            "its pod cannot be created (see above): fix what refuses it (the namespace's Pod Security level, a ResourceQuota, an admission webhook); the Job controller keeps trying".to_owned(),
            Some(format!(
                "kubectl get events -n {} --field-selector involvedObject.name={},reason=FailedCreate",
                s.job.and_then(|j| j.metadata.namespace.clone()).unwrap_or_default(),
                s.job.map(ResourceExt::name_any).unwrap_or_default()
            )),
        )
    } else if s.running
        && s.job.is_some_and(|j| {
            j.annotations()
                .contains_key(keys::IMAGE_PULL_FAILING_ANNOTATION)
        })
    {
        (
            "an attempt waits on an image the kubelet cannot pull (see above): fix the package's image (or containerSHA, or the pull secret); the kubelet keeps retrying and the stage runs once it pulls, within its stageTimeout".to_owned(),
            None,
        )
    } else if s.erroring && s.running {
        (
            "a genuine failure; the Job retries within its backoff limit".to_owned(),
            Some(format!(
                "kubectl nodewright package logs {} --nodewright {} --node {}",
                s.package, s.nodewright, s.node
            )),
        )
    } else if s.running {
        ("its stage Job runs now".to_owned(), None)
    } else if let Some(b) = preview
        .blockers
        .iter()
        .find(|b| matches!(b, Blocker::Dependency { package: p, .. } if p == s.package))
        .or_else(|| {
            preview
                .blockers
                .iter()
                .find(|b| !matches!(b, Blocker::Dependency { .. } | Blocker::TimedOut { .. }))
        })
    {
        let (text, command) = explain(b, s.nodewright, s.node);
        (format!("waits: {text}"), command)
    } else {
        ("starts with the node's next pass".to_owned(), None)
    }
}

/// The attempts that show what happened, as (first, last): the genuine failures, else the pods
/// (the last only when there is more than one).
fn shown_attempts(pods: &[&Pod], stored: &[StoredPod]) -> (Option<Attempt>, Option<Attempt>) {
    let pairs: Vec<(&Pod, &StoredPod)> = pods.iter().copied().zip(stored.iter()).collect();
    let attempt = |(p, s): &(&Pod, &StoredPod)| Attempt {
        pod: p.name_any(),
        phase: s.status.as_ref().and_then(|s| s.phase.clone()),
        reason: attempt_reason(p, s),
    };
    let failed: Vec<(&Pod, &StoredPod)> = pairs
        .iter()
        .filter(|(_, s)| is_genuine_failure(s))
        .copied()
        .collect();
    let shown = if failed.is_empty() { pairs } else { failed };
    let first = shown.first().map(&attempt);
    let last = (shown.len() > 1)
        .then(|| shown.last().map(&attempt))
        .flatten();
    (first, last)
}

/// Runs `why`.
pub async fn run(ctx: &Ctx, args: &WhyArgs) -> Result<()> {
    let name = &args.name;
    let nw = cluster::nodewright(ctx, name).await?;
    if let Some(p) = &args.package
        && !nw.spec.packages.contains_key(p)
    {
        super::package::spec_package(&nw, p)?;
    }
    let (snap, _) = snapshot(ctx, nw.clone(), Vec::new()).await?;
    if let Some(node) = &args.node
        && !snap.nodes.iter().any(|n| n.name_any() == *node)
    {
        return Err(CliError::NotFound(format!(
            "no node named {node:?}: list the nodes with `kubectl get nodes`"
        )));
    }
    let p = preview(&snap).map_err(|e| CliError::Invalid(e.to_string()))?;
    if let Some(node) = &args.node
        && !p.nodes.iter().any(|n| n.name == *node)
    {
        return Err(CliError::NotFound(format!(
            "NodeWright {name} does not select node {node} (see its spec.nodeSelectors)"
        )));
    }
    let pods = cluster::pods(ctx, name).await?;
    let explained: Vec<&NodePreview> = p
        .nodes
        .iter()
        .filter(|n| match &args.node {
            Some(node) => n.name == *node,
            None => !n.complete,
        })
        .collect();
    let mut nodes = Vec::new();
    for n in explained {
        let Some(node) = snap.nodes.iter().find(|x| x.name_any() == n.name) else {
            continue;
        };
        let events: Vec<String> = cluster::events(ctx, "Node", &n.name)
            .await?
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("StageTimedOut"))
            .filter_map(|e| e.message)
            .collect();
        let packages = nw
            .spec
            .packages
            .keys()
            .filter(|k| args.package.as_ref().is_none_or(|p| p == *k))
            .map(|k| package_why(&nw, node, k, &snap.jobs, &pods, &events, n))
            .collect();
        nodes.push(NodeWhy {
            node: n.name.clone(),
            status: n.status,
            complete: n.complete,
            compartment: n.compartment.clone(),
            batch: n.batch,
            blockers: n
                .blockers
                .iter()
                .filter(|b| !matches!(b, Blocker::TimedOut { .. } | Blocker::Dependency { .. }))
                .map(|b| {
                    let (text, command) = explain(b, name, &n.name);
                    Reason {
                        text,
                        command,
                        detail: b.clone(),
                    }
                })
                .collect(),
            packages,
        });
    }
    print(
        ctx.format(),
        &WhyReport {
            nodewright: name.clone(),
            complete_nodes: p.nodes.iter().filter(|n| n.complete).count(),
            nodes,
        },
    )
}
