//! The operator binary's memory under NodeWright churn, on the local control plane: many clients
//! create, annotate and delete NodeWrights that select no node (the admission load of
//! tests/e2e/tests/rotation/load.rs, without the webhooks), while the operator runs with the
//! chart's default resource limits (rendered by helm, enforced by a cgroup as the kubelet would;
//! unconfined, said so, where this machine has no writable cgroup hierarchy). Its VmRSS / VmHWM are
//! read from /proc at checkpoints of NodeWrights created (each is also deleted), once every
//! NodeWright is gone, and after a quiet period.
//!
//! - `churn_stays_within_the_chart_memory_limit` (CI, about a minute): 64 clients keep ~256
//!   NodeWrights alive through 600 creations. Every edit wakes the NodeWright's pass, so about as
//!   many passes run at once as NodeWrights exist; a pass that holds anything per NodeWright of the
//!   fleet (it once deep-copied them all) makes memory grow with the square of their number, and
//!   the operator is OOM-killed (it reached 740 MiB). Checked: no OOM kill, VmHWM under the limit,
//!   and no series of a deleted NodeWright left on `/metrics`.
//! - `churn_memory_profile` (ignored) is the measuring harness: `NODEWRIGHT_CHURN_TOTAL`
//!   NodeWrights (default 2000) by `NODEWRIGHT_CHURN_CLIENTS` clients (default 64);
//!   `NODEWRIGHT_CHURN_HEAPTRACK=FILE` runs the operator under heaptrack, writing FILE.zst (and
//!   FILE.quiet.zst, a copy taken when the churn is over: its "leaked" figures are what is live);
//!   `NODEWRIGHT_CHURN_UNCONFINED=1` runs it without the chart's limits.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nodewright_e2e::limits::{Cgroup, Limits};
use nodewright_e2e::process::{free_port, status_kib};
use nodewright_e2e::{Cluster, ClusterOptions};
use nodewright_shared::api::NodeWright;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

mod support;

use support::admin_http::{get, wait_leading};

const BOUND: Duration = Duration::from_secs(300);
/// NodeWrights each client keeps alive.
const POOL: usize = 4;
/// The label every churned NodeWright carries (and the list of what is left selects).
const LABEL: &str = "nodewright-e2e/load=churn";

/// The operator's memory, from /proc/<pid>/status.
#[derive(Debug, Clone, Copy, Default)]
struct Memory {
    rss_kib: u64,
    hwm_kib: u64,
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VmRSS {:>6.1} MiB, VmHWM {:>6.1} MiB",
            self.rss_kib as f64 / 1024.0,
            self.hwm_kib as f64 / 1024.0
        )
    }
}

fn memory(pid: u32) -> Option<Memory> {
    Some(Memory {
        rss_kib: status_kib(pid, "VmRSS:")?,
        hwm_kib: status_kib(pid, "VmHWM:")?,
    })
}

