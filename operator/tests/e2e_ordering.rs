//! Ordering between NodeWrights end to end on the local control plane (real kube-apiserver, etcd,
//! the real Job controller, kwok simulating nodes and pods). Each test has its own namespace, fake
//! nodes and ONE operator watching all of its NodeWrights (labelled `SUITE_LABEL=<namespace>`), so
//! the operator sees them side by side as it would in a cluster (upstream-operator.md §2.5).
//!
//! (a) `sequencing: node` (the default): NodeWrights of priority 1 and 2 on the same two nodes. The
//!     earlier one is held on one node only; the later one runs and completes on the other node
//!     meanwhile, and starts on the held node only once the earlier one is complete there. The
//!     earlier one's name sorts last, so priority (not the name) decides.
//! (b) `sequencing: all` on the earlier NodeWright: complete on one of its nodes and held on the
//!     other, it keeps the later one waiting on every node, with no Job; the later one starts only
//!     once the earlier one is complete on all of its nodes.
//! (c) A paused earlier NodeWright, incomplete, blocks the later one (waiting, no Job); once it is
//!     unpaused both complete, the later one after the earlier one.
//! (d) A disabled earlier NodeWright holds nothing back (the later one completes), does no work
//!     itself (no Job, no node state) and shows `disabled`.
//!
//! How "the earlier one is not done yet" is arranged: its apply pod on a node is held (pod fate
//! `hang`) until the test relabels it `succeed`, so no delay decides the order. How "nothing
//! happened" is checked: after a barrier ([`barrier`]) — the test changes the NodeWright's priority
//! (keeping the order), which bumps its generation, and waits until its `Ready` condition reports
//! that generation. The pass that wrote it started after the change, and any Job a pass creates
//! exists before the pass writes the status.
//!
//! Orders are read from the objects' own timestamps (Job creation times, `Complete` condition
//! times) as collected by a Job watch that keeps every Job it saw (a recorded Job gets a TTL and
//! may be gone by the end). No timing assertion: waits are bounded only so a broken build fails instead of
//! hanging.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use nodewright_e2e::{Cluster, FATE_LABEL, PodFate};

mod support;
use nodewright_operator::JobHook;
use nodewright_shared::api::{NodeWright, NodeWrightSpec, Sequencing, Status};
use nodewright_shared::keys;
use nodewright_shared::node_state::{Stage, State};
use serde_json::json;
use support::Watched;
use support::create_scoped_nodewright;
use support::{
    BOUND, Operator, SuiteOperator, condition, create_fake_node, list_all, node_state, on_nodes,
    package, patch_nodewright, scenario, scenario_with_node, wait_nodewright, wait_status,
};

/// Label that scopes each test's operator to its own NodeWrights (distinct from the other suites).
const SUITE_LABEL: &str = "nodewright.test/ordering-suite";

/// The one package of every NodeWright here.
const PACKAGE: &str = "pkg";
const VERSION: &str = "1.0.0";

fn start_operator(client: kube::Client, namespace: &str, hook: Option<JobHook>) -> Operator {
    SuiteOperator::new(&client, namespace, SUITE_LABEL, namespace)
        .hook(hook)
        .start()
}

/// Creates the NodeWright `name` (one package, on `nodes`) labelled for this test's operator, with
/// its own priority and sequencing and, when given, the user annotation `annotation: "true"` (pause
/// or disable).
async fn create_scoped(
    client: &kube::Client,
    ns: &str,
    name: &str,
    priority: i32,
    sequencing: Sequencing,
    nodes: &[&str],
    annotation: Option<&str>,
) {
    let spec = NodeWrightSpec {
        priority,
        sequencing,
        node_selectors: on_nodes(nodes),
        packages: BTreeMap::from([(PACKAGE.to_owned(), package(VERSION, &[]))]),
        ..NodeWrightSpec::default()
    };
    let mut nw = NodeWright::new(name, spec);
    nw.metadata.annotations =
        annotation.map(|key| BTreeMap::from([(key.to_owned(), "true".to_owned())]));
    create_scoped_nodewright(client, SUITE_LABEL, ns, nw).await;
}

/// The node a Job (or pod template) is pinned to.
fn node_of(job: &Job) -> Option<&str> {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.node_name.as_deref())
}

/// The NodeWright a Job belongs to (its name label; the names here are valid label values).
fn owner_of(job: &Job) -> Option<&str> {
    job.labels().get(keys::NAME_LABEL).map(String::as_str)
}

