//! Proof that the local control plane is real: the Job, TTL-after-finished, garbage-collector
//! and disruption controllers of kube-controller-manager act on pods whose fates kwok plays,
//! the apiserver enforces PodDisruptionBudgets on eviction, and the repository's CRDs install
//! with their CEL rules enforced.
//!
//! All tests share one cluster (the machine has two cores); each works in its own namespace.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, EvictParams, GroupVersionKind, ListParams,
    Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use nodewright_e2e::{Cluster, ClusterOptions, FATE_LABEL, PodFate};
use serde_json::json;

async fn cluster() -> &'static Cluster {
    // The CRD test installs crds/ itself, so a broken CRD fails that test and no other.
    Cluster::shared(ClusterOptions {
        install_crds: false,
        ..Default::default()
    })
    .await
    .expect("start the shared test cluster")
}

/// A one-pod Job pinned to `node` (as the operator's Jobs are), its pods following `fate`.
fn job(name: &str, node: &str, fate: &PodFate, backoff_limit: i32) -> serde_json::Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": fate.labels(), "annotations": fate.annotations()},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    })
}

fn to<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("test object matches its Kubernetes type")
}

fn job_condition(job: &Job, type_: &str) -> Option<(String, String)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// Waits until the Job carries one of the conditions and returns it with the Job.
async fn wait_job(
    cluster: &Cluster,
    jobs: &Api<Job>,
    name: &str,
    conditions: &[&str],
    timeout: Duration,
) -> (Job, String, String) {
    cluster
        .wait_for(
            &format!("Job {name} to be {conditions:?}"),
            timeout,
            || async {
                let job = jobs
                    .get(name)
                    .await
                    .map_err(|e| cluster.kube_error(format!("reading Job {name}"), e))?;
                Ok(conditions.iter().find_map(|c| {
                    job_condition(&job, c).map(|(reason, _)| (job.clone(), c.to_string(), reason))
                }))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn job_pods(cluster: &Cluster, pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .unwrap_or_else(|e| panic!("listing pods of Job {job} on {}: {e}", cluster.describe()))
        .items
}

async fn wait_pod_phase(cluster: &Cluster, pods: &Api<Pod>, name: &str, phases: &[&str]) -> Pod {
    cluster
        .wait_for(
            &format!("pod {name} to reach {phases:?}"),
            Duration::from_secs(120),
            || async {
                let pod = pods
                    .get(name)
                    .await
                    .map_err(|e| cluster.kube_error(format!("reading pod {name}"), e))?;
                let phase = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default();
                Ok(phases.contains(&phase.as_str()).then_some(pod))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn exit_codes(pod: &Pod) -> Vec<i32> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code))
        .collect()
}

#[tokio::test]
async fn job_with_failing_pods_ends_backoff_limit_exceeded_after_exactly_three_pods() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("backoff limit") {
        return;
    }
    let client = cluster.client().await.expect("client");
    let ns = cluster
        .create_namespace("backoff")
        .await
        .expect("namespace");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let node = &cluster.node_names()[0];

    jobs.create(
        &PostParams::default(),
        &to(job("fails", node, &PodFate::fail().exit_code(1), 2)),
    )
    .await
    .expect("create Job");
    let (job, condition, reason) = wait_job(
        cluster,
        &jobs,
        "fails",
        &["Failed", "Complete"],
        Duration::from_secs(300),
    )
    .await;

    assert_eq!(
        condition,
        "Failed",
        "the Job must fail, on {}",
        cluster.describe()
    );
    assert_eq!(reason, "BackoffLimitExceeded", "on {}", cluster.describe());
    let status = job.status.clone().unwrap_or_default();
    assert_eq!(
        status.failed,
        Some(3),
        "backoffLimit 2 allows 3 attempts: {status:?}"
    );
    assert_eq!(status.succeeded.unwrap_or(0), 0);

    let created = job_pods(cluster, &pods, "fails").await;
    assert_eq!(
        created.len(),
        3,
        "the Job controller creates exactly backoffLimit+1 pods, on {}",
        cluster.describe()
    );
    for pod in &created {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        assert_eq!(phase, Some("Failed"), "pod {:?}", pod.metadata.name);
        assert_eq!(exit_codes(pod), vec![1], "pod {:?}", pod.metadata.name);
    }
}

#[tokio::test]
async fn hanging_pod_ends_deadline_exceeded_when_its_active_deadline_passes() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("active deadline") {
        return;
    }
    let client = cluster.client().await.expect("client");
    let ns = cluster
        .create_namespace("deadline")
        .await
        .expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let fate = PodFate::hang();
    let pod: Pod = to(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hangs", "labels": fate.labels()},
        "spec": {
            "nodeName": cluster.node_names()[0],
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 5,
            "containers": [{"name": "work", "image": "registry.k8s.io/pause:3.10"}]
        }
    }));
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");

    let pod = wait_pod_phase(cluster, &pods, "hangs", &["Failed", "Succeeded"]).await;
    let status = pod.status.clone().unwrap_or_default();
    assert_eq!(status.phase.as_deref(), Some("Failed"), "{status:?}");
    assert_eq!(
        status.reason.as_deref(),
        Some("DeadlineExceeded"),
        "{status:?}"
    );
    assert_eq!(
        exit_codes(&pod),
        vec![137],
        "the kubelet kills the container"
    );
    // The pod's own timestamps show the deadline was honoured, not cut short.
    let started = status.start_time.expect("startTime").0;
    let finished = status
        .container_statuses
        .unwrap_or_default()
        .iter()
        .find_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.clone())
        .expect("finishedAt")
        .0;
    assert!(
        finished.as_second() - started.as_second() >= 5,
        "terminated at {finished}, started at {started}: before the 5s deadline"
    );
}

