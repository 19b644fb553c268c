//! Carrying out a [`Plan`] on one node: record the node state (with the resourceVersion
//! precondition) first, then cordon/drain and create the Jobs. Recording first means a crash between
//! the two leaves "in progress, no Job", which the next pass repairs by creating the Job; the other
//! order could leave a running Job the state does not know about.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_shared::api::{HealthGates, NodeWright, Status};
use nodewright_shared::keys;
use nodewright_shared::node_state::{NodeState, Stage, State};
use tracing::{debug, info};

use super::configmap_sync;
use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::NodeWriteError;
use nodewright_core::jobs::read::{JobIndex, Recorded};
use nodewright_core::jobs::{
    InterruptJobInput, PackageJobInput, build_interrupt_job, build_package_job,
};
use nodewright_core::node::cordon;
use nodewright_core::node::drain::{self, DrainOptions};
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::node::health_gates::{self, GateMark, Verdict};
use nodewright_core::node::runtime_cordon;
use nodewright_core::node::state::{parse_state, status_edit};
use nodewright_core::rollout::absorb;
use nodewright_core::rollout::disruption::{CapState, Grant, Rank};
use nodewright_core::rollout::graph;
use nodewright_core::rollout::plan::{Creation, Plan, plan_node};
use nodewright_core::rollout::runtime_taint;
use nodewright_core::rollout::status::{NodeFacts, any_erroring, node_status};

/// Reads a node from the API server (not the cache) with its parsed state; `None` when it is gone.
pub async fn reread(
    ctx: &Context,
    nodewright: &str,
    node: &str,
) -> Result<Option<(Node, Option<NodeState>)>, ReconcileError> {
    let fresh = ctx.writer.read_node(node).await?;
    Ok(fresh.map(|n| {
        let state = parse_state(&n, nodewright);
        (n, state)
    }))
}

/// What happened on the node.
#[derive(Debug, Clone)]
pub struct NodeResult {
    /// The node's records after this pass.
    pub state: NodeState,
    /// Its status.
    pub status: Status,
    /// Work is held back until the node drains (nothing else will trigger the next pass).
    pub draining: bool,
    /// The node waits at its health gates (not failed): they are observed again soon.
    pub at_gates: bool,
    /// The cluster-wide disruption cap held its cordon back (the cap as counted then).
    pub cap_held: Option<CapState>,
}

/// What the pass hands [`advance`] for one node.
pub struct NodeWork {
    /// The node as cached.
    pub node: Node,
    /// Its records, with the completed Jobs in `absorbed` folded in ([`absorb`]).
    pub state: NodeState,
    /// Completed Jobs whose outcome `state` carries: marked recorded once it is written.
    pub absorbed: Vec<String>,
    /// The pass's plan of the node from `state`, if it made one.
    pub plan: Option<Plan>,
    /// `SKYHOOK_NODE_ORDER` of the node.
    pub node_order: i64,
}