/// A hook that holds the apply pod of `nodewright` on `node` (pod fate `hang`) until [`release`].
fn hold(nodewright: &str, node: &str) -> JobHook {
    let (nodewright, node) = (nodewright.to_owned(), node.to_owned());
    Arc::new(move |job: &mut Job| {
        if owner_of(job) == Some(nodewright.as_str())
            && node_of(job) == Some(node.as_str())
            && job.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some("apply")
            && let Some(spec) = job.spec.as_mut()
        {
            PodFate::hang().apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    })
}

/// Lets the held apply pod of `nodewright` on `node` succeed (kwok re-evaluates a relabelled pod).
async fn release(cluster: &Cluster, client: &kube::Client, ns: &str, nodewright: &str, node: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let held = ListParams::default().labels(&format!(
        "{}={nodewright},{FATE_LABEL}=hang",
        keys::NAME_LABEL
    ));
    let pod = cluster
        .wait_for(
            &format!("the held pod of {nodewright} on {node}"),
            BOUND,
            || {
                let (pods, held) = (pods.clone(), held.clone());
                async move {
                    let list = pods
                        .list(&held)
                        .await
                        .map_err(|e| cluster.kube_error("pods".into(), e))?;
                    Ok(list.items.into_iter().find(|p| {
                        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    }))
                }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let succeed = json!({"metadata": {"labels": {FATE_LABEL: "succeed"}}});
    pods.patch(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&succeed),
    )
    .await
    .expect("held pod released");
}

/// The Jobs of `nodewright` (on `node`, or anywhere) among `jobs`.
fn jobs_of<'a>(jobs: &'a [Job], nodewright: &str, node: Option<&str>) -> Vec<&'a Job> {
    jobs.iter()
        .filter(|j| owner_of(j) == Some(nodewright))
        .filter(|j| node.is_none_or(|n| node_of(j) == Some(n)))
        .collect()
}

/// Every Job of `nodewright` (on `node`, or anywhere) the watch saw or the API lists now (the watch
/// may trail the API by an event; a listed Job is certainly there).
async fn all_jobs_of(
    seen: &Watched<Job>,
    api: &Api<Job>,
    nodewright: &str,
    node: Option<&str>,
) -> Vec<Job> {
    let mut all = seen.latest_by_uid();
    for job in list_all(api).await {
        if let Some(uid) = job.metadata.uid.clone() {
            all.entry(uid).or_insert(job);
        }
    }
    let all: Vec<Job> = all.into_values().collect();
    jobs_of(&all, nodewright, node)
        .into_iter()
        .cloned()
        .collect()
}

/// The Job's condition `type_` (True), with its transition time.
fn job_condition(job: &Job, type_: &str) -> Option<Time> {
    support::job_condition_time(job, type_)
}

/// When the first of `jobs` was created.
fn first_created(jobs: &[&Job], what: &str) -> Time {
    jobs.iter()
        .filter_map(|j| j.metadata.creation_timestamp.clone())
        .min()
        .unwrap_or_else(|| panic!("{what}: no Job"))
}

/// When the last of `jobs` completed (each must have: the NodeWright is complete there).
fn last_completed(jobs: &[&Job], what: &str) -> Time {
    assert!(!jobs.is_empty(), "{what}: no Job");
    jobs.iter()
        .map(|j| {
            job_condition(j, "Complete")
                .unwrap_or_else(|| panic!("{what}: Job {} not complete", j.name_any()))
        })
        .max()
        .unwrap_or_else(|| panic!("{what}: no Job"))
}

/// Whether the node's records for `nodewright` show the package complete (its last stage, config).
async fn complete_on(client: &kube::Client, node: &str, nodewright: &str) -> bool {
    node_state(client, node, nodewright)
        .await
        .and_then(|s| s.get(PACKAGE, VERSION).cloned())
        .is_some_and(|r| r.stage == Stage::Config && r.state == Some(State::Complete))
}

/// The node's status annotation for `nodewright` (`nodewright.nvidia.com/status_<name>`).
async fn node_status_annotation(
    client: &kube::Client,
    node: &str,
    nodewright: &str,
) -> Option<String> {
    Api::<Node>::all(client.clone())
        .get(node)
        .await
        .expect("node")
        .annotations()
        .get(&keys::node_status_key(nodewright))
        .cloned()
}

/// The NodeWright's status for `node`.
fn status_on(nw: &NodeWright, node: &str) -> Option<Status> {
    nw.status
        .as_ref()
        .and_then(|s| s.node_status.get(node).copied())
}

