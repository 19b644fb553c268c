//! The NodeWright's status (upstream-operator.md §6.1–§6.3, with DESIGN §9: paused or policy-missing
//! is never Ready): per-node status, the roll-up, counts, the package list and the Ready condition.
//! Pure, so it is computed identically every pass and written only when it changes (a status write
//! triggers the next reconcile; writing timestamps every pass would loop).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use nodewright_shared::api::{
    AutomaticRollback, CompartmentStatus, NodeWright, NodeWrightStatus, Revision, Status,
};
use nodewright_shared::node_state::{NodeState, State};

/// Facts about one node that decide its status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// Every package finished.
    pub complete: bool,
    /// The NodeWright is paused.
    pub paused: bool,
    /// The NodeWright is disabled.
    pub disabled: bool,
    /// Ignored, untolerated taints, malformed state, or no policy.
    pub blocked: bool,
    /// A package record is erroring.
    pub erroring: bool,
    /// Admitted into the rollout and being worked on.
    pub active: bool,
}

/// A node's status for the NodeWright.
pub fn node_status(f: NodeFacts) -> Status {
    if f.complete {
        Status::Complete
    } else if f.paused {
        Status::Paused
    } else if f.disabled {
        Status::Disabled
    } else if f.blocked {
        Status::Blocked
    } else if f.erroring {
        Status::Erroring
    } else if f.active {
        Status::InProgress
    } else {
        Status::Waiting
    }
}

/// Whether any record of the node's current packages is erroring.
pub fn any_erroring(nodewright: &NodeWright, state: &NodeState) -> bool {
    nodewright
        .spec
        .packages
        .iter()
        .filter_map(|(name, p)| state.get(name, &p.version))
        .any(|r| r.state == Some(State::Erroring))
}

/// The roll-up of node statuses (upstream's `CollectNodeStatus`): all complete (also with no node)
/// ⇒ complete; any in progress ⇒ in progress; else the common status of the incomplete nodes, or
/// unknown when they differ.
pub fn rollup(statuses: &[Status]) -> Status {
    if statuses.iter().all(|s| *s == Status::Complete) {
        return Status::Complete;
    }
    if statuses.contains(&Status::InProgress) {
        return Status::InProgress;
    }
    let mut rest = statuses.iter().filter(|s| **s != Status::Complete);
    let first = rest.next().copied().unwrap_or(Status::Unknown);
    if rest.all(|s| *s == first) {
        first
    } else {
        Status::Unknown
    }
}

/// Reason of the Ready condition for a roll-up status.
pub fn ready_reason(status: Status) -> &'static str {
    match status {
        Status::Complete => "NodesConverged",
        Status::InProgress => "Progressing",
        Status::Blocked => "Blocked",
        Status::Erroring => "Erroring",
        Status::Paused => "Paused",
        Status::Waiting => "Waiting",
        Status::Disabled => "Disabled",
        Status::Unknown => "Unknown",
    }
}