/// Advances `nodewright` (defaulted) on a node, starting from the pass's plan when it made one.
/// Retries with a fresh read when the cache was stale or the node changed under the write.
pub async fn advance(
    ctx: &Context,
    nodewright: &NodeWright,
    work: NodeWork,
    jobs: &JobIndex,
    all_nodewrights: &[Arc<NodeWright>],
    gates: Option<&HealthGates>,
) -> Result<NodeResult, ReconcileError> {
    let NodeWork {
        node,
        mut state,
        mut absorbed,
        plan: first_plan,
        node_order,
    } = work;
    let nw = nodewright.name_any();
    let name = node.name_any();
    let rank = Rank::of(nodewright);
    let drain_options =
        DrainOptions::of(nodewright.spec.drain_config.as_ref()).map_err(|source| {
            ReconcileError::DrainConfig {
                nodewright: nw.clone(),
                source,
            }
        })?;
    let mut node = node;
    let mut fresh = false;
    // The pass already planned this node from the same cached state: the first attempt uses that.
    let mut first_plan = first_plan;
    for attempt in 0..4 {
        let p = match first_plan.take() {
            Some(p) => p,
            None => plan_node(nodewright, &name, &state, jobs, fresh),
        };
        if p.stale && !fresh {
            debug!(node = %name, "cached node may be stale for a rerun decision; reading it");
            match reread(ctx, &nw, &name).await? {
                Some((n, Some(s))) => {
                    node = n;
                    (state, absorbed) = absorb::completions(nodewright, &name, s, jobs);
                    fresh = true;
                    continue;
                }
                _ => break,
            }
        }
        let cleared = cleared_timeouts(nodewright, &state, &p);
        if !cleared.is_empty()
            && super::job_lifecycle::any_exists(ctx, &timed_out_jobs(&nw, &name, &cleared)).await?
        {
            // A timed-out stage's Job is still there: the Job store has not caught up. Its record
            // stays erroring and the Job stays as the evidence; the store's event re-plans.
            debug!(node = %name, "a timed-out Job the store does not show yet still exists; waiting for the store");
            return Ok(NodeResult {
                status: node_status(NodeFacts {
                    complete: false,
                    erroring: true,
                    active: true,
                    ..NodeFacts::default()
                }),
                state,
                draining: false,
                at_gates: false,
                cap_held: None,
            });
        }
        let all_done = graph::all_done(&nodewright.spec.packages, &p.state);
        let gates = health_gates::configured(gates);
        let at_gates = health_gates::at_gates(gates, &node, &nw, all_done);
        if at_gates && !fresh {
            // Gates are judged on the node as the API server has it (the cache keeps none of the
            // kubelet's conditions), and the write that follows is guarded by that very version:
            // a node is never uncordoned on an observation older than the node it writes.
            match reread(ctx, &nw, &name).await? {
                Some((n, Some(s))) => {
                    let same = n.metadata.resource_version == node.metadata.resource_version;
                    node = n;
                    fresh = true;
                    if !same {
                        (state, absorbed) = absorb::completions(nodewright, &name, s, jobs);
                        continue;
                    }
                }
                _ => break,
            }
        }
        let mut gate_verdict = None;
        if let Some(gates) = gates.filter(|_| at_gates) {
            let now = ctx.now();
            let before = health_gates::mark(&node, &nw);
            let since = before.as_ref().map_or(now, |m| m.since_or(now));
            let observed = super::health_gates::observe(ctx, gates, &node).await;
            let verdict = health_gates::judge(gates, &observed, since, now);
            let after = before
                .clone()
                .unwrap_or_else(|| GateMark::starting(now))
                .after(&verdict, now);
            gate_verdict = Some((before, after, verdict));
        }
        let gates_passed = gate_verdict
            .as_ref()
            .is_none_or(|(_, _, v)| *v == Verdict::Passed);
        let gate_failed = gate_verdict
            .as_ref()
            .is_some_and(|(_, _, v)| matches!(v, Verdict::Failed { .. }));
        let complete = all_done && gates_passed;
        // A drain past drainConfig.timeout (still cordoned, not drained): the node is erroring and
        // stays cordoned; nothing is forced.
        let drain_timed_out = !complete
            && cordon::holds_cordon(&node, &nw)
            && drain_started(&node, &nw)
                .is_some_and(|started| drain::timed_out(started, drain_options.timeout, ctx.now()));
        let status = node_status(NodeFacts {
            complete,
            erroring: any_erroring(nodewright, &p.state) || drain_timed_out || gate_failed,
            active: true,
            ..NodeFacts::default()
        });
        let mut edit = NodeEdit::default();
        // Against what the node holds, not `state`: absorbed outcomes are not written yet.
        if parse_state(&node, &nw).as_ref() != Some(&p.state)
            || !node.annotations().contains_key(&keys::node_state_key(&nw))
        {
            edit.annotate(keys::node_state_key(&nw), p.state.to_annotation());
        }
        status_edit(&mut edit, &nw, status);
        // Someone uncordoned the node under the persistent cordon's mark: the mark goes with this
        // write (nothing is written for it otherwise), and the node is not cordoned again.
        runtime_cordon::clear_stale(&mut edit, &node);
        // The wait at the gates: recorded while it lasts, gone once passed or when the packages
        // have work again.
        let gate_mark = gate_verdict
            .as_ref()
            .and_then(|(_, after, _)| after.as_ref());
        health_gates::record(&mut edit, &node, &nw, gate_mark);
        let mut reserved = false;
        let mut cap_held = None;
        if complete {
            cordon::uncordon(&mut edit, &node, &nw);
            // Complete in this very write: the runtime-required taint goes with it when this was
            // the last runtimeRequired NodeWright to finish here (and the persistent cordon comes
            // with it when one of them asks for it).
            if nodewright.spec.runtime_required
                && runtime_taint::runtime_ready_with(all_nodewrights, &node, Some((&nw, &p.state)))
            {
                runtime_taint::lift(
                    &mut edit,
                    &node,
                    &ctx.config.jobs.runtime_required_taint,
                    runtime_taint::cordon_after_wanted(all_nodewrights, &node),
                );
            }
        } else if p.cordon && !cordon::holds_cordon(&node, &nw) {
            // The node's first cordon may need a slot of the cluster-wide disruption cap; held,
            // its disruptive stages wait (they start only under this NodeWright's cordon).
            match ctx.disruption.request(&ctx.nodes, &node, &rank) {
                Grant::Held(cap) => {
                    debug!(node = %name, ?cap, "the cluster-wide disruption cap holds the cordon back");
                    cap_held = Some(cap);
                }
                grant => {
                    reserved = grant == Grant::Reserved;
                    cordon::cordon(&mut edit, &node, &nw);
                }
            }
        } else if p.release_cordon && cordon::holds_cordon(&node, &nw) {
            // A disruptive stage ended without a pod ever running: nothing holds the node.
            cordon::uncordon(&mut edit, &node, &nw);
        } else if gate_failed && gates.is_some_and(HealthGates::uncordons_on_failure) {
            // `onFailure: Uncordon`: the failed node takes workloads again (still erroring).
            cordon::uncordon(&mut edit, &node, &nw);
        }
        // Announced once, when the timeout turns the node erroring (not on every drain recheck).
        let announce_timeout = drain_timed_out
            && node
                .annotations()
                .get(&keys::node_status_key(&nw))
                .map(String::as_str)
                != Some(Status::Erroring.as_str());
        let applied = ctx.writer.apply_node_edit(&node, &edit).await;
        if reserved {
            match &applied {
                Ok(Some(updated)) => ctx
                    .disruption
                    .written(&name, updated.metadata.resource_version.as_deref()),
                _ => ctx.disruption.withdraw(&name),
            }
        }
        match applied {
            Ok(Some(updated)) => node = updated,
            Ok(None) => {}
            Err(NodeWriteError::Conflict { .. }) if attempt < 3 => {
                debug!(node = %name, "node changed under the write; re-reading");
                match reread(ctx, &nw, &name).await? {
                    Some((n, Some(s))) => {
                        node = n;
                        (state, absorbed) = absorb::completions(nodewright, &name, s, jobs);
                        fresh = true;
                        continue;
                    }
                    _ => break,
                }
            }
            Err(e) => return Err(e.into()),
        }
        if announce_timeout {
            announce_drain_timeout(ctx, nodewright, &node, &drain_options).await;
        }
        if let Some((before, _, verdict)) = &gate_verdict {
            let uncordons = gates.is_some_and(HealthGates::uncordons_on_failure);
            announce_gates(ctx, nodewright, &node, before.as_ref(), uncordons, verdict).await;
        }
        // The next stages first (the rollout's critical path), then the absorbed Jobs' marks.
        let draining = execute(ctx, nodewright, &node, &p, node_order, &drain_options).await?;
        mark_absorbed(ctx, &absorbed).await?;
        if !cleared.is_empty() {
            announce_cleared(ctx, nodewright, &node, &cleared).await;
        }
        return Ok(NodeResult {
            state: p.state,
            status,
            draining,
            at_gates: at_gates && !gates_passed && !gate_failed,
            cap_held,
        });
    }
    // The node vanished or its state became unreadable while we worked: report it blocked.
    Ok(NodeResult {
        state,
        status: Status::Blocked,
        draining: false,
        at_gates: false,
        cap_held: None,
    })
}

