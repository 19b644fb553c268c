//! Fixtures of the rollout pass's unit tests: a small cluster (nodes, a NodeWright of two packages,
//! a policy of two) as a preview [`Snapshot`], one pass of the operator over it against
//! [`mock::cluster`], and the snapshot a pass leaves.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use nodewright_core::preview::Snapshot;
use nodewright_shared::api::{DeploymentPolicy, NodeWright};
use nodewright_shared::keys;
use nodewright_shared::node_state::{NodeState, PackageStatus, Stage, State};
use serde_json::json;

use kube::runtime::controller::Action;

use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::mock;

/// Nodes in the fixtures' snapshots.
pub(super) const NODES: usize = 5;

/// Node `node-<i>` in pool `gpu`, with a boot ID.
pub(super) fn node(i: usize) -> Node {
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

/// The state of one package, `a` 1.0.0 (image `example.com/pkg`), whose apply is erroring after
/// `restarts` failed attempts: the record a timed-out or failing stage leaves.
pub(super) fn erroring_apply(restarts: i32) -> NodeState {
    let mut state = NodeState::default();
    state.upsert(PackageStatus {
        name: "a".into(),
        version: "1.0.0".into(),
        image: "example.com/pkg".into(),
        container_sha: String::new(),
        stage: Stage::Apply,
        state: Some(State::Erroring),
        restarts,
    });
    state
}

/// Node `n1` (resourceVersion 7) carrying `state` as its record for the NodeWright `nw`.
pub(super) fn n1_with_state(state: &NodeState) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "resourceVersion": "7", "annotations": {
            keys::node_state_key("nw"): state.to_annotation()}}})
}

/// NodeWright `gpu` (with its finalizer) of `packages` on the `pool=gpu` nodes under policy
/// `two-at-a-time`.
fn nodewright_of(packages: serde_json::Value) -> NodeWright {
    serde_json::from_value(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": "gpu", "uid": "uid-gpu", "generation": 1, "resourceVersion": "1",
                     "finalizers": [keys::FINALIZER],
                     "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {
            "nodeSelectors": {"matchLabels": {"pool": "gpu"}},
            "deploymentPolicy": "two-at-a-time",
            "packages": packages
        }
    }))
    .expect("a NodeWright fixture of a fixed shape")
}

/// Two packages (`driver` after `tools`).
pub(super) fn nodewright() -> NodeWright {
    nodewright_of(json!({
        "tools": {"version": "1.0.0", "image": "registry.example/tools"},
        "driver": {"version": "2.0.0", "image": "registry.example/driver",
                   "dependsOn": {"tools": "1.0.0"}}
    }))
}

/// Policy `two-at-a-time`: batches of two, two nodes at once.
pub(super) fn policy() -> DeploymentPolicy {
    serde_json::from_value(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": "two-at-a-time", "resourceVersion": "1"},
        "spec": {"default": {"budget": {"count": 2}, "strategy": {"fixed": {"initialBatch": 2}}}}
    }))
    .expect("a policy fixture of a fixed shape")
}

/// The cluster holding `nodewright`, `nodes`, `jobs` and [`policy`], with the operator's
/// defaults, at a fixed time.
pub(super) fn snapshot(nodewright: NodeWright, nodes: Vec<Node>, jobs: Vec<Job>) -> Snapshot {
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

/// What one rollout pass over `snapshot` wrote: the mock cluster's state afterwards. The pass must
/// succeed, and every write it makes must be one the mock answers.
pub(super) async fn pass_over(snapshot: &Snapshot) -> mock::ClusterState {
    let (result, state) = try_pass_over(snapshot, |_| {}).await;
    if let Err(e) = result {
        panic!(
            "the pass over the snapshot failed: {e:?}\nrequests: {:#?}",
            state.seen
        );
    }
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
    state
}

/// One pass over `snapshot` against a mock cluster `tweak` may change first (a node the API no
/// longer has...): the pass's result and what the mock saw.
pub(super) async fn try_pass_over(
    snapshot: &Snapshot,
    tweak: impl FnOnce(&mut mock::ClusterState),
) -> (Result<Action, ReconcileError>, mock::ClusterState) {
    try_pass_in_term(snapshot, tweak, async |_| {}).await
}

/// One pass over `snapshot` (against a mock cluster `tweak` may change first) in a term `prepare`
/// has written in before (as an earlier pass would have): the pass's result and what the mock saw,
/// `prepare`'s requests included.
pub(super) async fn try_pass_in_term(
    snapshot: &Snapshot,
    tweak: impl FnOnce(&mut mock::ClusterState),
    prepare: impl AsyncFnOnce(&Context),
) -> (Result<Action, ReconcileError>, mock::ClusterState) {
    let (client, server, cluster) = mock::cluster(&snapshot.nodes);
    {
        let mut state = cluster.lock().expect("mock cluster state");
        state.existing_jobs = snapshot
            .jobs
            .iter()
            .map(|j| serde_json::to_value(j).expect("a Job encodes"))
            .collect();
        tweak(&mut state);
    }
    let ctx = Context::over_snapshot(client, snapshot);
    prepare(&ctx).await;
    let nw = Arc::new(snapshot.nodewright.clone());
    let result = super::one_pass(&nw, &ctx).await;
    drop(ctx);
    server.abort();
    let mut state = cluster.lock().expect("mock cluster state");
    (result, std::mem::take(&mut *state))
}

/// The snapshot the pass over `snapshot` left: its node writes, the Jobs there were (as it left
/// them) and the ones it created, each in the state `finished` says (running, or Complete), and
/// its status.
pub(super) fn after(snapshot: &Snapshot, state: &mock::ClusterState, finished: bool) -> Snapshot {
    let mut next = snapshot.clone();
    next.nodes = state
        .nodes
        .values()
        .map(|n| serde_json::from_value(n.clone()).expect("a node the mock kept"))
        .collect();
    // The Jobs there were as the pass left them (marked recorded), then the ones it created.
    next.jobs = state
        .existing_jobs
        .iter()
        .chain(state.jobs.iter())
        .map(|j| serde_json::from_value::<Job>(j.clone()).expect("a Job of the mock cluster"))
        .map(|mut job| {
            job.status = Some(if finished {
                serde_json::from_value(json!({
                    "succeeded": 1,
                    "conditions": [
                        {"type": "SuccessCriteriaMet", "status": "True"},
                        {"type": "Complete", "status": "True"}
                    ]
                }))
                .expect("a Job status of a fixed shape")
            } else {
                k8s_openapi::api::batch::v1::JobStatus {
                    active: Some(1),
                    ..Default::default()
                }
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

/// (node, package label, stage) of every Job a pass created.
pub(super) fn created(state: &mock::ClusterState) -> BTreeSet<(String, String, String)> {
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

/// One package `driver` that reboots the node.
pub(super) fn rebooting() -> NodeWright {
    nodewright_of(json!({
        "driver": {"version": "1.0.0", "image": "registry.example/driver",
                   "interrupt": {"type": "reboot"}}
    }))
}

/// NodeWright `nw` (uid `uid`, generation 1) of one package `a`: the acts' unit tests that build
/// their Jobs and records by hand.
pub(super) fn with_package(package: nodewright_shared::api::Package) -> NodeWright {
    let mut nw = NodeWright::new(
        "nw",
        nodewright_shared::api::NodeWrightSpec {
            packages: std::collections::BTreeMap::from([("a".to_owned(), package)]),
            ..Default::default()
        },
    );
    nw.metadata.uid = Some("uid".into());
    nw.metadata.generation = Some(1);
    nw
}
