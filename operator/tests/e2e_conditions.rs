//! The conditions that tell a user why a rollout or a deletion does not progress, end to end on the
//! local control plane (real kube-apiserver, the Job controller, kwok nodes). Each test runs its own
//! operator in-process, scoped by the label `nodewright.test/conditions` to its own NodeWright, on
//! fake nodes of its own.
//!
//! (taints) a node with a taint the NodeWright does not tolerate, and one with the ignore label, are
//!     blocked and named in TaintNotTolerable and NodesIgnored; lifting both lets the rollout finish.
//! (uninstall) a failing uninstall sets UninstallInProgress and UninstallFailed; a package whose
//!     dependency is being uninstalled is Blocked (DependencyUninstalled) and never runs.
//! (malformed) deleting a NodeWright whose node state cannot be read is DeletionBlocked
//!     (MalformedNodeState) with a Warning Event, and the object stays; repairing the annotation lets
//!     the uninstall run and the object go.
//! (policy) a missing DeploymentPolicy is DeploymentPolicyNotFound; creating it, raising its budget
//!     and deleting it each take effect within [`SOON`], well before any resync could apply them.
//!     (Run alone, only the policy watch can meet that bound; alongside other tests, their node
//!     changes also wake every NodeWright, so the test cannot fail then, only pass.)
//! (ready) the Ready condition of an erroring rollout names the erroring node, and `kubectl wait
//!     --for=condition=Ready` fails on it; on a rollout that completes, it returns.
//! (drain) while a PodDisruptionBudget refuses the eviction of a node's pod, the NodeWright and the
//!     node say `in_progress` (Ready False, Progressing) within [`DRAIN_SHOWN`], the node is
//!     cordoned, the pod stays and no Job runs; once the budget is gone the rollout completes.
//! (cordons) an interrupt package leaves a node an administrator cordoned before it cordoned, and
//!     uncordons the node it cordoned itself; a leftover cordon claim of a NodeWright that no longer
//!     exists is released, with a Warning Event on the node.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nodewright_e2e::PodFate;
use nodewright_operator::JobHook;
use nodewright_shared::api::{
    DeploymentPolicy, InterruptType, NodeWright, NodeWrightSpec, Package, Status, Uninstall,
};
use nodewright_shared::keys;
use serde_json::json;

mod support;
use support::{
    BOUND, Operator, SuiteOperator, cluster, condition, condition_is, create_blocking_pdb,
    create_fake_node, create_labelled_nodewright, create_workload_pod, delete_node, fail_on_node,
    fate_for, interrupt, job_package, list_all, no_schedule, on_nodes, operator_client, package,
    patch_node, patch_nodewright, scenario, spec_on, status_is, wait_event, wait_node,
    wait_nodewright, wait_nodewright_gone, wait_status,
};

/// Label that scopes each test's operator to its own NodeWright.
const SUITE_LABEL: &str = "nodewright.test/conditions";

/// Bound on a DeploymentPolicy change's effect: well below the 30 s resync of a rollout in flight
/// and the 1 h DEFAULT_INTERVAL of a complete one (see [`start_slow_resync_operator`]), so a pass
/// triggered by the policy watch is the only one that can meet it (generous for that).
const SOON: Duration = Duration::from_secs(20);

/// Bound on the status of a drain that a PodDisruptionBudget holds: the pass whose eviction is
/// refused writes it, seconds after the NodeWright is created. A client that retries the refusal
/// (kube's default retry: 15 attempts, backoff doubling from 5 ms, at least 164 s in all) holds that
/// pass, and so the status, for minutes: far beyond this bound, which only a pass taking the 429
/// as its answer meets.
const DRAIN_SHOWN: Duration = Duration::from_secs(60);

fn start_operator(client: kube::Client, namespace: &str, hook: Option<JobHook>) -> Operator {
    SuiteOperator::new(&client, namespace, SUITE_LABEL, namespace)
        .backoff_limit(1)
        .hook(hook)
        .start()
}