/// Announces a node's gates once per change: a Warning `GateFailed` Event (on the NodeWright and
/// the node) when a gate's timeout passes and the node turns erroring; a log line when a wait
/// begins and when the gates pass.
async fn announce_gates(
    ctx: &Context,
    nodewright: &NodeWright,
    node: &Node,
    before: Option<&GateMark>,
    uncordons: bool,
    verdict: &Verdict,
) {
    let name = node.name_any();
    let nw = nodewright.name_any();
    match verdict {
        Verdict::Failed { gate, saw } if !before.is_some_and(|m| m.failed) => {
            let note = format!(
                "Node [{name}] did not pass health gate {gate} within its timeout: {saw}; it is erroring ({}), a failed node of its batch, and completes if the gate passes later",
                if uncordons {
                    "uncordoned: onFailure Uncordon"
                } else {
                    "it stays cordoned"
                }
            );
            ctx.events
                .warn_on_nodewright(nodewright, health_gates::GATE_FAILED, note.clone(), None)
                .await;
            ctx.events
                .warn_on_node(node, health_gates::GATE_FAILED, note, None)
                .await;
        }
        Verdict::Passed if before.is_some() => {
            info!(node = %name, nodewright = %nw, "health gates passed; the node is uncordoned and complete");
        }
        Verdict::Waiting { gate, saw, .. } if before.is_none() => {
            info!(node = %name, nodewright = %nw, %gate, %saw, "packages finished; waiting at the health gates");
        }
        _ => {}
    }
}

