//! The rollout pass and the preview (`kubectl nodewright plan`) decide alike: one snapshot of the
//! cluster is fed to the operator's pass (over a mock API holding it) and to
//! [`nodewright_core::preview::preview`], and what the pass does is what the preview says it does
//! now: the nodes it starts and the stage each starts with, the nodes it holds back and each node's
//! status (issue 21 §2).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_core::preview::{Blocker, Preview, Snapshot, preview};
use nodewright_shared::api::{DeploymentPolicy, NodeWright, NodeWrightStatus};
use nodewright_shared::keys;
use serde_json::{Value, json};

use crate::context::Context;
use crate::writes::mock;

const NODES: usize = 5;

fn node(i: usize) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": format!("node-{i}"), "resourceVersion": "1",
                     "labels": {"pool": "gpu"}},
        "status": {"nodeInfo": {"bootID": format!("boot-{i}"), "architecture": "amd64",
                   "containerRuntimeVersion": "", "kernelVersion": "", "kubeProxyVersion": "",
                   "kubeletVersion": "", "machineID": "", "operatingSystem": "linux",
                   "osImage": "", "systemUUID": ""}}
    }))
    .expect("a node fixture of a fixed shape")
}

/// Two packages (`driver` after `tools`) on the `pool=gpu` nodes under policy `two-at-a-time`.
fn nodewright() -> NodeWright {
    let mut nw: NodeWright = serde_json::from_value(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": "gpu", "uid": "uid-gpu", "generation": 1, "resourceVersion": "1",
                     "finalizers": [keys::FINALIZER],
                     "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {
            "nodeSelectors": {"matchLabels": {"pool": "gpu"}},
            "deploymentPolicy": "two-at-a-time",
            "packages": {
                "tools": {"version": "1.0.0", "image": "registry.example/tools"},
                "driver": {"version": "2.0.0", "image": "registry.example/driver",
                           "dependsOn": {"tools": "1.0.0"}}
            }
        }
    }))
    .expect("a NodeWright fixture of a fixed shape");
    nw.status = None;
    nw
}

fn policy() -> DeploymentPolicy {
    serde_json::from_value(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": "two-at-a-time", "resourceVersion": "1"},
        "spec": {"default": {"budget": {"count": 2}, "strategy": {"fixed": {"initialBatch": 2}}}}
    }))
    .expect("a policy fixture of a fixed shape")
}

fn snapshot(nodewright: NodeWright, nodes: Vec<Node>, jobs: Vec<Job>) -> Snapshot {
    let config = Context::test_config();
    Snapshot {
        nodewrights: vec![nodewright.clone()],
        nodewright,
        nodes,
        policies: vec![policy()],
        jobs,
        configmaps: vec![],
        defaults: config.jobs.defaults.clone(),
        runtime_taint: config.jobs.runtime_required_taint.clone(),
        max_disrupted: config.max_disrupted_nodes,
        now: "2026-12-04T12:00:00Z".parse().expect("a fixed time"),
    }
}

/// What one rollout pass over `snapshot` wrote: the mock cluster's state afterwards.
async fn pass_over(snapshot: &Snapshot) -> mock::ClusterState {
    let (client, server, cluster) = mock::cluster(&snapshot.nodes);
    let ctx = Context::over_snapshot(client, snapshot);
    let nw = Arc::new(snapshot.nodewright.clone());
    if let Err(e) = super::one_pass(&nw, &ctx).await {
        let seen = cluster.lock().map(|s| s.seen.clone()).unwrap_or_default();
        panic!("the pass over the snapshot failed: {e:?}\nrequests: {seen:#?}");
    }
    drop(ctx);
    server.abort();
    let mut state = cluster.lock().expect("mock cluster state");
    let unanswered: Vec<String> = state
        .seen
        .iter()
        // A read of what does not exist yet is a 404 on a real apiserver too.
        .filter(|r| r.method != http::Method::GET && r.status >= 400)
        .map(|r| format!("{} {} -> {}: {}", r.method, r.path, r.status, r.body))
        .collect();
    assert!(
        unanswered.is_empty(),
        "the pass made writes the mock cannot answer (extend writes::mock::cluster): {unanswered:?}"
    );
    std::mem::take(&mut *state)
}

/// (node, package, stage) of every Job the pass created.
fn created(state: &mock::ClusterState) -> BTreeSet<(String, String, String)> {
    state
        .jobs
        .iter()
        .map(|job| {
            let label = |key: &str| {
                job["metadata"]["labels"][key]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            };
            (
                label(keys::NODE_LABEL),
                label(keys::PACKAGE_LABEL),
                label(keys::STAGE_LABEL),
            )
        })
        .collect()
}

/// (node, package, stage) of every node the preview says starts a stage now: nothing blocks it,
/// it is not complete, and its first stage has no Job running yet.
fn starts_now(preview: &Preview) -> BTreeSet<(String, String, String)> {
    preview
        .nodes
        .iter()
        .filter(|n| n.blockers.is_empty() && !n.complete)
        .filter_map(|n| {
            let step = n.steps.first().filter(|s| !s.running)?;
            let stage = serde_json::to_value(step.stage).ok()?.as_str()?.to_owned();
            // The Job's package label is `<package>-<version>`.
            let package = format!("{}-{}", step.package, step.version);
            Some((n.name.clone(), package, stage))
        })
        .collect()
}

