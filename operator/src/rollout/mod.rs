//! The NodeWright rollout reconciler (DESIGN §4, upstream-operator.md §2): for one NodeWright, select
//! its nodes, admit them within the budget, advance each admitted node's packages through the stage
//! machine (recording node state before creating Jobs), and write the status.
//!
//! Each outcome has one recorder. A Complete Job is the rollout's: the pass that plans its node
//! folds it into the node write that records the next stage ([`nodewright_core::rollout::absorb`])
//! and marks it `state-recorded` after that write; one that no node write of the pass can carry
//! (its node left the selection, or its record moved on when a pass stopped before the mark) is
//! recorded by the pass on its own ([`nodewright_core::rollout::absorb::unabsorbable`]). Everything else a Job or its pods
//! did (failed attempts, timeouts, rejections, stuck Jobs) is recorded by [`crate::outcomes`],
//! which records a Complete Job only when no NodeWright it reconciles owns it. Every node write is
//! guarded by the node's resourceVersion and only written over the stage it describes, so a record
//! repeated after a crash finds it moved on and only marks the Job (nothing lost, nothing repeated).

pub mod act_on_nodes;
pub mod advance_node;
pub mod auto_rollback;
pub mod auto_taint;
pub mod config_sync;
pub mod configmap_sync;
pub mod disruption_cap;
pub mod drain;
pub mod finalizer;
pub mod health_gates;
pub mod job_lifecycle;
#[cfg(test)]
mod pass_fixtures;
pub mod reboot_reset;
#[cfg(test)]
mod same_snapshot;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use nodewright_core::jobs::read::JobIndex;
use nodewright_core::node::state::parse_state;
use nodewright_core::rollout::disruption::{self, Rank};
use nodewright_core::rollout::parts::{
    PassParts, annotation_on, defaulted_policy, own_jobs, pass_parts, selected_nodes,
};
use nodewright_core::rollout::pass::{self, PassInput};
use nodewright_core::rollout::selection::NodeSelection;
use nodewright_core::rollout::{batches, config_updates, history, rollback, uninstall};
use nodewright_shared::api::{DeploymentPolicy, NodeWright, NodeWrightStatus, Status};
use nodewright_shared::defaults::default_nodewright;
use nodewright_shared::keys;
use nodewright_shared::node_state::NodeState;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::context::{Context, PolicyLookup};
use crate::error::ReconcileError;
use crate::metrics::nodewright_gauges::{self as state_metrics, Outcome};
use crate::writes::StatusWrite;

/// Requeue while work is in flight: a safety net, progress is driven by watch events.
const IN_FLIGHT_RESYNC: Duration = Duration::from_secs(30);
/// The Event reason of a rollout a closed maintenance window starts holding back.
pub const WAITING_FOR_WINDOW: &str = "WaitingForWindow";
/// The Event reason of a finished batch that starts its soak.
pub const BATCH_SOAKING: &str = "BatchSoaking";
/// The Event reason of a rollout the cluster-wide disruption cap starts holding back.
pub const WAITING_FOR_DISRUPTION_CAP: &str = "WaitingForDisruptionCap";
/// Requeue while the cluster-wide disruption cap holds a cordon back: the node another NodeWright
/// releases wakes only the NodeWrights that select it.
const CAP_RECHECK: Duration = Duration::from_secs(5);
/// Requeue while a node drains: evicted pods going away trigger nothing the operator watches.
const DRAIN_RECHECK: Duration = Duration::from_secs(2);
/// Passes run at once (over distinct NodeWrights; one NodeWright never has two). Unbounded, every
/// NodeWright woken at once runs its pass at once: under churn (each edit wakes one) hundreds of
/// passes held their working sets and one apiserver connection per request in flight, and slowed
/// the apiserver they all waited on. A pass makes at most [`act_on_nodes::NODE_CONCURRENCY`] requests at a
/// time, so this bounds the operator's requests in flight too. (Upstream: one worker.)
pub const PASS_CONCURRENCY: u16 = 16;

