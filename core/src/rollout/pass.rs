//! One rollout pass as pure decisions, so they can be tested without an apiserver (as `plan.rs` and
//! `batches.rs` are): [`decide`] reads the NodeWright, its nodes and Jobs, and says which nodes are
//! blocked or wait, which are admitted within the budget and the batches (and in which order),
//! computing each node's [`Plan`] once; the reconciler then acts on that decision node by node, and
//! [`status_after`] turns what happened into the one status the pass writes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube_core::ResourceExt;
use nodewright_shared::api::{
    BatchState, CompartmentStatus, HealthGates, NodeWright, NodeWrightStatus, Status,
};
use nodewright_shared::node_state::{NodeState, State};

use super::budget::{Slot, admit};
use super::compartments::Compartment;
use super::disruption::{self, CapState};
use super::graph;
use super::plan::{Plan, plan_node};
use super::priority::{self, Gate};
use super::selection::{Blocker, blocker};
use super::status::{self, NodeFacts, StatusInput, any_erroring, node_status};
use super::windows::Schedule;
use super::{absorb, batches};
use super::{reboots, uninstall};
use crate::jobs::read::JobIndex;
use crate::node::cordon;
use crate::node::health_gates;
use crate::node::state::parse_state;

/// What one pass decides from.
pub struct PassInput<'a> {
    /// The NodeWright as the pass works on it: defaulted, with its config updates' interrupts.
    pub nodewright: &'a NodeWright,
    /// Its status as read (the previous pass's).
    pub old_status: &'a NodeWrightStatus,
    /// The nodes it selects, in rollout order (creation time, then name).
    pub nodes: &'a [Arc<Node>],
    /// The earlier NodeWrights that can hold it back ([`priority::gates`]).
    pub gates: &'a [Gate<'a>],
    /// Its Jobs, and the nodes busy with any NodeWright's package Job.
    pub jobs: &'a JobIndex,
    /// The taints its packages tolerate ([`super::selection::selection_tolerations`]).
    pub tolerations: &'a [Toleration],
    /// `resetBatchStateOnCompletion` in effect ([`batches::reset_enabled`]).
    pub reset_batches: bool,
    /// `spec.deploymentPolicy` names a policy that does not exist.
    pub missing_policy: bool,
    /// The pause annotation.
    pub paused: bool,
    /// The disable annotation.
    pub disabled: bool,
    /// The NodeWright is being deleted (its uninstalls run first).
    pub deleting: bool,
    /// The pass's clock (admission time of newly admitted nodes, the maintenance windows).
    pub now: Timestamp,
    /// The policy's maintenance windows: outside them no new node is admitted.
    pub windows: &'a Schedule,
    /// The health gates in effect (the policy's, or the NodeWright's own): a node whose packages
    /// finished waits at them before it counts complete ([`health_gates`]).
    pub health_gates: Option<&'a HealthGates>,
}

/// One selected node, as the pass found it.
pub struct NodeRow {
    /// The node (cached).
    pub node: Arc<Node>,
    /// Its records for this NodeWright, with the outcomes of its completed, unrecorded Jobs folded
    /// in ([`absorb`]); `None` when malformed (never overwritten).
    pub state: Option<NodeState>,
    /// The completed Jobs folded into `state`: marked recorded once `state` is written.
    pub absorbed: Vec<String>,
    /// Ignored, an untolerated taint, or a malformed state.
    pub blocked: bool,
    /// An earlier NodeWright is not done here yet.
    pub waits: bool,
    /// Every package finished and the node passed its health gates.
    pub complete: bool,
    /// Every package finished; the node waits at its health gates.
    pub at_gates: bool,
    /// It waits there past a gate's timeout (`GateFailed`): a failed node of its batch.
    pub gate_failed: bool,
    /// What the stage machine wants here (computed once per pass; `None` with no readable state).
    pub plan: Option<Plan>,
}

impl NodeRow {
    /// A stage timed out here.
    pub fn timed_out(&self) -> bool {
        self.plan.as_ref().is_some_and(|p| p.timed_out)
    }

    /// The node failed here: a stage timed out, or a health gate did (either frees its slot and
    /// counts against its batch).
    pub fn failed(&self) -> bool {
        self.timed_out() || self.gate_failed
    }
}

