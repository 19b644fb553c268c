//! The package lifecycle after the first install, end to end on the local control plane (real
//! kube-apiserver, etcd, the Job controller, kwok simulating the nodes). Each test runs its own
//! operator in-process, scoped by the label `nodewright.test/lifecycle` to its own NodeWright and
//! namespace, so the tests share this binary's cluster. The harness is the one of `e2e_rollout.rs`.
//!
//! (config) a configMap change of a completed package reruns its config stage on every node; a
//!     changed key matched by a configInterrupt (service) also runs that interrupt.
//! (uninstall) `uninstall.apply` runs the uninstall (and uninstall-interrupt) Jobs and drops the
//!     package from node state; deleting the NodeWright uninstalls the enabled packages, then lets
//!     the object go.
//! (j) an interrupt package cordons, waits on a podNonInterruptLabels pod, evicts a PDB-protected
//!     pod only once the PDB allows it, runs one merged interrupt, uncordons.
//! (cancel) `uninstall.apply` set back to false while the uninstall runs: its Job is stopped and the
//!     package installs again.
//! (reboot) with REAPPLY_ON_REBOOT, a reboot (new bootID) resets the node and everything is applied
//!     again; the boot ID is recorded in status.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use nodewright_e2e::PodFate;

mod support;
use nodewright_operator::JobHook;
use nodewright_shared::api::{
    Interrupt, InterruptType, InterruptionBudget, NodeWright, NodeWrightSpec, Status, Uninstall,
};
use nodewright_shared::keys;
use nodewright_shared::node_state::{Stage, State};
use serde_json::json;
use support::{
    BOUND, Operator, SuiteOperator, create_blocking_pdb, create_labelled_nodewright,
    create_workload_pod, interrupt, list_all, on_nodes, operator_client, package, patch_nodewright,
    scenario, spec_on, state_of, status_is, wait_gone, wait_nodewright, wait_nodewright_gone,
};

/// Label that scopes each test's operator to its own NodeWright (distinct from e2e_rollout's).
const SUITE_LABEL: &str = "nodewright.test/lifecycle";