/// Marks the completed Jobs whose outcomes a node write just recorded ([`absorb`]).
pub async fn mark_absorbed(ctx: &Context, absorbed: &[String]) -> Result<(), ReconcileError> {
    for job in absorbed {
        ctx.writer
            .mark_job_recorded(
                job,
                Recorded::Complete,
                ctx.config.jobs.defaults.ttl_succeeded_seconds(),
            )
            .await?;
        ctx.metrics
            .stages()
            .absorbed(&ctx.jobs, &ctx.pods, &ctx.config.jobs.namespace, job);
        debug!(%job, "outcome recorded with the node's next stage");
    }
    Ok(())
}

/// The stages this pass starts again over an `erroring` record of the same stage: a timed-out stage
/// whose Job went away (failed-Job TTL, a package change, a user deleting the evidence) runs again.
/// Each gets a Normal Event on the NodeWright and the node, the counterpart of the outcome path's
/// `StageTimedOut` Warning.
fn cleared_timeouts<'a>(
    nodewright: &'a NodeWright,
    previous: &NodeState,
    p: &'a Plan,
) -> Vec<(&'a str, &'a str, Stage)> {
    p.create
        .iter()
        .map(|c| match c {
            Creation::Package { key, stage, .. } => (key.as_str(), *stage),
            Creation::Interrupt { merged, stage } => (merged.owner.as_str(), *stage),
        })
        .filter_map(|(key, stage)| {
            let version = nodewright.spec.packages.get(key)?.version.as_str();
            previous
                .get(key, version)
                .filter(|r| r.stage == stage && r.state == Some(State::Erroring))
                .map(|_| (key, version, stage))
        })
        .collect()
}

/// The Job names of the stages in `cleared`.
fn timed_out_jobs(nodewright: &str, node: &str, cleared: &[(&str, &str, Stage)]) -> Vec<String> {
    cleared
        .iter()
        .map(|(package, version, stage)| {
            if stage.is_interrupt() {
                nodewright_core::naming::interrupt_job_name(nodewright, node)
            } else {
                nodewright_core::naming::package_job_name(
                    nodewright, package, version, *stage, node,
                )
            }
        })
        .collect()
}

async fn announce_cleared(
    ctx: &Context,
    nodewright: &NodeWright,
    node: &Node,
    cleared: &[(&str, &str, Stage)],
) {
    let name = node.name_any();
    let jobs = timed_out_jobs(&nodewright.name_any(), &name, cleared);
    for ((package, version, stage), job) in cleared.iter().zip(jobs) {
        let note = format!(
            "Package [{package}:{version}] stage [{stage}] on node [{name}] is no longer timed out: the stage runs again"
        );
        let related = crate::writes::job_ref(&ctx.config.jobs.namespace, &job);
        ctx.events
            .on_nodewright(
                nodewright,
                STAGE_TIMEOUT_CLEARED,
                note.clone(),
                Some(related.clone()),
            )
            .await;
        ctx.events
            .on_node(node, STAGE_TIMEOUT_CLEARED, note, Some(related))
            .await;
    }
}

/// Event reason of a drain that ran past `drainConfig.timeout`.
pub const DRAIN_TIMEOUT: &str = "DrainTimeout";

