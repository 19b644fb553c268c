//! The rollout preview of the command line (`kubectl nodewright plan` and `why`, the `cli/` crate).
//!
//! [`preview`] answers "what will the operator do with this NodeWright?" with the operator's own
//! pure planner, not a copy of it: from snapshots the caller listed (nodes, NodeWrights, policies,
//! the operator's Jobs and ConfigMaps) it assembles the inputs of a rollout pass exactly as a pass
//! does ([`crate::rollout::parts`]' `selected_nodes`, `own_jobs`, `pass_parts`, the config-update
//! detection), runs [`pass::decide`] for the pass as it would run now (statuses and blockers), then
//! iterates `decide` → the stage machine ([`crate::rollout::plan::plan_node`]) → [`pass::status_after`] pass after pass,
//! assuming every stage it starts succeeds, to tell which batch each node falls in, in which order
//! nodes start, which stages run on each and which nodes are cordoned, drained or rebooted. A
//! stage that timed out stays timed out (the preview never invents an outcome other than success).
//! The pass's writing pre-steps are not simulated: the runtime-required taint on new nodes
//! (`autoTaintNewNodes`), the reset of rebooted nodes (`REAPPLY_ON_REBOOT`) and the replacement of
//! unfinished Jobs whose package changed; a previewed node waiting for an earlier NodeWright stays
//! waiting (the other NodeWright's own rollout is not simulated).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube_core::ResourceExt;
use nodewright_shared::api::{
    DeploymentPolicy, HealthGates, InterruptType, NodeWright, NodeWrightStatus, Sequencing, Status,
};
use nodewright_shared::defaults::{OperatorDefaults, default_nodewright};
use nodewright_shared::keys;
use nodewright_shared::node_state::{NodeState, Stage, State};
use serde::Serialize;

use crate::jobs::read::JobIndex;
use crate::jobs::read::{Recorded, is_finished, node_of, recorded};
use crate::jobs::stored::StoredJob;
use crate::jobs::{PackageAnnotation, RuntimeTaint};
use crate::naming::{interrupt_job_name, package_job_name};
use crate::node::cordon;
use crate::node::drain::{self, DrainOptions};
use crate::node::health_gates;
use crate::node::record::{Record, apply_record};
use crate::node::state::parse_state;
use crate::rollout::compartments::Compartment;
use crate::rollout::disruption::{CapState, MaxDisrupted};
use crate::rollout::parts::{
    PassParts, annotation_on, defaulted_policy, own_jobs, pass_parts, selected_nodes,
};
use crate::rollout::pass::{self, PassDecision, PassInput};
use crate::rollout::plan::{Creation, plan_node};
use crate::rollout::selection::{self, NodeSelection, SelectorError};
use crate::rollout::stages::package_done;
use crate::rollout::windows::Schedule;
use crate::rollout::{batches, config_updates, graph, priority, uninstall};

/// Most passes a preview simulates per selected node (a batch takes two: one evaluates the batch
/// that ended, the next admits the new one), plus slack for the first passes.
const PASSES_PER_NODE: usize = 3;
const EXTRA_PASSES: usize = 8;
/// Most stage-machine steps simulated on one node per package (a package has at most seven stages).
const STEPS_PER_PACKAGE: usize = 8;

/// What a preview is computed from: the objects as listed from the cluster (the NodeWright may come
/// from a changed manifest instead, carrying the cluster object's status).
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The NodeWright to preview.
    pub nodewright: NodeWright,
    /// Every NodeWright in the cluster (priority and sequencing; the previewed one is ignored there).
    pub nodewrights: Vec<NodeWright>,
    /// Every node.
    pub nodes: Vec<Node>,
    /// Every DeploymentPolicy.
    pub policies: Vec<DeploymentPolicy>,
    /// Every Job in the operator's namespace.
    pub jobs: Vec<Job>,
    /// The ConfigMaps in the operator's namespace (config changes are detected against them).
    pub configmaps: Vec<ConfigMap>,
    /// The operator's defaults (filled into the NodeWright as the operator does).
    pub defaults: OperatorDefaults,
    /// The operator's runtime-required taint.
    pub runtime_taint: RuntimeTaint,
    /// The operator's cluster-wide disruption cap (`MAX_DISRUPTED_NODES`), if it has one.
    pub max_disrupted: Option<MaxDisrupted>,
    /// The clock of the first pass.
    pub now: Timestamp,
}

/// A rollout preview.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    /// The NodeWright.
    pub nodewright: String,
    /// Its DeploymentPolicy, if it names one.
    pub deployment_policy: Option<String>,
    /// The named policy does not exist: no node starts.
    pub missing_policy: bool,
    /// Paused: nothing starts until resumed (the batches shown start then).
    pub paused: bool,
    /// Disabled: nothing starts until enabled (the batches shown start then).
    pub disabled: bool,
    /// Being deleted: the uninstalls of its uninstall-enabled packages run first.
    pub deleting: bool,
    /// Nodes the selector does not pick.
    pub not_selected: usize,
    /// Compartments, with their budget ceiling and batches.
    pub compartments: Vec<CompartmentPreview>,
    /// Every selected node, in rollout order.
    pub nodes: Vec<NodePreview>,
    /// Its DeploymentPolicy's maintenance windows, one line each (empty: any time).
    pub windows: Vec<String>,
    /// While every window is closed: `waiting for window (opens ...)`; no new node starts until
    /// then (the batches shown start then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// The operator's cluster-wide disruption cap, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disruption_cap: Option<CapPreview>,
    /// The health gates in effect, one line each (empty: none), and what a failure does.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health_gates: Vec<String>,
}

/// The operator's cluster-wide disruption cap as the preview found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapPreview {
    /// As configured: `10 nodes`, `5% of the cluster's nodes`.
    pub cap: String,
    /// Most nodes NodeWrights may hold cordoned at once in this cluster.
    pub limit: usize,
    /// Nodes NodeWrights hold cordoned now.
    pub disrupted: usize,
}

/// One compartment of the rollout.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompartmentPreview {
    /// Its name (`__default__` for nodes no compartment selects, and for a legacy budget).
    pub name: String,
    /// `fixed`, `linear`, `exponential`, or `none` (every batch as large as the ceiling).
    pub strategy: &'static str,
    /// Most nodes in progress at once.
    pub ceiling: usize,
    /// Its selected nodes.
    pub nodes: usize,
    /// Its batches in order, as the preview starts them.
    pub batches: Vec<BatchPreview>,
    /// Its failed batches reached the failure threshold: nothing more starts until a reset.
    pub stopped: bool,
    /// The strategy's soak after each batch (`10m`), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soak: Option<String>,
    /// While its finished batch soaks: when the soak ends (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soaking_until: Option<String>,
}

/// One batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchPreview {
    /// The batch number (the compartment's `currentBatch`; counted from 1 without a strategy).
    pub number: i32,
    /// Its nodes, in the order they start.
    pub nodes: Vec<String>,
    /// Already in progress (started by an earlier pass).
    pub in_progress: bool,
}

/// One selected node.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePreview {
    /// Node name.
    pub name: String,
    /// Its compartment.
    pub compartment: Option<String>,
    /// Its status as the pass would write it now.
    pub status: Status,
    /// Every package is done on it now.
    pub complete: bool,
    /// It is in the rollout already (admitted by an earlier pass).
    pub started: bool,
    /// The batch it is (or will be) in.
    pub batch: Option<i32>,
    /// Its place in the order nodes start (0 first; nodes in progress now come first).
    pub order: Option<usize>,
    /// Why nothing runs on it now (empty: work runs, or it is complete).
    pub blockers: Vec<Blocker>,
    /// The stages that will run on it, in order (stages whose Job runs now first).
    pub steps: Vec<StepPreview>,
    /// It will be cordoned and drained (a disruptive package or an interrupt).
    pub drain: bool,
    /// It will be rebooted.
    pub reboot: bool,
    /// After the preview every package is done on it (false: a stage timed out, or it never starts).
    pub completes: bool,
}