fn start_operator(
    client: kube::Client,
    namespace: &str,
    suite: &str,
    hook: Option<JobHook>,
    extra_env: &[(&'static str, &str)],
) -> Operator {
    SuiteOperator::new(&client, namespace, SUITE_LABEL, suite)
        .env(extra_env)
        .hook(hook)
        .start()
}

async fn create_nodewright(client: &kube::Client, name: &str, spec: NodeWrightSpec) -> NodeWright {
    create_labelled_nodewright(client, SUITE_LABEL, name, spec).await
}

async fn get_node(client: &kube::Client, node: &str) -> Node {
    Api::<Node>::all(client.clone())
        .get(node)
        .await
        .expect("node")
}

/// Chooses the fate of a Job's pods (`None`: kwok's default, success).
type FateChooser = Arc<dyn Fn(&Job) -> Option<PodFate> + Send + Sync>;

/// Every Job the operator created, as (package label, stage, node), in creation order.
type Created = Arc<Mutex<Vec<(String, String, String)>>>;

/// A hook that logs every created Job (and applies `fate` to those it selects).
fn logging_hook(created: &Created, fate: Option<FateChooser>) -> JobHook {
    let log = created.clone();
    Arc::new(move |job: &mut Job| {
        let label = |k: &str| job.labels().get(k).cloned().unwrap_or_default();
        let entry = (
            label(keys::PACKAGE_LABEL),
            label(keys::STAGE_LABEL),
            job.spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|p| p.node_name.clone())
                .unwrap_or_default(),
        );
        log.lock().expect("log").push(entry);
        if let Some(f) = fate.as_ref().and_then(|f| f(job))
            && let Some(spec) = job.spec.as_mut()
        {
            f.apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    })
}

fn count(created: &Created, package: &str, stage: &str, node: &str) -> usize {
    created
        .lock()
        .expect("log")
        .iter()
        .filter(|(p, s, n)| p.starts_with(&format!("{package}-")) && s == stage && n == node)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_change_reruns_config_everywhere_and_a_config_interrupt_runs() {
    let (cluster, client, ns) = scenario("config").await;
    let nodes: Vec<String> = cluster.node_names()[..2].to_vec();
    let created: Created = Arc::default();
    let _operator = start_operator(
        client.clone(),
        &ns,
        &ns,
        Some(logging_hook(&created, None)),
        &[],
    );
    let mut cfg = package("1.0.0", &[]);
    cfg.config_map = BTreeMap::from([
        ("settings".to_owned(), "a=1".to_owned()),
        ("containerd.toml".to_owned(), "x=1".to_owned()),
    ]);
    cfg.config_interrupts = BTreeMap::from([(
        "*.toml".to_owned(),
        Interrupt {
            kind: InterruptType::Service,
            services: vec!["containerd".into()],
        },
    )]);
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    create_nodewright(
        &client,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&names),
            packages: BTreeMap::from([("cfg".to_owned(), cfg)]),
            // One node at a time: config reruns go through the budget too (DESIGN §5).
            interruption_budget: Some(InterruptionBudget {
                count: Some(1),
                percent: None,
            }),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    wait_nodewright(cluster, &client, &ns, "complete", |nw| {
        status_is(nw, Status::Complete)
    })
    .await;
    for node in &nodes {
        assert_eq!(count(&created, "cfg", "config", node), 1);
    }
    let first_hash = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{}=config", keys::STAGE_LABEL)))
        .await
        .expect("jobs")
        .items
        .first()
        .and_then(template_hash);
    assert!(
        first_hash.is_some(),
        "the first config Job carries its hash"
    );

    // A key no configInterrupt matches: config only, on every node.
    patch_nodewright(
        &client,
        &ns,
        json!({"spec": {"packages": {"cfg": {"configMap": {"settings": "a=2"}}}}}),
    )
    .await;
    let nw = wait_nodewright(cluster, &client, &ns, "config rerun on every node", |nw| {
        status_is(nw, Status::Complete)
            && nodes
                .iter()
                .all(|n| count(&created, "cfg", "config", n) == 2)
    })
    .await;
    assert_eq!(
        nw.status.as_ref().and_then(|s| s.config_updates.get("cfg")),
        Some(&vec!["settings".to_owned()])
    );
    // The reruns went one node after the other: the later one started after the earlier finished.
    let config_jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{}=config", keys::STAGE_LABEL)))
        .await
        .expect("jobs")
        .items;
    assert_eq!(config_jobs.len(), 2, "the reruns' Jobs, one per node");
    let created_at = |j: &Job| j.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let completed_at = |j: &Job| {
        j.status
            .as_ref()
            .and_then(|s| s.completion_time.as_ref())
            .map(|t| t.0)
    };
    let (first, second) = if created_at(&config_jobs[0]) <= created_at(&config_jobs[1]) {
        (&config_jobs[0], &config_jobs[1])
    } else {
        (&config_jobs[1], &config_jobs[0])
    };
    assert!(
        created_at(second) >= completed_at(first),
        "config reruns overlapped despite a budget of one node"
    );
    assert!(
        created
            .lock()
            .expect("log")
            .iter()
            .all(|(_, s, _)| s != "interrupt"),
        "no interrupt for a key without a configInterrupt"
    );
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{}={ns}", keys::NAME_LABEL)))
        .await
        .expect("configmaps")
        .items
        .into_iter()
        .find(|c| c.data.as_ref().is_some_and(|d| d.contains_key("settings")))
        .expect("package ConfigMap");
    assert_eq!(
        cm.data
            .as_ref()
            .and_then(|d| d.get("settings"))
            .map(String::as_str),
        Some("a=2")
    );
    // The reruns were built from the new content (their template hash covers the ConfigMap's).
    let rerun_hashes: std::collections::BTreeSet<Option<String>> =
        config_jobs.iter().map(template_hash).collect();
    assert_eq!(rerun_hashes.len(), 1, "one content on every node");
    assert!(
        !rerun_hashes.contains(&first_hash),
        "the reruns carry the updated content's hash, not the first config's"
    );

    // A key matched by the service configInterrupt: config, then the interrupt, then post-interrupt.
    patch_nodewright(
        &client,
        &ns,
        json!({"spec": {"packages": {"cfg": {"configMap": {"containerd.toml": "x=2"}}}}}),
    )
    .await;
    let nw = wait_nodewright(
        cluster,
        &client,
        &ns,
        "config and interrupt on every node",
        |nw| {
            status_is(nw, Status::Complete)
                && nodes.iter().all(|n| {
                    count(&created, "cfg", "config", n) == 3
                        && count(&created, "cfg", "interrupt", n) == 1
                        && count(&created, "cfg", "post-interrupt", n) == 1
                })
        },
    )
    .await;
    assert_eq!(
        nw.status.as_ref().and_then(|s| s.config_updates.get("cfg")),
        Some(&vec!["containerd.toml".to_owned()])
    );
    for node in &nodes {
        let n = get_node(&client, node).await;
        let r = state_of(&n, &ns).expect("state");
        let r = r.get("cfg", "1.0.0").expect("record");
        assert_eq!(
            (r.stage, r.state),
            (Stage::PostInterrupt, Some(State::Complete))
        );
        assert!(
            !n.annotations().contains_key(&keys::cordon_key(&ns)),
            "uncordoned"
        );
    }
    let interrupts = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{}=True", keys::INTERRUPT_LABEL)))
        .await
        .expect("jobs")
        .items;
    let args: Vec<String> = interrupts
        .iter()
        .flat_map(|j| j.spec.iter())
        .flat_map(|s| s.template.spec.iter())
        .flat_map(|p| p.init_containers.iter().flatten())
        .flat_map(|c| c.args.iter().flatten().cloned())
        .collect();
    assert!(
        args.iter().any(|a| a == "interrupt"),
        "interrupt Jobs run the agent's interrupt mode: {args:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_apply_removes_the_package_and_deletion_uninstalls_before_going() {
    let (cluster, client, ns) = scenario("uninstall").await;
    let nodes: Vec<String> = cluster.node_names()[..2].to_vec();
    let created: Created = Arc::default();
    let _operator = start_operator(
        client.clone(),
        &ns,
        &ns,
        Some(logging_hook(&created, None)),
        &[],
    );
    let enabled = Some(Uninstall {
        enabled: true,
        apply: false,
    });
    let mut gone = package("1.0.0", &[]);
    gone.uninstall = enabled.clone();
    gone.interrupt = interrupt(InterruptType::Noop, &[]);
    let mut keep = package("2.0.0", &[]);
    keep.uninstall = enabled;
    let plain = package("3.0.0", &[]);
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    create_nodewright(
        &client,
        &ns,
        spec_on(&names, [("gone", gone), ("keep", keep), ("plain", plain)]),
    )
    .await;
    wait_nodewright(cluster, &client, &ns, "complete", |nw| {
        status_is(nw, Status::Complete)
    })
    .await;

    // uninstall.apply: uninstall, then (it has an interrupt) uninstall-interrupt; the record goes.
    patch_nodewright(
        &client,
        &ns,
        json!({"spec": {"packages": {"gone": {"uninstall": {"enabled": true, "apply": true}}}}}),
    )
    .await;
    let uninstalled = |nw: &NodeWright| {
        status_is(nw, Status::Complete)
            && nw.status.as_ref().is_some_and(|s| {
                nodes.iter().all(|n| {
                    s.node_state
                        .get(n)
                        .is_some_and(|st| st.get("gone", "1.0.0").is_none())
                })
            })
    };
    wait_nodewright(cluster, &client, &ns, "gone uninstalled", uninstalled).await;
    for node in &nodes {
        assert_eq!(count(&created, "gone", "uninstall", node), 1, "{node}");
        assert_eq!(
            count(&created, "gone", "uninstall-interrupt", node),
            1,
            "{node}"
        );
        let state = state_of(&get_node(&client, node).await, &ns).expect("state");
        assert!(state.get("gone", "1.0.0").is_none(), "{node}: {state:?}");
        assert!(state.get("keep", "2.0.0").is_some());
        assert_eq!(count(&created, "keep", "uninstall", node), 0);
    }

    // Removing the uninstalled package from the spec: nothing left to do.
    Api::<NodeWright>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(json!([{"op": "remove", "path": "/spec/packages/gone"}]))
                    .expect("patch"),
            ),
        )
        .await
        .expect("package removed");
    wait_nodewright(cluster, &client, &ns, "complete without gone", |nw| {
        status_is(nw, Status::Complete)
            && nw.status.as_ref().map(|s| s.package_list.as_str()) == Some("keep:2.0.0,plain:3.0.0")
    })
    .await;

    // Deletion of a paused NodeWright with an uninstall pending: blocked (and said so) until resumed.
    patch_nodewright(
        &client,
        &ns,
        json!({"metadata": {"annotations": {keys::PAUSE_ANNOTATION: "true"}}}),
    )
    .await;
    wait_nodewright(cluster, &client, &ns, "paused", |nw| {
        status_is(nw, Status::Paused)
    })
    .await;
    Api::<NodeWright>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete");
    wait_nodewright(cluster, &client, &ns, "DeletionBlocked", |nw| {
        nw.status.iter().flat_map(|s| &s.conditions).any(|c| {
            c.type_ == "DeletionBlocked"
                && c.status == "True"
                && c.reason == "PausedWithPendingUninstall"
        })
    })
    .await;
    for node in &nodes {
        assert_eq!(
            count(&created, "keep", "uninstall", node),
            0,
            "paused: no work"
        );
    }
    // Resumed: the enabled package is uninstalled on every node, then the object goes.
    patch_nodewright(
        &client,
        &ns,
        json!({"metadata": {"annotations": {keys::PAUSE_ANNOTATION: null}}}),
    )
    .await;
    wait_nodewright_gone(cluster, &client, &ns).await;
    for node in &nodes {
        assert_eq!(count(&created, "keep", "uninstall", node), 1, "{node}");
        assert_eq!(count(&created, "plain", "uninstall", node), 0, "{node}");
        let n = get_node(&client, node).await;
        let state = state_of(&n, &ns).expect("the node state stays as the record");
        assert!(state.get("keep", "2.0.0").is_none(), "{node}: {state:?}");
        assert!(
            state.get("plain", "3.0.0").is_some(),
            "{node}: never uninstalled"
        );
        assert!(!n.labels().contains_key(&keys::node_status_key(&ns)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn j_interrupt_waits_for_non_interrupt_pods_and_the_pdb() {
    let (cluster, client, ns) = scenario("nonint").await;
    // Node 2 is this test's alone: another NodeWright's drain would evict its workload pods.
    let node = cluster.node_names()[2].clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for (name, app) in [("training", "training"), ("web", "web")] {
        create_workload_pod(&client, &ns, name, app, &node).await;
    }
    // The disruption controller must have counted the healthy pod before evictions are decided.
    let pdbs = create_blocking_pdb(cluster, &client, &ns, "web").await;

    let created: Created = Arc::default();
    // The binary's client: how it takes the PDB's 429 is part of what is tested.
    let _operator = start_operator(
        operator_client().await,
        &ns,
        &ns,
        Some(logging_hook(&created, None)),
        &[],
    );
    let mut a = package("1.0.0", &[]);
    a.interrupt = interrupt(InterruptType::Service, &["containerd"]);
    let mut b = package("1.0.0", &[]);
    b.interrupt = interrupt(InterruptType::Service, &["kubelet"]);
    create_nodewright(
        &client,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&[&node]),
            pod_non_interrupt_labels: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".into(), "training".into())])),
                match_expressions: None,
            }),
            packages: BTreeMap::from([("svca".to_owned(), a), ("svcb".to_owned(), b)]),
            ..NodeWrightSpec::default()
        },
    )
    .await;

    let cordoned = || {
        let client = client.clone();
        let node = node.clone();
        let ns = ns.clone();
        async move {
            let n = get_node(&client, &node).await;
            n.annotations().contains_key(&keys::cordon_key(&ns))
                && n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
        }
    };
    cluster
        .wait_for("the node cordoned", BOUND, || {
            let c = cordoned();
            async move { Ok(c.await.then_some(())) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Held by the training pod: nothing evicted, no Job at all (the packages need a drained node).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    assert!(
        list_all(&jobs).await.is_empty(),
        "no Job while a podNonInterruptLabels pod runs"
    );
    let web = pods.get("web").await.expect("web still there");
    assert!(
        web.metadata.deletion_timestamp.is_none(),
        "nothing evicted yet"
    );

    pods.delete("training", &DeleteParams::default().grace_period(0))
        .await
        .expect("training pod deleted");
    cluster
        .wait_for("training pod gone", BOUND, || {
            let pods = pods.clone();
            async move {
                Ok(pods
                    .get_opt("training")
                    .await
                    .map_err(|e| cluster.kube_error("pod".into(), e))?
                    .is_none()
                    .then_some(()))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The PDB refuses the eviction of the only web pod: still no Job.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let web = pods.get("web").await.expect("web still there (PDB)");
    assert!(
        web.metadata.deletion_timestamp.is_none(),
        "eviction refused by the PDB"
    );
    assert!(
        list_all(&jobs).await.is_empty(),
        "no Job before the node is drained"
    );

    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 0}})),
    )
    .await
    .expect("PDB relaxed");
    wait_nodewright(cluster, &client, &ns, "complete", |nw| {
        status_is(nw, Status::Complete)
    })
    .await;
    assert!(
        pods.get_opt("web").await.expect("get").is_none(),
        "web evicted"
    );
    let interrupts: Vec<_> = created
        .lock()
        .expect("log")
        .iter()
        .filter(|(_, s, _)| s == "interrupt")
        .cloned()
        .collect();
    assert_eq!(interrupts.len(), 1, "one merged interrupt: {interrupts:?}");
    let n = get_node(&client, &node).await;
    assert!(!n.annotations().contains_key(&keys::cordon_key(&ns)));
    // Should another NodeWright hold a cordon here, the node rightly stays cordoned.
    let others = n
        .annotations()
        .iter()
        .any(|(k, v)| k.starts_with(&keys::cordon_key("")) && v == "true");
    assert!(
        others || n.spec.as_ref().and_then(|s| s.unschedulable) != Some(true),
        "uncordoned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_with_reapply_on_reboot_applies_everything_again() {
    let (cluster, client, ns) = scenario("reboot").await;
    // Not node 2: its drain would evict test (j)'s workload pods.
    let node = cluster.node_names()[0].clone();
    let created: Created = Arc::default();
    // The first interrupt reboots the node (kwok changes its bootID); later ones just succeed.
    let rebooted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fate: FateChooser = Arc::new(move |job: &Job| {
        let interrupt =
            job.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some("interrupt");
        (interrupt && !rebooted.swap(true, std::sync::atomic::Ordering::SeqCst))
            .then(|| PodFate::reboot().delay("1s"))
    });
    let _operator = start_operator(
        client.clone(),
        &ns,
        &ns,
        Some(logging_hook(&created, Some(fate))),
        &[("REAPPLY_ON_REBOOT", "true")],
    );
    let before = get_node(&client, &node)
        .await
        .status
        .and_then(|s| s.node_info)
        .map(|i| i.boot_id)
        .expect("boot ID");
    let mut boot = package("1.0.0", &[]);
    boot.interrupt = interrupt(InterruptType::Reboot, &[]);
    create_nodewright(&client, &ns, spec_on(&[&node], [("boot", boot)])).await;
    let nw = wait_nodewright(cluster, &client, &ns, "complete after the reapply", |nw| {
        status_is(nw, Status::Complete) && count(&created, "boot", "apply", &node) == 2
    })
    .await;
    let after = get_node(&client, &node)
        .await
        .status
        .and_then(|s| s.node_info)
        .map(|i| i.boot_id)
        .expect("boot ID");
    assert_ne!(before, after, "the node rebooted");
    assert_eq!(
        nw.status.as_ref().and_then(|s| s.node_boot_ids.get(&node)),
        Some(&after),
        "the new boot ID is recorded"
    );
    assert_eq!(count(&created, "boot", "interrupt", &node), 2);
    let state = state_of(&get_node(&client, &node).await, &ns).expect("state");
    let r = state.get("boot", "1.0.0").expect("record");
    assert_eq!(
        (r.stage, r.state),
        (Stage::PostInterrupt, Some(State::Complete))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_an_uninstall_installs_again() {
    let (cluster, client, ns) = scenario("cancel").await;
    let node = cluster.node_names()[1].clone();
    let created: Created = Arc::default();
    // The uninstall hangs, so it is still running when it is cancelled.
    let fate: FateChooser = Arc::new(|job: &Job| {
        (job.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some("uninstall"))
            .then(PodFate::hang)
    });
    let _operator = start_operator(
        client.clone(),
        &ns,
        &ns,
        Some(logging_hook(&created, Some(fate))),
        &[],
    );
    let mut pkg = package("1.0.0", &[]);
    pkg.uninstall = Some(Uninstall {
        enabled: true,
        apply: false,
    });
    create_nodewright(&client, &ns, spec_on(&[&node], [("pkg", pkg)])).await;
    wait_nodewright(cluster, &client, &ns, "complete", |nw| {
        status_is(nw, Status::Complete)
    })
    .await;
    patch_nodewright(
        &client,
        &ns,
        json!({"spec": {"packages": {"pkg": {"uninstall": {"enabled": true, "apply": true}}}}}),
    )
    .await;
    wait_nodewright(cluster, &client, &ns, "UninstallInProgress", |nw| {
        nw.status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.type_ == "UninstallInProgress" && c.status == "True")
    })
    .await;
    assert_eq!(count(&created, "pkg", "uninstall", &node), 1);
    patch_nodewright(
        &client,
        &ns,
        json!({"spec": {"packages": {"pkg": {"uninstall": {"enabled": true, "apply": false}}}}}),
    )
    .await;
    let nw = wait_nodewright(cluster, &client, &ns, "installed again", |nw| {
        status_is(nw, Status::Complete) && count(&created, "pkg", "apply", &node) == 2
    })
    .await;
    assert!(
        !nw.status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.type_ == "UninstallInProgress"),
        "the condition is gone"
    );
    let state = state_of(&get_node(&client, &node).await, &ns).expect("state");
    let r = state.get("pkg", "1.0.0").expect("record");
    assert_eq!((r.stage, r.state), (Stage::Config, Some(State::Complete)));
    // The hanging uninstall Job was stopped.
    let uninstalls = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{}=uninstall", keys::STAGE_LABEL)))
        .await
        .expect("jobs")
        .items;
    assert!(
        uninstalls
            .iter()
            .all(|j| j.metadata.deletion_timestamp.is_some()),
        "{:?}",
        uninstalls.iter().map(|j| j.name_any()).collect::<Vec<_>>()
    );
}

/// The Job's template hash (what its pods run, the package ConfigMap's content included).
fn template_hash(job: &Job) -> Option<String> {
    job.annotations()
        .get(keys::TEMPLATE_HASH_ANNOTATION)
        .cloned()
}

/// The ConfigMap a Job's pods mount as `volume`.
fn mounted_configmap(job: &Job, volume: &str) -> Option<String> {
    job.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == volume)?
        .config_map
        .as_ref()
        .map(|c| c.name.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_names_never_collide_and_old_names_are_cleaned_up() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let (cluster, client, ns) = scenario("collide").await;
    let node = cluster.node_names()[0].clone();
    // NodeWright `<ns>` with package `bb-cc` and `<ns>-bb` with package `cc`: upstream's names
    // `<nw>-<pkg>-<ver>` were the same, `<ns>-bb-cc-1.0.0`.
    let (a, b) = (ns.clone(), format!("{ns}-bb"));
    let mut created = Vec::new();
    for (nw, key, content) in [(&a, "bb-cc", "from-a"), (&b, "cc", "from-b")] {
        let mut pkg = package("1.0.0", &[]);
        pkg.config_map = BTreeMap::from([("f".to_owned(), content.to_owned())]);
        let spec = NodeWrightSpec {
            priority: nodewright_shared::api::DEFAULT_PRIORITY,
            node_selectors: on_nodes(&[&node]),
            packages: BTreeMap::from([(key.to_owned(), pkg)]),
            ..NodeWrightSpec::default()
        };
        let mut object = NodeWright::new(nw, spec);
        object.metadata.labels = Some(BTreeMap::from([(SUITE_LABEL.to_owned(), ns.clone())]));
        created.push(
            Api::<NodeWright>::all(client.clone())
                .create(&kube::api::PostParams::default(), &object)
                .await
                .expect("NodeWright created"),
        );
    }
    // What an earlier operator left: `a`'s package and node-metadata ConfigMaps under the old
    // names, owned and labelled as it wrote them.
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let legacy_package = format!("{a}-bb-cc-1.0.0");
    let legacy_meta = format!("{a}-{node}-metadata").replace('.', "-");
    let owner = json!([{"apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
        "name": a, "uid": created[0].metadata.uid, "controller": true}]);
    for (name, labels, data) in [
        (
            &legacy_package,
            json!({keys::NAME_LABEL: a}),
            json!({"f": "from-a"}),
        ),
        (
            &legacy_meta,
            json!({keys::NAME_LABEL: a, "nodewright.nvidia.com/node-meta": a}),
            json!({"packages.json": "{}"}),
        ),
    ] {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels, "ownerReferences": owner},
            "data": data,
        }))
        .expect("configmap");
        configmaps
            .create(&kube::api::PostParams::default(), &cm)
            .await
            .expect("old-named ConfigMap created");
    }

    // The upgraded operator takes over both NodeWrights.
    let _operator = start_operator(client.clone(), &ns, &ns, None, &[]);
    for nw in [&a, &b] {
        wait_nodewright(cluster, &client, nw, "complete", |nw| {
            status_is(nw, Status::Complete)
        })
        .await;
    }
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items;
    let mut mounted = BTreeMap::new();
    for (nw, content) in [(&a, "from-a"), (&b, "from-b")] {
        let own: Vec<&Job> = jobs
            .iter()
            .filter(|j| j.labels().get(keys::NAME_LABEL) == Some(nw))
            .collect();
        assert!(!own.is_empty(), "{nw} ran Jobs");
        for job in own {
            let package_cm = mounted_configmap(job, "package-configmap").expect("package volume");
            let meta_cm = mounted_configmap(job, "node-metadata").expect("metadata volume");
            assert_ne!(package_cm, legacy_package, "an old name is never reused");
            assert_ne!(meta_cm, legacy_meta, "an old name is never reused");
            let cm = configmaps
                .get(&package_cm)
                .await
                .expect("package ConfigMap");
            assert_eq!(
                cm.data
                    .as_ref()
                    .and_then(|d| d.get("f"))
                    .map(String::as_str),
                Some(content),
                "{nw} mounts its own files"
            );
            mounted.insert((nw.clone(), "package"), package_cm);
            mounted.insert((nw.clone(), "meta"), meta_cm);
        }
    }
    assert_ne!(
        mounted[&(a.clone(), "package")],
        mounted[&(b.clone(), "package")]
    );
    assert_ne!(mounted[&(a.clone(), "meta")], mounted[&(b.clone(), "meta")]);
    // The old-named ConfigMaps go once no unfinished Job can mount them.
    let configmaps = &configmaps;
    for old in [&legacy_package, &legacy_meta] {
        wait_gone(cluster, configmaps, old).await;
    }
    for nw in [&a, &b] {
        Api::<NodeWright>::all(client.clone())
            .delete(nw, &DeleteParams::default())
            .await
            .expect("NodeWright deleted");
        wait_nodewright_gone(cluster, &client, nw).await;
    }
}
