//! Outcomes, evidence, strategies and metrics end to end on the local control plane (real
//! kube-apiserver, etcd, the real Job controller, kwok simulating the nodes and what pods do). Each
//! test runs its own operator in-process, scoped to its own NodeWright (label selector) and namespace.
//! A pod's fate is chosen by a label on the Job's pod template (the operator's test hook) or on a live
//! pod. No timing assertion: waits are bounded only so a broken build fails instead of hanging, and
//! orders are read from the objects' own timestamps.
//!
//! (a) an exponential DeploymentPolicy rolls 7 nodes in batches of 1, 2 and 4 (each batch starts
//!     after the previous one completed; the batch state in status), and `/metrics` shows it.
//! (b) erroring is recorded from the first failed attempt, while the Job still runs; a later
//!     successful attempt completes the stage over it.
//! (c) a hanging package (stageTimeout 3s) fails each attempt by DeadlineExceeded and times out; the
//!     first and last attempts are kept, the middle one deleted; (f) fixing the package's image
//!     clears the timed-out stage and the NodeWright completes.
//! (e) an attempt whose container never started leaves its waiting reason in `last-logs`.
//! (g) a node whose stage timed out ends its batch as a failure; with failureThreshold 1 below the
//!     safety limit the rollout stops (`shouldStop`) and no later batch starts.
//! (h) killing the operator mid-rollout (no graceful stop) and starting a new one completes the
//!     rollout, and no stage runs again once its outcome was recorded (one Job, one pod each).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nodewright_e2e::PodFate;

mod support;
use nodewright_operator::JobHook;
use nodewright_operator::metrics::Metrics;
use nodewright_operator::metrics::nodewright_gauges::StateMetrics;
use nodewright_operator::runtime::admin::{Readiness, bind, router, serve};
use nodewright_shared::api::{
    DeploymentPolicy, DeploymentPolicyOptions, NodeWright, NodeWrightSpec, Status,
};
use nodewright_shared::keys;
use nodewright_shared::node_state::{Stage, State};
use serde_json::json;
use support::Watched;
use support::admin_http::{scrape, series_value};
use support::{
    BOUND, Operator, SuiteOperator, create_labelled_nodewright, create_numbered_nodes,
    fail_on_node, fate_for, job_package, node_state, on_nodes, package, record, scenario, spec_on,
    wait_event, wait_job_pods, wait_status, wait_timed_out_job,
};
use tokio_util::sync::CancellationToken;

/// Label that scopes each test's operator to its own NodeWright (distinct from the other suites).
const SUITE_LABEL: &str = "nodewright.test/outcomes-suite";

fn start_operator(
    client: kube::Client,
    namespace: &str,
    backoff_limit: i32,
    hook: Option<JobHook>,
    metrics: StateMetrics,
) -> Operator {
    SuiteOperator::new(&client, namespace, SUITE_LABEL, namespace)
        .backoff_limit(backoff_limit)
        .hook(hook)
        .metrics(Some(metrics))
        .start()
}

async fn create_nodewright(client: &kube::Client, name: &str, spec: NodeWrightSpec) -> NodeWright {
    create_labelled_nodewright(client, SUITE_LABEL, name, spec).await
}

fn stage_of(job: &Job) -> Option<String> {
    job.labels().get(keys::STAGE_LABEL).cloned()
}

fn condition(
    job: &Job,
    type_: &str,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    support::job_condition_time(job, type_)
}