/// The pid of the operator process: `child` itself, or under heaptrack (a shell script that starts
/// the program as its child) that child.
fn operator_pid(child: u32) -> Option<u32> {
    let exe = |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    if exe(child).is_some_and(|e| e.ends_with("nodewright-operator")) {
        return Some(child);
    }
    let children = std::fs::read_to_string(format!("/proc/{child}/task/{child}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .find_map(operator_pid)
}

/// The operator container's `resources.limits` in the chart as `helm template` renders it with
/// its default values: what a `helm install` gives the pod.
async fn chart_limits(cluster: &Cluster) -> Limits {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../chart");
    let text = cluster
        .helm(&[
            "template",
            "nw",
            &chart.to_string_lossy(),
            "--show-only",
            "templates/deployment-operator.yaml",
        ])
        .await
        .expect("helm template");
    let deployment: Value = yaml_serde::from_str(&text).expect("the rendered Deployment parses");
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    let operator = containers
        .iter()
        .find(|c| c["name"] == "operator")
        .expect("the operator container");
    Limits::from_resources(&operator["resources"]).expect("the chart's limits")
}

/// The operator binary as the chart runs it (leader election on, JSON logs at info), its output in
/// `log`, inside `cgroup` when given, under heaptrack writing `heaptrack` when given.
fn spawn_operator(
    cluster: &Cluster,
    namespace: &str,
    port: u16,
    log: &Path,
    cgroup: Option<&Cgroup>,
    heaptrack: Option<&Path>,
) -> Child {
    let binary = Path::new(env!("CARGO_BIN_EXE_nodewright-operator"));
    let program = match heaptrack {
        Some(_) => Path::new("heaptrack"),
        None => binary,
    };
    let mut command = match cgroup {
        Some(cgroup) => cgroup.command(program),
        None => Command::new(program),
    };
    if let Some(out) = heaptrack {
        command.arg("-o").arg(out).arg(binary);
    }
    let log = std::fs::File::create(log).expect("operator log");
    command
        .env("KUBECONFIG", cluster.kubeconfig_path())
        .env("NAMESPACE", namespace)
        .env("POD_NAME", "churn-operator")
        .env("LEADER_ELECTION", "true")
        .env("LEASE_NAME", format!("{namespace}-operator"))
        .env("METRICS_LISTEN", format!("127.0.0.1:{port}"))
        .env("PROBE_LISTEN", format!("127.0.0.1:{port}"))
        .env("LOG_FORMAT", "json")
        .env("LOG_LEVEL", "info")
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .expect("operator binary starts")
}

/// One client until `created` reaches `total`: it keeps [`POOL`] NodeWrights; seven operations in
/// eight annotate one of them, one in eight creates a new one and deletes its oldest. At the end
/// it deletes what it still has.
async fn client(
    api: Api<NodeWright>,
    prefix: String,
    id: usize,
    created: Arc<AtomicUsize>,
    total: usize,
) {
    let mut pool: VecDeque<String> = VecDeque::new();
    let mut made = 0usize;
    let mut step = 0usize;
    loop {
        step += 1;
        if pool.len() < POOL || step.is_multiple_of(8) {
            if created.fetch_add(1, Ordering::Relaxed) >= total {
                break;
            }
            let name = format!("{prefix}-{id}-{made}");
            made += 1;
            if api
                .create(
                    &PostParams::default(),
                    &nodewright_e2e::churn::unmatched_nodewright(&name, "churn"),
                )
                .await
                .is_ok()
            {
                pool.push_back(name);
            }
        } else {
            let name = &pool[step % pool.len()];
            let patch =
                json!({"metadata": {"annotations": {"nodewright-e2e/step": step.to_string()}}});
            let _ = api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
        }
        if pool.len() > POOL
            && let Some(oldest) = pool.pop_front()
        {
            let _ = api.delete(&oldest, &DeleteParams::default()).await;
        }
    }
    for name in pool {
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
}

/// What a churn measured.
#[derive(Debug)]
struct Measured {
    /// The chart's memory limit, and whether a cgroup enforced it.
    limit_bytes: u64,
    confined: bool,
    /// Once leading, before any NodeWright.
    idle: Memory,
    /// After each checkpoint of NodeWrights created.
    checkpoints: Vec<(usize, Memory)>,
    /// Once every NodeWright is gone.
    drained: Memory,
    /// 20 s later.
    quiet: Memory,
    /// The kernel's OOM kills in the operator's cgroup.
    oom_kills: u64,
    /// Series naming a NodeWright on `/metrics` once every NodeWright is gone.
    series_left: Vec<String>,
}

/// How a churn runs the operator.
#[derive(Debug, Default)]
struct Run {
    /// Without the chart's limits (to compare with a run where they would kill it).
    unconfined: bool,
    /// Under heaptrack, writing this file.
    heaptrack: Option<PathBuf>,
}

/// Runs the operator binary with the chart's limits and churns `total` NodeWrights through it with
/// `clients` clients, sampling at `checkpoints` (NodeWrights created so far).
async fn churn(total: usize, clients: usize, checkpoints: &[usize], run: Run) -> Measured {
    let Run {
        unconfined,
        heaptrack,
    } = run;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        ..ClusterOptions::default()
    })
    .await
    .expect("local control plane");
    let limits = chart_limits(&cluster).await;
    let limit_bytes = limits.memory_bytes.expect("the chart sets a memory limit");
    let namespace = cluster.create_namespace("churn").await.expect("namespace");
    let cgroup = match Cgroup::create(&format!("churn-{}", std::process::id()), limits) {
        _ if unconfined => None,
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("churn: the operator runs without its limits: {e}");
            None
        }
    };
    eprintln!("churn: the chart's operator limits: {}", limits.describe());
    let port = free_port();
    let logs = std::env::temp_dir().join(format!("{namespace}-operator.log"));
    let mut child = spawn_operator(
        &cluster,
        &namespace,
        port,
        &logs,
        cgroup.as_ref(),
        heaptrack.as_deref(),
    );
    eprintln!("churn: operator log {}", logs.display());
    wait_leading(&cluster, port, BOUND).await;
    let pid = operator_pid(child.id().expect("pid")).expect("operator process");
    let oom = || cgroup.as_ref().map_or(0, |c| c.usage().oom_kills);
    let sample = |child: &mut Child| {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the operator exited ({status}; OOM kills in its cgroup: {}); log: {}",
                oom(),
                logs.display()
            );
        }
        memory(pid).expect("the operator is alive")
    };
    let idle = sample(&mut child);
    eprintln!("churn: leading: {idle}");

    let config = cluster.config().await.expect("config");
    let created = Arc::new(AtomicUsize::new(0));
    let began = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|id| {
            let api =
                Api::<NodeWright>::all(kube::Client::try_from(config.clone()).expect("client"));
            tokio::spawn(client(api, namespace.clone(), id, created.clone(), total))
        })
        .collect();
    let mut measured = Vec::new();
    for &at in checkpoints {
        while created.load(Ordering::Relaxed) < at {
            sample(&mut child);
            assert!(began.elapsed() < BOUND * 4, "the churn did not reach {at}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let m = sample(&mut child);
        eprintln!(
            "churn: {at:>6} created after {:>5.1} s: {m}",
            began.elapsed().as_secs_f64()
        );
        measured.push((at, m));
    }
    for task in tasks {
        task.await.expect("client");
    }
    // Every NodeWright gone: the operator has reconciled every deletion (removed its finalizer).
    let api: Api<NodeWright> = Api::all(cluster.client().await.expect("client"));
    let cluster = &cluster;
    cluster
        .wait_for("every churned NodeWright deleted", BOUND, || {
            let api = api.clone();
            async move {
                let left = api
                    .list_metadata(&ListParams::default().labels(LABEL))
                    .await
                    .map_err(|e| cluster.kube_error("list".into(), e))?;
                Ok(left.items.is_empty().then_some(()))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let drained = sample(&mut child);
    eprintln!(
        "churn: all deleted after {:>5.1} s: {drained}",
        began.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    let quiet = sample(&mut child);
    eprintln!("churn: 20 s later: {quiet}");
    let metrics = get(port, "/metrics")
        .await
        .map(|(_, body)| body)
        .unwrap_or_default();
    let series_left: Vec<String> = metrics
        .lines()
        .filter(|l| l.contains("nodewright_name=\""))
        .map(str::to_owned)
        .collect();
    if let Some(out) = &heaptrack {
        let mut file = out.clone().into_os_string();
        file.push(".zst");
        let mut copy = out.clone().into_os_string();
        copy.push(".quiet.zst");
        let _ = std::fs::copy(&file, &copy);
    }
    // The operator itself (under heaptrack, the script's child), so it stops gracefully and
    // heaptrack writes its last records.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await;
    let _ = tokio::time::timeout(BOUND, child.wait()).await;
    Measured {
        limit_bytes,
        confined: cgroup.is_some(),
        idle,
        checkpoints: measured,
        drained,
        quiet,
        oom_kills: oom(),
        series_left,
    }
}

/// NodeWright churn keeps the operator within the chart's default memory limit, and leaves no
/// series of a deleted NodeWright on `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_stays_within_the_chart_memory_limit() {
    let m = churn(600, 64, &[300, 600], Run::default()).await;
    let peak_kib = [m.drained.hwm_kib, m.quiet.hwm_kib]
        .into_iter()
        .chain(m.checkpoints.iter().map(|(_, c)| c.hwm_kib))
        .max()
        .unwrap_or_default();
    eprintln!(
        "churn: peak VmHWM {:.1} MiB of the chart's {} MiB limit ({}), idle {}",
        peak_kib as f64 / 1024.0,
        m.limit_bytes >> 20,
        if m.confined {
            "enforced by a cgroup"
        } else {
            "not enforced"
        },
        m.idle,
    );
    assert_eq!(m.oom_kills, 0, "the operator was OOM-killed: {m:?}");
    assert!(
        peak_kib * 1024 < m.limit_bytes,
        "the operator's peak RSS is over the chart's memory limit: {m:?}"
    );
    assert!(
        m.series_left.is_empty(),
        "series of deleted NodeWrights are left on /metrics: {:?}",
        m.series_left
    );
}

fn number(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{var}={v:?}: expected a whole number"))
        })
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement (minutes): run with --ignored --nocapture"]
async fn churn_memory_profile() {
    let total = number("NODEWRIGHT_CHURN_TOTAL", 2000);
    let clients = number("NODEWRIGHT_CHURN_CLIENTS", 64);
    let checkpoints: Vec<usize> = [200, 500, 1000, 2000, 4000, 8000, 16000]
        .into_iter()
        .filter(|c| *c < total)
        .chain([total])
        .collect();
    let run = Run {
        unconfined: std::env::var("NODEWRIGHT_CHURN_UNCONFINED").is_ok_and(|v| v == "1"),
        heaptrack: std::env::var_os("NODEWRIGHT_CHURN_HEAPTRACK").map(PathBuf::from),
    };
    let m = churn(total, clients, &checkpoints, run).await;
    eprintln!("churn: {m:#?}");
}
