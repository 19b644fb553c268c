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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use nodewright_e2e::PodFate;
use nodewright_operator::JobHook;
use nodewright_shared::api::{NodeWright, NodeWrightSpec, Package, Status, Uninstall};
use nodewright_shared::keys;
use serde_json::json;

mod support;
use support::{
    BOUND, Operator, cluster, condition, condition_is, create_fake_node,
    create_labelled_nodewright, delete_node, job_package, on_nodes, operator_env, package,
    patch_node, patch_nodewright, spawn_operator, status_is, wait_nodewright, wait_nodewright_gone,
    wait_status,
};

/// Label that scopes each test's operator to its own NodeWright.
const SUITE_LABEL: &str = "nodewright.test/conditions";

fn start_operator(client: kube::Client, namespace: &str, hook: Option<JobHook>) -> Operator {
    let env = operator_env(namespace, format!("operator-{namespace}"), 1);
    spawn_operator(
        client,
        &env,
        format!("{SUITE_LABEL}={namespace}"),
        hook,
        None,
    )
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
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let ns = cluster.create_namespace("taints").await.expect("namespace");
    let (tainted, ignored) = (format!("{ns}-tainted"), format!("{ns}-ignored"));
    create_fake_node(
        &client,
        &tainted,
        &[],
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    )
    .await;
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
        NodeWrightSpec {
            node_selectors: on_nodes(&[&tainted, &ignored]),
            packages: BTreeMap::from([("pkg".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
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
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let ns = cluster
        .create_namespace("uninstall-fails")
        .await
        .expect("namespace");
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
        NodeWrightSpec {
            node_selectors: on_nodes(&[&node]),
            packages: BTreeMap::from([
                ("base".to_owned(), uninstallable("1.0.0")),
                ("dep".to_owned(), dependent),
            ]),
            ..NodeWrightSpec::default()
        },
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
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let ns = cluster
        .create_namespace("malformed")
        .await
        .expect("namespace");
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
        NodeWrightSpec {
            node_selectors: on_nodes(&[&node]),
            packages: BTreeMap::from([("keep".to_owned(), uninstallable("1.0.0"))]),
            ..NodeWrightSpec::default()
        },
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
    let events = cluster
        .wait_for("the Warning Event", BOUND, || {
            let api: Api<Event> = Api::all(client.clone());
            let ns = ns.clone();
            async move {
                let found = api
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| cluster.kube_error("events".into(), e))?
                    .items
                    .into_iter()
                    .filter(|e| {
                        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(ns.as_str())
                            && e.reason.as_deref() == Some("MalformedNodeState")
                    })
                    .collect::<Vec<_>>();
                Ok((!found.is_empty()).then_some(found))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
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