/// One stage run on a node.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepPreview {
    /// Package (the owner, for a merged interrupt).
    pub package: String,
    /// Its version.
    pub version: String,
    /// The stage.
    pub stage: Stage,
    /// Its Job runs now.
    pub running: bool,
    /// For an interrupt stage: what it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<InterruptType>,
    /// For an interrupt stage: the packages folded into it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub merged: Vec<String>,
}

/// Why nothing runs on a node now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "reason",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Blocker {
    /// The node carries `nodewright.nvidia.com/ignore=true`.
    Ignored,
    /// Taints (`key:effect`) the NodeWright does not tolerate.
    Taints {
        /// The taints.
        taints: Vec<String>,
    },
    /// Its node-state annotation cannot be read (it is never overwritten).
    MalformedState,
    /// The NodeWright is paused.
    Paused,
    /// The NodeWright is disabled.
    Disabled,
    /// `spec.deploymentPolicy` names a policy that does not exist.
    MissingPolicy {
        /// The policy.
        policy: String,
    },
    /// An earlier NodeWright (lower priority, or equal and earlier name) is not done here yet.
    Priority {
        /// That NodeWright.
        nodewright: String,
        /// Its sequencing (`all`: it must be done on every node first).
        sequencing: Sequencing,
    },
    /// Queued for a later batch of its compartment.
    Batch {
        /// Compartment.
        compartment: String,
        /// The batch it starts in.
        batch: i32,
    },
    /// Every maintenance window of its DeploymentPolicy is closed: it starts when one opens.
    Window {
        /// `waiting for window (opens ...)`.
        waiting: String,
    },
    /// Its compartment's finished batch soaks: the next batch starts when the soak ends.
    Soak {
        /// Compartment.
        compartment: String,
        /// When the soak ends (RFC 3339).
        until: String,
    },
    /// The operator's cluster-wide disruption cap is full: the node's disruptive stages wait for
    /// a node some NodeWright releases.
    DisruptionCap {
        /// Most nodes disrupted at once.
        limit: usize,
        /// Nodes disrupted now.
        disrupted: usize,
    },
    /// Its drain ran past `drainConfig.timeout`: pods on it hold the drain (the node is erroring
    /// and stays cordoned).
    DrainTimedOut {
        /// When the drain first found the node not drained (RFC 3339).
        since: String,
        /// The bound, in seconds.
        timeout_seconds: u64,
    },
    /// Its packages finished; it waits at a health gate before it is uncordoned and counted
    /// complete (or failed it: `GateFailed`, erroring), as the operator last recorded on the node.
    HealthGate {
        /// The gate it waits for (`None`: not observed yet).
        gate: Option<String>,
        /// What the operator saw of it.
        saw: Option<String>,
        /// When the wait began (RFC 3339).
        since: String,
        /// The gate's timeout passed: the node is erroring.
        failed: bool,
    },
    /// Its compartment's rollout stopped (failed batches reached the failure threshold).
    Stopped {
        /// Compartment.
        compartment: String,
    },
    /// Not reached: the batches before it do not end (a node keeps its batch open).
    NotReached {
        /// Compartment.
        compartment: String,
    },
    /// A stage timed out: its retries are spent, nothing reruns it until it is cleared.
    TimedOut {
        /// Package.
        package: String,
        /// Version.
        version: String,
        /// Stage.
        stage: Stage,
        /// The Job kept as evidence.
        job: String,
    },
    /// A package waits for packages it depends on that are not done on the node.
    Dependency {
        /// The waiting package.
        package: String,
        /// `name|version` of each dependency not done.
        waits_for: Vec<String>,
    },
}

/// Why a preview cannot be computed.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    /// `spec.nodeSelectors` does not compile.
    #[error(transparent)]
    Selector(#[from] SelectorError),
}

/// What the simulation did on one node.
#[derive(Debug, Clone, Default)]
struct NodeRun {
    state: NodeState,
    steps: Vec<StepPreview>,
    drain: bool,
    reboot: bool,
    completes: bool,
    timed_out: bool,
}

/// The pass as it would run now, with the simulation after it: what each node's preview reads.
struct NowView<'v, 'a> {
    world: &'v World<'a>,
    input: &'v PassInput<'v>,
    decision: &'v PassDecision<'a>,
    sim: &'v Simulation,
    node_compartment: &'v BTreeMap<&'v str, &'v str>,
    /// The cluster-wide disruption cap as counted now.
    cap: Option<CapState>,
    /// The nodes whose cordon the cap holds back now.
    held_by_cap: &'v BTreeSet<String>,
    paused: bool,
    disabled: bool,
}

impl NowView<'_, '_> {
    /// The preview of one selected node (`None` for a node the pass has no row for).
    fn node_preview(&self, node: &Arc<Node>) -> Option<NodePreview> {
        let (now, sim) = (self.decision, self.sim);
        let node_name = node.name_any();
        let row = now.rows.get(&node_name)?;
        let compartment = self.node_compartment.get(node_name.as_str()).copied();
        let run = sim.runs.get(&node_name);
        let batch = sim.batch_of.get(&node_name).copied();
        let mut blockers = self
            .world
            .blockers(self.input, now, node, self.paused, self.disabled);
        if let Some(cap) = self.cap.filter(|_| self.held_by_cap.contains(&node_name)) {
            blockers.push(Blocker::DisruptionCap {
                limit: cap.limit,
                disrupted: cap.disrupted,
            });
        }
        if !now.works_on(self.input, &node_name)
            && blockers.is_empty()
            && !row.complete
            && let Some(c) = compartment
        {
            blockers.push(rollout_blocker(now, sim, c, batch));
        }
        Some(NodePreview {
            compartment: compartment.map(str::to_owned),
            status: pass::idle_status(now, self.input, &node_name),
            complete: row.complete,
            started: sim.started.contains(&node_name),
            batch,
            order: sim.order.iter().position(|n| *n == node_name),
            blockers,
            steps: run.map(|r| r.steps.clone()).unwrap_or_default(),
            drain: run.is_some_and(|r| r.drain),
            reboot: run.is_some_and(|r| r.reboot),
            completes: row.complete || run.is_some_and(|r| r.completes),
            name: node_name,
        })
    }
}

/// The NodeWright and what it works on, assembled as a pass assembles them.
struct Assembled {
    /// Defaulted, with the deletion's uninstalls and the config updates: the effective spec.
    nw: NodeWright,
    name: String,
    deleting: bool,
    paused: bool,
    disabled: bool,
    every_node: Vec<Arc<Node>>,
    /// The selected nodes, the config updates' reruns queued in their records.
    nodes: Vec<Arc<Node>>,
    every_job: Vec<Arc<StoredJob>>,
    /// Its own Jobs.
    jobs: JobIndex,
}

/// As a pass: the defaults, the deletion's uninstalls, the selection, the config updates, the
/// effective spec.
fn assemble(snapshot: &Snapshot) -> Result<Assembled, PreviewError> {
    let mut nw = snapshot.nodewright.clone();
    let name = nw.name_any();
    // As a pass: the defaults, the deletion's uninstalls, the config updates, the effective spec.
    default_nodewright(&mut nw.spec, &snapshot.defaults);
    let deleting = nw.metadata.deletion_timestamp.is_some();
    if deleting {
        uninstall::on_delete(&mut nw);
    }
    let paused = annotation_on(&nw, keys::PAUSE_ANNOTATION);
    let disabled = annotation_on(&nw, keys::DISABLE_ANNOTATION);
    let selection = NodeSelection::of(&nw)?;
    let every_node: Vec<Arc<Node>> = snapshot.nodes.iter().cloned().map(Arc::new).collect();
    let mut nodes = selected_nodes(&selection, &every_node);
    let every_job: Vec<Arc<StoredJob>> = snapshot
        .jobs
        .iter()
        .map(|j| Arc::new(StoredJob::of(j)))
        .collect();
    let jobs = own_jobs(&name, &every_job);

    let states: Vec<NodeState> = nodes.iter().filter_map(|n| parse_state(n, &name)).collect();
    let detected = config_updates::detect(&nw, &snapshot.configmaps, &states);
    nw.status
        .get_or_insert_with(Default::default)
        .config_updates = detected.updates;
    if !detected.changes.is_empty() {
        nodes = nodes
            .iter()
            .map(|n| match parse_state(n, &name) {
                Some(mut state) => {
                    for (package, version) in &detected.changes {
                        config_updates::queue(&mut state, package, version);
                    }
                    with_state(n, &name, &state)
                }
                None => n.clone(),
            })
            .collect();
    }

    Ok(Assembled {
        nw: config_updates::effective(&nw),
        name,
        deleting,
        paused,
        disabled,
        every_node,
        nodes,
        every_job,
        jobs,
    })
}

