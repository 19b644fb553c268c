//! `kubectl-nodewright` end to end (the CLI's suite, kept in the harness crate so that the CLI
//! itself never depends on the operator it runs beside here): the real binary, run as a user runs it (no terminal on stdin,
//! the cluster's kubeconfig), against the local control plane with an operator running. One
//! cluster for the whole suite; each test has its own namespace (the operator's), its own fake
//! nodes, its own NodeWrights and its own in-process operator scoped to them.
//!
//! - `plan` previews the batches, and the operator then starts the nodes in exactly that order;
//! - `why` explains a timed-out stage from its evidence, `package logs` shows the attempts' logs
//!   (kwok serves them from a file through the real log API) and then the last-logs snapshot once
//!   the pods are gone, `package rerun` clears it;
//! - lifecycle, node and reset commands write only when confirmed (`-y`, a real terminal), refuse
//!   without a terminal, and write nothing with `--dry-run`; every output format parses;
//! - bad input (unknown NodeWright, a pattern matching no node, a stage the package does not have,
//!   an unreachable cluster) is refused with a clear error, exit status 1, nothing written;
//! - `migrate-from-skyhook` converts upstream objects and node records, and the operator then
//!   runs nothing that was already installed;
//! - `node update-state` writes one package record as told (refusing a stage the package does not
//!   have, and confirming first), and `package reset` forgets it on every node that has one;
//! - `history` lists the revisions the operator recorded (what each changed, the current one),
//!   `rollback` shows what it changes, writes nothing with `--dry-run` or without a
//!   confirmation, refuses an unknown or current revision, and with `-y` writes the revision
//!   back; the operator then brings the nodes back and the restored spec is the newest revision;
//! - `version`, `completion`, every command's `--help`, and `kubectl nodewright` through kubectl.

#[path = "../../../operator/tests/support/mod.rs"]
mod support;

#[path = "cli_common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{
    FirstJobs, LogGiver, Run, append_cri_log, cli, node_marks, run_binary, write_cri_log,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nodewright_e2e::{Cluster, PodFate};
use nodewright_operator::JobHook;
use nodewright_shared::api::{
    DeploymentBudget, DeploymentPolicy, DeploymentPolicySpec, DeploymentStrategy, Interrupt,
    InterruptType, LinearStrategy, NodeWright, NodeWrightSpec, PolicyDefault, Status,
};
use nodewright_shared::keys;
use serde_json::{Value, json};
use support::{
    BOUND, Operator, cluster, create_fake_node, operator_env, package, spawn_operator,
    wait_nodewright, wait_status, wait_timed_out_job,
};

/// The label scoping each test's NodeWrights to its own operator.
const SUITE: &str = "cli.nodewright.test/suite";
/// The label grouping each test's fake nodes.
const POOL: &str = "cli.nodewright.test/pool";

/// An operator reconciling only the NodeWrights named `names`, Jobs in `namespace`.
fn operator(
    client: &kube::Client,
    namespace: &str,
    names: &[&str],
    backoff_limit: i32,
    hook: Option<JobHook>,
) -> Operator {
    let env = operator_env(namespace, format!("operator-{}", names[0]), backoff_limit);
    spawn_operator(
        client.clone(),
        &env,
        format!("{SUITE} in ({})", names.join(",")),
        hook,
        None,
    )
}

/// What most tests start from: a client, a namespace for the operator and `count` fake nodes in
/// the pool `name`.
struct Ground {
    client: kube::Client,
    ns: String,
    nodes: Vec<String>,
}

async fn ground(cluster: &Cluster, name: &str, count: usize) -> Ground {
    let client = cluster.client().await.expect("client");
    let ns = cluster.create_namespace(name).await.expect("namespace");
    let nodes = pool(&client, name, count).await;
    Ground { client, ns, nodes }
}

/// Creates the fake nodes `<pool>-0..count-1` labelled with the pool; returns their names.
async fn pool(client: &kube::Client, pool: &str, count: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..count {
        let name = format!("{pool}-{i}");
        create_fake_node(client, &name, &[(POOL, pool)], json!([])).await;
        names.push(name);
    }
    names
}

/// A NodeWright on the nodes of `pool`, labelled for its operator, with `annotations`.
async fn create_nodewright(
    client: &kube::Client,
    name: &str,
    pool: &str,
    spec: NodeWrightSpec,
    annotations: &[(&str, &str)],
) -> NodeWright {
    let spec = NodeWrightSpec {
        priority: nodewright_shared::api::DEFAULT_PRIORITY,
        node_selectors: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(POOL.to_owned(), pool.to_owned())])),
            match_expressions: None,
        }),
        ..spec
    };
    let mut nw = NodeWright::new(name, spec);
    nw.metadata.labels = Some(BTreeMap::from([(SUITE.to_owned(), name.to_owned())]));
    nw.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    Api::<NodeWright>::all(client.clone())
        .create(&PostParams::default(), &nw)
        .await
        .expect("NodeWright created")
}

/// A DeploymentPolicy: budget `count`, linear from `initial` by 1.
async fn create_policy(client: &kube::Client, name: &str, count: i32, initial: i32) {
    let policy = DeploymentPolicy::new(
        name,
        DeploymentPolicySpec {
            default: PolicyDefault {
                budget: DeploymentBudget {
                    count: Some(count),
                    percent: None,
                },
                strategy: DeploymentStrategy {
                    linear: Some(LinearStrategy {
                        batch: nodewright_shared::api::BatchParameters {
                            initial_batch: Some(initial),
                            ..Default::default()
                        },
                        delta: Some(1),
                    }),
                    ..DeploymentStrategy::default()
                },
            },
            ..DeploymentPolicySpec::default()
        },
    );
    Api::<DeploymentPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("policy created");
}

/// Waits until every node of `nodes` is complete for the NodeWright `name`.
async fn wait_nodes_complete(cluster: &Cluster, client: &kube::Client, name: &str, nodes: &[&str]) {
    wait_nodewright(cluster, client, name, "the nodes complete", |nw| {
        nw.status.as_ref().is_some_and(|s| {
            nodes
                .iter()
                .all(|n| s.node_status.get(*n) == Some(&Status::Complete))
        })
    })
    .await;
}