/// Reconciles one NodeWright.
pub async fn reconcile(
    nodewright: Arc<NodeWright>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let span = info_span!("reconcile_nodewright", nodewright = %nodewright.name_any());
    // The store may not show this term's last status write yet.
    let nodewright = ctx.writer.fresher(nodewright);
    let result = one_pass(&nodewright, &ctx).instrument(span).await;
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

/// One pass over a NodeWright: guards, the steps that write before planning (each may end the pass
/// and plan again on its own event), then the pure decision and its acts.
async fn one_pass(nodewright: &NodeWright, ctx: &Context) -> Result<Action, ReconcileError> {
    if let Some(action) = may_pass_or_add_finalizer(ctx, nodewright).await? {
        return Ok(action);
    }
    match write_pre_steps(ctx, nodewright).await? {
        Prepared::Again(action) => Ok(action),
        Prepared::Ready(ready) => decide_and_act(ctx, nodewright, *ready).await,
    }
}

/// Whether the pass may run at all (`Some`: it may not, come back then): this replica leads, the
/// Job store has listed, the finalizer is in place (adding it ends the pass: the write is an event).
async fn may_pass_or_add_finalizer(
    ctx: &Context,
    nodewright: &NodeWright,
) -> Result<Option<Action>, ReconcileError> {
    if !ctx.leading() {
        return Ok(Some(Action::await_change()));
    }
    if !ctx.jobs_synced() {
        debug!("the Job store has not listed yet; the pass waits");
        // An unsynced store would read as "no Job yet" and start stages that already ran.
        return Ok(Some(Action::requeue(Duration::from_millis(500))));
    }
    let deleting = nodewright.metadata.deletion_timestamp.is_some();
    if deleting && !finalizer::has_finalizer(nodewright) {
        return Ok(Some(Action::await_change()));
    }
    if !deleting && !finalizer::has_finalizer(nodewright) {
        finalizer::add(ctx, nodewright).await?;
        // The write is an event: the next reconcile sees the finalizer.
        return Ok(Some(Action::await_change()));
    }
    Ok(None)
}

/// What the pass works on once its pre-steps wrote nothing.
struct Ready {
    /// Defaulted, with the config updates' interrupts (and, when deleting, its uninstalls).
    nw: NodeWright,
    deleting: bool,
    paused: bool,
    disabled: bool,
    /// Selected nodes, in rollout order.
    nodes: Vec<Arc<Node>>,
    /// Every node in the cache (priority gates look at nodes this NodeWright does not select).
    every_node: Vec<Arc<Node>>,
    /// Every NodeWright this operator reconciles (priority, runtime-required taint): the store's
    /// own objects, shared, never copies (a pass runs for each NodeWright, many at once: copies of
    /// every NodeWright per pass grow with the square of their number).
    all_nodewrights: Vec<Arc<NodeWright>>,
    jobs: JobIndex,
    policy: Option<DeploymentPolicy>,
    missing_policy: Option<String>,
}

/// The outcome of the pre-steps.
enum Prepared {
    /// A pre-step wrote (its event plans again) or must wait.
    Again(Action),
    /// Nothing more to write first: decide.
    Ready(Box<Ready>),
}

/// The steps that act before the pass plans, in upstream's order: defaults, auto-taint of new nodes,
/// deletion (cleanup or uninstall-first), reboot resets, pause/drift of Jobs, config updates, and
/// the DeploymentPolicy lookup.
async fn write_pre_steps(
    ctx: &Context,
    nodewright: &NodeWright,
) -> Result<Prepared, ReconcileError> {
    let again = |action| Ok(Prepared::Again(action));
    let name = nodewright.name_any();
    let deleting = nodewright.metadata.deletion_timestamp.is_some();
    if !deleting && auto_rollback::carry_out(ctx, nodewright).await? {
        // The rollback's writes are events: plan again on the object as written.
        return again(Action::requeue(Duration::from_secs(1)));
    }
    // Objects can reach storage without the webhook: apply the same defaults (in memory).
    let mut nw = nodewright.clone();
    default_nodewright(&mut nw.spec, &ctx.config.jobs.defaults);
    let paused = annotation_on(&nw, keys::PAUSE_ANNOTATION);
    let disabled = annotation_on(&nw, keys::DISABLE_ANNOTATION);

    let selection = NodeSelection::of(&nw)?;
    // One snapshot of the node cache per pass: the selection and the priority gates read it.
    let every_node = ctx.nodes.state();
    let nodes = selected_nodes(&selection, &every_node);
    let all_nodewrights = ctx.nodewrights.state();
    // New nodes are tainted before anything else is written to them (upstream: first in reconcile).
    let node_refs: Vec<&Node> = nodes.iter().map(|n| n.as_ref()).collect();
    if auto_taint::taint_new_nodes(ctx, &all_nodewrights, &node_refs).await? > 0 {
        // The taints are events; plan again on the tainted nodes.
        return again(Action::requeue(Duration::from_secs(1)));
    }
    if deleting {
        let states: Vec<Option<NodeState>> = nodes.iter().map(|n| parse_state(n, &name)).collect();
        if !uninstall::pending(&nw, states.iter().map(Option::as_ref)) {
            ctx.forget_nodewright(&name);
            return Ok(Prepared::Again(finalizer::cleanup(ctx, nodewright).await?));
        }
        info!(nodewright = %name, "deletion waits for the uninstall of its enabled packages");
        uninstall::on_delete(&mut nw);
    }
    if reboot_reset::reset_rebooted(ctx, &nw, &nodes).await? {
        // The resets are events; plan again on the fresh nodes.
        return again(Action::requeue(Duration::from_secs(1)));
    }

    // With the marks this term wrote that the Job store does not show yet: a completion recorded
    // by the last pass is not recorded (and counted) again.
    let jobs = own_jobs(&name, &ctx.writer.with_own_marks(ctx.jobs.state()));
    job_lifecycle::set_suspended(ctx, &jobs, paused).await?;
    if !paused && job_lifecycle::replace_drifted(ctx, &nw, &jobs).await? > 0 {
        // The deletions are events; plan again on the Jobs that remain.
        return again(Action::requeue(Duration::from_secs(1)));
    }
    if config_sync::sync(ctx, &mut nw, &nodes).await? {
        // The status write is an event: plan again on the updated object.
        return again(Action::requeue(Duration::from_secs(1)));
    }
    // From here on, packages with config updates carry the interrupt those call for.
    let nw = config_updates::effective(&nw);

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
            PolicyLookup::NotSynced => return again(Action::requeue(Duration::from_millis(500))),
            PolicyLookup::Found(found) => (Some(defaulted_policy(&found)), None),
            PolicyLookup::Missing => (None, Some(policy.to_owned())),
        },
    };
    Ok(Prepared::Ready(Box::new(Ready {
        nw,
        deleting,
        paused,
        disabled,
        nodes,
        every_node,
        all_nodewrights,
        jobs,
        policy,
        missing_policy,
    })))
}