/// Everything the status is computed from.
#[derive(Debug, Clone, Default)]
pub struct StatusInput {
    /// Per selected node: its records (`None` when malformed) and status.
    pub nodes: BTreeMap<String, (Option<NodeState>, Status)>,
    /// `status.nodePriority` to keep.
    pub node_priority: BTreeMap<String, Time>,
    /// `status.nodeOrderOffset`.
    pub node_order_offset: i32,
    /// Per compartment.
    pub compartments: BTreeMap<String, CompartmentStatus>,
    /// Paused annotation.
    pub paused: bool,
    /// Disabled annotation.
    pub disabled: bool,
    /// `spec.deploymentPolicy` names a policy that does not exist.
    pub missing_policy: Option<String>,
    /// Selected nodes carrying the ignore label (sorted).
    pub ignored: Vec<String>,
    /// Selected nodes with a taint the NodeWright does not tolerate (sorted).
    pub untolerated: Vec<String>,
    /// `status.nodeBootIds`: each selected node's boot ID as this pass saw it.
    pub node_boot_ids: BTreeMap<String, String>,
    /// `status.configUpdates`, as recorded by [`super::config_updates`].
    pub config_updates: BTreeMap<String, Vec<String>>,
    /// The uninstall steps' conditions (UninstallInProgress, UninstallFailed, Blocked,
    /// DeletionBlocked): type and, when True, (reason, message); absent when `None`.
    pub uninstall_conditions: Vec<(&'static str, Option<(String, String)>)>,
    /// `status.waitingFor` ([`super::pass::PassDecision::waiting_for`]).
    pub waiting_for: Option<String>,
    /// `status.revisions`, as recorded ([`super::history`]).
    pub revisions: Vec<Revision>,
    /// `status.rollback`, as recorded ([`super::rollback`]).
    pub rollback: Option<AutomaticRollback>,
}

/// How many nodes the Ready message names per status; beyond, it says how many more (a fleet's
/// message stays short enough to read in `kubectl describe`).
const NAMED_NODES: usize = 5;

/// The statuses the Ready message names nodes for: the nodes a user must look at. `erroring` (a
/// package fails there) and `blocked` (a taint, the ignore label, a malformed state or a missing
/// policy keeps the node out) do not resolve by themselves. The others do, or have one cause for
/// every node: `in_progress` and `waiting` move on by themselves (batches, priority), `paused`
/// and `disabled` are the NodeWright's annotation, `complete` needs nothing; their counts suffice.
const NAMED: [Status; 2] = [Status::Blocked, Status::Erroring];

/// The statuses after `complete`, in the order the Ready message counts them (upstream's).
const COUNTED: [Status; 7] = [
    Status::InProgress,
    Status::Blocked,
    Status::Erroring,
    Status::Waiting,
    Status::Paused,
    Status::Disabled,
    Status::Unknown,
];

/// The Ready condition's message, upstream's shape: `<c>/<t> nodes complete`, then the count of
/// every other status present (as the node statuses spell it), with the names of the
/// [`NAMED`] statuses' nodes (sorted, at most [`NAMED_NODES`]), e.g.
/// `3/10 nodes complete, 5 in_progress, 2 erroring (node-a, node-b)`. Upstream names every bucket
/// and drops all names beyond 10; here the nodes to look at are always named, the first few at
/// least.
pub fn ready_message(nodes: &BTreeMap<String, (Option<NodeState>, Status)>) -> String {
    let complete = nodes
        .values()
        .filter(|(_, s)| *s == Status::Complete)
        .count();
    let mut message = format!("{complete}/{} nodes complete", nodes.len());
    for status in COUNTED {
        // BTreeMap order: the names come sorted.
        let names: Vec<&str> = nodes
            .iter()
            .filter(|(_, (_, s))| *s == status)
            .map(|(n, _)| n.as_str())
            .collect();
        if names.is_empty() {
            continue;
        }
        message.push_str(&format!(", {} {}", names.len(), status.as_str()));
        if NAMED.contains(&status) {
            let shown = names[..names.len().min(NAMED_NODES)].join(", ");
            match names.len().saturating_sub(NAMED_NODES) {
                0 => message.push_str(&format!(" ({shown})")),
                more => message.push_str(&format!(" ({shown} and {more} more)")),
            }
        }
    }
    message
}

/// Upstream's message for a list of skipped nodes: the names up to 10, a count beyond.
fn skipped_nodes(nodes: &[String], what: &str) -> String {
    if nodes.len() > 10 {
        format!("{} nodes have {what}. Skipping.", nodes.len())
    } else {
        format!("Node [{}] has {what}. Skipping.", nodes.join(", "))
    }
}

fn condition(
    old: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let status = if status { "True" } else { "False" }.to_owned();
    // Keep the transition time while the status stays the same (no churn, no reconcile loop).
    let last_transition_time = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        last_transition_time,
        message,
        observed_generation: generation,
        reason: reason.to_owned(),
        status,
        type_: type_.to_owned(),
    }
}