/// Runs a Job whose only pod gets disrupted (DisruptionTarget=True) and returns the Job's end.
async fn disrupt_first_pod(
    cluster: &Cluster,
    ns: &str,
    name: &str,
    ignore_disruptions: bool,
) -> Job {
    let client = cluster.client().await.expect("client");
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let mut spec = job(name, &cluster.node_names()[1], &PodFate::hang(), 0);
    if ignore_disruptions {
        spec["spec"]["podReplacementPolicy"] = json!("Failed");
        spec["spec"]["podFailurePolicy"] = json!({"rules": [{
            "action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]
        }]});
    }
    jobs.create(&PostParams::default(), &to(spec))
        .await
        .expect("create Job");

    let first = cluster
        .wait_for(
            &format!("the first pod of Job {name} to run"),
            Duration::from_secs(120),
            || async {
                let running = job_pods(cluster, &pods, name).await.into_iter().find(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                });
                Ok(running)
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let first_name = first.metadata.name.clone().expect("pod name");
    // Disrupt the running pod; its replacement (same template) keeps hanging.
    let relabel = json!({"metadata": {"labels": {FATE_LABEL: "disrupt"}}});
    pods.patch(
        &first_name,
        &PatchParams::default(),
        &Patch::Merge(&relabel),
    )
    .await
    .expect("relabel pod");
    let disrupted = wait_pod_phase(cluster, &pods, &first_name, &["Failed"]).await;
    let disruption = disrupted
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
        .map(|c| c.status.clone());
    assert_eq!(
        disruption.as_deref(),
        Some("True"),
        "the pod carries DisruptionTarget=True"
    );

    if !ignore_disruptions {
        return wait_job(
            cluster,
            &jobs,
            name,
            &["Failed", "Complete"],
            Duration::from_secs(120),
        )
        .await
        .0;
    }
    // The replacement appears; let it succeed.
    let second = cluster
        .wait_for(
            &format!("a replacement pod for Job {name}"),
            Duration::from_secs(120),
            || async {
                let job = jobs
                    .get(name)
                    .await
                    .map_err(|e| cluster.kube_error("reading Job".into(), e))?;
                if job_condition(&job, "Failed").is_some() {
                    return Ok(Some(None));
                }
                let other = job_pods(cluster, &pods, name).await.into_iter().find(|p| {
                    p.metadata.name.as_deref() != Some(first_name.as_str())
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                });
                Ok(other.map(Some))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let Some(second) = second else {
        return jobs.get(name).await.expect("read Job");
    };
    let succeed = json!({"metadata": {"labels": {FATE_LABEL: "succeed"}}});
    pods.patch(
        second.metadata.name.as_deref().expect("pod name"),
        &PatchParams::default(),
        &Patch::Merge(&succeed),
    )
    .await
    .expect("relabel replacement");
    wait_job(
        cluster,
        &jobs,
        name,
        &["Failed", "Complete"],
        Duration::from_secs(120),
    )
    .await
    .0
}

#[tokio::test]
async fn pod_failure_policy_ignoring_disruption_spends_no_attempt_on_a_disrupted_pod() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("podFailurePolicy") {
        return;
    }
    let client = cluster.client().await.expect("client");
    let ns = cluster
        .create_namespace("disruption")
        .await
        .expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client, &ns);

    // backoffLimit 0 and a disrupted pod: with the Ignore rule the Job still completes...
    let job = disrupt_first_pod(cluster, &ns, "ignores", true).await;
    assert!(
        job_condition(&job, "Complete").is_some(),
        "the disruption must not fail the Job: {:?}, on {}",
        job.status,
        cluster.describe()
    );
    let status = job.status.clone().unwrap_or_default();
    assert_eq!(
        status.failed.unwrap_or(0),
        0,
        "an ignored failure is not counted: {status:?}"
    );
    assert_eq!(status.succeeded, Some(1));
    assert_eq!(
        job_pods(cluster, &pods, "ignores").await.len(),
        2,
        "the disrupted pod and its replacement"
    );

    // ...and without it the same disruption spends the only attempt (the control case).
    let job = disrupt_first_pod(cluster, &ns, "counts", false).await;
    let failed = job_condition(&job, "Failed");
    assert_eq!(
        failed.map(|(reason, _)| reason).as_deref(),
        Some("BackoffLimitExceeded"),
        "without the rule a disruption counts: {:?}",
        job.status
    );
    assert_eq!(job_pods(cluster, &pods, "counts").await.len(), 1);
}

#[tokio::test]
async fn ttl_after_finished_deletes_a_finished_job_and_its_pods() {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let ns = cluster.create_namespace("ttl").await.expect("namespace");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client, &ns);

    // Watch from before the creation so neither the completion nor the deletion can be missed.
    let params = WatchParams::default()
        .fields("metadata.name=short-lived")
        .timeout(240);
    let mut events = jobs.watch(&params, "0").await.expect("watch Jobs").boxed();
    let mut spec = job(
        "short-lived",
        &cluster.node_names()[2],
        &PodFate::succeed(),
        0,
    );
    spec["spec"]["ttlSecondsAfterFinished"] = json!(2);
    jobs.create(&PostParams::default(), &to(spec))
        .await
        .expect("create Job");

    let mut completed = false;
    let mut deleted = false;
    let watch = async {
        while let Some(event) = events.try_next().await.expect("Job watch") {
            match event {
                WatchEvent::Added(job) | WatchEvent::Modified(job) => {
                    completed |= job_condition(&job, "Complete").is_some();
                }
                WatchEvent::Deleted(job) => {
                    completed |= job_condition(&job, "Complete").is_some();
                    deleted = true;
                    break;
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(e) => panic!("watch error {e:?} on {}", cluster.describe()),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(240), watch)
        .await
        .unwrap_or_else(|_| panic!("the Job was not deleted in 240s, on {}", cluster.describe()));
    assert!(completed, "the Job completed before it was deleted");
    assert!(deleted, "the TTL-after-finished controller deleted the Job");

    // The garbage collector removes the pods the deleted Job owned.
    cluster
        .wait_for(
            "the Job's pods to be garbage-collected",
            Duration::from_secs(120),
            || async {
                Ok(job_pods(cluster, &pods, "short-lived")
                    .await
                    .is_empty()
                    .then_some(()))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn eviction_of_a_pdb_protected_pod_is_refused_with_429() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("PDB eviction") {
        return;
    }
    // No client-side retries: kube retries 429 by default, which would hide the refusal.
    let mut config = cluster.config().await.expect("client config");
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("client");
    let ns = cluster.create_namespace("pdb").await.expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, &ns);
    let fate = PodFate::hang();
    let mut labels: BTreeMap<String, String> = fate.labels();
    labels.insert("app".into(), "guarded".into());
    let pod = |name: &str| -> Pod {
        to(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "nodeName": cluster.node_names()[0],
                "containers": [{"name": "work", "image": "registry.k8s.io/pause:3.10"}]
            }
        }))
    };
    let pdb: PodDisruptionBudget = to(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
    }));
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("create PDB");
    for name in ["guarded-a", "guarded-b"] {
        pods.create(&PostParams::default(), &pod(name))
            .await
            .expect("create pod");
        wait_pod_phase(cluster, &pods, name, &["Running"]).await;
    }
    // The disruption controller's view: `healthy` pods and `allowed` evictions.
    let budget = |healthy: i32, allowed: i32| {
        let pdbs = pdbs.clone();
        move || {
            let pdbs = pdbs.clone();
            async move {
                let pdb = pdbs
                    .get("guard")
                    .await
                    .map_err(|e| cluster.kube_error("reading PDB".into(), e))?;
                let status = pdb.status.unwrap_or_default();
                let reached =
                    status.current_healthy == healthy && status.disruptions_allowed == allowed;
                Ok(reached.then_some(()))
            }
        }
    };
    // Two healthy pods, minAvailable 1: the disruption controller allows one eviction.
    cluster
        .wait_for(
            "the PDB to allow 1 disruption",
            Duration::from_secs(120),
            budget(2, 1),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    pods.evict("guarded-a", &EvictParams::default())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the first eviction is allowed: {e}, on {}",
                cluster.describe()
            )
        });
    cluster
        .wait_for(
            "the evicted pod to be gone",
            Duration::from_secs(120),
            || async {
                let gone = pods
                    .get_opt("guarded-a")
                    .await
                    .map_err(|e| cluster.kube_error("reading pod".into(), e))?;
                Ok(gone.is_none().then_some(()))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // One healthy pod left: the budget is spent and the apiserver refuses with 429.
    cluster
        .wait_for(
            "the PDB to allow 0 disruptions",
            Duration::from_secs(120),
            budget(1, 0),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    match pods.evict("guarded-b", &EvictParams::default()).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 429, "refused as Too Many Requests: {status:?}");
            assert!(
                status.message.contains("disruption budget"),
                "the refusal names the budget: {}",
                status.message
            );
        }
        other => panic!("evicting the last guarded pod must be refused with 429, got {other:?}"),
    }
    assert!(
        pods.get_opt("guarded-b").await.expect("read pod").is_some(),
        "the pod stays"
    );
}

