//! The pod fates of `tests/controlplane/stages/pod.yaml` are the contract the operator's suites
//! build on: each test here creates a pod with one fate and checks the status a kubelet would
//! have written. One shared cluster, one namespace per test.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use nodewright_e2e::{Cluster, ClusterOptions, PodFate};
use serde_json::json;

async fn cluster() -> &'static Cluster {
    // These tests need no CRDs; not installing them keeps this suite independent of crds/.
    Cluster::shared(ClusterOptions {
        install_crds: false,
        ..Default::default()
    })
    .await
    .expect("start the shared test cluster")
}

/// A pod like the operator's package pods: two init containers (copy, apply) and `pause`.
fn pod(name: &str, node: &str, fate: &PodFate, restart_policy: &str, deadline: Option<i64>) -> Pod {
    let mut value = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": fate.labels(), "annotations": fate.annotations()},
        "spec": {
            "nodeName": node,
            "restartPolicy": restart_policy,
            "initContainers": [
                {"name": "copy", "image": "ghcr.io/example/pkg:1.0.0"},
                {"name": "apply", "image": "ghcr.io/example/pkg:1.0.0"}
            ],
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]
        }
    });
    if let Some(seconds) = deadline {
        value["spec"]["activeDeadlineSeconds"] = json!(seconds);
    }
    serde_json::from_value(value).expect("test pod matches the Pod type")
}

/// Creates the pod in a fresh namespace and waits until `done` holds for it.
async fn run_pod(
    cluster: &Cluster,
    pod: Pod,
    what: &str,
    done: impl Fn(&Pod) -> bool,
) -> (Api<Pod>, Pod) {
    let client = cluster.client().await.expect("client");
    let ns = cluster.create_namespace("fate").await.expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let name = pod.metadata.name.clone().expect("pod name");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let done = &done;
    let seen = cluster
        .wait_for(what, Duration::from_secs(120), || {
            let pods = pods.clone();
            let name = name.clone();
            async move {
                let pod = pods
                    .get(&name)
                    .await
                    .map_err(|e| cluster.kube_error(format!("reading pod {name}"), e))?;
                Ok(done(&pod).then_some(pod))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (pods, seen)
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn statuses(pod: &Pod, init: bool) -> &[ContainerStatus] {
    pod.status
        .as_ref()
        .and_then(|s| {
            if init {
                s.init_container_statuses.as_deref()
            } else {
                s.container_statuses.as_deref()
            }
        })
        .unwrap_or(&[])
}

fn status<'a>(pod: &'a Pod, init: bool, name: &str) -> &'a ContainerStatus {
    statuses(pod, init)
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no status for container {name}: {:?}", pod.status))
}

fn terminated_code(c: &ContainerStatus) -> Option<i32> {
    c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code)
}

fn waiting_reason(c: &ContainerStatus) -> Option<&str> {
    c.state.as_ref()?.waiting.as_ref()?.reason.as_deref()
}

fn terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

#[tokio::test]
async fn fail_terminates_the_named_init_container_with_the_exit_code() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("fail (init container)") {
        return;
    }
    let fate = PodFate::fail().exit_code(2).container("apply");
    let p = pod("fails-init", &cluster.node_names()[0], &fate, "Never", None);
    let (_, pod) = run_pod(cluster, p, "the pod to end", terminal).await;
    assert_eq!(phase(&pod), "Failed");
    assert_eq!(
        terminated_code(status(&pod, true, "copy")),
        Some(0),
        "copy completed"
    );
    assert_eq!(
        terminated_code(status(&pod, true, "apply")),
        Some(2),
        "apply failed with 2"
    );
    assert_eq!(
        waiting_reason(status(&pod, false, "pause")),
        Some("PodInitializing"),
        "the main container never started"
    );
}

#[tokio::test]
async fn fail_terminates_the_main_container_with_the_exit_code() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("fail") {
        return;
    }
    let fate = PodFate::fail().exit_code(3).delay("1s");
    let p = pod("fails", &cluster.node_names()[0], &fate, "Never", None);
    let (_, pod) = run_pod(cluster, p, "the pod to end", terminal).await;
    assert_eq!(phase(&pod), "Failed");
    assert_eq!(terminated_code(status(&pod, false, "pause")), Some(3));
}

