//! DeploymentPolicy compartments and strategies, downgrades, malformed node state and metric cleanup,
//! end to end on the local control plane (real kube-apiserver, etcd, the Job controller, kwok
//! simulating the nodes). Each test runs its own operator in-process, scoped by the label
//! `nodewright.test/policies` to its own NodeWright(s), with Jobs in its own namespace, on fake
//! nodes of its own (named after the namespace, labelled for the compartments). No validating
//! webhook runs here (only the CRD's CEL rules), so spec edits reach the operator as written.
//!
//! Orders are read from the objects' own timestamps (every Job version a watch delivered), never
//! from the wall clock; waits are bounded only so a broken build fails instead of hanging.
//!
//! (overlap) a node matching several compartments lands in the one the documented tie-break picks
//!     (upstream-api.md §5.2): the safer strategy (fixed before exponential) over the name, then the
//!     smaller ceiling over the name, then the name. `compartmentStatuses` shows the matched counts,
//!     and the two nodes of a ceiling-1 compartment roll one after the other.
//! (linear) a linear strategy (initialBatch 1, delta 1) rolls 6 nodes in batches of 1, 2 and 3: each
//!     batch starts after the previous one ended, its nodes are in flight together, and the batch
//!     state the NodeWright reported went through last sizes 1, 2, 3.
//! (ceilings) two compartments plus `__default__`, each with its own budget and strategy: at no time
//!     (from the Jobs' timestamps) are more nodes of a compartment in progress than its ceiling, also
//!     where the strategy asks for a bigger batch (DESIGN §5: the ceiling always caps); the
//!     no-strategy compartment does use its whole ceiling.
//! (reset) `resetBatchStateOnCompletion`: the NodeWright's `deploymentPolicyOptions` value wins over
//!     the policy's, both ways. With reset, the batch state is back at batch 1 after completion and
//!     a version bump rolls from batch 1 again (one node, then the next); without, the bump goes on
//!     from the last batch size (both nodes at once).
//! (downgrade-uninstalled) an uninstall-enabled package uninstalled with `uninstall.apply`, then set
//!     to a lower version, installs fresh (apply, config; no upgrade), without the old record.
//! (downgrade-kept) a package without uninstall set to a lower version installs by apply (no
//!     upgrade), and the node state keeps both versions' records (as upstream).
//! (malformed) garbage in a node's `nodeState_<nw>` annotation: the NodeWright reports
//!     NodeStateMalformed (ParseError, naming the node), the node is blocked and runs nothing while
//!     the other node completes, and the garbage is left as it was; deleting the annotation clears the
//!     condition and the rollout completes.
//! (window) a policy's maintenance window (22:00-04:00 Europe/Berlin), the operator's clock set to
//!     13:00 Berlin time: the NodeWright reports `waiting for window (opens
//!     2026-12-03T22:00+01:00)` with a WaitingForWindow Event, its nodes wait and no Job is created.
//!     The clock is then set to seconds before the opening: the operator wakes for it by itself and
//!     the rollout completes, every Job created after the opening (in the apiserver's time, the
//!     clock's offset taken off) and every node admitted at or after it (status.nodePriority).
//! (soak) a fixed strategy with `soak: 1h`: once batch 1's node completes, its batch soaks
//!     (`batchState.soakUntil` an hour after, `waiting for soak of batch 1 ...`, a BatchSoaking
//!     Event) and the second node does not start; with the operator's clock moved past the soak
//!     the batch is judged passed and the second node runs (its Jobs all created after the move).
//! (rollback) revision history and `rollbackOnFailure`: a NodeWright completes 1.0.0 (revision 1);
//!     2.0.0 completes on the first node (revision 2), then its config stage fails on the second:
//!     the failure threshold stops the rollout and the operator writes revision 1 back once (a
//!     RolledBack Warning Event naming both revisions, `status.rollback` RolledBack with the
//!     generation it wrote). After an operator restart nothing is written again; every node is
//!     back on 1.0.0 (the two upgraded ones by a fresh apply), and 1.0.0 is revision 3.
//! (rollback-refused) the same stop with admission refusing the write back (a
//!     ValidatingAdmissionPolicy standing in for the webhook's downgrade guard of a package with
//!     uninstall scripts): `status.rollback` Refused with the apiserver's message, a
//!     RollbackRefused Warning Event, the spec unchanged and the rollout still stopped.
//! (cap) the operator's cluster-wide disruption cap (`MAX_DISRUPTED_NODES=2`) over two
//!     NodeWrights whose own budgets allow 3 cordoned nodes each, each with a package whose
//!     interrupt cordons its 3 nodes: from a watch of every node version, never more than 2 of the 6
//!     nodes are cordoned by NodeWrights at once; a NodeWright the cap held says so in
//!     `status.waitingFor` with a WaitingForDisruptionCap Event; both complete, every cordon
//!     released.
//! (gates) a policy's health gates (validator pods Ready, then a node condition): each node waits
//!     cordoned and in progress after its packages finished, its batch open, until both pass, then
//!     is uncordoned and complete in one write; a gate past its timeout (the operator's clock moved)
//!     makes the node erroring with a GateFailed Event, still cordoned, and it completes when its
//!     gates pass later. Replaying every node version, no cordon was released in a version whose
//!     gate condition was not True.
//! (alert gate) a NodeWright's own no-firing-alert gate asked of a real Prometheus (the project's
//!     build) that scrapes the test's target: the node with a series waits (its record names the
//!     series), the other completes; once the series clears, the node completes.
//! (metrics) a NodeWright's `nodewright_*` series are on `/metrics` during its rollout (held on a
//!     hanging pod) and after it; once it is deleted (its finalizer let it go) none is left, while
//!     another NodeWright's series stay.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use nodewright_e2e::{Cluster, PodFate};
use nodewright_operator::JobHook;
use nodewright_operator::metrics::Metrics;
use nodewright_operator::metrics::nodewright_gauges::StateMetrics;
use nodewright_operator::runtime::admin::{Readiness, bind, router, serve};
use nodewright_shared::api::{
    BatchState, DEFAULT_COMPARTMENT, DeploymentPolicy, DeploymentPolicyOptions, NodeWright,
    NodeWrightSpec, Package, Status, Uninstall,
};
use nodewright_shared::keys;
use nodewright_shared::node_state::{Stage, State};
use serde_json::json;
use tokio_util::sync::CancellationToken;

mod support;
use support::Watched;
use support::admin_http::{scrape, series_value};
use support::create_scoped_nodewright;
use support::{
    BOUND, Operator, SuiteOperator, assert_malformed, assert_ready_and_well_formed, condition,
    create_nodes, node_state, on_nodes, package, patch_node, record, scenario, spec_on, status_is,
    wait_nodewright, wait_nodewright_gone, wait_status,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Label that scopes each test's operator to its own NodeWrights (value: the test's namespace).
const SUITE_LABEL: &str = "nodewright.test/policies";

/// Node labels the compartments select on (only the test's own NodeWright nodes count).
const GPU: &str = "policies.test/gpu";
const ZONE: &str = "policies.test/zone";
const RACK: &str = "policies.test/rack";
const ROW: &str = "policies.test/row";

fn start_operator(
    client: kube::Client,
    namespace: &str,
    hook: Option<JobHook>,
    metrics: Option<StateMetrics>,
) -> Operator {
    SuiteOperator::new(&client, namespace, SUITE_LABEL, namespace)
        .hook(hook)
        .metrics(metrics)
        .start()
}

/// A hook under which every pod succeeds after `delay`: a node's stages then take long enough that
/// nodes admitted together are visibly in flight together in the Jobs' timestamps.
fn every_pod_succeeds_after(delay: &'static str) -> JobHook {
    Arc::new(move |job: &mut Job| {
        if let Some(spec) = job.spec.as_mut() {
            PodFate::succeed()
                .delay(delay)
                .apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    })
}

/// Creates the NodeWright `name` for the operator of the test of namespace `ns`.
async fn create_nodewright(client: &kube::Client, ns: &str, name: &str, spec: NodeWrightSpec) {
    create_scoped_nodewright(client, SUITE_LABEL, ns, NodeWright::new(name, spec)).await;
}

/// Creates the DeploymentPolicy `name` with `spec` (JSON, as a user writes it).
async fn create_policy(client: &kube::Client, name: &str, spec: serde_json::Value) {
    let policy: DeploymentPolicy = serde_json::from_value(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": name},
        "spec": spec
    }))
    .expect("policy");
    Api::<DeploymentPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("DeploymentPolicy created");
}

