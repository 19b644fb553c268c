//! Carrying out a [`Plan`] on one node: record the node state (with the resourceVersion
//! precondition) first, then cordon/drain and create the Jobs. Recording first means a crash between
//! the two leaves "in progress, no Job", which the next pass repairs by creating the Job; the other
//! order could leave a running Job the state does not know about.
//!
//! One attempt is: plan (or take the pass's plan), re-read the node where a decision needs the
//! API server's copy, judge the health gates, compose the node's one write, write it, then start
//! the stages ([`start_stages`]) and say what changed ([`announce`]).

mod announce;
mod start_stages;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use nodewright_shared::api::{HealthGates, NodeWright, Status};
use nodewright_shared::keys;
use nodewright_shared::node_state::NodeState;
use tracing::debug;

use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::NodeWriteError;
use announce::{
    announce_cleared, announce_drain_timeout, announce_gates, cleared_timeouts, timed_out_jobs,
};
use nodewright_core::jobs::read::{JobIndex, Recorded};
use nodewright_core::jobs::stored::StoredJob;
use nodewright_core::node::cordon;
use nodewright_core::node::drain::{self, DrainOptions};
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::node::health_gates::{self, GateMark, Verdict};
use nodewright_core::node::runtime_cordon;
use nodewright_core::node::state::{parse_state, status_edit};
use nodewright_core::rollout::absorb;
use nodewright_core::rollout::disruption::{CapState, Grant, Rank};
use nodewright_core::rollout::graph;
use nodewright_core::rollout::plan::{Plan, plan_node};
use nodewright_core::rollout::runtime_taint;
use nodewright_core::rollout::status::{NodeFacts, any_erroring, node_status};
use start_stages::{drain_started, start_stages};

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
    /// The completed Jobs whose outcomes this pass wrote into the node's records and marked.
    pub absorbed: Vec<String>,
}

impl NodeResult {
    /// Nothing written: the node keeps `state` and reports `status`.
    fn unwritten(state: NodeState, status: Status) -> Self {
        Self {
            state,
            status,
            draining: false,
            at_gates: false,
            cap_held: None,
            absorbed: Vec::new(),
        }
    }
}

/// What the pass hands [`advance`] for one node.
pub struct NodeWork {
    /// The node as cached.
    pub node: Node,
    /// Its records, with the completed Jobs in `absorbed` folded in ([`absorb`]).
    pub state: NodeState,
    /// Completed Jobs whose outcomes `state` carries: marked recorded once it is written.
    pub absorbed: Vec<String>,
    /// The pass's plan of the node from `state`, if it made one.
    pub plan: Option<Plan>,
    /// `SKYHOOK_NODE_ORDER` of the node.
    pub node_order: i64,
}

/// The node as this attempt holds it: the cached copy until a decision needs the API server's.
struct Held<'a> {
    nodewright: &'a NodeWright,
    jobs: &'a JobIndex,
    nw: String,
    name: String,
    node: Node,
    /// The node's records with the completed Jobs folded in.
    state: NodeState,
    absorbed: Vec<String>,
    /// `node` was read from the API server (not the cache) in this pass.
    fresh: bool,
}

/// What a re-read found.
#[derive(Debug, PartialEq, Eq)]
enum Reread {
    /// The node is gone, or its state unreadable: the attempt stops.
    Gone,
    /// The same resourceVersion as held.
    Same,
    /// The node changed: plan again from it.
    Changed,
}

impl Held<'_> {
    /// Reads the node from the API server and folds the completed Jobs into its records again.
    async fn reread(&mut self, ctx: &Context) -> Result<Reread, ReconcileError> {
        let Some((node, Some(stored))) = reread(ctx, &self.nw, &self.name).await? else {
            return Ok(Reread::Gone);
        };
        let same = node.metadata.resource_version == self.node.metadata.resource_version;
        (self.state, self.absorbed) =
            absorb::completions(self.nodewright, &self.name, stored, self.jobs);
        self.node = node;
        self.fresh = true;
        Ok(if same { Reread::Same } else { Reread::Changed })
    }
}

