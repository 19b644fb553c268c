//! The NodeWright rollout reconciler (DESIGN §4, upstream-operator.md §2): for one NodeWright, select
//! its nodes, admit them within the budget, advance each admitted node's packages through the stage
//! machine (recording node state before creating Jobs), and write the status.
//!
//! Outcomes of the Jobs are recorded by [`crate::outcomes`]; this reconciler only reads them (from
//! the node state and the Jobs' `state-recorded` annotation), so each fact has one writer.

pub mod auto_taint;
pub mod batches;
pub mod budget;
pub mod compartments;
pub mod config_updates;
pub mod finalizer;
pub mod graph;
pub mod job_ops;
pub mod node_work;
pub mod plan;
pub mod priority;
pub mod reboots;
pub mod runtime_taint;
pub mod selection;
pub mod stages;
pub mod status;
pub mod uninstall;
pub mod wake;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Patch;
use kube::runtime::controller::Action;
use nodewright_shared::api::{
    BatchState, CompartmentStatus, DeploymentPolicy, NodeWright, NodeWrightStatus, Status,
};
use nodewright_shared::defaults::default_nodewright;
use nodewright_shared::keys;
use nodewright_shared::node_state::{NodeState, State};
use serde_json::json;
use tracing::{Instrument, info, info_span, warn};

use crate::context::{Context, PolicyLookup};
use crate::error::ReconcileError;
use crate::interrupts;
use crate::job_state::JobIndex;
use crate::naming;
use crate::node_patch::NodeEdit;
use crate::state_metrics::{self, Outcome};

use self::budget::{Slot, admit};
use self::node_work::{parse_state, status_edit};
use self::selection::{Blocker, NodeSelection, blocker, selection_tolerations};
use self::status::{NodeFacts, StatusInput, any_erroring, node_status};
use crate::writes::{Unchanged, failed};

/// The annotation value that turns pause or disable on.
const ON: &str = "true";
/// Requeue while work is in flight: a safety net, progress is driven by watch events.
const IN_FLIGHT_RESYNC: Duration = Duration::from_secs(30);
/// Requeue while a node drains: evicted pods going away trigger nothing the operator watches.
const DRAIN_RECHECK: Duration = Duration::from_secs(2);

/// Reconciles one NodeWright.
pub async fn reconcile(
    nodewright: Arc<NodeWright>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let span = info_span!("reconcile_nodewright", nodewright = %nodewright.name_any());
    let result = reconcile_inner(&nodewright, &ctx).instrument(span).await;
    ctx.metrics.count_reconcile(
        "nodewright",
        if result.is_ok() {
            Outcome::Success
        } else {
            Outcome::Error
        },
    );
    result
}

/// Retry policy: a lost race is retried at once (the next read resolves it); anything else backs off.
pub fn error_policy(
    nodewright: Arc<NodeWright>,
    error: &ReconcileError,
    _ctx: Arc<Context>,
) -> Action {
    if error.is_conflict() {
        return Action::requeue(Duration::from_millis(500));
    }
    if !error.is_term_ended() {
        warn!(nodewright = %nodewright.name_any(), %error, "reconcile failed");
    }
    Action::requeue(Duration::from_secs(10))
}

pub(crate) fn annotation_on(nodewright: &NodeWright, key: &str) -> bool {
    nodewright.annotations().get(key).is_some_and(|v| v == ON)
}

/// Whether the node has work recorded for a current package that is not complete: it was admitted
/// before (e.g. by a previous leader whose status write was lost) and keeps its slot. A record
/// queued for a config rerun (`unknown`) has not started: the budget admits it (DESIGN §5).
fn started(nodewright: &NodeWright, state: &NodeState) -> bool {
    nodewright
        .spec
        .packages
        .iter()
        .filter_map(|(name, p)| state.get(name, &p.version))
        .any(|r| !matches!(r.state, Some(State::Complete | State::Unknown)))
}

struct NodeRow {
    node: Arc<Node>,
    state: Option<NodeState>,
    blocked: bool,
    /// An earlier NodeWright is not done here yet.
    waits: bool,
    complete: bool,
    timed_out: bool,
}

