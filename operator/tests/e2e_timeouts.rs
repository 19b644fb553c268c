//! Timed-out stages end to end on the local control plane (real kube-apiserver, etcd, the real Job
//! controller, kwok simulating nodes and pods), each test with its own operator, namespace and node.
//!
//! (a) The live path's record is evidence on its own: a hanging stage's first genuine failure is
//!     recorded while the Job runs; the operator stops; the Job then fails and its retained pods are
//!     deleted (as node deletion or pod GC would); a new operator records the stage timed out from
//!     the node's `erroring` entry, keeps the same Job as evidence and runs nothing again. Warning
//!     `StageTimedOut` Events name it on the NodeWright and the node. Then an upgrade to a version
//!     that works completes, and the timed-out version's record and Job go.
//! (b) A node's interrupt waits for the unfinished package Jobs of every NodeWright on the node,
//!     not only its own: an earlier NodeWright's interrupt, triggered while a later NodeWright's
//!     package still runs there, starts only once that package's Job finished.
//! (c) An interrupt whose stage outlives its stageTimeout (the whole stage is bounded, across the
//!     reboot) fails by the Job's own deadline and is recorded timed out: `(interrupt, erroring)`,
//!     the Job kept, a `StageTimedOut` Event naming the interrupt stage's bound.
//! (d) Pausing spends no attempt: with JOB_BACKOFF_LIMIT 0, a running attempt killed by the pause
//!     (the real Job controller suspends the Job) is not a failure; after resume the stage completes
//!     in the same Job and nothing was ever recorded erroring.
//!
//! (e) A timed-out interrupt whose package is fixed at the same version (its agent image) runs
//!     again: drift deletes the timed-out interrupt Job, `StageTimeoutCleared` is announced, the
//!     rollout completes.
//!
//! (f) A deleted package Job whose pod is still shutting down keeps its node busy: another
//!     NodeWright's interrupt waits until the pod is gone (Jobs are deleted with foreground
//!     propagation).
//!
//! (g) A `stageTimeout` admission filled follows the operator's current `JOB_STAGE_TIMEOUT`; a
//!     package's own value, and one changed since admission, stay theirs.
//!
//! No timing assertion: waits are bounded only so a broken build fails instead of hanging, and
//! orders are read from the objects' own timestamps.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::watcher;
use nodewright_e2e::PodFate;

mod support;
use nodewright_operator::JobHook;
use nodewright_shared::api::{Interrupt, InterruptType, NodeWright, NodeWrightSpec, Status};
use nodewright_shared::keys;
use nodewright_shared::node_state::{Stage, State};
use serde_json::json;
use support::{
    BOUND, Operator, SuiteOperator, create_labelled_nodewright, fate_for, node_state, on_nodes,
    package, patch_nodewright, scenario_with_node, spec_on, wait_event, wait_nodewright,
    wait_status, wait_timed_out_job,
};
use support::{create_scoped_nodewright, job_condition_time};

/// Label that scopes each test's operator to its own NodeWrights (distinct from the other suites).
const SUITE_LABEL: &str = "nodewright.test/timeouts-suite";

fn start_operator(
    client: kube::Client,
    namespace: &str,
    instance: &str,
    backoff_limit: i32,
    hook: Option<JobHook>,
) -> Operator {
    SuiteOperator::new(&client, namespace, SUITE_LABEL, namespace)
        .pod_name(format!("operator-{instance}"))
        .backoff_limit(backoff_limit)
        .hook(hook)
        .start()
}