/// When this NodeWright's drain of `node` first found it not drained
/// ([`keys::drain_start_key`]), if it is still draining.
fn drain_started(node: &Node, nodewright: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    node.annotations()
        .get(&keys::drain_start_key(nodewright))
        .and_then(|v| v.parse().ok())
}

/// Keeps the drain-start mark under a `drainConfig.timeout`: written when the drain first finds
/// the node not drained (so the bound survives restarts), removed once it drained. A failed write
/// is retried by the next pass (the drain's own requeue).
async fn note_drain_start(
    ctx: &Context,
    node: &Node,
    nodewright: &str,
    drained: bool,
    options: &DrainOptions,
) {
    let key = keys::drain_start_key(nodewright);
    let marked = node.annotations().contains_key(&key);
    let mut edit = NodeEdit::default();
    match (drained, marked) {
        (false, false) if options.timeout.is_some() => {
            edit.annotate(key, ctx.now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        }
        (true, true) => edit.remove_annotation(key),
        _ => return,
    }
    if let Err(e) = ctx.writer.apply_node_edit(node, &edit).await {
        debug!(node = %node.name_any(), error = %e, "the drain-start mark was not written; the next pass retries");
    }
}

/// A Warning Event on the NodeWright and the node: the drain ran past its bound.
async fn announce_drain_timeout(
    ctx: &Context,
    nodewright: &NodeWright,
    node: &Node,
    options: &DrainOptions,
) {
    let name = node.name_any();
    let bound = options
        .timeout
        .map(|t| format!("{}s", t.as_secs()))
        .unwrap_or_default();
    let note = format!(
        "Node [{name}] did not drain within drainConfig.timeout ({bound}): it stays cordoned and erroring; the pods still on it hold the drain (kubectl get pods -A --field-selector spec.nodeName={name})"
    );
    ctx.events
        .warn_on_nodewright(nodewright, DRAIN_TIMEOUT, note.clone(), None)
        .await;
    ctx.events
        .warn_on_node(node, DRAIN_TIMEOUT, note, None)
        .await;
}

/// Event reason of a stage held back while the Jobs an earlier version left in the operator's
/// namespace are settled (`runtime::legacy_jobs`).
pub const SETTLING_OLD_JOBS: &str = "SettlingOldJobs";

/// Event reason of a timed-out stage that runs again.
pub const STAGE_TIMEOUT_CLEARED: &str = "StageTimeoutCleared";

/// Cordon is written; now drain (for disruptive work), create and delete Jobs. Returns whether some
/// work waits for the node to drain.
async fn execute(
    ctx: &Context,
    nodewright: &NodeWright,
    node: &Node,
    p: &Plan,
    node_order: i64,
    drain_options: &DrainOptions,
) -> Result<bool, ReconcileError> {
    let nw = nodewright.name_any();
    let name = node.name_any();
    let mut drained: Option<bool> = None;
    if ctx.settling_legacy && !p.create.is_empty() {
        // No stage starts until the Jobs of the old layout are settled (runtime::legacy_jobs).
        debug!(node = %name, "holding Job creation until the old namespace's Jobs are settled");
        ctx.events
            .on_nodewright(
                nodewright,
                SETTLING_OLD_JOBS,
                format!(
                    "Holding new stage Jobs on node [{name}] until the Jobs an earlier version \
                     left in namespace [{}] finish and are recorded",
                    ctx.config.jobs.namespace
                ),
                None,
            )
            .await;
        for job in &p.delete {
            ctx.writer.remove_job(job).await?;
        }
        return Ok(false);
    }
    if p.create
        .iter()
        .any(|c| matches!(c, Creation::Package { .. }))
    {
        configmap_sync::apply_node_metadata(
            &ctx.writer,
            nodewright,
            node,
            &ctx.config.jobs.agent_image,
        )
        .await?;
        configmap_sync::delete_legacy_node_metadata(ctx, nodewright, node).await?;
    }
    for creation in &p.create {
        let disruptive = matches!(
            creation,
            Creation::Interrupt { .. }
                | Creation::Package {
                    drain_first: true,
                    ..
                }
        );
        if disruptive {
            if !cordon::holds_cordon(node, &nw) {
                continue;
            }
            let ready = match drained {
                Some(d) => d,
                None => {
                    ctx.events
                        .on_node(
                            node,
                            "Interrupt",
                            format!("draining node [{name}] for [nodewright:{nw}]"),
                            None,
                        )
                        .await;
                    let d = super::drain::drain(
                        &ctx.client,
                        &ctx.writer,
                        &name,
                        &nw,
                        nodewright.spec.pod_non_interrupt_labels.as_ref(),
                        drain_options,
                    )
                    .await?;
                    note_drain_start(ctx, node, &nw, d, drain_options).await;
                    drained = Some(d);
                    d
                }
            };
            if !ready {
                debug!(node = %name, "waiting for the node to drain");
                continue;
            }
        }
        let job = match creation {
            Creation::Package { key, stage, .. } => {
                let Some(package) = nodewright.spec.packages.get(key) else {
                    continue;
                };
                build_package_job(&PackageJobInput {
                    nodewright,
                    package_key: key,
                    package,
                    stage: *stage,
                    node: &name,
                    node_order,
                    config: &ctx.config.jobs,
                })?
            }
            Creation::Interrupt { merged, stage } => {
                let Some(package) = nodewright.spec.packages.get(&merged.owner) else {
                    continue;
                };
                build_interrupt_job(&InterruptJobInput {
                    nodewright,
                    owner_key: &merged.owner,
                    owner: package,
                    interrupt: &merged.interrupt,
                    stage: *stage,
                    node: &name,
                    node_order,
                    config: &ctx.config.jobs,
                })?
            }
        };
        let job_name = job.name_any();
        super::job_lifecycle::create(ctx, job).await?;
        let (package, stage) = match creation {
            Creation::Package { key, stage, .. } => (key.as_str(), *stage),
            Creation::Interrupt { merged, stage } => (merged.owner.as_str(), *stage),
        };
        let version = nodewright
            .spec
            .packages
            .get(package)
            .map(|p| p.version.as_str())
            .unwrap_or_default();
        let reason = if stage.is_interrupt() {
            "Interrupt"
        } else {
            "Apply"
        };
        ctx.events
            .on_nodewright(
                nodewright,
                reason,
                format!("Applying package [{package}:{version}] to node [{name}] stage [{stage}]"),
                Some(crate::writes::job_ref(
                    &ctx.config.jobs.namespace,
                    &job_name,
                )),
            )
            .await;
    }
    for job in &p.delete {
        ctx.writer.remove_job(job).await?;
    }
    Ok(drained == Some(false))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use nodewright_shared::node_state::PackageStatus;
    use serde_json::json;

    use super::*;

    type Seen = Arc<Mutex<Vec<(String, String)>>>;

    /// The timed-out apply of package `a` on `n1` (its record erroring) whose Job the Job store
    /// does not show yet, over a mock API server where that Job does (`job_exists`) or does not
    /// exist; returns the node's result and the requests made.
    async fn pass_over_a_timed_out_record(job_exists: bool) -> (NodeResult, Vec<(String, String)>) {
        let package = nodewright_shared::api::Package {
            version: "1.0.0".into(),
            image: "example.com/pkg".into(),
            ..Default::default()
        };
        let nw = super::super::pass_fixtures::with_package(package);
        let mut state = NodeState::default();
        state.upsert(PackageStatus {
            name: "a".into(),
            version: "1.0.0".into(),
            image: "example.com/pkg".into(),
            container_sha: String::new(),
            stage: Stage::Apply,
            state: Some(State::Erroring),
            restarts: 4,
        });
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": "7", "annotations": {
                keys::node_state_key("nw"): state.to_annotation()}},
        }))
        .expect("node");
        let job = nodewright_core::naming::package_job_name("nw", "a", "1.0.0", Stage::Apply, "n1");
        let seen = Seen::default();
        let log = seen.clone();
        let node_json = serde_json::to_value(&node).expect("node json");
        let (client, server) = crate::writes::mock::serve(move |method, path, body| {
            log.lock()
                .expect("request log")
                .push((method.to_string(), path.to_owned()));
            match (method.as_str(), path) {
                ("GET", p) if p.ends_with(&format!("/jobs/{job}")) && job_exists => (
                    200,
                    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                           "metadata": {"name": job, "namespace": "nodewright"}}),
                ),
                ("GET", "/api/v1/nodes/n1") => (200, node_json.clone()),
                ("PATCH", "/api/v1/nodes/n1") => (200, node_json.clone()),
                ("POST", p) if p.ends_with("/jobs") || p.ends_with("/configmaps") => (201, body),
                ("PATCH", p) if p.contains("/configmaps/") => (200, body),
                _ => (404, crate::writes::mock::not_found()),
            }
        });
        let ctx = Context::over(client);
        let work = NodeWork {
            node,
            state,
            absorbed: Vec::new(),
            plan: None,
            node_order: 0,
        };
        let result = advance(&ctx, &nw, work, &JobIndex::with_fleet([], &[]), &[], None)
            .await
            .expect("the node is worked");
        drop(ctx);
        server.abort();
        let seen = seen.lock().expect("request log").clone();
        (result, seen)
    }

    /// The `any_exists` guard (DESIGN §4.4): a stage over a timed-out record is started again only
    /// when its Job is gone. When the Job store lags and does not show the timed-out Job that the
    /// API still has, the node stays erroring: no Job is created, the node is not written, and the
    /// store's event re-plans.
    #[tokio::test]
    async fn a_timed_out_job_the_store_does_not_show_yet_holds_the_rerun() {
        let (result, seen) = pass_over_a_timed_out_record(true).await;
        assert_eq!(result.status, Status::Erroring);
        assert!(
            seen.iter().all(|(method, _)| method == "GET"),
            "only reads: {seen:?}"
        );
        assert!(
            seen.iter().any(|(_, p)| p.contains("/jobs/")),
            "the Job was looked up live: {seen:?}"
        );

        // Gone for real: the stage starts again (its Job created).
        let (_, seen) = pass_over_a_timed_out_record(false).await;
        assert!(
            seen.iter()
                .any(|(method, p)| method == "POST" && p.ends_with("/jobs")),
            "the stage runs again: {seen:?}"
        );
    }
}