/// What the pass decided.
pub struct PassDecision<'c> {
    /// Every selected node by name.
    pub rows: BTreeMap<String, NodeRow>,
    /// Selected nodes carrying the ignore label (sorted).
    pub ignored: Vec<String>,
    /// Selected nodes with a taint the NodeWright does not tolerate (sorted).
    pub untolerated: Vec<String>,
    /// The nodes admitted into the rollout now.
    pub active: BTreeSet<String>,
    /// Per compartment: its batch state after this pass's admission (`None`: no strategy).
    pub batch_states: BTreeMap<String, Option<BatchState>>,
    /// Per compartment (in order), its nodes' slots as admission saw them.
    pub slots: Vec<Vec<Slot<'c>>>,
    /// Compartments whose failed batches reached the failure threshold in this pass.
    pub newly_stopped: Vec<String>,
    /// `status.nodePriority`: admitted nodes keep their place until they complete.
    pub node_priority: BTreeMap<String, Time>,
    /// `status.nodeOrderOffset`.
    pub node_order_offset: i32,
    /// `status.waitingFor`: a closed maintenance window or a soaking batch holds back nodes that
    /// would start.
    pub waiting_for: Option<String>,
    /// When what holds them back ends (the window opens, the soak is over): the pass's wake-up.
    pub wake_at: Option<Timestamp>,
    /// The cluster-wide disruption cap held back the cordon of some node this pass works on: the
    /// cap as counted then. Set by whoever grants the cap's slots (the operator's ledger, the
    /// preview's [`cap_holds`]); `status.waitingFor` says so.
    pub held_by_cap: Option<CapState>,
}

impl PassDecision<'_> {
    /// Every admitted node's `SKYHOOK_NODE_ORDER`: its place among admitted nodes, after those that
    /// left (a node not admitted would come first: the offset).
    pub fn node_orders(&self) -> BTreeMap<String, i64> {
        let mut order: Vec<(&Time, &String)> =
            self.node_priority.iter().map(|(n, t)| (t, n)).collect();
        order.sort();
        order
            .into_iter()
            .enumerate()
            .map(|(i, (_, n))| {
                let index = i64::try_from(i).unwrap_or_default();
                (n.clone(), index + i64::from(self.node_order_offset))
            })
            .collect()
    }

    /// The facts that decide the node's status, before this pass worked on it.
    pub fn facts(&self, input: &PassInput<'_>, row: &NodeRow, name: &str) -> NodeFacts {
        NodeFacts {
            complete: row.complete,
            paused: input.paused,
            disabled: input.disabled,
            blocked: row.blocked || input.missing_policy,
            erroring: row.gate_failed
                || row
                    .state
                    .as_ref()
                    .is_some_and(|s| any_erroring(input.nodewright, s)),
            active: self.active.contains(name),
        }
    }

    /// Whether the pass advances the node's packages (admitted, not blocked, not held back by an
    /// earlier NodeWright); the other nodes only get their status written.
    pub fn works_on(&self, input: &PassInput<'_>, name: &str) -> bool {
        self.rows.get(name).is_some_and(|row| {
            let facts = self.facts(input, row, name);
            facts.active && !facts.blocked && !row.waits
        })
    }

    /// The nodes this pass works on whose plan takes a new cordon, in rollout order: what asks the
    /// cluster-wide disruption cap for a slot.
    pub fn cordons_wanted<'n>(&self, input: &'n PassInput<'_>) -> Vec<&'n Arc<Node>> {
        let nw = input.nodewright.name_any();
        input
            .nodes
            .iter()
            .filter(|n| {
                let name = n.name_any();
                self.works_on(input, &name)
                    && self
                        .rows
                        .get(&name)
                        .and_then(|r| r.plan.as_ref())
                        .is_some_and(|p| p.cordon)
                    && !cordon::holds_cordon(n, &nw)
            })
            .collect()
    }
}