/// The pods of the Job with this uid.
async fn pods_of(pods: &Api<Pod>, uid: &str) -> Vec<Pod> {
    support::job_pods(pods, uid).await.expect("pods listed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_the_live_paths_record_keeps_a_stage_timed_out_when_its_pods_are_gone_and_an_upgrade_clears_it()
 {
    let (cluster, client, ns, node) = scenario_with_node("gone-pods").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    // Pods of images named `.../hang` hang until their deadline; the fixed image succeeds.
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
    let backoff_limit = 1;
    let first = start_operator(
        client.clone(),
        &ns,
        &format!("{ns}-1"),
        backoff_limit,
        Some(hook.clone()),
    );
    let mut hanging = package("1.0.0", &[]);
    hanging.image = "ghcr.io/nvidia/skyhook/hang".into();
    hanging.stage_timeout = Some("3s".into());
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(&[&node], [("stuck", hanging)]),
    )
    .await;

    // The live path records the first genuine failure while the Job still runs.
    cluster
        .wait_for("the first failure recorded as erroring", BOUND, || {
            let client = client.clone();
            let (node, ns) = (node.clone(), ns.clone());
            async move {
                let state = node_state(&client, &node, &ns).await;
                Ok(state
                    .and_then(|s| s.get("stuck", "1.0.0").cloned())
                    .filter(|r| r.stage == Stage::Apply && r.state == Some(State::Erroring)))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    first.stop().await;

    // With no operator running, the Job fails for good; then its retained pods go away.
    let job = cluster
        .wait_for("the Job failed", BOUND, || {
            let jobs = jobs.clone();
            async move {
                let list = jobs
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| cluster.kube_error("jobs".into(), e))?;
                Ok(list
                    .items
                    .into_iter()
                    .find(|j| job_condition_time(j, "Failed").is_some()))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !job.annotations()
            .contains_key(keys::STATE_RECORDED_ANNOTATION),
        "nothing recorded the terminal outcome yet"
    );
    let uid = job.metadata.uid.clone().expect("uid");
    for pod in pods_of(&pods, &uid).await {
        pods.delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
            .await
            .expect("pod deleted");
    }
    cluster
        .wait_for("the Job's pods gone", BOUND, || {
            let (pods, uid) = (pods.clone(), uid.clone());
            async move { Ok(pods_of(&pods, &uid).await.is_empty().then_some(())) }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // A new operator classifies the failed Job with no pod left: the node's erroring record is the
    // evidence, so the stage is timed out, and the same Job stays.
    let second = start_operator(
        client.clone(),
        &ns,
        &format!("{ns}-2"),
        backoff_limit,
        Some(hook),
    );
    let recorded = wait_timed_out_job(cluster, &client, &ns).await;
    assert_eq!(
        recorded.metadata.uid.as_deref(),
        Some(uid.as_str()),
        "the original Job is the evidence (it was not deleted and rerun)"
    );
    wait_status(cluster, &client, &ns, Status::Erroring).await;
    let warning = wait_event(cluster, &client, &ns, "StageTimedOut", "NodeWright").await;
    let note = warning.message.clone().unwrap_or_default();
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    for part in [
        "[stuck:1.0.0]",
        "stage [apply]",
        &format!("node [{node}]"),
        "of 2 attempts",
        "its pods are gone",
    ] {
        assert!(note.contains(part), "{part:?} in {note:?}");
    }
    wait_event(cluster, &client, &node, "StageTimedOut", "Node").await;
    // Nothing runs the stage again: still the one Job, the record still erroring.
    let all = jobs.list(&ListParams::default()).await.expect("jobs");
    assert_eq!(
        all.items
            .iter()
            .map(|j| j.metadata.uid.clone())
            .collect::<Vec<_>>(),
        vec![Some(uid.clone())]
    );
    let r = node_state(&client, &node, &ns)
        .await
        .and_then(|s| s.get("stuck", "1.0.0").cloned())
        .expect("record");
    assert_eq!((r.stage, r.state), (Stage::Apply, Some(State::Erroring)));

    // The user moves on to a version that works: it installs, and the timed-out version's record
    // and Job go (nothing keeps showing an erroring package).
    patch_nodewright(
        &client,
        &ns,
        json!({"spec": {"packages": {"stuck": {
            "version": "1.0.1",
            "image": "ghcr.io/nvidia/skyhook/agentless"
        }}}}),
    )
    .await;
    wait_status(cluster, &client, &ns, Status::Complete).await;
    let state = node_state(&client, &node, &ns).await.expect("state");
    assert!(
        state.get("stuck", "1.0.0").is_none(),
        "the timed-out version's record is gone: {state:?}"
    );
    let r = state.get("stuck", "1.0.1").expect("new record");
    assert_eq!((r.stage, r.state), (Stage::Config, Some(State::Complete)));
    cluster
        .wait_for("the timed-out Job deleted", BOUND, || {
            let (jobs, uid) = (jobs.clone(), uid.clone());
            async move {
                let list = jobs
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| cluster.kube_error("jobs".into(), e))?;
                Ok(list
                    .items
                    .iter()
                    .all(|j| j.metadata.uid.as_deref() != Some(uid.as_str()))
                    .then_some(()))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    second.stop().await;
}

/// Creates a NodeWright labelled for this test's operator (several per test).
async fn create_scoped(client: &kube::Client, ns: &str, name: &str, spec: NodeWrightSpec) {
    create_scoped_nodewright(client, SUITE_LABEL, ns, NodeWright::new(name, spec)).await;
}

/// The NodeWright `name` on `node` with one package, `boot`, whose interrupt restarts containerd.
async fn create_booting(client: &kube::Client, ns: &str, name: &str, node: &str) {
    let mut rebooting = package("1.0.0", &[]);
    rebooting.interrupt = Some(Interrupt {
        kind: InterruptType::Service,
        services: vec!["containerd".into()],
    });
    create_scoped(client, ns, name, spec_on(&[node], [("boot", rebooting)])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_an_interrupt_waits_for_the_package_jobs_of_every_nodewright_on_its_node() {
    let (cluster, client, ns, node) = scenario_with_node("gating").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let watch = support::Watched::start(jobs.clone(), watcher::Config::default());
    // `b-slow`'s apply takes a while; everything else succeeds at once.
    let hook = fate_for("slow", "apply", PodFate::succeed().delay("25s"));
    let operator = start_operator(client.clone(), &ns, &ns, 3, Some(hook));
    // `a-boot` comes first (same priority, name order): it completes on the node before `b-slow`
    // starts there, and does not wait for `b-slow` when it changes later.
    let (boot, slow) = (format!("{ns}-a-boot"), format!("{ns}-b-slow"));
    create_booting(&client, &ns, &boot, &node).await;
    create_scoped(
        &client,
        &ns,
        &slow,
        spec_on(&[&node], [("slow", package("1.0.0", &[]))]),
    )
    .await;
    wait_status(cluster, &client, &boot, Status::Complete).await;
    // `b-slow`'s apply runs; now `a-boot` gets a new version, whose interrupt follows its upgrade
    // and config while `b-slow`'s apply Job is still running on the node.
    let slow_apply = cluster
        .wait_for("b-slow's apply Job running", BOUND, || {
            let latest = watch.latest();
            async move {
                Ok(latest.into_iter().find(|j| {
                    j.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some("apply")
                        && j.labels().get(keys::PACKAGE_LABEL).map(String::as_str)
                            == Some("slow-1.0.0")
                        && j.status.as_ref().and_then(|s| s.active) == Some(1)
                }))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    patch_nodewright(
        &client,
        &boot,
        json!({"spec": {"packages": {"boot": {"version": "1.0.1"}}}}),
    )
    .await;
    wait_nodewright(cluster, &client, &boot, "1.0.1 complete", |nw| {
        nw.status.as_ref().is_some_and(|s| {
            s.status == Some(Status::Complete) && s.package_list.contains("boot:1.0.1")
        })
    })
    .await;
    wait_status(cluster, &client, &slow, Status::Complete).await;
    watch.stop();

    let seen = watch.latest_by_uid();
    let slow_done = seen
        .get(slow_apply.metadata.uid.as_deref().expect("uid"))
        .and_then(|j| job_condition_time(j, "Complete"))
        .expect("b-slow's apply Job completed");
    let upgrade_interrupt = seen
        .values()
        .filter(|j| j.labels().get(keys::INTERRUPT_LABEL).is_some())
        .filter(|j| j.labels().get(keys::NAME_LABEL).map(String::as_str) == Some(boot.as_str()))
        .max_by_key(|j| j.metadata.creation_timestamp.clone())
        .expect("a-boot's interrupt Job for 1.0.1");
    let created = upgrade_interrupt
        .metadata
        .creation_timestamp
        .clone()
        .expect("creation time");
    assert!(
        created >= slow_done,
        "a-boot's interrupt Job was created at {:?}, before b-slow's apply Job finished at {:?}",
        created.0,
        slow_done.0
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_an_interrupt_past_its_stage_bound_is_recorded_timed_out() {
    let (cluster, client, ns, node) = scenario_with_node("interrupt-timeout").await;
    // The interrupt never finishes: only its Job's deadline (the stage bound) ends it.
    let hook: JobHook = Arc::new(|job: &mut Job| {
        if job.labels().contains_key(keys::INTERRUPT_LABEL)
            && let Some(spec) = job.spec.as_mut()
        {
            PodFate::hang().apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    });
    let _operator = start_operator(client.clone(), &ns, &ns, 3, Some(hook));
    let mut rebooting = package("1.0.0", &[]);
    rebooting.stage_timeout = Some("4s".into());
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
    let job = wait_timed_out_job(cluster, &client, &ns).await;
    assert!(job.labels().contains_key(keys::INTERRUPT_LABEL), "{job:?}");
    assert_eq!(
        job.spec.as_ref().and_then(|s| s.active_deadline_seconds),
        Some(4),
        "the whole interrupt stage is bounded by the Job"
    );
    let failed = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Failed"))
        .expect("Failed condition");
    assert_eq!(failed.reason.as_deref(), Some("DeadlineExceeded"));
    wait_status(cluster, &client, &ns, Status::Erroring).await;
    let r = node_state(&client, &node, &ns)
        .await
        .and_then(|s| s.get("boot", "1.0.0").cloned())
        .expect("record");
    assert_eq!(
        (r.stage, r.state),
        (Stage::Interrupt, Some(State::Erroring))
    );
    let warning = wait_event(cluster, &client, &ns, "StageTimedOut", "NodeWright").await;
    let note = warning.message.unwrap_or_default();
    assert!(
        note.contains("stage [interrupt]")
            && note.contains("the interrupt stage's time bound of 4s passed"),
        "{note}"
    );
    // Kept as evidence: the same Job is still there.
    let still = Api::<Job>::namespaced(client.clone(), &ns)
        .get(&job.name_any())
        .await
        .expect("the interrupt Job is kept");
    assert_eq!(still.metadata.uid, job.metadata.uid);
}

/// D4/D5 (issue 23): a timed-out interrupt is fixed by editing its package at the same version
/// (a broken `agentImageOverride`): drift deletes the timed-out interrupt Job, the interrupt runs
/// again from `in_progress` (a Normal `StageTimeoutCleared` says so) and the rollout completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e_a_timed_out_interrupt_runs_again_once_its_package_is_fixed() {
    let (cluster, client, ns, node) = scenario_with_node("interrupt-fixed").await;
    // An interrupt run by the broken agent image never finishes; the fixed one succeeds.
    let hook: JobHook = Arc::new(|job: &mut Job| {
        let broken = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.image.as_deref().is_some_and(|i| i.contains("/broken")))
            });
        if job.labels().contains_key(keys::INTERRUPT_LABEL)
            && broken
            && let Some(spec) = job.spec.as_mut()
        {
            PodFate::hang().apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    });
    let _operator = start_operator(client.clone(), &ns, &ns, 3, Some(hook));
    let mut rebooting = package("1.0.0", &[]);
    rebooting.stage_timeout = Some("4s".into());
    rebooting.agent_image_override = Some("example.com/agent/broken:1".into());
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
    let timed_out = wait_timed_out_job(cluster, &client, &ns).await;
    assert!(
        timed_out.labels().contains_key(keys::INTERRUPT_LABEL),
        "{timed_out:?}"
    );
    wait_status(cluster, &client, &ns, Status::Erroring).await;

    patch_nodewright(
        &client,
        &ns,
        json!({"spec": {"packages": {"boot": {"agentImageOverride": "example.com/agent/fixed:1"}}}}),
    )
    .await;
    let cleared = wait_event(cluster, &client, &ns, "StageTimeoutCleared", "NodeWright").await;
    let note = cleared.message.unwrap_or_default();
    assert!(note.contains("stage [interrupt]"), "{note}");
    wait_status(cluster, &client, &ns, Status::Complete).await;
    let r = node_state(&client, &node, &ns)
        .await
        .and_then(|s| s.get("boot", "1.0.0").cloned())
        .expect("record");
    assert_eq!(
        (r.stage, r.state),
        (Stage::PostInterrupt, Some(State::Complete))
    );
    // The timed-out Job went; no interrupt Job of the broken image is left.
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("jobs listed")
        .items;
    assert!(
        jobs.iter()
            .all(|j| j.metadata.uid != timed_out.metadata.uid),
        "the timed-out interrupt Job was replaced"
    );
}

/// D6 (issue 23): a deleted package Job whose pod is still shutting down keeps its node busy: an
/// interrupt of another NodeWright waits until the pod is gone. `b-gone`'s package `gone` is
/// removed while its apply pod runs on a node that does not answer (`unreachable`): the pod stays
/// Terminating, as one in a long `gracefulShutdown`. `a-boot`'s upgrade then wants its interrupt
/// and must stay at `(config, complete)` until the node answers and the pod is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f_an_interrupt_waits_for_a_deleted_jobs_pod_still_shutting_down() {
    let (cluster, client, ns, node) = scenario_with_node("deleting").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let hook = fate_for("gone", "apply", PodFate::unreachable());
    let operator = start_operator(client.clone(), &ns, &ns, 3, Some(hook));
    let (boot, gone) = (format!("{ns}-a-boot"), format!("{ns}-b-gone"));
    create_booting(&client, &ns, &boot, &node).await;
    create_scoped(
        &client,
        &ns,
        &gone,
        spec_on(
            &[&node],
            [
                ("gone", package("1.0.0", &[])),
                ("keep", package("1.0.0", &[])),
            ],
        ),
    )
    .await;
    wait_status(cluster, &client, &boot, Status::Complete).await;
    let gone_pods = ListParams::default().labels(&format!("{}=gone-1.0.0", keys::PACKAGE_LABEL));
    let pod = cluster
        .wait_for("gone's apply pod", BOUND, || {
            let (pods, lp) = (pods.clone(), gone_pods.clone());
            async move {
                Ok(pods
                    .list(&lp)
                    .await
                    .map_err(|e| cluster.kube_error("pods".into(), e))?
                    .items
                    .into_iter()
                    .next())
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The package goes: its running Job is deleted, its pod stays Terminating.
    patch_nodewright(
        &client,
        &gone,
        json!({"spec": {"packages": {"gone": null}}}),
    )
    .await;
    cluster
        .wait_for("gone's pod terminating", BOUND, || {
            let pods = pods.clone();
            let name = pod.name_any();
            async move {
                Ok(pods
                    .get_opt(&name)
                    .await
                    .map_err(|e| cluster.kube_error("pod".into(), e))?
                    .filter(|p| p.metadata.deletion_timestamp.is_some()))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    patch_nodewright(
        &client,
        &boot,
        json!({"spec": {"packages": {"boot": {"version": "1.0.1"}}}}),
    )
    .await;
    let r = cluster
        .wait_for("boot 1.0.1 at (config, complete) or past it", BOUND, || {
            let (client, node, boot) = (client.clone(), node.clone(), boot.clone());
            async move {
                Ok(node_state(&client, &node, &boot)
                    .await
                    .and_then(|s| s.get("boot", "1.0.1").cloned())
                    .filter(|r| {
                        (r.stage == Stage::Config && r.state == Some(State::Complete))
                            || r.stage.is_interrupt()
                            || r.stage == Stage::PostInterrupt
                    }))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (r.stage, r.state),
        (Stage::Config, Some(State::Complete)),
        "a-boot's interrupt started while b-gone's deleted Job's pod was still shutting down"
    );
    assert!(
        pods.get_opt(&pod.name_any())
            .await
            .expect("pod read")
            .is_some(),
        "the pod is still there"
    );
    // The node answers again: the pod terminates and goes, and the interrupt runs.
    Api::<Pod>::namespaced(client.clone(), &ns)
        .patch(
            &pod.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"labels": {"nodewright.test/fate": null}}}),
            ),
        )
        .await
        .expect("pod label removed");
    wait_nodewright(cluster, &client, &boot, "1.0.1 complete", |nw| {
        nw.status.as_ref().is_some_and(|s| {
            s.status == Some(Status::Complete) && s.package_list.contains("boot:1.0.1")
        })
    })
    .await;
    wait_status(cluster, &client, &gone, Status::Complete).await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d_pausing_spends_no_attempt() {
    let (cluster, client, ns, node) = scenario_with_node("pause-budget").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // Every version of the node's state for this NodeWright: was `steady` ever erroring?
    let ever_erroring = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let node_watch = {
        let (flag, key) = (ever_erroring.clone(), keys::node_state_key(&ns));
        let api = Api::<Node>::all(client.clone());
        let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
        support::watch_applied(api, config, move |node: Node| {
            let erroring = node.annotations().get(&key).is_some_and(|text| {
                nodewright_shared::node_state::NodeState::parse(text)
                    .is_ok_and(|s| s.iter().any(|r| r.state == Some(State::Erroring)))
            });
            if erroring {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    // Each attempt runs for a while, then succeeds; no retry at all is allowed.
    let hook = fate_for("steady", "apply", PodFate::succeed().delay("15s"));
    let _operator = start_operator(client.clone(), &ns, &ns, 0, Some(hook));
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(&[&node], [("steady", package("1.0.0", &[]))]),
    )
    .await;
    let running = cluster
        .wait_for("the apply attempt running", BOUND, || {
            let jobs = jobs.clone();
            async move {
                let list = jobs
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| cluster.kube_error("jobs".into(), e))?;
                Ok(list
                    .items
                    .into_iter()
                    .find(|j| j.status.as_ref().and_then(|s| s.active) == Some(1)))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let uid = running.metadata.uid.clone().expect("uid");
    let first_pod = pods_of(&pods, &uid)
        .await
        .into_iter()
        .next()
        .expect("the running attempt");

    // Pause: the Job is suspended and the real Job controller removes its running pod.
    patch_nodewright(
        &client,
        &ns,
        json!({"metadata": {"annotations": {keys::PAUSE_ANNOTATION: "true"}}}),
    )
    .await;
    cluster
        .wait_for("the suspended attempt gone", BOUND, || {
            let (jobs, pods, uid) = (jobs.clone(), pods.clone(), uid.clone());
            let name = running.name_any();
            let first = first_pod.name_any();
            async move {
                let job = jobs
                    .get(&name)
                    .await
                    .map_err(|e| cluster.kube_error("job".into(), e))?;
                let suspended = job.spec.as_ref().and_then(|s| s.suspend) == Some(true);
                let gone = pods_of(&pods, &uid)
                    .await
                    .iter()
                    .all(|p| p.name_any() != first);
                Ok((suspended && gone).then_some(()))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    patch_nodewright(
        &client,
        &ns,
        json!({"metadata": {"annotations": {keys::PAUSE_ANNOTATION: null}}}),
    )
    .await;
    wait_status(cluster, &client, &ns, Status::Complete).await;
    let job = jobs.get(&running.name_any()).await.expect("the same Job");
    assert_eq!(job.metadata.uid.as_deref(), Some(uid.as_str()));
    assert!(
        job_condition_time(&job, "Complete").is_some(),
        "{:?}",
        job.status
    );
    assert_eq!(
        job.status.as_ref().and_then(|s| s.failed).unwrap_or(0),
        0,
        "the paused attempt is no failure for the Job controller"
    );
    let r = node_state(&client, &node, &ns)
        .await
        .and_then(|s| s.get("steady", "1.0.0").cloned())
        .expect("record");
    assert_eq!((r.stage, r.state), (Stage::Config, Some(State::Complete)));
    node_watch.abort();
    assert!(
        !ever_erroring.load(std::sync::atomic::Ordering::SeqCst),
        "the paused attempt was never recorded as a failure"
    );
}

/// (g) A `stageTimeout` admission filled (recorded in the NodeWright's
/// `defaulted-stage-timeouts` annotation, as the webhook writes it) follows the operator's current
/// `JOB_STAGE_TIMEOUT`; a package's own value, and a value changed since admission, stay theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g_a_stage_timeout_admission_filled_follows_the_operators_current_default() {
    let (cluster, client, ns, node) = scenario_with_node("defaulted").await;
    // Admitted when the default was 1h: `filled` got it from the webhook, `changed` too but was set
    // to 30m since, `own` set 45m itself. The operator now runs with a 7m default.
    let _operator = SuiteOperator::new(&client, &ns, SUITE_LABEL, &ns)
        .backoff_limit(0)
        .env(&[("JOB_STAGE_TIMEOUT", "7m")])
        .start();
    let with_timeout = |value: &str| {
        let mut p = package("1.0.0", &[]);
        p.stage_timeout = Some(value.to_owned());
        p
    };
    let mut nw = NodeWright::new(
        &ns,
        NodeWrightSpec {
            node_selectors: on_nodes(&[&node]),
            priority: nodewright_shared::api::DEFAULT_PRIORITY,
            packages: BTreeMap::from([
                ("filled".to_owned(), with_timeout("1h")),
                ("changed".to_owned(), with_timeout("30m")),
                ("own".to_owned(), with_timeout("45m")),
            ]),
            ..NodeWrightSpec::default()
        },
    );
    nw.metadata.annotations = Some(BTreeMap::from([(
        keys::DEFAULTED_STAGE_TIMEOUTS_ANNOTATION.to_owned(),
        r#"{"filled":"1h","changed":"1h"}"#.to_owned(),
    )]));
    create_scoped_nodewright(&client, SUITE_LABEL, &ns, nw).await;
    wait_status(cluster, &client, &ns, Status::Complete).await;

    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{}={ns}", keys::NAME_LABEL)))
        .await
        .expect("jobs")
        .items;
    let mut deadlines: BTreeMap<String, Vec<Option<i64>>> = BTreeMap::new();
    for job in &jobs {
        let package = job
            .labels()
            .get(keys::PACKAGE_LABEL)
            .cloned()
            .unwrap_or_default();
        let deadline = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.active_deadline_seconds);
        deadlines.entry(package).or_default().push(deadline);
    }
    for (package, want) in [("filled", 420), ("changed", 1800), ("own", 2700)] {
        let got = deadlines
            .get(&format!("{package}-1.0.0"))
            .unwrap_or_else(|| panic!("no Job of {package}: {deadlines:?}"));
        assert!(
            got.iter().all(|d| *d == Some(want)),
            "{package}: every stage bounded by {want}s: {deadlines:?}"
        );
    }
}