/// Previews the rollout of `snapshot.nodewright` (see the module documentation).
pub fn preview(snapshot: &Snapshot) -> Result<Preview, PreviewError> {
    let Assembled {
        nw,
        name,
        deleting,
        paused,
        disabled,
        every_node,
        nodes,
        every_job,
        jobs,
    } = assemble(snapshot)?;

    let all_nodewrights: Vec<Arc<NodeWright>> = snapshot
        .nodewrights
        .iter()
        .filter(|o| o.name_any() != name)
        .cloned()
        .map(Arc::new)
        .collect();
    let policy_name = nw.spec.deployment_policy.clone().filter(|p| !p.is_empty());
    let policy = policy_name.as_deref().and_then(|p| {
        snapshot
            .policies
            .iter()
            .find(|d| d.name_any() == p)
            .map(defaulted_policy)
    });
    let missing_policy = policy_name.is_some() && policy.is_none();
    let parts = pass_parts(
        &nw,
        &all_nodewrights,
        &every_node,
        &nodes,
        policy.as_ref(),
        &snapshot.runtime_taint,
    );
    let world = World {
        nw: &nw,
        name: &name,
        parts: &parts,
        jobs: &jobs,
        every_job: &every_job,
        every_node: &every_node,
        all_nodewrights: &all_nodewrights,
        missing_policy,
        deleting,
        now: snapshot.now,
        windows: &parts.windows,
        compartments: &parts.compartments,
        health_gates: parts.health_gates.as_ref(),
    };

    // The pass as it would run now: statuses and what holds each node back.
    let old_status = nw.status.clone().unwrap_or_default();
    let (now_status, now) = world.decide(&nw, old_status, &nodes, paused, disabled, 0);
    let now_input = world.input(&nw, &now_status, &nodes, paused, disabled, 0);
    // The cordons the cap holds back now (the slots granted in rollout order).
    let cap = snapshot
        .max_disrupted
        .map(|c| CapState::of(c, every_node.iter().map(AsRef::as_ref)));
    let held_by_cap: BTreeSet<String> = cap
        .map(|c| pass::cap_holds(&now, &now_input, c).into_iter().collect())
        .unwrap_or_default();
    // Then pass after pass, as if resumed and enabled, every stage succeeding.
    let unsoaked: Vec<Compartment> = parts
        .compartments
        .iter()
        .map(|c| Compartment {
            strategy: c.strategy.as_ref().map(batches::without_soak),
            ..c.clone()
        })
        .collect();
    let sim = World {
        windows: &ALWAYS,
        compartments: &unsoaked,
        // Every stage succeeds in the simulation, and every gate passes.
        health_gates: None,
        ..world
    }
    .simulate(&nodes);

    let node_compartment: BTreeMap<&str, &str> = parts
        .compartments
        .iter()
        .flat_map(|c| c.nodes.iter().map(|n| (n.as_str(), c.name.as_str())))
        .collect();
    let now_view = NowView {
        world: &world,
        input: &now_input,
        decision: &now,
        sim: &sim,
        node_compartment: &node_compartment,
        cap,
        held_by_cap: &held_by_cap,
        paused,
        disabled,
    };
    let previews = nodes
        .iter()
        .filter_map(|node| now_view.node_preview(node))
        .collect();
    let compartments = compartment_previews(&parts.compartments, &now, &sim);
    Ok(Preview {
        nodewright: name,
        deployment_policy: policy_name,
        missing_policy,
        paused,
        disabled,
        deleting,
        not_selected: every_node.len().saturating_sub(nodes.len()),
        compartments,
        nodes: previews,
        windows: parts.windows.describe(),
        waiting_for: parts.windows.waiting(snapshot.now),
        health_gates: health_gates::describe_gates(parts.health_gates.as_ref()),
        disruption_cap: snapshot
            .max_disrupted
            .zip(cap)
            .map(|(c, state)| CapPreview {
                cap: c.to_string(),
                limit: state.limit,
                disrupted: state.disrupted,
            }),
    })
}

/// When a compartment soaks, `until`.
fn soaking_until<'d>(now: &'d PassDecision<'_>, compartment: &str) -> Option<&'d Timestamp> {
    now.batch_states
        .get(compartment)
        .and_then(|b| b.as_ref())
        .and_then(|b| b.soak_until.as_ref())
        .map(|t| &t.0)
}

/// Why a node of `compartment` that nothing else holds back does not work now: its compartment
/// soaks, its batch (admitted in `batch` of the simulation) is not reached yet, or the rollout
/// stopped before reaching it.
fn rollout_blocker(
    now: &PassDecision<'_>,
    sim: &Simulation,
    compartment: &str,
    batch: Option<i32>,
) -> Blocker {
    let compartment = compartment.to_owned();
    match batch {
        _ if let Some(until) = soaking_until(now, &compartment) => Blocker::Soak {
            until: rfc3339(*until),
            compartment,
        },
        Some(batch) => Blocker::Batch { compartment, batch },
        None if sim.stopped.contains(&compartment) => Blocker::Stopped { compartment },
        None => Blocker::NotReached { compartment },
    }
}

/// Each compartment as `plan` shows it: its strategy, ceiling, batches as simulated, and soak.
fn compartment_previews(
    compartments: &[Compartment],
    now: &PassDecision<'_>,
    sim: &Simulation,
) -> Vec<CompartmentPreview> {
    compartments
        .iter()
        .map(|c| CompartmentPreview {
            name: c.name.clone(),
            strategy: match c.strategy.as_ref() {
                None => "none",
                Some(s) => batches::strategy_name(Some(s)),
            },
            ceiling: c.ceiling,
            nodes: c.nodes.len(),
            batches: sim.batches.get(&c.name).cloned().unwrap_or_default(),
            stopped: sim.stopped.contains(&c.name),
            soak: c
                .strategy
                .as_ref()
                .filter(|s| batches::soak(s).is_some())
                .and_then(|s| batches::batch_parameters(s)?.soak.clone()),
            soaking_until: soaking_until(now, &c.name).map(|t| rfc3339(*t)),
        })
        .collect()
}

/// A time as the preview shows it: UTC, to the second.
fn rfc3339(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A copy of `node` whose node state for `nodewright` is `state`.
fn with_state(node: &Node, nodewright: &str, state: &NodeState) -> Arc<Node> {
    let mut node = node.clone();
    node.annotations_mut()
        .insert(keys::node_state_key(nodewright), state.to_annotation());
    Arc::new(node)
}

/// What the simulation found.
#[derive(Debug, Default)]
struct Simulation {
    /// Per node: what ran on it.
    runs: BTreeMap<String, NodeRun>,
    /// Per node: the batch it was admitted in.
    batch_of: BTreeMap<String, i32>,
    /// Nodes in the order they were admitted.
    order: Vec<String>,
    /// Nodes admitted before the preview (in progress now).
    started: BTreeSet<String>,
    /// Per compartment: its batches.
    batches: BTreeMap<String, Vec<BatchPreview>>,
    /// Compartments whose rollout stopped.
    stopped: BTreeSet<String>,
}

/// The schedule the simulation runs with: the windows only delay its batches (`plan` prints them
/// and when the next opens), the order and the batches are the same.
static ALWAYS: Schedule = Schedule::Always;

/// The inputs every pass of a preview shares.
#[derive(Clone, Copy)]
struct World<'a> {
    nw: &'a NodeWright,
    name: &'a str,
    parts: &'a PassParts<'a>,
    jobs: &'a JobIndex,
    every_job: &'a [Arc<StoredJob>],
    every_node: &'a [Arc<Node>],
    all_nodewrights: &'a [Arc<NodeWright>],
    missing_policy: bool,
    deleting: bool,
    now: Timestamp,
    /// The maintenance windows the passes decide with.
    windows: &'a Schedule,
    /// The compartments the passes decide with (the simulation's without their soaks).
    compartments: &'a [Compartment],
    /// The health gates the passes decide with (none in the simulation: they pass).
    health_gates: Option<&'a HealthGates>,
}