#[cfg(test)]
mod passes {
    //! Carrying out plans, pass after pass over the mock cluster
    //! ([`crate::rollout::pass_fixtures`]), every Job finishing before the next pass.

    use nodewright_shared::api::NodeWright;
    use nodewright_shared::keys;

    use super::super::pass_fixtures::{after, created, node, pass_over, rebooting, snapshot};
    use crate::writes::mock::ClusterState;

    /// The passes until one creates a Job of `stage` (each later pass sees every earlier Job
    /// Complete), at most 8.
    async fn passes_until(nw: NodeWright, stage: &str) -> Vec<ClusterState> {
        let mut current = snapshot(nw, (0..2).map(node).collect(), vec![]);
        let mut passes = Vec::new();
        for _ in 0..8 {
            let state = pass_over(&current).await;
            let reached = created(&state).iter().any(|(_, _, s)| s == stage);
            current = after(&current, &state, true);
            passes.push(state);
            if reached {
                return passes;
            }
        }
        let jobs: Vec<_> = passes.iter().map(created).collect();
        panic!("no pass created a {stage} Job; Jobs per pass: {jobs:?}");
    }

    /// Index in `state.seen` of the last write to node `node` before `before` for which `what`
    /// holds.
    fn node_write_before(
        state: &ClusterState,
        node: &str,
        before: usize,
        what: impl Fn(&serde_json::Value) -> bool,
    ) -> Option<usize> {
        let path = format!("/api/v1/nodes/{node}");
        state.seen[..before]
            .iter()
            .rposition(|r| r.method == http::Method::PATCH && r.path == path && what(&r.body))
    }