/// Sets the NodeWright's priority to `priority` (the caller keeps the order between NodeWrights),
/// which bumps its generation, and waits until its `Ready` condition reports that generation: the
/// operator has run a full pass of it since (its Jobs are created before its status is written),
/// after whatever the test observed before calling this. Returns the NodeWright as of then.
async fn barrier(
    cluster: &Cluster,
    client: &kube::Client,
    name: &str,
    priority: i32,
) -> NodeWright {
    let patched = Api::<NodeWright>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"priority": priority}})),
        )
        .await
        .expect("priority changed");
    let generation = patched.metadata.generation.expect("generation");
    wait_nodewright(
        cluster,
        client,
        name,
        &format!("a pass of generation {generation}"),
        |nw| condition(nw, "Ready").and_then(|c| c.observed_generation) >= Some(generation),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_with_node_sequencing_a_later_nodewright_waits_per_node_for_the_earlier_one() {
    let (cluster, client, ns) = scenario("per-node").await;
    let (fast, slow) = (format!("{ns}-fast"), format!("{ns}-slow"));
    for node in [&fast, &slow] {
        create_fake_node(&client, node, &[], json!([])).await;
    }
    // Priority orders them, not the name: the earlier one's name sorts last.
    let (earlier, later) = (format!("{ns}-z-earlier"), format!("{ns}-a-later"));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let watch = Watched::start(jobs.clone(), kube::runtime::watcher::Config::default());
    let operator = start_operator(client.clone(), &ns, Some(hold(&earlier, &slow)));
    let nodes = [fast.as_str(), slow.as_str()];
    create_scoped(&client, &ns, &earlier, 1, Sequencing::Node, &nodes, None).await;
    create_scoped(&client, &ns, &later, 2, Sequencing::Node, &nodes, None).await;

    // The earlier NodeWright is complete on the fast node and held on the slow one; meanwhile the
    // later one completes on the fast node (fleet-wide gating would keep it waiting there).
    wait_nodewright(
        cluster,
        &client,
        &earlier,
        "fast complete, slow in progress",
        |nw| {
            status_on(nw, &fast) == Some(Status::Complete)
                && status_on(nw, &slow) == Some(Status::InProgress)
        },
    )
    .await;
    wait_nodewright(
        cluster,
        &client,
        &later,
        "complete on the fast node",
        |nw| status_on(nw, &fast) == Some(Status::Complete),
    )
    .await;
    // ... and has done nothing on the slow node, where the earlier one is not complete.
    let nw = barrier(cluster, &client, &later, 3).await;
    assert_eq!(
        status_on(&nw, &slow),
        Some(Status::Waiting),
        "{:?}",
        nw.status
    );
    assert!(complete_on(&client, &fast, &later).await);
    assert!(!complete_on(&client, &slow, &earlier).await);
    let held = node_state(&client, &slow, &earlier)
        .await
        .and_then(|s| s.get(PACKAGE, VERSION).cloned())
        .expect("the earlier NodeWright's record on the slow node");
    assert_eq!(
        (held.stage, held.state),
        (Stage::Apply, Some(State::InProgress))
    );
    assert!(
        node_state(&client, &slow, &later)
            .await
            .is_none_or(|s| s.get(PACKAGE, VERSION).is_none()),
        "no record of the later NodeWright on the slow node"
    );
    assert_eq!(
        node_status_annotation(&client, &slow, &later)
            .await
            .as_deref(),
        Some("waiting")
    );
    let on_slow = all_jobs_of(&watch, &jobs, &later, Some(&slow)).await;
    assert!(
        on_slow.is_empty(),
        "the later NodeWright ran on the slow node before the earlier one was complete there: {:?}",
        on_slow.iter().map(|j| j.name_any()).collect::<Vec<_>>()
    );

    // Released, the earlier one completes on the slow node, then the later one runs there too.
    release(cluster, &client, &ns, &earlier, &slow).await;
    wait_status(cluster, &client, &earlier, Status::Complete).await;
    wait_status(cluster, &client, &later, Status::Complete).await;
    for node in nodes {
        assert!(complete_on(&client, node, &earlier).await, "{node}");
        assert!(complete_on(&client, node, &later).await, "{node}");
    }
    watch.stop();

    // The order, from the Jobs' own timestamps: on each node the later NodeWright's first Job was
    // created once the earlier one's Jobs there had completed...
    let seen: Vec<Job> = watch.latest();
    for node in nodes {
        let earlier_done = last_completed(&jobs_of(&seen, &earlier, Some(node)), &earlier);
        let later_start = first_created(&jobs_of(&seen, &later, Some(node)), &later);
        assert!(
            later_start >= earlier_done,
            "on {node}, the later NodeWright's first Job was created at {:?}, before the earlier \
             one completed there at {:?}",
            later_start.0,
            earlier_done.0
        );
    }
    // ... and on the fast node it had completed by the time the earlier one completed on the slow
    // node (per node, not fleet-wide).
    let later_done_fast = last_completed(&jobs_of(&seen, &later, Some(&fast)), &later);
    let earlier_done_slow = last_completed(&jobs_of(&seen, &earlier, Some(&slow)), &earlier);
    assert!(
        later_done_fast <= earlier_done_slow,
        "the later NodeWright completed on the fast node at {:?}, after the earlier one completed \
         on the slow node at {:?}",
        later_done_fast.0,
        earlier_done_slow.0
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_with_sequencing_all_a_later_nodewright_waits_until_the_earlier_one_is_done_everywhere() {
    let (cluster, client, ns) = scenario("seq-all").await;
    let (done, held) = (format!("{ns}-n0"), format!("{ns}-n1"));
    for node in [&done, &held] {
        create_fake_node(&client, node, &[], json!([])).await;
    }
    let (earlier, later) = (format!("{ns}-earlier"), format!("{ns}-later"));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let watch = Watched::start(jobs.clone(), kube::runtime::watcher::Config::default());
    let operator = start_operator(client.clone(), &ns, Some(hold(&earlier, &held)));
    let nodes = [done.as_str(), held.as_str()];
    create_scoped(&client, &ns, &earlier, 1, Sequencing::All, &nodes, None).await;
    create_scoped(&client, &ns, &later, 2, Sequencing::Node, &nodes, None).await;

    // The earlier NodeWright is complete on one node and held on the other.
    wait_nodewright(
        cluster,
        &client,
        &earlier,
        "n0 complete, n1 in progress",
        |nw| {
            status_on(nw, &done) == Some(Status::Complete)
                && status_on(nw, &held) == Some(Status::InProgress)
        },
    )
    .await;
    assert!(complete_on(&client, &done, &earlier).await);
    // The later one waits on every node, including the one the earlier one is done with (per-node
    // gating would start it there), and has created no Job.
    let nw = barrier(cluster, &client, &later, 3).await;
    let status = nw.status.clone().unwrap_or_default();
    assert_eq!(status.status, Some(Status::Waiting), "{status:?}");
    for node in nodes {
        assert_eq!(status_on(&nw, node), Some(Status::Waiting), "{node}");
        assert_eq!(
            node_status_annotation(&client, node, &later)
                .await
                .as_deref(),
            Some("waiting"),
            "{node}"
        );
        assert!(
            node_state(&client, node, &later)
                .await
                .is_none_or(|s| s.get(PACKAGE, VERSION).is_none()),
            "no record of the later NodeWright on {node}"
        );
    }
    let started = all_jobs_of(&watch, &jobs, &later, None).await;
    assert!(
        started.is_empty(),
        "the later NodeWright ran before the earlier one was complete on all of its nodes: {:?}",
        started.iter().map(|j| j.name_any()).collect::<Vec<_>>()
    );

    // Released, the earlier one completes everywhere; then the later one runs.
    release(cluster, &client, &ns, &earlier, &held).await;
    wait_status(cluster, &client, &earlier, Status::Complete).await;
    wait_status(cluster, &client, &later, Status::Complete).await;
    for node in nodes {
        assert!(complete_on(&client, node, &later).await, "{node}");
    }
    watch.stop();

    // The later NodeWright's first Job, on any node, was created once the earlier one's last Job
    // (on the held node) had completed.
    let seen: Vec<Job> = watch.latest();
    let earlier_done = last_completed(&jobs_of(&seen, &earlier, None), &earlier);
    let later_start = first_created(&jobs_of(&seen, &later, None), &later);
    assert!(
        later_start >= earlier_done,
        "the later NodeWright's first Job was created at {:?}, before the earlier one completed on \
         all of its nodes at {:?}",
        later_start.0,
        earlier_done.0
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_a_paused_earlier_nodewright_blocks_the_later_one_until_it_is_unpaused() {
    let (cluster, client, ns, node) = scenario_with_node("paused").await;
    let (earlier, later) = (format!("{ns}-earlier"), format!("{ns}-later"));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let watch = Watched::start(jobs.clone(), kube::runtime::watcher::Config::default());
    let operator = start_operator(client.clone(), &ns, None);
    let nodes = [node.as_str()];
    let pause = Some(keys::PAUSE_ANNOTATION);
    create_scoped(&client, &ns, &earlier, 1, Sequencing::Node, &nodes, pause).await;
    create_scoped(&client, &ns, &later, 2, Sequencing::Node, &nodes, None).await;

    // The earlier NodeWright is paused and has not run; the later one waits behind it.
    let paused = wait_status(cluster, &client, &earlier, Status::Paused).await;
    assert_eq!(status_on(&paused, &node), Some(Status::Paused));
    let nw = barrier(cluster, &client, &later, 3).await;
    assert_eq!(
        nw.status.as_ref().and_then(|s| s.status),
        Some(Status::Waiting),
        "{:?}",
        nw.status
    );
    assert_eq!(status_on(&nw, &node), Some(Status::Waiting));
    assert_eq!(
        node_status_annotation(&client, &node, &later)
            .await
            .as_deref(),
        Some("waiting")
    );
    assert_eq!(
        node_status_annotation(&client, &node, &earlier)
            .await
            .as_deref(),
        Some("paused")
    );
    assert!(!complete_on(&client, &node, &earlier).await);
    for nodewright in [&earlier, &later] {
        let ran = all_jobs_of(&watch, &jobs, nodewright, None).await;
        assert!(
            ran.is_empty(),
            "{nodewright} ran while the earlier NodeWright was paused: {:?}",
            ran.iter().map(|j| j.name_any()).collect::<Vec<_>>()
        );
    }

    // Unpaused, the earlier one runs, then the later one.
    patch_nodewright(
        &client,
        &earlier,
        json!({"metadata": {"annotations": {keys::PAUSE_ANNOTATION: null}}}),
    )
    .await;
    wait_status(cluster, &client, &earlier, Status::Complete).await;
    wait_status(cluster, &client, &later, Status::Complete).await;
    assert!(complete_on(&client, &node, &earlier).await);
    assert!(complete_on(&client, &node, &later).await);
    watch.stop();

    let seen: Vec<Job> = watch.latest();
    let earlier_done = last_completed(&jobs_of(&seen, &earlier, None), &earlier);
    let later_start = first_created(&jobs_of(&seen, &later, None), &later);
    assert!(
        later_start >= earlier_done,
        "the later NodeWright's first Job was created at {:?}, before the earlier one completed at \
         {:?}",
        later_start.0,
        earlier_done.0
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d_a_disabled_earlier_nodewright_holds_nothing_back_does_no_work_and_shows_disabled() {
    let (cluster, client, ns, node) = scenario_with_node("disabled").await;
    let (earlier, later) = (format!("{ns}-earlier"), format!("{ns}-later"));
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let watch = Watched::start(jobs.clone(), kube::runtime::watcher::Config::default());
    let operator = start_operator(client.clone(), &ns, None);
    let nodes = [node.as_str()];
    let disable = Some(keys::DISABLE_ANNOTATION);
    create_scoped(&client, &ns, &earlier, 1, Sequencing::Node, &nodes, disable).await;
    create_scoped(&client, &ns, &later, 3, Sequencing::Node, &nodes, None).await;

    // The later NodeWright is not held back by the incomplete, disabled earlier one.
    wait_status(cluster, &client, &later, Status::Complete).await;
    assert!(complete_on(&client, &node, &later).await);
    // The disabled one shows `disabled` and did nothing: no Job, no record on the node.
    wait_status(cluster, &client, &earlier, Status::Disabled).await;
    let nw = barrier(cluster, &client, &earlier, 2).await;
    assert_eq!(
        nw.status.as_ref().and_then(|s| s.status),
        Some(Status::Disabled),
        "{:?}",
        nw.status
    );
    assert_eq!(status_on(&nw, &node), Some(Status::Disabled));
    assert_eq!(
        node_status_annotation(&client, &node, &earlier)
            .await
            .as_deref(),
        Some("disabled")
    );
    assert!(
        node_state(&client, &node, &earlier)
            .await
            .is_none_or(|s| s.get(PACKAGE, VERSION).is_none()),
        "no record of the disabled NodeWright on the node"
    );
    let ran = all_jobs_of(&watch, &jobs, &earlier, None).await;
    assert!(
        ran.is_empty(),
        "the disabled NodeWright ran: {:?}",
        ran.iter().map(|j| j.name_any()).collect::<Vec<_>>()
    );
    // The later one did run (its Jobs are what completed it).
    assert!(!all_jobs_of(&watch, &jobs, &later, None).await.is_empty());
    watch.stop();
    operator.stop().await;
}