/// The health gates' judgement of a node waiting at them: its wait mark before and after, and the
/// verdict.
struct Judged {
    before: Option<GateMark>,
    after: Option<GateMark>,
    verdict: Verdict,
}

impl Judged {
    fn passed(judged: Option<&Self>) -> bool {
        judged.is_none_or(|j| j.verdict == Verdict::Passed)
    }

    fn failed(judged: Option<&Self>) -> bool {
        judged.is_some_and(|j| matches!(j.verdict, Verdict::Failed { .. }))
    }
}

/// The node's one write of an attempt and what it decided.
struct Write {
    edit: NodeEdit,
    status: Status,
    /// A slot of the cluster-wide disruption cap was reserved for the cordon in `edit`.
    reserved: bool,
    /// The cap held the cordon back.
    cap_held: Option<CapState>,
    /// The drain's timeout turns the node erroring with this write (announced once).
    announce_drain_timeout: bool,
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
    let nw = nodewright.name_any();
    let drain_options =
        DrainOptions::of(nodewright.spec.drain_config.as_ref()).map_err(|source| {
            ReconcileError::DrainConfig {
                nodewright: nw.clone(),
                source,
            }
        })?;
    let gates = health_gates::configured(gates);
    let node_order = work.node_order;
    // The pass already planned this node from the same cached state: the first attempt uses that.
    let mut first_plan = work.plan;
    let mut held = Held {
        nodewright,
        jobs,
        name: work.node.name_any(),
        nw,
        node: work.node,
        state: work.state,
        absorbed: work.absorbed,
        fresh: false,
    };
    for attempt in 0..4 {
        let p = match first_plan.take() {
            Some(p) => p,
            None => plan_node(nodewright, &held.name, &held.state, jobs, held.fresh),
        };
        if p.stale && !held.fresh {
            debug!(node = %held.name, "cached node may be stale for a rerun decision; reading it");
            match held.reread(ctx).await? {
                Reread::Gone => break,
                Reread::Same | Reread::Changed => continue,
            }
        }
        let cleared = cleared_timeouts(nodewright, &held.state, &p);
        if timed_out_job_lingers(ctx, &held, &cleared).await? {
            // A timed-out stage's Job is still there: the Job store has not caught up. Its record
            // stays erroring and the Job stays as the evidence; the store's event re-plans.
            debug!(node = %held.name, "a timed-out Job the store does not show yet still exists; waiting for the store");
            let status = node_status(NodeFacts {
                complete: false,
                erroring: true,
                active: true,
                ..NodeFacts::default()
            });
            return Ok(NodeResult::unwritten(held.state, status));
        }
        let all_done = graph::all_done(&nodewright.spec.packages, &p.state);
        let at_gates = health_gates::at_gates(gates, &held.node, &held.nw, all_done);
        if at_gates && !held.fresh {
            // Gates are judged on the node as the API server has it (the cache keeps none of the
            // kubelet's conditions), and the write that follows is guarded by that very version:
            // a node is never uncordoned on an observation older than the node it writes.
            match held.reread(ctx).await? {
                Reread::Gone => break,
                Reread::Changed => continue,
                Reread::Same => {}
            }
        }
        let judged = match gates.filter(|_| at_gates) {
            Some(gates) => Some(judge_gates(ctx, gates, &held.node, &held.nw).await),
            None => None,
        };
        let write = compose_write(
            ctx,
            &held,
            all_nodewrights,
            &p,
            judged.as_ref(),
            gates,
            &drain_options,
        );
        let applied = ctx.writer.apply_node_edit(&held.node, &write.edit).await;
        if write.reserved {
            match &applied {
                Ok(Some(updated)) => ctx
                    .disruption
                    .written(&held.name, updated.metadata.resource_version.as_deref()),
                _ => ctx.disruption.withdraw(&held.name),
            }
        }
        match applied {
            Ok(Some(updated)) => held.node = updated,
            Ok(None) => {}
            Err(NodeWriteError::Conflict { .. }) if attempt < 3 => {
                debug!(node = %held.name, "node changed under the write; re-reading");
                match held.reread(ctx).await? {
                    Reread::Gone => break,
                    Reread::Same | Reread::Changed => continue,
                }
            }
            Err(e) => return Err(e.into()),
        }
        announce_write(ctx, &held, &write, judged.as_ref(), gates, &drain_options).await;
        // The next stages first (the rollout's critical path), then the absorbed Jobs' marks.
        let draining =
            start_stages(ctx, nodewright, &held.node, &p, node_order, &drain_options).await?;
        mark_absorbed(ctx, &held.absorbed).await?;
        if !cleared.is_empty() {
            announce_cleared(ctx, nodewright, &held.node, &cleared).await;
        }
        let judged = judged.as_ref();
        return Ok(NodeResult {
            state: p.state,
            status: write.status,
            draining,
            at_gates: at_gates && !Judged::passed(judged) && !Judged::failed(judged),
            cap_held: write.cap_held,
            absorbed: held.absorbed,
        });
    }
    // The node vanished or its state became unreadable while we worked: report it blocked.
    Ok(NodeResult::unwritten(held.state, Status::Blocked))
}

