//! The acts of a pass on its nodes, once [`nodewright_core::rollout::pass::decide`] has decided: advance the nodes it
//! works on, mark the others (status, cordon release, runtime taint, absorbed outcomes), and sync
//! each node's NodeWright conditions.
//!
//! Nodes are acted on concurrently (at most [`NODE_CONCURRENCY`] at a time): every decision that
//! spans nodes (budget, batches, order) was taken before, and each node's writes are guarded by its
//! own resourceVersion, so the nodes are independent. Acting on a fleet one node at a time made a
//! pass last seconds, and every stage that completed meanwhile waited for it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use nodewright_core::jobs::stored::StoredJob;
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::node::state::{parse_state, status_edit};
use nodewright_core::node::{conditions, cordon, runtime_cordon};
use nodewright_core::rollout::absorb::{self, Folded};
use nodewright_core::rollout::disruption::CapState;
use nodewright_core::rollout::pass::{self, PassDecision, PassInput};
use nodewright_core::rollout::runtime_taint;
use nodewright_core::rollout::status::any_erroring;
use nodewright_shared::api::{NodeWright, Status};
use nodewright_shared::keys;
use nodewright_shared::node_state::NodeState;

use super::advance_node::{self, NodeWork};
use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::Unchanged;

/// Nodes acted on at once in a pass.
pub const NODE_CONCURRENCY: usize = 16;

/// What acting on the nodes did.
pub struct Acted {
    /// Per node: its records after the pass (`None`: malformed) and its status.
    pub results: BTreeMap<String, (Option<NodeState>, Status)>,
    /// Some work waits for a node to drain.
    pub draining: bool,
    /// A node waits at its health gates (not failed yet).
    pub at_gates: bool,
    /// The first failure in node order (the other nodes were still worked on).
    pub first_error: Option<ReconcileError>,
    /// The completed Jobs whose outcomes the acts wrote into node records and marked.
    pub absorbed: std::collections::BTreeSet<String>,
}

/// What the pass does on one node.
enum Act {
    /// Its state cannot be read: nothing is written.
    Malformed,
    /// Advance its packages.
    Advance(Box<NodeWork>),
    /// Write its status (and absorbed outcomes), release its cordon when complete, lift the
    /// runtime-required taint when it is runtime-ready.
    Mark {
        node: Arc<Node>,
        state: NodeState,
        absorbed: Vec<String>,
        complete: bool,
        lift_taint: bool,
        /// With the taint lifted, hold the persistent cordon (`runtimeRequiredCordonAfter`).
        cordon_after: bool,
    },
}

/// One node's act, and what its conditions sync needs.
struct Task {
    name: String,
    act: Act,
    /// Its status when not advanced (or when advancing failed).
    idle: Status,
    /// The node as cached (its conditions are compared).
    node: Arc<Node>,
}

/// What happened on one node.
struct Done {
    name: String,
    state: Option<NodeState>,
    status: Status,
    draining: bool,
    at_gates: bool,
    cap_held: Option<CapState>,
    error: Option<ReconcileError>,
    /// The completed Jobs recorded with the node's write and marked.
    absorbed: Vec<String>,
}