/// Decides the pass ([`pass::decide`]) and acts on it: the advanced and marked nodes, their node
/// conditions, then the one status write.
async fn decide_and_act(
    ctx: &Context,
    nodewright: &NodeWright,
    ready: Ready,
) -> Result<Action, ReconcileError> {
    let Ready {
        nw,
        deleting,
        paused,
        disabled,
        nodes,
        every_node,
        all_nodewrights,
        jobs,
        policy,
        missing_policy,
    } = ready;
    let name = nw.name_any();
    let PassParts {
        gates,
        tolerations,
        compartments,
        reset_batches,
        windows,
        health_gates: gates_in_effect,
    } = pass_parts(
        &nw,
        &all_nodewrights,
        &every_node,
        &nodes,
        policy.as_ref(),
        &ctx.config.jobs.runtime_required_taint,
    );
    let now = ctx.now();
    let input_over = |old_status| PassInput {
        nodewright: &nw,
        old_status,
        nodes: &nodes,
        gates: &gates,
        jobs: &jobs,
        tolerations: &tolerations,
        reset_batches,
        missing_policy: missing_policy.is_some(),
        paused,
        disabled,
        deleting,
        now,
        windows: &windows,
        health_gates: gates_in_effect.as_ref(),
    };
    let first_status = nw.status.clone().unwrap_or_default();
    let rollback_on_failure = policy
        .as_ref()
        .is_some_and(|p| p.spec.rollback_on_failure == Some(true));
    // A batch starts only from a persisted state: when this pass changes one, it is written now
    // and the pass decided again over it, so the batch starts in this pass. A compartment stopped
    // by that write has its automatic rollback due in the same write.
    let decided =
        pass::decide_from_persisted(&input_over(&first_status), &compartments, |status| {
            rollback::mark(&first_status, status, nodewright, rollback_on_failure, now);
        });
    // The object the status write of this pass is guarded by (it changes if the pass writes early).
    let mut written: Option<NodeWright> = None;
    if let Some(status) = &decided.persist {
        written = Some(
            ctx.writer
                .write_status(nodewright, StatusWrite::Whole(status))
                .await?,
        );
    }
    let old_status = decided.persist.as_ref().unwrap_or(&first_status);
    let mut decision = decided.decision;
    let nodewright = written.as_ref().unwrap_or(nodewright);
    let input = input_over(old_status);
    for compartment in &decision.newly_stopped {
        warn!(nodewright = %name, %compartment, "failed batches reached the failure threshold; the rollout of this compartment stops until its batch state is reset");
    }

    let acted = act_on_nodes::act_on_nodes(ctx, &input, &mut decision, &all_nodewrights).await;
    let (results, draining, first_error) = (acted.results, acted.draining, acted.first_error);
    let at_gates = acted.at_gates;
    let held_by_cap = decision.held_by_cap.is_some();
    ctx.disruption.settle(&Rank::of(&nw), held_by_cap);

    let wake_at = decision.wake_at;
    let mut status = pass::status_after(&input, &compartments, decision, results);
    if !deleting {
        let limit = ctx.config.revision_history_limit;
        history::record_pass(&mut status, nodewright, limit, now);
    }
    rollback::mark(
        old_status,
        &mut status,
        nodewright,
        rollback_on_failure,
        now,
    );
    announce_changes(ctx, nodewright, &first_status, old_status, &status).await;
    // While a closed window or a soak holds nodes back, wake when it ends (within the in-flight
    // resync).
    let window_wake = wake_at.map(|at| {
        let wait = u64::try_from(at.as_second().saturating_sub(now.as_second())).unwrap_or(0);
        Duration::from_secs(wait.saturating_add(1))
    });
    let strategies = compartments
        .iter()
        .map(|c| (c.name.clone(), batches::strategy_name(c.strategy.as_ref())))
        .collect();
    ctx.metrics
        .report(&name, state_metrics::samples(&nw, &status, &strategies));
    let rollup = status.status;
    write_status(ctx, nodewright, old_status, status).await?;
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(next_pass(
        ctx,
        rollup,
        Requeue {
            draining,
            at_gates,
            held_by_cap,
            window_wake,
        },
    ))
}