    /// Positions of the Job creations of `state`, with the node each is for.
    fn job_posts(state: &ClusterState) -> Vec<(usize, String, String)> {
        state
            .seen
            .iter()
            .enumerate()
            .filter(|(_, r)| r.method == http::Method::POST && r.path.ends_with("/jobs"))
            .map(|(i, r)| {
                let label = |k: &str| {
                    r.body["metadata"]["labels"][k]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                };
                (i, label(keys::NODE_LABEL), label(keys::STAGE_LABEL))
            })
            .collect()
    }

    fn mentions(body: &serde_json::Value, text: &str) -> bool {
        body.to_string().contains(text)
    }

    #[tokio::test]
    async fn every_job_is_created_after_its_node_state_is_recorded() {
        let passes = passes_until(rebooting(), "post-interrupt").await;
        let state_key = keys::node_state_key("gpu").replace('/', "~1");
        let mut checked = 0;
        for (n, state) in passes.iter().enumerate() {
            for (at, node, stage) in job_posts(state) {
                assert!(
                    node_write_before(state, &node, at, |b| mentions(b, &state_key)).is_some(),
                    "pass {n}: the {stage} Job on {node} was created before its node state was recorded: {:#?}",
                    state.seen
                );
                checked += 1;
            }
        }
        assert!(
            checked >= 6,
            "three stages on two nodes at least: {checked}"
        );
    }