#[tokio::test]
async fn fail_with_restart_policy_on_failure_is_a_crash_loop() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("fail (crash loop)") {
        return;
    }
    let fate = PodFate::fail().exit_code(4);
    let p = pod(
        "crashes",
        &cluster.node_names()[0],
        &fate,
        "OnFailure",
        None,
    );
    let (_, pod) = run_pod(cluster, p, "two restarts", |pod| {
        statuses(pod, false).iter().any(|c| c.restart_count >= 2)
    })
    .await;
    assert_eq!(phase(&pod), "Running", "a restarting pod is not terminal");
    let pause = status(&pod, false, "pause");
    assert_eq!(waiting_reason(pause), Some("CrashLoopBackOff"));
    let last = pause
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code);
    assert_eq!(last, Some(4), "the last run exited with the chosen code");
}

#[tokio::test]
async fn succeed_after_a_delay() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("succeed") {
        return;
    }
    let fate = PodFate::succeed().delay("2s");
    let p = pod("succeeds", &cluster.node_names()[1], &fate, "Never", None);
    let (_, pod) = run_pod(cluster, p, "the pod to end", terminal).await;
    assert_eq!(phase(&pod), "Succeeded");
    let pause = status(&pod, false, "pause");
    assert_eq!(terminated_code(pause), Some(0));
    // The delay shows in the pod's own timestamps (second granularity).
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .expect("startTime")
        .0;
    let finished = pause
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .and_then(|t| t.finished_at.clone())
        .expect("finishedAt")
        .0;
    assert!(
        finished.as_second() - started.as_second() >= 2,
        "finished {finished}, started {started}"
    );
}

#[tokio::test]
async fn never_start_waits_on_image_pull_back_off_until_the_deadline() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("never-start") {
        return;
    }
    let fate = PodFate::never_start();
    let p = pod(
        "never-starts",
        &cluster.node_names()[1],
        &fate,
        "Never",
        None,
    );
    let (_, pod) = run_pod(cluster, p, "the image pull to back off", |pod| {
        statuses(pod, true)
            .iter()
            .any(|c| waiting_reason(c) == Some("ImagePullBackOff"))
    })
    .await;
    assert_eq!(phase(&pod), "Pending");
    assert_eq!(
        waiting_reason(status(&pod, true, "copy")),
        Some("ImagePullBackOff")
    );
    assert_eq!(
        waiting_reason(status(&pod, false, "pause")),
        Some("PodInitializing")
    );

    let p = pod_with_deadline("never-starts-deadline", cluster, &fate, 3);
    let (_, pod) = run_pod(cluster, p, "the deadline", terminal).await;
    let s = pod.status.clone().unwrap_or_default();
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("DeadlineExceeded"), "{s:?}");
    assert!(
        statuses(&pod, false)
            .iter()
            .all(|c| terminated_code(c).is_none()),
        "no container ever ran, so none has an exit code"
    );
}

fn pod_with_deadline(name: &str, cluster: &Cluster, fate: &PodFate, seconds: i64) -> Pod {
    pod(name, &cluster.node_names()[1], fate, "Never", Some(seconds))
}

#[tokio::test]
async fn reject_fails_the_pod_at_admission_without_container_statuses() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("reject") {
        return;
    }
    let fate = PodFate::reject()
        .reason("NodeAffinity")
        .message("Pod was rejected: node affinity");
    let p = pod("rejected", &cluster.node_names()[2], &fate, "Never", None);
    let (_, pod) = run_pod(cluster, p, "the rejection", terminal).await;
    let s = pod.status.clone().unwrap_or_default();
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("NodeAffinity"));
    assert_eq!(
        s.message.as_deref(),
        Some("Pod was rejected: node affinity")
    );
    assert!(
        s.container_statuses.unwrap_or_default().is_empty(),
        "no container statuses"
    );
    assert!(s.init_container_statuses.unwrap_or_default().is_empty());
    assert!(s.start_time.is_none(), "a rejected pod never started");
}

#[tokio::test]
async fn disrupt_fails_the_pod_with_disruption_target() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("disrupt") {
        return;
    }
    let fate = PodFate::disrupt().delay("1s");
    let p = pod("disrupted", &cluster.node_names()[2], &fate, "Never", None);
    let (_, pod) = run_pod(cluster, p, "the disruption", terminal).await;
    let s = pod.status.clone().unwrap_or_default();
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    let condition = s
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("a DisruptionTarget condition");
    assert_eq!(condition.status, "True");
    assert_eq!(condition.reason.as_deref(), Some("TerminationByKubelet"));
    assert_eq!(terminated_code(status(&pod, false, "pause")), Some(137));
}

