//! A Job stuck at `FailureTarget` end to end on the local control plane (real kube-apiserver, etcd,
//! the real Job controller, kwok simulating the node), with its own operator, namespace and node.
//!
//! The interrupt Job of a package has the stage's bound as `activeDeadlineSeconds`. Its pod sits on
//! an unreachable node (pod fate `unreachable`: no kubelet acts on it). When the deadline passes,
//! the real Job controller sets `FailureTarget=True` (DeadlineExceeded) and deletes the pod, but the
//! pod never becomes terminal, so the controller never sets `Failed`. The operator classifies the
//! Job as stuck: it keeps a last-logs snapshot on the Job at once, and once the Job has been at
//! `FailureTarget` for `STUCK_BOUND` it records `(interrupt, erroring)` on the node, which the
//! NodeWright's status shows. Then the node comes back (the fate label goes): the pod terminates,
//! the Job fails, and the operator records the stage timed out, keeps the Job, and runs nothing
//! again.
//!
//! (b) A stage whose pods cannot be created (Pod Security refuses them) surfaces as erroring with
//! the apiserver's refusal, and runs once the namespace allows it.
//!
//! (c) A disruptive stage whose pods stay refused past `PODS_NOT_CREATED_TIMEOUT` ends timed out
//! and releases the node it cordoned and drained (counted as failed for its batch).
//!
//! (d) An attempt waiting on an image the kubelet cannot pull is named (Event, node condition, a
//! note on the Job) without touching the stage, and the note goes once the image pulls.
//!
//! No timing assertion: waits are bounded only so a broken build fails instead of hanging. The one
//! comparison with `STUCK_BOUND` is an order read from the Job's own condition timestamp: the
//! erroring record, seen through a watch, cannot be seen before it was written.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use nodewright_e2e::{FATE_LABEL, PodFate};
use nodewright_operator::JobHook;
use nodewright_operator::{STUCK_BOUND, STUCK_RECHECK};
use nodewright_shared::api::{Interrupt, InterruptType, NodeWrightSpec, Status};
use nodewright_shared::keys;
use nodewright_shared::node_state::{Stage, State};
use serde_json::json;

mod support;
use nodewright_shared::api::DEFAULT_COMPARTMENT;
use support::Watched;
use support::{
    BOUND, SuiteOperator, condition_is, create_labelled_nodewright, node_state, on_nodes, package,
    pod_security, record, scenario_with_node, spec_on, state_of, wait_event, wait_job_pods,
    wait_node, wait_nodewright, wait_status, wait_timed_out_job,
};

/// Label that scopes the test's operator to its own NodeWright (distinct from the other suites).
const SUITE_LABEL: &str = "nodewright.test/stuck-suite";

/// The Job's condition `type_` with status True.
fn condition<'a>(
    job: &'a Job,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    support::job_condition(job, type_)
}