/// Acts on every selected node of the decision. A node's failure does not stop the others. The
/// nodes whose cordon the cluster-wide disruption cap held back are noted in the decision
/// ([`PassDecision::held_by_cap`]).
pub async fn act_on_nodes(
    ctx: &Context,
    input: &PassInput<'_>,
    decision: &mut PassDecision<'_>,
    all_nodewrights: &[Arc<NodeWright>],
) -> Acted {
    let order = decision.node_orders();
    // Before the acts take the absorbed Jobs out of the rows.
    let unabsorbable: Vec<StoredJob> = absorb::unabsorbable(input.nodewright, input.jobs, |node| {
        decision.rows.get(node).map(|row| Folded {
            state: row.state.as_ref(),
            absorbed: &row.absorbed,
        })
    })
    .into_iter()
    .cloned()
    .collect();
    let names: Vec<String> = decision.rows.keys().cloned().collect();
    let mut tasks = Vec::with_capacity(names.len());
    for name in names {
        let idle = pass::idle_status(decision, input, &name);
        let works = decision.works_on(input, &name);
        let Some(row) = decision.rows.get_mut(&name) else {
            continue;
        };
        let act = match row.state.clone() {
            None => Act::Malformed,
            Some(state) if works => Act::Advance(Box::new(NodeWork {
                node: Node::clone(&row.node),
                state,
                absorbed: std::mem::take(&mut row.absorbed),
                plan: row.plan.take(),
                node_order: order
                    .get(&name)
                    .copied()
                    .unwrap_or(i64::from(decision.node_order_offset)),
            })),
            Some(state) => Act::Mark {
                lift_taint: row.complete
                    && input.nodewright.spec.runtime_required
                    && runtime_taint::runtime_ready_with(
                        all_nodewrights,
                        &row.node,
                        Some((&input.nodewright.name_any(), &state)),
                    ),
                cordon_after: runtime_taint::cordon_after_wanted(all_nodewrights, &row.node),
                node: row.node.clone(),
                state,
                absorbed: std::mem::take(&mut row.absorbed),
                complete: row.complete,
            },
        };
        tasks.push(Task {
            name,
            act,
            idle,
            node: row.node.clone(),
        });
    }
    // Nodes this NodeWright holds cordoned act first: their acts can only release cordons (a
    // node completing is uncordoned in the write that completes it), while the others' can only
    // take one (a node admitted to the next batch). In one unordered round, the cordon of a newly
    // admitted node could land before the uncordon of the node whose completion admitted it, and
    // for that moment one node more than the budget would be cordoned.
    let nw = input.nodewright.name_any();
    let (releasing, acquiring): (Vec<Task>, Vec<Task>) = tasks
        .into_iter()
        .partition(|t| cordon::holds_cordon(&t.node, &nw));
    let mut done: Vec<(Done, Arc<Node>)> = stream::iter(releasing)
        .map(|task| act_on_node(ctx, input, all_nodewrights, task))
        .buffer_unordered(NODE_CONCURRENCY)
        .collect()
        .await;
    done.extend(
        stream::iter(acquiring)
            .map(|task| act_on_node(ctx, input, all_nodewrights, task))
            .buffer_unordered(NODE_CONCURRENCY)
            .collect::<Vec<_>>()
            .await,
    );
    // The conditions after every node's act: they are reports, the acts (the next Jobs) are what
    // the rollout waits for.
    let done: Vec<Done> = stream::iter(done)
        .map(|(done, node)| sync_conditions(ctx, input, done, node))
        .buffer_unordered(NODE_CONCURRENCY)
        .collect()
        .await;
    let mut acted = Acted {
        results: BTreeMap::new(),
        draining: false,
        at_gates: false,
        first_error: None,
        absorbed: std::collections::BTreeSet::new(),
    };
    let mut errors = BTreeMap::new();
    for d in done {
        acted.draining |= d.draining;
        acted.at_gates |= d.at_gates;
        // The cap as the last node held saw it (the most disrupted nodes).
        decision.held_by_cap = decision.held_by_cap.max(d.cap_held);
        if let Some(e) = d.error {
            errors.insert(d.name.clone(), e);
        }
        acted.absorbed.extend(d.absorbed);
        acted.results.insert(d.name, (d.state, d.status));
    }
    acted.first_error = errors.into_values().next();
    record_unabsorbable(ctx, &unabsorbable, &mut acted).await;
    acted
}

/// Records on their own the completed stages no node write of this pass carried
/// ([`absorb::unabsorbable`]), except those a node re-read during its act folded in after all: the
/// rollout records every Complete outcome of its NodeWright. A failure is the pass's error.
async fn record_unabsorbable(ctx: &Context, unabsorbable: &[StoredJob], acted: &mut Acted) {
    for job in unabsorbable
        .iter()
        .filter(|job| !acted.absorbed.contains(&job.name_any()))
    {
        if let Err(e) = crate::outcomes::record_completion(ctx, job).await {
            acted.first_error.get_or_insert(e);
        }
    }
}