/// Whether a timed-out stage this attempt would start again still has its Job at the API server
/// (the Job store has not caught up with it).
async fn timed_out_job_lingers(
    ctx: &Context,
    held: &Held<'_>,
    cleared: &[(&str, &str, nodewright_shared::node_state::Stage)],
) -> Result<bool, ReconcileError> {
    Ok(!cleared.is_empty()
        && super::job_lifecycle::any_exists(ctx, &timed_out_jobs(&held.nw, &held.name, cleared))
            .await?)
}

/// What the attempt's write turned the node into, said once: a drain past its bound, the gates'
/// verdict.
async fn announce_write(
    ctx: &Context,
    held: &Held<'_>,
    write: &Write,
    judged: Option<&Judged>,
    gates: Option<&HealthGates>,
    drain_options: &DrainOptions,
) {
    if write.announce_drain_timeout {
        announce_drain_timeout(ctx, held.nodewright, &held.node, drain_options).await;
    }
    if let Some(judged) = judged {
        let uncordons = gates.is_some_and(HealthGates::uncordons_on_failure);
        announce_gates(
            ctx,
            held.nodewright,
            &held.node,
            judged.before.as_ref(),
            uncordons,
            &judged.verdict,
        )
        .await;
    }
}

/// Observes the gates on the node (as the API server has it) and judges them against the time the
/// node has waited at them.
async fn judge_gates(ctx: &Context, gates: &HealthGates, node: &Node, nw: &str) -> Judged {
    let now = ctx.now();
    let before = health_gates::mark(node, nw);
    let since = before.as_ref().map_or(now, |m| m.since_or(now));
    let observed = super::health_gates::observe(ctx, gates, node).await;
    let verdict = health_gates::judge(gates, &observed, since, now);
    let after = before
        .clone()
        .unwrap_or_else(|| GateMark::starting(now))
        .after(&verdict, now);
    Judged {
        before,
        after,
        verdict,
    }
}