/// Whether the node's record of `boot:1.0.0` for the NodeWright `nw` is `(interrupt, erroring)`.
fn interrupt_erroring(node: &Node, nw: &str) -> bool {
    state_of(node, nw)
        .and_then(|s| s.get("boot", "1.0.0").cloned())
        .is_some_and(|r| r.stage == Stage::Interrupt && r.state == Some(State::Erroring))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_stuck_at_failure_target_surfaces_as_erroring_with_its_last_logs_snapshot() {
    let (cluster, client, ns, node) = scenario_with_node("stuck").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // Every Job the namespace ever shows (a rerun would be a new Job), and the first moment the
    // node's record turns erroring, both from watches started before anything runs.
    let job_watch = Watched::start(jobs.clone(), watcher::Config::default());
    let first_erroring: Arc<Mutex<Option<Timestamp>>> = Arc::default();
    let node_watch = {
        let sink = first_erroring.clone();
        let api = Api::<Node>::all(client.clone());
        let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
        let nw = ns.clone();
        support::watch_applied(api, config, move |n: Node| {
            if interrupt_erroring(&n, &nw) {
                sink.lock()
                    .expect("lock")
                    .get_or_insert_with(Timestamp::now);
            }
        })
    };

    // The interrupt's pod lands on an unreachable node; every other stage succeeds.
    let hook: JobHook = Arc::new(|job: &mut Job| {
        if job.labels().contains_key(keys::INTERRUPT_LABEL)
            && let Some(spec) = job.spec.as_mut()
        {
            PodFate::unreachable()
                .apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    });
    let operator = SuiteOperator::new(&client, &ns, SUITE_LABEL, &ns)
        .hook(Some(hook))
        .start();
    let mut rebooting = package("1.0.0", &[]);
    // The interrupt Job's activeDeadlineSeconds: the Job controller fails it after this.
    rebooting.stage_timeout = Some("3s".into());
    rebooting.interrupt = Some(Interrupt {
        kind: InterruptType::Service,
        services: vec!["containerd".into()],
    });
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(&[&node], [("boot", rebooting)]),
    )
    .await;

    // The deadline passes: FailureTarget, the pod deleted but never terminal.
    let stuck = cluster
        .wait_for("the interrupt Job at FailureTarget", BOUND, || {
            let jobs = jobs.clone();
            async move {
                let list = jobs
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| cluster.kube_error("jobs".into(), e))?;
                Ok(list.items.into_iter().find(|j| {
                    j.labels().contains_key(keys::INTERRUPT_LABEL)
                        && condition(j, "FailureTarget").is_some()
                }))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let job_name = stuck.name_any();
    let uid = stuck.metadata.uid.clone().expect("uid");
    let target = condition(&stuck, "FailureTarget").expect("FailureTarget");
    assert_eq!(target.reason.as_deref(), Some("DeadlineExceeded"));
    let since = target
        .last_transition_time
        .clone()
        .expect("FailureTarget transition time")
        .0;
    let pod = wait_job_pods(
        cluster,
        &pods,
        &uid,
        "the interrupt pod Terminating",
        |pods| {
            pods.into_iter()
                .find(|p| p.metadata.deletion_timestamp.is_some())
        },
    )
    .await;
    let pod_name = pod.name_any();

    // The snapshot is written as soon as the Job is seen stuck. The pod never ran (nothing on the
    // node answered), so it names the pod and its phase rather than a log.
    let annotated = support::wait_pick(
        cluster,
        jobs.clone(),
        &job_name,
        "the last-logs snapshot on the Job",
        |job: &Job| {
            job.annotations()
                .contains_key(keys::LAST_LOGS_ANNOTATION)
                .then(|| job.clone())
        },
    )
    .await;
    let snapshot = annotated.annotations()[keys::LAST_LOGS_ANNOTATION].clone();
    assert_eq!(
        snapshot,
        format!("pod {pod_name} never started: Pending"),
        "the snapshot names the stuck pod and why it has no log"
    );

    // Past STUCK_BOUND at FailureTarget (the operator looks again every STUCK_RECHECK), the stage
    // surfaces as erroring on the node. The bound of this wait is that plus slack, from now.
    cluster
        .wait_for(
            "(interrupt, erroring) on the node",
            STUCK_BOUND + STUCK_RECHECK + Duration::from_secs(60),
            || {
                let client = client.clone();
                let (node, ns) = (node.clone(), ns.clone());
                async move {
                    let n = Api::<Node>::all(client)
                        .get(&node)
                        .await
                        .map_err(|e| cluster.kube_error("node".into(), e))?;
                    Ok(interrupt_erroring(&n, &ns).then_some(()))
                }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let seen_at = cluster
        .wait_for("the node watch to see the erroring record", BOUND, || {
            let first = *first_erroring.lock().expect("lock");
            async move { Ok(first) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stuck_for = Duration::try_from(seen_at.duration_since(since)).unwrap_or_default();
    assert!(
        stuck_for >= STUCK_BOUND,
        "recorded erroring after {stuck_for:?} at FailureTarget (since {since}, seen {seen_at}); \
         the bound is {STUCK_BOUND:?}"
    );
    // Still stuck: the Job is not Failed, its pod is Terminating and not terminal.
    let job = jobs.get(&job_name).await.expect("the Job");
    assert!(
        condition(&job, "FailureTarget").is_some(),
        "{:?}",
        job.status
    );
    assert!(condition(&job, "Failed").is_none(), "{:?}", job.status);
    assert!(
        job.annotations()
            .get(keys::STATE_RECORDED_ANNOTATION)
            .is_none(),
        "a stuck Job is not recorded: it has not finished"
    );
    let pod = pods.get(&pod_name).await.expect("the stuck pod");
    assert!(pod.metadata.deletion_timestamp.is_some());
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    let nw = wait_status(cluster, &client, &ns, Status::Erroring).await;
    assert!(
        condition_is(&nw, "Ready", "False", Some("Erroring")),
        "{:?}",
        nw.status
    );
    let ready = support::condition(&nw, "Ready").expect("Ready");
    assert!(
        ready.message.contains(&format!("1 erroring ({node})")),
        "{}",
        ready.message
    );
    assert_eq!(
        nw.status.as_ref().and_then(|s| s.node_status.get(&node)),
        Some(&Status::Erroring)
    );

    // The node comes back: the pod terminates, the Job controller sets Failed, and the operator
    // records the stage timed out. The same Job stays as evidence, the record stays erroring.
    pods.patch(
        &pod_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {FATE_LABEL: null}}})),
    )
    .await
    .expect("fate label removed");
    let recorded = wait_timed_out_job(cluster, &client, &ns).await;
    assert_eq!(recorded.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(
        condition(&recorded, "Failed").and_then(|c| c.reason.as_deref()),
        Some("DeadlineExceeded")
    );
    assert_eq!(
        recorded.annotations().get(keys::LAST_LOGS_ANNOTATION),
        Some(&snapshot),
        "the snapshot is written once"
    );
    let warning = wait_event(cluster, &client, &ns, "StageTimedOut", "NodeWright").await;
    let note = warning.message.unwrap_or_default();
    assert!(note.contains("stage [interrupt]"), "{note}");
    let r = node_state(&client, &node, &ns)
        .await
        .and_then(|s| s.get("boot", "1.0.0").cloned())
        .expect("record");
    assert_eq!(
        (r.stage, r.state),
        (Stage::Interrupt, Some(State::Erroring))
    );
    wait_status(cluster, &client, &ns, Status::Erroring).await;
    // No rerun: the timed-out interrupt is the only interrupt Job the namespace ever had.
    operator.stop().await;
    job_watch.stop();
    node_watch.abort();
    let interrupts: Vec<String> = job_watch
        .latest()
        .iter()
        .filter(|j| j.labels().contains_key(keys::INTERRUPT_LABEL))
        .filter_map(|j| j.metadata.uid.clone())
        .collect();
    assert_eq!(interrupts, [uid]);
}

/// (b) A stage whose pods cannot be created (the namespace's Pod Security level refuses a
/// privileged host pod; the Job controller only emits `FailedCreate` Events and retries) surfaces
/// at once: the node's record is `(apply, erroring)`, the NodeWright erroring, the Job carries the
/// apiserver's refusal, a Warning `StagePodsNotCreated` Event names the Job and the refusal. Once
/// the namespace allows the pod, the stage runs, completes, and the note goes from the Job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_a_stage_whose_pods_cannot_be_created_surfaces_and_runs_once_allowed() {
    let (cluster, client, ns, node) = scenario_with_node("not-created").await;
    pod_security(&client, &ns, "baseline").await;
    let _operator = SuiteOperator::new(&client, &ns, SUITE_LABEL, &ns).start();
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(&[&node], [("locked", package("1.0.0", &[]))]),
    )
    .await;
    wait_status(cluster, &client, &ns, Status::Erroring).await;
    let r = record(&client, &node, &ns, "locked", "1.0.0").await;
    assert_eq!(
        (r.stage, r.state, r.restarts),
        (Stage::Apply, Some(State::Erroring), 0)
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job = cluster
        .wait_for("the refusal on the Job", BOUND, || async {
            let list = jobs
                .list(&ListParams::default().labels(&format!("{}={ns}", keys::NAME_LABEL)))
                .await
                .map_err(|e| cluster.kube_error("jobs".into(), e))?;
            Ok(list.items.into_iter().find(|j| {
                j.annotations()
                    .get(keys::PODS_NOT_CREATED_ANNOTATION)
                    .is_some_and(|m| m.contains("PodSecurity"))
            }))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The node's Erroring condition names the Job and the refusal (`kubectl describe node`).
    let erroring_type = nodewright_core::node::conditions::erroring_type(&ns);
    wait_node(
        cluster,
        &client,
        &node,
        "its Erroring condition naming the Job",
        |n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| {
                    c.type_ == erroring_type
                        && c.status == "True"
                        && c.reason.as_deref() == Some("PodsNotCreated")
                        && c.message.as_deref().is_some_and(|m| {
                            m.contains(&job.name_any()) && m.contains("PodSecurity")
                        })
                })
        },
    )
    .await;
    let event = wait_event(cluster, &client, &ns, "StagePodsNotCreated", "NodeWright").await;
    let note = event.message.unwrap_or_default();
    assert!(
        note.contains(&job.name_any()) && note.contains("PodSecurity"),
        "{note}"
    );
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    // The administrator allows privileged pods there: the Job controller's next try creates the
    // pod, the stage completes, and the refusal note goes.
    pod_security(&client, &ns, "privileged").await;
    wait_status(cluster, &client, &ns, Status::Complete).await;
    // The note goes once the Job has had a pod (maybe just after the stage was recorded).
    wait_note_gone(
        cluster,
        &jobs,
        &job.name_any(),
        keys::PODS_NOT_CREATED_ANNOTATION,
    )
    .await;
}

/// Waits until the Job `name` of `jobs` no longer carries the note (annotation) `key`.
async fn wait_note_gone(cluster: &nodewright_e2e::Cluster, jobs: &Api<Job>, name: &str, key: &str) {
    cluster
        .wait_for(&format!("{key} gone from Job {name}"), BOUND, || async {
            let job = jobs
                .get(name)
                .await
                .map_err(|e| cluster.kube_error("job".into(), e))?;
            Ok((!job.annotations().contains_key(key)).then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// (c) A disruptive stage whose pods stay refused past `PODS_NOT_CREATED_TIMEOUT` never holds its
/// node: the node was cordoned and drained for it, then at the bound the stage ends timed out
/// (the Job failed at a deadline of the time it waited, never having had a pod), the node is
/// uncordoned, counted as failed for its batch, and no interrupt ever runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_a_disruptive_stage_refused_past_its_bound_releases_the_node() {
    let (cluster, client, ns, node) = scenario_with_node("release").await;
    pod_security(&client, &ns, "baseline").await;
    let policy: nodewright_shared::api::DeploymentPolicy = serde_json::from_value(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": ns},
        "spec": {"default": {
            "budget": {"count": 1},
            "strategy": {"fixed": {"initialBatch": 1}}
        }}
    }))
    .expect("policy");
    Api::<nodewright_shared::api::DeploymentPolicy>::all(client.clone())
        .create(&Default::default(), &policy)
        .await
        .expect("DeploymentPolicy created");
    let _operator = SuiteOperator::new(&client, &ns, SUITE_LABEL, &ns)
        .env(&[("PODS_NOT_CREATED_TIMEOUT", "5s")])
        .start();
    let mut held = package("1.0.0", &[]);
    held.interrupt = Some(Interrupt {
        kind: InterruptType::Reboot,
        services: Vec::new(),
    });
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&[&node]),
            deployment_policy: Some(ns.clone()),
            packages: BTreeMap::from([("held".to_owned(), held)]),
            ..NodeWrightSpec::default()
        },
    )
    .await;
    // Cordoned and drained for the apply stage, whose pod Pod Security refuses.
    let unschedulable = |n: &Node| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
    wait_node(cluster, &client, &node, "cordoned", unschedulable).await;
    // At the bound the stage ends timed out, never having had a pod, and the node is released.
    let job = wait_timed_out_job(cluster, &client, &ns).await;
    assert_eq!(
        condition(&job, "Failed").and_then(|c| c.reason.as_deref()),
        Some("DeadlineExceeded"),
        "{job:?}"
    );
    let status = job.status.clone().unwrap_or_default();
    assert_eq!(
        (status.active, status.failed, status.succeeded),
        (None, None, None),
        "the Job never had a pod: {status:?}"
    );
    assert!(
        job.annotations()
            .get(keys::PODS_NOT_CREATED_ANNOTATION)
            .is_some_and(|m| m.contains("PodSecurity")),
        "the refusal stays on the Job as its evidence"
    );
    wait_node(cluster, &client, &node, "uncordoned", |n| !unschedulable(n)).await;
    wait_status(cluster, &client, &ns, Status::Erroring).await;
    let r = record(&client, &node, &ns, "held", "1.0.0").await;
    assert_eq!((r.stage, r.state), (Stage::Apply, Some(State::Erroring)));
    // Counted as the batch's failed node (the batch is evaluated once nothing is in flight).
    wait_nodewright(
        cluster,
        &client,
        &ns,
        "its node counted failed for its batch",
        |nw| {
            nw.status
                .as_ref()
                .and_then(|s| s.compartment_statuses.get(DEFAULT_COMPARTMENT))
                .and_then(|c| c.batch_state.as_ref())
                .is_some_and(|b| b.failed_nodes == 1)
        },
    )
    .await;
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{}={ns}", keys::NAME_LABEL)))
        .await
        .expect("jobs");
    assert_eq!(
        jobs.items.iter().map(|j| j.name_any()).collect::<Vec<_>>(),
        vec![job.name_any()],
        "no interrupt ever ran"
    );
}

/// (d) An attempt waiting on an image the kubelet cannot pull (`ImagePullBackOff`) is named once it
/// has waited `IMAGE_PULL_FAILING_AFTER`: a Warning `StageImagePullFailing` Event with the image and
/// the kubelet's message, the node's Erroring condition (`ImagePullFailing`) and the note on the
/// Job; the stage itself is untouched (in progress, no attempt counted). Once the image pulls, the
/// stage completes and the note and condition go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d_an_attempt_waiting_on_an_image_it_cannot_pull_is_named() {
    let (cluster, client, ns, node) = scenario_with_node("image-pull").await;
    let _operator = SuiteOperator::new(&client, &ns, SUITE_LABEL, &ns)
        .env(&[("IMAGE_PULL_FAILING_AFTER", "2s")])
        .hook(Some(support::fate_for(
            "missing",
            "apply",
            PodFate::never_start(),
        )))
        .start();
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(&[&node], [("missing", package("1.0.0", &[]))]),
    )
    .await;
    let event = wait_event(cluster, &client, &ns, "StageImagePullFailing", "NodeWright").await;
    let note = event.message.unwrap_or_default();
    assert!(
        note.contains("ImagePullBackOff") && note.contains("Back-off pulling image"),
        "{note}"
    );
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let erroring_type = nodewright_core::node::conditions::erroring_type(&ns);
    let erroring_reason = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .find(|c| c.type_ == erroring_type)
            .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
    };
    wait_node(cluster, &client, &node, "Erroring: ImagePullFailing", |n| {
        erroring_reason(n) == Some(("True".into(), "ImagePullFailing".into()))
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let listed = jobs
        .list(&ListParams::default().labels(&format!("{}={ns}", keys::NAME_LABEL)))
        .await
        .expect("jobs");
    let job = listed.items.first().expect("the apply Job");
    assert!(
        job.annotations()
            .get(keys::IMAGE_PULL_FAILING_ANNOTATION)
            .is_some_and(|m| m.contains("ImagePullBackOff")),
        "{:?}",
        job.annotations()
    );
    // The stage runs on as any stage: no attempt counted, not erroring.
    let r = record(&client, &node, &ns, "missing", "1.0.0").await;
    assert_eq!(
        (r.stage, r.state, r.restarts),
        (Stage::Apply, Some(State::InProgress), 0)
    );

    // The image pulls at last (the fate goes): the stage completes, the note and condition go.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let waiting = pods
        .list(&ListParams::default().labels(&format!("job-name={}", job.name_any())))
        .await
        .expect("pods");
    for pod in &waiting.items {
        pods.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {FATE_LABEL: null}}})),
        )
        .await
        .expect("the image pulls");
    }
    wait_status(cluster, &client, &ns, Status::Complete).await;
    wait_note_gone(
        cluster,
        &jobs,
        &job.name_any(),
        keys::IMAGE_PULL_FAILING_ANNOTATION,
    )
    .await;
    wait_node(
        cluster,
        &client,
        &node,
        "Erroring no longer ImagePullFailing",
        |n| erroring_reason(n).is_some_and(|(status, _)| status == "False"),
    )
    .await;
}