/// One node's act; returns what happened and the node as cached (for its conditions).
async fn act_on_node(
    ctx: &Context,
    input: &PassInput<'_>,
    all_nodewrights: &[Arc<NodeWright>],
    task: Task,
) -> (Done, Arc<Node>) {
    let nw = input.nodewright.name_any();
    let Task {
        name,
        act,
        idle,
        node,
    } = task;
    let mut done = Done {
        name,
        state: None,
        status: Status::Blocked,
        draining: false,
        at_gates: false,
        cap_held: None,
        error: None,
        absorbed: Vec::new(),
    };
    match act {
        Act::Malformed => return (done, node),
        Act::Advance(work) => {
            let state = work.state.clone();
            // Uninstalls on deletion pass no gates: the NodeWright is going away.
            let gates = input.health_gates.filter(|_| !input.deleting);
            let advanced = advance_node::advance(
                ctx,
                input.nodewright,
                *work,
                input.jobs,
                all_nodewrights,
                gates,
            )
            .await;
            match advanced {
                Ok(result) => {
                    done.draining = result.draining;
                    done.at_gates = result.at_gates;
                    done.cap_held = result.cap_held;
                    done.state = Some(result.state);
                    done.status = result.status;
                    done.absorbed = result.absorbed;
                }
                Err(e) => {
                    done.state = Some(state);
                    done.status = idle;
                    done.error = Some(e);
                }
            }
        }
        Act::Mark {
            node,
            state,
            absorbed,
            complete,
            lift_taint,
            cordon_after,
        } => {
            let marked = MarkNode {
                nodewright: &nw,
                state: &state,
                status: idle,
                complete,
                lift_runtime_taint: lift_taint,
                cordon_after,
            };
            let result = match mark_node(ctx, &node, &marked).await {
                // Marked only once their outcomes are in the node's records.
                Ok(true) => {
                    let result = advance_node::mark_absorbed(ctx, &absorbed).await;
                    if result.is_ok() {
                        done.absorbed = absorbed;
                    }
                    result
                }
                Ok(false) => Ok(()),
                Err(e) => Err(e),
            };
            done.error = result.err();
            done.state = Some(state);
            done.status = idle;
        }
    }
    (done, node)
}

/// The node's NodeWright conditions `nodewright.nvidia.com/<nw>/{NotReady,Erroring}` after its act
/// (written only on a change).
async fn sync_conditions(
    ctx: &Context,
    input: &PassInput<'_>,
    mut done: Done,
    node: Arc<Node>,
) -> Done {
    let nw = input.nodewright.name_any();
    if let Some(state) = &done.state {
        let complete = done.status == Status::Complete;
        let erroring = done.status == Status::Erroring || any_erroring(input.nodewright, state);
        let name = node.name_any();
        // A stage the cluster keeps from running (its pod refused, or its image not pulled): the
        // condition names the Job and the cluster's words.
        let problem = input
            .jobs
            .iter()
            .filter(|j| nodewright_core::jobs::read::node_of(j) == Some(name.as_str()))
            .find_map(|j| {
                let (kind, message) = match (&j.pods_not_created, &j.image_pull_failing) {
                    (Some(m), _) => (conditions::ProblemKind::PodsNotCreated, m),
                    (None, Some(m)) if !nodewright_core::jobs::read::is_finished(j) => {
                        (conditions::ProblemKind::ImagePullFailing, m)
                    }
                    _ => return None,
                };
                Some(conditions::StageProblem {
                    kind,
                    job: format!("{}/{}", ctx.config.jobs.namespace, j.name_any()),
                    message: message.clone(),
                })
            });
        let patch = conditions::sync_patch(
            &node,
            &nw,
            complete,
            erroring,
            problem.as_ref(),
            Timestamp::now(),
        );
        if let Err(e) = ctx.writer.patch_node_conditions(&node, patch).await {
            done.error.get_or_insert(e.into());
        }
    }
    done
}

/// What [`mark_node`] writes.
struct MarkNode<'a> {
    nodewright: &'a str,
    /// The node's records; written when they differ from the node's (absorbed outcomes).
    state: &'a NodeState,
    status: Status,
    complete: bool,
    lift_runtime_taint: bool,
    /// With the taint lifted, hold the persistent cordon in the same write.
    cordon_after: bool,
}