/// Waits until every node of `nodes` records `package` complete at `config` for the NodeWright
/// `name` (read from the nodes: the NodeWright's status may still show an earlier pass).
async fn wait_installed(
    cluster: &Cluster,
    client: &kube::Client,
    name: &str,
    package: &str,
    nodes: &[&str],
) {
    let api = Api::<Node>::all(client.clone());
    let api = &api;
    cluster
        .wait_for(
            &format!("{package} installed again on {nodes:?}"),
            BOUND,
            || async move {
                for n in nodes {
                    let node = api
                        .get(n)
                        .await
                        .map_err(|e| cluster.kube_error(format!("get {n}"), e))?;
                    let installed = support::state_of(&node, name).is_some_and(|s| {
                        s.iter().any(|r| {
                            r.name == package
                                && r.stage == nodewright_shared::node_state::Stage::Config
                                && r.state == Some(nodewright_shared::node_state::State::Complete)
                        })
                    });
                    // And the operator has marked the node complete again.
                    let marked = node
                        .annotations()
                        .get(&keys::node_status_key(name))
                        .map(String::as_str)
                        == Some(Status::Complete.as_str());
                    if !installed || !marked {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The annotation `key` of the NodeWright `name`.
async fn nw_annotation(client: &kube::Client, name: &str, key: &str) -> Option<String> {
    Api::<NodeWright>::all(client.clone())
        .get(name)
        .await
        .expect("NodeWright")
        .annotations()
        .get(key)
        .cloned()
}

/// The batches of a `plan -o json` output: per compartment, each batch's nodes.
fn planned_batches(plan: &Value) -> Vec<Vec<String>> {
    plan["compartments"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["batches"].as_array().cloned().unwrap_or_default())
        .map(|b| {
            b["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .collect()
}

/// The node entry `name` of a `plan -o json` output.
fn planned_node<'a>(plan: &'a Value, name: &str) -> &'a Value {
    plan["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["name"] == name))
        .unwrap_or_else(|| panic!("node {name} in the plan: {plan:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_previews_the_batches_the_operator_then_runs() {
    let cluster = cluster().await;
    let name = "cli-plan";
    let Ground { client, ns, nodes } = ground(cluster, name, 4).await;
    create_fake_node(
        &client,
        "cli-plan-ignored",
        &[(POOL, name), (keys::IGNORE_LABEL, "true")],
        json!([]),
    )
    .await;
    create_fake_node(
        &client,
        "cli-plan-tainted",
        &[(POOL, name)],
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    )
    .await;
    // A budget of 2 nodes; batches of 1, then 2, then what is left.
    create_policy(&client, name, 2, 1).await;
    let mut driver = package("2.0.0", &[("base", "1.0.0")]);
    driver.interrupt = Some(Interrupt {
        kind: InterruptType::Reboot,
        services: vec![],
    });
    // Created paused: the preview is taken before anything runs.
    create_nodewright(
        &client,
        name,
        name,
        NodeWrightSpec {
            deployment_policy: Some(name.into()),
            packages: BTreeMap::from([
                ("base".to_owned(), package("1.0.0", &[])),
                ("driver".to_owned(), driver),
            ]),
            ..NodeWrightSpec::default()
        },
        &[(keys::PAUSE_ANNOTATION, "true")],
    )
    .await;
    // A node an earlier NodeWright (priority 100, paused) is not done with: it holds it back.
    create_fake_node(&client, "cli-plan-held", &[(POOL, name)], json!([])).await;
    let mut first = NodeWright::new(
        "cli-plan-first",
        NodeWrightSpec {
            priority: 100,
            node_selectors: support::on_nodes(&["cli-plan-held"]),
            packages: BTreeMap::from([("base".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
    );
    first.metadata.labels = Some(BTreeMap::from([(
        SUITE.to_owned(),
        "cli-plan-first".to_owned(),
    )]));
    first.metadata.annotations = Some(BTreeMap::from([(
        keys::PAUSE_ANNOTATION.to_owned(),
        "true".to_owned(),
    )]));
    Api::<NodeWright>::all(client.clone())
        .create(&PostParams::default(), &first)
        .await
        .expect("NodeWright created");
    let first_jobs = FirstJobs::start(client.clone(), &ns);
    let _operator = operator(&client, &ns, &[name, "cli-plan-first"], 3, None);
    wait_status(cluster, &client, name, Status::Paused).await;
    wait_status(cluster, &client, "cli-plan-first", Status::Paused).await;

    let plan = sh(cluster, &ns, &format!("plan {name} -o json"))
        .await
        .json();
    assert_eq!(plan["paused"], true);
    assert_eq!(plan["compartments"][0]["strategy"], "linear");
    assert_eq!(plan["compartments"][0]["ceiling"], 2);
    let batches = planned_batches(&plan);
    assert_eq!(
        batches,
        [
            vec![nodes[0].clone()],
            vec![nodes[1].clone(), nodes[2].clone()],
            vec![nodes[3].clone()]
        ],
        "{plan:#}"
    );
    let first = planned_node(&plan, &nodes[0]);
    assert_eq!(first["batch"], 1);
    assert_eq!(first["status"], "paused");
    assert_eq!(first["blockers"][0]["reason"], "paused");
    assert!(
        first["drain"] == true && first["reboot"] == true,
        "{first:#}"
    );
    let stages: Vec<String> = first["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            format!(
                "{}:{}",
                s["package"].as_str().unwrap_or(""),
                s["stage"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        stages,
        [
            "base:apply",
            "base:config",
            "driver:apply",
            "driver:config",
            "driver:interrupt",
            "driver:post-interrupt"
        ]
    );
    let ignored = planned_node(&plan, "cli-plan-ignored");
    assert_eq!(ignored["blockers"][0]["reason"], "ignored");
    assert!(ignored["batch"].is_null());
    let tainted = planned_node(&plan, "cli-plan-tainted");
    assert_eq!(tainted["blockers"][0]["reason"], "taints");
    assert_eq!(tainted["blockers"][0]["taints"][0], "dedicated:NoSchedule");
    let held = planned_node(&plan, "cli-plan-held");
    assert_eq!(
        held["blockers"][1],
        json!({"reason": "priority", "nodewright": "cli-plan-first", "sequencing": "node"}),
        "{held:#}"
    );
    assert!(held["batch"].is_null());

    // `why` says what holds each node back, and the command that clears it.
    for (node, reason, command) in [
        (
            "cli-plan-1",
            "paused",
            "kubectl nodewright resume cli-plan".to_owned(),
        ),
        (
            "cli-plan-held",
            "priority",
            "kubectl nodewright why cli-plan-first --node cli-plan-held".to_owned(),
        ),
        (
            "cli-plan-tainted",
            "taints",
            "kubectl taint node cli-plan-tainted dedicated:NoSchedule-".to_owned(),
        ),
        (
            "cli-plan-ignored",
            "ignored",
            "kubectl nodewright node unignore cli-plan-ignored".to_owned(),
        ),
    ] {
        let why = sh(cluster, &ns, &format!("why {name} --node {node} -o json"))
            .await
            .json();
        let blockers = why["nodes"][0]["blockers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            blockers
                .iter()
                .any(|b| b["detail"]["reason"] == reason && b["command"] == command.as_str()),
            "{node}: {why:#}"
        );
    }

    // The same preview in every format.
    let yaml = sh(cluster, &ns, &format!("plan {name} -o yaml"))
        .await
        .yaml();
    assert_eq!(planned_batches(&yaml), batches);
    let table = sh(cluster, &ns, &format!("plan {name}")).await;
    let text = table.ok();
    assert!(
        text.contains("1: cli-plan-0 | 2: cli-plan-1, cli-plan-2 | 3: cli-plan-3"),
        "{text}"
    );
    assert!(
        text.contains("ignored: the node carries nodewright.nvidia.com/ignore=true"),
        "{text}"
    );
    assert!(text.contains("cordon+drain,reboot"), "{text}");
    let wide = sh(cluster, &ns, &format!("plan {name} -o wide")).await;
    assert!(
        wide.ok().contains("ORDER") && wide.ok().contains("base:1.0.0: apply,config"),
        "{wide:#?}"
    );

    // A changed manifest: a fixed strategy of 4 is still capped by the budget of 2.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("changed.yaml");
    let mut changed_policy: Value = serde_json::to_value(
        Api::<DeploymentPolicy>::all(client.clone())
            .get(name)
            .await
            .expect("policy"),
    )
    .expect("policy JSON");
    changed_policy["spec"]["default"]["strategy"] = json!({"fixed": {"initialBatch": 4}});
    changed_policy["metadata"] = json!({"name": name});
    let mut changed_nw: Value = serde_json::to_value(
        Api::<NodeWright>::all(client.clone())
            .get(name)
            .await
            .expect("NodeWright"),
    )
    .expect("NodeWright JSON");
    changed_nw["metadata"] = json!({"name": name});
    changed_nw.as_object_mut().map(|o| o.remove("status"));
    std::fs::write(
        &file,
        format!(
            "{}---\n{}",
            yaml_serde::to_string(&changed_nw).expect("yaml"),
            yaml_serde::to_string(&changed_policy).expect("yaml")
        ),
    )
    .expect("manifest");
    let changed = sh(cluster, &ns, &format!("plan -f {} -o json", file.display()))
        .await
        .json();
    assert_eq!(
        planned_batches(&changed),
        [
            vec![nodes[0].clone(), nodes[1].clone()],
            vec![nodes[2].clone(), nodes[3].clone()]
        ]
    );
    assert_eq!(changed["compartments"][0]["strategy"], "fixed");

    // Resume through the plugin; the operator rolls out. Same nodes, same batch order.
    sh(cluster, &ns, &format!("resume {name} -y")).await.ok();
    let refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    wait_nodes_complete(cluster, &client, name, &refs).await;
    let order = first_jobs.order();
    assert_eq!(
        order.len(),
        4,
        "only the selected, workable nodes got Jobs: {order:?}"
    );
    let mut at = 0;
    for batch in &batches {
        let observed: BTreeSet<&String> = order[at..at + batch.len()].iter().collect();
        let planned: BTreeSet<&String> = batch.iter().collect();
        assert_eq!(
            observed, planned,
            "first Jobs in order {order:?}, plan {batches:?}"
        );
        at += batch.len();
    }
    // The disruption the plan announced: the interrupt Job ran on every node.
    let runs = first_jobs.runs();
    for node in &nodes {
        assert!(
            runs.iter()
                .any(|(n, _, stage)| n == node && stage == "interrupt"),
            "{runs:?}"
        );
    }
}

/// A fate for the apply attempts of package `driver` until `fixed`: its check container exits 3.
/// (The check is the last init container: kwok's `fail` of an earlier init container is refused
/// by the apiserver, which forbids moving the later, already completed ones back to waiting.)
fn failing_driver(fixed: Arc<AtomicBool>, only_node: Option<String>) -> JobHook {
    let fail = PodFate::fail()
        .exit_code(3)
        .container("driver-applycheck")
        .delay("1s");
    Arc::new(move |job: &mut Job| {
        let labels = job.labels().clone();
        let is_driver_apply = labels
            .get(keys::PACKAGE_LABEL)
            .is_some_and(|p| p.starts_with("driver-"))
            && labels.get(keys::STAGE_LABEL).map(String::as_str) == Some("apply");
        let on_node = only_node
            .as_ref()
            .is_none_or(|n| labels.get(keys::NODE_LABEL) == Some(n));
        if is_driver_apply
            && on_node
            && !fixed.load(Ordering::SeqCst)
            && let Some(spec) = job.spec.as_mut()
        {
            fail.apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    })
}

/// Gives the attempt pods of package `driver` in `namespace` logs (files in `dir`): its apply
/// container prints `apply`, its check container `check`.
fn driver_logs(
    client: &kube::Client,
    namespace: &str,
    dir: &std::path::Path,
    apply: &[&str],
    check: &[&str],
) -> LogGiver {
    let apply_log = dir.join("driver-apply.log");
    write_cri_log(&apply_log, apply);
    let check_log = dir.join("driver-applycheck.log");
    write_cri_log(&check_log, check);
    LogGiver::start(
        client.clone(),
        namespace.to_owned(),
        vec![
            ("driver-apply".into(), apply_log),
            ("driver-applycheck".into(), check_log),
        ],
        pod_of("driver"),
    )
}

/// Whether a pod runs a stage of package `package`.
fn pod_of(package: &'static str) -> impl Fn(&Pod) -> bool + Send + 'static {
    move |p: &Pod| {
        p.labels()
            .get(keys::PACKAGE_LABEL)
            .is_some_and(|l| l.starts_with(&format!("{package}-")))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_explains_a_timed_out_stage_logs_show_its_attempts_and_a_rerun_clears_it() {
    let cluster = cluster().await;
    if common::skip_without_kwok_logs(cluster, "why on a timed-out stage").await {
        return;
    }
    let name = "cli-why";
    let Ground { client, ns, nodes } = ground(cluster, name, 1).await;
    let node = nodes[0].as_str();
    let dir = tempfile::tempdir().expect("tempdir");
    let _logs = driver_logs(
        &client,
        &ns,
        dir.path(),
        &["installing driver 1.4.0", "driver files in place"],
        &[
            "checking driver 1.4.0",
            "error: kernel headers for 6.1.0-cloud not found",
        ],
    );
    let fixed = Arc::new(AtomicBool::new(false));
    // backoffLimit 1: two attempts.
    let _operator = operator(
        &client,
        &ns,
        &[name],
        1,
        Some(failing_driver(fixed.clone(), None)),
    );
    create_nodewright(
        &client,
        name,
        name,
        NodeWrightSpec {
            packages: BTreeMap::from([
                ("driver".to_owned(), package("1.4.0", &[])),
                ("tuned".to_owned(), package("0.9.1", &[("driver", "1.4.0")])),
            ]),
            ..NodeWrightSpec::default()
        },
        &[],
    )
    .await;
    let job = wait_timed_out_job(cluster, &client, &ns).await;

    let why = sh(cluster, &ns, &format!("why {name} --node {node} -o json"))
        .await
        .json();
    let n = &why["nodes"][0];
    assert_eq!(n["node"], node);
    assert_eq!(n["status"], "erroring");
    let driver = n["packages"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["package"] == "driver"))
        .expect("driver explained");
    assert_eq!(driver["stage"], "apply");
    assert_eq!(driver["state"], "erroring");
    assert_eq!(
        (driver["attempts"].clone(), driver["attemptLimit"].clone()),
        (json!(2), json!(2))
    );
    assert_eq!(driver["timedOut"], true);
    assert_eq!(
        driver["cause"],
        "exit code 3 in container driver-applycheck"
    );
    assert_eq!(driver["job"], job.name_any());
    assert!(
        driver["evidence"].as_array().is_some_and(|e| e
            .iter()
            .any(|e| e == "a non-zero exit code on 2 attempt(s)")),
        "{driver:#}"
    );
    assert_ne!(driver["firstAttempt"]["pod"], driver["lastAttempt"]["pod"]);
    assert_eq!(
        driver["firstAttempt"]["reason"],
        "exit code 3 in container driver-applycheck"
    );
    assert_eq!(
        driver["lastAttempt"]["reason"],
        "exit code 3 in container driver-applycheck"
    );
    let snapshot = driver["lastLogs"].as_str().unwrap_or_default();
    assert!(
        snapshot.contains("kernel headers for 6.1.0-cloud not found"),
        "{driver:#}"
    );
    assert!(
        driver["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e
                .as_str()
                .is_some_and(|e| e.contains("after 2 of 2 attempts")))),
        "{driver:#}"
    );
    let rerun =
        format!("kubectl nodewright package rerun driver --nodewright {name} --node {node}");
    assert_eq!(driver["command"], rerun.as_str());
    let tuned = n["packages"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["package"] == "tuned"))
        .expect("tuned explained");
    assert!(tuned["stage"].is_null());
    assert!(
        tuned["next"]
            .as_str()
            .is_some_and(|t| t.contains("waits for driver|1.4.0")),
        "{tuned:#}"
    );
    let text = sh(cluster, &ns, &format!("why {name} --node {node}")).await;
    let text = text.ok();
    assert!(text.contains("2 of 2 attempts used"), "{text}");
    assert!(text.contains(&format!("clear it: {rerun}")), "{text}");
    sh(cluster, &ns, &format!("why {name} -o yaml"))
        .await
        .yaml();
    let wide = sh(cluster, &ns, &format!("why {name} -o wide")).await;
    assert!(wide.ok().contains("package tuned:0.9.1"), "{wide:#?}");
    let overview = sh(cluster, &ns, &format!("why {name}")).await;
    assert!(
        overview.ok().contains(&format!("Node {node}: erroring")),
        "{overview:#?}"
    );

    // Logs of the retained attempts, through the API (kwok serves the file).
    let logs = sh(
        cluster,
        &ns,
        &format!("package logs driver --nodewright {name} --node {node}"),
    )
    .await;
    let text = logs.ok();
    // The first and the last attempt, each with its stage and its check container.
    assert_eq!(text.matches("==> Pod: ").count(), 4, "{text}");
    assert!(
        text.contains("Container: driver-apply [Completed]"),
        "{text}"
    );
    assert!(
        text.contains("Container: driver-applycheck [Exit: 3]"),
        "{text}"
    );
    assert!(text.contains("installing driver 1.4.0"), "{text}");
    let tail = sh(
        cluster,
        &ns,
        &format!("package logs driver --nodewright {name} --node {node} --tail 1 -o json"),
    )
    .await
    .json();
    let check = tail
        .as_array()
        .and_then(|t| t.iter().find(|e| e["container"] == "driver-applycheck"))
        .expect("the check container's log");
    assert_eq!(check["source"], "pod");
    assert_eq!(
        check["log"].as_str().map(str::trim),
        Some("error: kernel headers for 6.1.0-cloud not found")
    );
    // Once the pods are gone, the snapshot the operator kept on the Job.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for p in pods.list(&ListParams::default()).await.expect("pods") {
        let _ = pods.delete(&p.name_any(), &DeleteParams::default()).await;
    }
    cluster
        .wait_for("the attempt pods gone", BOUND, || async {
            Ok(pods
                .list(&ListParams::default())
                .await
                .map(|l| l.items.is_empty().then_some(()))
                .unwrap_or(None))
        })
        .await
        .expect("pods deleted");
    let snapshot = sh(
        cluster,
        &ns,
        &format!("package logs driver --nodewright {name} --node {node}"),
    )
    .await;
    let text = snapshot.ok();
    assert!(text.contains("(last-logs snapshot)"), "{text}");
    assert!(
        text.contains("kernel headers for 6.1.0-cloud not found"),
        "{text}"
    );

    // The rerun: refused without a terminal, previewed by --dry-run, then done with -y.
    let before = node_marks(&client, &[node]).await;
    sh(
        cluster,
        &ns,
        &format!("package rerun driver --nodewright {name} --node {node}"),
    )
    .await
    .fails(2, "refusing to rerun package driver");
    let dry = sh(
        cluster,
        &ns,
        &format!("package rerun driver --nodewright {name} --node {node} --dry-run"),
    )
    .await;
    assert!(
        dry.ok().contains("would rerun driver|1.4.0 from the start"),
        "{dry:#?}"
    );
    assert!(dry.ok().contains("patch: "), "{dry:#?}");
    assert_eq!(
        node_marks(&client, &[node]).await,
        before,
        "nothing written"
    );
    fixed.store(true, Ordering::SeqCst);
    let done = sh(
        cluster,
        &ns,
        &format!("package rerun driver --nodewright {name} --node {node} -y -o json"),
    )
    .await
    .json();
    assert_eq!(done["dryRun"], false);
    assert_eq!(done["changes"][0]["kind"], "Node");
    wait_status(cluster, &client, name, Status::Complete).await;
    let why = sh(cluster, &ns, &format!("why {name}")).await;
    assert!(why.ok().contains("is complete on every node"), "{why:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_logs_follow_a_running_stage() {
    let cluster = cluster().await;
    if common::skip_without_kwok_logs(cluster, "package logs -f").await {
        return;
    }
    let name = "cli-follow";
    let Ground { client, ns, nodes } = ground(cluster, name, 1).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("slow-apply.log");
    write_cri_log(&log, &["step 1 of 2"]);
    let _logs = LogGiver::start(
        client.clone(),
        ns.clone(),
        vec![("slow-apply".into(), log.clone())],
        pod_of("slow"),
    );
    let hang = PodFate::hang();
    let hook: JobHook = Arc::new(move |job: &mut Job| {
        if let Some(spec) = job.spec.as_mut() {
            hang.apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    });
    let _operator = operator(&client, &ns, &[name], 3, Some(hook));
    let mut slow = package("1.0.0", &[]);
    slow.stage_timeout = Some("0".into());
    create_nodewright(
        &client,
        name,
        name,
        NodeWrightSpec {
            packages: BTreeMap::from([("slow".to_owned(), slow)]),
            ..NodeWrightSpec::default()
        },
        &[],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    cluster
        .wait_for("the stage pod running", BOUND, || async {
            let list = pods.list(&ListParams::default()).await.ok();
            Ok(list.and_then(|l| {
                l.items
                    .iter()
                    .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                    .then_some(())
            }))
        })
        .await
        .expect("running");
    let args = vec![
        "--kubeconfig".to_owned(),
        cluster.kubeconfig_path().display().to_string(),
        "-n".to_owned(),
        ns.clone(),
        "package".into(),
        "logs".into(),
        "slow".into(),
        "--nodewright".into(),
        name.into(),
        "--node".into(),
        nodes[0].clone(),
        "--stage".into(),
        "apply".into(),
        "-f".into(),
    ];
    let mut child = tokio::process::Command::new(common::bin())
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let mut seen = Vec::new();
    read_until(&mut lines, &mut seen, "step 1 of 2").await;
    append_cri_log(&log, "step 2 of 2");
    read_until(&mut lines, &mut seen, "step 2 of 2").await;
    child.kill().await.expect("stop following");
    // kwok marks a running pod's init containers completed at once; its log server still
    // follows the file, as a kubelet follows a running container.
    assert!(
        seen[0].contains("==> Pod: ") && seen[0].contains("Container: slow-apply"),
        "{seen:?}"
    );
}

/// Reads `lines` into `seen` until one contains `want` (bounded).
async fn read_until(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    seen: &mut Vec<String>,
    want: &str,
) {
    tokio::time::timeout(BOUND, async {
        while let Some(line) = lines.next_line().await.expect("read") {
            seen.push(line.clone());
            if line.contains(want) {
                return;
            }
        }
        panic!("the stream ended before {want:?}: {seen:?}");
    })
    .await
    .expect("followed in time");
}

/// Runs `kubectl-nodewright` with the words of `line` (none contains a blank) as its arguments.
async fn sh(cluster: &Cluster, namespace: &str, line: &str) -> Run {
    let words: Vec<&str> = line.split_whitespace().collect();
    cli(cluster, namespace, &words).await
}

/// Runs the binary under a pseudo-terminal (util-linux `script`), answering `answer`.
async fn in_terminal(cluster: &Cluster, namespace: &str, args: &str, answer: &str) -> Run {
    let command = format!(
        "{} --kubeconfig {} -n {namespace} {args}",
        common::bin(),
        cluster.kubeconfig_path().display()
    );
    run_binary(
        "script",
        &[
            "-q".into(),
            "-e".into(),
            "-c".into(),
            command,
            "/dev/null".into(),
        ],
        Some(answer),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_node_and_reset_commands_write_only_when_confirmed() {
    let cluster = cluster().await;
    let name = "cli-life";
    let Ground { client, ns, nodes } = ground(cluster, name, 2).await;
    let refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    create_policy(&client, name, 2, 2).await;
    let first_jobs = FirstJobs::start(client.clone(), &ns);
    let _operator = operator(&client, &ns, &[name], 3, None);
    create_nodewright(
        &client,
        name,
        name,
        NodeWrightSpec {
            deployment_policy: Some(name.into()),
            packages: BTreeMap::from([("agent".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
        &[],
    )
    .await;
    wait_status(cluster, &client, name, Status::Complete).await;

    // node list, node status, package status: every format.
    let list = sh(cluster, &ns, &format!("node list --nodewright {name}")).await;
    let text = list.ok();
    assert!(
        text.contains("NodeWright: cli-life\n2 nodes (2 complete"),
        "{text}"
    );
    assert!(
        text.contains("cli-life-0   cli-life     complete   1/1"),
        "{text}"
    );
    let wide = sh(
        cluster,
        &ns,
        &format!("node list --nodewright {name} -o wide"),
    )
    .await;
    assert!(
        wide.ok().contains("RESTARTS   CORDONED   IGNORED"),
        "{wide:#?}"
    );
    let json = sh(
        cluster,
        &ns,
        &format!("node list --nodewright {name} -o json"),
    )
    .await
    .json();
    assert_eq!(json["nodes"].as_array().map(Vec::len), Some(2));
    assert!(
        json["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|n| n["status"] == "complete" && n["packagesComplete"] == 1)
    );
    let yaml = sh(
        cluster,
        &ns,
        &format!("node list --nodewright {name} -o yaml"),
    )
    .await
    .yaml();
    assert_eq!(yaml, json);
    let status = sh(cluster, &ns, &format!("node status {} -o wide", nodes[0])).await;
    assert!(
        status
            .ok()
            .contains("agent     1.0.0     config   complete"),
        "{status:#?}"
    );
    let status = sh(
        cluster,
        &ns,
        &format!("node status cli-life-.* --nodewright {name} -o json"),
    )
    .await
    .json();
    assert_eq!(status.as_array().map(Vec::len), Some(2));
    assert_eq!(status[0]["packages"][0]["stage"], "config");
    let table = sh(cluster, &ns, "node status cli-life-.*").await;
    assert!(
        table
            .ok()
            .contains("NODE         NODEWRIGHT   STATUS     PACKAGES"),
        "{table:#?}"
    );
    let pkg = sh(
        cluster,
        &ns,
        &format!("package status agent --nodewright {name} -o json"),
    )
    .await
    .json();
    assert_eq!(pkg["packages"][0], "agent:1.0.0");
    assert_eq!(pkg["nodes"].as_array().map(Vec::len), Some(2));
    let pkg = sh(
        cluster,
        &ns,
        &format!(
            "package status agent --nodewright {name} --node {} -o wide",
            nodes[1]
        ),
    )
    .await;
    assert!(
        pkg.ok().contains("RESTARTS   IMAGE") && !pkg.ok().contains(&nodes[0]),
        "{pkg:#?}"
    );
    sh(
        cluster,
        &ns,
        &format!("package status agent --nodewright {name} -o yaml"),
    )
    .await
    .yaml();

    // Every NodeWright's nodes, and -v's detail on stderr.
    let all = sh(cluster, &ns, "node list -o json -v").await;
    assert!(all.stderr.contains("using the API server"), "{all:#?}");
    let all = all.json();
    assert_eq!(
        all["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["nodewright"] == name)
            .count(),
        2
    );

    // A rerun from a stage: the config stage's Job runs again.
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let config_job = || async {
        jobs_api
            .list(&ListParams::default().labels(&format!(
                "{}=config,{}={}",
                keys::STAGE_LABEL,
                keys::NODE_LABEL,
                nodes[0]
            )))
            .await
            .expect("jobs")
            .items
            .first()
            .and_then(|j| j.metadata.uid.clone())
    };
    let first_config = config_job().await;
    let rerun = sh(
        cluster,
        &ns,
        &format!(
            "package rerun agent --nodewright {name} --node {} --stage config -y -o json",
            nodes[0]
        ),
    )
    .await
    .json();
    let written = rerun["changes"][0]["patch"].to_string();
    assert!(
        written.contains(r#"\"stage\":\"config\",\"state\":\"in_progress\""#),
        "{written}"
    );
    wait_installed(cluster, &client, name, "agent", &refs).await;
    assert_ne!(config_job().await, first_config, "a new config Job ran");

    // pause: refused without a terminal, nothing written by --dry-run, confirmed in a terminal.
    // What a lifecycle command writes: the annotations (the operator keeps writing the status).
    let written = || async {
        let nw = Api::<NodeWright>::all(client.clone())
            .get(name)
            .await
            .expect("nw");
        (
            nw.metadata.annotations,
            serde_json::to_value(&nw.spec).expect("spec"),
        )
    };
    let before = written().await;
    sh(cluster, &ns, &format!("pause {name}"))
        .await
        .fails(2, "refusing to pause NodeWright cli-life");
    let dry = sh(cluster, &ns, &format!("pause {name} --dry-run")).await;
    assert!(
        dry.ok().contains("nodewright/cli-life: would pause"),
        "{dry:#?}"
    );
    assert!(
        dry.ok()
            .contains("\"nodewright.nvidia.com/pause\":\"true\""),
        "{dry:#?}"
    );
    let dry_json = sh(cluster, &ns, &format!("pause {name} --dry-run -o json"))
        .await
        .json();
    assert_eq!(dry_json["dryRun"], true);
    assert_eq!(written().await, before, "nothing written");
    let declined = in_terminal(cluster, &ns, &format!("pause {name}"), "n\n").await;
    assert_eq!(declined.code, 1, "{declined:#?}");
    assert!(
        declined.stdout.contains("Pause NodeWright cli-life"),
        "{declined:#?}"
    );
    assert_eq!(
        nw_annotation(&client, name, keys::PAUSE_ANNOTATION).await,
        None
    );
    let confirmed = in_terminal(cluster, &ns, &format!("pause {name}"), "y\n").await;
    assert_eq!(confirmed.code, 0, "{confirmed:#?}");
    assert_eq!(
        nw_annotation(&client, name, keys::PAUSE_ANNOTATION)
            .await
            .as_deref(),
        Some("true")
    );
    wait_status(cluster, &client, name, Status::Paused).await;
    let again = sh(cluster, &ns, &format!("pause {name} -y")).await;
    assert!(again.ok().contains("already paused"), "{again:#?}");
    let resumed = sh(cluster, &ns, &format!("resume {name} -y -o yaml"))
        .await
        .yaml();
    assert_eq!(resumed["changes"][0]["kind"], "NodeWright");
    assert_eq!(
        nw_annotation(&client, name, keys::PAUSE_ANNOTATION).await,
        None
    );
    sh(cluster, &ns, &format!("disable {name} -y")).await.ok();
    wait_status(cluster, &client, name, Status::Complete).await;
    assert_eq!(
        nw_annotation(&client, name, keys::DISABLE_ANNOTATION)
            .await
            .as_deref(),
        Some("true")
    );
    sh(cluster, &ns, &format!("enable {name} --confirm"))
        .await
        .ok();
    assert_eq!(
        nw_annotation(&client, name, keys::DISABLE_ANNOTATION).await,
        None
    );

    // node ignore / unignore (no prompt), --dry-run first.
    let before = node_marks(&client, &refs).await;
    let dry = sh(cluster, &ns, &format!("node ignore {} --dry-run", nodes[1])).await;
    assert!(dry.ok().contains("would ignore"), "{dry:#?}");
    assert_eq!(node_marks(&client, &refs).await, before);
    sh(cluster, &ns, &format!("node ignore {}", nodes[1]))
        .await
        .ok();
    let node = Api::<Node>::all(client.clone())
        .get(&nodes[1])
        .await
        .expect("node");
    assert_eq!(
        node.labels().get(keys::IGNORE_LABEL).map(String::as_str),
        Some("true")
    );
    // Complete already, so it stays complete; the operator reports it ignored.
    wait_nodewright(cluster, &client, name, "the node reported ignored", |nw| {
        support::condition(nw, "NodesIgnored")
            .is_some_and(|c| c.status == "True" && c.message.contains("cli-life-1"))
    })
    .await;
    let skipped = sh(cluster, &ns, &format!("node ignore {}", nodes[1])).await;
    assert!(skipped.ok().contains("already ignored"), "{skipped:#?}");
    sh(cluster, &ns, "node unignore cli-life-1").await.ok();
    let node = Api::<Node>::all(client.clone())
        .get(&nodes[1])
        .await
        .expect("node");
    assert!(!node.labels().contains_key(keys::IGNORE_LABEL));
    wait_status(cluster, &client, name, Status::Complete).await;

    // node reset: refused without -y; with it the node's packages run again.
    let applies_before = first_jobs.runs().len();
    let before = node_marks(&client, &refs).await;
    sh(
        cluster,
        &ns,
        &format!("node reset {} --nodewright {name}", nodes[0]),
    )
    .await
    .fails(2, "refusing to reset NodeWright cli-life on cli-life-0");
    sh(
        cluster,
        &ns,
        &format!("node reset {} --nodewright {name} --dry-run", nodes[0]),
    )
    .await
    .ok();
    assert_eq!(node_marks(&client, &refs).await, before);
    let reset = sh(
        cluster,
        &ns,
        &format!("node reset {} --nodewright {name} -y -o json", nodes[0]),
    )
    .await
    .json();
    assert_eq!(reset["changes"][0]["name"], "cli-life-0");
    assert_eq!(
        applies_before,
        first_jobs.runs().len(),
        "the same stages again"
    );
    wait_installed(cluster, &client, name, "agent", &refs).await;
    let node = Api::<Node>::all(client.clone())
        .get(&nodes[0])
        .await
        .expect("node");
    assert!(
        node.annotations().contains_key(&keys::node_state_key(name)),
        "rerun recorded"
    );

    // reset: every node and the batch state; dry run first.
    let before = node_marks(&client, &refs).await;
    let dry = sh(cluster, &ns, &format!("reset {name} --dry-run -o json"))
        .await
        .json();
    let kinds: Vec<&str> = dry["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter_map(|c| c["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["Node", "Node", "NodeWright/status"]);
    assert_eq!(
        dry["changes"][2]["patch"]["status"]["compartmentStatuses"]["__default__"]["batchState"]["currentBatch"],
        1
    );
    assert_eq!(node_marks(&client, &refs).await, before);
    sh(cluster, &ns, &format!("reset {name}"))
        .await
        .fails(2, "refusing to reset NodeWright cli-life");
    let done = sh(cluster, &ns, &format!("reset {name} -y")).await;
    assert!(done.ok().contains("has state on 2 node(s)"), "{done:#?}");
    wait_installed(cluster, &client, name, "agent", &refs).await;
    let kept = sh(
        cluster,
        &ns,
        &format!("reset {name} -y --skip-batch-reset -o json"),
    )
    .await
    .json();
    assert!(
        kept["changes"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| c["kind"] == "Node")),
        "{kept:#}"
    );
    wait_installed(cluster, &client, name, "agent", &refs).await;

    // deployment-policy reset (alias dp).
    sh(cluster, &ns, &format!("dp reset {name}"))
        .await
        .fails(2, "refusing to reset the batch state");
    let dp = sh(
        cluster,
        &ns,
        &format!("deployment-policy reset {name} -y -o yaml"),
    )
    .await
    .yaml();
    assert_eq!(dp["changes"][0]["kind"], "NodeWright/status");
    assert!(
        dp["notes"][0]
            .as_str()
            .is_some_and(|n| n.starts_with("compartment __default__: batch")),
        "{dp:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_a_clear_error_and_nothing_written() {
    let cluster = cluster().await;
    let name = "cli-bad";
    let Ground { client, ns, nodes } = ground(cluster, name, 1).await;
    let node = nodes[0].as_str();
    let _operator = operator(&client, &ns, &[name], 3, None);
    create_nodewright(
        &client,
        name,
        name,
        NodeWrightSpec {
            packages: BTreeMap::from([("agent".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
        &[],
    )
    .await;
    wait_status(cluster, &client, name, Status::Complete).await;
    let marks = || async {
        (
            node_marks(&client, &[node]).await,
            nw_annotation(&client, name, keys::PAUSE_ANNOTATION).await,
        )
    };
    let before = marks().await;

    let unknown = [
        vec!["pause", "nope", "-y"],
        vec!["resume", "nope", "-y"],
        vec!["disable", "nope", "-y"],
        vec!["enable", "nope", "-y"],
        vec!["reset", "nope", "-y"],
        vec!["dp", "reset", "nope", "-y"],
        vec!["node", "list", "--nodewright", "nope"],
        vec!["node", "status", "--nodewright", "nope"],
        vec!["node", "reset", node, "--nodewright", "nope", "-y"],
        vec!["package", "status", "agent", "--nodewright", "nope"],
        vec![
            "package",
            "rerun",
            "agent",
            "--nodewright",
            "nope",
            "--node",
            node,
            "-y",
        ],
        vec!["package", "logs", "agent", "--nodewright", "nope"],
        vec!["plan", "nope"],
        vec!["why", "nope"],
    ];
    for args in unknown {
        cli(cluster, &ns, &args)
            .await
            .fails(1, "NodeWright \"nope\" not found");
    }
    for args in [
        vec!["node", "status", "no-such-node"],
        vec!["node", "ignore", "cli-bad-9.*"],
        vec!["node", "reset", "no-such-node", "--nodewright", name, "-y"],
        vec![
            "package",
            "rerun",
            "agent",
            "--nodewright",
            name,
            "--node",
            "no-such-node",
            "-y",
        ],
        vec![
            "package",
            "status",
            "agent",
            "--nodewright",
            name,
            "--node",
            "no-such-node",
        ],
    ] {
        cli(cluster, &ns, &args).await.fails(1, "no node matches");
    }
    sh(
        cluster,
        &ns,
        &format!("package rerun agent --nodewright {name} --node {node} --stage interrupt -y"),
    )
    .await
    .fails(1, "package agent of NodeWright cli-bad has no interrupt");
    sh(
        cluster,
        &ns,
        &format!("package rerun agent --nodewright {name} --node {node} --stage upgrade -y"),
    )
    .await
    .fails(2, "invalid value 'upgrade' for '--stage <STAGE>'");
    sh(
        cluster,
        &ns,
        &format!("package rerun nope --nodewright {name} --node {node} -y"),
    )
    .await
    .fails(
        1,
        "NodeWright cli-bad has no package \"nope\" (its packages: agent)",
    );
    sh(cluster, &ns, &format!("why {name} --node no-such-node"))
        .await
        .fails(1, "no node named");
    sh(cluster, &ns, "node status (")
        .await
        .fails(2, "not a valid regular expression");
    sh(cluster, &ns, "node list -o xml")
        .await
        .fails(2, "invalid value 'xml'");
    sh(cluster, &ns, "--request-timeout soon node list")
        .await
        .fails(2, "--request-timeout");
    cli(cluster, &ns, &[]).await.fails(2, "Usage:");
    let dir = tempfile::tempdir().expect("tempdir");
    let wrong = dir.path().join("wrong.yaml");
    std::fs::write(
        &wrong,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    )
    .expect("file");
    sh(cluster, &ns, &format!("plan -f {}", wrong.display()))
        .await
        .fails(
            1,
            "expected a NodeWright or a DeploymentPolicy of nodewright.nvidia.com/v1alpha1",
        );

    // An unreachable cluster: a kubeconfig naming a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let kubeconfig = dir.path().join("unreachable.yaml");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster: {{server: \"https://127.0.0.1:{port}\", insecure-skip-tls-verify: true}}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: gone\n  context: {{cluster: gone, user: u}}\ncurrent-context: gone\n"
        ),
    )
    .expect("kubeconfig");
    for args in [
        vec!["pause", name, "-y"],
        vec!["node", "list"],
        vec![
            "package",
            "rerun",
            "agent",
            "--nodewright",
            name,
            "--node",
            node,
            "-y",
        ],
    ] {
        let mut all = vec!["--kubeconfig".to_owned(), kubeconfig.display().to_string()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        run_binary(common::bin(), &all, None).await.fails(
            1,
            &format!("cannot reach the Kubernetes API server at https://127.0.0.1:{port}"),
        );
    }
    assert_eq!(marks().await, before, "nothing written by any of them");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_completion_help_and_kubectl_nodewright_through_kubectl() {
    let cluster = cluster().await;
    let ns = cluster
        .create_namespace("cli-version")
        .await
        .expect("namespace");
    let client = cluster.client().await.expect("client");
    let _operator = operator(&client, &ns, &["cli-version-none"], 3, None);
    // The chart's operator Deployment and defaults ConfigMap, as helm renders them.
    let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../chart");
    let rendered = cluster
        .helm(&[
            "template",
            "rel",
            &chart.display().to_string(),
            "--namespace",
            &ns,
            "--show-only",
            "templates/deployment-operator.yaml",
            "--show-only",
            "templates/configmap-defaults.yaml",
            "--set",
            "defaults.jobBackoffLimit=5",
        ])
        .await
        .expect("helm template");
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("operator.yaml");
    std::fs::write(&manifest, rendered).expect("manifest");
    cluster
        .kubectl(&["-n", &ns, "apply", "-f", &manifest.display().to_string()])
        .await
        .expect("applied");
    let chart_version = std::fs::read_to_string(chart.join("Chart.yaml"))
        .expect("Chart.yaml")
        .lines()
        .find_map(|l| l.strip_prefix("appVersion: "))
        .map(|v| v.trim_matches('"').to_owned())
        .expect("appVersion");
    let version = sh(cluster, &ns, "version").await;
    assert!(
        version.ok().contains(&format!(
            "kubectl-nodewright: {}",
            env!("CARGO_PKG_VERSION")
        )),
        "{version:#?}"
    );
    assert!(
        version
            .ok()
            .contains(&format!("NodeWright operator: {chart_version}")),
        "{version:#?}"
    );
    let json = sh(cluster, &ns, "version -o json").await.json();
    assert_eq!(json["operator"]["version"], chart_version.as_str());
    assert_eq!(
        json["operator"]["deployment"],
        format!("{ns}/rel-nodewright-operator")
    );
    // The package Jobs are looked for where the chart's operator runs them: its Deployment's
    // PACKAGE_NAMESPACE (or --package-namespace).
    create_nodewright(
        &client,
        "cli-version-none",
        "none",
        NodeWrightSpec {
            packages: BTreeMap::from([("agent".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
        &[],
    )
    .await;
    sh(
        cluster,
        &ns,
        "package logs agent --nodewright cli-version-none",
    )
    .await
    .fails(1, &format!("namespace {ns}-rel-nodewright-packages"));
    sh(
        cluster,
        &ns,
        "package logs agent --nodewright cli-version-none --package-namespace elsewhere",
    )
    .await
    .fails(1, "namespace elsewhere");
    let wide = sh(cluster, &ns, "version -o wide").await;
    assert!(wide.ok().contains("(Deployment "), "{wide:#?}");
    sh(cluster, &ns, "version -o yaml").await.yaml();
    let elsewhere = sh(cluster, "default", "version").await;
    assert!(
        elsewhere
            .ok()
            .contains("no operator Deployment in namespace default"),
        "{elsewhere:#?}"
    );
    // --client-only never contacts the cluster.
    let offline = run_binary(
        common::bin(),
        &[
            "--kubeconfig".into(),
            "/nonexistent".into(),
            "version".into(),
            "--client-only".into(),
        ],
        None,
    )
    .await;
    assert_eq!(
        offline.ok().trim(),
        format!("kubectl-nodewright: {}", env!("CARGO_PKG_VERSION"))
    );

    // A preview reads the operator's configuration from that Deployment and its ConfigMap.
    let new_nw = dir.path().join("new.yaml");
    std::fs::write(
        &new_nw,
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata: {name: cli-version-new}\nspec:\n  nodeSelectors: {matchLabels: {cli.nodewright.test/pool: none}}\n  packages: {agent: {version: 1.0.0, image: ghcr.io/x/agent}}\n",
    )
    .expect("manifest");
    let plan = sh(cluster, &ns, &format!("plan -f {}", new_nw.display())).await;
    assert!(
        plan.ok().contains(&format!(
            "Operator settings: the configuration of {ns}/rel-nodewright-operator"
        )),
        "{plan:#?}"
    );
    assert!(
        plan.ok()
            .contains("NodeWright cli-version-new (legacy interruptionBudget): 0 node(s) selected"),
        "{plan:#?}"
    );

    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef kubectl-nodewright"),
        ("fish", "complete -c kubectl-nodewright"),
    ] {
        let script = run_binary(common::bin(), &["completion".into(), shell.into()], None).await;
        assert!(
            script.ok().contains(marker),
            "{shell}: {}",
            &script.stdout[..script.stdout.len().min(300)]
        );
        assert!(script.ok().contains("migrate-from-skyhook"), "{shell}");
    }

    // Every command's manual has examples.
    for command in [
        vec![],
        vec!["version"],
        vec!["pause"],
        vec!["resume"],
        vec!["disable"],
        vec!["enable"],
        vec!["reset"],
        vec!["deployment-policy"],
        vec!["node"],
        vec!["package"],
        vec!["deployment-policy", "reset"],
        vec!["dp", "reset"],
        vec!["node", "list"],
        vec!["node", "status"],
        vec!["node", "reset"],
        vec!["node", "ignore"],
        vec!["node", "unignore"],
        vec!["package", "status"],
        vec!["package", "rerun"],
        vec!["package", "logs"],
        vec!["plan"],
        vec!["why"],
        vec!["history"],
        vec!["rollback"],
        vec!["migrate-from-skyhook"],
        vec!["completion"],
    ] {
        let mut args: Vec<String> = command.iter().map(|a| (*a).to_owned()).collect();
        args.push("--help".into());
        let help = run_binary(common::bin(), &args, None).await;
        let text = help.ok();
        assert!(
            text.contains("Examples:\n  "),
            "{command:?} --help has no example:\n{text}"
        );
        assert!(text.contains("kubectl nodewright"), "{command:?}");
    }

    // As a kubectl plugin: kubectl finds kubectl-nodewright on PATH.
    let kubectl = cluster
        .binary("kubectl")
        .unwrap_or_else(|| "kubectl".into());
    let bin_dir = std::path::Path::new(common::bin())
        .parent()
        .expect("bin dir");
    let path = format!(
        "{}:{}:{}",
        bin_dir.display(),
        kubectl
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        std::env::var("PATH").unwrap_or_default()
    );
    let plugin = tokio::process::Command::new(&kubectl)
        .args(["nodewright", "--kubeconfig"])
        .arg(cluster.kubeconfig_path())
        .args(["-n", &ns, "version", "-o", "json"])
        .env("PATH", &path)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("kubectl");
    assert!(plugin.status.success(), "{plugin:?}");
    let json: Value = serde_json::from_slice(&plugin.stdout).expect("JSON through kubectl");
    assert_eq!(json["operator"]["version"], chart_version.as_str());
    let listed = tokio::process::Command::new(&kubectl)
        .args(["plugin", "list"])
        .env("PATH", &path)
        .output()
        .await
        .expect("kubectl plugin list");
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("kubectl-nodewright"),
        "{listed:?}"
    );
}

/// Upstream's node state JSON for packages at (stage, state).
fn upstream_state(records: &[(&str, &str, &str, &str)]) -> String {
    let map: serde_json::Map<String, Value> = records
        .iter()
        .map(|(name, version, stage, state)| {
            (
                format!("{name}|{version}"),
                json!({
                    "name": name,
                    "version": version,
                    "image": format!("ghcr.io/nvidia/skyhook-packages/{name}"),
                    "stage": stage,
                    "state": state,
                }),
            )
        })
        .collect();
    Value::Object(map).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_from_skyhook_keeps_what_is_installed() {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let ns = cluster
        .create_namespace("cli-migrate")
        .await
        .expect("namespace");
    let name = "cli-migrate";
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cli_fixtures/skyhook-crds.yaml");
    cluster
        .kubectl(&["apply", "--server-side", "-f", &crds.display().to_string()])
        .await
        .expect("upstream CRDs");
    cluster
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "crd/skyhooks.skyhook.nvidia.com",
            "crd/deploymentpolicies.skyhook.nvidia.com",
        ])
        .await
        .expect("established");
    // Four nodes as upstream left them: both packages installed; the driver installed and tuned
    // mid-apply under upstream's cordon; a fresh node upstream auto-tainted; an ignored node.
    let [installed, partial, fresh, ignored] = [
        "cli-migrate-a",
        "cli-migrate-b",
        "cli-migrate-c",
        "cli-migrate-d",
    ];
    for n in [installed, partial, fresh] {
        create_fake_node(&client, n, &[(POOL, name)], json!([])).await;
    }
    create_fake_node(
        &client,
        ignored,
        &[(POOL, name), ("skyhook.nvidia.com/ignore", "true")],
        json!([]),
    )
    .await;
    let up = |key: &str| format!("skyhook.nvidia.com/{key}_{name}");
    support::patch_node(
        &client,
        installed,
        json!({"metadata": {
            "annotations": {
                up("nodeState"): upstream_state(&[("driver", "1.2.0", "post-interrupt", "complete"), ("tuned", "0.3.0", "config", "complete")]),
                up("status"): "complete",
                up("version"): "v0.15.0",
            },
            "labels": {up("status"): "complete"},
        }}),
    )
    .await;
    support::patch_node(
        &client,
        partial,
        json!({
            "metadata": {
                "annotations": {
                    up("nodeState"): upstream_state(&[("driver", "1.2.0", "post-interrupt", "complete"), ("tuned", "0.3.0", "apply", "in_progress")]),
                    up("status"): "in_progress",
                    up("cordon"): "true",
                    up("version"): "v0.15.0",
                },
                "labels": {up("status"): "in_progress"},
            },
            "spec": {"unschedulable": true},
        }),
    )
    .await;
    support::patch_node(
        &client,
        fresh,
        json!({
            "metadata": {"annotations": {"skyhook.nvidia.com/autoTaint_skyhook.nvidia.com": "true"}},
            "spec": {"taints": [{"key": "skyhook.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"}]},
        }),
    )
    .await;
    let upstream = format!(
        r#"
apiVersion: skyhook.nvidia.com/v1alpha1
kind: DeploymentPolicy
metadata: {{name: {name}}}
spec:
  default:
    budget: {{percent: 50}}
    strategy: {{fixed: {{initialBatch: 2}}}}
---
apiVersion: skyhook.nvidia.com/v1alpha1
kind: Skyhook
metadata:
  name: {name}
  labels: {{"{SUITE}": {name}}}
  annotations: {{"skyhook.nvidia.com/version": v0.15.0}}
spec:
  nodeSelectors: {{matchLabels: {{"{POOL}": {name}}}}}
  deploymentPolicy: {name}
  runtimeRequired: true
  packages:
    driver:
      version: 1.2.0
      image: ghcr.io/nvidia/skyhook-packages/driver
      interrupt: {{type: reboot}}
    tuned:
      version: 0.3.0
      image: ghcr.io/nvidia/skyhook-packages/tuned
      dependsOn: {{driver: 1.2.0}}
"#
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let objects = dir.path().join("upstream.yaml");
    std::fs::write(&objects, &upstream).expect("objects");
    cluster
        .kubectl(&["apply", "-f", &objects.display().to_string()])
        .await
        .expect("upstream objects");
    // The rollout progress upstream recorded.
    let status = json!({"status": {
        "status": "in_progress",
        "nodePriority": {partial: "2026-11-30T10:00:00Z"},
        "nodeOrderOffset": 1,
        "compartmentStatuses": {"__default__": {"matched": 4, "ceiling": 2, "inProgress": 1, "completed": 1, "progressPercent": 25,
            "batchState": {"currentBatch": 2, "consecutiveFailures": 0, "completedNodes": 1, "failedNodes": 0, "shouldStop": false, "lastBatchSize": 1, "lastBatchFailed": false}}},
        "nodeState": {}, "conditions": [],
    }});
    let status_file = dir.path().join("status.json");
    std::fs::write(&status_file, status.to_string()).expect("status");
    cluster
        .kubectl(&[
            "patch",
            "skyhook",
            name,
            "--subresource=status",
            "--type=merge",
            "--patch-file",
            &status_file.display().to_string(),
        ])
        .await
        .expect("upstream status");
    let all = [installed, partial, fresh, ignored];
    let before = node_marks(&client, &all).await;

    // --dry-run shows every change and writes nothing.
    let dry = sh(
        cluster,
        &ns,
        &format!("migrate-from-skyhook --skyhook {name} --dry-run -o json"),
    )
    .await
    .json();
    let changes: Vec<(String, String)> = dry["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap_or("").to_owned(),
                c["name"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let expect = |k: &str, n: &str| (k.to_owned(), n.to_owned());
    assert_eq!(
        changes,
        [
            expect("DeploymentPolicy", name),
            expect("Node", installed),
            expect("Node", partial),
            expect("Node", fresh),
            expect("Node", ignored),
            expect("NodeWright", name),
            expect("NodeWright/status", name),
        ],
        "{dry:#}"
    );
    let nw_change = &dry["changes"][5]["patch"];
    assert_eq!(
        nw_change["spec"]["packages"]["driver"]["interrupt"]["type"],
        "reboot"
    );
    assert_eq!(nw_change["metadata"]["labels"][SUITE], name);
    let table = sh(
        cluster,
        &ns,
        &format!("migrate-from-skyhook --skyhook {name} --dry-run"),
    )
    .await;
    let text = table.ok();
    assert!(
        text.contains(&format!("node/{partial}: would copy skyhook.nvidia.com/nodeState_{name} → nodewright.nvidia.com/nodeState_{name}")),
        "{text}"
    );
    assert!(text.contains("taint skyhook.nvidia.com=runtime-required:NoSchedule → nodewright.nvidia.com=runtime-required:NoSchedule"), "{text}");
    assert_eq!(
        node_marks(&client, &all).await,
        before,
        "a dry run writes nothing"
    );
    assert!(
        Api::<NodeWright>::all(client.clone())
            .get_opt(name)
            .await
            .expect("get")
            .is_none()
    );
    assert!(
        Api::<DeploymentPolicy>::all(client.clone())
            .get_opt(name)
            .await
            .expect("get")
            .is_none()
    );
    sh(
        cluster,
        &ns,
        &format!("migrate-from-skyhook --skyhook {name}"),
    )
    .await
    .fails(2, "refusing to migrate from Skyhook");
    sh(
        cluster,
        &ns,
        "migrate-from-skyhook --skyhook no-such-skyhook -y",
    )
    .await
    .fails(1, "no Skyhook named \"no-such-skyhook\"");

    // The same from the objects in a file.
    let from_file = sh(
        cluster,
        &ns,
        &format!(
            "migrate-from-skyhook -f {} --dry-run -o json",
            objects.display()
        ),
    )
    .await
    .json();
    let kinds: Vec<&str> = from_file["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter_map(|c| c["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "DeploymentPolicy",
            "Node",
            "Node",
            "Node",
            "Node",
            "NodeWright"
        ],
        "{from_file:#}"
    );
    assert_eq!(
        node_marks(&client, &all).await,
        before,
        "a dry run writes nothing"
    );

    // The migration: records first, then the objects.
    let jobs = FirstJobs::start(client.clone(), &ns);
    let done = sh(
        cluster,
        &ns,
        &format!("migrate-from-skyhook --skyhook {name} -y -o yaml"),
    )
    .await
    .yaml();
    assert_eq!(done["dryRun"], false);
    let nw = Api::<NodeWright>::all(client.clone())
        .get(name)
        .await
        .expect("NodeWright");
    assert_eq!(nw.spec.deployment_policy.as_deref(), Some(name));
    assert!(nw.spec.runtime_required);
    assert_eq!(nw.spec.packages["tuned"].depends_on["driver"], "1.2.0");
    assert!(
        !nw.annotations()
            .keys()
            .any(|k| k.starts_with("skyhook.nvidia.com/"))
    );
    let batch = nw
        .status
        .as_ref()
        .and_then(|s| s.compartment_statuses.get("__default__"))
        .and_then(|c| c.batch_state.clone())
        .expect("batch state carried over");
    assert_eq!(batch.current_batch, 2);
    Api::<DeploymentPolicy>::all(client.clone())
        .get(name)
        .await
        .expect("policy converted");
    let nodes = Api::<Node>::all(client.clone());
    let a = nodes.get(installed).await.expect("node");
    assert_eq!(
        nodewright_shared::node_state::NodeState::parse(
            &a.annotations()[&keys::node_state_key(name)]
        )
        .expect("state"),
        nodewright_shared::node_state::NodeState::parse(&a.annotations()[&up("nodeState")])
            .expect("state")
    );
    assert_eq!(a.annotations()[&keys::node_version_key(name)], "v0.15.0");
    assert_eq!(a.labels()[&keys::node_status_key(name)], "complete");
    let b = nodes.get(partial).await.expect("node");
    assert_eq!(
        b.annotations()
            .get(&keys::cordon_key(name))
            .map(String::as_str),
        Some("true")
    );
    let d = nodes.get(ignored).await.expect("node");
    assert_eq!(
        d.labels().get(keys::IGNORE_LABEL).map(String::as_str),
        Some("true")
    );
    let again = sh(
        cluster,
        &ns,
        &format!("migrate-from-skyhook --skyhook {name} -y"),
    )
    .await;
    assert!(
        again.ok().contains("everything is migrated already"),
        "{again:#?}"
    );

    // The operator takes over: only what was not installed runs.
    let _operator = operator(&client, &ns, &[name], 3, None);
    wait_nodes_complete(cluster, &client, name, &[installed, partial, fresh]).await;
    let runs = jobs.runs();
    assert!(
        !runs.iter().any(|(n, _, _)| n == installed),
        "nothing reran on the installed node: {runs:?}"
    );
    assert!(
        !runs
            .iter()
            .any(|(n, p, _)| n == partial && p.starts_with("driver-")),
        "{runs:?}"
    );
    assert!(
        runs.iter()
            .any(|(n, p, s)| n == partial && p == "tuned-0.3.0" && s == "apply"),
        "{runs:?}"
    );
    assert!(
        runs.iter()
            .any(|(n, p, s)| n == fresh && p == "driver-1.2.0" && s == "apply"),
        "{runs:?}"
    );
    assert!(!runs.iter().any(|(n, _, _)| n == ignored), "{runs:?}");
    // Upstream's cordon was handed over and released; the runtime taint lifted at completion
    // (by the passes after the nodes complete).
    let nodes = &nodes;
    cluster
        .wait_for(
            "the cordon released and the runtime taint lifted",
            BOUND,
            || async move {
                let b = nodes
                    .get(partial)
                    .await
                    .map_err(|e| cluster.kube_error("get".into(), e))?;
                let c = nodes
                    .get(fresh)
                    .await
                    .map_err(|e| cluster.kube_error("get".into(), e))?;
                let released = !b.annotations().contains_key(&keys::cordon_key(name))
                    && b.spec.as_ref().and_then(|s| s.unschedulable) != Some(true);
                let lifted = !c
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.clone())
                    .unwrap_or_default()
                    .iter()
                    .any(|t| t.value.as_deref() == Some("runtime-required"));
                Ok((released && lifted).then_some(()))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let status = sh(
        cluster,
        &ns,
        &format!("node status {installed} --nodewright {name} -o json"),
    )
    .await
    .json();
    assert_eq!(status[0]["packagesComplete"], 2);
}

/// The README's "Day-2 operations" transcript: a rollout in progress, a timed-out package
/// explained by `why`, its logs, a rerun and a reset, each command's real output from a run on
/// the local control plane. Ignored in the suite (it narrates, the tests above assert); run it
/// with `cargo test -p nodewright-cli --test e2e_cli day2 -- --ignored --nocapture`. It prints
/// the transcript and writes it to `$NODEWRIGHT_CLI_TRANSCRIPT` when set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints the README's Day-2 transcript; run explicitly"]
async fn day2_transcript() {
    let cluster = cluster().await;
    if common::skip_without_kwok_logs(cluster, "the Day-2 transcript").await {
        return;
    }
    let client = cluster.client().await.expect("client");
    // The operator's default namespace, so the commands need no -n.
    let ns = "nodewright";
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    if namespaces.get_opt(ns).await.expect("namespace").is_none() {
        let mut n = k8s_openapi::api::core::v1::Namespace::default();
        n.metadata.name = Some(ns.into());
        namespaces
            .create(&PostParams::default(), &n)
            .await
            .expect("namespace");
    }
    let name = "gpu-setup";
    let mut nodes = Vec::new();
    for i in 0..4 {
        let node = format!("gpu-{i}");
        create_fake_node(&client, &node, &[(POOL, "gpu")], json!([])).await;
        nodes.push(node);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let _logs = driver_logs(
        &client,
        ns,
        dir.path(),
        &[
            "unpacking gpu-driver 1.4.0",
            "installing kernel module sources",
        ],
        &[
            "checking gpu-driver 1.4.0",
            "modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.1.0-27-cloud-amd64",
            "error: the driver module does not load",
        ],
    );
    let fixed = Arc::new(AtomicBool::new(false));
    let broken = failing_driver(fixed.clone(), Some("gpu-2".into()));
    let slow = PodFate::succeed().delay("2s");
    let hook: JobHook = Arc::new(move |job: &mut Job| {
        if let Some(spec) = job.spec.as_mut() {
            slow.apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
        broken(job);
    });
    let _operator = operator(&client, ns, &[name], 1, Some(hook));
    create_policy(&client, "gpu-rollout", 2, 1).await;
    let mut driver = package("1.4.0", &[]);
    driver.image = "ghcr.io/example/gpu-driver".into();
    driver.interrupt = Some(Interrupt {
        kind: InterruptType::Reboot,
        services: vec![],
    });
    let mut tuned = package("0.9.1", &[("driver", "1.4.0")]);
    tuned.image = "ghcr.io/example/tuned".into();
    create_nodewright(
        &client,
        name,
        "gpu",
        NodeWrightSpec {
            deployment_policy: Some("gpu-rollout".into()),
            packages: BTreeMap::from([("driver".to_owned(), driver), ("tuned".to_owned(), tuned)]),
            ..NodeWrightSpec::default()
        },
        &[(keys::PAUSE_ANNOTATION, "true")],
    )
    .await;
    wait_status(cluster, &client, name, Status::Paused).await;

    let mut transcript = String::new();
    let mut show = async |args: &[&str]| {
        let run = cli(cluster, ns, args).await;
        transcript.push_str(&format!(
            "$ kubectl nodewright {}\n{}",
            args.join(" "),
            run.stdout
        ));
        if !run.stderr.is_empty() {
            transcript.push_str(&run.stderr);
        }
        transcript.push('\n');
        run
    };
    show(&["plan", name]).await.ok();
    show(&["resume", name, "-y"]).await.ok();
    wait_nodewright(
        cluster,
        &client,
        name,
        "the second batch in progress",
        |nw| {
            nw.status.as_ref().is_some_and(|s| {
                s.node_status.get("gpu-0") == Some(&Status::Complete)
                    && s.node_priority.contains_key("gpu-1")
            })
        },
    )
    .await;
    show(&["node", "list", "--nodewright", name]).await.ok();
    wait_timed_out_job(cluster, &client, ns).await;
    show(&["why", name, "--node", "gpu-2"]).await.ok();
    show(&[
        "package",
        "logs",
        "driver",
        "--nodewright",
        name,
        "--node",
        "gpu-2",
        "--stage",
        "apply",
        "--tail",
        "2",
    ])
    .await
    .ok();
    fixed.store(true, Ordering::SeqCst);
    show(&[
        "package",
        "rerun",
        "driver",
        "--nodewright",
        name,
        "--node",
        "gpu-2",
        "-y",
    ])
    .await
    .ok();
    let refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    wait_installed(cluster, &client, name, "tuned", &refs).await;
    wait_status(cluster, &client, name, Status::Complete).await;
    show(&["node", "list", "--nodewright", name]).await.ok();
    show(&["node", "reset", "gpu-3", "--nodewright", name, "-y"])
        .await
        .ok();
    wait_installed(cluster, &client, name, "tuned", &["gpu-3"]).await;
    wait_status(cluster, &client, name, Status::Complete).await;
    show(&["node", "status", "gpu-3", "-o", "wide"]).await.ok();
    println!("{transcript}");
    if let Some(path) = std::env::var_os("NODEWRIGHT_CLI_TRANSCRIPT") {
        std::fs::write(path, &transcript).expect("transcript");
    }
}

/// kubectl's connection flags reach the API server without a kubeconfig (`--server`, `--token`,
/// `--certificate-authority` or `--insecure-skip-tls-verify`), a wrong CA or server name is
/// refused by TLS, and `--as`/`--as-group` impersonate through the kubeconfig's user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectls_connection_flags_reach_the_cluster_without_a_kubeconfig() {
    let cluster = cluster().await;
    let ns = cluster
        .create_namespace("cli-conn")
        .await
        .expect("namespace");
    let kubeconfig =
        kube::config::Kubeconfig::read_from(cluster.kubeconfig_path()).expect("kubeconfig");
    let target = kubeconfig
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .expect("a cluster");
    let server = target.server.expect("its server");
    let ca = target.certificate_authority.expect("its CA file");
    cluster
        .kubectl(&["-n", &ns, "create", "serviceaccount", "reader"])
        .await
        .expect("ServiceAccount");
    cluster
        .kubectl(&[
            "create",
            "clusterrolebinding",
            &format!("{ns}-reader"),
            "--clusterrole=view",
            &format!("--serviceaccount={ns}:reader"),
        ])
        .await
        .expect("binding");
    let token = cluster
        .kubectl(&["-n", &ns, "create", "token", "reader"])
        .await
        .expect("token");
    let flags = |extra: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = [
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--server",
            &server,
            "--token",
            token.trim(),
            "-n",
            &ns,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        all.extend(extra.iter().map(|s| (*s).to_owned()));
        all.push("version".to_owned());
        all
    };
    let absent = format!("no operator Deployment in namespace {ns}");
    let with_ca = run_binary(
        common::bin(),
        &flags(&["--certificate-authority", &ca]),
        None,
    )
    .await;
    assert!(with_ca.ok().contains(&absent), "{with_ca:#?}");
    let insecure = run_binary(common::bin(), &flags(&["--insecure-skip-tls-verify"]), None).await;
    assert!(insecure.ok().contains(&absent), "{insecure:#?}");
    // No CA the server's certificate chains to, or the wrong name: TLS refuses.
    let unknown = run_binary(common::bin(), &flags(&[]), None).await;
    unknown.fails(1, "certificate");
    let wrong_name = run_binary(
        common::bin(),
        &flags(&[
            "--certificate-authority",
            &ca,
            "--tls-server-name",
            "wrong.invalid",
        ]),
        None,
    )
    .await;
    wrong_name.fails(1, "certificate");
    // Impersonation over the kubeconfig's (admin) user.
    let nobody = format!("system:serviceaccount:{ns}:nobody");
    sh(cluster, &ns, &format!("--as {nobody} version"))
        .await
        .fails(1, &nobody);
    let admins = sh(
        cluster,
        &ns,
        "--as someone --as-group system:masters version",
    )
    .await;
    assert!(admins.ok().contains(&absent), "{admins:#?}");
}

/// The record of `package` at `version` in the node's state for `nodewright` (None: no record).
async fn node_record(
    client: &kube::Client,
    node: &str,
    nodewright: &str,
    package: &str,
    version: &str,
) -> Option<nodewright_shared::node_state::PackageStatus> {
    let n = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .expect("node");
    nodewright_core::node::state::parse_state(&n, nodewright)
        .and_then(|s| s.get(package, version).cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_state_writes_one_record_and_package_reset_forgets_it() {
    use nodewright_shared::node_state::{Stage, State};
    let cluster = cluster().await;
    let name = "cli-record";
    let Ground { client, ns, nodes } = ground(cluster, name, 2).await;
    // No operator: what the commands write is read back as written.
    create_nodewright(
        &client,
        name,
        name,
        NodeWrightSpec {
            packages: BTreeMap::from([("driver".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
        &[],
    )
    .await;
    let update = |node: &str, stage: &str, state: &str| {
        format!(
            "node update-state {node} --nodewright {name} --package driver --stage {stage} --state {state}"
        )
    };
    // Without a terminal and without -y: refused, nothing written.
    sh(cluster, &ns, &update(&nodes[0], "config", "complete"))
        .await
        .fails(2, "refusing to record driver|1.0.0 at config complete");
    assert_eq!(
        node_record(&client, &nodes[0], name, "driver", "1.0.0").await,
        None
    );
    // A stage the package never runs: refused naming it.
    sh(
        cluster,
        &ns,
        &format!("{} -y", update(&nodes[0], "interrupt", "complete")),
    )
    .await
    .fails(
        1,
        "--stage interrupt: package driver of NodeWright cli-record has no interrupt",
    );
    for node in &nodes {
        sh(
            cluster,
            &ns,
            &format!("{} -y", update(node, "config", "complete")),
        )
        .await
        .ok();
        let r = node_record(&client, node, name, "driver", "1.0.0")
            .await
            .expect("recorded");
        assert_eq!(
            (r.stage, r.state, r.restarts),
            (Stage::Config, Some(State::Complete), 0)
        );
    }
    // Sent back to apply on one node: only that record changes.
    sh(
        cluster,
        &ns,
        &format!("{} -y", update(&nodes[1], "apply", "in_progress")),
    )
    .await
    .ok();
    let r = node_record(&client, &nodes[1], name, "driver", "1.0.0")
        .await
        .expect("recorded");
    assert_eq!((r.stage, r.state), (Stage::Apply, Some(State::InProgress)));
    // package reset without --node: every node's record goes.
    let dry = sh(
        cluster,
        &ns,
        &format!("package reset driver --nodewright {name} --dry-run"),
    )
    .await;
    assert!(
        dry.ok().contains("would rerun driver|1.0.0 from the start"),
        "{dry:#?}"
    );
    assert!(
        node_record(&client, &nodes[0], name, "driver", "1.0.0")
            .await
            .is_some()
    );
    sh(
        cluster,
        &ns,
        &format!("package reset driver --nodewright {name} -y"),
    )
    .await
    .ok();
    for node in &nodes {
        assert_eq!(
            node_record(&client, node, name, "driver", "1.0.0").await,
            None,
            "{node}"
        );
    }
}

/// Waits until the NodeWright `name` is complete on the spec of `generation` (or a later one)
/// and has recorded `revisions` revisions.
async fn wait_revisions(
    cluster: &Cluster,
    client: &kube::Client,
    name: &str,
    generation: i64,
    revisions: usize,
) -> NodeWright {
    wait_nodewright(
        cluster,
        client,
        name,
        &format!("complete at generation {generation} with {revisions} revisions"),
        |nw| {
            nw.status.as_ref().is_some_and(|s| {
                s.status == Some(Status::Complete)
                    && s.observed_generation.is_some_and(|g| g >= generation)
                    && s.revisions.len() == revisions
            })
        },
    )
    .await
}

/// The version of `package` in the NodeWright's spec, as stored.
async fn spec_version(client: &kube::Client, name: &str, package: &str) -> (i64, String) {
    let nw = Api::<NodeWright>::all(client.clone())
        .get(name)
        .await
        .expect("NodeWright");
    (
        nw.metadata.generation.unwrap_or_default(),
        nw.spec
            .packages
            .get(package)
            .map(|p| p.version.clone())
            .unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_lists_the_revisions_and_rollback_writes_one_back() {
    let cluster = cluster().await;
    let name = "cli-rollback";
    let Ground { client, ns, nodes } = ground(cluster, name, 2).await;
    let operator = operator(&client, &ns, &[name], 0, None);
    create_nodewright(
        &client,
        name,
        name,
        NodeWrightSpec {
            packages: BTreeMap::from([("tuned".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
        &[],
    )
    .await;
    wait_revisions(cluster, &client, name, 1, 1).await;
    Api::<NodeWright>::all(client.clone())
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"packages": {"tuned": {
                "version": "1.1.0", "configMap": {"tuned.conf": "profile=throughput"}
            }}}})),
        )
        .await
        .expect("NodeWright patched");
    wait_revisions(cluster, &client, name, 2, 2).await;

    let table = sh(cluster, &ns, &format!("history {name}")).await;
    let text = table.ok();
    assert!(
        text.contains("NodeWright: cli-rollback")
            && text.contains("(oldest kept)")
            && text.contains("2 (current)   ")
            && text.contains(
                "tuned:1.1.0   tuned 1.0.0 -> 1.1.0, configMap changed (keys tuned.conf)"
            )
            && text.contains("current spec: generation 2, revision 2"),
        "{table:#?}"
    );
    let json = sh(cluster, &ns, &format!("history {name} -o json"))
        .await
        .json();
    assert_eq!(json["currentRevision"], 2, "{json:#}");
    assert_eq!(json["revisions"][0]["packages"], "tuned:1.0.0");
    assert_eq!(
        json["revisions"][1]["changes"][0]["fields"][0]["to"],
        "1.1.0"
    );
    let one = sh(cluster, &ns, &format!("history {name} --revision 1")).await;
    assert!(
        one.ok().contains(
            "rolling back to it changes: tuned 1.1.0 -> 1.0.0, configMap changed (keys tuned.conf)"
        ),
        "{one:#?}"
    );
    sh(cluster, &ns, &format!("history {name} --revision 7"))
        .await
        .fails(
            1,
            "NodeWright cli-rollback has no revision 7 (revisions: 1, 2)",
        );

    // A dry run shows what changes and writes nothing (the API server validates it).
    let dry = sh(cluster, &ns, &format!("rollback {name} --dry-run")).await;
    let text = dry.ok();
    assert!(
        text.contains("NodeWright cli-rollback: back to revision 1")
            && text.contains("  tuned 1.1.0 -> 1.0.0, configMap changed (keys tuned.conf)")
            && text.contains(
                "nodewright/cli-rollback: would write revision 1's packages as spec.packages"
            )
            && text.contains("(dry run: validated by the API server, nothing was written)"),
        "{dry:#?}"
    );
    assert_eq!(
        spec_version(&client, name, "tuned").await,
        (2, "1.1.0".to_owned())
    );
    // Without a terminal and without -y: refused; an unknown revision: refused.
    sh(cluster, &ns, &format!("rollback {name}"))
        .await
        .fails(2, "refusing to roll back NodeWright cli-rollback");
    sh(cluster, &ns, &format!("rollback {name} --to-revision 9 -y"))
        .await
        .fails(1, "cannot roll back NodeWright cli-rollback: revision 9 is not in its history (revisions: 1, 2)");
    sh(cluster, &ns, &format!("rollback {name} --to-revision 2 -y"))
        .await
        .fails(1, "revision 2 is the current spec: nothing to roll back");
    assert_eq!(
        spec_version(&client, name, "tuned").await,
        (2, "1.1.0".to_owned())
    );

    let done = sh(cluster, &ns, &format!("rollback {name} -y")).await;
    assert!(
        done.ok()
            .contains("nodewright/cli-rollback: write revision 1's packages as spec.packages"),
        "{done:#?}"
    );
    assert_eq!(
        spec_version(&client, name, "tuned").await,
        (3, "1.0.0".to_owned())
    );
    // The operator rolls the nodes back (1.0.0 installs again by apply), and the restored spec
    // becomes the newest revision.
    let back = wait_revisions(cluster, &client, name, 3, 2).await;
    let listed: Vec<(i64, String)> = back
        .status
        .iter()
        .flat_map(|s| &s.revisions)
        .map(|r| (r.revision, r.packages["tuned"].version.clone()))
        .collect();
    assert_eq!(listed, [(2, "1.1.0".to_owned()), (3, "1.0.0".to_owned())]);
    for node in &nodes {
        let n = Api::<Node>::all(client.clone())
            .get(node)
            .await
            .expect("node");
        let state = support::state_of(&n, name).expect("node state");
        let r = state.get("tuned", "1.0.0").expect("1.0.0 recorded");
        assert_eq!(
            (r.stage, r.state),
            (
                nodewright_shared::node_state::Stage::Config,
                Some(nodewright_shared::node_state::State::Complete)
            ),
            "{node}"
        );
    }
    let after = sh(cluster, &ns, &format!("history {name}")).await;
    assert!(
        after.ok().contains("3 (current)") && after.ok().contains("tuned 1.1.0 -> 1.0.0"),
        "{after:#?}"
    );
    operator.stop().await;
}