    fn cordons(body: &serde_json::Value) -> bool {
        body.as_array().is_some_and(|ops| {
            ops.iter().any(|op| {
                op["path"] == "/spec/unschedulable" && op["value"] == serde_json::Value::Bool(true)
            })
        })
    }

    fn uncordons(body: &serde_json::Value) -> bool {
        body.as_array().is_some_and(|ops| {
            ops.iter().any(|op| {
                op["path"] == "/spec/unschedulable"
                    && (op["op"] == "remove" || op["value"] == serde_json::Value::Bool(false))
            })
        })
    }

    #[tokio::test]
    async fn a_reboot_package_cordons_with_its_first_record_and_drains_before_the_interrupt() {
        let passes = passes_until(rebooting(), "interrupt").await;
        let first = passes.first().expect("at least one pass");
        let cordon_key = keys::cordon_key("gpu").replace('/', "~1");
        for (at, node, stage) in job_posts(first) {
            // The cordon, its claim (so the operator releases only what it cordoned) and the
            // first record are one write, before the first Job.
            assert!(
                node_write_before(first, &node, at, |b| cordons(b)
                    && mentions(b, &cordon_key)
                    && mentions(b, "in_progress"))
                .is_some(),
                "{node}: no cordon with the first record before its {stage} Job: {:#?}",
                first.seen
            );
        }
        let last = passes.last().expect("at least one pass");
        let interrupts: Vec<_> = job_posts(last)
            .into_iter()
            .filter(|(_, _, stage)| stage == "interrupt")
            .collect();
        assert_eq!(interrupts.len(), 2, "both nodes of the batch reboot");
        for (at, node, _) in interrupts {
            let looked_at_pods = last.seen[..at]
                .iter()
                .any(|r| r.method == http::Method::GET && r.path.ends_with("/pods"));
            assert!(
                looked_at_pods,
                "{node}: its pods were not looked at (drain) before the interrupt"
            );
            assert_eq!(
                last.nodes[&node]["spec"]["unschedulable"],
                serde_json::Value::Bool(true),
                "{node} is cordoned when its interrupt runs"
            );
        }
        for (n, state) in passes.iter().enumerate() {
            assert!(
                !state.seen.iter().any(|r| uncordons(&r.body)),
                "pass {n} uncordoned a node before its reboot ran"
            );
        }
    }

    #[tokio::test]
    async fn completing_releases_the_cordon_in_the_write_that_records_completion() {
        let mut current = snapshot(rebooting(), (0..2).map(node).collect(), vec![]);
        let cordon_key = keys::cordon_key("gpu").replace('/', "~1");
        let mut released = Vec::new();
        for n in 0..10 {
            let state = pass_over(&current).await;
            for r in &state.seen {
                if r.method == http::Method::PATCH && uncordons(&r.body) {
                    // The release, the claim's removal and the completed record: one write.
                    assert!(
                        mentions(&r.body, &cordon_key) && mentions(&r.body, "complete"),
                        "pass {n}: {} released apart from its completion: {}",
                        r.path,
                        r.body
                    );
                    released.push(r.path.clone());
                }
            }
            let done = created(&state).is_empty() && !released.is_empty();
            current = after(&current, &state, true);
            if done {
                break;
            }
        }
        released.sort();
        assert_eq!(
            released,
            ["/api/v1/nodes/node-0", "/api/v1/nodes/node-1"],
            "each node released once"
        );
        for node in &current.nodes {
            assert_ne!(
                node.spec.as_ref().and_then(|s| s.unschedulable),
                Some(true),
                "{:?} is left cordoned",
                node.metadata.name
            );
        }
    }
}