fn finished(job: &Job) -> bool {
    condition(job, "Complete").is_some() || condition(job, "Failed").is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_an_exponential_strategy_rolls_in_growing_batches_and_the_metrics_show_it() {
    let (cluster, client, ns) = scenario("exponential").await;
    let names = create_numbered_nodes(&client, &ns, 7).await;
    let policy: DeploymentPolicy = serde_json::from_value(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": ns},
        "spec": {"default": {
            "budget": {"percent": 100},
            "strategy": {"exponential": {"initialBatch": 1, "growthFactor": 2}}
        }}
    }))
    .expect("policy");
    Api::<DeploymentPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("DeploymentPolicy created");

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
    let _operator = start_operator(client.clone(), &ns, 3, None, state_metrics);
    create_nodewright(
        &client,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&names),
            deployment_policy: Some(ns.clone()),
            // Keep the final batch state readable (a reset would put it back to batch 1).
            deployment_policy_options: Some(DeploymentPolicyOptions {
                reset_batch_state_on_completion: Some(false),
            }),
            packages: BTreeMap::from([("grow".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    let status = nw.status.expect("status");
    assert_eq!(status.complete_nodes, "7/7");
    let default = status
        .compartment_statuses
        .get(nodewright_shared::api::DEFAULT_COMPARTMENT)
        .expect("__default__ compartment");
    let batch = default.batch_state.clone().expect("batch state");
    assert_eq!(
        (
            batch.current_batch,
            batch.last_batch_size,
            batch.completed_nodes,
            batch.failed_nodes,
            batch.consecutive_failures,
            batch.should_stop
        ),
        (4, 4, 7, 0, 0, false),
        "three batches (1, 2, 4) evaluated: {batch:?}"
    );

    // Nodes are taken in creation order: batches [n0], [n1, n2], [n3..n6]. Each batch's first Job
    // was created only after the previous batch's last Job had completed.
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items;
    let span_of = |nodes: &[String]| {
        let on: Vec<&Job> = jobs
            .iter()
            .filter(|j| {
                j.labels()
                    .get(keys::NODE_LABEL)
                    .is_some_and(|n| nodes.contains(n))
            })
            .collect();
        let first = on
            .iter()
            .filter_map(|j| j.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .min()
            .expect("Jobs in every batch");
        let last = on
            .iter()
            .filter_map(|j| condition(j, "Complete").map(|t| t.0))
            .max()
            .expect("completed Jobs");
        (first, last)
    };
    let batches = [&names[0..1], &names[1..3], &names[3..7]];
    for pair in batches.windows(2) {
        let (_, done) = span_of(pair[0]);
        let (next, _) = span_of(pair[1]);
        assert!(
            next >= done,
            "batch {:?} started at {next} before batch {:?} finished at {done}",
            pair[1],
            pair[0]
        );
    }

    // The metrics of the last pass: the same facts.
    let text = scrape(addr).await;
    let nw_label = format!("nodewright_name=\"{ns}\"");
    let expect = [
        (
            format!("nodewright_status{{{nw_label},status=\"complete\"}}"),
            1.0,
        ),
        (
            format!("nodewright_status{{{nw_label},status=\"in_progress\"}}"),
            0.0,
        ),
        (
            format!("nodewright_node_status_count{{{nw_label},status=\"complete\"}}"),
            7.0,
        ),
        (format!("nodewright_node_target_count{{{nw_label}}}"), 7.0),
        (
            format!(
                "nodewright_package_state_count{{{nw_label},package_name=\"grow\",package_version=\"1.0.0\",state=\"complete\"}}"
            ),
            7.0,
        ),
        (
            format!(
                "nodewright_rollout_current_batch{{{nw_label},policy_name=\"{ns}\",compartment_name=\"__default__\",strategy=\"exponential\"}}"
            ),
            4.0,
        ),
        (
            format!(
                "nodewright_rollout_completed{{{nw_label},policy_name=\"{ns}\",compartment_name=\"__default__\",strategy=\"exponential\"}}"
            ),
            7.0,
        ),
    ];
    for (series, value) in expect {
        assert_eq!(
            series_value(&text, &series),
            Some(value),
            "{series}\n{text}"
        );
    }
    let reconciles = series_value(
        &text,
        "nodewright_reconcile_total{controller=\"nodewright\",result=\"success\"}",
    )
    .expect("reconcile counter");
    assert!(reconciles >= 1.0, "{text}");
    assert!(
        series_value(
            &text,
            "nodewright_reconcile_total{controller=\"job\",result=\"success\"}"
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
    admin_stop.cancel();
    let _ = admin.await;
    let nodes: Api<Node> = Api::all(client.clone());
    for name in &names {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_erroring_is_recorded_from_the_first_failure_while_the_job_runs() {
    let (cluster, client, ns) = scenario("flaky").await;
    let node = cluster.node_names()[0].clone();
    let _operator = start_operator(
        client.clone(),
        &ns,
        6,
        Some(fate_for(
            "flaky",
            "apply",
            PodFate::fail().exit_code(1).delay("2s"),
        )),
        StateMetrics::default(),
    );
    let mut flaky = package("1.0.0", &[]);
    // No deadline: the attempt the test holds hangs until the test lets it succeed.
    flaky.stage_timeout = Some("0".into());
    create_nodewright(&client, &ns, spec_on(&[&node], [("flaky", flaky)])).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let apply = ListParams::default().labels(&format!("{}=apply", keys::STAGE_LABEL));
    let hang = PodFate::hang();
    // Once an attempt has failed, every later attempt is held (its fate changed to hang), so the Job
    // is certainly still running when the node state is read.
    let (restarts, held) = cluster
        .wait_for("erroring recorded while the Job runs", BOUND, || {
            let (pods, jobs, apply, client, ns, node, hang) = (
                pods.clone(),
                jobs.clone(),
                apply.clone(),
                client.clone(),
                ns.clone(),
                node.clone(),
                hang.clone(),
            );
            async move {
                let list = pods
                    .list(&apply)
                    .await
                    .map_err(|e| cluster.kube_error("pods".into(), e))?
                    .items;
                let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
                if !list.iter().any(|p| phase(p).as_deref() == Some("Failed")) {
                    return Ok(None);
                }
                let mut held = None;
                for p in &list {
                    if matches!(phase(p).as_deref(), Some("Failed" | "Succeeded")) {
                        continue;
                    }
                    if p.labels().get("nodewright.test/fate") != Some(&"hang".to_owned()) {
                        let patch = json!({"metadata": {"labels": hang.labels()}});
                        pods.patch(&p.name_any(), &PatchParams::default(), &Patch::Merge(patch))
                            .await
                            .map_err(|e| cluster.kube_error("hold the attempt".into(), e))?;
                    }
                    held = Some(p.name_any());
                }
                let Some(held) = held else { return Ok(None) };
                let Some(state) = node_state(&client, &node, &ns).await else {
                    return Ok(None);
                };
                let Some(r) = state.get("flaky", "1.0.0").cloned() else {
                    return Ok(None);
                };
                if r.state != Some(State::Erroring) {
                    return Ok(None);
                }
                let job = jobs
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| cluster.kube_error("jobs".into(), e))?
                    .items
                    .into_iter()
                    .find(|j| stage_of(j).as_deref() == Some("apply"))
                    .expect("the apply Job");
                assert!(!finished(&job), "the Job still runs: {:?}", job.status);
                assert_eq!(r.stage, Stage::Apply);
                Ok(Some((r.restarts, held)))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(restarts >= 1, "restarts counts the failed attempts");
    let nw = wait_status(cluster, &client, &ns, Status::Erroring).await;
    assert_eq!(nw.status.map(|s| s.nodes_in_progress), Some(1));

    // The held attempt succeeds: the stage completes over the erroring record.
    let fate = PodFate::succeed().delay("1s");
    let patch = json!({"metadata": {"labels": fate.labels(), "annotations": fate.annotations()}});
    pods.patch(&held, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("fate patched");
    wait_status(cluster, &client, &ns, Status::Complete).await;
    let r = record(&client, &node, &ns, "flaky", "1.0.0").await;
    assert_eq!((r.stage, r.state), (Stage::Config, Some(State::Complete)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_f_a_hanging_package_times_out_keeps_first_and_last_attempt_and_a_fix_completes_it() {
    let (cluster, client, ns) = scenario("hanging").await;
    let node = cluster.node_names()[1].clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let seen = Watched::start(pods.clone(), kube::runtime::watcher::Config::default());
    // Pods of images named `.../hang` hang; the fixed image runs normally.
    let hook: JobHook = Arc::new(|job: &mut Job| {
        let hangs = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.image.as_deref().is_some_and(|i| i.contains("/hang:")))
            });
        if hangs && let Some(spec) = job.spec.as_mut() {
            PodFate::hang().apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    });
    let backoff_limit = 2;
    let _operator = start_operator(
        client.clone(),
        &ns,
        backoff_limit,
        Some(hook),
        StateMetrics::default(),
    );
    let mut hanging = package("1.0.0", &[]);
    hanging.image = "ghcr.io/nvidia/skyhook/hang".into();
    hanging.stage_timeout = Some("3s".into());
    create_nodewright(&client, &ns, spec_on(&[&node], [("stuck", hanging)])).await;
    let job = wait_timed_out_job(cluster, &client, &ns).await;
    let failed = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Failed"))
        .expect("Failed condition");
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert_eq!(
        job.status.as_ref().and_then(|s| s.failed),
        Some(backoff_limit + 1)
    );

    // Every attempt ended by its own deadline.
    let uid = job.metadata.uid.clone().expect("uid");
    let mut attempts: Vec<Pod> = seen
        .latest()
        .into_iter()
        .filter(|p| p.labels().get("batch.kubernetes.io/controller-uid") == Some(&uid))
        .collect();
    attempts.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, &a.metadata.name)
            .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
    });
    assert_eq!(attempts.len(), 3, "backoffLimit 2: three attempts");
    for p in &attempts {
        assert_eq!(
            p.status.as_ref().and_then(|s| s.reason.as_deref()),
            Some("DeadlineExceeded"),
            "{} ended by its deadline",
            p.name_any()
        );
    }
    // The first and the last attempt are kept, the middle one deleted.
    let want: BTreeSet<String> = [attempts[0].name_any(), attempts[2].name_any()].into();
    let middle = attempts[1].name_any();
    let kept = wait_job_pods(cluster, &pods, &uid, "the middle attempt pruned", |pods| {
        let names: BTreeSet<String> = pods.iter().map(|p| p.name_any()).collect();
        (!names.contains(&middle)).then_some(names)
    })
    .await;
    assert_eq!(kept, want, "the first and the last attempt stay");

    let r = record(&client, &node, &ns, "stuck", "1.0.0").await;
    assert_eq!((r.stage, r.state), (Stage::Apply, Some(State::Erroring)));
    assert_eq!(r.restarts, backoff_limit + 1);
    wait_status(cluster, &client, &ns, Status::Erroring).await;

    // (f) The package's image is fixed: the timed-out stage is cleared and runs again, and completes.
    Api::<NodeWright>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"packages": {"stuck": {
                "image": "ghcr.io/nvidia/skyhook/agentless"
            }}}})),
        )
        .await
        .expect("package fixed");
    wait_status(cluster, &client, &ns, Status::Complete).await;
    let r = record(&client, &node, &ns, "stuck", "1.0.0").await;
    assert_eq!((r.stage, r.state), (Stage::Config, Some(State::Complete)));
    assert_eq!(r.image, "ghcr.io/nvidia/skyhook/agentless");
    // `kubectl get events` shows both: the timeout (cause: the deadline) and its clearing.
    let timed_out = wait_event(cluster, &client, &ns, "StageTimedOut", "NodeWright").await;
    let note = timed_out.message.unwrap_or_default();
    assert!(
        note.contains("after 3 of 3 attempts: deadline exceeded"),
        "{note}"
    );
    let cleared = wait_event(cluster, &client, &ns, "StageTimeoutCleared", "NodeWright").await;
    assert_eq!(cleared.type_.as_deref(), Some("Normal"));
    assert!(
        cleared
            .message
            .is_some_and(|m| m.contains("[stuck:1.0.0] stage [apply]")),
    );
    wait_event(cluster, &client, &node, "StageTimeoutCleared", "Node").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e_an_attempt_that_never_started_leaves_its_waiting_reason_as_last_logs() {
    let (cluster, client, ns) = scenario("nopull").await;
    let node = cluster.node_names()[2].clone();
    let _operator = start_operator(
        client.clone(),
        &ns,
        0,
        Some(fate_for("nopull", "apply", PodFate::never_start())),
        StateMetrics::default(),
    );
    let mut nopull = package("1.0.0", &[]);
    nopull.stage_timeout = Some("2s".into());
    create_nodewright(&client, &ns, spec_on(&[&node], [("nopull", nopull)])).await;
    let job = wait_timed_out_job(cluster, &client, &ns).await;
    let logs = job
        .annotations()
        .get(keys::LAST_LOGS_ANNOTATION)
        .cloned()
        .expect("last-logs written before the outcome was marked");
    assert!(logs.contains("never started: ImagePullBackOff"), "{logs}");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items;
    assert!(
        pods.iter()
            .any(|p| logs.contains(&format!("pod {}", p.name_any()))),
        "names the attempt: {logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_a_killed_operator_is_replaced_and_no_recorded_stage_runs_again() {
    let (cluster, client, ns) = scenario("killed").await;
    let nodes: Vec<String> = cluster.node_names().to_vec();
    let jobs_seen = Watched::start(
        Api::<Job>::namespaced(client.clone(), &ns),
        kube::runtime::watcher::Config::default(),
    );
    let pods_seen = Watched::start(
        Api::<Pod>::namespaced(client.clone(), &ns),
        kube::runtime::watcher::Config::default(),
    );
    // Every attempt takes a moment, so the operator is killed with stages in flight.
    let slow = PodFate::succeed().delay("2s");
    let hook: JobHook = Arc::new(move |job: &mut Job| {
        if let Some(spec) = job.spec.as_mut() {
            slow.apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    });
    let first = start_operator(
        client.clone(),
        &ns,
        3,
        Some(hook.clone()),
        StateMetrics::default(),
    );
    create_nodewright(
        &client,
        &ns,
        spec_on(
            &nodes,
            [
                ("one", package("1.0.0", &[])),
                ("two", package("1.0.0", &[("one", "1.0.0")])),
            ],
        ),
    )
    .await;
    // Killed once some stage's outcome is recorded and the rollout is not done.
    cluster
        .wait_for("a stage recorded complete", BOUND, || {
            let (client, ns, nodes) = (client.clone(), ns.clone(), nodes.clone());
            async move {
                for node in &nodes {
                    if let Some(state) = node_state(&client, node, &ns).await
                        && state.iter().any(|r| r.state == Some(State::Complete))
                    {
                        return Ok(Some(()));
                    }
                }
                Ok(None)
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    first.kill().await;
    let nw = Api::<NodeWright>::all(client.clone())
        .get(&ns)
        .await
        .expect("NodeWright");
    assert_ne!(
        nw.status.and_then(|s| s.status),
        Some(Status::Complete),
        "killed mid-rollout"
    );
    let _second = start_operator(client.clone(), &ns, 3, Some(hook), StateMetrics::default());
    wait_status(cluster, &client, &ns, Status::Complete).await;

    // One Job per node, package and stage, never recreated, each with one successful attempt.
    let jobs = jobs_seen.latest();
    let mut per_stage: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    for job in &jobs {
        let key = (
            job.labels()
                .get(keys::NODE_LABEL)
                .cloned()
                .unwrap_or_default(),
            job_package(job).unwrap_or_default(),
            stage_of(job).unwrap_or_default(),
        );
        per_stage
            .entry(key)
            .or_default()
            .push(job.metadata.uid.clone().unwrap_or_default());
    }
    assert_eq!(
        per_stage.len(),
        nodes.len() * 4,
        "apply and config of two packages on every node: {per_stage:?}"
    );
    for (key, uids) in &per_stage {
        assert_eq!(uids.len(), 1, "{key:?} ran as more than one Job: {uids:?}");
    }
    let pods = pods_seen.latest();
    for job in &jobs {
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let attempts: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.labels().get("batch.kubernetes.io/controller-uid") == Some(&uid))
            .collect();
        assert_eq!(attempts.len(), 1, "one attempt of {}", job.name_any());
    }
    let current = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items;
    assert_eq!(current.len(), jobs.len(), "no Job was deleted");
    for job in &current {
        assert_eq!(
            job.annotations()
                .get(keys::STATE_RECORDED_ANNOTATION)
                .map(String::as_str),
            Some("complete"),
            "{}",
            job.name_any()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g_a_timed_out_node_fails_its_batch_and_the_failure_threshold_stops_the_rollout() {
    let (cluster, client, ns) = scenario("stopped").await;
    let names = create_numbered_nodes(&client, &ns, 3).await;
    let policy: DeploymentPolicy = serde_json::from_value(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": ns},
        "spec": {"default": {
            "budget": {"count": 3},
            "strategy": {"fixed": {"initialBatch": 1, "failureThreshold": 1, "safetyLimit": 50}}
        }}
    }))
    .expect("policy");
    Api::<DeploymentPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("DeploymentPolicy created");
    // The package fails on the first node only (attempts spent at once: backoffLimit 0).
    let hook = fail_on_node(names[0].clone());
    let _operator = start_operator(client.clone(), &ns, 0, Some(hook), StateMetrics::default());
    create_nodewright(
        &client,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&names),
            deployment_policy: Some(ns.clone()),
            packages: BTreeMap::from([("brittle".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    // The first batch (the broken node) times out: a failed batch below the safety limit with
    // failureThreshold 1 stops the rollout, instead of the node pinning its batch forever.
    let api = Api::<NodeWright>::all(client.clone());
    let batch = support::wait_pick(
        cluster,
        api.clone(),
        &ns,
        "the rollout stopped",
        |nw: &NodeWright| {
            nw.status
                .as_ref()
                .and_then(|s| {
                    s.compartment_statuses
                        .get(nodewright_shared::api::DEFAULT_COMPARTMENT)
                        .cloned()
                })
                .and_then(|c| c.batch_state)
                .filter(|b| b.should_stop)
        },
    )
    .await;
    assert_eq!(
        (
            batch.failed_nodes,
            batch.completed_nodes,
            batch.last_batch_size,
            batch.last_batch_failed,
            batch.consecutive_failures
        ),
        (1, 0, 1, true, 1),
        "{batch:?}"
    );
    // Stopped: no Job was ever created on the other nodes, and they wait.
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items;
    assert!(
        jobs.iter()
            .all(|j| j.labels().get(keys::NODE_LABEL) == Some(&names[0])),
        "only the first batch ran"
    );
    let nw = api.get(&ns).await.expect("NodeWright");
    let node_status = nw.status.map(|s| s.node_status).unwrap_or_default();
    assert_eq!(node_status.get(&names[0]), Some(&Status::Erroring));
    assert_eq!(node_status.get(&names[1]), Some(&Status::Waiting));
    assert_eq!(node_status.get(&names[2]), Some(&Status::Waiting));
    let nodes: Api<Node> = Api::all(client.clone());
    for name in &names {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
}
