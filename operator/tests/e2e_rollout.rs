//! The operator end to end on the local control plane (real kube-apiserver, etcd, the real Job
//! controller, kwok simulating three nodes and what pods do). Each test runs its own operator
//! in-process, scoped to its own NodeWright (label selector) and namespace, so the tests share the
//! cluster without seeing each other. A pod's fate (succeed, fail, reject, hang...) is chosen by a
//! label on the Job's pod template, set through the operator's test hook. No timing assertion: waits
//! are bounded only so a broken build fails instead of hanging.
//!
//! (a) three packages, one depending on the other two, complete on every node; Job shape (DESIGN §4.1).
//! (b) a package whose attempts exit 1: erroring, then timed out after JOB_BACKOFF_LIMIT+1 attempts,
//!     the Job kept as evidence with state-recorded and the failed-Job TTL, its first and last attempts
//!     kept (the middle one pruned), and nothing recreated.
//! (c) interrupt packages: cordon, drain (evicting a workload), one merged interrupt, uncordon.
//! (d) attempts only rejected at kubelet admission: the Job is deleted and the stage runs again.
//! (e) a disrupted attempt spends no attempt (backoffLimit 0 and the Job still completes).
//! (f) pause suspends the unfinished Job, resume unsuspends it; a package change replaces it (drift).
//! (g) interruptionBudget count 1: the nodes are rolled one after another, in three fixed batches.
//! (h) two replicas with leader election: only the leader works; when it stops, the other takes over
//!     the rollout in flight and finishes it.
//! (i) a version bump upgrades in place (upgrade → config) and drops the old version's record.
//! (j) runtimeRequired: a node tainted runtime-required loses the taint once the NodeWright is done
//!     there (on a fake node of its own, so the taint blocks no other test).
//! (k) autoTaintNewNodes: a new node is tainted before the rollout and untainted when it is done; a
//!     second such NodeWright does not taint the node again.
//!
//! The races the outcome rules exist for (DESIGN §4.4), produced for real, each on a node of its own:
//! (l) a create that meets an existing Job (AlreadyExists) keeps it: one Job, one attempt, recorded;
//! (m) a Failed Job no operator recorded (the apiserver refused the mark, the operator was killed)
//!     is recorded timed out by the next operator, from the Job as it finds it, and nothing reruns;
//! (n) a rejected-only Job marked processed whose deletion was refused, then the operator killed:
//!     the next operator deletes it and the stage runs again;
//! (o) a version bump while an attempt runs stops it (its Job deleted, never counted) and installs
//!     the new version fresh.
//! (p) the upgrade to a package namespace: a stage still running in the operator's namespace (the
//!     earlier layout) is settled there (recorded once, never rerun) while every new Job is held
//!     (an Event says why); then Jobs run in the package namespace and the old leftovers go.
//! (q) with REAPPLY_ON_REBOOT, runtimeRequired and autoTaintNewNodes, a node rebooted out of band
//!     gets the runtime-required taint back until its packages ran again (upstream #273).
//! (r) runtimeRequiredCordonAfter (upstream #401): the write that lifts the taint cordons the node
//!     and marks it; later passes keep it; a validator's one-patch release leaves it schedulable and
//!     it is not cordoned again; uncordoned with the mark kept, the operator removes the stale mark;
//!     only the mark removed, it stays cordoned; the NodeWright's deletion keeps the cordon.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nodewright_e2e::{Cluster, PodFate};

mod support;
use nodewright_operator::JobHook;
use nodewright_operator::metrics::api::ApiMetrics;
use nodewright_shared::api::{NodeWright, NodeWrightSpec, Status};
use nodewright_shared::keys;
use nodewright_shared::node_state::{Stage, State};
use prometheus_client::registry::Registry;
use serde_json::json;
use support::job_write_block::{JobWriteBlock, Refused};
use support::{
    BOUND, Operator, RUNTIME_REQUIRED, SuiteOperator, create_fake_node, create_labelled_nodewright,
    fate_for, job_package, job_pods, list_all, no_schedule, node_state, on_nodes, operator_env,
    package, record, scenario, scenario_with_node, spawn_operator, spec_on, wait_job_pods,
    wait_nodewright, wait_nodewright_gone, wait_status, wait_timed_out_job,
};
use support::{create_scoped_nodewright, job_condition_time};

/// Label that scopes each test's operator to its own NodeWright.
const SUITE_LABEL: &str = "nodewright.test/suite";

/// A client for the operator whose requests are counted by the operator's own API counter layer,
/// registered in `registry` (the measurement of the rollout).
async fn counted_client(cluster: &Cluster, registry: &mut Registry) -> kube::Client {
    let metrics = ApiMetrics::registered(registry);
    let config = cluster.config().await.expect("client config");
    kube::client::ClientBuilder::try_from(config)
        .expect("client builder")
        .with_layer(&metrics.layer())
        .build()
}

/// The `nodewright_operator_api_requests_total` samples of `registry`, as (labels, count).
fn api_requests(registry: &Registry) -> Vec<(String, u64)> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("metrics encode");
    text.lines()
        .filter_map(|l| l.strip_prefix("nodewright_operator_api_requests_total"))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(labels, n)| n.parse().ok().map(|n| (labels.to_owned(), n)))
        .collect()
}

fn start_operator(
    client: kube::Client,
    namespace: &str,
    suite: &str,
    backoff_limit: i32,
    hook: Option<JobHook>,
) -> Operator {
    start_replica(client, namespace, suite, backoff_limit, hook, None)
}

/// An operator replica; with `elect = Some(identity)` it takes part in the leader election.
fn start_replica(
    client: kube::Client,
    namespace: &str,
    suite: &str,
    backoff_limit: i32,
    hook: Option<JobHook>,
    elect: Option<&str>,
) -> Operator {
    let operator = SuiteOperator::new(&client, namespace, SUITE_LABEL, suite)
        .backoff_limit(backoff_limit)
        .hook(hook);
    match elect {
        Some(identity) => operator
            .pod_name(identity.to_owned())
            .env(&[
                ("LEADER_ELECTION", "true"),
                ("LEASE_DURATION", "6s"),
                ("LEASE_RENEW_DEADLINE", "4s"),
                ("LEASE_RETRY_PERIOD", "1s"),
            ])
            .start(),
        None => operator.start(),
    }
}

async fn create_nodewright(client: &kube::Client, name: &str, spec: NodeWrightSpec) -> NodeWright {
    create_labelled_nodewright(client, SUITE_LABEL, name, spec).await
}