/// Why this pass wants to run again soon, whatever its rollup status.
struct Requeue {
    /// Work waits for a node to drain.
    draining: bool,
    /// A node waits at its health gates.
    at_gates: bool,
    /// The cluster-wide disruption cap held a cordon back.
    held_by_cap: bool,
    /// A closed window or a soak ends after this long.
    window_wake: Option<Duration>,
}

/// When the NodeWright is reconciled again: soonest for what can change without an event (a drain,
/// gates, the cap, a window or soak ending), the resync interval once complete.
fn next_pass(ctx: &Context, rollup: Option<Status>, requeue: Requeue) -> Action {
    match rollup {
        _ if requeue.draining => Action::requeue(DRAIN_RECHECK),
        _ if requeue.at_gates => Action::requeue(health_gates::GATE_RECHECK),
        _ if requeue.held_by_cap => Action::requeue(CAP_RECHECK),
        _ if let Some(wait) = requeue.window_wake => Action::requeue(wait.min(IN_FLIGHT_RESYNC)),
        Some(Status::Complete) => Action::requeue(ctx.config.default_interval),
        _ => Action::requeue(IN_FLIGHT_RESYNC),
    }
}

/// The Events of what this pass's status newly says: a blocked deletion, a closed window, the
/// disruption cap holding nodes back, a batch starting its soak (each once, when it starts).
async fn announce_changes(
    ctx: &Context,
    nodewright: &NodeWright,
    first_status: &NodeWrightStatus,
    old_status: &NodeWrightStatus,
    status: &NodeWrightStatus,
) {
    if let Some((reason, message)) = newly_true(old_status, status, uninstall::DELETION_BLOCKED) {
        ctx.events
            .warn_on_nodewright(nodewright, &reason, message, None)
            .await;
    }
    if let Some(waiting) = status
        .waiting_for
        .as_ref()
        .filter(|w| w.starts_with(nodewright_shared::window::WAITING))
        && !first_status
            .waiting_for
            .as_ref()
            .is_some_and(|w| w.starts_with(nodewright_shared::window::WAITING))
    {
        ctx.events
            .on_nodewright(
                nodewright,
                WAITING_FOR_WINDOW,
                format!("No new node starts until the next maintenance window: {waiting}"),
                None,
            )
            .await;
    }
    if let Some(waiting) = cap_waiting(status).filter(|_| cap_waiting(first_status).is_none()) {
        ctx.events
            .on_nodewright(
                nodewright,
                WAITING_FOR_DISRUPTION_CAP,
                format!(
                    "Disruptive stages wait: {waiting}; the first NodeWright by priority, then age, gets the next node released"
                ),
                None,
            )
            .await;
    }
    for (compartment, c) in &status.compartment_statuses {
        let until = c.batch_state.as_ref().and_then(|b| b.soak_until.as_ref());
        let before = first_status
            .compartment_statuses
            .get(compartment)
            .and_then(|o| o.batch_state.as_ref())
            .and_then(|b| b.soak_until.as_ref());
        if let Some(until) = until.filter(|_| before.is_none()) {
            ctx.events
                .on_nodewright(
                    nodewright,
                    BATCH_SOAKING,
                    format!(
                        "A batch of compartment {compartment} finished; it soaks until {} before it is judged and the next batch starts",
                        until.0.strftime("%Y-%m-%dT%H:%M:%SZ")
                    ),
                    None,
                )
                .await;
        }
    }
}