/// Which of the pass's wanted cordons ([`PassDecision::cordons_wanted`]) the cluster-wide
/// disruption cap holds back when slots are granted in rollout order, with nobody else asking: the
/// nodes past the free slots, among those no NodeWright has cordoned yet. The operator grants slots
/// through its ledger instead (other NodeWrights ask at the same time); the preview uses this.
pub fn cap_holds(decision: &PassDecision<'_>, input: &PassInput<'_>, cap: CapState) -> Vec<String> {
    let mut free = cap.free();
    decision
        .cordons_wanted(input)
        .into_iter()
        .filter(|n| disruption::takes_slot(n))
        .filter_map(|n| {
            if free > 0 {
                free -= 1;
                None
            } else {
                Some(n.name_any())
            }
        })
        .collect()
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

/// The rows of the selected nodes, and which are ignored or untolerated.
fn rows(input: &PassInput<'_>) -> (BTreeMap<String, NodeRow>, Vec<String>, Vec<String>) {
    let nw = input.nodewright;
    let name = nw.name_any();
    let mut rows = BTreeMap::new();
    let (mut ignored, mut untolerated) = (Vec::new(), Vec::new());
    for node in input.nodes {
        let node_name = node.name_any();
        let (state, absorbed) = match parse_state(node, &name) {
            Some(stored) => {
                let (state, absorbed) = absorb::completions(nw, &node_name, stored, input.jobs);
                (Some(state), absorbed)
            }
            None => (None, Vec::new()),
        };
        let reason = blocker(node, input.tolerations);
        match &reason {
            Some(Blocker::Ignored) => ignored.push(node_name.clone()),
            Some(Blocker::Taints(_)) => untolerated.push(node_name.clone()),
            None => {}
        }
        let plan = state
            .as_ref()
            .map(|s| plan_node(nw, &node_name, s, input.jobs, false));
        let all_done = state
            .as_ref()
            .is_some_and(|s| graph::all_done(&nw.spec.packages, s));
        // Uninstalls on deletion pass no gates: the NodeWright is going away.
        let health_gates = input.health_gates.filter(|_| !input.deleting);
        let at_gates = health_gates::at_gates(health_gates, node, &name, all_done);
        rows.insert(
            node_name,
            NodeRow {
                node: node.clone(),
                complete: all_done && !at_gates,
                at_gates,
                gate_failed: at_gates && health_gates::mark(node, &name).is_some_and(|m| m.failed),
                blocked: state.is_none() || reason.is_some(),
                waits: priority::waits(input.gates, node),
                state,
                absorbed,
                plan,
            },
        );
    }
    ignored.sort();
    untolerated.sort();
    (rows, ignored, untolerated)
}

/// Decides the pass: rows, admission within each compartment's budget and batches, node order.
pub fn decide<'c>(input: &PassInput<'_>, compartments: &'c [Compartment]) -> PassDecision<'c> {
    let nw = input.nodewright;
    let old = input.old_status;
    let (rows, ignored, untolerated) = rows(input);
    // A version change starts a new rollout: its batches begin afresh (when reset is enabled).
    let fresh_batches = input.reset_batches && batches::versions_changed(&old.package_list, nw);
    let may_start = !input.paused && !input.disabled && !input.missing_policy;
    // Outside every maintenance window the admitted nodes go on and no new one is admitted.
    let window = input.windows.state(input.now);
    let window_open = window.is_open();
    let mut held_by_window = false;
    let mut soaking: Vec<(String, i32, Timestamp)> = Vec::new();
    let mut active: BTreeSet<String> = BTreeSet::new();
    let mut batch_states = BTreeMap::new();
    let mut all_slots = Vec::new();
    let mut newly_stopped = Vec::new();
    for c in compartments {
        let slots: Vec<Slot<'c>> = c
            .nodes
            .iter()
            .filter_map(|n| rows.get(n).map(|r| (n, r)))
            .map(|(n, r)| Slot {
                node: n,
                admitted: old.node_priority.contains_key(n)
                    || r.state.as_ref().is_some_and(|s| started(nw, s)),
                complete: r.complete,
                timed_out: r.failed(),
                blocked: r.blocked || r.waits,
            })
            .collect();
        let mut batch_state = None;
        if let Some(strategy) = &c.strategy {
            let previous = old
                .compartment_statuses
                .get(&c.name)
                .and_then(|s| s.batch_state.as_ref())
                .filter(|_| !fresh_batches);
            let step = batches::step_at(
                strategy,
                previous,
                &slots,
                c.ceiling,
                may_start && window_open,
                input.now,
            );
            if step.state.should_stop && !previous.is_some_and(|p| p.should_stop) {
                newly_stopped.push(c.name.clone());
            }
            if let Some(until) = &step.state.soak_until
                && slots
                    .iter()
                    .any(|s| !s.admitted && !s.complete && !s.blocked)
            {
                soaking.push((c.name.clone(), step.state.current_batch, until.0));
            }
            batch_state = Some(step.state);
            if may_start {
                active.extend(step.admit.into_iter().map(str::to_owned));
            }
        } else if may_start {
            let ceiling = if window_open { c.ceiling } else { 0 };
            active.extend(admit(&slots, ceiling).into_iter().map(str::to_owned));
        }
        held_by_window |= may_start
            && !window_open
            && slots
                .iter()
                .any(|s| !s.admitted && !s.complete && !s.blocked);
        batch_states.insert(c.name.clone(), batch_state);
        all_slots.push(slots);
    }

    // nodePriority: admitted nodes keep their place until they complete (upstream's stickiness).
    let mut node_priority: BTreeMap<String, Time> = BTreeMap::new();
    let mut offset = old.node_order_offset;
    for (node, since) in &old.node_priority {
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
            .or_insert_with(|| Time(input.now));
    }
    let waiting_at_gates = rows
        .values()
        .filter(|r| r.at_gates && !r.gate_failed)
        .count();
    PassDecision {
        rows,
        ignored,
        untolerated,
        active,
        batch_states,
        slots: all_slots,
        newly_stopped,
        node_priority,
        node_order_offset: offset,
        waiting_for: waiting_for(input, held_by_window, &soaking, waiting_at_gates),
        held_by_cap: None,
        wake_at: held_by_window
            .then(|| window.opens().map(|z| z.timestamp()))
            .flatten()
            .into_iter()
            .chain(soaking.iter().map(|(_, _, until)| *until))
            .min(),
    }
}

/// `status.waitingFor`: the closed window, then each soaking compartment's batch, then the nodes
/// waiting at their health gates.
fn waiting_for(
    input: &PassInput<'_>,
    held_by_window: bool,
    soaking: &[(String, i32, Timestamp)],
    at_gates: usize,
) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if held_by_window && let Some(w) = input.windows.waiting(input.now) {
        parts.push(w);
    }
    for (compartment, batch, until) in soaking {
        parts.push(format!(
            "{SOAK_WAITING} of batch {batch} in compartment {compartment} (ends {})",
            until.strftime("%Y-%m-%dT%H:%M:%SZ")
        ));
    }
    if at_gates > 0 {
        parts.push(format!(
            "{GATES_WAITING} on {at_gates} node{}",
            if at_gates == 1 { "" } else { "s" }
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// `status.waitingFor` with the disruption cap's part when it held a node back.
fn with_cap(waiting_for: Option<String>, held_by_cap: Option<CapState>) -> Option<String> {
    let cap = held_by_cap.map(CapState::waiting);
    match (waiting_for, cap) {
        (Some(w), Some(c)) => Some(format!("{w}; {c}")),
        (w, c) => w.or(c),
    }
}

/// How `status.waitingFor` names the nodes waiting at their health gates (`... on N nodes`; the
/// metric reads N).
pub const GATES_WAITING: &str = "waiting for health gates";

/// How `status.waitingFor` names a soaking batch (the metric reads the batch state instead).
pub const SOAK_WAITING: &str = "waiting for soak";

/// A pass decided as it runs ([`decide_from_persisted`]).
pub struct Decided<'c> {
    /// The status to persist before the pass acts: the batch states its first decision changed
    /// (`None`: nothing changed, the pass goes on from the status as read).
    pub persist: Option<NodeWrightStatus>,
    /// The decision the pass acts on, made over `persist` when there is one.
    pub decision: PassDecision<'c>,
}

/// Decides a pass the one way both the rollout and the preview run it: decide over the status as
/// read; when that changes a batch state ([`batch_states_to_persist`]), `amend` the status to
/// persist (the rollout marks a due automatic rollback in the same write) and decide again over
/// it, so the batch starts in this pass from a state that is persisted before anything acts.
pub fn decide_from_persisted<'c>(
    input: &PassInput<'_>,
    compartments: &'c [Compartment],
    amend: impl FnOnce(&mut NodeWrightStatus),
) -> Decided<'c> {
    let first = decide(input, compartments);
    let Some(mut status) = batch_states_to_persist(input, &first) else {
        return Decided {
            persist: None,
            decision: first,
        };
    };
    amend(&mut status);
    let decision = decide(
        &PassInput {
            old_status: &status,
            ..*input
        },
        compartments,
    );
    Decided {
        persist: Some(status),
        decision,
    }
}

/// The status to write before acting, when this pass's batch evaluation changed a compartment's
/// batch state: a new batch starts only from a persisted state ([`batches::step`], so a crash can
/// never leave a batch running that its state does not account for). Written at once and decided
/// again, the batch starts in this pass instead of the next one (which the status write would
/// wake a round trip later). `None` when no batch state changed, or nothing may start anyway.
pub fn batch_states_to_persist(
    input: &PassInput<'_>,
    decision: &PassDecision<'_>,
) -> Option<NodeWrightStatus> {
    if input.paused || input.disabled || input.missing_policy {
        return None;
    }
    let old = input.old_status;
    let mut status = old.clone();
    let mut changed = false;
    for (name, state) in &decision.batch_states {
        let Some(state) = state else { continue };
        let before = old
            .compartment_statuses
            .get(name)
            .and_then(|c| c.batch_state.as_ref());
        if before != Some(state) {
            status
                .compartment_statuses
                .entry(name.clone())
                .or_default()
                .batch_state = Some(state.clone());
            changed = true;
        }
    }
    // The persisted state is that of the current versions (a version change reset it).
    status.package_list = status::package_list(input.nodewright);
    // The status is written whole, and the stored one carries no per-node records
    // (runtime::nodewrights): they are the rows' (the final write of the pass follows).
    status.node_state = decision
        .rows
        .iter()
        .filter_map(|(n, r)| r.state.clone().map(|s| (n.clone(), s)))
        .collect();
    changed.then_some(status)
}

fn to_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The status the pass writes, from its decision and what happened on each node (`results`: the
/// node's records after the pass, `None` when malformed, and its status), with every other part
/// of the status as an input of [`status::build`]: the boot IDs seen, the config updates recorded
/// before the pass planned, and the uninstall conditions.
pub fn status_after(
    input: &PassInput<'_>,
    compartments: &[Compartment],
    mut decision: PassDecision<'_>,
    results: BTreeMap<String, (Option<NodeState>, Status)>,
) -> NodeWrightStatus {
    let uninstall_conditions = uninstall_conditions(input, &decision);
    // Compartment counts and batch states from this pass's outcome (a node can complete during it).
    let done_now = |n: &str| {
        results
            .get(n)
            .is_some_and(|(_, status)| *status == Status::Complete)
    };
    for (c, slots) in compartments.iter().zip(&decision.slots) {
        let (Some(strategy), Some(Some(state))) =
            (&c.strategy, decision.batch_states.get_mut(&c.name))
        else {
            continue;
        };
        let after: Vec<Slot<'_>> = slots
            .iter()
            .map(|s| Slot {
                admitted: s.admitted || decision.active.contains(s.node),
                complete: s.complete || done_now(s.node),
                ..s.clone()
            })
            .collect();
        *state = batches::settle_at(strategy, state, &after, input.now);
    }
    let compartment_statuses = compartments
        .iter()
        .map(|c| {
            let completed = c.nodes.iter().filter(|n| done_now(n)).count();
            let in_progress = c
                .nodes
                .iter()
                .filter(|n| decision.active.contains(*n) && !done_now(n))
                .count();
            let status = CompartmentStatus {
                matched: to_i32(c.nodes.len()),
                ceiling: to_i32(c.ceiling),
                in_progress: to_i32(in_progress),
                completed: to_i32(completed),
                progress_percent: to_i32((completed * 100).checked_div(c.nodes.len()).unwrap_or(0)),
                batch_state: decision.batch_states.remove(&c.name).flatten(),
            };
            (c.name.clone(), status)
        })
        .collect();
    let nodewright = input.nodewright;
    let mut status = status::build(
        nodewright,
        StatusInput {
            nodes: results,
            node_priority: decision.node_priority,
            node_order_offset: decision.node_order_offset,
            compartments: compartment_statuses,
            paused: input.paused,
            disabled: input.disabled,
            missing_policy: input.missing_policy.then(|| {
                nodewright
                    .spec
                    .deployment_policy
                    .clone()
                    .unwrap_or_default()
            }),
            ignored: decision.ignored,
            untolerated: decision.untolerated,
            // Recorded every pass (a reboot to reapply on was handled before the pass planned).
            node_boot_ids: reboots::current_ids(&input.old_status.node_boot_ids, input.nodes),
            config_updates: input.old_status.config_updates.clone(),
            uninstall_conditions,
            waiting_for: with_cap(decision.waiting_for, decision.held_by_cap),
            // Kept as read; the operator records the pass's revision and rollback into them.
            revisions: input.old_status.revisions.clone(),
            rollback: input.old_status.rollback.clone(),
        },
        input.now,
    );
    if input.reset_batches
        && status.status == Some(Status::Complete)
        && input.old_status.status != Some(Status::Complete)
    {
        // Completion resets the batches (upstream-api.md §5.7): the next rollout starts at batch 1.
        for c in status.compartment_statuses.values_mut() {
            if let Some(b) = c.batch_state.as_mut() {
                let completed = usize::try_from(c.completed).unwrap_or_default();
                *b = batches::initial(completed, 0);
            }
        }
    }
    status
}

/// The conditions of the uninstall steps, from the nodes' records: UninstallInProgress and
/// UninstallFailed, Blocked (a dependency is uninstalled) and, while the NodeWright is deleted,
/// DeletionBlocked (its uninstalls cannot run).
fn uninstall_conditions(
    input: &PassInput<'_>,
    decision: &PassDecision<'_>,
) -> Vec<(&'static str, Option<(String, String)>)> {
    let nw = input.nodewright;
    let states = || decision.rows.values().filter_map(|r| r.state.as_ref());
    let owned = |v: Option<(&str, &str)>| v.map(|(r, m)| (r.to_owned(), m.to_owned()));
    let mut conditions: Vec<(&'static str, Option<(String, String)>)> =
        uninstall::uninstall_conditions(nw, states())
            .into_iter()
            .map(|(type_, value)| (type_, owned(value)))
            .collect();
    conditions.push((
        uninstall::BLOCKED,
        uninstall::dependency_block(nw, states())
            .map(|m| (uninstall::DEPENDENCY_UNINSTALLED.to_owned(), m)),
    ));
    let deletion_blocked = if input.deleting {
        let malformed = decision.rows.values().any(|r| r.state.is_none());
        uninstall::deletion_blocked(input.paused, input.disabled, malformed)
    } else {
        None
    };
    conditions.push((uninstall::DELETION_BLOCKED, owned(deletion_blocked)));
    conditions
}

/// The status of a node the pass does not work on (and of one whose work failed).
pub fn idle_status(decision: &PassDecision<'_>, input: &PassInput<'_>, name: &str) -> Status {
    decision.rows.get(name).map_or(Status::Blocked, |row| {
        if row.state.is_none() {
            Status::Blocked
        } else {
            node_status(decision.facts(input, row, name))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use nodewright_shared::api::{NodeWrightSpec, Package, Sequencing};
    use nodewright_shared::keys;
    use nodewright_shared::node_state::{PackageStatus, Stage};

    fn nodewright(name: &str, priority: i32, sequencing: Sequencing) -> NodeWright {
        let mut nw = NodeWright::new(
            name,
            NodeWrightSpec {
                packages: BTreeMap::from([(
                    "a".to_owned(),
                    Package {
                        version: "1.0.0".into(),
                        image: "img".into(),
                        ..Package::default()
                    },
                )]),
                priority,
                sequencing,
                ..NodeWrightSpec::default()
            },
        );
        nw.metadata.generation = Some(1);
        nw
    }

    /// A node with `annotations` (its node state for `nw`, an ignore label...).
    fn node(name: &str, labels: &[(&str, &str)], annotations: &[(String, String)]) -> Arc<Node> {
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        })
    }

    fn state_of(nw: &str, stage: Stage, state: State) -> (String, String) {
        let mut s = NodeState::default();
        s.upsert(PackageStatus {
            name: "a".into(),
            version: "1.0.0".into(),
            image: "img".into(),
            container_sha: String::new(),
            stage,
            state: Some(state),
            restarts: 0,
        });
        (keys::node_state_key(nw), s.to_annotation())
    }

    fn compartment(nodes: &[&Arc<Node>], ceiling: usize) -> Vec<Compartment> {
        vec![Compartment {
            name: "__default__".into(),
            ceiling,
            nodes: nodes.iter().map(|n| n.name_any()).collect(),
            strategy: None,
        }]
    }

    struct Fixture {
        nw: NodeWright,
        old: NodeWrightStatus,
        nodes: Vec<Arc<Node>>,
        jobs: JobIndex,
        paused: bool,
        windows: Schedule,
        now: Timestamp,
    }

    impl Fixture {
        fn new(nw: NodeWright, nodes: Vec<Arc<Node>>) -> Self {
            Fixture {
                nw,
                old: NodeWrightStatus::default(),
                nodes,
                jobs: JobIndex::default(),
                paused: false,
                windows: Schedule::Always,
                now: Timestamp::UNIX_EPOCH,
            }
        }

        fn input<'a>(&'a self, gates: &'a [Gate<'a>]) -> PassInput<'a> {
            PassInput {
                nodewright: &self.nw,
                old_status: &self.old,
                nodes: &self.nodes,
                gates,
                jobs: &self.jobs,
                tolerations: &[],
                reset_batches: false,
                missing_policy: false,
                paused: self.paused,
                disabled: false,
                deleting: false,
                now: self.now,
                windows: &self.windows,
                health_gates: None,
            }
        }
    }

    #[test]
    fn outside_every_window_admitted_nodes_go_on_and_no_new_node_starts() {
        use nodewright_shared::api::{DeploymentPolicy, DeploymentPolicySpec, MaintenanceWindow};
        let nw = nodewright("nw", 200, Sequencing::Node);
        let started = node(
            "n0",
            &[],
            &[state_of("nw", Stage::Apply, State::InProgress)],
        );
        let nodes = vec![started, node("n1", &[], &[]), node("n2", &[], &[])];
        let all: Vec<&Arc<Node>> = nodes.iter().collect();
        let compartments = compartment(&all, 2);
        let mut f = Fixture::new(nw, nodes.clone());
        let policy = DeploymentPolicy::new(
            "p",
            DeploymentPolicySpec {
                windows: vec![MaintenanceWindow {
                    days: Vec::new(),
                    start: "22:00".into(),
                    end: "04:00".into(),
                    time_zone: Some("Europe/Berlin".into()),
                }],
                ..DeploymentPolicySpec::default()
            },
        );
        f.windows = Schedule::of(Some(&policy));
        // 13:00 in Berlin: closed. n0 (started) goes on, n1 would fit the budget but waits.
        f.now = "2026-12-03T12:00:00Z".parse().expect("time");
        let d = decide(&f.input(&[]), &compartments);
        assert_eq!(d.active, BTreeSet::from(["n0".into()]));
        assert_eq!(
            d.waiting_for.as_deref(),
            Some("waiting for window (opens 2026-12-03T22:00+01:00)")
        );
        assert_eq!(idle_status(&d, &f.input(&[]), "n1"), Status::Waiting);
        // 23:00 in Berlin: open, the budget admits n1.
        f.now = "2026-12-03T22:00:00Z".parse().expect("time");
        let d = decide(&f.input(&[]), &compartments);
        assert_eq!(d.active, BTreeSet::from(["n0".into(), "n1".into()]));
        assert_eq!(d.waiting_for, None);
        // Closed again with nothing left to start: nothing is waiting for the window.
        let done = |n: &str| node(n, &[], &[state_of("nw", Stage::Config, State::Complete)]);
        f.nodes = vec![done("n0"), done("n1"), done("n2")];
        f.now = "2026-12-04T12:00:00Z".parse().expect("time");
        let all: Vec<&Arc<Node>> = f.nodes.iter().collect();
        let compartments = compartment(&all, 2);
        let d = decide(&f.input(&[]), &compartments);
        assert_eq!(d.waiting_for, None);
    }

    #[test]
    fn the_budget_admits_nodes_in_order_and_keeps_started_ones_and_blocked_ones_out() {
        let nw = nodewright("nw", 200, Sequencing::Node);
        let started = node(
            "n0",
            &[],
            &[state_of("nw", Stage::Apply, State::InProgress)],
        );
        let ignored = node("n1", &[(keys::IGNORE_LABEL, "true")], &[]);
        let malformed = node("n2", &[], &[(keys::node_state_key("nw"), "{".into())]);
        let fresh = [node("n3", &[], &[]), node("n4", &[], &[])];
        let nodes = vec![
            started.clone(),
            ignored.clone(),
            malformed.clone(),
            fresh[0].clone(),
            fresh[1].clone(),
        ];
        let all: Vec<&Arc<Node>> = nodes.iter().collect();
        let compartments = compartment(&all, 2);
        let f = Fixture::new(nw, nodes.clone());
        let input = f.input(&[]);
        let d = decide(&input, &compartments);
        // n0 had work recorded (a slot of its own); the ceiling of 2 leaves room for n3 only.
        assert_eq!(d.active, BTreeSet::from(["n0".into(), "n3".into()]));
        assert_eq!(d.ignored, ["n1"]);
        assert!(d.rows["n2"].blocked && d.rows["n2"].state.is_none());
        assert!(d.works_on(&input, "n0") && d.works_on(&input, "n3"));
        assert!(!d.works_on(&input, "n1") && !d.works_on(&input, "n2"));
        assert_eq!(idle_status(&d, &input, "n1"), Status::Blocked);
        assert_eq!(idle_status(&d, &input, "n2"), Status::Blocked);
        assert_eq!(idle_status(&d, &input, "n4"), Status::Waiting);
        // The plan is computed once, in the pass: what the first advance starts from.
        let plan = d.rows["n3"].plan.as_ref().expect("planned");
        assert_eq!(plan.create.len(), 1);
        assert!(d.rows["n2"].plan.is_none());
        // Admission order: admitted now, at the pass's clock.
        assert_eq!(d.node_priority.len(), 2);
    }

    #[test]
    fn admitted_nodes_keep_their_order_and_completed_ones_move_the_offset() {
        let nw = nodewright("nw", 200, Sequencing::Node);
        let done = node("n0", &[], &[state_of("nw", Stage::Config, State::Complete)]);
        let running = node(
            "n1",
            &[],
            &[state_of("nw", Stage::Apply, State::InProgress)],
        );
        let fresh = node("n2", &[], &[]);
        let nodes = vec![done.clone(), running.clone(), fresh.clone()];
        let all: Vec<&Arc<Node>> = nodes.iter().collect();
        let compartments = compartment(&all, 5);
        let mut f = Fixture::new(nw, nodes);
        let t = |s: i64| Time(Timestamp::from_second(s).expect("timestamp"));
        f.old.node_priority = BTreeMap::from([("n0".into(), t(10)), ("n1".into(), t(20))]);
        f.old.node_order_offset = 3;
        let input = f.input(&[]);
        let d = decide(&input, &compartments);
        // n0 completed: it leaves nodePriority and the offset counts it; n1 keeps its place, n2 joins.
        assert_eq!(d.node_order_offset, 4);
        assert!(!d.node_priority.contains_key("n0"));
        assert_eq!(d.node_orders()["n2"], 4, "admitted at the epoch: first");
        assert_eq!(d.node_orders()["n1"], 5);
        assert!(!d.works_on(&input, "n0"));
        assert_eq!(idle_status(&d, &input, "n0"), Status::Complete);
    }

    #[test]
    fn a_paused_nodewright_admits_nothing_and_an_earlier_one_holds_a_node_back() {
        let nw = nodewright("later", 200, Sequencing::Node);
        let earlier = nodewright("earlier", 100, Sequencing::Node);
        let busy = node(
            "n0",
            &[],
            &[state_of("earlier", Stage::Apply, State::InProgress)],
        );
        let free = node(
            "n1",
            &[],
            &[state_of("earlier", Stage::Config, State::Complete)],
        );
        let nodes = vec![busy.clone(), free.clone()];
        let all: Vec<&Arc<Node>> = nodes.iter().collect();
        let compartments = compartment(&all, 5);
        let everyone = [Arc::new(earlier)];
        let node_refs: Vec<&Node> = nodes.iter().map(AsRef::as_ref).collect();
        let mut f = Fixture::new(nw, nodes.clone());
        let gates = priority::gates(&f.nw, &everyone, &node_refs);
        let input = f.input(&gates);
        let d = decide(&input, &compartments);
        assert!(d.rows["n0"].waits && !d.rows["n1"].waits);
        assert!(
            !d.works_on(&input, "n0"),
            "the earlier NodeWright is not done on n0"
        );
        assert!(d.works_on(&input, "n1"));

        f.paused = true;
        let input = f.input(&gates);
        let d = decide(&input, &compartments);
        assert!(d.active.is_empty());
        assert_eq!(idle_status(&d, &input, "n1"), Status::Paused);
    }

    #[test]
    fn a_new_batch_state_is_persisted_then_its_batch_starts_in_the_same_pass() {
        use nodewright_shared::api::{BatchParameters, DeploymentStrategy};
        let nw = nodewright("nw", 200, Sequencing::Node);
        let (n1, n2) = (node("n1", &[], &[]), node("n2", &[], &[]));
        let mut fixture = Fixture::new(nw, vec![n1.clone(), n2.clone()]);
        let mut compartments = compartment(&[&n1, &n2], 2);
        compartments[0].strategy = Some(DeploymentStrategy {
            fixed: Some(BatchParameters {
                initial_batch: Some(1),
                ..BatchParameters::default()
            }),
            ..DeploymentStrategy::default()
        });
        // No batch state yet: the first decision admits nobody and says what to persist.
        let first = decide(&fixture.input(&[]), &compartments);
        assert!(first.active.is_empty());
        let persisted =
            batch_states_to_persist(&fixture.input(&[]), &first).expect("a batch state to persist");
        assert_eq!(
            persisted.package_list,
            status::package_list(&fixture.nw),
            "persisted with the versions it is for"
        );
        // Decided again over the persisted state, the first batch starts.
        fixture.old = persisted;
        let again = decide(&fixture.input(&[]), &compartments);
        assert_eq!(again.active.iter().collect::<Vec<_>>(), ["n1"]);
        assert!(batch_states_to_persist(&fixture.input(&[]), &again).is_none());
        // Paused: nothing is persisted early (nothing may start).
        fixture.old = NodeWrightStatus::default();
        fixture.paused = true;
        let paused = decide(&fixture.input(&[]), &compartments);
        assert!(batch_states_to_persist(&fixture.input(&[]), &paused).is_none());
    }
}