async fn reconcile_inner(nodewright: &NodeWright, ctx: &Context) -> Result<Action, ReconcileError> {
    if !ctx.leading() {
        return Ok(Action::await_change());
    }
    if !ctx.jobs_synced() {
        // An unsynced store would read as "no Job yet" and start stages that already ran.
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let name = nodewright.name_any();
    let deleting = nodewright.metadata.deletion_timestamp.is_some();
    if deleting && !finalizer::has_finalizer(nodewright) {
        return Ok(Action::await_change());
    }
    if !deleting && !finalizer::has_finalizer(nodewright) {
        finalizer::add(ctx, nodewright).await?;
        // The write is an event: the next reconcile sees the finalizer.
        return Ok(Action::await_change());
    }

    // Objects can reach storage without the webhook: apply the same defaults (in memory).
    let mut nw = nodewright.clone();
    default_nodewright(&mut nw.spec, &ctx.config.defaults);
    let paused = annotation_on(&nw, keys::PAUSE_ANNOTATION);
    let disabled = annotation_on(&nw, keys::DISABLE_ANNOTATION);

    let selection = NodeSelection::of(&nw)?;
    let mut nodes: Vec<Arc<Node>> = ctx
        .nodes
        .state()
        .into_iter()
        .filter(|n| selection.matches(n.labels()))
        .collect();
    nodes.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, a.metadata.name.as_deref())
            .cmp(&(&b.metadata.creation_timestamp, b.metadata.name.as_deref()))
    });
    let all_nodewrights: Vec<NodeWright> = ctx
        .nodewrights
        .state()
        .iter()
        .map(|n| NodeWright::clone(n))
        .collect();
    // New nodes are tainted before anything else is written to them (upstream: first in reconcile).
    let node_refs: Vec<&Node> = nodes.iter().map(|n| n.as_ref()).collect();
    if auto_taint::taint_new_nodes(ctx, &all_nodewrights, &node_refs).await? > 0 {
        // The taints are events; plan again on the tainted nodes.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    if deleting {
        let states: Vec<Option<NodeState>> = nodes.iter().map(|n| parse_state(n, &name)).collect();
        if !uninstall::pending(&nw, states.iter().map(Option::as_ref)) {
            ctx.metrics.forget(&name);
            return finalizer::cleanup(ctx, nodewright).await;
        }
        info!(nodewright = %name, "deletion waits for the uninstall of its enabled packages");
        uninstall::on_delete(&mut nw);
    }
    if reboots::reset_rebooted(ctx, &nw, &nodes).await? {
        // The resets are events; plan again on the fresh nodes.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }

    let label = naming::label_value(&name);
    let every_job = ctx.jobs.state();
    let jobs = JobIndex::with_fleet(
        every_job
            .iter()
            .filter(|j| j.labels().get(keys::NAME_LABEL) == Some(&label))
            .cloned(),
        &every_job,
    );
    job_ops::set_suspended(ctx, &jobs, paused).await?;
    if !paused && job_ops::replace_drifted(ctx, &nw, &jobs).await? > 0 {
        // The deletions are events; plan again on the Jobs that remain.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    if config_updates::sync(ctx, &mut nw, &nodes).await? {
        // The status write is an event: plan again on the updated object.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    // From here on, packages with config updates carry the interrupt those call for.
    let mut nw = config_updates::effective(&nw);

    let (policy, missing_policy) = match nw
        .spec
        .deployment_policy
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        None => (None, None),
        // From the policy store: its watch wakes this NodeWright when the policy changes.
        Some(policy) => match ctx.deployment_policy(policy) {
            // An unsynced store would read as "policy missing" and block the rollout for nothing.
            PolicyLookup::NotSynced => return Ok(Action::requeue(Duration::from_millis(500))),
            PolicyLookup::Found(found) => {
                let mut p = DeploymentPolicy::clone(&found);
                nodewright_shared::defaults::default_deployment_policy(&mut p.spec);
                (Some(p), None)
            }
            PolicyLookup::Missing => (None, Some(policy.to_owned())),
        },
    };

    let every_node = ctx.nodes.state();
    let every_node: Vec<&Node> = every_node.iter().map(|n| n.as_ref()).collect();
    let gates = priority::gates(&nw, &all_nodewrights, &every_node);

    let tolerations = selection_tolerations(&nw, &ctx.job_config.runtime_required_taint);
    let mut rows: BTreeMap<String, NodeRow> = BTreeMap::new();
    let (mut ignored, mut untolerated) = (Vec::new(), Vec::new());
    for node in &nodes {
        let state = parse_state(node, &name);
        let reason = blocker(node, &tolerations);
        match &reason {
            Some(Blocker::Ignored) => ignored.push(node.name_any()),
            Some(Blocker::Taints(_)) => untolerated.push(node.name_any()),
            None => {}
        }
        let blocked = state.is_none() || reason.is_some();
        let (complete, timed_out) = match &state {
            Some(s) => (
                graph::all_done(&nw.spec.packages, s),
                plan::plan(&nw, &node.name_any(), s, &jobs, false).timed_out,
            ),
            None => (false, false),
        };
        rows.insert(
            node.name_any(),
            NodeRow {
                node: node.clone(),
                state,
                blocked,
                waits: priority::waits(&gates, node),
                complete,
                timed_out,
            },
        );
    }

    let old_status = nw.status.clone().unwrap_or_default();
    // Boot IDs are recorded every pass (a reboot to reapply on was handled above).
    nw.status.get_or_insert_with(Default::default).node_boot_ids =
        reboots::current_ids(&old_status.node_boot_ids, &nodes);
    // Uninstall conditions, and a deletion waiting for uninstalls that will never run as things are.
    let generation = nw.metadata.generation;
    let uninstall_conditions =
        uninstall::uninstall_conditions(&nw, rows.values().filter_map(|r| r.state.as_ref()));
    let blocked = if deleting {
        let malformed = rows.values().any(|r| r.state.is_none());
        uninstall::deletion_blocked(paused, disabled, malformed)
    } else {
        None
    };
    let dependency_block =
        uninstall::dependency_block(&nw, rows.values().filter_map(|r| r.state.as_ref()));
    let conditions = &mut nw.status.get_or_insert_with(Default::default).conditions;
    for (type_, value) in uninstall_conditions {
        uninstall::set_condition(conditions, type_, value, generation, Timestamp::now());
    }
    uninstall::set_condition(
        conditions,
        uninstall::BLOCKED,
        dependency_block
            .as_deref()
            .map(|m| (uninstall::DEPENDENCY_UNINSTALLED, m)),
        generation,
        Timestamp::now(),
    );
    let newly_blocked = uninstall::set_condition(
        conditions,
        uninstall::DELETION_BLOCKED,
        blocked,
        generation,
        Timestamp::now(),
    );
    if let Some((reason, message)) = blocked.filter(|_| newly_blocked) {
        ctx.events
            .warn_on_nodewright(nodewright, reason, message.to_owned())
            .await;
    }
    let compartments = compartments::compartments(&nw, policy.as_ref(), &node_refs);
    let reset_batches = batches::reset_enabled(
        &nw,
        policy.as_ref().map_or(batches::LEGACY_RESET, |p| {
            p.spec.reset_batch_state_on_completion
        }),
    );
    // A version change starts a new rollout: its batches begin afresh (when reset is enabled).
    let fresh_batches = reset_batches && batches::versions_changed(&old_status.package_list, &nw);
    let may_start = !paused && !disabled && missing_policy.is_none();
    let mut active: BTreeSet<String> = BTreeSet::new();
    let mut batch_states: BTreeMap<String, Option<BatchState>> = BTreeMap::new();
    let mut compartment_slots: Vec<Vec<Slot<'_>>> = Vec::new();
    for c in &compartments {
        let slots: Vec<Slot<'_>> = c
            .nodes
            .iter()
            .filter_map(|n| rows.get(n).map(|r| (n, r)))
            .map(|(n, r)| Slot {
                node: n,
                admitted: old_status.node_priority.contains_key(n)
                    || r.state.as_ref().is_some_and(|s| started(&nw, s)),
                complete: r.complete,
                timed_out: r.timed_out,
                blocked: r.blocked || r.waits,
            })
            .collect();
        let mut batch_state = None;
        if let Some(strategy) = &c.strategy {
            let previous = old_status
                .compartment_statuses
                .get(&c.name)
                .and_then(|s| s.batch_state.as_ref())
                .filter(|_| !fresh_batches);
            let decision = batches::step(strategy, previous, &slots, c.ceiling, may_start);
            if decision.state.should_stop && !previous.is_some_and(|p| p.should_stop) {
                warn!(nodewright = %name, compartment = %c.name, "failed batches reached the failure threshold; the rollout of this compartment stops until its batch state is reset");
            }
            batch_state = Some(decision.state);
            if may_start {
                active.extend(decision.admit.into_iter().map(str::to_owned));
            }
        } else if may_start {
            active.extend(admit(&slots, c.ceiling).into_iter().map(str::to_owned));
        }
        batch_states.insert(c.name.clone(), batch_state);
        compartment_slots.push(slots);
    }

    // nodePriority: admitted nodes keep their place until they complete (upstream's stickiness).
    let now = Timestamp::now();
    let mut node_priority: BTreeMap<String, Time> = BTreeMap::new();
    let mut offset = old_status.node_order_offset;
    for (node, since) in &old_status.node_priority {
        match rows.get(node) {
            Some(r) if !r.complete => {
                node_priority.insert(node.clone(), since.clone());
            }
            _ => offset = offset.saturating_add(1),
        }
    }
    for node in &active {
        node_priority
            .entry(node.clone())
            .or_insert_with(|| Time(now));
    }
    let mut order: Vec<(&Time, &String)> = node_priority.iter().map(|(n, t)| (t, n)).collect();
    order.sort();
    let position: BTreeMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(i, (_, n))| (n.as_str(), i))
        .collect();

    let mut results: BTreeMap<String, (Option<NodeState>, Status)> = BTreeMap::new();
    let mut first_error: Option<ReconcileError> = None;
    let mut draining = false;
    for (node_name, row) in &rows {
        let facts = NodeFacts {
            complete: row.complete,
            paused,
            disabled,
            blocked: row.blocked || missing_policy.is_some(),
            erroring: row.state.as_ref().is_some_and(|s| any_erroring(&nw, s)),
            active: active.contains(node_name),
        };
        let Some(state) = row.state.clone() else {
            results.insert(node_name.clone(), (None, Status::Blocked));
            continue;
        };
        if facts.active && !facts.blocked && !row.waits {
            let index = position
                .get(node_name.as_str())
                .copied()
                .unwrap_or_default();
            let node_order = i64::try_from(index).unwrap_or_default() + i64::from(offset);
            match node_work::advance(ctx, &nw, &row.node, state.clone(), &jobs, node_order).await {
                Ok(done) => {
                    draining |= done.draining;
                    results.insert(node_name.clone(), (Some(done.state), done.status));
                }
                Err(e) => {
                    results.insert(node_name.clone(), (Some(state), node_status(facts)));
                    first_error.get_or_insert(e);
                }
            }
        } else {
            let status = node_status(facts);
            let lift_taint = row.complete
                && nw.spec.runtime_required
                && runtime_taint::runtime_ready(&all_nodewrights, &row.node);
            if let Err(e) = mark_node(ctx, &name, &row.node, status, row.complete, lift_taint).await
            {
                first_error.get_or_insert(e);
            }
            results.insert(node_name.clone(), (Some(state), status));
        }
    }

    // Node conditions `nodewright.nvidia.com/<nw>/{NotReady,Erroring}` (written only on a change).
    for (node_name, (state, node_status)) in &results {
        let (Some(row), Some(state)) = (rows.get(node_name), state) else {
            continue;
        };
        let complete = *node_status == Status::Complete;
        let erroring = *node_status == Status::Erroring || any_erroring(&nw, state);
        if let Err(e) =
            crate::node_conditions::sync(ctx, &row.node, &name, complete, erroring).await
        {
            first_error.get_or_insert(e);
        }
    }

    // Compartment counts and batch states from this pass's outcome (a node can complete during it).
    let done_now = |n: &str| {
        results
            .get(n)
            .is_some_and(|(_, status)| *status == Status::Complete)
    };
    for (c, slots) in compartments.iter().zip(&compartment_slots) {
        let (Some(strategy), Some(Some(state))) = (&c.strategy, batch_states.get_mut(&c.name))
        else {
            continue;
        };
        let after: Vec<Slot<'_>> = slots
            .iter()
            .map(|s| Slot {
                admitted: s.admitted || active.contains(s.node),
                complete: s.complete || done_now(s.node),
                ..s.clone()
            })
            .collect();
        *state = batches::settle(strategy, state, &after);
    }
    let compartment_statuses = compartments
        .iter()
        .map(|c| {
            let completed = c.nodes.iter().filter(|n| done_now(n)).count();
            let in_progress = c
                .nodes
                .iter()
                .filter(|n| active.contains(*n) && !done_now(n))
                .count();
            let status = CompartmentStatus {
                matched: to_i32(c.nodes.len()),
                ceiling: to_i32(c.ceiling),
                in_progress: to_i32(in_progress),
                completed: to_i32(completed),
                progress_percent: to_i32((completed * 100).checked_div(c.nodes.len()).unwrap_or(0)),
                batch_state: batch_states.remove(&c.name).flatten(),
            };
            (c.name.clone(), status)
        })
        .collect();
    let mut status = status::build(
        &nw,
        StatusInput {
            nodes: results,
            node_priority,
            node_order_offset: offset,
            compartments: compartment_statuses,
            paused,
            disabled,
            missing_policy,
            ignored: {
                ignored.sort();
                ignored
            },
            untolerated: {
                untolerated.sort();
                untolerated
            },
        },
        now,
    );
    if reset_batches
        && status.status == Some(Status::Complete)
        && old_status.status != Some(Status::Complete)
    {
        // Completion resets the batches (upstream-api.md §5.7): the next rollout starts at batch 1.
        for c in status.compartment_statuses.values_mut() {
            if let Some(b) = c.batch_state.as_mut() {
                let completed = usize::try_from(c.completed).unwrap_or_default();
                *b = batches::initial(completed, 0);
            }
        }
    }
    let strategies = compartments
        .iter()
        .map(|c| (c.name.clone(), batches::strategy_name(c.strategy.as_ref())))
        .collect();
    ctx.metrics
        .report(&name, state_metrics::samples(&nw, &status, &strategies));
    let rollup = status.status;
    write_status(ctx, nodewright, &old_status, status).await?;
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(match rollup {
        _ if draining => Action::requeue(DRAIN_RECHECK),
        Some(Status::Complete) => Action::requeue(ctx.config.default_interval),
        _ => Action::requeue(IN_FLIGHT_RESYNC),
    })
}