async fn delete_nodes(client: &kube::Client, names: &[String]) {
    let nodes: Api<Node> = Api::all(client.clone());
    for name in names {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
}

/// Merge-patches the NodeWright `name`; returns the generation of the patched spec.
async fn patch_spec(client: &kube::Client, name: &str, patch: serde_json::Value) -> i64 {
    Api::<NodeWright>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("NodeWright patched")
        .metadata
        .generation
        .expect("generation")
}

/// Waits until the NodeWright is complete on the spec of `generation` (or a later one).
async fn wait_complete_at(
    cluster: &Cluster,
    client: &kube::Client,
    name: &str,
    generation: i64,
) -> NodeWright {
    wait_nodewright(
        cluster,
        client,
        name,
        &format!("complete at generation {generation}"),
        |nw| {
            status_is(nw, Status::Complete)
                && nw
                    .status
                    .as_ref()
                    .and_then(|s| s.observed_generation)
                    .is_some_and(|g| g >= generation)
        },
    )
    .await
}

fn watch_jobs(client: &kube::Client, ns: &str) -> Watched<Job> {
    Watched::start(
        Api::namespaced(client.clone(), ns),
        watcher::Config::default(),
    )
}

fn node_of(job: &Job) -> Option<&str> {
    job.labels().get(keys::NODE_LABEL).map(String::as_str)
}

fn created(job: &Job) -> Option<Timestamp> {
    job.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

fn completed(job: &Job) -> Option<Timestamp> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Complete" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref().map(|t| t.0))
}

/// Waits until the watch has seen `count` Jobs matching `wanted`, every one of them complete; returns
/// them (their last versions).
async fn wait_jobs_complete(
    cluster: &Cluster,
    jobs: &Watched<Job>,
    what: &str,
    count: usize,
    wanted: impl Fn(&Job) -> bool,
) -> Vec<Job> {
    let wanted = &wanted;
    cluster
        .wait_for(what, BOUND, || async move {
            let matching: Vec<Job> = jobs.latest().into_iter().filter(|j| wanted(j)).collect();
            Ok(
                (matching.len() >= count && matching.iter().all(|j| completed(j).is_some()))
                    .then_some(matching),
            )
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// When the node was in progress: from its first Job's creation to its last Job's completion (all of
/// its Jobs among `jobs` are complete).
fn span(jobs: &[Job], node: &str) -> (Timestamp, Timestamp) {
    let on: Vec<&Job> = jobs.iter().filter(|j| node_of(j) == Some(node)).collect();
    let start = on
        .iter()
        .filter_map(|j| created(j))
        .min()
        .unwrap_or_else(|| panic!("no Job on {node}"));
    let end = on
        .iter()
        .map(|j| completed(j).unwrap_or_else(|| panic!("{} not complete", j.name_any())))
        .max()
        .unwrap_or_else(|| panic!("no Job on {node}"));
    (start, end)
}

/// Asserts that `batches` (groups of nodes) ran in this order as batches: each batch's first Job
/// was created only after the previous batch's last Job completed, and the nodes of one batch were in
/// flight together (each started before any of them had finished).
fn assert_batches(jobs: &[Job], batches: &[&[String]]) {
    let spans: Vec<Vec<(Timestamp, Timestamp)>> = batches
        .iter()
        .map(|b| b.iter().map(|n| span(jobs, n)).collect())
        .collect();
    for (i, batch) in spans.iter().enumerate() {
        let last_start = batch.iter().map(|s| s.0).max().expect("a node");
        let first_end = batch.iter().map(|s| s.1).min().expect("a node");
        if batch.len() > 1 {
            assert!(
                last_start < first_end,
                "the nodes of batch {:?} were not in flight together: {batch:?}",
                batches[i]
            );
        }
        if i > 0 {
            let previous_end = spans[i - 1].iter().map(|s| s.1).max().expect("a node");
            let first_start = batch.iter().map(|s| s.0).min().expect("a node");
            assert!(
                first_start >= previous_end,
                "batch {:?} started at {first_start} before batch {:?} finished at {previous_end}",
                batches[i],
                batches[i - 1]
            );
        }
    }
}

/// The most of `nodes` ever in progress at once, from their spans. The spans are half-open: a node
/// admitted once another completed starts no earlier than that completion, also at the timestamps'
/// one-second resolution (rounding down keeps the order), so it never counts as overlapping it.
fn peak_in_progress(jobs: &[Job], nodes: &[String]) -> usize {
    let spans: Vec<(Timestamp, Timestamp)> = nodes.iter().map(|n| span(jobs, n)).collect();
    spans
        .iter()
        .map(|(at, _)| {
            spans
                .iter()
                .filter(|(start, end)| start <= at && at < end)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The batch state of `compartment` in the NodeWright's status.
fn batch_state(nw: &NodeWright, compartment: &str) -> BatchState {
    nw.status
        .as_ref()
        .and_then(|s| s.compartment_statuses.get(compartment))
        .and_then(|c| c.batch_state.clone())
        .unwrap_or_else(|| panic!("no batch state for {compartment}: {:?}", nw.status))
}

/// (currentBatch, lastBatchSize, completedNodes, failedNodes, shouldStop).
fn batch_summary(b: &BatchState) -> (i32, i32, i32, i32, bool) {
    (
        b.current_batch,
        b.last_batch_size,
        b.completed_nodes,
        b.failed_nodes,
        b.should_stop,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_compartments_follow_the_documented_tie_break() {
    let (cluster, client, ns) = scenario("overlap").await;
    // n0: alpha (exponential) and bravo (fixed) ⇒ bravo: the safer strategy wins over the name.
    // n1: alpha only.
    // n2: bravo (fixed, ceiling 2) and charlie (fixed, ceiling 1) ⇒ charlie: the smaller ceiling
    //     wins over the name.
    // n3: charlie and delta (both fixed, ceiling 1) ⇒ charlie: the name.
    // n4: nothing ⇒ __default__.
    let names = create_nodes(
        &client,
        &ns,
        &[
            ("n0", &[(GPU, "yes"), (ZONE, "east")]),
            ("n1", &[(GPU, "yes")]),
            ("n2", &[(ZONE, "east"), (RACK, "r1")]),
            ("n3", &[(RACK, "r1"), (ROW, "x")]),
            ("n4", &[]),
        ],
    )
    .await;
    let fixed = json!({"fixed": {"initialBatch": 1}});
    create_policy(
        &client,
        &ns,
        json!({
            "default": {"budget": {"count": 1}, "strategy": fixed},
            "compartments": [
                {"name": "alpha", "selector": {"matchLabels": {GPU: "yes"}},
                 "budget": {"count": 2}, "strategy": {"exponential": {"initialBatch": 1}}},
                {"name": "bravo", "selector": {"matchLabels": {ZONE: "east"}},
                 "budget": {"count": 2}, "strategy": fixed},
                {"name": "charlie", "selector": {"matchLabels": {RACK: "r1"}},
                 "budget": {"count": 1}, "strategy": fixed},
                {"name": "delta", "selector": {"matchLabels": {ROW: "x"}},
                 "budget": {"count": 1}, "strategy": fixed}
            ]
        }),
    )
    .await;
    let jobs = watch_jobs(&client, &ns);
    let _operator = start_operator(client.clone(), &ns, None, None);
    create_nodewright(
        &client,
        &ns,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&names),
            deployment_policy: Some(ns.clone()),
            packages: BTreeMap::from([("pkg".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    let status = nw.status.clone().expect("status");
    assert_eq!(status.complete_nodes, "5/5");
    let matched: BTreeMap<&str, (i32, i32, i32)> = status
        .compartment_statuses
        .iter()
        .map(|(name, c)| (name.as_str(), (c.matched, c.ceiling, c.completed)))
        .collect();
    // The counts pin every node: alpha 1 ⇒ n0 is not alpha's; bravo 1 ⇒ n2 is not bravo's;
    // charlie 2 ⇒ n3 is charlie's.
    assert_eq!(
        matched,
        BTreeMap::from([
            ("alpha", (1, 2, 1)),
            ("bravo", (1, 2, 1)),
            ("charlie", (2, 1, 2)),
            ("delta", (0, 1, 0)),
            (DEFAULT_COMPARTMENT, (1, 1, 1)),
        ]),
        "(matched, ceiling, completed) per compartment"
    );
    // charlie (ceiling 1) rolled n2, then n3.
    let done = wait_jobs_complete(cluster, &jobs, "every Job complete", 10, |_| true).await;
    assert_batches(&done, &[&names[2..3], &names[3..4]]);
    delete_nodes(&client, &names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linear_strategy_grows_each_batch_by_delta() {
    let (cluster, client, ns) = scenario("linear").await;
    let names = create_nodes(
        &client,
        &ns,
        &[
            ("n0", &[]),
            ("n1", &[]),
            ("n2", &[]),
            ("n3", &[]),
            ("n4", &[]),
            ("n5", &[]),
        ],
    )
    .await;
    create_policy(
        &client,
        &ns,
        json!({"default": {
            "budget": {"percent": 100},
            "strategy": {"linear": {"initialBatch": 1, "delta": 1}}
        }}),
    )
    .await;
    let jobs = watch_jobs(&client, &ns);
    let history = Watched::start(
        Api::<NodeWright>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={ns}")),
    );
    let _operator = start_operator(
        client.clone(),
        &ns,
        Some(every_pod_succeeds_after("2s")),
        None,
    );
    create_nodewright(
        &client,
        &ns,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&names),
            deployment_policy: Some(ns.clone()),
            // Keep the final batch state readable (a reset would put it back to batch 1).
            deployment_policy_options: Some(DeploymentPolicyOptions {
                reset_batch_state_on_completion: Some(false),
            }),
            packages: BTreeMap::from([("pkg".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    assert_eq!(
        batch_summary(&batch_state(&nw, DEFAULT_COMPARTMENT)),
        (4, 3, 6, 0, false),
        "three batches evaluated, the last of 3 nodes"
    );
    // Every batch the NodeWright reported as evaluated, in order: sizes 1, 2, 3.
    let mut evaluated: Vec<(i32, i32)> = Vec::new();
    for version in history.all() {
        if let Some(b) = version
            .status
            .as_ref()
            .and_then(|s| s.compartment_statuses.get(DEFAULT_COMPARTMENT))
            .and_then(|c| c.batch_state.as_ref())
            .filter(|b| b.last_batch_size > 0)
            && evaluated.last() != Some(&(b.current_batch, b.last_batch_size))
        {
            evaluated.push((b.current_batch, b.last_batch_size));
        }
    }
    assert_eq!(
        evaluated,
        [(2, 1), (3, 2), (4, 3)],
        "(currentBatch, lastBatchSize)"
    );
    // Nodes are taken in creation order: [n0], [n1, n2], [n3, n4, n5].
    let done = wait_jobs_complete(cluster, &jobs, "every Job complete", 12, |_| true).await;
    assert_batches(&done, &[&names[0..1], &names[1..3], &names[3..6]]);
    delete_nodes(&client, &names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_compartment_keeps_its_nodes_in_progress_within_its_ceiling() {
    let (cluster, client, ns) = scenario("ceilings").await;
    let east: &[(&str, &str)] = &[(ZONE, "east")];
    let west: &[(&str, &str)] = &[(ZONE, "west")];
    let names = create_nodes(
        &client,
        &ns,
        &[
            ("e0", east),
            ("e1", east),
            ("e2", east),
            ("w0", west),
            ("w1", west),
            ("w2", west),
            ("d0", &[]),
            ("d1", &[]),
        ],
    )
    .await;
    let (east_nodes, west_nodes, default_nodes) = (
        names[0..3].to_vec(),
        names[3..6].to_vec(),
        names[6..8].to_vec(),
    );
    create_policy(
        &client,
        &ns,
        json!({
            // The default strategy asks for batches of 2; its ceiling is 1.
            "default": {"budget": {"count": 1},
                        "strategy": {"exponential": {"initialBatch": 2}}},
            "compartments": [
                // Asks for one batch of 3; the ceiling is 1.
                {"name": "east", "selector": {"matchLabels": {ZONE: "east"}},
                 "budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 3}}},
                // No strategy: as many as the ceiling, trunc(3 × 67%) = 2.
                {"name": "west", "selector": {"matchLabels": {ZONE: "west"}},
                 "budget": {"percent": 67}}
            ]
        }),
    )
    .await;
    let jobs = watch_jobs(&client, &ns);
    let _operator = start_operator(
        client.clone(),
        &ns,
        Some(every_pod_succeeds_after("2s")),
        None,
    );
    create_nodewright(
        &client,
        &ns,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&names),
            deployment_policy: Some(ns.clone()),
            deployment_policy_options: Some(DeploymentPolicyOptions {
                reset_batch_state_on_completion: Some(false),
            }),
            packages: BTreeMap::from([("pkg".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    let status = nw.status.clone().expect("status");
    let shape: BTreeMap<&str, (i32, i32, i32)> = status
        .compartment_statuses
        .iter()
        .map(|(name, c)| (name.as_str(), (c.matched, c.ceiling, c.completed)))
        .collect();
    assert_eq!(
        shape,
        BTreeMap::from([
            ("east", (3, 1, 3)),
            ("west", (3, 2, 3)),
            (DEFAULT_COMPARTMENT, (2, 1, 2)),
        ]),
        "(matched, ceiling, completed) per compartment"
    );
    // The ceiling cut the strategies' batches: east rolled 3 batches of 1 (not one of 3), the
    // default 2 batches of 1 (not one of 2); west has no strategy and no batch state.
    assert_eq!(
        batch_summary(&batch_state(&nw, "east")),
        (4, 1, 3, 0, false)
    );
    assert_eq!(
        batch_summary(&batch_state(&nw, DEFAULT_COMPARTMENT)),
        (3, 1, 2, 0, false)
    );
    assert_eq!(
        status
            .compartment_statuses
            .get("west")
            .and_then(|c| c.batch_state.clone()),
        None
    );

    let done = wait_jobs_complete(cluster, &jobs, "every Job complete", 16, |_| true).await;
    assert_eq!(peak_in_progress(&done, &east_nodes), 1, "east, ceiling 1");
    assert_eq!(
        peak_in_progress(&done, &default_nodes),
        1,
        "__default__, ceiling 1"
    );
    // Within its ceiling, and using it: the two nodes it admitted together were in flight together.
    assert_eq!(peak_in_progress(&done, &west_nodes), 2, "west, ceiling 2");
    delete_nodes(&client, &names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_batch_state_on_completion_the_nodewright_option_wins_over_the_policy() {
    let (cluster, client, ns) = scenario("reset").await;
    let linear = json!({"linear": {"initialBatch": 1, "delta": 1}});
    let (resetting, keeping) = (format!("{ns}-on"), format!("{ns}-off"));
    create_policy(
        &client,
        &resetting,
        json!({"default": {"budget": {"percent": 100}, "strategy": linear},
               "resetBatchStateOnCompletion": true}),
    )
    .await;
    create_policy(
        &client,
        &keeping,
        json!({"default": {"budget": {"percent": 100}, "strategy": linear},
               "resetBatchStateOnCompletion": false}),
    )
    .await;
    // (NodeWright, policy, deploymentPolicyOptions, whether its batch state resets)
    let cases = [
        (format!("{ns}-a"), &resetting, None, true),
        (format!("{ns}-b"), &resetting, Some(false), false),
        (format!("{ns}-c"), &keeping, Some(true), true),
        (format!("{ns}-d"), &keeping, None, false),
    ];
    let jobs = watch_jobs(&client, &ns);
    let _operator = start_operator(
        client.clone(),
        &ns,
        Some(every_pod_succeeds_after("2s")),
        None,
    );
    let mut all_nodes = Vec::new();
    let mut nodes_of = BTreeMap::new();
    for (name, policy, option, _) in &cases {
        let nodes = create_nodes(&client, name, &[("n0", &[]), ("n1", &[])]).await;
        create_nodewright(
            &client,
            &ns,
            name,
            NodeWrightSpec {
                node_selectors: on_nodes(&nodes),
                deployment_policy: Some((*policy).clone()),
                deployment_policy_options: option.map(|reset| DeploymentPolicyOptions {
                    reset_batch_state_on_completion: Some(reset),
                }),
                packages: BTreeMap::from([("tool".to_owned(), package("1.0.0", &[]))]),
                ..NodeWrightSpec::default()
            },
        )
        .await;
        all_nodes.extend(nodes.iter().cloned());
        nodes_of.insert(name.clone(), nodes);
    }

    // First rollout: batches [n0], [n1] everywhere. Then the batch state is back at batch 1 (the
    // checkpoint at the 2 complete nodes) where reset applies, and left at batch 3 elsewhere.
    for (name, _, _, resets) in &cases {
        let nw = wait_status(cluster, &client, name, Status::Complete).await;
        let want = if *resets {
            (1, 0, 2, 0, false)
        } else {
            (3, 1, 2, 0, false)
        };
        assert_eq!(
            batch_summary(&batch_state(&nw, DEFAULT_COMPARTMENT)),
            want,
            "{name} after its first rollout"
        );
    }

    // A version bump: with reset, it rolls from batch 1 again (n0, then n1); without, it goes on
    // from the last batch size (1 + delta = 2: both nodes at once).
    let mut generations = BTreeMap::new();
    for (name, _, _, _) in &cases {
        let generation = patch_spec(
            &client,
            name,
            json!({"spec": {"packages": {"tool": {"version": "2.0.0"}}}}),
        )
        .await;
        generations.insert(name.clone(), generation);
    }
    for (name, _, _, resets) in &cases {
        let nw = wait_complete_at(cluster, &client, name, generations[name]).await;
        let nodes = &nodes_of[name];
        let label = name.clone();
        let upgraded = wait_jobs_complete(
            cluster,
            &jobs,
            &format!("the upgrade Jobs of {name}"),
            4,
            |j| {
                j.labels().get(keys::NAME_LABEL) == Some(&label)
                    && j.labels().get(keys::PACKAGE_LABEL).map(String::as_str) == Some("tool-2.0.0")
            },
        )
        .await;
        let state = batch_summary(&batch_state(&nw, DEFAULT_COMPARTMENT));
        if *resets {
            assert_batches(&upgraded, &[&nodes[0..1], &nodes[1..2]]);
            assert_eq!(state, (1, 0, 2, 0, false), "{name}: reset again");
        } else {
            assert_batches(&upgraded, &[&nodes[0..2]]);
            assert_eq!(state, (4, 2, 2, 0, false), "{name}: one more batch, of 2");
        }
    }
    delete_nodes(&client, &all_nodes).await;
}

fn uninstallable(version: &str, apply: bool) -> Package {
    Package {
        uninstall: Some(Uninstall {
            enabled: true,
            apply,
        }),
        ..package(version, &[])
    }
}

/// The stages of the Jobs created for `tool-<version>`.
fn stages_of(jobs: &Watched<Job>, version: &str) -> BTreeSet<String> {
    let label = format!("tool-{version}");
    jobs.latest()
        .iter()
        .filter(|j| j.labels().get(keys::PACKAGE_LABEL) == Some(&label))
        .filter_map(|j| j.labels().get(keys::STAGE_LABEL).cloned())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_after_uninstall_installs_fresh() {
    let (cluster, client, ns) = scenario("downgrade-fresh").await;
    let names = create_nodes(&client, &ns, &[("n0", &[])]).await;
    let node = names[0].clone();
    let jobs = watch_jobs(&client, &ns);
    let _operator = start_operator(client.clone(), &ns, None, None);
    create_nodewright(
        &client,
        &ns,
        &ns,
        spec_on(&[&node], [("tool", uninstallable("2.0.0", false))]),
    )
    .await;
    wait_status(cluster, &client, &ns, Status::Complete).await;

    let generation = patch_spec(
        &client,
        &ns,
        json!({"spec": {"packages": {"tool": {"uninstall": {"enabled": true, "apply": true}}}}}),
    )
    .await;
    wait_complete_at(cluster, &client, &ns, generation).await;
    let state = node_state(&client, &node, &ns).await.expect("node state");
    assert!(
        state.get("tool", "2.0.0").is_none(),
        "uninstalled: {state:?}"
    );
    assert_eq!(
        stages_of(&jobs, "2.0.0"),
        set(&["apply", "config", "uninstall"])
    );

    // A lower version, the uninstall no longer requested: a fresh install.
    let generation = patch_spec(
        &client,
        &ns,
        json!({"spec": {"packages": {"tool": {
            "version": "1.0.0",
            "uninstall": {"enabled": true, "apply": false}
        }}}}),
    )
    .await;
    let nw = wait_complete_at(cluster, &client, &ns, generation).await;
    assert_eq!(
        nw.status.map(|s| s.package_list),
        Some("tool:1.0.0".to_owned())
    );
    let state = node_state(&client, &node, &ns).await.expect("node state");
    let r = state
        .get("tool", "1.0.0")
        .expect("the lower version's record");
    assert_eq!((r.stage, r.state), (Stage::Config, Some(State::Complete)));
    assert!(state.get("tool", "2.0.0").is_none(), "{state:?}");
    assert_eq!(
        stages_of(&jobs, "1.0.0"),
        set(&["apply", "config"]),
        "apply then config, no upgrade"
    );
    delete_nodes(&client, &names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_without_uninstall_applies_and_keeps_both_records() {
    let (cluster, client, ns) = scenario("downgrade-kept").await;
    let names = create_nodes(&client, &ns, &[("n0", &[])]).await;
    let node = names[0].clone();
    let jobs = watch_jobs(&client, &ns);
    let _operator = start_operator(client.clone(), &ns, None, None);
    let tool = Package {
        uninstall: Some(Uninstall {
            enabled: false,
            apply: false,
        }),
        ..package("2.0.0", &[])
    };
    create_nodewright(&client, &ns, &ns, spec_on(&[&node], [("tool", tool)])).await;
    wait_status(cluster, &client, &ns, Status::Complete).await;

    let generation = patch_spec(
        &client,
        &ns,
        json!({"spec": {"packages": {"tool": {"version": "1.0.0"}}}}),
    )
    .await;
    let nw = wait_complete_at(cluster, &client, &ns, generation).await;
    assert_eq!(
        nw.status.map(|s| s.package_list),
        Some("tool:1.0.0".to_owned())
    );
    let state = node_state(&client, &node, &ns).await.expect("node state");
    let lower = state
        .get("tool", "1.0.0")
        .expect("the lower version's record");
    assert_eq!(
        (lower.stage, lower.state),
        (Stage::Config, Some(State::Complete))
    );
    let higher = state.get("tool", "2.0.0").expect("the old record stays");
    assert_eq!(
        (higher.stage, higher.state),
        (Stage::Config, Some(State::Complete))
    );
    assert_eq!(
        stages_of(&jobs, "1.0.0"),
        set(&["apply", "config"]),
        "apply then config, no upgrade"
    );
    assert_eq!(stages_of(&jobs, "2.0.0"), set(&["apply", "config"]));
    delete_nodes(&client, &names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_node_state_is_reported_blocks_the_node_and_clears_on_repair() {
    let (cluster, client, ns) = scenario("malformed").await;
    let names = create_nodes(&client, &ns, &[("good", &[]), ("bad", &[])]).await;
    let (good, bad) = (names[0].clone(), names[1].clone());
    let key = keys::node_state_key(&ns);
    let garbage = "{not json";
    patch_node(
        &client,
        &bad,
        json!({"metadata": {"annotations": {key.clone(): garbage}}}),
    )
    .await;
    let _operator = start_operator(client.clone(), &ns, None, None);
    create_nodewright(
        &client,
        &ns,
        &ns,
        spec_on(&[&good, &bad], [("pkg", package("1.0.0", &[]))]),
    )
    .await;
    let nw = wait_nodewright(
        cluster,
        &client,
        &ns,
        "NodeStateMalformed, the good node complete",
        |nw| {
            condition(nw, "NodeStateMalformed").is_some_and(|c| c.status == "True")
                && nw
                    .status
                    .as_ref()
                    .is_some_and(|s| s.node_status.get(&good) == Some(&Status::Complete))
        },
    )
    .await;
    assert_malformed(&nw, &good, |m| m.contains(&bad));
    let status = nw.status.clone().expect("status");
    assert_eq!(status.node_status.get(&bad), Some(&Status::Blocked));
    assert_ne!(status.status, Some(Status::Complete));
    assert!(condition(&nw, "Ready").is_some_and(|c| c.status == "False"));
    let on_bad = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{}={bad}", keys::NODE_LABEL)))
        .await
        .expect("jobs")
        .items;
    assert!(on_bad.is_empty(), "nothing runs on the malformed node");
    let annotation = Api::<Node>::all(client.clone())
        .get(&bad)
        .await
        .expect("node")
        .annotations()
        .get(&key)
        .cloned();
    assert_eq!(
        annotation.as_deref(),
        Some(garbage),
        "the operator left it alone"
    );

    // Repaired (deleted): the condition goes and the node is rolled.
    patch_node(
        &client,
        &bad,
        json!({"metadata": {"annotations": {key.clone(): null}}}),
    )
    .await;
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    assert_ready_and_well_formed(&nw);
    let r = record(&client, &bad, &ns, "pkg", "1.0.0").await;
    assert_eq!((r.stage, r.state), (Stage::Config, Some(State::Complete)));
    delete_nodes(&client, &names).await;
}

/// The `nodewright_*` sample lines of the NodeWright `name`.
fn series_of<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let label = format!("nodewright_name=\"{name}\"");
    text.lines()
        .filter(|l| l.starts_with("nodewright_") && l.contains(&label))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_nodewrights_metric_series_are_removed() {
    let (cluster, client, ns) = scenario("metrics").await;
    let names = create_nodes(&client, &ns, &[("kept", &[]), ("gone", &[])]).await;
    let (kept, gone) = (format!("{ns}-kept"), format!("{ns}-gone"));

    let metrics = Metrics::new();
    let state_metrics = metrics.state();
    let listeners = bind(&["127.0.0.1:0".parse().expect("address")])
        .await
        .expect("bind");
    let addr = listeners[0].local_addr().expect("address");
    let admin_stop = CancellationToken::new();
    let admin = tokio::spawn(serve(
        listeners,
        router(Arc::new(metrics), Readiness::default()),
        admin_stop.clone(),
    ));
    // The apply of `held` hangs until the test lets it succeed: the rollout is certainly in
    // progress while the test looks at it.
    let hook: JobHook = Arc::new(|job: &mut Job| {
        if job
            .labels()
            .get(keys::PACKAGE_LABEL)
            .is_some_and(|p| p == "held-1.0.0")
            && job.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some("apply")
            && let Some(spec) = job.spec.as_mut()
        {
            PodFate::hang().apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    });
    let _operator = start_operator(client.clone(), &ns, Some(hook), Some(state_metrics));
    let mut held = package("1.0.0", &[]);
    held.stage_timeout = Some("0".into());
    for (name, node) in [(&kept, &names[0]), (&gone, &names[1])] {
        create_nodewright(
            &client,
            &ns,
            name,
            spec_on(&[node], [("held", held.clone())]),
        )
        .await;
    }

    // During the rollout: the series say so.
    let in_progress =
        format!("nodewright_status{{nodewright_name=\"{gone}\",status=\"in_progress\"}}");
    let text = cluster
        .wait_for("the rollout in progress on /metrics", BOUND, || {
            let in_progress = in_progress.clone();
            async move {
                let text = scrape(addr).await;
                Ok((series_value(&text, &in_progress) == Some(1.0)).then_some(text))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        series_value(
            &text,
            &format!(
                "nodewright_package_state_count{{nodewright_name=\"{gone}\",package_name=\"held\",package_version=\"1.0.0\",state=\"in_progress\"}}"
            )
        ),
        Some(1.0),
        "{text}"
    );

    // Let the held applies finish.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let released = cluster
        .wait_for("both held pods released", BOUND, || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(&ListParams::default().labels(&format!("{}=apply", keys::STAGE_LABEL)))
                    .await
                    .map_err(|e| cluster.kube_error("pods".into(), e))?
                    .items;
                let running =
                    |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                // Both held (not already done): the in-progress series above came from a rollout
                // that could not have finished.
                if list.len() < 2 || !list.iter().all(running) {
                    return Ok(None);
                }
                for pod in &list {
                    let mut meta =
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta::default();
                    PodFate::succeed().apply(&mut meta);
                    pods.patch(
                        &pod.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {
                            "labels": meta.labels,
                            "annotations": meta.annotations
                        }})),
                    )
                    .await
                    .map_err(|e| cluster.kube_error("pod fate".into(), e))?;
                }
                Ok(Some(list.len()))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(released, 2);
    wait_status(cluster, &client, &kept, Status::Complete).await;
    wait_status(cluster, &client, &gone, Status::Complete).await;
    let text = scrape(addr).await;
    for name in [&kept, &gone] {
        assert_eq!(
            series_value(
                &text,
                &format!("nodewright_status{{nodewright_name=\"{name}\",status=\"complete\"}}")
            ),
            Some(1.0),
            "{text}"
        );
    }

    // Deleted (no uninstall to wait for): once the object is gone, so are its series.
    Api::<NodeWright>::all(client.clone())
        .delete(&gone, &DeleteParams::default())
        .await
        .expect("NodeWright deleted");
    wait_nodewright_gone(cluster, &client, &gone).await;
    let text = scrape(addr).await;
    assert_eq!(series_of(&text, &gone), Vec::<&str>::new(), "{text}");
    assert_eq!(
        series_value(
            &text,
            &format!("nodewright_status{{nodewright_name=\"{kept}\",status=\"complete\"}}")
        ),
        Some(1.0),
        "the other NodeWright's series stay: {text}"
    );
    assert!(!series_of(&text, &kept).is_empty());
    admin_stop.cancel();
    let _ = admin.await;
    delete_nodes(&client, &names).await;
}

/// Creates the NodeWright `ns`: package `tool` 1.0.0 on `names`, under the DeploymentPolicy `ns`.
async fn create_tool_nodewright(client: &kube::Client, ns: &str, names: &[String]) {
    create_nodewright(
        client,
        ns,
        ns,
        NodeWrightSpec {
            node_selectors: on_nodes(names),
            deployment_policy: Some(ns.to_owned()),
            packages: BTreeMap::from([("tool".to_owned(), package("1.0.0", &[]))]),
            ..Default::default()
        },
    )
    .await;
}

/// Starts the test's operator on a clock `offset` seconds ahead of the system's, and the NodeWright
/// `ns` (package `tool` on `names`, under the DeploymentPolicy `ns`).
async fn start_clocked(
    client: &kube::Client,
    ns: &str,
    names: &[String],
    offset: Arc<std::sync::atomic::AtomicI64>,
) -> Operator {
    let operator = SuiteOperator::new(client, ns, SUITE_LABEL, ns)
        .clock(offset_clock(offset))
        .start();
    create_tool_nodewright(client, ns, names).await;
    operator
}

/// A clock `offset` seconds ahead of the system clock, changed by the test as it goes.
fn offset_clock(offset: Arc<std::sync::atomic::AtomicI64>) -> nodewright_operator::Clock {
    Arc::new(move || {
        let seconds = offset.load(std::sync::atomic::Ordering::SeqCst);
        Timestamp::now()
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
            .expect("a representable time")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_wide_disruption_cap_bounds_every_nodewrights_cordons() {
    use nodewright_core::rollout::disruption::WAITING;
    use nodewright_shared::api::{InterruptType, InterruptionBudget};
    let (cluster, client, ns) = scenario("cap").await;
    let names = create_nodes(
        &client,
        &ns,
        &[
            ("a0", &[]),
            ("a1", &[]),
            ("a2", &[]),
            ("b0", &[]),
            ("b1", &[]),
            ("b2", &[]),
        ],
    )
    .await;
    // Every version of every node, and of the test's NodeWrights, from before anything starts.
    let node_versions =
        Watched::start(Api::<Node>::all(client.clone()), watcher::Config::default());
    let nw_versions = Watched::start(
        Api::<NodeWright>::all(client.clone()),
        watcher::Config::default().labels(&format!("{SUITE_LABEL}={ns}")),
    );
    let _operator = SuiteOperator::new(&client, &ns, SUITE_LABEL, &ns)
        .env(&[("MAX_DISRUPTED_NODES", "2")])
        .hook(Some(every_pod_succeeds_after("2s")))
        .start();
    let tuned = Package {
        interrupt: support::interrupt(InterruptType::Service, &["tuned"]),
        ..package("1.0.0", &[])
    };
    let nodewrights = [format!("{ns}-a"), format!("{ns}-b")];
    for (nw, nodes) in nodewrights.iter().zip(names.chunks(3)) {
        create_nodewright(
            &client,
            &ns,
            nw,
            NodeWrightSpec {
                node_selectors: on_nodes(nodes),
                // Each NodeWright alone may cordon all three of its nodes at once.
                interruption_budget: Some(InterruptionBudget {
                    count: Some(3),
                    percent: None,
                }),
                packages: BTreeMap::from([("tuned".to_owned(), tuned.clone())]),
                ..Default::default()
            },
        )
        .await;
    }
    for nw in &nodewrights {
        wait_complete_at(cluster, &client, nw, 1).await;
    }
    // A held NodeWright announces it (the Event goes out before the status write that says so).
    cluster
        .wait_for("a WaitingForDisruptionCap Event", BOUND, || {
            let client = client.clone();
            let nodewrights = nodewrights.clone();
            async move {
                for nw in &nodewrights {
                    if !support::events(&client, nw, "WaitingForDisruptionCap")
                        .await
                        .is_empty()
                    {
                        return Ok(Some(()));
                    }
                }
                Ok(None)
            }
        })
        .await
        .expect("the cap's Event");
    // The last version of every node: every cordon released.
    let ours: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    cluster
        .wait_for("every cordon released", BOUND, || {
            let latest = node_versions.latest();
            let ours = ours.clone();
            async move {
                let released = latest
                    .iter()
                    .filter(|n| ours.contains(n.name_any().as_str()))
                    .all(|n| {
                        nodewright_core::node::cordon::claimants(n).next().is_none()
                            && !nodewright_core::node::cordon::is_unschedulable(n)
                    });
                Ok(released.then_some(()))
            }
        })
        .await
        .expect("the nodes uncordoned");

    // One watch delivers the node versions in the order etcd wrote them: replaying them gives the
    // nodes cordoned by NodeWrights at every moment.
    let mut claimed: BTreeSet<String> = BTreeSet::new();
    let mut peak = 0;
    for node in node_versions.all() {
        let name = node.name_any();
        if !ours.contains(name.as_str()) {
            continue;
        }
        if nodewright_core::node::cordon::claimants(&node)
            .next()
            .is_some()
        {
            claimed.insert(name);
        } else {
            claimed.remove(&name);
        }
        peak = peak.max(claimed.len());
    }
    assert!(
        (1..=2).contains(&peak),
        "at most 2 nodes cordoned at once under the cap, saw {peak}"
    );
    let held: Vec<String> = nw_versions
        .all()
        .iter()
        .filter_map(|nw| nw.status.as_ref()?.waiting_for.clone())
        .filter(|w| w.contains(WAITING))
        .collect();
    assert!(
        held.iter()
            .any(|w| w.contains(&format!("{WAITING} (")) && w.contains(" of 2 nodes disrupted)")),
        "a NodeWright's status said the cap held it: {held:?}"
    );
    // Nothing waits any more.
    for nw in &nodewrights {
        let now = Api::<NodeWright>::all(client.clone())
            .get(nw)
            .await
            .expect("NodeWright");
        assert_eq!(now.status.and_then(|s| s.waiting_for), None, "{nw}");
    }
    delete_nodes(&client, &names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_start_only_inside_a_maintenance_window() {
    use std::sync::atomic::{AtomicI64, Ordering};
    let (cluster, client, ns) = scenario("window").await;
    let names = create_nodes(&client, &ns, &[("n0", &[]), ("n1", &[])]).await;
    create_policy(
        &client,
        &ns,
        json!({
            "default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}},
            "windows": [{"start": "22:00", "end": "04:00", "timeZone": "Europe/Berlin"}]
        }),
    )
    .await;
    // 13:00 in Berlin: the window is closed for nine hours.
    let closed: Timestamp = "2026-12-03T12:00:00Z".parse().expect("time");
    let opens: Timestamp = "2026-12-03T21:00:00Z".parse().expect("time");
    let offset = Arc::new(AtomicI64::new(
        closed.as_second() - Timestamp::now().as_second(),
    ));
    let operator = start_clocked(&client, &ns, &names, offset.clone()).await;
    let waiting = "waiting for window (opens 2026-12-03T22:00+01:00)";
    let held = wait_nodewright(cluster, &client, &ns, waiting, |nw| {
        nw.status
            .as_ref()
            .is_some_and(|s| s.waiting_for.as_deref() == Some(waiting) && s.node_status.len() == 2)
    })
    .await;
    let status = held.status.clone().unwrap_or_default();
    assert!(
        status.node_status.values().all(|s| *s == Status::Waiting),
        "{:?}",
        status.node_status
    );
    assert!(
        status.node_priority.is_empty(),
        "{:?}",
        status.node_priority
    );
    support::wait_event(cluster, &client, &ns, "WaitingForWindow", "NodeWright").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let listed = jobs
        .list(&ListParams::default())
        .await
        .expect("Jobs listed");
    assert!(
        listed.items.is_empty(),
        "a Job outside the window: {listed:?}"
    );

    // Three seconds before the opening: the operator wakes for it without any event.
    let before = opens.as_second() - 3 - Timestamp::now().as_second();
    offset.store(before, Ordering::SeqCst);
    let done = wait_nodewright(cluster, &client, &ns, "complete", |nw| {
        status_is(nw, Status::Complete)
    })
    .await;
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(status.waiting_for, None);
    // The opening in the apiserver's time: the clock ran `before` seconds ahead of it.
    let opened_real = opens.as_second() - before;
    let listed = jobs
        .list(&ListParams::default())
        .await
        .expect("Jobs listed");
    assert!(!listed.items.is_empty());
    for job in &listed.items {
        let at = created(job).expect("created").as_second();
        assert!(
            at >= opened_real - 1,
            "Job {} created at {at}, before the window opened at {opened_real}",
            job.name_any()
        );
    }
    operator.stop().await;
    delete_nodes(&client, &names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_batch_starts_only_after_the_soak() {
    use std::sync::atomic::{AtomicI64, Ordering};
    let (cluster, client, ns) = scenario("soak").await;
    let names = create_nodes(&client, &ns, &[("n0", &[]), ("n1", &[])]).await;
    create_policy(
        &client,
        &ns,
        json!({
            "default": {"budget": {"count": 1},
                        "strategy": {"fixed": {"initialBatch": 1, "soak": "1h"}}}
        }),
    )
    .await;
    let offset = Arc::new(AtomicI64::new(0));
    let operator = start_clocked(&client, &ns, &names, offset.clone()).await;
    // The batch state is persisted before the pass goes on (pass::batch_states_to_persist): wait
    // for the pass's own write, which reports the node complete too.
    let first = names[0].clone();
    let soaking = wait_nodewright(cluster, &client, &ns, "batch 1 soaking", |nw| {
        nw.status.as_ref().is_some_and(|s| {
            s.node_status.get(&first) == Some(&Status::Complete)
                && s.compartment_statuses
                    .get(DEFAULT_COMPARTMENT)
                    .and_then(|c| c.batch_state.as_ref())
                    .is_some_and(|b| b.soak_until.is_some())
        })
    })
    .await;
    let status = soaking.status.clone().unwrap_or_default();
    let state = batch_state(&soaking, DEFAULT_COMPARTMENT);
    assert_eq!(
        state.current_batch, 1,
        "judged only after the soak: {state:?}"
    );
    assert_eq!(
        status.node_status.get(&names[0]),
        Some(&Status::Complete),
        "{status:?}"
    );
    assert_ne!(status.node_status.get(&names[1]), Some(&Status::Complete));
    let waiting = status.waiting_for.clone().unwrap_or_default();
    assert!(
        waiting.starts_with("waiting for soak of batch 1 in compartment __default__ (ends "),
        "{waiting}"
    );
    support::wait_event(cluster, &client, &ns, "BatchSoaking", "NodeWright").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let on_second = |list: &[Job]| {
        list.iter()
            .filter(|j| node_of(j) == Some(names[1].as_str()))
            .count()
    };
    let listed = jobs
        .list(&ListParams::default())
        .await
        .expect("Jobs listed");
    assert_eq!(
        on_second(&listed.items),
        0,
        "the second batch started during the soak"
    );

    // Past the soak: the batch is judged and the second node runs.
    let moved_at = Timestamp::now().as_second();
    offset.store(3_600, Ordering::SeqCst);
    let done = wait_nodewright(cluster, &client, &ns, "complete", |nw| {
        status_is(nw, Status::Complete)
    })
    .await;
    let listed = jobs
        .list(&ListParams::default())
        .await
        .expect("Jobs listed");
    assert!(on_second(&listed.items) > 0);
    for job in listed
        .items
        .iter()
        .filter(|j| node_of(j) == Some(names[1].as_str()))
    {
        let at = created(job).expect("created").as_second();
        assert!(
            at >= moved_at,
            "Job {} created at {at}, before the soak ended (clock moved at {moved_at})",
            job.name_any()
        );
    }
    assert_eq!(done.status.and_then(|s| s.waiting_for), None);
    operator.stop().await;
    delete_nodes(&client, &names).await;
}

/// The revisions in the NodeWright's status: (revision, `name:version,...`), oldest first.
fn revisions_of(nw: &NodeWright) -> Vec<(i64, String)> {
    nw.status
        .iter()
        .flat_map(|s| &s.revisions)
        .map(|r| {
            let list: Vec<String> = r
                .packages
                .iter()
                .map(|(n, p)| format!("{n}:{}", p.version))
                .collect();
            (r.revision, list.join(","))
        })
        .collect()
}

/// A hook under which `tool-2.0.0`'s config stage fails on `node` (its upgrade completes first, so
/// the node no longer has 1.0.0 and must install it again when rolled back).
fn v2_config_fails_on(node: String) -> JobHook {
    Arc::new(move |job: &mut Job| {
        let on_node = node_of(job) == Some(node.as_str());
        let stage = job.labels().get(keys::STAGE_LABEL).map(String::as_str);
        if on_node
            && support::job_package(job).as_deref() == Some("tool-2.0.0")
            && stage == Some("config")
            && let Some(spec) = job.spec.as_mut()
        {
            PodFate::fail()
                .exit_code(3)
                .apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    })
}

/// The ground of the rollback tests: a policy `ns` that stops at the first failed batch of one
/// node (safetyLimit 100: at any progress) and rolls back, an operator with no retries and `hook`,
/// and the NodeWright `ns` with `tool` 1.0.0 on `names` under it.
async fn rollback_ground(
    client: &kube::Client,
    ns: &str,
    names: &[String],
    hook: JobHook,
) -> Operator {
    create_policy(
        client,
        ns,
        json!({
            "default": {"budget": {"count": 1},
                        "strategy": {"fixed": {"initialBatch": 1, "failureThreshold": 1,
                                               "safetyLimit": 100}}},
            "rollbackOnFailure": true
        }),
    )
    .await;
    let operator = start_rollback_operator(client, ns, hook);
    create_tool_nodewright(client, ns, names).await;
    operator
}

/// The operator of a rollback test: no retries, `hook` on every Job.
fn start_rollback_operator(client: &kube::Client, ns: &str, hook: JobHook) -> Operator {
    SuiteOperator::new(client, ns, SUITE_LABEL, ns)
        .backoff_limit(0)
        .hook(Some(hook))
        .start()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_rollout_rolls_back_once_to_the_last_good_revision() {
    use nodewright_shared::api::RollbackPhase;
    let (cluster, client, ns) = scenario("rollback").await;
    let names = create_nodes(&client, &ns, &[("n0", &[]), ("n1", &[]), ("n2", &[])]).await;
    let hook = v2_config_fails_on(names[1].clone());
    let operator = rollback_ground(&client, &ns, &names, hook.clone()).await;
    let v1 = wait_complete_at(cluster, &client, &ns, 1).await;
    assert_eq!(revisions_of(&v1), [(1, "tool:1.0.0".to_owned())]);

    // 2.0.0 completes on n0 (a revision), then fails on n1: the failure threshold stops it.
    let jobs = watch_jobs(&client, &ns);
    let failed_generation = patch_spec(
        &client,
        &ns,
        json!({"spec": {"packages": {"tool": {"version": "2.0.0"}}}}),
    )
    .await;
    let rolled = wait_nodewright(cluster, &client, &ns, "rolled back", |nw| {
        nw.status
            .as_ref()
            .and_then(|s| s.rollback.as_ref())
            .is_some_and(|r| r.phase == RollbackPhase::RolledBack)
    })
    .await;
    let record = rolled
        .status
        .as_ref()
        .and_then(|s| s.rollback.clone())
        .expect("rollback record");
    assert_eq!(
        (
            record.failed_generation,
            record.from_revision,
            record.to_revision,
            record.written_generation,
        ),
        (
            failed_generation,
            Some(2),
            Some(1),
            Some(failed_generation + 1)
        ),
        "{record:?}"
    );
    assert_eq!(record.compartments, [DEFAULT_COMPARTMENT]);
    assert_eq!(
        rolled.spec.packages.get("tool").map(|p| p.version.as_str()),
        Some("1.0.0"),
        "revision 1's packages written back"
    );
    let event = support::wait_event(cluster, &client, &ns, "RolledBack", "NodeWright").await;
    let note = event.message.unwrap_or_default();
    assert!(
        note.contains("stopped the rollout of revision 2 in compartment __default__")
            && note.contains("rolled back automatically to revision 1 (tool 2.0.0 -> 1.0.0)"),
        "{note}"
    );
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    // An operator restart right after: nothing is rolled back again.
    operator.kill().await;
    let operator = start_rollback_operator(&client, &ns, hook);
    let done = wait_complete_at(cluster, &client, &ns, failed_generation + 1).await;
    assert_eq!(
        done.metadata.generation,
        Some(failed_generation + 1),
        "the spec was written once"
    );
    assert_eq!(
        done.status
            .as_ref()
            .and_then(|s| s.rollback.as_ref())
            .map(|r| r.phase),
        Some(RollbackPhase::RolledBack)
    );
    assert_eq!(
        support::events(&client, &ns, "RolledBack").await.len(),
        1,
        "announced once"
    );
    // Every node is back on 1.0.0; n0 and n1 (upgraded to 2.0.0) installed it again by apply.
    for node in &names {
        let state = node_state(&client, node, &ns).await.expect("node state");
        let r = state
            .get("tool", "1.0.0")
            .unwrap_or_else(|| panic!("{node}: {state:?}"));
        assert_eq!(
            (r.stage, r.state),
            (Stage::Config, Some(State::Complete)),
            "{node}"
        );
    }
    for node in &names[..2] {
        let applied = jobs.latest().iter().any(|j| {
            node_of(j) == Some(node.as_str())
                && support::job_package(j).as_deref() == Some("tool-1.0.0")
                && j.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some("apply")
        });
        assert!(applied, "{node} installed 1.0.0 again");
    }
    // The restored spec became the newest revision: 2.0.0 stays as revision 2.
    assert_eq!(
        revisions_of(&done),
        [(2, "tool:2.0.0".to_owned()), (3, "tool:1.0.0".to_owned())]
    );
    operator.stop().await;
    delete_nodes(&client, &names).await;
}

/// A ValidatingAdmissionPolicy (and its binding) named `name` that refuses lowering the version of
/// `tool` in the NodeWright `nodewright`: a stand-in, in the apiserver itself, for the webhook's
/// downgrade guard of a package with uninstall scripts. Returns once it refuses (policies are
/// loaded asynchronously), checked with a dry-run update.
async fn refuse_tool_downgrades(
    cluster: &Cluster,
    client: &kube::Client,
    name: &str,
    nodewright: &str,
) {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["nodewright.nvidia.com"], "apiVersions": ["v1alpha1"],
                "operations": ["UPDATE"], "resources": ["nodewrights"]
            }]},
            "matchConditions": [{"name": "this-test", "expression": format!("object.metadata.name == '{nodewright}'")}],
            "validations": [{
                "expression": "!('tool' in oldObject.spec.packages) || !('tool' in object.spec.packages) || object.spec.packages['tool'].version >= oldObject.spec.packages['tool'].version",
                "message": "package \"tool\": downgrade not allowed (the test's stand-in for the webhook's guard)",
                "reason": "Forbidden"
            }]
        }
    }))
    .expect("policy");
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]}
    }))
    .expect("binding");
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("ValidatingAdmissionPolicy created");
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding created");
    let api: Api<NodeWright> = Api::all(client.clone());
    let api = &api;
    cluster
        .wait_for("the downgrade guard in force", BOUND, || async move {
            let dry = PatchParams {
                dry_run: true,
                ..PatchParams::default()
            };
            let lower = json!({"spec": {"packages": {"tool": {"version": "0.0.1"}}}});
            match api.patch(nodewright, &dry, &Patch::Merge(lower)).await {
                Err(kube::Error::Api(e)) if e.message.contains("downgrade not allowed") => {
                    Ok(Some(()))
                }
                _ => Ok(None),
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

async fn remove_admission_policy(client: &kube::Client, name: &str) {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_admission_refuses_is_recorded_and_the_rollout_stays_stopped() {
    use nodewright_shared::api::RollbackPhase;
    let (cluster, client, ns) = scenario("rollback-refused").await;
    let names = create_nodes(&client, &ns, &[("n0", &[]), ("n1", &[])]).await;
    let fails = support::fate_for("tool", "upgrade", PodFate::fail().exit_code(3));
    let operator = rollback_ground(&client, &ns, &names, fails).await;
    wait_complete_at(cluster, &client, &ns, 1).await;
    let guard = format!("{ns}-no-downgrade");
    refuse_tool_downgrades(cluster, &client, &guard, &ns).await;

    // 2.0.0's upgrade fails on the first node: stopped, and the rollback to 1.0.0 is refused.
    let failed_generation = patch_spec(
        &client,
        &ns,
        json!({"spec": {"packages": {"tool": {"version": "2.0.0"}}}}),
    )
    .await;
    let refused = wait_nodewright(cluster, &client, &ns, "rollback refused", |nw| {
        nw.status
            .as_ref()
            .and_then(|s| s.rollback.as_ref())
            .is_some_and(|r| r.phase != RollbackPhase::Pending)
    })
    .await;
    let record = refused
        .status
        .as_ref()
        .and_then(|s| s.rollback.clone())
        .expect("rollback record");
    assert_eq!(record.phase, RollbackPhase::Refused, "{record:?}");
    assert_eq!(
        (
            record.failed_generation,
            record.from_revision,
            record.to_revision,
            record.written_generation
        ),
        (failed_generation, None, Some(1), None)
    );
    assert!(
        record
            .message
            .as_deref()
            .is_some_and(|m| m.contains("downgrade not allowed")),
        "{record:?}"
    );
    assert_eq!(
        refused.metadata.generation,
        Some(failed_generation),
        "nothing written"
    );
    assert!(
        batch_state(&refused, DEFAULT_COMPARTMENT).should_stop,
        "the rollout stays stopped"
    );
    let event = support::wait_event(cluster, &client, &ns, "RollbackRefused", "NodeWright").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .message
            .as_deref()
            .is_some_and(|m| m.contains("the automatic rollback to revision 1 was refused")),
        "{event:?}"
    );
    // The second node never started 2.0.0.
    let state = node_state(&client, &names[1], &ns)
        .await
        .expect("node state");
    assert!(state.get("tool", "2.0.0").is_none(), "{state:?}");
    remove_admission_policy(&client, &guard).await;
    operator.stop().await;
    delete_nodes(&client, &names).await;
}

/// The gate condition of the health-gates test (a node condition no kubelet writes).
const GATE_CONDITION: &str = "GateTestHealthy";

/// Sets the node condition [`GATE_CONDITION`] to True on `node` (a strategic merge of the status:
/// the node's other conditions stay).
async fn set_gate_condition(client: &kube::Client, node: &str) {
    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    Api::<Node>::all(client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [{
                "type": GATE_CONDITION, "status": "True", "reason": "Validated",
                "message": "the test's validator passed", "lastTransitionTime": now,
                "lastHeartbeatTime": now
            }]}})),
        )
        .await
        .expect("condition set");
}

/// Creates the validator pod of the health-gates test on `node` (kwok runs it and makes it Ready).
async fn create_validator(client: &kube::Client, ns: &str, node: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("validator-{node}"), "labels": {"app": "validator"}},
        "spec": {"nodeName": node, "containers": [{"name": "v", "image": "validator:test"}],
                 "tolerations": [{"operator": "Exists"}]}
    }))
    .expect("pod");
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("validator pod created");
}

/// The node as the API server has it now.
async fn node_now(client: &kube::Client, name: &str) -> Node {
    Api::<Node>::all(client.clone())
        .get(name)
        .await
        .expect("node")
}

/// Waits until `node`'s gate record for `nw` satisfies `probe`; returns the record.
async fn wait_gate_mark(
    cluster: &Cluster,
    client: &kube::Client,
    node: &str,
    nw: &str,
    what: &str,
    probe: impl Fn(&nodewright_core::node::health_gates::GateMark) -> bool,
) -> nodewright_core::node::health_gates::GateMark {
    cluster
        .wait_for(&format!("{node}: {what}"), BOUND, || {
            let client = client.clone();
            let probe = &probe;
            async move {
                let n = node_now(&client, node).await;
                Ok(nodewright_core::node::health_gates::mark(&n, nw).filter(|m| probe(m)))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// (gates) A policy's health gates (validator pods Ready on the node, then a node condition True)
/// hold each node cordoned and in progress after its packages finished, and its batch open (the
/// next node does not start), until both pass; then the node is uncordoned and complete in one
/// write. A node whose gate times out (the operator's clock moved past it) is erroring with a
/// GateFailed Event and stays cordoned, and completes once its gates pass later. From a watch of
/// every node version: no node is ever uncordoned from the NodeWright's cordon in a version
/// whose gate condition is not True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_gates_hold_a_node_cordoned_until_they_pass() {
    use nodewright_core::node::{cordon, health_gates};
    use nodewright_core::rollout::pass::GATES_WAITING;
    use nodewright_shared::api::InterruptType;
    use std::sync::atomic::{AtomicI64, Ordering};
    let (cluster, client, ns) = scenario("gates").await;
    let names = create_nodes(&client, &ns, &[("n0", &[]), ("n1", &[])]).await;
    let (n0, n1) = (names[0].as_str(), names[1].as_str());
    let node_versions =
        Watched::start(Api::<Node>::all(client.clone()), watcher::Config::default());
    create_policy(
        &client,
        &ns,
        json!({
            "default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}},
            "healthGates": {"gates": [
                {"name": "validator", "timeout": "1h",
                 "podsReady": {"namespace": ns, "selector": {"matchLabels": {"app": "validator"}}}},
                {"name": "healthy", "timeout": "1h",
                 "nodeCondition": {"type": GATE_CONDITION}}
            ]}
        }),
    )
    .await;
    let offset = Arc::new(AtomicI64::new(0));
    let _operator = SuiteOperator::new(&client, &ns, SUITE_LABEL, &ns)
        .clock(offset_clock(offset.clone()))
        .hook(Some(every_pod_succeeds_after("1s")))
        .start();
    let nw = format!("{ns}-gated");
    create_nodewright(
        &client,
        &ns,
        &nw,
        NodeWrightSpec {
            node_selectors: on_nodes(&[n0, n1]),
            deployment_policy: Some(ns.clone()),
            packages: BTreeMap::from([(
                "tuned".to_owned(),
                Package {
                    interrupt: support::interrupt(InterruptType::Service, &["tuned"]),
                    ..package("1.0.0", &[])
                },
            )]),
            ..Default::default()
        },
    )
    .await;

    // n0's packages finish: it waits for its validator, cordoned, in progress; n1 has not started.
    let mark = wait_gate_mark(
        cluster,
        &client,
        n0,
        &nw,
        "waiting for the validator",
        |m| m.gate.as_deref() == Some("validator"),
    )
    .await;
    assert!(!mark.failed, "{mark:?}");
    assert!(
        mark.saw
            .as_deref()
            .is_some_and(|s| s.starts_with("0 of 0 pods Ready")),
        "{mark:?}"
    );
    let node = node_now(&client, n0).await;
    assert!(cordon::holds_cordon(&node, &nw) && cordon::is_unschedulable(&node));
    assert_eq!(
        node.annotations()
            .get(&keys::node_status_key(&nw))
            .map(String::as_str),
        Some("in_progress")
    );
    wait_nodewright(cluster, &client, &nw, "waiting for health gates", |o| {
        o.status
            .as_ref()
            .and_then(|s| s.waiting_for.as_deref())
            .is_some_and(|w| w.contains(&format!("{GATES_WAITING} on 1 node")))
    })
    .await;
    let n1_state = node_state(&client, n1, &nw).await;
    assert!(
        n1_state.is_none(),
        "n1 started while n0's batch waits at its gates: {n1_state:?}"
    );

    // The validator runs on n0: now the condition holds it.
    create_validator(&client, &ns, n0).await;
    let mark = wait_gate_mark(
        cluster,
        &client,
        n0,
        &nw,
        "waiting for the condition",
        |m| m.gate.as_deref() == Some("healthy"),
    )
    .await;
    assert_eq!(
        mark.saw.as_deref(),
        Some("the node has no condition GateTestHealthy (True wanted)")
    );
    assert!(cordon::is_unschedulable(&node_now(&client, n0).await));
    set_gate_condition(&client, n0).await;
    cluster
        .wait_for("n0 uncordoned and complete", BOUND, || {
            let client = client.clone();
            let nw = nw.clone();
            async move {
                let n = node_now(&client, n0).await;
                let done = n
                    .annotations()
                    .get(&keys::node_status_key(&nw))
                    .map(String::as_str)
                    == Some("complete");
                Ok((done && !cordon::is_unschedulable(&n)).then_some(n))
            }
        })
        .await
        .map(|n| assert_eq!(health_gates::mark(&n, &nw), None, "the record goes"))
        .expect("n0 passes its gates");

    // n1 runs next and waits for its validator; its gate's timeout passes (the clock moves 2h).
    wait_gate_mark(
        cluster,
        &client,
        n1,
        &nw,
        "waiting for the validator",
        |m| m.gate.as_deref() == Some("validator"),
    )
    .await;
    offset.store(2 * 3600, Ordering::SeqCst);
    let failed = wait_gate_mark(cluster, &client, n1, &nw, "failed", |m| m.failed).await;
    assert_eq!(failed.gate.as_deref(), Some("validator"));
    let event = support::wait_event(cluster, &client, &nw, "GateFailed", "NodeWright").await;
    let note = event.message.unwrap_or_default();
    assert!(
        note.contains(n1)
            && note.contains("health gate validator")
            && note.contains("stays cordoned"),
        "{note}"
    );
    wait_nodewright(cluster, &client, &nw, "n1 erroring", |o| {
        o.status
            .as_ref()
            .is_some_and(|s| s.node_status.get(n1) == Some(&Status::Erroring))
    })
    .await;
    let node = node_now(&client, n1).await;
    assert!(cordon::holds_cordon(&node, &nw) && cordon::is_unschedulable(&node));

    // Its validator and condition arrive late: it completes, uncordoned, and so does the rollout.
    create_validator(&client, &ns, n1).await;
    set_gate_condition(&client, n1).await;
    wait_complete_at(cluster, &client, &nw, 1).await;
    cluster
        .wait_for("n1 uncordoned", BOUND, || {
            let client = client.clone();
            async move { Ok((!cordon::is_unschedulable(&node_now(&client, n1).await)).then_some(())) }
        })
        .await
        .expect("n1 uncordoned");

    // Replaying every node version: a release of the NodeWright's cordon only ever happened in a
    // version whose gate condition was True (the operator's write was guarded by the version it
    // judged the gates on).
    let mut claimed: BTreeSet<String> = BTreeSet::new();
    let mut releases = 0;
    for node in node_versions.all() {
        let name = node.name_any();
        if name != n0 && name != n1 {
            continue;
        }
        if cordon::holds_cordon(&node, &nw) {
            claimed.insert(name);
            continue;
        }
        if claimed.remove(&name) {
            releases += 1;
            let healthy = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == GATE_CONDITION && c.status == "True")
                });
            assert!(healthy, "{name} uncordoned before its gates passed");
            assert_eq!(health_gates::mark(&node, &nw), None, "{name}");
        }
    }
    assert_eq!(releases, 2, "each node's cordon released once");
    delete_nodes(&client, &names).await;
}

/// A Prometheus server of the project's own build (tests/prometheus/build.sh --with-prometheus),
/// on 127.0.0.1, scraping one target every second; killed when dropped.
struct Prometheus {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts one scraping `target` (`host:port`) and waits until it answers queries.
    async fn start(cluster: &Cluster, target: &str) -> Prometheus {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let built = std::process::Command::new(repo.join("tests/prometheus/build.sh"))
            .arg("--with-prometheus")
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("tests/prometheus/build.sh runs");
        assert!(built.status.success(), "building prometheus failed");
        let bin = String::from_utf8_lossy(&built.stdout)
            .lines()
            .last()
            .map(|l| std::path::PathBuf::from(l.trim()).join("prometheus"))
            .expect("the bin dir");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s}}\nscrape_configs:\n- job_name: gates\n  static_configs:\n  - targets: ['{target}']\n"
            ),
        )
        .expect("config written");
        let port = nodewright_e2e::process::free_port();
        let child = std::process::Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("prometheus starts");
        let url = format!("http://127.0.0.1:{port}");
        let ready = format!("{url}/-/ready");
        cluster
            .wait_for("prometheus ready", BOUND, || {
                let ready = ready.clone();
                async move {
                    Ok(reqwest::get(&ready)
                        .await
                        .ok()
                        .filter(|r| r.status().is_success())
                        .map(|_| ()))
                }
            })
            .await
            .expect("prometheus answers");
        Prometheus {
            child,
            url,
            _dir: dir,
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves `gate_test_unhealthy{node="<node>"} <value>` for each entry of `values` on 127.0.0.1;
/// returns `host:port`.
async fn serve_unhealthy(values: Arc<Mutex<BTreeMap<String, i32>>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let values = values.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let body: String = values
                    .lock()
                    .expect("lock")
                    .iter()
                    .map(|(node, v)| format!("gate_test_unhealthy{{node=\"{node}\"}} {v}\n"))
                    .collect();
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    addr
}

/// (alert gate) A NodeWright's own `noFiringAlert` gate, asked of a real Prometheus that scrapes
/// the test's target: while the query returns a series for the node, the node waits (its record
/// names the series); once the series reports 0 (the query's `== 1` drops it), the node completes.
/// A node whose query returns nothing completes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_alert_holds_a_node_until_it_clears() {
    use nodewright_core::node::health_gates;
    let (cluster, client, ns) = scenario("alertgate").await;
    let names = create_nodes(&client, &ns, &[("n0", &[]), ("n1", &[])]).await;
    let (n0, n1) = (names[0].as_str(), names[1].as_str());
    let values = Arc::new(Mutex::new(BTreeMap::from([
        (n0.to_owned(), 1),
        (n1.to_owned(), 0),
    ])));
    let target = serve_unhealthy(values.clone()).await;
    let prometheus = Prometheus::start(cluster, &target).await;
    // The gate passes on an empty answer: the series must be scraped before the node finishes.
    let scraped = format!("{}/api/v1/query", prometheus.url);
    cluster
        .wait_for("the first scrape", BOUND, || {
            let scraped = scraped.clone();
            async move {
                let answer = reqwest::Client::new()
                    .get(&scraped)
                    .query(&[("query", "gate_test_unhealthy == 1")])
                    .send()
                    .await;
                let Ok(answer) = answer else { return Ok(None) };
                let body = answer.bytes().await.unwrap_or_default();
                let seen = health_gates::observe_query_answer(&body);
                Ok(
                    matches!(seen, health_gates::Observation::Series(s) if !s.is_empty())
                        .then_some(()),
                )
            }
        })
        .await
        .expect("prometheus scraped the target");
    let _operator = start_operator(client.clone(), &ns, None, None);
    let nw = format!("{ns}-alerted");
    let gates: nodewright_shared::api::HealthGates = serde_json::from_value(json!({
        "gates": [{"name": "no-unhealthy", "timeout": "1h", "noFiringAlert": {
            "prometheusUrl": prometheus.url,
            "query": "gate_test_unhealthy{node=\"$NODE\"} == 1"
        }}]
    }))
    .expect("gates");
    create_nodewright(
        &client,
        &ns,
        &nw,
        NodeWrightSpec {
            node_selectors: on_nodes(&[n0, n1]),
            health_gates: Some(gates),
            packages: BTreeMap::from([("tuned".to_owned(), package("1.0.0", &[]))]),
            ..Default::default()
        },
    )
    .await;
    let mark = wait_gate_mark(cluster, &client, n0, &nw, "held by the series", |m| {
        m.saw
            .as_deref()
            .is_some_and(|s| s.starts_with("1 series returned"))
    })
    .await;
    assert_eq!(mark.gate.as_deref(), Some("no-unhealthy"));
    let saw = mark.saw.unwrap_or_default();
    assert!(saw.contains(&format!("node=\"{n0}\"")), "{saw}");
    // n1's query returns nothing: it completed.
    cluster
        .wait_for("n1 complete", BOUND, || {
            let client = client.clone();
            let nw = nw.clone();
            async move {
                let n = node_now(&client, n1).await;
                Ok((n
                    .annotations()
                    .get(&keys::node_status_key(&nw))
                    .map(String::as_str)
                    == Some("complete"))
                .then_some(()))
            }
        })
        .await
        .expect("n1 passes");
    let n0_now = node_now(&client, n0).await;
    assert_eq!(
        n0_now
            .annotations()
            .get(&keys::node_status_key(&nw))
            .map(String::as_str),
        Some("in_progress"),
        "n0 still waits"
    );
    // The series clears: n0 completes, its record gone.
    values.lock().expect("lock").insert(n0.to_owned(), 0);
    wait_complete_at(cluster, &client, &nw, 1).await;
    assert_eq!(health_gates::mark(&node_now(&client, n0).await, &nw), None);
    delete_nodes(&client, &names).await;
}