/// The status to write: the only author of `NodeWrightStatus` (every part, including the boot IDs,
/// the config updates and the uninstall conditions, is an input). The current status only lends
/// the conditions their transition times.
pub fn build(nodewright: &NodeWright, input: StatusInput, now: Timestamp) -> NodeWrightStatus {
    let old = nodewright.status.clone().unwrap_or_default();
    let generation = nodewright.metadata.generation;
    let statuses: Vec<Status> = input.nodes.values().map(|(_, s)| *s).collect();
    let complete = statuses.iter().filter(|s| **s == Status::Complete).count();
    let total = statuses.len();
    let in_progress = statuses
        .iter()
        .filter(|s| matches!(s, Status::InProgress | Status::Erroring))
        .count();
    let status = overall(&statuses, &input);
    let ready = status == Status::Complete;
    let conditions = conditions(&old.conditions, &input, status, generation, now);

    NodeWrightStatus {
        observed_generation: if ready {
            generation
        } else {
            old.observed_generation
        },
        status: Some(status),
        node_state: input
            .nodes
            .iter()
            .filter_map(|(n, (s, _))| s.clone().map(|s| (n.clone(), s)))
            .collect(),
        node_status: input
            .nodes
            .iter()
            .map(|(n, (_, s))| (n.clone(), *s))
            .collect(),
        conditions,
        node_boot_ids: input.node_boot_ids,
        node_priority: input.node_priority,
        node_order_offset: input.node_order_offset,
        config_updates: input.config_updates,
        compartment_statuses: input.compartments,
        nodes_in_progress: i32::try_from(in_progress).unwrap_or(i32::MAX),
        complete_nodes: format!("{complete}/{total}"),
        package_list: package_list(nodewright),
        waiting_for: input.waiting_for,
        revisions: input.revisions,
        rollback: input.rollback,
    }
}

/// The NodeWright's status from its nodes' (the rollup), overridden by what holds the whole
/// NodeWright: disabled (unless complete), paused, a missing policy (blocked), in that order.
fn overall(statuses: &[Status], input: &StatusInput) -> Status {
    let mut status = rollup(statuses);
    if status != Status::Complete && input.disabled {
        status = Status::Disabled;
    }
    if input.paused {
        status = Status::Paused;
    }
    if input.missing_policy.is_some() {
        status = Status::Blocked;
    }
    status
}

/// The conditions of the status: ours (Ready, DeploymentPolicyNotFound, NodeStateMalformed,
/// TaintNotTolerable, NodesIgnored, the uninstall ones) from `input`, each keeping its transition
/// time from `old` while its status stays; conditions of other writers kept as they are.
fn conditions(
    old: &[Condition],
    input: &StatusInput,
    status: Status,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let malformed: Vec<&str> = input
        .nodes
        .iter()
        .filter(|(_, (s, _))| s.is_none())
        .map(|(n, _)| n.as_str())
        .collect();
    let ready = status == Status::Complete;
    let mut conditions = vec![condition(
        old,
        "Ready",
        ready,
        ready_reason(status),
        ready_message(&input.nodes),
        generation,
        now,
    )];
    if let Some(policy) = &input.missing_policy {
        conditions.push(condition(
            old,
            "DeploymentPolicyNotFound",
            true,
            "DeploymentPolicyNotFound",
            format!("DeploymentPolicy {policy:?} not found"),
            generation,
            now,
        ));
    }
    if !malformed.is_empty() {
        conditions.push(condition(
            old,
            "NodeStateMalformed",
            true,
            "ParseError",
            format!(
                "nodeState annotation cannot be parsed on {} node(s): {}",
                malformed.len(),
                malformed.join(", ")
            ),
            generation,
            now,
        ));
    }
    // Always present, True or False, so `kubectl wait --for=condition=...` works both ways.
    conditions.push(condition(
        old,
        "TaintNotTolerable",
        !input.untolerated.is_empty(),
        "TaintNotTolerable",
        if input.untolerated.is_empty() {
            "All nodes have tolerable taints.".to_owned()
        } else {
            skipped_nodes(&input.untolerated, "taints that are not tolerable")
        },
        generation,
        now,
    ));
    conditions.push(condition(
        old,
        "NodesIgnored",
        !input.ignored.is_empty(),
        "NodesIgnored",
        if input.ignored.is_empty() {
            "No nodes have ignore label set.".to_owned()
        } else {
            skipped_nodes(&input.ignored, "ignore label set")
        },
        generation,
        now,
    ));
    // Conditions other writers own (none yet) and ours are disjoint; keep unknown ones as they are.
    let ours = [
        "Ready",
        "DeploymentPolicyNotFound",
        "NodeStateMalformed",
        "TaintNotTolerable",
        "NodesIgnored",
    ];
    conditions.extend(
        old.iter()
            .filter(|c| !ours.contains(&c.type_.as_str()))
            .cloned(),
    );
    for (type_, value) in &input.uninstall_conditions {
        let value = value.as_ref().map(|(r, m)| (r.as_str(), m.as_str()));
        super::uninstall::set_condition(&mut conditions, type_, value, generation, now);
    }
    conditions
}