/// The disruption cap's part of `status.waitingFor`, when it holds nodes back.
fn cap_waiting(status: &NodeWrightStatus) -> Option<&str> {
    let waiting = status.waiting_for.as_deref()?;
    waiting
        .split("; ")
        .find(|part| part.starts_with(disruption::WAITING))
}

/// The reason and message of the condition `type_` when `new` sets it True, or True for another
/// reason, and `old` did not (for the Event that announces it once).
fn newly_true(
    old: &NodeWrightStatus,
    new: &NodeWrightStatus,
    type_: &str,
) -> Option<(String, String)> {
    let true_in = |s: &NodeWrightStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let now = true_in(new)?;
    (true_in(old).map(|(reason, _)| reason) != Some(now.0.clone())).then_some(now)
}

/// Writes the pass's status, only when it changed, and announces a change of the roll-up.
async fn write_status(
    ctx: &Context,
    nodewright: &NodeWright,
    old: &NodeWrightStatus,
    mut status: NodeWrightStatus,
) -> Result<(), ReconcileError> {
    let name = nodewright.name_any();
    if nodewright.status.is_some() && ctx.writer.status_unchanged(&name, old, &mut status) {
        return Ok(());
    }
    ctx.writer
        .write_status(nodewright, StatusWrite::Whole(&status))
        .await?;
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
                None,
            )
            .await;
    }
    Ok(())
}
