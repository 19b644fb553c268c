//! Chaos during a rollout (issue 13, part 1), on the local control plane with the real operator
//! binary: a NodeWright of 3 packages (one with an interrupt) over every kwok node, limited by a
//! DeploymentPolicy budget; while it rolls, faults at points a seeded RNG picks (seed printed, the
//! same seed replays the same choices): SIGKILL of the leader while a second replica runs, SIGKILL
//! and restart of the only replica, a kube-apiserver restart, etcd paused (SIGSTOP) for a few
//! seconds, deleted package pods and Jobs. After each trial, from the test's own watches of nodes
//! and Jobs (`chaos/invariants.rs`):
//!
//! - every node reaches complete (every package at its last stage, complete);
//! - no stage whose outcome was recorded ever gets a second Job;
//! - never more nodes cordoned at once than the budget, nor, in the odd trials (whose replicas run
//!   with the cluster-wide disruption cap `MAX_DISRUPTED_NODES` at half the budget), than the cap;
//! - no node uncordoned before its health gate passed: the policy's gate waits for a node
//!   condition the test's validator sets only once the node waits at its gate, and every version
//!   that uncordons a node carries it True;
//! - no node cordoned at the end;
//! - no recorded outcome is lost (a node's records only move forward; there is no documented clear
//!   in this rollout: no spec change, no reset, REAPPLY_ON_REBOOT off).
//!
//! Every process runs as a `helm install` would run it: the operator replicas and the webhook in
//! cgroups with the chart's default resource limits (an OOM kill is a violation), the webhook in
//! the admission path through the chart's webhook configurations (`failurePolicy: Fail`,
//! `chaos/admission.rs`), so every object the trials create and every update the replicas make to
//! a NodeWright passes through it while the faults hit the control plane.
//!
//! One cluster serves every trial (a new NodeWright, policy and operator namespace each); trial 0
//! runs without faults, for the rollout time without them. `chaos_ci` (5 trials, 30 nodes) runs in
//! `cargo test`; `tests/chaos/run.sh [TRIALS] [NODES]` runs `chaos_long` with a table at the end.

#[path = "chaos/admission.rs"]
mod admission;
#[path = "chaos/faults.rs"]
mod faults;
#[path = "chaos/invariants.rs"]
mod invariants;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use admission::Admission;
use faults::{ControlPlane, Fault, Replica, Rng, spawn_replica};
use invariants::Record;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nodewright_e2e::limits::Limits;
use nodewright_e2e::{Cluster, ClusterOptions};
use nodewright_shared::api::{DeploymentPolicy, NodeWright, Status};
use nodewright_shared::node_state::{NodeState, Stage, State};
use serde_json::json;

/// Nodes a batch (and the budget) allows at once: a third of the fleet (at least 5), so a trial is
/// three batches and every batch boundary (where cordons are released and taken) is exercised.
fn budget(nodes: usize) -> usize {
    (nodes / 3).max(5)
}
/// The cluster-wide disruption cap of the odd trials' replicas: half the budget, so the cap, not
/// the budget, is what bounds their cordons.
fn disruption_cap(index: usize, nodes: usize) -> Option<usize> {
    (index % 2 == 1).then(|| (budget(nodes) / 2).max(1))
}
/// Upper bound of one trial's rollout (a bound, not a timing assertion): far above what a rollout
/// with faults takes, far below the 10-minute idle resync that would hide a stalled operator.
fn rollout_bound(nodes: usize) -> Duration {
    Duration::from_secs(120 + 2 * nodes as u64)
}

/// What one trial found.
struct Trial {
    faults: BTreeMap<Fault, usize>,
    violations: Vec<String>,
    rollout: Duration,
    operator_peak_rss_kib: u64,
}

struct Summary {
    trials: Vec<Trial>,
    apiserver_peak_rss_kib: u64,
    /// The webhook: peak RSS (KiB), its cgroup's limits and figures, restarts after exiting.
    webhook: (u64, Option<(Limits, nodewright_e2e::limits::Usage)>, usize),
    /// Control-plane components the supervisor started again after they exited.
    restarted: BTreeMap<&'static str, usize>,
}

fn packages() -> serde_json::Value {
    json!({
        "base": {"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook/agentless"},
        "tools": {"version": "2.1.0", "image": "ghcr.io/nvidia/skyhook/agentless",
                  "dependsOn": {"base": "1.0.0"}},
        "tuned": {"version": "0.9.1", "image": "ghcr.io/nvidia/skyhook/agentless",
                  "interrupt": {"type": "service", "services": ["tuned"]}},
    })
}