/// Writes the node's status annotation and label (and its records, when absorbed outcomes changed
/// them) for a node not worked on this pass, releases the cordon of a complete node, lifts the
/// runtime-required taint once the node is runtime-ready (cordoning it in the same write with
/// `runtimeRequiredCordonAfter`), and removes the persistent cordon's mark from a node someone
/// uncordoned under it. Returns whether the node's records are `mark.state` afterwards (the
/// absorbed outcomes are in).
async fn mark_node(
    ctx: &Context,
    node: &Node,
    mark: &MarkNode<'_>,
) -> Result<bool, ReconcileError> {
    let key = keys::node_state_key(mark.nodewright);
    let cached = parse_state(node, mark.nodewright);
    let recorded = AtomicBool::new(cached.as_ref() == Some(mark.state));
    ctx.writer
        .write_node(node, Unchanged::Believe, |current| {
            let mut edit = NodeEdit::default();
            let records = parse_state(current, mark.nodewright);
            recorded.store(records.as_ref() == Some(mark.state), Ordering::Relaxed);
            // Absorbed outcomes go in only over the records they were computed from: a node that
            // changed since is left to the next pass (which absorbs again from its records).
            if !recorded.load(Ordering::Relaxed) && records == cached {
                edit.annotate(key.clone(), mark.state.to_annotation());
                recorded.store(true, Ordering::Relaxed);
            }
            status_edit(&mut edit, mark.nodewright, mark.status);
            runtime_cordon::clear_stale(&mut edit, current);
            if mark.complete {
                cordon::uncordon(&mut edit, current, mark.nodewright);
            }
            if mark.lift_runtime_taint {
                runtime_taint::lift(
                    &mut edit,
                    current,
                    &ctx.config.jobs.runtime_required_taint,
                    mark.cordon_after,
                );
            }
            Some(edit)
        })
        .await?;
    Ok(recorded.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    //! Acting on a decision's nodes, through one pass over the mock cluster
    //! ([`crate::rollout::pass_fixtures`]).

    use nodewright_core::rollout::disruption::MaxDisrupted;
    use nodewright_shared::keys;

    use super::super::pass_fixtures::{
        after, created, node, nodewright, pass_over, rebooting, snapshot, try_pass_in_term,
        try_pass_over,
    };

    fn cordoned(state: &crate::writes::mock::ClusterState) -> Vec<String> {
        state
            .nodes
            .iter()
            .filter(|(_, n)| n["spec"]["unschedulable"] == serde_json::Value::Bool(true))
            .map(|(name, _)| name.clone())
            .collect()
    }

    #[tokio::test]
    async fn one_nodes_failure_does_not_stop_the_others_and_is_returned() {
        let fresh = snapshot(nodewright(), (0..2).map(node).collect(), vec![]);
        // The API has lost node-0 (the cache still lists it): its write fails.
        let (result, state) = try_pass_over(&fresh, |cluster| {
            cluster.nodes.remove("node-0");
        })
        .await;
        assert!(result.is_err(), "the failure is the pass's result");
        let started: Vec<String> = created(&state).into_iter().map(|(n, _, _)| n).collect();
        assert_eq!(started, ["node-1"], "node-1 is worked on all the same");
        assert!(
            state.nodewright.is_some(),
            "the status of the nodes that were worked on is still written"
        );
    }

    #[tokio::test]
    async fn the_disruption_cap_lets_one_node_cordon_when_it_is_one() {
        let mut capped = snapshot(rebooting(), (0..2).map(node).collect(), vec![]);
        capped.max_disrupted = Some(MaxDisrupted::Count(1));
        let state = pass_over(&capped).await;
        assert_eq!(cordoned(&state).len(), 1, "{:?}", cordoned(&state));
        let started: Vec<String> = created(&state).into_iter().map(|(n, _, _)| n).collect();
        assert_eq!(
            started,
            cordoned(&state),
            "only the cordoned node starts its stages"
        );
        let waiting = state
            .nodewright
            .as_ref()
            .and_then(|nw| nw["status"]["waitingFor"].as_str().map(str::to_owned))
            .unwrap_or_default();
        assert!(
            waiting.contains("disruption"),
            "the status says what holds the other node: {waiting:?}"
        );

        // Without the cap both nodes of the batch cordon at once.
        capped.max_disrupted = None;
        assert_eq!(cordoned(&pass_over(&capped).await).len(), 2);
    }

    #[tokio::test]
    async fn a_node_whose_state_cannot_be_read_is_never_written() {
        let mut nodes: Vec<_> = (0..2).map(node).collect();
        nodes[0]
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(keys::node_state_key("gpu"), "{not json".to_owned());
        let state = pass_over(&snapshot(nodewright(), nodes, vec![])).await;
        assert!(
            !state
                .seen
                .iter()
                .any(|r| r.method == http::Method::PATCH && r.path == "/api/v1/nodes/node-0"),
            "node-0's unreadable record is kept as it is: {:#?}",
            state.seen
        );
        let started: Vec<String> = created(&state).into_iter().map(|(n, _, _)| n).collect();
        assert_eq!(started, ["node-1"]);
    }

    /// The Jobs marked `state-recorded` in a pass, by name.
    fn marked(state: &crate::writes::mock::ClusterState) -> Vec<String> {
        let mut names: Vec<String> = state
            .seen
            .iter()
            .filter(|r| r.method == http::Method::PATCH && r.path.contains("/jobs/"))
            .filter(|r| {
                r.body["metadata"]["annotations"][keys::STATE_RECORDED_ANNOTATION]
                    == serde_json::json!("complete")
            })
            .filter_map(|r| r.path.rsplit('/').next().map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    /// The rollout records every Complete outcome of its NodeWright, once: a Job of a node still
    /// selected with that node's next stage, and a Job of a node that left the selection on its
    /// own (no timer leaves it to another recorder).
    #[tokio::test]
    async fn a_completion_on_a_node_that_left_the_selection_is_recorded_by_the_pass() {
        let fresh = snapshot(nodewright(), (0..3).map(node).collect(), vec![]);
        let first = pass_over(&fresh).await;
        let started: Vec<String> = created(&first).into_iter().map(|(n, _, _)| n).collect();
        assert_eq!(started, ["node-0", "node-1"]);
        // Their Jobs complete; node-0 leaves the pool meanwhile.
        let mut next = after(&fresh, &first, true);
        for n in &mut next.nodes {
            if n.metadata.name.as_deref() == Some("node-0") {
                n.metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert("pool".into(), "cpu".into());
            }
        }
        let second = pass_over(&next).await;
        let record = |node: &str| {
            serde_json::from_value::<k8s_openapi::api::core::v1::Node>(second.nodes[node].clone())
                .ok()
                .and_then(|n| nodewright_core::node::state::parse_state(&n, "gpu"))
                .and_then(|s| s.get("tools", "1.0.0").cloned())
                .map(|r| (r.stage.to_string(), r.state))
        };
        // node-0's apply is recorded complete, nothing new starts there.
        assert_eq!(
            record("node-0"),
            Some((
                "apply".to_owned(),
                Some(nodewright_shared::node_state::State::Complete)
            ))
        );
        assert!(
            !created(&second).iter().any(|(n, _, _)| n == "node-0"),
            "nothing starts on a node the NodeWright no longer selects"
        );
        // node-1's outcome went with its next stage.
        assert!(
            created(&second)
                .iter()
                .any(|(n, _, s)| n == "node-1" && s == "config"),
            "{:?}",
            created(&second)
        );
        // Each Job marked exactly once.
        let jobs: Vec<String> = ["node-0", "node-1"]
            .iter()
            .map(|n| {
                nodewright_core::naming::package_job_name(
                    "gpu",
                    "tools",
                    "1.0.0",
                    nodewright_shared::node_state::Stage::Apply,
                    n,
                )
            })
            .collect();
        assert_eq!(marked(&second), jobs);
    }

    /// The Job store shows a mark only once the watch delivers it. A pass in between (woken by the
    /// node write that carried the outcome, its records moved on) must not take the completion for
    /// an unrecorded one and record, mark and count it again (the docs' metrics example once saw
    /// five applies on four nodes). A new term remembers nothing and marks it once more.
    #[tokio::test]
    async fn a_completion_this_term_marked_is_not_recorded_again_while_the_store_lags() {
        let fresh = snapshot(nodewright(), (0..2).map(node).collect(), vec![]);
        let first = pass_over(&fresh).await;
        let next = after(&fresh, &first, true);
        let second = pass_over(&next).await;
        let absorbed = marked(&second);
        assert_eq!(absorbed.len(), 2, "both applies go with the next stage");
        // The node writes and the new Jobs are in the stores; the marks are not.
        let mut lagging = after(&next, &second, false);
        lagging
            .jobs
            .retain(|j| !absorbed.contains(j.metadata.name.as_ref().expect("a named Job")));
        lagging.jobs.extend(next.jobs.iter().cloned());

        let mark_again = async |ctx: &crate::context::Context| {
            for job in &next.jobs {
                let name = job.metadata.name.as_deref().expect("a named Job");
                ctx.writer
                    .mark_job_recorded(
                        name,
                        job.metadata.uid.as_deref(),
                        nodewright_core::jobs::read::Recorded::Complete,
                        60,
                    )
                    .await
                    .expect("the mock marks the Job");
            }
        };
        let (result, in_term) = try_pass_in_term(&lagging, |_| {}, mark_again).await;
        result.expect("the pass succeeds");
        assert_eq!(
            marked(&in_term),
            absorbed,
            "only the earlier pass's marks: this one records nothing again: {:#?}",
            in_term.seen
        );
        assert!(
            created(&in_term).is_empty(),
            "the config stages run already"
        );

        let (result, restarted) = try_pass_over(&lagging, |_| {}).await;
        result.expect("the pass succeeds");
        assert_eq!(marked(&restarted), absorbed, "a new term marks each once");
    }
}