/// The fixture's fake nodes.
fn fixture_nodes(cluster: &Cluster) -> Vec<&str> {
    cluster.node_names().iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_packages_with_dependencies_complete_on_every_node() {
    let (cluster, client, ns) = scenario("rollout").await;
    let mut registry = Registry::with_prefix("nodewright");
    let operator_client = counted_client(cluster, &mut registry).await;
    let _operator = start_operator(operator_client, &ns, &ns, 3, None);
    let started = Instant::now();
    let mut gamma = package("1.0.0", &[("alpha", "1.0.0"), ("beta", "2.1.0")]);
    gamma.stage_timeout = Some("90s".into());
    let created = create_nodewright(
        &client,
        &ns,
        NodeWrightSpec {
            // The fixture's nodes (another test adds a node of its own).
            node_selectors: on_nodes(&fixture_nodes(cluster)),
            packages: BTreeMap::from([
                ("alpha".to_owned(), package("1.0.0", &[])),
                ("beta".to_owned(), package("2.1.0", &[])),
                ("gamma".to_owned(), gamma),
            ]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    let requests = api_requests(&registry);
    eprintln!(
        "MEASURE 3-node rollout of 3 packages (6 Jobs per node): {:?}, {} API requests by the operator \
         (a watch counts once): {requests:?}",
        started.elapsed(),
        requests.iter().map(|(_, n)| n).sum::<u64>(),
    );

    let status = nw.status.clone().expect("status");
    assert_eq!(status.complete_nodes, "3/3");
    assert_eq!(status.nodes_in_progress, 0);
    assert_eq!(status.package_list, "alpha:1.0.0,beta:2.1.0,gamma:1.0.0");
    assert_eq!(status.observed_generation, nw.metadata.generation);
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        "{status:?}"
    );
    for (type_, message) in [
        ("TaintNotTolerable", "All nodes have tolerable taints."),
        ("NodesIgnored", "No nodes have ignore label set."),
    ] {
        assert!(
            status
                .conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "False" && c.message == message),
            "{type_}: {status:?}"
        );
    }
    assert_eq!(status.node_state.len(), 3);
    assert!(nw.finalizers().iter().any(|f| f == keys::FINALIZER));
    // Every node says, in its own conditions, that this NodeWright is done there and nothing fails.
    let nw_name = nw.name_any();
    for node in fixture_nodes(cluster) {
        let node_api: Api<Node> = Api::all(client.clone());
        let conditions = cluster
            .wait_for(
                &format!("NodeWright conditions on {node}"),
                BOUND,
                || async {
                    let n = node_api
                        .get(node)
                        .await
                        .map_err(|e| cluster.kube_error(format!("get node {node}"), e))?;
                    let mine: Vec<(String, String, String)> = n
                        .status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|c| {
                            c.type_
                                .starts_with(&format!("nodewright.nvidia.com/{nw_name}/"))
                        })
                        .map(|c| (c.type_, c.status, c.reason.unwrap_or_default()))
                        .collect();
                    Ok(
                        (mine.len() == 2 && mine.iter().all(|(_, s, _)| s == "False"))
                            .then_some(mine),
                    )
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            conditions.contains(&(
                format!("nodewright.nvidia.com/{nw_name}/NotReady"),
                "False".into(),
                "Complete".into()
            )),
            "{node}: {conditions:?}"
        );
    }

    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let jobs = list_all(&jobs_api).await;
    for node in cluster.node_names() {
        let state = node_state(&client, node, &ns).await.expect("node state");
        for (name, version) in [("alpha", "1.0.0"), ("beta", "2.1.0"), ("gamma", "1.0.0")] {
            let r = state
                .get(name, version)
                .unwrap_or_else(|| panic!("{node}: no record of {name}"));
            assert_eq!(
                (r.stage, r.state, r.restarts),
                (Stage::Config, Some(State::Complete), 0),
                "{node}: {name}"
            );
        }
        let n: Node = Api::<Node>::all(client.clone())
            .get(node)
            .await
            .expect("node");
        assert_eq!(
            n.labels()
                .get(&keys::node_status_key(&ns))
                .map(String::as_str),
            Some("complete")
        );

        // gamma started on this node only after both of its dependencies completed there.
        let on_node = |pkg: &str, stage: &str| {
            jobs.iter()
                .find(|j| {
                    job_package(j).as_deref() == Some(pkg)
                        && j.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some(stage)
                        && j.labels().get(keys::NODE_LABEL) == Some(node)
                })
                .unwrap_or_else(|| panic!("{node}: no {pkg} {stage} Job"))
        };
        let gamma_apply = on_node("gamma-1.0.0", "apply");
        let gamma_started = gamma_apply
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .expect("created");
        for dep in ["alpha-1.0.0", "beta-2.1.0"] {
            let dep_done = job_condition_time(on_node(dep, "config"), "Complete")
                .map(|t| t.0)
                .expect("dependency complete");
            assert!(
                gamma_started >= dep_done,
                "{node}: gamma started at {gamma_started} before {dep} completed at {dep_done}"
            );
        }

        // DESIGN §4.1 Job shape.
        let labels = gamma_apply.labels();
        assert_eq!(labels.get(keys::NAME_LABEL), Some(&ns));
        assert_eq!(
            labels.get(keys::PACKAGE_LABEL).map(String::as_str),
            Some("gamma-1.0.0")
        );
        assert_eq!(
            labels.get(keys::STAGE_LABEL).map(String::as_str),
            Some("apply")
        );
        assert_eq!(labels.get(keys::NODE_LABEL), Some(node));
        let owner = gamma_apply
            .owner_references()
            .first()
            .expect("owner reference");
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("NodeWright", ns.as_str())
        );
        assert_eq!(Some(owner.uid.as_str()), created.metadata.uid.as_deref());
        assert_eq!(owner.controller, Some(true));
        assert!(
            gamma_apply
                .annotations()
                .contains_key(keys::PACKAGE_ANNOTATION)
        );
        assert_eq!(
            gamma_apply
                .annotations()
                .get(keys::STATE_RECORDED_ANNOTATION)
                .map(String::as_str),
            Some("complete")
        );
        let spec = gamma_apply.spec.as_ref().expect("job spec");
        assert_eq!((spec.completions, spec.parallelism), (Some(1), Some(1)));
        assert_eq!(spec.backoff_limit, Some(3));
        assert_eq!(spec.pod_replacement_policy.as_deref(), Some("Failed"));
        assert_eq!(spec.active_deadline_seconds, None, "no Job-level deadline");
        // Recorded complete: the succeeded-Job TTL (JOB_TTL_SUCCEEDED, default 10m), not the failed one.
        assert_eq!(
            spec.ttl_seconds_after_finished,
            Some(600),
            "the succeeded TTL is set once recorded"
        );
        let rules = &spec
            .pod_failure_policy
            .as_ref()
            .expect("podFailurePolicy")
            .rules;
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].action, "Ignore");
        let patterns = rules[0]
            .on_pod_conditions
            .as_ref()
            .expect("onPodConditions");
        assert_eq!(patterns[0].type_, "DisruptionTarget");
        let pod = spec.template.spec.as_ref().expect("pod spec");
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(
            pod.active_deadline_seconds,
            Some(90),
            "from stageTimeout 90s"
        );
        assert_eq!(pod.node_name.as_deref(), Some(node.as_str()));
    }

    // Deletion: the finalizer cleans the nodes' status marks, then lets the NodeWright go.
    Api::<NodeWright>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete");
    wait_nodewright_gone(cluster, &client, &ns).await;
    for node in cluster.node_names() {
        let n: Node = Api::<Node>::all(client.clone())
            .get(node)
            .await
            .expect("node");
        assert!(
            !n.labels().contains_key(&keys::node_status_key(&ns)),
            "{node} keeps the status label"
        );
        assert!(!n.annotations().contains_key(&keys::node_status_key(&ns)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_a_failing_package_times_out_after_its_attempts_and_keeps_the_evidence() {
    let (cluster, client, ns) = scenario("failing").await;
    let node = cluster.node_names()[0].clone();
    // Three attempts, so that the middle one is pruned from the evidence.
    let backoff_limit = 2;
    let _operator = start_operator(
        client.clone(),
        &ns,
        &ns,
        backoff_limit,
        Some(fate_for("bad", "apply", PodFate::fail().exit_code(1))),
    );
    create_nodewright(
        &client,
        &ns,
        spec_on(&[&node], [("bad", package("1.0.0", &[]))]),
    )
    .await;
    let job = wait_timed_out_job(cluster, &client, &ns).await;
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let nw = wait_status(cluster, &client, &ns, Status::Erroring).await;
    assert_eq!(
        nw.status.as_ref().map(|s| s.complete_nodes.as_str()),
        Some("0/1")
    );

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
    // Recorded timed out: the failed-Job TTL (JOB_TTL_FAILED, default 24h) keeps the evidence.
    assert_eq!(
        job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished),
        Some(86_400)
    );

    let r = record(&client, &node, &ns, "bad", "1.0.0").await;
    assert_eq!((r.stage, r.state), (Stage::Apply, Some(State::Erroring)));
    assert_eq!(
        r.restarts,
        backoff_limit + 1,
        "every attempt failed genuinely"
    );

    // The evidence stays: the Job and its failed pods (first and last attempt; the middle one is
    // pruned), and nothing recreates the stage.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let uid = job.metadata.uid.clone().expect("uid");
    let kept = wait_job_pods(cluster, &pods, &uid, "the middle attempt pruned", |pods| {
        (pods.len() == 2).then_some(pods)
    })
    .await;
    assert!(
        kept.iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")),
        "the kept attempts are the failed ones"
    );
    // Give a wrongly rerunning operator time to act (a bound, not a timing assertion): the stage
    // is not recreated, and the Job is the same.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let all = jobs_api.list(&ListParams::default()).await.expect("jobs");
    assert_eq!(
        all.items
            .iter()
            .map(|j| j.metadata.uid.clone())
            .collect::<Vec<_>>(),
        vec![Some(uid.clone())],
        "one Job, never recreated"
    );
    assert_eq!(list_all(&pods).await.len(), 2, "no new attempt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d_attempts_only_rejected_at_admission_run_again() {
    let (cluster, client, ns) = scenario("rejected").await;
    let node = cluster.node_names()[1].clone();
    // The first apply Job of `rej` is rejected by the kubelet (OutOfcpu); later ones run.
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = created.clone();
    let first = Arc::new(AtomicUsize::new(0));
    let hook: JobHook = Arc::new(move |job: &mut Job| {
        let is_apply = job.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some("apply");
        if job_package(job).as_deref() == Some("rej-1.0.0") && is_apply {
            log.lock().expect("log").push(job.name_any());
            if first.fetch_add(1, Ordering::SeqCst) == 0
                && let Some(spec) = job.spec.as_mut()
            {
                PodFate::reject()
                    .apply(spec.template.metadata.get_or_insert_with(Default::default));
            }
        }
    });
    let _operator = start_operator(client.clone(), &ns, &ns, 0, Some(hook));
    create_nodewright(
        &client,
        &ns,
        spec_on(&[&node], [("rej", package("1.0.0", &[]))]),
    )
    .await;
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    assert_eq!(
        nw.status.as_ref().map(|s| s.complete_nodes.as_str()),
        Some("1/1")
    );
    let creations = created.lock().expect("log").clone();
    assert_eq!(
        creations.len(),
        2,
        "the rejected apply ran again: {creations:?}"
    );
    assert_record(
        &client,
        &node,
        &ns,
        ("rej", "1.0.0"),
        (Stage::Config, State::Complete, 0),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e_a_disrupted_attempt_spends_no_attempt() {
    let (cluster, client, ns) = scenario("disrupted").await;
    let node = cluster.node_names()[2].clone();
    // backoffLimit 0: one counted failure would fail the Job.
    let _operator = start_operator(
        client.clone(),
        &ns,
        &ns,
        0,
        Some(fate_for("dis", "apply", PodFate::hang())),
    );
    let mut dis = package("1.0.0", &[]);
    dis.stage_timeout = Some("0".into());
    create_on_node(&client, &ns, &node, "dis", dis).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let apply_pods = ListParams::default().labels(&format!("{}=apply", keys::STAGE_LABEL));
    let running = |exclude: Option<String>| {
        let pods = pods.clone();
        let apply_pods = apply_pods.clone();
        async move {
            cluster
                .wait_for("a running apply attempt", BOUND, || {
                    let pods = pods.clone();
                    let apply_pods = apply_pods.clone();
                    let exclude = exclude.clone();
                    async move {
                        let list = pods
                            .list(&apply_pods)
                            .await
                            .map_err(|e| cluster.kube_error("pods".into(), e))?;
                        Ok(list.items.into_iter().find(|p| {
                            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                                && Some(p.name_any()) != exclude
                        }))
                    }
                })
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let set_fate = |pod: String, fate: PodFate| {
        let pods = pods.clone();
        async move {
            let patch =
                json!({"metadata": {"labels": fate.labels(), "annotations": fate.annotations()}});
            pods.patch(&pod, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .expect("fate patched");
        }
    };
    let first = running(None).await.name_any();
    set_fate(first.clone(), PodFate::disrupt().delay("1s")).await;
    let second = running(Some(first.clone())).await.name_any();
    set_fate(second, PodFate::succeed().delay("1s")).await;

    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    assert_eq!(
        nw.status.as_ref().map(|s| s.complete_nodes.as_str()),
        Some("1/1")
    );
    let disrupted = pods
        .get(&first)
        .await
        .expect("the disrupted attempt is kept by the Job");
    assert!(nodewright_core::jobs::classify::is_disrupted(
        &nodewright_core::jobs::stored::StoredPod::of(&disrupted)
    ));
    assert_record(
        &client,
        &node,
        &ns,
        ("dis", "1.0.0"),
        (Stage::Config, State::Complete, 0),
    )
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let apply = jobs
        .list(&apply_pods)
        .await
        .expect("jobs")
        .items
        .into_iter()
        .next()
        .expect("apply Job");
    assert!(
        job_condition_time(&apply, "Complete").is_some(),
        "the apply Job completed with backoffLimit 0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_interrupts_cordon_drain_and_run_one_merged_interrupt_per_node() {
    use nodewright_shared::api::{Interrupt, InterruptType};
    let (cluster, client, ns) = scenario("interrupt").await;
    let node = cluster.node_names()[0].clone();
    // A workload on the node that the drain must evict (a plain pod keeps running on kwok).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let workload: Pod = serde_json::from_value(json!({
        "metadata": {"name": "workload"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &workload)
        .await
        .expect("workload created");
    let _operator = start_operator(client.clone(), &ns, &ns, 3, None);
    let interrupt = |kind, services: &[&str]| {
        Some(Interrupt {
            kind,
            services: services.iter().map(|s| (*s).to_owned()).collect(),
        })
    };
    let mut svc = package("1.0.0", &[]);
    svc.interrupt = interrupt(InterruptType::Service, &["containerd"]);
    let mut boot = package("1.0.0", &[]);
    boot.interrupt = interrupt(InterruptType::Reboot, &[]);
    create_nodewright(
        &client,
        &ns,
        spec_on(&[&node], [("boot", boot), ("svc", svc)]),
    )
    .await;
    wait_status(cluster, &client, &ns, Status::Complete).await;

    let state = node_state(&client, &node, &ns).await.expect("node state");
    for name in ["boot", "svc"] {
        let r = state.get(name, "1.0.0").expect("record");
        assert_eq!(
            (r.stage, r.state),
            (Stage::PostInterrupt, Some(State::Complete)),
            "{name}"
        );
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let interrupts = jobs
        .list(&ListParams::default().labels(&format!("{}=True", keys::INTERRUPT_LABEL)))
        .await
        .expect("jobs")
        .items;
    assert_eq!(interrupts.len(), 1, "one merged interrupt for the node");
    assert_eq!(
        job_package(&interrupts[0]).as_deref(),
        Some("boot-1.0.0"),
        "the reboot owns it"
    );
    let spec = interrupts[0].spec.as_ref().expect("spec");
    assert_eq!(spec.backoff_limit, Some(i32::MAX));
    assert_eq!(
        spec.template
            .spec
            .as_ref()
            .and_then(|p| p.restart_policy.as_deref()),
        Some("OnFailure")
    );
    // The workload was evicted before the packages ran; the node is schedulable again at the end.
    assert!(
        pods.get_opt("workload").await.expect("get").is_none(),
        "workload evicted"
    );
    let n: Node = Api::<Node>::all(client.clone())
        .get(&node)
        .await
        .expect("node");
    assert!(!n.annotations().contains_key(&keys::cordon_key(&ns)));
    assert_ne!(
        n.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "uncordoned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f_pause_suspends_unfinished_jobs_and_a_package_change_replaces_them() {
    let (cluster, client, ns) = scenario("pause").await;
    let node = cluster.node_names()[1].clone();
    let _operator = start_operator(
        client.clone(),
        &ns,
        &ns,
        3,
        Some(fate_for("slow", "apply", PodFate::hang())),
    );
    let mut slow = package("1.0.0", &[]);
    slow.stage_timeout = Some("0".into());
    create_on_node(&client, &ns, &node, "slow", slow).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let nodewrights: Api<NodeWright> = Api::all(client.clone());
    let apply = ListParams::default().labels(&format!("{}=apply", keys::STAGE_LABEL));
    let job_where = |what: &'static str, pred: fn(&Job) -> bool| {
        let jobs = jobs.clone();
        let apply = apply.clone();
        async move {
            cluster
                .wait_for(what, BOUND, || {
                    let jobs = jobs.clone();
                    let apply = apply.clone();
                    async move {
                        let list = jobs
                            .list(&apply)
                            .await
                            .map_err(|e| cluster.kube_error("jobs".into(), e))?;
                        Ok(list
                            .items
                            .into_iter()
                            .find(|j| j.metadata.deletion_timestamp.is_none() && pred(j)))
                    }
                })
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    fn suspended(j: &Job) -> bool {
        j.spec.as_ref().and_then(|s| s.suspend) == Some(true)
    }
    let first = job_where("the apply Job", |_| true).await;

    let pause = |on: bool| {
        let nodewrights = nodewrights.clone();
        let ns = ns.clone();
        async move {
            let value = if on {
                json!("true")
            } else {
                serde_json::Value::Null
            };
            let patch = json!({"metadata": {"annotations": {keys::PAUSE_ANNOTATION: value}}});
            nodewrights
                .patch(&ns, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .expect("pause annotation");
        }
    };
    pause(true).await;
    job_where("the Job suspended", suspended).await;
    let nw = wait_status(cluster, &client, &ns, Status::Paused).await;
    assert!(
        nw.status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.type_ == "Ready" && c.status == "False"),
        "paused is not Ready"
    );
    pause(false).await;
    let resumed = job_where("the Job resumed", |j| !suspended(j)).await;
    assert_eq!(
        resumed.metadata.uid, first.metadata.uid,
        "resuming keeps the Job"
    );

    // A change to the package (its env) makes the unfinished Job stale: it is replaced.
    let patch =
        json!({"spec": {"packages": {"slow": {"env": [{"name": "MODE", "value": "fast"}]}}}});
    nodewrights
        .patch(&ns, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("package changed");
    let old_uid = first.metadata.uid.clone();
    let replaced = cluster
        .wait_for("the drifted Job replaced", BOUND, || {
            let jobs = jobs.clone();
            let apply = apply.clone();
            let old_uid = old_uid.clone();
            async move {
                let list = jobs
                    .list(&apply)
                    .await
                    .map_err(|e| cluster.kube_error("jobs".into(), e))?;
                Ok(list.items.into_iter().find(|j| j.metadata.uid != old_uid))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let env = replaced
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.init_containers.as_ref())
        .and_then(|c| c.get(1))
        .and_then(|c| c.env.clone())
        .unwrap_or_default();
    assert!(
        env.iter()
            .any(|e| e.name == "MODE" && e.value.as_deref() == Some("fast")),
        "{env:?}"
    );
    assert_eq!(
        replaced.name_any(),
        first.name_any(),
        "same stage, same deterministic name"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g_a_budget_of_one_node_rolls_the_nodes_one_after_another() {
    use nodewright_shared::api::InterruptionBudget;
    let (cluster, client, ns) = scenario("budget").await;
    let _operator = start_operator(client.clone(), &ns, &ns, 3, None);
    create_nodewright(
        &client,
        &ns,
        NodeWrightSpec {
            interruption_budget: Some(InterruptionBudget {
                percent: None,
                count: Some(1),
            }),
            node_selectors: on_nodes(&fixture_nodes(cluster)),
            packages: BTreeMap::from([("solo".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    let status = nw.status.expect("status");
    assert_eq!(status.complete_nodes, "3/3");
    let default = status
        .compartment_statuses
        .get(nodewright_shared::api::DEFAULT_COMPARTMENT)
        .expect("__default__ compartment");
    assert_eq!(
        (default.matched, default.ceiling, default.completed),
        (3, 1, 3)
    );
    // The legacy budget is a fixed strategy of batches of 1: three batches, each evaluated and
    // passed (the last one in the write that reports the rollout complete), and (legacy) not reset
    // on completion.
    let batch = default.batch_state.clone().expect("legacy batch state");
    assert_eq!(
        (
            batch.current_batch,
            batch.completed_nodes,
            batch.failed_nodes,
            batch.last_batch_size,
            batch.last_batch_failed,
            batch.should_stop
        ),
        (4, 3, 0, 1, false, false),
        "{batch:?}"
    );

    // Each node's work started only after the previous node's last stage had completed.
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items;
    let mut spans: Vec<(
        k8s_openapi::jiff::Timestamp,
        k8s_openapi::jiff::Timestamp,
        String,
    )> = cluster
        .node_names()
        .iter()
        .map(|node| {
            let on_node: Vec<&Job> = jobs
                .iter()
                .filter(|j| j.labels().get(keys::NODE_LABEL) == Some(node))
                .collect();
            let first = on_node
                .iter()
                .filter_map(|j| j.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .min()
                .expect("a Job on every node");
            let last = on_node
                .iter()
                .filter_map(|j| job_condition_time(j, "Complete").map(|t| t.0))
                .max()
                .expect("completed Jobs");
            (first, last, node.clone())
        })
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        let ((_, done, before), (next, _, after)) = (&pair[0], &pair[1]);
        assert!(
            next >= done,
            "{after} started at {next} before {before} finished at {done}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_the_standby_takes_over_a_rollout_in_flight() {
    let (cluster, client, ns) = scenario("failover").await;
    let node = cluster.node_names()[2].clone();
    let hook = fate_for("held", "apply", PodFate::hang());
    let first = start_replica(
        client.clone(),
        &ns,
        &ns,
        3,
        Some(hook.clone()),
        Some("replica-1"),
    );
    let holder = || nodewright_e2e::lease::operator_leader(&client, &ns);
    cluster
        .wait_for("replica-1 leads", BOUND, || async {
            Ok(holder().await.filter(|h| h == "replica-1"))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let second = start_replica(client.clone(), &ns, &ns, 3, Some(hook), Some("replica-2"));
    let mut held = package("1.0.0", &[]);
    held.stage_timeout = Some("0".into());
    create_on_node(&client, &ns, &node, "held", held).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let apply_pods = ListParams::default().labels(&format!("{}=apply", keys::STAGE_LABEL));
    let running = cluster
        .wait_for("the apply attempt runs", BOUND, || {
            let pods = pods.clone();
            let apply_pods = apply_pods.clone();
            async move {
                let list = pods
                    .list(&apply_pods)
                    .await
                    .map_err(|e| cluster.kube_error("pods".into(), e))?;
                Ok(list.items.into_iter().find(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                }))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // The leader stops; the standby takes the Lease and finishes what the leader started.
    first.stop().await;
    cluster
        .wait_for("replica-2 leads", BOUND, || async {
            Ok(holder().await.filter(|h| h == "replica-2"))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let fate = PodFate::succeed().delay("1s");
    let patch = json!({"metadata": {"labels": fate.labels(), "annotations": fate.annotations()}});
    pods.patch(
        &running.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .expect("fate patched");
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    assert_eq!(nw.status.map(|s| s.complete_nodes), Some("1/1".to_owned()));
    let r = record(&client, &node, &ns, "held", "1.0.0").await;
    assert_eq!((r.stage, r.state), (Stage::Config, Some(State::Complete)));
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i_a_version_bump_upgrades_in_place() {
    let (cluster, client, ns) = scenario("upgrade").await;
    let node = cluster.node_names()[0].clone();
    let _operator = start_operator(client.clone(), &ns, &ns, 3, None);
    create_nodewright(
        &client,
        &ns,
        spec_on(&[&node], [("tool", package("1.0.0", &[]))]),
    )
    .await;
    let before = wait_status(cluster, &client, &ns, Status::Complete).await;
    let patch = json!({"spec": {"packages": {"tool": {"version": "1.1.0"}}}});
    Api::<NodeWright>::all(client.clone())
        .patch(&ns, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("version bumped");
    let api = Api::<NodeWright>::all(client.clone());
    let after = cluster
        .wait_for("the new version complete", BOUND, || {
            let api = api.clone();
            let ns = ns.clone();
            let generation = before.metadata.generation;
            async move {
                let nw = api
                    .get(&ns)
                    .await
                    .map_err(|e| cluster.kube_error("get".into(), e))?;
                let done = nw.status.as_ref().is_some_and(|s| {
                    s.status == Some(Status::Complete) && s.observed_generation > generation
                });
                Ok(done.then_some(nw))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        after.status.map(|s| s.package_list),
        Some("tool:1.1.0".to_owned())
    );
    let state = node_state(&client, &node, &ns).await.expect("node state");
    assert!(
        state.get("tool", "1.0.0").is_none(),
        "old version's record dropped"
    );
    let r = state.get("tool", "1.1.0").expect("new record");
    assert_eq!((r.stage, r.state), (Stage::Config, Some(State::Complete)));
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{}=tool-1.1.0", keys::PACKAGE_LABEL)))
        .await
        .expect("jobs")
        .items;
    let stages: std::collections::BTreeSet<String> = jobs
        .iter()
        .filter_map(|j| j.labels().get(keys::STAGE_LABEL).cloned())
        .collect();
    assert_eq!(
        stages,
        ["config", "upgrade"]
            .into_iter()
            .map(str::to_owned)
            .collect(),
        "upgrade then config, no fresh apply"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn j_the_runtime_required_taint_is_lifted_when_done() {
    let (cluster, client, ns) = scenario("runtime").await;
    let nodes: Api<Node> = Api::all(client.clone());
    // A node of this test's own, so the taint blocks no other test.
    let name = format!("{ns}-node");
    create_fake_node(
        &client,
        &name,
        &[],
        no_schedule(&[RUNTIME_REQUIRED, ("dedicated", "gpu")]),
    )
    .await;
    let _operator = start_operator(client.clone(), &ns, &ns, 3, None);
    create_nodewright(
        &client,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&[&name]),
            runtime_required: true,
            additional_tolerations: vec![k8s_openapi::api::core::v1::Toleration {
                key: Some("dedicated".into()),
                operator: Some("Exists".into()),
                ..Default::default()
            }],
            packages: BTreeMap::from([("rt".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    wait_status(cluster, &client, &ns, Status::Complete).await;
    assert_eq!(
        wait_untainted(cluster, &client, &name).await,
        ["dedicated"],
        "only the runtime-required taint goes"
    );
    nodes
        .delete(&name, &DeleteParams::default())
        .await
        .expect("node deleted");
}

/// A watch on one node that remembers whether any version it showed carried the runtime-required
/// taint (a watch sees a taint that a later read would miss once it is lifted).
struct TaintWatch {
    seen: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl TaintWatch {
    /// Starts watching `node`; returns once the watch has shown the node (so it is established).
    async fn start(client: &kube::Client, node: &str) -> Self {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let seen: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let sink = seen.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
        let api: Api<Node> = Api::all(client.clone());
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut stream = watcher(api, config)
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(next) = stream.next().await {
                let Ok(node) = next else { continue };
                let tainted = node
                    .spec
                    .iter()
                    .flat_map(|s| s.taints.iter().flatten())
                    .any(|t| t.key == "nodewright.nvidia.com" && t.effect == "NoSchedule");
                if tainted {
                    sink.store(true, Ordering::SeqCst);
                }
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
            }
        });
        tokio::time::timeout(BOUND, ready_rx)
            .await
            .expect("the node watch starts")
            .expect("the node watch reports");
        TaintWatch { seen, task }
    }

    fn seen(&self) -> bool {
        self.seen.load(Ordering::SeqCst)
    }
}

impl Drop for TaintWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits until the node no longer carries the runtime-required taint; returns its taints.
async fn wait_untainted(cluster: &Cluster, client: &kube::Client, name: &str) -> Vec<String> {
    let nodes: Api<Node> = Api::all(client.clone());
    cluster
        .wait_for("the runtime-required taint lifted", BOUND, || {
            let nodes = nodes.clone();
            async move {
                let n = nodes
                    .get(name)
                    .await
                    .map_err(|e| cluster.kube_error("node".into(), e))?;
                let taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
                Ok((!taints.iter().any(|t| t.key == "nodewright.nvidia.com"))
                    .then(|| taints.into_iter().map(|t| t.key).collect()))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k_auto_taint_new_nodes_taints_a_new_node_once() {
    let (cluster, client, ns) = scenario("autotaint").await;
    let nodes: Api<Node> = Api::all(client.clone());
    // A new node of this test's own, untainted and never touched by a NodeWright.
    let name = format!("{ns}-node");
    create_fake_node(&client, &name, &[], json!([])).await;
    let watch = TaintWatch::start(&client, &name).await;
    let _operator = start_operator(client.clone(), &ns, &ns, 3, None);
    let spec = NodeWrightSpec {
        node_selectors: on_nodes(&[&name]),
        runtime_required: true,
        auto_taint_new_nodes: true,
        packages: BTreeMap::from([("rt".to_owned(), package("1.0.0", &[]))]),
        ..NodeWrightSpec::default()
    };
    create_nodewright(&client, &ns, spec.clone()).await;
    wait_status(cluster, &client, &ns, Status::Complete).await;
    assert!(
        wait_untainted(cluster, &client, &name).await.is_empty(),
        "no other taint was added"
    );
    assert!(watch.seen(), "the new node was tainted before the rollout");
    let marked = nodes.get(&name).await.expect("node");
    assert_eq!(
        marked
            .annotations()
            .get("nodewright.nvidia.com/autoTaint_nodewright.nvidia.com")
            .map(String::as_str),
        Some("true")
    );
    drop(watch);

    // A second auto-tainting NodeWright on the (now touched) node: it runs, the node is not tainted.
    let watch = TaintWatch::start(&client, &name).await;
    let second = format!("{ns}-second");
    let nw = NodeWright::new(
        &second,
        NodeWrightSpec {
            priority: nodewright_shared::api::DEFAULT_PRIORITY,
            packages: BTreeMap::from([("rtb".to_owned(), package("1.0.0", &[]))]),
            ..spec
        },
    );
    create_scoped_nodewright(&client, SUITE_LABEL, &ns, nw).await;
    wait_status(cluster, &client, &second, Status::Complete).await;
    assert!(!watch.seen(), "a touched node is never tainted again");
    for nw in [&ns, &second] {
        Api::<NodeWright>::all(client.clone())
            .delete(nw, &DeleteParams::default())
            .await
            .expect("NodeWright deleted");
    }
    nodes
        .delete(&name, &DeleteParams::default())
        .await
        .expect("node deleted");
}

/// Creates the NodeWright `ns` (scoped to its test's operator) with one package `key` on `node`.
async fn create_on_node(
    client: &kube::Client,
    ns: &str,
    node: &str,
    key: &str,
    package: nodewright_shared::api::Package,
) {
    create_nodewright(client, ns, spec_on(&[node], [(key, package)])).await;
}

/// Asserts the node's record of `package` (name, version) for the NodeWright `ns`: (stage, state,
/// restarts).
async fn assert_record(
    client: &kube::Client,
    node: &str,
    ns: &str,
    package: (&str, &str),
    want: (Stage, State, i32),
) {
    let state = node_state(client, node, ns).await.expect("node state");
    let r = state.get(package.0, package.1).expect("record");
    assert_eq!(
        (r.stage, r.state, r.restarts),
        (want.0, Some(want.1), want.2)
    );
}

/// The Jobs of namespace `ns` labelled `<package>-<version>` = `package` and stage `stage`.
async fn jobs_of(client: &kube::Client, ns: &str, package: &str, stage: &str) -> Vec<Job> {
    Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!(
            "{}={package},{}={stage}",
            keys::PACKAGE_LABEL,
            keys::STAGE_LABEL
        )))
        .await
        .expect("jobs")
        .items
}

/// The pods of the Job with this uid.
async fn pods_of_job(client: &kube::Client, ns: &str, uid: &str) -> Vec<Pod> {
    job_pods(&Api::namespaced(client.clone(), ns), uid)
        .await
        .expect("pods")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l_a_create_that_meets_an_existing_job_keeps_it() {
    let (cluster, client, ns, node) = scenario_with_node("conflict").await;
    // Just before the operator creates the apply Job of `dup`, the same Job appears (as one created
    // by an earlier term the Job store has not shown yet): the create meets AlreadyExists.
    let existing: Arc<Mutex<Option<String>>> = Arc::default();
    let hook: JobHook = {
        let (api, slot) = (
            Api::<Job>::namespaced(client.clone(), &ns),
            existing.clone(),
        );
        Arc::new(move |job: &mut Job| {
            let apply = job.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some("apply");
            let mut slot = slot.lock().expect("slot");
            if apply && job_package(job).as_deref() == Some("dup-1.0.0") && slot.is_none() {
                let copy = job.clone();
                let created = tokio::task::block_in_place(|| {
                    tokio::runtime::Handle::current()
                        .block_on(api.create(&PostParams::default(), &copy))
                });
                *slot = Some(
                    created
                        .ok()
                        .and_then(|j| j.metadata.uid)
                        .unwrap_or_default(),
                );
            }
        })
    };
    let _operator = start_operator(client.clone(), &ns, &ns, 0, Some(hook));
    create_nodewright(
        &client,
        &ns,
        spec_on(&[&node], [("dup", package("1.0.0", &[]))]),
    )
    .await;
    wait_status(cluster, &client, &ns, Status::Complete).await;
    let existing = existing.lock().expect("slot").clone().unwrap_or_default();
    assert!(
        !existing.is_empty(),
        "the Job was created ahead of the operator"
    );
    let applies = jobs_of(&client, &ns, "dup-1.0.0", "apply").await;
    let uids: Vec<Option<String>> = applies.iter().map(|j| j.metadata.uid.clone()).collect();
    assert_eq!(uids, [Some(existing.clone())], "the existing Job kept");
    assert_eq!(
        pods_of_job(&client, &ns, &existing).await.len(),
        1,
        "its one attempt, never replaced"
    );
    assert_record(
        &client,
        &node,
        &ns,
        ("dup", "1.0.0"),
        (Stage::Config, State::Complete, 0),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m_a_failed_job_no_operator_recorded_is_recorded_by_the_next() {
    let (cluster, client, ns, node) = scenario_with_node("unrecorded").await;
    // The apiserver refuses every mark: the first operator sees the Job fail and cannot record it.
    let block = JobWriteBlock::install(cluster, &client, &ns, Refused::Marking).await;
    let hook = fate_for("lost", "apply", PodFate::fail());
    let first = start_operator(client.clone(), &ns, &ns, 0, Some(hook.clone()));
    create_nodewright(
        &client,
        &ns,
        spec_on(&[&node], [("lost", package("1.0.0", &[]))]),
    )
    .await;
    let api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let failed = cluster
        .wait_for("the apply Job failed", BOUND, || async {
            let jobs = jobs_of(&client, &ns, "lost-1.0.0", "apply").await;
            Ok(jobs
                .into_iter()
                .find(|j| job_condition_time(j, "Failed").is_some()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    first.kill().await;
    let uid = failed.metadata.uid.clone().expect("uid");
    let name = failed.name_any();
    let unmarked = api.get(&name).await.expect("the failed Job");
    assert!(
        !unmarked
            .annotations()
            .contains_key(keys::STATE_RECORDED_ANNOTATION),
        "no operator recorded it"
    );
    block.lift(cluster, Refused::Marking).await;

    // The next operator records the outcome from the Job as it finds it, and runs nothing again.
    let _second = start_operator(client.clone(), &ns, &ns, 0, Some(hook));
    let timed_out = wait_timed_out_job(cluster, &client, &ns).await;
    assert_eq!(timed_out.metadata.uid.as_deref(), Some(uid.as_str()));
    wait_status(cluster, &client, &ns, Status::Erroring).await;
    assert_record(
        &client,
        &node,
        &ns,
        ("lost", "1.0.0"),
        (Stage::Apply, State::Erroring, 1),
    )
    .await;
    let applies = jobs_of(&client, &ns, "lost-1.0.0", "apply").await;
    assert_eq!(applies.len(), 1, "nothing recreated");
    assert_eq!(
        pods_of_job(&client, &ns, &uid).await.len(),
        1,
        "one attempt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_a_restart_between_marking_and_deleting_a_rejected_only_job_reruns_the_stage() {
    let (cluster, client, ns, node) = scenario_with_node("mark-delete").await;
    // The apiserver refuses every Job deletion: the first operator marks the rejected-only Job
    // processed and cannot delete it.
    let block = JobWriteBlock::install(cluster, &client, &ns, Refused::Delete).await;
    // The first apply Job of `rej` is rejected by the kubelet (OutOfcpu); later ones run.
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let hook: JobHook = {
        let (log, first) = (created.clone(), Arc::new(AtomicUsize::new(0)));
        Arc::new(move |job: &mut Job| {
            let apply = job.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some("apply");
            if apply && job_package(job).as_deref() == Some("rej-1.0.0") {
                log.lock().expect("log").push(job.name_any());
                if first.fetch_add(1, Ordering::SeqCst) == 0
                    && let Some(spec) = job.spec.as_mut()
                {
                    PodFate::reject()
                        .apply(spec.template.metadata.get_or_insert_with(Default::default));
                }
            }
        })
    };
    let first = start_operator(client.clone(), &ns, &ns, 0, Some(hook.clone()));
    create_nodewright(
        &client,
        &ns,
        spec_on(&[&node], [("rej", package("1.0.0", &[]))]),
    )
    .await;
    let marked = cluster
        .wait_for("the rejected-only Job marked processed", BOUND, || async {
            let jobs = jobs_of(&client, &ns, "rej-1.0.0", "apply").await;
            Ok(jobs.into_iter().find(|j| {
                j.annotations()
                    .get(keys::STATE_RECORDED_ANNOTATION)
                    .map(String::as_str)
                    == Some("rejected")
            }))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    first.kill().await;
    let uid = marked.metadata.uid.clone().expect("uid");
    block.lift(cluster, Refused::Delete).await;

    // The next operator deletes the marked Job and runs the stage again.
    let _second = start_operator(client.clone(), &ns, &ns, 0, Some(hook));
    wait_status(cluster, &client, &ns, Status::Complete).await;
    let applies = jobs_of(&client, &ns, "rej-1.0.0", "apply").await;
    assert!(
        applies
            .iter()
            .all(|j| j.metadata.uid.as_deref() != Some(uid.as_str())),
        "the marked Job deleted"
    );
    assert_eq!(
        created.lock().expect("log").len(),
        2,
        "the rejected apply ran again, once"
    );
    assert_record(
        &client,
        &node,
        &ns,
        ("rej", "1.0.0"),
        (Stage::Config, State::Complete, 0),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o_a_version_bump_mid_attempt_stops_it_and_installs_the_new_version() {
    let (cluster, client, ns, node) = scenario_with_node("bump-mid").await;
    // Version 1.0.0's apply hangs; 2.0.0 runs.
    let hook: JobHook = Arc::new(|job: &mut Job| {
        if job_package(job).as_deref() == Some("bump-1.0.0")
            && let Some(spec) = job.spec.as_mut()
        {
            PodFate::hang().apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    });
    let _operator = start_operator(client.clone(), &ns, &ns, 0, Some(hook));
    let mut bump = package("1.0.0", &[]);
    bump.stage_timeout = Some("0".into());
    create_on_node(&client, &ns, &node, "bump", bump).await;
    let old = cluster
        .wait_for("version 1.0.0's attempt running", BOUND, || async {
            for job in jobs_of(&client, &ns, "bump-1.0.0", "apply").await {
                let uid = job.metadata.uid.clone().unwrap_or_default();
                let running = pods_of_job(&client, &ns, &uid)
                    .await
                    .iter()
                    .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
                if running {
                    return Ok(Some(job));
                }
            }
            Ok(None)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    Api::<NodeWright>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"packages": {"bump": {"version": "2.0.0"}}}})),
        )
        .await
        .expect("version bumped");
    let api = Api::<NodeWright>::all(client.clone());
    cluster
        .wait_for("version 2.0.0 complete", BOUND, || async {
            let nw = api
                .get(&ns)
                .await
                .map_err(|e| cluster.kube_error("get".into(), e))?;
            Ok(nw
                .status
                .as_ref()
                .is_some_and(|s| {
                    s.status == Some(Status::Complete) && s.package_list == "bump:2.0.0"
                })
                .then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The old attempt was stopped, not counted: its Job goes, no record of 1.0.0 remains, and 2.0.0
    // installed fresh (apply, config; no upgrade from a version that never completed).
    cluster
        .wait_for("version 1.0.0's Job gone", BOUND, || async {
            let left = Api::<Job>::namespaced(client.clone(), &ns)
                .get_opt(&old.name_any())
                .await
                .map_err(|e| cluster.kube_error("get".into(), e))?;
            Ok(left.is_none().then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let state = node_state(&client, &node, &ns).await.expect("node state");
    assert!(state.get("bump", "1.0.0").is_none(), "{state:?}");
    let r = state.get("bump", "2.0.0").expect("record");
    assert_eq!(
        (r.stage, r.state, r.restarts),
        (Stage::Config, Some(State::Complete), 0)
    );
    let stages: std::collections::BTreeSet<String> = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{}=bump-2.0.0", keys::PACKAGE_LABEL)))
        .await
        .expect("jobs")
        .items
        .iter()
        .filter_map(|j| j.labels().get(keys::STAGE_LABEL).cloned())
        .collect();
    assert_eq!(
        stages,
        ["apply", "config"].into_iter().map(str::to_owned).collect(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p_jobs_an_earlier_version_left_beside_the_operator_are_settled_before_the_package_namespace()
 {
    let (cluster, client, ns, node) = scenario_with_node("move").await;
    let other_node = format!("{ns}-n1");
    create_fake_node(&client, &other_node, &[], json!([])).await;
    let packages_ns = cluster
        .create_namespace("move-pkgs")
        .await
        .expect("namespace");
    // The earlier layout: the operator runs its Jobs in its own namespace. Its apply stage runs
    // until the test lets it finish.
    let first = start_operator(
        client.clone(),
        &ns,
        &ns,
        0,
        Some(fate_for("moved", "apply", PodFate::hang())),
    );
    create_on_node(&client, &ns, &node, "moved", package("1.0.0", &[])).await;
    let (old, pod) = cluster
        .wait_for(
            "the apply attempt running beside the operator",
            BOUND,
            || async {
                for job in jobs_of(&client, &ns, "moved-1.0.0", "apply").await {
                    let uid = job.metadata.uid.clone().unwrap_or_default();
                    let running = pods_of_job(&client, &ns, &uid).await.into_iter().find(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    });
                    if let Some(pod) = running {
                        return Ok(Some((job, pod)));
                    }
                }
                Ok(None)
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    first.stop().await;

    // The upgrade: the same operator, now with a package namespace of its own.
    let later = format!("{ns}-later");
    let mut env = operator_env(&ns, format!("operator-{ns}"), 0);
    env.insert("PACKAGE_NAMESPACE", packages_ns.clone());
    let _second = spawn_operator(
        client.clone(),
        &env,
        format!("{SUITE_LABEL} in ({ns},{later})"),
        None,
        None,
    );
    // A NodeWright created meanwhile (on another node) is held, with an Event saying why, while
    // the old Job runs: nothing starts anywhere.
    create_on_node(&client, &later, &other_node, "after", package("1.0.0", &[])).await;
    support::wait_event(cluster, &client, &later, "SettlingOldJobs", "NodeWright").await;
    let started = Api::<Job>::namespaced(client.clone(), &packages_ns)
        .list(&ListParams::default())
        .await
        .expect("jobs");
    assert!(started.items.is_empty(), "held: {:?}", started.items);
    assert_eq!(
        jobs_of(&client, &ns, "after-1.0.0", "apply").await.len(),
        0,
        "nothing new starts beside the operator"
    );

    // The old attempt ends: its outcome is recorded, then everything runs in the package namespace.
    Api::<Pod>::namespaced(client.clone(), &ns)
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"nodewright.test/fate": "succeed"}}})),
        )
        .await
        .expect("the old attempt released");
    wait_status(cluster, &client, &ns, Status::Complete).await;
    wait_status(cluster, &client, &later, Status::Complete).await;
    // Applied once (by the old Job, no restart), configured in the package namespace.
    assert_record(
        &client,
        &node,
        &ns,
        ("moved", "1.0.0"),
        (Stage::Config, State::Complete, 0),
    )
    .await;
    assert!(
        jobs_of(&client, &packages_ns, "moved-1.0.0", "apply")
            .await
            .is_empty(),
        "the stage the old Job ran never runs again"
    );
    assert_eq!(
        jobs_of(&client, &packages_ns, "moved-1.0.0", "config")
            .await
            .len(),
        1
    );
    assert_eq!(
        jobs_of(&client, &packages_ns, "after-1.0.0", "apply")
            .await
            .len(),
        1
    );
    // What the old layout left beside the operator goes: the recorded Job, the ConfigMaps.
    cluster
        .wait_for("the operator's namespace emptied", BOUND, || async {
            let jobs = Api::<Job>::namespaced(client.clone(), &ns)
                .list(&ListParams::default().labels(keys::NAME_LABEL))
                .await
                .map_err(|e| cluster.kube_error("list".into(), e))?;
            let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
                .list_metadata(&ListParams::default().labels(keys::NAME_LABEL))
                .await
                .map_err(|e| cluster.kube_error("list".into(), e))?;
            Ok((jobs.items.is_empty() && cms.items.is_empty()).then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}: the old Job {}", old.name_any()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q_a_rebooted_node_is_tainted_again_until_its_packages_run_again() {
    let (cluster, client, ns) = scenario("retaint").await;
    let name = format!("{ns}-node");
    create_fake_node(&client, &name, &[], json!([])).await;
    // Every apply Job the operator creates, counted.
    let applies = Arc::new(AtomicUsize::new(0));
    let hook: JobHook = {
        let applies = applies.clone();
        Arc::new(move |job: &mut Job| {
            if job.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some("apply") {
                applies.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let _operator = SuiteOperator::new(&client, &ns, SUITE_LABEL, &ns)
        .env(&[("REAPPLY_ON_REBOOT", "true")])
        .hook(Some(hook))
        .start();
    create_nodewright(
        &client,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&[&name]),
            runtime_required: true,
            auto_taint_new_nodes: true,
            packages: BTreeMap::from([("rt".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    wait_status(cluster, &client, &ns, Status::Complete).await;
    wait_untainted(cluster, &client, &name).await;
    assert_eq!(applies.load(Ordering::SeqCst), 1);

    // The node reboots out of band (a new boot ID): with REAPPLY_ON_REBOOT its packages run again,
    // and, as on a new node, workloads are kept off (the runtime-required taint) until they have.
    let watch = TaintWatch::start(&client, &name).await;
    let rebooted = format!("{ns}-second-boot");
    Api::<Node>::all(client.clone())
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nodeInfo": {"bootID": rebooted}}})),
        )
        .await
        .expect("a new boot ID");
    wait_nodewright(
        cluster,
        &client,
        &ns,
        "complete again on the new boot",
        |nw| {
            nw.status.as_ref().is_some_and(|s| {
                s.node_boot_ids.get(&name) == Some(&rebooted) && s.status == Some(Status::Complete)
            })
        },
    )
    .await;
    wait_untainted(cluster, &client, &name).await;
    assert!(watch.seen(), "the rebooted node was tainted again");
    assert_eq!(
        applies.load(Ordering::SeqCst),
        2,
        "applied again on the new boot"
    );
    Api::<NodeWright>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("NodeWright deleted");
}

/// The node's `spec.unschedulable`.
fn unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// Whether the node carries the persistent cordon's mark.
fn runtime_cordon_mark(node: &Node) -> Option<&str> {
    node.annotations()
        .get(keys::RUNTIME_REQUIRED_CORDON_ANNOTATION)
        .map(String::as_str)
}

/// Whether the node carries the runtime-required taint.
fn runtime_tainted(node: &Node) -> bool {
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .any(|t| t.key == "nodewright.nvidia.com")
}

/// Touches the NodeWright `name` (its priority, to `priority`) and waits for the pass of the new
/// generation to be recorded: a pass that ran after every change made before this call.
async fn a_later_pass(cluster: &Cluster, client: &kube::Client, name: &str, priority: i32) {
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
        |nw| {
            support::condition(nw, "Ready").and_then(|c| c.observed_generation) >= Some(generation)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_runtime_required_cordon_after_keeps_the_node_cordoned_until_a_validator_releases_it() {
    let (cluster, client, ns) = scenario("cordon-after").await;
    let name = format!("{ns}-node");
    create_fake_node(&client, &name, &[], no_schedule(&[RUNTIME_REQUIRED])).await;
    let _operator = start_operator(client.clone(), &ns, &ns, 3, None);
    create_nodewright(
        &client,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&[&name]),
            runtime_required: true,
            runtime_required_cordon_after: true,
            packages: BTreeMap::from([("rt".to_owned(), package("1.0.0", &[]))]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    wait_status(cluster, &client, &ns, Status::Complete).await;
    // The taint goes and the persistent cordon comes (one write: never untainted and schedulable).
    let held = support::wait_node(
        cluster,
        &client,
        &name,
        "untainted, cordoned and marked",
        |n| !runtime_tainted(n) && unschedulable(n) && runtime_cordon_mark(n) == Some("true"),
    )
    .await;
    assert!(
        !held.annotations().contains_key(&keys::cordon_key(&ns)),
        "no claim of the NodeWright: the cordon is the node's own"
    );
    assert!(
        !held
            .annotations()
            .contains_key(keys::CORDONED_BEFORE_ANNOTATION)
    );
    // Later passes keep it (the operator never releases it).
    a_later_pass(cluster, &client, &ns, 201).await;
    let n = Api::<Node>::all(client.clone())
        .get(&name)
        .await
        .expect("node");
    assert!(unschedulable(&n) && runtime_cordon_mark(&n) == Some("true"));

    // The validator releases it in one patch: schedulable, and the operator does not cordon again.
    support::patch_node(
        &client,
        &name,
        json!({"metadata": {"annotations": {keys::RUNTIME_REQUIRED_CORDON_ANNOTATION: null}},
               "spec": {"unschedulable": false}}),
    )
    .await;
    a_later_pass(cluster, &client, &ns, 202).await;
    let n = Api::<Node>::all(client.clone())
        .get(&name)
        .await
        .expect("node");
    assert!(!unschedulable(&n), "not cordoned again");
    assert_eq!(runtime_cordon_mark(&n), None);
    assert!(!runtime_tainted(&n));

    // Held again (as the operator leaves it), then only uncordoned with the mark kept: the operator
    // removes the stale mark and leaves the node schedulable.
    support::patch_node(
        &client,
        &name,
        json!({"metadata": {"annotations": {keys::RUNTIME_REQUIRED_CORDON_ANNOTATION: "true"}},
               "spec": {"unschedulable": true}}),
    )
    .await;
    a_later_pass(cluster, &client, &ns, 203).await;
    let n = Api::<Node>::all(client.clone())
        .get(&name)
        .await
        .expect("node");
    assert!(
        unschedulable(&n) && runtime_cordon_mark(&n) == Some("true"),
        "a held mark is kept"
    );
    support::patch_node(&client, &name, json!({"spec": {"unschedulable": false}})).await;
    support::wait_node(cluster, &client, &name, "the stale mark removed", |n| {
        runtime_cordon_mark(n).is_none()
    })
    .await;
    a_later_pass(cluster, &client, &ns, 204).await;
    let n = Api::<Node>::all(client.clone())
        .get(&name)
        .await
        .expect("node");
    assert!(!unschedulable(&n), "not cordoned again");
    assert_eq!(runtime_cordon_mark(&n), None);

    // Held again, then only the mark removed: nobody uncordons the node.
    support::patch_node(
        &client,
        &name,
        json!({"metadata": {"annotations": {keys::RUNTIME_REQUIRED_CORDON_ANNOTATION: "true"}},
               "spec": {"unschedulable": true}}),
    )
    .await;
    support::patch_node(
        &client,
        &name,
        json!({"metadata": {"annotations": {keys::RUNTIME_REQUIRED_CORDON_ANNOTATION: null}}}),
    )
    .await;
    a_later_pass(cluster, &client, &ns, 205).await;
    let n = Api::<Node>::all(client.clone())
        .get(&name)
        .await
        .expect("node");
    assert!(
        unschedulable(&n),
        "only the mark removed: it stays cordoned"
    );
    assert_eq!(runtime_cordon_mark(&n), None);

    // The persistent cordon survives the NodeWright's deletion (its finalizer keeps it).
    support::patch_node(
        &client,
        &name,
        json!({"metadata": {"annotations": {keys::RUNTIME_REQUIRED_CORDON_ANNOTATION: "true"}}}),
    )
    .await;
    Api::<NodeWright>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("NodeWright deleted");
    wait_nodewright_gone(cluster, &client, &ns).await;
    let n = Api::<Node>::all(client.clone())
        .get(&name)
        .await
        .expect("node");
    assert!(unschedulable(&n) && runtime_cordon_mark(&n) == Some("true"));
    Api::<Node>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await
        .expect("node deleted");
}