fn to_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Writes the node's status annotation and label for a node not worked on this pass, releases the
/// cordon of a complete node, and lifts the runtime-required taint once the node is runtime-ready.
async fn mark_node(
    ctx: &Context,
    nodewright: &str,
    node: &Node,
    status: Status,
    complete: bool,
    lift_runtime_taint: bool,
) -> Result<(), ReconcileError> {
    ctx.writer
        .write_node(node, Unchanged::Believe, |node| {
            let mut edit = NodeEdit::default();
            status_edit(&mut edit, nodewright, status);
            if complete {
                interrupts::uncordon(&mut edit, node, nodewright);
            }
            if lift_runtime_taint {
                edit.taints = runtime_taint::without_runtime_taint(
                    node,
                    &ctx.job_config.runtime_required_taint,
                );
            }
            Some(edit)
        })
        .await?;
    Ok(())
}

/// Replaces the status (JSON Patch `add /status`, so entries of nodes that left are dropped too), only
/// when it changed.
async fn write_status(
    ctx: &Context,
    nodewright: &NodeWright,
    old: &NodeWrightStatus,
    status: NodeWrightStatus,
) -> Result<(), ReconcileError> {
    if nodewright.status.is_some() && *old == status {
        return Ok(());
    }
    let name = nodewright.name_any();
    let value = serde_json::to_value(&status).map_err(|source| ReconcileError::Json {
        what: format!("status of NodeWright {name}"),
        source,
    })?;
    // The status is computed from the cached object: the `test` op makes the write apply only to the
    // version it was computed from (a 422 otherwise, retried at once on a fresh read), so a pass on a
    // stale cache can never overwrite a newer status (e.g. roll a batch state back).
    let mut ops = Vec::new();
    if let Some(rv) = &nodewright.metadata.resource_version {
        ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
    }
    ops.push(json!({"op": "add", "path": "/status", "value": value}));
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::Value::Array(ops)).map_err(|source| {
            ReconcileError::Json {
                what: format!("status patch of NodeWright {name}"),
                source,
            }
        })?;
    ctx.writer
        .patch_nodewright_status(&name, &Patch::Json(patch))
        .await
        .map_err(failed(format!("writing the status of NodeWright {name}")))?;
    if old.status != status.status {
        let (from, to) = (
            old.status.unwrap_or_default().as_str(),
            status.status.unwrap_or_default().as_str(),
        );
        info!(nodewright = %name, from, to, "status changed");
        ctx.events
            .on_nodewright(
                nodewright,
                "State",
                format!("NodeWright transitioned [{from}] -> [{to}]"),
            )
            .await;
    }
    Ok(())
}