impl<'a> World<'a> {
    /// The input of pass number `pass` over `nodes`, the NodeWright carrying `old` as its status.
    fn input<'i>(
        &'i self,
        nw: &'i NodeWright,
        old: &'i NodeWrightStatus,
        nodes: &'i [Arc<Node>],
        paused: bool,
        disabled: bool,
        pass: usize,
    ) -> PassInput<'i> {
        let seconds = i64::try_from(pass).unwrap_or(i64::MAX);
        PassInput {
            nodewright: nw,
            old_status: old,
            nodes,
            gates: &self.parts.gates,
            jobs: self.jobs,
            tolerations: &self.parts.tolerations,
            reset_batches: self.parts.reset_batches,
            missing_policy: self.missing_policy,
            paused,
            disabled,
            deleting: self.deleting,
            windows: self.windows,
            health_gates: self.health_gates,
            now: self
                .now
                .checked_add(SignedDuration::from_secs(seconds))
                .unwrap_or(self.now),
        }
    }

    /// Decides pass number `pass` as a rollout pass does: when its batch evaluation changed a
    /// batch state, that state is persisted first and the pass decided again from it
    /// ([`pass::decide_from_persisted`], as the rollout decides). Returns the status the pass went
    /// on from, and its decision.
    fn decide(
        &self,
        nw: &NodeWright,
        old: NodeWrightStatus,
        nodes: &[Arc<Node>],
        paused: bool,
        disabled: bool,
        pass: usize,
    ) -> (NodeWrightStatus, PassDecision<'a>) {
        // The preview simulates no automatic rollback: nothing amends the persisted status.
        let input = self.input(nw, &old, nodes, paused, disabled, pass);
        let decided = pass::decide_from_persisted(&input, self.compartments, |_| {});
        (decided.persist.unwrap_or(old), decided.decision)
    }

    /// Runs passes until nothing changes any more: each admits what the budget and batches allow,
    /// the admitted nodes run every stage to its end, and the status the pass writes is the next
    /// pass's.
    fn simulate(&self, nodes: &[Arc<Node>]) -> Simulation {
        let mut sim = Simulation::default();
        let mut nodes: Vec<Arc<Node>> = nodes.to_vec();
        let mut nw = self.nw.clone();
        let mut status = nw.status.clone().unwrap_or_default();
        let passes = nodes
            .len()
            .saturating_mul(PASSES_PER_NODE)
            .saturating_add(EXTRA_PASSES);
        let mut waves: BTreeMap<String, i32> = BTreeMap::new();
        for pass_number in 0..passes {
            nw.status = Some(status.clone());
            let (used, decision) =
                self.decide(&nw, status.clone(), &nodes, false, false, pass_number);
            let input = self.input(&nw, &used, &nodes, false, false, pass_number);
            let admitted = self.record_admissions(&mut sim, &decision, &mut waves, pass_number);
            let mut ran: BTreeSet<String> = BTreeSet::new();
            let mut results = BTreeMap::new();
            for (node_name, row) in &decision.rows {
                let idle = pass::idle_status(&decision, &input, node_name);
                let works = decision.works_on(&input, node_name);
                if works
                    && !sim.runs.contains_key(node_name)
                    && let Some(state) = row.state.clone()
                {
                    sim.runs
                        .insert(node_name.clone(), self.run_node(&nw, node_name, state));
                    ran.insert(node_name.clone());
                }
                let result = match sim.runs.get(node_name) {
                    Some(run) if works => {
                        let status = if run.completes {
                            Status::Complete
                        } else if run.timed_out {
                            Status::Erroring
                        } else {
                            Status::InProgress
                        };
                        (Some(run.state.clone()), status)
                    }
                    _ => (row.state.clone(), idle),
                };
                results.insert(node_name.clone(), result);
            }
            let next = pass::status_after(&input, self.compartments, decision, results);
            // Only the nodes that ran this pass change (a copy each, once).
            for n in nodes.iter_mut() {
                if let Some(run) = ran.get(n.name_any().as_str()).and_then(|r| sim.runs.get(r)) {
                    *n = with_state(n, self.name, &run.state);
                }
            }
            let changed = !ran.is_empty();
            for (compartment, c) in &next.compartment_statuses {
                if c.batch_state.as_ref().is_some_and(|b| b.should_stop) {
                    sim.stopped.insert(compartment.clone());
                }
            }
            let quiet = !admitted && !changed && next == status;
            status = next;
            if quiet {
                break;
            }
        }
        sim
    }

    /// Records the nodes `decision` admits for the first time, per compartment in rollout order;
    /// returns whether there were any.
    fn record_admissions(
        &self,
        sim: &mut Simulation,
        decision: &PassDecision<'_>,
        waves: &mut BTreeMap<String, i32>,
        pass_number: usize,
    ) -> bool {
        let mut any = false;
        for c in self.compartments {
            let new: Vec<String> = c
                .nodes
                .iter()
                .filter(|n| decision.active.contains(*n) && !sim.batch_of.contains_key(*n))
                .cloned()
                .collect();
            if new.is_empty() {
                continue;
            }
            any = true;
            let wave = waves.entry(c.name.clone()).or_insert(0);
            *wave += 1;
            let number = match decision.batch_states.get(&c.name) {
                Some(Some(b)) => b.current_batch,
                _ => *wave,
            };
            // In the first pass, nodes admitted by an earlier pass (nodePriority, work recorded)
            // are the batch in progress now.
            let slots = decision
                .slots
                .iter()
                .flatten()
                .filter(|s| s.admitted)
                .map(|s| s.node)
                .collect::<BTreeSet<&str>>();
            let in_progress = pass_number == 0 && new.iter().all(|n| slots.contains(n.as_str()));
            for n in &new {
                sim.batch_of.insert(n.clone(), number);
                sim.order.push(n.clone());
                if pass_number == 0 && slots.contains(n.as_str()) {
                    sim.started.insert(n.clone());
                }
            }
            sim.batches
                .entry(c.name.clone())
                .or_default()
                .push(BatchPreview {
                    number,
                    nodes: new,
                    in_progress,
                });
        }
        any
    }

    /// Runs the stage machine on one node until it has nothing more to start, every stage it
    /// starts (and every Job running now) succeeding, as the outcome path records it.
    fn run_node(&self, nw: &NodeWright, node: &str, state: NodeState) -> NodeRun {
        let fleet: Vec<Arc<StoredJob>> = self
            .every_job
            .iter()
            .filter(|j| node_of(j) == Some(node))
            .cloned()
            .collect();
        let label = crate::naming::label_value(self.name);
        let own: Vec<Arc<StoredJob>> = fleet
            .iter()
            .filter(|j| j.nodewright.as_ref() == Some(&label))
            .cloned()
            .collect();
        let mut gone: BTreeSet<String> = BTreeSet::new();
        let mut run = NodeRun {
            state,
            ..NodeRun::default()
        };
        let steps = nw
            .spec
            .packages
            .len()
            .saturating_mul(STEPS_PER_PACKAGE)
            .saturating_add(STEPS_PER_PACKAGE);
        for _ in 0..steps {
            let kept = |jobs: &[Arc<StoredJob>]| -> Vec<Arc<StoredJob>> {
                jobs.iter()
                    .filter(|j| j.metadata.name.as_ref().is_none_or(|n| !gone.contains(n)))
                    .cloned()
                    .collect()
            };
            let index = JobIndex::with_fleet(kept(&own), &kept(&fleet));
            // Jobs running now go first: they started before anything this pass starts.
            let running = running_stages(nw, node, &run.state, &index);
            if !running.is_empty() {
                for (annotation, job, interrupt) in running {
                    self.complete(nw, &mut run, &annotation, interrupt, true);
                    gone.insert(job);
                }
                continue;
            }
            let p = plan_node(nw, node, &run.state, &index, true);
            run.state = p.state.clone();
            run.drain |= p.cordon;
            run.timed_out |= p.timed_out;
            let mut progressed = !p.delete.is_empty();
            gone.extend(p.delete.iter().cloned());
            for creation in p.create {
                progressed = true;
                match creation {
                    Creation::Package {
                        key,
                        stage,
                        drain_first,
                    } => {
                        run.drain |= drain_first;
                        if let Some(a) = annotation(nw, &key, stage) {
                            self.complete(nw, &mut run, &a, false, false);
                        }
                    }
                    Creation::Interrupt { merged, stage } => {
                        run.drain = true;
                        run.reboot |= merged.interrupt.kind == InterruptType::Reboot;
                        let folded: Vec<String> = run
                            .state
                            .iter()
                            .filter(|r| r.stage == stage && r.state == Some(State::Skipped))
                            .map(|r| r.name.clone())
                            .collect();
                        if let Some(a) = annotation(nw, &merged.owner, stage) {
                            self.complete(nw, &mut run, &a, true, false);
                            if let Some(step) = run.steps.last_mut() {
                                step.interrupt = Some(merged.interrupt.kind);
                                step.merged = folded;
                            }
                        }
                    }
                }
            }
            if !progressed {
                // An interrupt waits for other NodeWrights' package Jobs on the node: they end.
                let others: Vec<String> = fleet
                    .iter()
                    .filter(|j| !is_finished(j))
                    .filter_map(|j| j.metadata.name.clone())
                    .filter(|n| !gone.contains(n))
                    .collect();
                if others.is_empty() || !index.unfinished_package_job_on(node) {
                    break;
                }
                gone.extend(others);
            }
        }
        run.completes = graph::all_done(&nw.spec.packages, &run.state);
        run
    }

    /// Records that the stage of `annotation` ran and succeeded.
    fn complete(
        &self,
        nw: &NodeWright,
        run: &mut NodeRun,
        annotation: &PackageAnnotation,
        interrupt: bool,
        running: bool,
    ) {
        apply_record(&mut run.state, annotation, interrupt, Record::Complete);
        let kind = interrupt
            .then(|| nw.spec.packages.get(&annotation.name))
            .flatten()
            .and_then(|p| p.interrupt.as_ref())
            .map(|i| i.kind);
        run.reboot |= kind == Some(InterruptType::Reboot);
        run.drain |= interrupt;
        run.steps.push(StepPreview {
            package: annotation.name.clone(),
            version: annotation.version.clone(),
            stage: annotation.stage,
            running,
            interrupt: kind,
            merged: Vec::new(),
        });
    }

    /// Why nothing runs on `node` in the pass `decision` (batch and budget excepted: the caller
    /// adds those from the simulation).
    fn blockers(
        &self,
        input: &PassInput<'_>,
        decision: &PassDecision<'_>,
        node: &Arc<Node>,
        paused: bool,
        disabled: bool,
    ) -> Vec<Blocker> {
        let node_name = node.name_any();
        let Some(row) = decision.rows.get(&node_name) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if row.complete {
            return out;
        }
        match selection::blocker(node, input.tolerations) {
            Some(selection::Blocker::Ignored) => out.push(Blocker::Ignored),
            Some(selection::Blocker::Taints(taints)) => out.push(Blocker::Taints { taints }),
            None => {}
        }
        let Some(state) = row.state.as_ref() else {
            out.push(Blocker::MalformedState);
            return out;
        };
        if paused {
            out.push(Blocker::Paused);
        }
        if disabled {
            out.push(Blocker::Disabled);
        }
        if let Some(policy) = self
            .missing_policy
            .then(|| self.nw.spec.deployment_policy.clone())
            .flatten()
        {
            out.push(Blocker::MissingPolicy { policy });
        }
        if row.waits {
            out.extend(self.holding_back(node));
        }
        if !decision.active.contains(&node_name)
            && let Some(waiting) = input.windows.waiting(input.now)
        {
            out.push(Blocker::Window { waiting });
        }
        out.extend(self.timed_out(&node_name, state));
        out.extend(self.drain_timed_out(node, input.now));
        if row.at_gates {
            let mark = health_gates::mark(node, self.name);
            out.push(Blocker::HealthGate {
                gate: mark.as_ref().and_then(|m| m.gate.clone()),
                saw: mark.as_ref().and_then(|m| m.saw.clone()),
                since: mark.map(|m| m.since).unwrap_or_default(),
                failed: row.gate_failed,
            });
        }
        out.extend(dependencies(self.nw, state));
        out
    }

    /// The drain of `node` ran past the NodeWright's `drainConfig.timeout` (the operator's own
    /// test: its cordon, its drain-start mark, the bound).
    fn drain_timed_out(&self, node: &Node, now: Timestamp) -> Option<Blocker> {
        let timeout = DrainOptions::of(self.nw.spec.drain_config.as_ref())
            .ok()?
            .timeout?;
        let started: Timestamp = node
            .annotations()
            .get(&keys::drain_start_key(self.name))?
            .parse()
            .ok()?;
        (cordon::holds_cordon(node, self.name) && drain::timed_out(started, Some(timeout), now))
            .then(|| Blocker::DrainTimedOut {
                since: rfc3339(started),
                timeout_seconds: timeout.as_secs(),
            })
    }

    /// The earlier NodeWrights that hold `node` back, each checked with the pass's own gate.
    fn holding_back(&self, node: &Node) -> Vec<Blocker> {
        let every_node: Vec<&Node> = self.every_node.iter().map(AsRef::as_ref).collect();
        self.all_nodewrights
            .iter()
            .filter(|o| {
                let gates = priority::gates(self.nw, std::slice::from_ref(*o), &every_node);
                priority::waits(&gates, node)
            })
            .map(|o| Blocker::Priority {
                nodewright: o.name_any(),
                sequencing: o.spec.sequencing,
            })
            .collect()
    }

    /// The packages whose stage timed out on the node (erroring, and their Job recorded so).
    fn timed_out(&self, node: &str, state: &NodeState) -> Vec<Blocker> {
        self.nw
            .spec
            .packages
            .iter()
            .filter_map(|(name, p)| state.get(name, &p.version))
            .filter(|r| r.state == Some(State::Erroring))
            .filter_map(|r| {
                let job = job_name(self.name, &r.name, &r.version, r.stage, node);
                (self.jobs.get(&job).and_then(recorded) == Some(Recorded::TimedOut)).then(|| {
                    Blocker::TimedOut {
                        package: r.name.clone(),
                        version: r.version.clone(),
                        stage: r.stage,
                        job,
                    }
                })
            })
            .collect()
    }
}