/// `status.packageList`: `name:version` of every package, sorted (a version change is read from it).
pub fn package_list(nodewright: &NodeWright) -> String {
    let mut list: Vec<String> = nodewright
        .spec
        .packages
        .iter()
        .map(|(k, p)| format!("{k}:{}", p.version))
        .collect();
    list.sort();
    list.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::NodeWrightSpec;

    #[test]
    fn node_status_precedence() {
        let f = NodeFacts::default();
        assert_eq!(node_status(f), Status::Waiting);
        assert_eq!(
            node_status(NodeFacts { active: true, ..f }),
            Status::InProgress
        );
        assert_eq!(
            node_status(NodeFacts {
                active: true,
                erroring: true,
                ..f
            }),
            Status::Erroring
        );
        assert_eq!(
            node_status(NodeFacts {
                blocked: true,
                erroring: true,
                ..f
            }),
            Status::Blocked
        );
        assert_eq!(
            node_status(NodeFacts {
                paused: true,
                active: true,
                ..f
            }),
            Status::Paused
        );
        assert_eq!(
            node_status(NodeFacts {
                complete: true,
                paused: true,
                ..f
            }),
            Status::Complete
        );
    }

    #[test]
    fn rollup_follows_upstream() {
        use Status::*;
        assert_eq!(rollup(&[]), Complete);
        assert_eq!(rollup(&[Complete, Complete]), Complete);
        assert_eq!(rollup(&[Complete, InProgress, Erroring]), InProgress);
        assert_eq!(rollup(&[Complete, Erroring, Erroring]), Erroring);
        assert_eq!(rollup(&[Waiting, Blocked]), Unknown);
    }

    #[test]
    fn paused_or_policy_missing_is_never_ready() {
        let nw = NodeWright::new("nw", NodeWrightSpec::default());
        let now = Timestamp::UNIX_EPOCH;
        let done = StatusInput {
            nodes: BTreeMap::from([(
                "n".to_owned(),
                (Some(NodeState::default()), Status::Complete),
            )]),
            ..StatusInput::default()
        };
        let ready = |s: &NodeWrightStatus| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        };
        let s = build(&nw, done.clone(), now);
        assert!(ready(&s));
        assert_eq!(s.complete_nodes, "1/1");
        let s = build(
            &nw,
            StatusInput {
                paused: true,
                ..done.clone()
            },
            now,
        );
        assert!(!ready(&s));
        assert_eq!(s.status, Some(Status::Paused));
        let s = build(
            &nw,
            StatusInput {
                missing_policy: Some("p".into()),
                ..done
            },
            now,
        );
        assert!(!ready(&s));
        assert_eq!(s.status, Some(Status::Blocked));
    }

    #[test]
    fn taint_and_ignore_conditions_name_the_skipped_nodes() {
        let nw = NodeWright::new("nw", NodeWrightSpec::default());
        let now = Timestamp::UNIX_EPOCH;
        let find = |s: &NodeWrightStatus, t: &str| {
            s.conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| (c.status.clone(), c.message.clone()))
        };
        let s = build(&nw, StatusInput::default(), now);
        assert_eq!(
            find(&s, "TaintNotTolerable"),
            Some(("False".into(), "All nodes have tolerable taints.".into()))
        );
        assert_eq!(
            find(&s, "NodesIgnored"),
            Some(("False".into(), "No nodes have ignore label set.".into()))
        );
        let many: Vec<String> = (0..11).map(|i| format!("n{i}")).collect();
        let s = build(
            &nw,
            StatusInput {
                untolerated: vec!["a".into(), "b".into()],
                ignored: many,
                ..StatusInput::default()
            },
            now,
        );
        assert_eq!(
            find(&s, "TaintNotTolerable"),
            Some((
                "True".into(),
                "Node [a, b] has taints that are not tolerable. Skipping.".into()
            ))
        );
        assert_eq!(
            find(&s, "NodesIgnored"),
            Some((
                "True".into(),
                "11 nodes have ignore label set. Skipping.".into()
            ))
        );
        // Rebuilding from its own output keeps one condition of each type.
        let again = build(
            &NodeWright {
                status: Some(s.clone()),
                ..nw.clone()
            },
            StatusInput::default(),
            now,
        );
        assert_eq!(
            again
                .conditions
                .iter()
                .filter(|c| c.type_ == "NodesIgnored")
                .count(),
            1
        );
    }

    fn nodes(statuses: &[(&str, Status)]) -> BTreeMap<String, (Option<NodeState>, Status)> {
        statuses
            .iter()
            .map(|(n, s)| ((*n).to_owned(), (Some(NodeState::default()), *s)))
            .collect()
    }

    #[test]
    fn ready_message_counts_each_status_and_names_the_nodes_to_look_at() {
        use Status::*;
        assert_eq!(ready_message(&nodes(&[])), "0/0 nodes complete");
        assert_eq!(
            ready_message(&nodes(&[
                ("kwok-node-0", Complete),
                ("kwok-node-1", Erroring)
            ])),
            "1/2 nodes complete, 1 erroring (kwok-node-1)"
        );
        let mut fleet = vec![
            ("c1", Complete),
            ("c2", Complete),
            ("c3", Complete),
            ("node-b", Erroring),
            ("node-a", Erroring),
            ("t", Blocked),
        ];
        let progressing = ["p1", "p2", "p3", "p4"];
        fleet.extend(progressing.iter().map(|n| (*n, InProgress)));
        assert_eq!(
            ready_message(&nodes(&fleet)),
            "3/10 nodes complete, 4 in_progress, 1 blocked (t), 2 erroring (node-a, node-b)",
            "counts in upstream's order; only blocked and erroring nodes named, sorted"
        );
        assert_eq!(
            ready_message(&nodes(&[("w", Waiting), ("p", Paused), ("d", Disabled)])),
            "0/3 nodes complete, 1 waiting, 1 paused, 1 disabled"
        );
    }

    #[test]
    fn ready_message_names_a_bounded_number_of_nodes() {
        let many: Vec<String> = (0..12).map(|i| format!("n{i:02}")).collect();
        let fleet: Vec<(&str, Status)> = many
            .iter()
            .map(|n| (n.as_str(), Status::Erroring))
            .collect();
        assert_eq!(
            ready_message(&nodes(&fleet)),
            "0/12 nodes complete, 12 erroring (n00, n01, n02, n03, n04 and 7 more)"
        );
        let five = &fleet[..5];
        assert_eq!(
            ready_message(&nodes(five)),
            "0/5 nodes complete, 5 erroring (n00, n01, n02, n03, n04)"
        );
    }

    #[test]
    fn the_ready_condition_carries_the_message() {
        let nw = NodeWright::new("nw", NodeWrightSpec::default());
        let s = build(
            &nw,
            StatusInput {
                nodes: nodes(&[("a", Status::Complete), ("b", Status::Erroring)]),
                ..StatusInput::default()
            },
            Timestamp::UNIX_EPOCH,
        );
        let ready = s
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("Ready condition");
        assert_eq!(
            (
                ready.status.as_str(),
                ready.reason.as_str(),
                ready.message.as_str()
            ),
            ("False", "Erroring", "1/2 nodes complete, 1 erroring (b)")
        );
    }
}