/// Each node's status as the pass wrote it (or as the snapshot had it, when the pass wrote none).
fn written_statuses(state: &mock::ClusterState, snapshot: &Snapshot) -> BTreeMap<String, Value> {
    let status: NodeWrightStatus = state
        .nodewright
        .as_ref()
        .and_then(|nw| serde_json::from_value(nw["status"].clone()).ok())
        .or_else(|| snapshot.nodewright.status.clone())
        .unwrap_or_default();
    status
        .node_status
        .iter()
        .map(|(n, s)| (n.clone(), json!(s)))
        .collect()
}

fn previewed_statuses(preview: &Preview) -> BTreeMap<String, Value> {
    preview
        .nodes
        .iter()
        .map(|n| (n.name.clone(), json!(n.status)))
        .collect()
}

/// The snapshot the pass over `snapshot` left: its node writes, its Jobs (running) and its
/// status.
fn after(snapshot: &Snapshot, state: &mock::ClusterState) -> Snapshot {
    let mut next = snapshot.clone();
    next.nodes = state
        .nodes
        .values()
        .map(|n| serde_json::from_value(n.clone()).expect("a node the mock kept"))
        .collect();
    next.jobs = state
        .jobs
        .iter()
        .map(|j| {
            let mut job: Job = serde_json::from_value(j.clone()).expect("a Job the pass created");
            job.status = Some(k8s_openapi::api::batch::v1::JobStatus {
                active: Some(1),
                ..Default::default()
            });
            job
        })
        .collect();
    if let Some(written) = &state.nodewright {
        // A status write carries the status (and the version it is guarded by), not the spec.
        next.nodewright.status =
            Some(serde_json::from_value(written["status"].clone()).expect("the status written"));
        next.nodewright.metadata.resource_version = written["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned);
        next.nodewrights = vec![next.nodewright.clone()];
    }
    next
}

/// Asserts the pass over `snapshot` did what the preview of it says happens now; returns what the
/// pass wrote.
async fn decide_alike(what: &str, snapshot: &Snapshot) -> mock::ClusterState {
    let previewed = preview(snapshot).expect("the snapshot previews");
    let state = pass_over(snapshot).await;
    assert_eq!(
        created(&state),
        starts_now(&previewed),
        "{what}: the Jobs the pass created are the stages the preview starts now\npreview: {previewed:#?}"
    );
    assert_eq!(
        written_statuses(&state, snapshot),
        previewed_statuses(&previewed),
        "{what}: each node's status"
    );
    let waiting = state
        .nodewright
        .as_ref()
        .and_then(|nw| nw["status"]["waitingFor"].as_str().map(str::to_owned))
        .or_else(|| {
            snapshot
                .nodewright
                .status
                .as_ref()
                .and_then(|s| s.waiting_for.clone())
        });
    assert_eq!(waiting, previewed.waiting_for, "{what}: status.waitingFor");
    state
}

#[tokio::test]
async fn a_fresh_rollout_starts_the_first_batch_the_preview_names() {
    let first = snapshot(nodewright(), (0..NODES).map(node).collect(), vec![]);
    let state = decide_alike("fresh", &first).await;
    let started = created(&state);
    assert_eq!(started.len(), 2, "the policy's batch of two: {started:?}");
    assert!(
        started
            .iter()
            .all(|(_, package, _)| package == "tools-1.0.0"),
        "driver waits for tools: {started:?}"
    );
    let previewed = preview(&first).expect("the snapshot previews");
    let held: Vec<&str> = previewed
        .nodes
        .iter()
        .filter(|n| {
            n.blockers
                .iter()
                .any(|b| matches!(b, Blocker::Batch { .. }))
        })
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(
        held.len(),
        NODES - 2,
        "the rest wait for later batches: {previewed:#?}"
    );

    // The snapshot that pass left (its Jobs running): the next pass starts nothing new, as the
    // preview of it says.
    let second = after(&first, &state);
    let state = decide_alike("in flight", &second).await;
    assert!(created(&state).is_empty(), "{:?}", created(&state));
}

#[tokio::test]
async fn a_paused_nodewright_starts_nothing_and_says_so_in_both() {
    let mut nw = nodewright();
    nw.annotations_mut()
        .insert(keys::PAUSE_ANNOTATION.to_owned(), "true".to_owned());
    let paused = snapshot(nw, (0..NODES).map(node).collect(), vec![]);
    let state = decide_alike("paused", &paused).await;
    assert!(created(&state).is_empty());
    let previewed = preview(&paused).expect("the snapshot previews");
    assert!(
        previewed
            .nodes
            .iter()
            .all(|n| n.blockers.contains(&Blocker::Paused)),
        "{previewed:#?}"
    );
}

#[tokio::test]
async fn a_missing_policy_starts_nothing_in_both() {
    let mut missing = snapshot(nodewright(), (0..NODES).map(node).collect(), vec![]);
    missing.policies.clear();
    let state = decide_alike("missing policy", &missing).await;
    assert!(created(&state).is_empty());
}