fn sequences() -> BTreeMap<String, Vec<Stage>> {
    let plain = vec![Stage::Apply, Stage::Config];
    let interrupted = vec![
        Stage::Apply,
        Stage::Config,
        Stage::Interrupt,
        Stage::PostInterrupt,
    ];
    BTreeMap::from([
        ("base|1.0.0".to_owned(), plain.clone()),
        ("tools|2.1.0".to_owned(), plain),
        ("tuned|0.9.1".to_owned(), interrupted),
    ])
}

async fn create<K>(client: &kube::Client, value: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(value).expect("object");
    let api = Api::<K>::all(client.clone());
    // Through the webhook; the previous trial's last fault may still be settling.
    let mut last = None;
    for _ in 0..60 {
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("creating {object:?}: {last:?}");
}

/// Waits until a NodeWright passes admission (a server-side dry run through both webhooks).
async fn admission_ready(cluster: &Cluster, webhook: &Mutex<Admission>) {
    let client = cluster.client().await.expect("client");
    let probe: NodeWright = serde_json::from_value(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
        "metadata": {"name": "chaos-admission-probe"},
        "spec": {"packages": packages()},
    }))
    .expect("probe");
    let api = Api::<NodeWright>::all(client);
    let mut last = None;
    for _ in 0..120 {
        match api
            .create(
                &PostParams {
                    dry_run: true,
                    ..PostParams::default()
                },
                &probe,
            )
            .await
        {
            Ok(_) => return,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = webhook.lock().map(|w| w.log()).unwrap_or_default();
    panic!("admission through the webhook never worked: {last:?}\nwebhook log:\n{log}");
}

fn complete(nw: &NodeWright) -> bool {
    nw.status.as_ref().and_then(|s| s.status) == Some(Status::Complete)
}

/// Runs one trial on `cluster`: trial 0 without faults.
async fn trial(
    cluster: &Cluster,
    plane: &ControlPlane,
    index: usize,
    seed: u64,
    nodes: usize,
    limits: Option<Limits>,
) -> Trial {
    let client = cluster.client().await.expect("client");
    let mut rng = Rng::new(seed ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let ns = cluster
        .create_namespace(&format!("chaos{index}"))
        .await
        .expect("namespace");
    let logs = cluster
        .logs_dir()
        .map(|d| d.join(&ns))
        .unwrap_or_else(|| std::env::temp_dir().join(&ns));
    std::fs::create_dir_all(&logs).expect("logs dir");
    let record = Arc::new(Mutex::new(Record::new(&ns, sequences())));
    let mut watches = invariants::watch(&client, &ns, record.clone());
    // The validator the policy's health gate waits for: it passes a node once it waits there.
    watches.push(invariants::validate(&client, &ns));

    let replicas_wanted = if index % 2 == 1 { 1 } else { 2 };
    let mut generation = 0;
    let spawn = |generation: &mut usize| {
        *generation += 1;
        spawn_replica(
            cluster.kubeconfig_path(),
            &ns,
            &format!("op-{generation}"),
            &logs,
            limits,
            disruption_cap(index, nodes),
        )
    };
    let mut replicas: Vec<Replica> = (0..replicas_wanted)
        .map(|_| spawn(&mut generation))
        .collect();

    create::<DeploymentPolicy>(
        &client,
        json!({
            "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
            "metadata": {"name": ns},
            "spec": {"default": {"budget": {"count": budget(nodes)},
                                 "strategy": {"fixed": {"initialBatch": budget(nodes)}}},
                     "healthGates": {"gates": [{"name": "validated", "timeout": "1h",
                                                "nodeCondition": {"type": invariants::VALIDATED}}]}},
        }),
    )
    .await;
    let started = Instant::now();
    create::<NodeWright>(
        &client,
        json!({
            "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
            "metadata": {"name": ns},
            "spec": {"nodeSelectors": {"matchLabels": {"type": "kwok"}},
                     "deploymentPolicy": ns, "packages": packages()},
        }),
    )
    .await;
    let nws: Api<NodeWright> = Api::all(client.clone());

    // Faults at random offsets over the expected rollout, one after the other, while it runs.
    let mut faults: BTreeMap<Fault, usize> = BTreeMap::new();
    if index > 0 {
        let count = 3 + rng.below(2);
        // Over about the rollout time without faults (~1 s per node here).
        let window_ms = 800 * nodes as u64;
        let mut at: Vec<Duration> = (0..count).map(|_| rng.millis(500, window_ms)).collect();
        at.sort();
        for offset in at {
            if let Some(wait) = offset.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
            if nws.get(&ns).await.is_ok_and(|nw| complete(&nw)) {
                break;
            }
            let fault = Fault::pick(&mut rng, replicas.len());
            eprintln!(
                "trial {index}: {} at {:.1}s",
                fault.name(),
                started.elapsed().as_secs_f64()
            );
            match fault {
                Fault::KillLeader => {
                    let holder = nodewright_e2e::lease::operator_leader(&client, &ns).await;
                    let victim = replicas
                        .iter()
                        .position(|r| Some(&r.name) == holder.as_ref())
                        .unwrap_or(0);
                    replicas.remove(victim).kill();
                    replicas.push(spawn(&mut generation));
                }
                Fault::KillSole => {
                    if let Some(r) = replicas.pop() {
                        r.kill();
                    }
                    tokio::time::sleep(rng.millis(200, 3_000)).await;
                    replicas.push(spawn(&mut generation));
                }
                Fault::RestartApiserver => plane.restart_apiserver(&client).await,
                Fault::PauseEtcd => plane.pause_etcd(rng.millis(1_000, 5_000)).await,
                Fault::DeletePods => {
                    let n = 1 + rng.below(5);
                    faults::delete_pods(&client, &ns, &mut rng, n).await;
                }
                Fault::DeleteJobs => {
                    let n = 1 + rng.below(5);
                    faults::delete_jobs(&client, &ns, &mut rng, n).await;
                }
            }
            *faults.entry(fault).or_default() += 1;
        }
    }

    // Every node reaches complete.
    let mut violations = Vec::new();
    let done = cluster
        .wait_for(
            &format!("NodeWright {ns} complete"),
            rollout_bound(nodes),
            || {
                let nws = nws.clone();
                let ns = ns.clone();
                async move { Ok(nws.get(&ns).await.ok().filter(complete)) }
            },
        )
        .await;
    let rollout = started.elapsed();
    if let Err(e) = done {
        violations.push(format!("the rollout did not complete: {e}"));
    }
    let all_nodes = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("nodes")
        .items;
    for node in all_nodes
        .iter()
        .filter(|n| n.labels().get("type").map(String::as_str) == Some("kwok"))
    {
        let name = node.name_any();
        let state = node
            .annotations()
            .get(&nodewright_shared::keys::node_state_key(&ns))
            .map(|t| NodeState::parse(t));
        for (key, sequence) in sequences() {
            let (pkg, version) = key.split_once('|').expect("key");
            let last = sequence.last().copied().expect("stages");
            let ok = matches!(&state, Some(Ok(s)) if s.get(pkg, version)
                .is_some_and(|r| r.stage == last && r.state == Some(State::Complete)));
            if !ok {
                violations.push(format!("{name}: {key} not complete at the end"));
            }
        }
    }
    // No node cordoned at the end, as the API lists them.
    let listed_cordoned: BTreeSet<String> = all_nodes
        .iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
        .map(ResourceExt::name_any)
        .collect();
    for node in &listed_cordoned {
        violations.push(format!("{node} still cordoned at the end"));
    }
    // The test's own node watch (the budget, cap and gate invariants are judged on what it saw)
    // must come to agree with that list: a watch a fault broke resumes with backoff, and under
    // load it can trail the API by many seconds (once it still showed the first batch cordoned
    // a second after the list showed every node released). Waited for, not assumed; a watch that
    // never catches up (a watch request ends within 290 s) is a violation.
    let caught_up = cluster
        .wait_for(
            "the test's node watch to agree with the nodes as listed",
            Duration::from_secs(300),
            || {
                let record = record.clone();
                let listed = listed_cordoned.clone();
                async move {
                    Ok(record
                        .lock()
                        .ok()
                        .filter(|r| *r.cordoned() == listed)
                        .map(|_| ()))
                }
            },
        )
        .await;
    if let Err(e) = caught_up {
        violations.push(format!("the node watch never caught up with the API: {e}"));
    }
    let operator_peak_rss_kib = replicas
        .iter()
        .map(Replica::peak_rss_kib)
        .max()
        .unwrap_or(0);
    {
        let mut r = record.lock().expect("record");
        if r.max_cordoned > budget(nodes) {
            violations.push(format!(
                "{} nodes cordoned at once, the budget is {}",
                r.max_cordoned,
                budget(nodes)
            ));
        }
        if let Some(cap) = disruption_cap(index, nodes)
            && r.max_cordoned > cap
        {
            violations.push(format!(
                "{} nodes cordoned at once, the cluster-wide disruption cap is {cap}",
                r.max_cordoned
            ));
        }
        violations.extend(r.finish());
    }

    // Clean up while the operator still runs (its finalizer releases the NodeWright).
    let _ = nws.delete(&ns, &DeleteParams::default()).await;
    let _ = cluster
        .wait_deleted(&nws, &ns, Duration::from_secs(120))
        .await;
    for w in watches {
        w.abort();
    }
    for r in replicas {
        r.kill();
    }
    // A node left cordoned would bias the next trial: uncordon (it was reported above).
    for node in all_nodes
        .iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
    {
        let _ = Api::<Node>::all(client.clone())
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": null}})),
            )
            .await;
    }
    eprintln!(
        "trial {index}: {:?} faults, {} violation(s), rollout {:.1}s{}",
        faults.values().sum::<usize>(),
        violations.len(),
        rollout.as_secs_f64(),
        if violations.is_empty() {
            String::new()
        } else {
            format!(
                " (replica logs: {})\n  {}",
                logs.display(),
                violations.join("\n  ")
            )
        }
    );
    Trial {
        faults,
        violations,
        rollout,
        operator_peak_rss_kib,
    }
}

async fn run(trials: usize, nodes: usize, seed: u64) -> Summary {
    eprintln!(
        "chaos: {trials} trial(s) with faults + 1 without, {nodes} nodes, seed {seed} (NODEWRIGHT_CHAOS_SEED={seed} replays it)"
    );
    let cluster = Cluster::start(ClusterOptions {
        nodes: nodes as u32,
        ..ClusterOptions::default()
    })
    .await
    .expect("local control plane starts");
    // The faults stop components (the apiserver restart, and the controller manager, scheduler and
    // kwok exiting when it is gone), freeing their ports until they start again; a cluster another
    // suite creates meanwhile would take them (nodewright_e2e::ports). No cluster is created on
    // the machine while the trials run; released before this cluster is torn down.
    let creation_lock = nodewright_e2e::ports::hold_cluster_creation()
        .await
        .expect("the cluster creation lock");
    // Every replica runs under the chart's default resource limits, as a `helm install` would run
    // its pod.
    let limits = match nodewright_e2e::limits::chart_defaults(&cluster, "operator").await {
        Ok(l) => Some(l),
        Err(e) => {
            eprintln!("chaos: replicas run without limits: {e}");
            None
        }
    };
    let plane = Arc::new(ControlPlane::new(cluster.name()));
    let webhook_dir = cluster
        .logs_dir()
        .map(|d| d.join("webhook"))
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("chaos-webhook-{}", std::process::id()))
        });
    let webhook = Arc::new(Mutex::new(Admission::start(&cluster, &webhook_dir).await));
    admission_ready(&cluster, &webhook).await;
    let restarted: Arc<Mutex<BTreeMap<&'static str, usize>>> = Arc::default();
    let supervisor = {
        let (plane, restarted, webhook) = (plane.clone(), restarted.clone(), webhook.clone());
        tokio::spawn(async move {
            loop {
                for component in plane.supervise() {
                    eprintln!("chaos: {component} had exited; started again (as a kubelet would)");
                    if let Ok(mut r) = restarted.lock() {
                        *r.entry(component).or_default() += 1;
                    }
                }
                if let Ok(mut w) = webhook.lock() {
                    w.supervise();
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let mut out = Vec::new();
    for index in 0..=trials {
        out.push(trial(&cluster, &plane, index, seed, nodes, limits).await);
    }
    supervisor.abort();
    drop(creation_lock);
    let webhook = {
        let mut w = webhook.lock().expect("webhook");
        let (peak, confined) = w.usage();
        (peak, confined, w.restarts)
    };
    let apiserver_peak_rss_kib = plane.peak_rss_kib("kube-apiserver");
    let restarted = restarted.lock().map(|r| r.clone()).unwrap_or_default();
    Summary {
        trials: out,
        apiserver_peak_rss_kib,
        webhook,
        restarted,
    }
}

fn table(summary: &Summary, nodes: usize) -> String {
    let (baseline, faulted) = summary.trials.split_first().expect("a baseline trial");
    let mut totals: BTreeMap<Fault, usize> = BTreeMap::new();
    for t in faulted {
        for (f, n) in &t.faults {
            *totals.entry(*f).or_default() += n;
        }
    }
    let violations: usize = summary.trials.iter().map(|t| t.violations.len()).sum();
    let secs: Vec<f64> = faulted.iter().map(|t| t.rollout.as_secs_f64()).collect();
    let mean = secs.iter().sum::<f64>() / secs.len().max(1) as f64;
    let max = secs.iter().copied().fold(0.0, f64::max);
    let mut header = format!("{:>6} {:>5}", "trials", "nodes");
    let mut row = format!("{:>6} {:>5}", faulted.len(), nodes);
    for f in Fault::ALL {
        header.push_str(&format!(" {:>11}", f.name()));
        row.push_str(&format!(" {:>11}", totals.get(&f).copied().unwrap_or(0)));
    }
    header.push_str(&format!(
        " {:>10} {:>14} {:>13} {:>11}",
        "violations", "faulted s avg", "faulted s max", "no faults s"
    ));
    row.push_str(&format!(
        " {:>10} {:>14.1} {:>13.1} {:>11.1}",
        violations,
        mean,
        max,
        baseline.rollout.as_secs_f64()
    ));
    let rss = summary
        .trials
        .iter()
        .map(|t| t.operator_peak_rss_kib)
        .max()
        .unwrap_or(0);
    let confined = faults::confinement();
    let limit = match confined.limits {
        Some(l) => format!(
            "operator replicas under the chart's default limits ({}): {}, OOM kills {}",
            l.describe(),
            l.peak(confined.peak_bytes),
            confined.oom_kills
        ),
        None => "operator replicas not confined (no writable cgroups here)".to_owned(),
    };
    let (webhook_rss, webhook_confined, webhook_restarts) = &summary.webhook;
    let webhook = match webhook_confined {
        Some((l, u)) => format!(
            "webhook (admission path, failurePolicy Fail) under the chart's default limits ({}): peak RSS {:.1} MiB, {}, OOM kills {}, restarts {webhook_restarts}",
            l.describe(),
            *webhook_rss as f64 / 1024.0,
            l.peak(u.peak_bytes),
            u.oom_kills
        ),
        None => format!(
            "webhook (admission path) not confined: peak RSS {:.1} MiB, restarts {webhook_restarts}",
            *webhook_rss as f64 / 1024.0
        ),
    };
    format!(
        "{header}\n{row}\noperator peak RSS {} MiB, kube-apiserver peak RSS {} MiB; components restarted after exiting: {:?}\n{limit}\n{webhook}\n",
        rss / 1024,
        summary.apiserver_peak_rss_kib / 1024,
        summary.restarted
    )
}

fn env_number(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    env_number(
        "NODEWRIGHT_CHAOS_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1),
    )
}

async fn run_and_report(trials: usize, nodes: usize) {
    // The faults stop and start the local control plane's own processes.
    if std::env::var_os("NODEWRIGHT_E2E_KUBECONFIG").is_some() {
        nodewright_e2e::skip::skip(
            "chaos",
            "needs the local control plane (NODEWRIGHT_E2E_KUBECONFIG is set)",
        );
        return;
    }
    let summary = run(trials, nodes, seed()).await;
    let table = table(&summary, nodes);
    println!("{table}");
    eprintln!("{table}");
    let mut violations: Vec<&String> = summary.trials.iter().flat_map(|t| &t.violations).collect();
    let oom = format!(
        "{} operator replica(s) OOM-killed at the chart's memory limit",
        faults::confinement().oom_kills
    );
    if faults::confinement().oom_kills > 0 {
        violations.push(&oom);
    }
    let webhook_oom = format!(
        "the webhook was OOM-killed {} time(s) at the chart's memory limit",
        summary.webhook.1.map(|(_, u)| u.oom_kills).unwrap_or(0)
    );
    if summary.webhook.1.is_some_and(|(_, u)| u.oom_kills > 0) {
        violations.push(&webhook_oom);
    }
    assert!(
        violations.is_empty(),
        "{} invariant violation(s):\n{}",
        violations.len(),
        violations
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The CI variant: 3 trials with faults over 30 nodes, one cluster (5 took 325 s of a fresh-clone
/// CI run that must stay within 70 minutes; the long run covers many more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_ci() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    run_and_report(3, 30).await;
}

/// The long run (`tests/chaos/run.sh`): NODEWRIGHT_CHAOS_TRIALS (20) trials over
/// NODEWRIGHT_CHAOS_NODES (200) nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run by tests/chaos/run.sh"]
async fn chaos_long() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let trials = env_number("NODEWRIGHT_CHAOS_TRIALS", 20) as usize;
    let nodes = env_number("NODEWRIGHT_CHAOS_NODES", 200) as usize;
    run_and_report(trials, nodes).await;
}