#[tokio::test]
async fn reboot_changes_the_boot_id_and_restarts_the_container_once() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("reboot") {
        return;
    }
    let client = cluster.client().await.expect("client");
    let nodes: Api<Node> = Api::all(client);
    // The last node: no other test of this binary uses it.
    let node = cluster
        .node_names()
        .last()
        .expect("at least one node")
        .clone();
    let boot_id = |n: Node| n.status.and_then(|s| s.node_info).map(|i| i.boot_id);
    let before = boot_id(nodes.get(&node).await.expect("read node")).expect("a bootID");
    assert!(!before.is_empty(), "kwok gives every node a boot ID");

    let fate = PodFate::reboot().delay("1s");
    let p = pod("interrupt", &node, &fate, "OnFailure", None);
    let (_, pod) = run_pod(cluster, p, "the interrupt to finish", terminal).await;
    assert_eq!(phase(&pod), "Succeeded");
    let pause = status(&pod, false, "pause");
    assert_eq!(
        pause.restart_count, 1,
        "the container restarted once, after the reboot"
    );
    assert_eq!(terminated_code(pause), Some(0));
    let after = boot_id(nodes.get(&node).await.expect("read node")).expect("a bootID");
    assert_ne!(before, after, "the node rebooted: its bootID changed");
}

#[tokio::test]
async fn deleting_a_running_pod_terminates_it_like_a_kubelet() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("deletion") {
        return;
    }
    let fate = PodFate::hang();
    let p = pod("deleted", &cluster.node_names()[0], &fate, "Never", None);
    let (pods, _) = run_pod(cluster, p, "the pod to run", |pod| phase(pod) == "Running").await;
    pods.delete("deleted", &DeleteParams::default())
        .await
        .expect("delete pod");
    cluster
        .wait_for("the pod to be gone", Duration::from_secs(60), || async {
            let found = pods
                .get_opt("deleted")
                .await
                .map_err(|e| cluster.kube_error("reading pod".into(), e))?;
            Ok(found.is_none().then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn unreachable_leaves_the_pod_terminating_until_its_node_comes_back() {
    let cluster = cluster().await;
    if cluster.skip_without_pod_fates("unreachable") {
        return;
    }
    let client = cluster.client().await.expect("client");
    let ns = cluster.create_namespace("fate").await.expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let node = &cluster.node_names()[0];
    // The unreachable pod first, then a twin on a reachable kubelet: kwok gets the events of both
    // from one watch, so once it has acted on the twin it has seen the unreachable pod too (a sync
    // point, so that "nothing happened" is checked after kwok had the chance to act).
    let lost = pod("lost", node, &PodFate::unreachable(), "OnFailure", None);
    let twin = pod("twin", node, &PodFate::hang(), "OnFailure", None);
    for p in [&lost, &twin] {
        pods.create(&PostParams::default(), p)
            .await
            .expect("create pod");
    }
    let get = |name: &'static str| {
        let pods = pods.clone();
        async move {
            pods.get_opt(name)
                .await
                .map_err(|e| cluster.kube_error(format!("reading pod {name}"), e))
        }
    };
    cluster
        .wait_for("the twin to run", Duration::from_secs(120), || async {
            Ok(get("twin")
                .await?
                .filter(|p| phase(p) == "Running")
                .map(|_| ()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let seen = get("lost").await.expect("read").expect("the pod exists");
    assert_eq!(phase(&seen), "Pending", "{:?}", seen.status);
    assert!(statuses(&seen, true).is_empty() && statuses(&seen, false).is_empty());
    assert!(
        seen.status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_none(),
        "no kubelet ever started it"
    );

    // Deleted (as by the Job controller or an eviction): the twin is terminated and removed; the
    // unreachable pod stays Terminating, not terminal.
    for name in ["lost", "twin"] {
        pods.delete(name, &DeleteParams::default())
            .await
            .expect("delete pod");
    }
    cluster
        .wait_for("the twin to be gone", Duration::from_secs(60), || async {
            Ok(get("twin").await?.is_none().then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stuck = get("lost")
        .await
        .expect("read")
        .expect("the unreachable pod is still there");
    assert!(stuck.metadata.deletion_timestamp.is_some(), "Terminating");
    assert_eq!(
        phase(&stuck),
        "Pending",
        "never terminal: {:?}",
        stuck.status
    );

    // The node comes back (the label goes): the pod is terminated and removed like any other.
    pods.patch(
        "lost",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(
            json!({"metadata": {"labels": {nodewright_e2e::FATE_LABEL: null}}}),
        ),
    )
    .await
    .expect("label removed");
    cluster
        .wait_for(
            "the released pod to be gone",
            Duration::from_secs(60),
            || async { Ok(get("lost").await?.is_none().then_some(())) },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