/// [`start_operator`] with DEFAULT_INTERVAL 1h: a complete rollout is not resynced during a test.
fn start_slow_resync_operator(
    client: kube::Client,
    namespace: &str,
    hook: Option<JobHook>,
) -> Operator {
    SuiteOperator::new(&client, namespace, SUITE_LABEL, namespace)
        .backoff_limit(1)
        .env(&[("DEFAULT_INTERVAL", "1h")])
        .hook(hook)
        .start()
}

fn uninstallable(version: &str) -> Package {
    Package {
        uninstall: Some(Uninstall {
            enabled: true,
            apply: false,
        }),
        ..package(version, &[])
    }
}

/// Every Job the operator created, as (package label, stage).
type Created = Arc<Mutex<Vec<(String, String)>>>;

/// A hook that logs every created Job and fails the pods of `package`'s `stage` Jobs.
fn failing_hook(created: &Created, package: &'static str, stage: &'static str) -> JobHook {
    let log = created.clone();
    Arc::new(move |job: &mut Job| {
        let entry = (
            job_package(job).unwrap_or_default(),
            job.labels()
                .get(keys::STAGE_LABEL)
                .cloned()
                .unwrap_or_default(),
        );
        let fails = entry.0.starts_with(&format!("{package}-")) && entry.1 == stage;
        log.lock().expect("log").push(entry);
        if fails && let Some(spec) = job.spec.as_mut() {
            PodFate::fail()
                .exit_code(1)
                .apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    })
}

/// Jobs created for `package_label` (`<package>-<version>`), at `stage` when given.
fn count(created: &Created, package_label: &str, stage: Option<&str>) -> usize {
    created
        .lock()
        .expect("log")
        .iter()
        .filter(|(p, s)| p == package_label && stage.is_none_or(|st| st == s))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_and_the_ignore_label_block_nodes_and_say_so() {
    let (cluster, client, ns) = scenario("taints").await;
    let (tainted, ignored) = (format!("{ns}-tainted"), format!("{ns}-ignored"));
    create_fake_node(&client, &tainted, &[], no_schedule(&[("dedicated", "gpu")])).await;
    create_fake_node(
        &client,
        &ignored,
        &[(keys::IGNORE_LABEL, "true")],
        json!([]),
    )
    .await;
    let _operator = start_operator(client.clone(), &ns, None);
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(&[&tainted, &ignored], [("pkg", package("1.0.0", &[]))]),
    )
    .await;

    let nw = wait_nodewright(cluster, &client, &ns, "both nodes skipped", |nw| {
        condition_is(nw, "TaintNotTolerable", "True", Some("TaintNotTolerable"))
            && condition_is(nw, "NodesIgnored", "True", Some("NodesIgnored"))
    })
    .await;
    assert_eq!(
        condition(&nw, "TaintNotTolerable").map(|c| c.message.as_str()),
        Some(format!("Node [{tainted}] has taints that are not tolerable. Skipping.").as_str())
    );
    assert_eq!(
        condition(&nw, "NodesIgnored").map(|c| c.message.as_str()),
        Some(format!("Node [{ignored}] has ignore label set. Skipping.").as_str())
    );
    let status = nw.status.clone().expect("status");
    assert_eq!(status.status, Some(Status::Blocked), "{status:?}");
    for node in [&tainted, &ignored] {
        assert_eq!(
            status.node_status.get(node.as_str()),
            Some(&Status::Blocked),
            "{node}"
        );
    }
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("jobs");
    assert!(jobs.items.is_empty(), "no work on skipped nodes");

    // The taint lifted and the label removed: both nodes run, the conditions turn False.
    patch_node(&client, &tainted, json!({"spec": {"taints": null}})).await;
    patch_node(
        &client,
        &ignored,
        json!({"metadata": {"labels": {keys::IGNORE_LABEL: null}}}),
    )
    .await;
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    assert!(condition_is(&nw, "TaintNotTolerable", "False", None));
    assert_eq!(
        condition(&nw, "TaintNotTolerable").map(|c| c.message.as_str()),
        Some("All nodes have tolerable taints.")
    );
    assert!(condition_is(&nw, "NodesIgnored", "False", None));
    Api::<NodeWright>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("NodeWright deleted");
    delete_node(&client, &tainted).await;
    delete_node(&client, &ignored).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_uninstall_and_its_blocked_dependent_are_conditions() {
    let (cluster, client, ns) = scenario("uninstall-fails").await;
    let node = format!("{ns}-node");
    create_fake_node(&client, &node, &[], json!([])).await;
    let created: Created = Arc::default();
    let _operator = start_operator(
        client.clone(),
        &ns,
        Some(failing_hook(&created, "base", "uninstall")),
    );
    let mut dependent = package("1.0.0", &[]);
    dependent.depends_on = BTreeMap::from([("base".to_owned(), "1.0.0".to_owned())]);
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(
            &[&node],
            [("base", uninstallable("1.0.0")), ("dep", dependent)],
        ),
    )
    .await;
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    for type_ in ["UninstallFailed", "UninstallInProgress", "Blocked"] {
        assert!(
            condition(&nw, type_).is_none(),
            "{type_} before any uninstall"
        );
    }

    // Uninstall base (its uninstall pods fail) and upgrade dep, which still depends on base.
    patch_nodewright(
        &client,
        &ns,
        json!({"spec": {"packages": {
            "base": {"uninstall": {"enabled": true, "apply": true}},
            "dep": {"version": "2.0.0", "dependsOn": {"base": "1.0.0"}},
        }}}),
    )
    .await;
    let nw = wait_nodewright(cluster, &client, &ns, "uninstall failing", |nw| {
        condition_is(nw, "UninstallFailed", "True", Some("UninstallPodFailing"))
            && condition_is(nw, "Blocked", "True", Some("DependencyUninstalled"))
    })
    .await;
    assert!(condition_is(
        &nw,
        "UninstallInProgress",
        "True",
        Some("UninstallInProgress")
    ));
    assert_eq!(
        condition(&nw, "Blocked").map(|c| c.message.as_str()),
        Some("package dep is blocked: dependency base is being uninstalled")
    );
    assert!(
        !status_is(&nw, Status::Complete),
        "{:?}",
        nw.status.as_ref().and_then(|s| s.status)
    );
    assert!(count(&created, "base-1.0.0", Some("uninstall")) >= 1);
    assert_eq!(
        count(&created, "dep-2.0.0", None),
        0,
        "the dependent never runs"
    );

    Api::<NodeWright>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("NodeWright deleted");
    delete_node(&client, &node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_waits_on_a_malformed_node_state_until_it_is_repaired() {
    let (cluster, client, ns) = scenario("malformed").await;
    let node = format!("{ns}-node");
    create_fake_node(&client, &node, &[], json!([])).await;
    let created: Created = Arc::default();
    // No stage fails: the hook only logs (package "none" matches nothing).
    let _operator = start_operator(
        client.clone(),
        &ns,
        Some(failing_hook(&created, "none", "apply")),
    );
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(&[&node], [("keep", uninstallable("1.0.0"))]),
    )
    .await;
    wait_status(cluster, &client, &ns, Status::Complete).await;

    // The node state is damaged, then the NodeWright is deleted.
    let nodes: Api<Node> = Api::all(client.clone());
    let key = keys::node_state_key(&ns);
    let good = nodes
        .get(&node)
        .await
        .expect("node")
        .annotations()
        .get(&key)
        .cloned()
        .expect("node state");
    patch_node(
        &client,
        &node,
        json!({"metadata": {"annotations": {&key: "{not json"}}}),
    )
    .await;
    Api::<NodeWright>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete");
    let nw = wait_nodewright(cluster, &client, &ns, "DeletionBlocked", |nw| {
        condition_is(nw, "DeletionBlocked", "True", Some("MalformedNodeState"))
    })
    .await;
    assert!(
        condition(&nw, "DeletionBlocked")
            .is_some_and(|c| c.message.contains("malformed nodeState")),
        "{:?}",
        condition(&nw, "DeletionBlocked")
    );
    assert_eq!(
        count(&created, "keep-1.0.0", Some("uninstall")),
        0,
        "no uninstall on a guess"
    );
    wait_event(cluster, &client, &ns, "MalformedNodeState", "NodeWright").await;
    let events = support::events(&client, &ns, "MalformedNodeState").await;
    assert!(
        events.iter().all(|e| e.type_.as_deref() == Some("Warning")),
        "{events:?}"
    );
    // The garbage is left for the user: the operator never overwrites a state it cannot read.
    assert_eq!(
        nodes
            .get(&node)
            .await
            .expect("node")
            .annotations()
            .get(&key)
            .map(String::as_str),
        Some("{not json")
    );

    // Repaired: the package is uninstalled, then the NodeWright goes.
    patch_node(
        &client,
        &node,
        json!({"metadata": {"annotations": {&key: good}}}),
    )
    .await;
    wait_nodewright_gone(cluster, &client, &ns).await;
    assert_eq!(count(&created, "keep-1.0.0", Some("uninstall")), 1);
    delete_node(&client, &node).await;
}

/// The Jobs of namespace `ns` at `stage`.
async fn stage_jobs(client: &kube::Client, ns: &str, stage: &str) -> Vec<Job> {
    Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{}={stage}", keys::STAGE_LABEL)))
        .await
        .expect("jobs")
        .items
}

/// Waits at most `bound` until namespace `ns` holds `want` Jobs at `stage`.
async fn wait_stage_jobs(
    cluster: &nodewright_e2e::Cluster,
    client: &kube::Client,
    ns: &str,
    stage: &str,
    want: usize,
    bound: Duration,
) {
    cluster
        .wait_for(&format!("{want} {stage} Job(s) in {ns}"), bound, || {
            let (client, ns) = (client.clone(), ns.to_owned());
            async move { Ok((stage_jobs(&client, &ns, stage).await.len() == want).then_some(())) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A DeploymentPolicy `name` whose one compartment (no strategy: as many nodes at once as its
/// budget allows) holds the nodes labelled `label=name`, `count` at a time.
fn compartment_policy(name: &str, label: &str, count: i32) -> DeploymentPolicy {
    serde_json::from_value(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": name},
        "spec": {
            "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
            "compartments": [{
                "name": "mine",
                "selector": {"matchLabels": {label: name}},
                "budget": {"count": count}
            }]
        }
    }))
    .expect("policy")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_changes_apply_without_waiting_for_a_resync() {
    const POLICY_LABEL: &str = "nodewright.test/policy";
    let (cluster, client, ns) = scenario("policy-edit").await;
    let nodes: Vec<String> = (0..3).map(|i| format!("{ns}-n{i}")).collect();
    for node in &nodes {
        create_fake_node(&client, node, &[(POLICY_LABEL, ns.as_str())], json!([])).await;
    }
    // Every apply attempt hangs until the test lets it succeed: admitted nodes stay in flight.
    let _operator = start_slow_resync_operator(
        client.clone(),
        &ns,
        Some(fate_for("held", "apply", PodFate::hang())),
    );
    let mut held = package("1.0.0", &[]);
    held.stage_timeout = Some("0".into());
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&nodes),
            deployment_policy: Some(ns.clone()),
            packages: BTreeMap::from([("held".to_owned(), held)]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    wait_nodewright(cluster, &client, &ns, "policy missing", |nw| {
        condition_is(nw, "DeploymentPolicyNotFound", "True", None) && status_is(nw, Status::Blocked)
    })
    .await;
    assert!(
        stage_jobs(&client, &ns, "apply").await.is_empty(),
        "nothing runs without the policy"
    );

    // The policy appears: the rollout starts, one node at a time.
    let policies = Api::<DeploymentPolicy>::all(client.clone());
    policies
        .create(
            &PostParams::default(),
            &compartment_policy(&ns, POLICY_LABEL, 1),
        )
        .await
        .expect("DeploymentPolicy created");
    wait_stage_jobs(cluster, &client, &ns, "apply", 1, SOON).await;
    let nw = wait_nodewright(cluster, &client, &ns, "policy found", |nw| {
        condition(nw, "DeploymentPolicyNotFound").is_none()
            && nw.status.as_ref().is_some_and(|s| s.nodes_in_progress == 1)
    })
    .await;
    assert!(status_is(&nw, Status::InProgress), "{:?}", nw.status);
    // Settled: the admitted node's pod runs (the Job says so), so no Job event is due to trigger a
    // pass that would read the edited policy anyway.
    cluster
        .wait_for("the admitted node's attempt running", BOUND, || {
            let (client, ns) = (client.clone(), ns.clone());
            async move {
                let jobs = stage_jobs(&client, &ns, "apply").await;
                Ok(jobs
                    .iter()
                    .all(|j| j.status.as_ref().and_then(|s| s.ready) == Some(1))
                    .then_some(()))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stage_jobs(&client, &ns, "apply").await.len(), 1);

    // The budget raised: the other two nodes are admitted.
    policies
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"compartments": [{
                "name": "mine",
                "selector": {"matchLabels": {POLICY_LABEL: &ns}},
                "budget": {"count": 3}
            }]}})),
        )
        .await
        .expect("budget raised");
    wait_stage_jobs(cluster, &client, &ns, "apply", 3, SOON).await;

    // The held attempts succeed; the rollout completes.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let fate = PodFate::succeed();
    let patch = json!({"metadata": {"labels": fate.labels(), "annotations": fate.annotations()}});
    for pod in list_all(&pods).await {
        pods.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("fate patched");
    }
    wait_status(cluster, &client, &ns, Status::Complete).await;
    // The passes that follow the completion (its own status write, the nodes' status labels) end
    // within moments; after them only the policy watch can wake this complete NodeWright. Without
    // this pause the deletion could be read by one of them, and the check below could not fail.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The policy deleted: the complete rollout says so at once, not at its next resync (1 h).
    policies
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("DeploymentPolicy deleted");
    let nw = cluster
        .wait_for("the deletion seen", SOON, || {
            let api = Api::<NodeWright>::all(client.clone());
            let ns = ns.clone();
            async move {
                let nw = api
                    .get(&ns)
                    .await
                    .map_err(|e| cluster.kube_error(format!("get {ns}"), e))?;
                Ok(condition_is(&nw, "DeploymentPolicyNotFound", "True", None).then_some(nw))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        condition_is(&nw, "Ready", "False", Some("Blocked")),
        "{:?}",
        condition(&nw, "Ready")
    );

    Api::<NodeWright>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("NodeWright deleted");
    wait_nodewright_gone(cluster, &client, &ns).await;
    for node in &nodes {
        delete_node(&client, node).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ready_condition_names_the_erroring_node() {
    let (cluster, client, ns) = scenario("ready-names").await;
    let (good, bad) = (format!("{ns}-good"), format!("{ns}-bad"));
    for node in [&good, &bad] {
        create_fake_node(&client, node, &[], json!([])).await;
    }
    // The package fails on `bad` only.
    let hook = fail_on_node(bad.clone());
    let _operator = start_operator(client.clone(), &ns, Some(hook));
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(&[&good, &bad], [("pkg", package("1.0.0", &[]))]),
    )
    .await;
    let nw = wait_nodewright(
        cluster,
        &client,
        &ns,
        "one node complete, one erroring",
        |nw| {
            nw.status.as_ref().is_some_and(|s| {
                s.node_status.get(&good) == Some(&Status::Complete)
                    && s.node_status.get(&bad) == Some(&Status::Erroring)
            })
        },
    )
    .await;
    let ready = condition(&nw, "Ready").expect("Ready condition");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Erroring")
    );
    assert_eq!(
        ready.message,
        format!("1/2 nodes complete, 1 erroring ({bad})")
    );
    // `kubectl wait` reads the same condition: not Ready, so it gives up.
    let waited = cluster
        .kubectl(&[
            "wait",
            "--for=condition=Ready",
            &format!("nw/{ns}"),
            "--timeout=3s",
        ])
        .await;
    assert!(
        waited.is_err(),
        "an erroring rollout is not Ready: {waited:?}"
    );

    Api::<NodeWright>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("NodeWright deleted");
    wait_nodewright_gone(cluster, &client, &ns).await;
    delete_node(&client, &good).await;
    delete_node(&client, &bad).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_wait_for_ready_returns_once_the_rollout_completes() {
    let (cluster, client, ns) = scenario("kubectl-wait").await;
    let node = format!("{ns}-node");
    create_fake_node(&client, &node, &[], json!([])).await;
    let _operator = start_operator(client.clone(), &ns, None);
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(
            &[&node],
            [
                ("first", package("1.0.0", &[])),
                ("second", package("1.0.0", &[("first", "1.0.0")])),
            ],
        ),
    )
    .await;
    // Started right away: it waits through the rollout (the timeout is a bound, as BOUND is).
    let timeout = format!("--timeout={}s", BOUND.as_secs());
    let waited = cluster
        .kubectl(&[
            "wait",
            "--for=condition=Ready",
            &format!("nw/{ns}"),
            &timeout,
        ])
        .await
        .unwrap_or_else(|e| panic!("kubectl wait: {e}"));
    assert!(waited.contains("condition met"), "{waited}");
    let nw = Api::<NodeWright>::all(client.clone())
        .get(&ns)
        .await
        .expect("NodeWright");
    assert!(status_is(&nw, Status::Complete), "{:?}", nw.status);
    assert_eq!(
        condition(&nw, "Ready").map(|c| c.message.as_str()),
        Some("1/1 nodes complete")
    );

    Api::<NodeWright>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("NodeWright deleted");
    wait_nodewright_gone(cluster, &client, &ns).await;
    delete_node(&client, &node).await;
}

/// A node of its own (`<ns>-node`) with a workload pod `db-0` that a PodDisruptionBudget allows no
/// disruption, the operator (its client as the binary builds it: how it takes a 429 is under test)
/// and a NodeWright whose package restarts a service there, with `drain_config`.
struct PdbHeld {
    ns: String,
    node: String,
    pods: Api<Pod>,
    pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    _operator: Operator,
}

/// Deletes the test's NodeWright `ns` (its finalizer releases the node) and its node.
async fn tear_down(
    cluster: &'static nodewright_e2e::Cluster,
    client: &kube::Client,
    ns: &str,
    node: &str,
) {
    Api::<NodeWright>::all(client.clone())
        .delete(ns, &DeleteParams::default())
        .await
        .expect("NodeWright deleted");
    wait_nodewright_gone(cluster, client, ns).await;
    delete_node(client, node).await;
}

async fn pdb_held_interrupt(
    cluster: &'static nodewright_e2e::Cluster,
    client: &kube::Client,
    prefix: &str,
    drain_config: Option<nodewright_shared::api::DrainConfig>,
) -> PdbHeld {
    let ns = cluster.create_namespace(prefix).await.expect("namespace");
    let node = format!("{ns}-node");
    create_fake_node(client, &node, &[], json!([])).await;
    create_workload_pod(client, &ns, "db-0", "db", &node).await;
    let pdbs = create_blocking_pdb(cluster, client, &ns, "db").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let operator = start_operator(operator_client().await, &ns, None);
    let mut tuned = package("1.0.0", &[]);
    tuned.interrupt = interrupt(InterruptType::Service, &["tuned"]);
    create_labelled_nodewright(
        client,
        SUITE_LABEL,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&[&node]),
            packages: BTreeMap::from([("tuned".to_owned(), tuned)]),
            drain_config,
            ..NodeWrightSpec::default()
        },
    )
    .await;
    PdbHeld {
        ns,
        node,
        pods,
        pdbs,
        _operator: operator,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_held_by_a_disruption_budget_is_in_progress() {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let PdbHeld {
        ns,
        node,
        pods,
        pdbs,
        _operator,
    } = pdb_held_interrupt(cluster, &client, "pdb-drain", None).await;
    let nodewrights = Api::<NodeWright>::all(client.clone());
    let nw = cluster
        .wait_for(
            &format!(
                "NodeWright {ns} in_progress, its node in_progress, while the PDB holds the drain"
            ),
            DRAIN_SHOWN,
            || {
                let nodewrights = nodewrights.clone();
                let (ns, node) = (ns.clone(), node.clone());
                async move {
                    let nw = nodewrights
                        .get(&ns)
                        .await
                        .map_err(|e| cluster.kube_error(format!("get {ns}"), e))?;
                    let shown = status_is(&nw, Status::InProgress)
                        && nw.status.as_ref().and_then(|s| s.node_status.get(&node))
                            == Some(&Status::InProgress);
                    Ok(shown.then_some(nw))
                }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ready = condition(&nw, "Ready").expect("Ready condition");
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_str(),
            ready.message.as_str()
        ),
        ("False", "Progressing", "0/1 nodes complete, 1 in_progress")
    );
    let draining = wait_event(cluster, &client, &node, "Interrupt", "Node").await;
    assert_eq!(
        draining.message.as_deref(),
        Some(format!("draining node [{node}] for [nodewright:{ns}]").as_str())
    );
    // Held, not done: the node is cordoned, the pod stays, nothing runs before the node is drained.
    let n = Api::<Node>::all(client.clone())
        .get(&node)
        .await
        .expect("node");
    assert_eq!(n.spec.as_ref().and_then(|s| s.unschedulable), Some(true));
    let db = pods.get("db-0").await.expect("db-0 still there");
    assert!(
        db.metadata.deletion_timestamp.is_none(),
        "the budget refuses the eviction"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    assert!(
        list_all(&jobs).await.is_empty(),
        "no Job before the node is drained"
    );

    // The budget gone, a later pass's eviction goes through and the rollout completes.
    pdbs.delete("db", &DeleteParams::default())
        .await
        .expect("PDB deleted");
    wait_status(cluster, &client, &ns, Status::Complete).await;
    assert!(
        pods.get_opt("db-0").await.expect("get").is_none(),
        "db-0 evicted"
    );
    tear_down(cluster, &client, &ns, &node).await;
}

/// `drainConfig` (upstream #264): a drain a PodDisruptionBudget holds past `timeout` makes the node
/// erroring with a DrainTimeout Warning Event, cordoned, the pod untouched (nothing is forced);
/// `disableEviction` then deletes the pod past the budget (with `gracePeriod` 0), the node drains,
/// the rollout completes and the drain-start mark is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_config_bounds_the_drain_and_can_bypass_the_budget() {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let PdbHeld {
        ns,
        node,
        pods,
        _operator,
        ..
    } = pdb_held_interrupt(
        cluster,
        &client,
        "drain-config",
        Some(nodewright_shared::api::DrainConfig {
            timeout: Some("3s".into()),
            ..Default::default()
        }),
    )
    .await;
    let nodewrights = Api::<NodeWright>::all(client.clone());
    wait_nodewright(
        cluster,
        &client,
        &ns,
        "its node erroring: the drain timed out",
        |nw| nw.status.as_ref().and_then(|s| s.node_status.get(&node)) == Some(&Status::Erroring),
    )
    .await;
    let warning = wait_event(cluster, &client, &node, "DrainTimeout", "Node").await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(
        warning
            .message
            .as_deref()
            .is_some_and(|m| m.contains("did not drain within drainConfig.timeout (3s)")),
        "{warning:?}"
    );
    let n = Api::<Node>::all(client.clone())
        .get(&node)
        .await
        .expect("node");
    assert_eq!(
        n.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "still cordoned"
    );
    assert!(
        n.annotations()
            .contains_key(&nodewright_shared::keys::drain_start_key(&ns)),
        "the drain's start is on the node"
    );
    let db = pods.get("db-0").await.expect("db-0 still there");
    assert!(db.metadata.deletion_timestamp.is_none(), "nothing forced");

    // disableEviction: the pod is deleted past its budget, the node drains, the rollout completes.
    nodewrights
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"drainConfig": {"disableEviction": true, "gracePeriod": "0s"}}}),
            ),
        )
        .await
        .expect("drainConfig patched");
    wait_status(cluster, &client, &ns, Status::Complete).await;
    assert!(
        pods.get_opt("db-0").await.expect("get").is_none(),
        "db-0 deleted"
    );
    let n = wait_node(
        cluster,
        &client,
        &node,
        "uncordoned, its drain mark gone",
        |n| {
            n.spec.as_ref().and_then(|s| s.unschedulable) != Some(true)
                && !n
                    .annotations()
                    .contains_key(&nodewright_shared::keys::drain_start_key(&ns))
        },
    )
    .await;
    assert!(
        nodewright_core::node::cordon::claimants(&n)
            .next()
            .is_none()
    );
    tear_down(cluster, &client, &ns, &node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_administrators_cordon_outlives_an_interrupt_and_a_leftover_cordon_is_released() {
    let (cluster, client, ns) = scenario("cordons").await;
    let nodes = Api::<Node>::all(client.clone());
    let unschedulable = |n: &Node| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
    // Cordoned by an administrator before the NodeWright exists.
    let admin = format!("{ns}-admin");
    create_fake_node(&client, &admin, &[], json!([])).await;
    patch_node(&client, &admin, json!({"spec": {"unschedulable": true}})).await;
    // Schedulable: the NodeWright's own cordon comes and goes.
    let free = format!("{ns}-free");
    create_fake_node(&client, &free, &[], json!([])).await;
    // Held by the claim of a NodeWright that no longer exists (deleted without its finalizer).
    let leftover = format!("{ns}-leftover");
    let gone = format!("{ns}-gone");
    create_fake_node(&client, &leftover, &[], json!([])).await;
    patch_node(
        &client,
        &leftover,
        json!({"metadata": {"annotations": {keys::cordon_key(&gone): "true"}},
               "spec": {"unschedulable": true}}),
    )
    .await;

    let _operator = start_operator(client.clone(), &ns, None);
    let mut tuned = package("1.0.0", &[]);
    tuned.interrupt = interrupt(InterruptType::Service, &["tuned"]);
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(&[&admin, &free], [("tuned", tuned)]),
    )
    .await;
    wait_status(cluster, &client, &ns, Status::Complete).await;
    // The interrupt ran on both nodes: each was claimed, drained and released.
    for node in [&admin, &free] {
        let drained = wait_event(cluster, &client, node, "Interrupt", "Node").await;
        assert_eq!(
            drained.message.as_deref(),
            Some(format!("draining node [{node}] for [nodewright:{ns}]").as_str())
        );
        let n = nodes.get(node).await.expect("node");
        assert!(
            !n.annotations().contains_key(&keys::cordon_key(&ns)),
            "{node}: claim released"
        );
        assert!(
            !n.annotations()
                .contains_key(keys::CORDONED_BEFORE_ANNOTATION),
            "{node}: the record went with the last claim"
        );
    }
    assert!(
        unschedulable(&nodes.get(&admin).await.expect("node")),
        "the administrator's cordon stays after the interrupt"
    );
    assert!(
        !unschedulable(&nodes.get(&free).await.expect("node")),
        "the node the NodeWright cordoned is uncordoned"
    );

    // The leftover claim is released (the node was schedulable before it) with an Event.
    let released = wait_event(
        cluster,
        &client,
        &leftover,
        "LeftoverCordonReleased",
        "Node",
    )
    .await;
    assert_eq!(released.type_.as_deref(), Some("Warning"));
    assert!(
        released
            .message
            .as_deref()
            .is_some_and(|m| m.contains(&format!("NodeWright [{gone}]"))
                && m.ends_with("the node is uncordoned")),
        "{released:?}"
    );
    let n = nodes.get(&leftover).await.expect("node");
    assert!(!n.annotations().contains_key(&keys::cordon_key(&gone)));
    assert!(!unschedulable(&n));

    Api::<NodeWright>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("NodeWright deleted");
    wait_nodewright_gone(cluster, &client, &ns).await;
    for node in [&admin, &free, &leftover] {
        delete_node(&client, node).await;
    }
}