fn nodewright_api(client: kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("nodewright.nvidia.com", "v1alpha1", "NodeWright");
    Api::all_with(
        client,
        &ApiResource::from_gvk_with_plural(&gvk, "nodewrights"),
    )
}

fn nodewright(name: &str, uninstall: serde_json::Value) -> DynamicObject {
    to(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": name},
        "spec": {
            "packages": {
                "foo": {"version": "1.2.3", "image": "ghcr.io/example/foo", "uninstall": uninstall}
            }
        }
    }))
}

#[tokio::test]
async fn crds_install_and_a_nodewright_round_trips_while_cel_rejects_a_bad_one() {
    let cluster = cluster().await;
    cluster
        .install_crds()
        .await
        .unwrap_or_else(|e| panic!("the CRDs in crds/ must install on a real apiserver: {e}"));
    let client = cluster.client().await.expect("client");
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    for name in [
        "nodewrights.nodewright.nvidia.com",
        "deploymentpolicies.nodewright.nvidia.com",
    ] {
        let crd = crds
            .get_opt(name)
            .await
            .expect("read CRD")
            .unwrap_or_else(|| {
                panic!(
                    "CRD {name} is installed from crds/, on {}",
                    cluster.describe()
                )
            });
        assert_eq!(crd.spec.scope, "Cluster", "{name} is cluster-scoped");
    }

    let api = nodewright_api(client);
    let name = format!("e2e-roundtrip-{}", std::process::id());
    let sent = nodewright(&name, json!({"enabled": true, "apply": false}));
    api.create(&PostParams::default(), &sent)
        .await
        .expect("create a valid NodeWright");
    let stored = api.get(&name).await.expect("read it back");
    let package = &stored.data["spec"]["packages"]["foo"];
    assert_eq!(package["version"], "1.2.3", "stored: {}", stored.data);
    assert_eq!(package["image"], "ghcr.io/example/foo");
    assert_eq!(
        package["uninstall"],
        json!({"enabled": true, "apply": false})
    );
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("delete it");

    let bad = nodewright(
        &format!("e2e-bad-{}", std::process::id()),
        json!({"enabled": false, "apply": true}),
    );
    match api.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "rejected as Invalid: {status:?}");
            assert!(
                status.message.contains("uninstall.apply"),
                "the CEL rule's message names uninstall.apply: {}",
                status.message
            );
        }
        other => {
            panic!("uninstall {{enabled: false, apply: true}} must be rejected, got {other:?}")
        }
    }
    let listed = api
        .list(&ListParams::default())
        .await
        .expect("list NodeWrights");
    assert!(
        listed
            .items
            .iter()
            .all(|o| o.metadata.name != bad.metadata.name),
        "the rejected object was not stored"
    );
}

#[tokio::test]
async fn deleting_a_namespace_removes_it_and_its_pods() {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let ns = cluster.create_namespace("doomed").await.expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let fate = PodFate::hang();
    let pod: Pod = to(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "resident", "labels": fate.labels()},
        "spec": {
            "nodeName": cluster.node_names()[0],
            "containers": [{"name": "work", "image": "registry.k8s.io/pause:3.10"}]
        }
    }));
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    if cluster.simulates_pod_fates() {
        wait_pod_phase(cluster, &pods, "resident", &["Running"]).await;
    }
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete namespace");
    // The namespace controller deletes the content (the pod goes through the kubelet-like
    // termination) and then removes the namespace's finalizer.
    cluster
        .wait_for(
            &format!("namespace {ns} to be gone"),
            Duration::from_secs(180),
            || async {
                let found = namespaces
                    .get_opt(&ns)
                    .await
                    .map_err(|e| cluster.kube_error(format!("reading namespace {ns}"), e))?;
                Ok(found.is_none().then_some(()))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