/// The node's one write of this attempt: its records, status, gate mark, and the cordon (held,
/// released or taken, through the cluster-wide disruption cap) with the runtime-required taint.
fn compose_write(
    ctx: &Context,
    held: &Held<'_>,
    all_nodewrights: &[Arc<NodeWright>],
    p: &Plan,
    judged: Option<&Judged>,
    gates: Option<&HealthGates>,
    drain_options: &DrainOptions,
) -> Write {
    let (nodewright, node, nw) = (held.nodewright, &held.node, held.nw.as_str());
    let gate_failed = Judged::failed(judged);
    let all_done = graph::all_done(&nodewright.spec.packages, &p.state);
    let complete = all_done && Judged::passed(judged);
    // A drain past drainConfig.timeout (still cordoned, not drained): the node is erroring and
    // stays cordoned; nothing is forced.
    let drain_timed_out = !complete
        && cordon::holds_cordon(node, nw)
        && drain_started(node, nw)
            .is_some_and(|started| drain::timed_out(started, drain_options.timeout, ctx.now()));
    let status = node_status(NodeFacts {
        complete,
        erroring: any_erroring(nodewright, &p.state) || drain_timed_out || gate_failed,
        active: true,
        ..NodeFacts::default()
    });
    let mut edit = NodeEdit::default();
    // Against what the node holds, not `state`: absorbed outcomes are not written yet.
    if parse_state(node, nw).as_ref() != Some(&p.state)
        || !node.annotations().contains_key(&keys::node_state_key(nw))
    {
        edit.annotate(keys::node_state_key(nw), p.state.to_annotation());
    }
    status_edit(&mut edit, nw, status);
    // Someone uncordoned the node under the persistent cordon's mark: the mark goes with this
    // write (nothing is written for it otherwise), and the node is not cordoned again.
    runtime_cordon::clear_stale(&mut edit, node);
    // The wait at the gates: recorded while it lasts, gone once passed or when the packages
    // have work again.
    health_gates::record(&mut edit, node, nw, judged.and_then(|j| j.after.as_ref()));
    let mut reserved = false;
    let mut cap_held = None;
    if complete {
        cordon::uncordon(&mut edit, node, nw);
        // Complete in this very write: the runtime-required taint goes with it when this was
        // the last runtimeRequired NodeWright to finish here (and the persistent cordon comes
        // with it when one of them asks for it).
        if nodewright.spec.runtime_required
            && runtime_taint::runtime_ready_with(all_nodewrights, node, Some((nw, &p.state)))
        {
            runtime_taint::lift(
                &mut edit,
                node,
                &ctx.config.jobs.runtime_required_taint,
                runtime_taint::cordon_after_wanted(all_nodewrights, node),
            );
        }
    } else if p.cordon && !cordon::holds_cordon(node, nw) {
        // The node's first cordon may need a slot of the cluster-wide disruption cap; held,
        // its disruptive stages wait (they start only under this NodeWright's cordon).
        match ctx
            .disruption
            .request(&ctx.nodes, node, &Rank::of(nodewright))
        {
            Grant::Held(cap) => {
                debug!(node = %held.name, ?cap, "the cluster-wide disruption cap holds the cordon back");
                cap_held = Some(cap);
            }
            grant => {
                reserved = grant == Grant::Reserved;
                cordon::cordon(&mut edit, node, nw);
            }
        }
    } else if p.release_cordon && cordon::holds_cordon(node, nw) {
        // A disruptive stage ended without a pod ever running: nothing holds the node.
        cordon::uncordon(&mut edit, node, nw);
    } else if gate_failed && gates.is_some_and(HealthGates::uncordons_on_failure) {
        // `onFailure: Uncordon`: the failed node takes workloads again (still erroring).
        cordon::uncordon(&mut edit, node, nw);
    }
    // Announced once, when the timeout turns the node erroring (not on every drain recheck).
    let announce_drain_timeout = drain_timed_out
        && node
            .annotations()
            .get(&keys::node_status_key(nw))
            .map(String::as_str)
            != Some(Status::Erroring.as_str());
    Write {
        edit,
        status,
        reserved,
        cap_held,
        announce_drain_timeout,
    }
}

/// Marks the completed Jobs whose outcomes a node write just recorded ([`absorb`]).
pub async fn mark_absorbed(ctx: &Context, absorbed: &[String]) -> Result<(), ReconcileError> {
    for job in absorbed {
        let key = ObjectRef::<StoredJob>::new(job).within(&ctx.config.jobs.namespace);
        let stored = ctx.jobs.get(&key);
        let uid = stored.as_ref().and_then(|j| j.metadata.uid.as_deref());
        ctx.writer
            .mark_job_recorded(
                job,
                uid,
                Recorded::Complete,
                ctx.config.jobs.defaults.ttl_succeeded_seconds(),
            )
            .await?;
        if let Some(stored) = &stored {
            ctx.metrics.stages().absorbed(stored, &ctx.pods);
        }
        debug!(%job, "outcome recorded with the node's next stage");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use nodewright_shared::node_state::Stage;
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
        let state = super::super::pass_fixtures::erroring_apply(4);
        let node: Node = serde_json::from_value(super::super::pass_fixtures::n1_with_state(&state))
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