/// The Job that runs `stage` of a package on `node` (the node's interrupt Job for interrupt stages).
fn job_name(nodewright: &str, package: &str, version: &str, stage: Stage, node: &str) -> String {
    if stage.is_interrupt() {
        interrupt_job_name(nodewright, node)
    } else {
        package_job_name(nodewright, package, version, stage, node)
    }
}

/// The package annotation of the Job running `stage` of package `key` of `nw`.
fn annotation(nw: &NodeWright, key: &str, stage: Stage) -> Option<PackageAnnotation> {
    let p = nw.spec.packages.get(key)?;
    Some(PackageAnnotation {
        name: key.to_owned(),
        version: p.version.clone(),
        nodewright: nw.name_any(),
        stage,
        image: p.image.clone(),
        container_sha: p.container_sha.clone(),
    })
}

/// The stages whose Job runs now on `node` (unfinished), with the Job's name and whether it is the
/// node's interrupt.
fn running_stages(
    nw: &NodeWright,
    node: &str,
    state: &NodeState,
    jobs: &JobIndex,
) -> Vec<(PackageAnnotation, String, bool)> {
    let name = nw.name_any();
    nw.spec
        .packages
        .iter()
        .filter_map(|(key, p)| state.get(key, &p.version))
        .filter(|r| matches!(r.state, Some(State::InProgress | State::Erroring) | None))
        .filter_map(|r| {
            let job = job_name(&name, &r.name, &r.version, r.stage, node);
            let running = jobs.get(&job).is_some_and(|j| !is_finished(j));
            let a = annotation(nw, &r.name, r.stage)?;
            running.then_some((a, job, r.stage.is_interrupt()))
        })
        .collect()
}

/// The packages held up by a dependency that is failing on the node (erroring), or that is not in
/// the spec at that version (it can never be done). A dependency that simply has not run yet is
/// the normal order of stages, not a blocker.
fn dependencies(nw: &NodeWright, state: &NodeState) -> Vec<Blocker> {
    let packages = &nw.spec.packages;
    let runnable: BTreeSet<&str> = graph::runnable(packages, state).into_iter().collect();
    let stuck = |dep: &str, version: &str| match packages.get(dep).filter(|d| d.version == version)
    {
        None => true,
        Some(_) => state
            .get(dep, version)
            .is_some_and(|r| r.state == Some(State::Erroring)),
    };
    packages
        .iter()
        .filter(|(name, p)| {
            !runnable.contains(name.as_str()) && !package_done(p, state.get(name, &p.version))
        })
        .filter_map(|(name, p)| {
            let waits_for: Vec<String> = p
                .depends_on
                .iter()
                .filter(|(dep, version)| {
                    !packages
                        .get(*dep)
                        .filter(|d| &d.version == *version)
                        .is_some_and(|d| package_done(d, state.get(dep, version)))
                })
                .map(|(dep, version)| format!("{dep}|{version}"))
                .collect();
            p.depends_on
                .iter()
                .any(|(dep, version)| stuck(dep, version))
                .then(|| Blocker::Dependency {
                    package: name.clone(),
                    waits_for,
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::plan::tests::package;
    use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
    use k8s_openapi::api::core::v1::{NodeSpec, PodSpec, PodTemplateSpec, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use nodewright_shared::api::{
        BatchParameters, DeploymentBudget, DeploymentPolicySpec, DeploymentStrategy,
        InterruptionBudget, LinearStrategy, NodeWrightSpec, Package, PolicyDefault,
    };
    use nodewright_shared::node_state::PackageStatus;

    fn nodewright(name: &str, packages: &[(&str, Package)]) -> NodeWright {
        let mut nw = NodeWright::new(
            name,
            NodeWrightSpec {
                packages: packages
                    .iter()
                    .map(|(k, p)| ((*k).to_owned(), p.clone()))
                    .collect(),
                priority: 200,
                ..NodeWrightSpec::default()
            },
        );
        nw.metadata.uid = Some("uid".into());
        nw.metadata.generation = Some(1);
        nw
    }

    fn node(name: &str, second: i64) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::from_second(second).expect("timestamp"))),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn snapshot(nw: NodeWright, nodes: Vec<Node>) -> Snapshot {
        Snapshot {
            nodewrights: vec![nw.clone()],
            nodewright: nw,
            nodes,
            policies: Vec::new(),
            jobs: Vec::new(),
            configmaps: Vec::new(),
            defaults: OperatorDefaults::default(),
            runtime_taint: RuntimeTaint::parse(crate::jobs::DEFAULT_RUNTIME_REQUIRED_TAINT)
                .expect("taint"),
            max_disrupted: None,
            now: Timestamp::from_second(1_000).expect("timestamp"),
        }
    }

    fn batches(p: &Preview) -> Vec<(i32, Vec<String>)> {
        p.compartments
            .iter()
            .flat_map(|c| c.batches.iter().map(|b| (b.number, b.nodes.clone())))
            .collect()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    /// The cluster-wide cap: one node of the cluster is cordoned by another NodeWright, the cap
    /// is 2, so of the three nodes whose reboot package wants a cordon now the first in rollout
    /// order gets the free slot and the other two wait for the cap.
    #[test]
    fn a_full_disruption_cap_holds_the_cordons_past_its_free_slots() {
        let nw = nodewright(
            "nw",
            &[("driver", package(&[], Some(InterruptType::Reboot)))],
        );
        let mut other = node("busy", 0);
        other.metadata.annotations = Some(BTreeMap::from([(
            keys::cordon_key("other"),
            "true".to_owned(),
        )]));
        let nodes = vec![node("n0", 1), node("n1", 2), node("n2", 3), other];
        let mut snap = snapshot(nw, nodes);
        snap.nodewright.spec.node_selectors = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_expressions: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                        key: "kubernetes.io/hostname".into(),
                        operator: "In".into(),
                        values: Some(names(&["n0", "n1", "n2"])),
                    },
                ]),
                ..Default::default()
            },
        );
        for n in &mut snap.nodes {
            let name = n.name_any();
            n.labels_mut().insert("kubernetes.io/hostname".into(), name);
        }
        snap.max_disrupted = Some(MaxDisrupted::Count(2));
        let p = preview(&snap).expect("preview");
        assert_eq!(
            p.disruption_cap,
            Some(CapPreview {
                cap: "2 nodes".into(),
                limit: 2,
                disrupted: 1
            })
        );
        let held = |name: &str| {
            p.nodes
                .iter()
                .find(|n| n.name == name)
                .expect("node")
                .blockers
                .contains(&Blocker::DisruptionCap {
                    limit: 2,
                    disrupted: 1,
                })
        };
        assert!(!held("n0"), "{p:#?}");
        assert!(held("n1") && held("n2"), "{p:#?}");

        // Without a cap nothing is held.
        snap.max_disrupted = None;
        let p = preview(&snap).expect("preview");
        assert_eq!(p.disruption_cap, None);
        assert!(p.nodes.iter().all(|n| n.blockers.is_empty()), "{p:#?}");
    }

    /// A node whose drain started more than `drainConfig.timeout` ago under this NodeWright's
    /// cordon is shown held by the timed-out drain; within the bound it is not.
    #[test]
    fn a_drain_past_its_timeout_is_named() {
        let mut nw = nodewright(
            "nw",
            &[("driver", package(&[], Some(InterruptType::Reboot)))],
        );
        nw.spec.drain_config = Some(nodewright_shared::api::DrainConfig {
            timeout: Some("60s".into()),
            ..Default::default()
        });
        let mut n0 = node("n0", 1);
        n0.metadata.annotations = Some(BTreeMap::from([
            (keys::cordon_key("nw"), "true".to_owned()),
            (
                keys::drain_start_key("nw"),
                "1970-01-01T00:14:00Z".to_owned(),
            ),
        ]));
        let mut snap = snapshot(nw, vec![n0]);
        // now is 1970-01-01T00:16:40Z: 160 s after the drain started.
        let p = preview(&snap).expect("preview");
        assert!(
            p.nodes[0].blockers.contains(&Blocker::DrainTimedOut {
                since: "1970-01-01T00:14:00Z".into(),
                timeout_seconds: 60
            }),
            "{p:#?}"
        );
        snap.now = Timestamp::from_second(860).expect("time");
        let p = preview(&snap).expect("preview");
        assert!(
            !p.nodes[0]
                .blockers
                .iter()
                .any(|b| matches!(b, Blocker::DrainTimedOut { .. })),
            "{p:#?}"
        );
    }

    #[test]
    fn a_legacy_budget_rolls_in_fixed_batches_in_node_order_with_every_stage() {
        let mut nw = nodewright(
            "nw",
            &[
                ("a", package(&[], None)),
                ("b", package(&["a"], Some(InterruptType::Reboot))),
            ],
        );
        nw.spec.interruption_budget = Some(InterruptionBudget {
            count: Some(2),
            percent: None,
        });
        // Creation order, not name order.
        let nodes = vec![node("n3", 1), node("n1", 2), node("n2", 3), node("n0", 4)];
        let p = preview(&snapshot(nw, nodes)).expect("preview");
        assert_eq!(
            batches(&p),
            [(1, names(&["n3", "n1"])), (2, names(&["n2", "n0"]))]
        );
        let n3 = &p.nodes[0];
        assert_eq!(n3.name, "n3");
        assert_eq!((n3.order, n3.batch), (Some(0), Some(1)));
        assert!(n3.drain && n3.reboot && n3.completes, "{n3:#?}");
        // A new NodeWright's first pass records batch 1 and starts it at once.
        assert!(n3.blockers.is_empty(), "{n3:#?}");
        assert_eq!(n3.status, Status::InProgress);
        let steps: Vec<(String, Stage)> = n3
            .steps
            .iter()
            .map(|s| (s.package.clone(), s.stage))
            .collect();
        assert_eq!(
            steps,
            [
                ("a".into(), Stage::Apply),
                ("a".into(), Stage::Config),
                ("b".into(), Stage::Apply),
                ("b".into(), Stage::Config),
                ("b".into(), Stage::Interrupt),
                ("b".into(), Stage::PostInterrupt),
            ]
        );
        let n2 = &p.nodes[2];
        assert_eq!(n2.status, Status::Waiting);
        assert_eq!(
            n2.blockers,
            [Blocker::Batch {
                compartment: "__default__".into(),
                batch: 2
            }]
        );
    }

    #[test]
    fn a_closed_window_holds_every_unstarted_node_and_the_batches_start_when_it_opens() {
        use nodewright_shared::api::MaintenanceWindow;
        let mut nw = nodewright("nw", &[("a", package(&[], None))]);
        nw.spec.deployment_policy = Some("nightly".into());
        let mut snap = snapshot(nw, (0..3).map(|i| node(&format!("n{i}"), i)).collect());
        // 1970-01-01T00:16:40Z (the snapshot's clock) is outside 22:00-04:00 UTC.
        snap.policies = vec![DeploymentPolicy::new(
            "nightly",
            DeploymentPolicySpec {
                default: PolicyDefault {
                    budget: DeploymentBudget {
                        count: Some(2),
                        percent: None,
                    },
                    strategy: DeploymentStrategy {
                        fixed: Some(BatchParameters::default()),
                        ..DeploymentStrategy::default()
                    },
                },
                windows: vec![MaintenanceWindow {
                    days: Vec::new(),
                    start: "22:00".into(),
                    end: "04:00".into(),
                    time_zone: None,
                }],
                ..DeploymentPolicySpec::default()
            },
        )];
        snap.now = "1970-01-01T12:00:00Z".parse().expect("time");
        let p = preview(&snap).expect("preview");
        assert_eq!(p.windows, ["every day 22:00-04:00 (next day) UTC"]);
        let waiting = "waiting for window (opens 1970-01-01T22:00+00:00)";
        assert_eq!(p.waiting_for.as_deref(), Some(waiting));
        for n in &p.nodes {
            assert_eq!(n.status, Status::Waiting, "{}", n.name);
            assert_eq!(
                n.blockers,
                [Blocker::Window {
                    waiting: waiting.to_owned()
                }]
            );
        }
        // The order and the batches are the rollout's once the window opens.
        assert_eq!(
            batches(&p),
            [
                (1, names(&["n0"])),
                (2, names(&["n1"])),
                (3, names(&["n2"]))
            ]
        );
        // Inside the window nothing waits.
        snap.now = "1970-01-01T23:00:00Z".parse().expect("time");
        let p = preview(&snap).expect("preview");
        assert_eq!(p.waiting_for, None);
        assert!(p.nodes[0].blockers.is_empty());
    }

    #[test]
    fn a_soaking_batch_holds_the_next_one_and_the_plan_says_until_when() {
        use nodewright_shared::api::{BatchState, CompartmentStatus, NodeWrightStatus};
        let mut nw = nodewright("nw", &[("a", package(&[], None))]);
        nw.spec.deployment_policy = Some("soaked".into());
        // n0 finished batch 1 (its Config complete); the batch soaks until 2,000.
        let mut done = node("n0", 0);
        let mut state = NodeState::default();
        state.upsert(PackageStatus {
            name: "a".into(),
            version: "1.0.0".into(),
            image: "img".into(),
            container_sha: String::new(),
            stage: Stage::Config,
            state: Some(State::Complete),
            restarts: 0,
        });
        done.metadata.annotations = Some(BTreeMap::from([(
            keys::node_state_key("nw"),
            state.to_annotation(),
        )]));
        nw.status = Some(NodeWrightStatus {
            compartment_statuses: BTreeMap::from([(
                "__default__".to_owned(),
                CompartmentStatus {
                    batch_state: Some(BatchState {
                        current_batch: 1,
                        soak_until: Some(Time(Timestamp::from_second(2_000).expect("time"))),
                        ..BatchState::default()
                    }),
                    ..CompartmentStatus::default()
                },
            )]),
            ..NodeWrightStatus::default()
        });
        let mut snap = snapshot(nw, vec![done, node("n1", 1), node("n2", 2)]);
        snap.policies = vec![DeploymentPolicy::new(
            "soaked",
            DeploymentPolicySpec {
                default: PolicyDefault {
                    budget: DeploymentBudget {
                        count: Some(1),
                        percent: None,
                    },
                    strategy: DeploymentStrategy {
                        fixed: Some(BatchParameters {
                            soak: Some("10m".into()),
                            ..BatchParameters::default()
                        }),
                        ..DeploymentStrategy::default()
                    },
                },
                ..DeploymentPolicySpec::default()
            },
        )];
        let p = preview(&snap).expect("preview");
        let c = &p.compartments[0];
        assert_eq!(c.soak.as_deref(), Some("10m"));
        assert_eq!(c.soaking_until.as_deref(), Some("1970-01-01T00:33:20Z"));
        assert_eq!(
            p.nodes[1].blockers,
            [Blocker::Soak {
                compartment: "__default__".into(),
                until: "1970-01-01T00:33:20Z".into()
            }]
        );
        // The simulation does not wait out the soaks: the batches that follow are shown.
        assert_eq!(batches(&p), [(2, names(&["n1"])), (3, names(&["n2"]))]);
    }

    /// A node whose packages finished waits at its health gate (as the operator recorded on it):
    /// `why` names the gate, what was seen and since when, the plan lists the gates, and a node
    /// past the gate's timeout shows it failed; without the record or the gates, no blocker.
    #[test]
    fn a_node_at_its_health_gate_names_the_gate_and_what_was_seen() {
        use nodewright_shared::api::{HealthGate, NodeConditionGate};
        let mut nw = nodewright("nw", &[("a", package(&[], None))]);
        nw.spec.health_gates = Some(HealthGates {
            gates: vec![HealthGate {
                name: "gpu-healthy".into(),
                timeout: Some("10m".into()),
                pods_ready: None,
                node_condition: Some(NodeConditionGate {
                    type_: "GpuHealthy".into(),
                    status: None,
                }),
                no_firing_alert: None,
            }],
            on_failure: None,
        });
        let mut done = node("n0", 0);
        let mut state = NodeState::default();
        state.upsert(PackageStatus {
            name: "a".into(),
            version: "1.0.0".into(),
            image: "img".into(),
            container_sha: String::new(),
            stage: Stage::Config,
            state: Some(State::Complete),
            restarts: 0,
        });
        let record = |failed: bool| {
            serde_json::json!({
                "since": "1970-01-01T00:10:00Z", "gate": "gpu-healthy",
                "saw": "the node has no condition GpuHealthy (True wanted)", "failed": failed,
            })
            .to_string()
        };
        done.metadata.annotations = Some(BTreeMap::from([
            (keys::node_state_key("nw"), state.to_annotation()),
            (keys::cordon_key("nw"), "true".to_owned()),
            (keys::gates_key("nw"), record(false)),
        ]));
        let mut snap = snapshot(nw, vec![done]);
        let p = preview(&snap).expect("preview");
        let waiting = Blocker::HealthGate {
            gate: Some("gpu-healthy".into()),
            saw: Some("the node has no condition GpuHealthy (True wanted)".into()),
            since: "1970-01-01T00:10:00Z".into(),
            failed: false,
        };
        assert!(p.nodes[0].blockers.contains(&waiting), "{p:#?}");
        assert!(
            p.health_gates.iter().any(|l| l.contains("gpu-healthy")),
            "{:?}",
            p.health_gates
        );

        // Past its timeout, as recorded: the same gate, failed.
        snap.nodes[0]
            .annotations_mut()
            .insert(keys::gates_key("nw"), record(true));
        let p = preview(&snap).expect("preview");
        assert!(
            p.nodes[0].blockers.contains(&Blocker::HealthGate {
                gate: Some("gpu-healthy".into()),
                saw: Some("the node has no condition GpuHealthy (True wanted)".into()),
                since: "1970-01-01T00:10:00Z".into(),
                failed: true,
            }),
            "{p:#?}"
        );

        // Gates removed from the spec: the node is no longer held by them.
        snap.nodewright.spec.health_gates = None;
        snap.nodewrights = vec![snap.nodewright.clone()];
        let p = preview(&snap).expect("preview");
        assert!(
            !p.nodes[0]
                .blockers
                .iter()
                .any(|b| matches!(b, Blocker::HealthGate { .. })),
            "{p:#?}"
        );
        assert!(p.health_gates.is_empty());
    }

    #[test]
    fn a_linear_policy_grows_its_batches_within_the_ceiling() {
        let mut nw = nodewright("nw", &[("a", package(&[], None))]);
        nw.spec.deployment_policy = Some("slow".into());
        let mut snap = snapshot(nw, (0..5).map(|i| node(&format!("n{i}"), i)).collect());
        snap.policies = vec![DeploymentPolicy::new(
            "slow",
            DeploymentPolicySpec {
                default: PolicyDefault {
                    budget: DeploymentBudget {
                        count: Some(2),
                        percent: None,
                    },
                    strategy: DeploymentStrategy {
                        linear: Some(LinearStrategy {
                            batch: BatchParameters::default(),
                            delta: Some(1),
                        }),
                        ..DeploymentStrategy::default()
                    },
                },
                ..DeploymentPolicySpec::default()
            },
        )];
        let p = preview(&snap).expect("preview");
        assert_eq!(
            batches(&p),
            [
                (1, names(&["n0"])),
                (2, names(&["n1", "n2"])),
                (3, names(&["n3", "n4"]))
            ]
        );
        assert_eq!(p.compartments[0].ceiling, 2);
        assert_eq!(p.compartments[0].strategy, "linear");
    }

    #[test]
    fn blocked_and_held_back_nodes_say_why_and_a_pause_shows_what_resume_does() {
        let mut nw = nodewright("later", &[("a", package(&[], None))]);
        nw.metadata.annotations = Some(BTreeMap::from([(
            keys::PAUSE_ANNOTATION.to_owned(),
            "true".to_owned(),
        )]));
        let earlier = nodewright("earlier", &[("a", package(&[], None))]);
        let mut ignored = node("ignored", 1);
        ignored.metadata.labels = Some(BTreeMap::from([(
            keys::IGNORE_LABEL.to_owned(),
            "true".to_owned(),
        )]));
        let mut tainted = node("tainted", 2);
        tainted.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "gpu".into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            }]),
            ..NodeSpec::default()
        });
        let mut snap = snapshot(nw, vec![ignored, tainted, node("free", 3)]);
        snap.nodewrights.push(earlier);
        let p = preview(&snap).expect("preview");
        assert!(p.paused);
        assert_eq!(p.nodes[0].blockers[0], Blocker::Ignored);
        assert_eq!(
            p.nodes[1].blockers[0],
            Blocker::Taints {
                taints: vec!["gpu:NoSchedule".into()]
            }
        );
        let free = &p.nodes[2];
        assert_eq!(free.status, Status::Paused);
        assert!(free.blockers.contains(&Blocker::Paused));
        assert!(free.blockers.contains(&Blocker::Priority {
            nodewright: "earlier".into(),
            sequencing: Sequencing::Node
        }));
        // Blocked and held-back nodes never start.
        assert!(p.nodes.iter().all(|n| n.batch.is_none() && !n.completes));
    }

    #[test]
    fn a_running_stage_goes_first_and_a_timed_out_one_stays_timed_out() {
        let nw = nodewright(
            "nw",
            &[("a", package(&[], None)), ("b", package(&["a"], None))],
        );
        let record = |name: &str, stage, state| PackageStatus {
            name: name.into(),
            version: "1.0.0".into(),
            image: "img".into(),
            container_sha: String::new(),
            stage,
            state: Some(state),
            restarts: 0,
        };
        let with = |mut n: Node, records: &[PackageStatus]| {
            let mut s = NodeState::default();
            for r in records {
                s.upsert(r.clone());
            }
            n.metadata.annotations = Some(BTreeMap::from([(
                keys::node_state_key("nw"),
                s.to_annotation(),
            )]));
            n
        };
        let job = |name: String, node: &str, condition: Option<&str>, rec: Option<Recorded>| {
            let mut labels = BTreeMap::from([(keys::NAME_LABEL.to_owned(), "nw".to_owned())]);
            labels.insert(keys::NODE_LABEL.to_owned(), node.to_owned());
            Job {
                metadata: ObjectMeta {
                    name: Some(name),
                    labels: Some(labels),
                    annotations: rec.map(|r| {
                        BTreeMap::from([(
                            keys::STATE_RECORDED_ANNOTATION.to_owned(),
                            r.as_str().to_owned(),
                        )])
                    }),
                    ..ObjectMeta::default()
                },
                spec: Some(JobSpec {
                    template: PodTemplateSpec {
                        metadata: None,
                        spec: Some(PodSpec {
                            node_name: Some(node.into()),
                            ..PodSpec::default()
                        }),
                    },
                    ..JobSpec::default()
                }),
                status: condition.map(|c| JobStatus {
                    conditions: Some(vec![JobCondition {
                        type_: c.into(),
                        status: "True".into(),
                        ..JobCondition::default()
                    }]),
                    ..JobStatus::default()
                }),
            }
        };
        let running = with(
            node("running", 1),
            &[record("a", Stage::Apply, State::InProgress)],
        );
        let stuck = with(
            node("stuck", 2),
            &[record("a", Stage::Apply, State::Erroring)],
        );
        let mut snap = snapshot(nw, vec![running, stuck]);
        snap.jobs = vec![
            job(
                package_job_name("nw", "a", "1.0.0", Stage::Apply, "running"),
                "running",
                None,
                None,
            ),
            job(
                package_job_name("nw", "a", "1.0.0", Stage::Apply, "stuck"),
                "stuck",
                Some("Failed"),
                Some(Recorded::TimedOut),
            ),
        ];
        let p = preview(&snap).expect("preview");
        let running = &p.nodes[0];
        assert!(running.started && running.completes);
        assert!(running.steps[0].running && running.steps[0].stage == Stage::Apply);
        assert_eq!(running.steps.len(), 4);
        let stuck = &p.nodes[1];
        assert!(!stuck.completes);
        assert!(stuck.blockers.iter().any(|b| matches!(
            b,
            Blocker::TimedOut { package, stage: Stage::Apply, .. } if package == "a"
        )));
        assert!(stuck.blockers.contains(&Blocker::Dependency {
            package: "b".into(),
            waits_for: vec!["a|1.0.0".into()]
        }));
    }
}
