//! The faults of a chaos trial and the processes they hit: operator replicas (the real binary, so a
//! SIGKILL is a SIGKILL), the local control plane's kube-apiserver (stopped and started again from
//! its own command line, environment and log files) and etcd (SIGSTOP, then SIGCONT), and package
//! pods and Jobs deleted at random. Every random choice comes from one seeded [`Rng`].

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PropagationPolicy};
use nodewright_e2e::limits::{Cgroup, Limits};
use nodewright_e2e::process::peak_rss_kib;
use nodewright_shared::keys;

/// xorshift64*: small, seedable, the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to.saturating_sub(from).max(1)))
    }
}

/// The kinds of fault, in the order of the report's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// SIGKILL the replica holding the Lease while a second one runs (it is replaced).
    KillLeader,
    /// SIGKILL the only replica, start it again after a moment.
    KillSole,
    /// Stop kube-apiserver and start it again.
    RestartApiserver,
    /// SIGSTOP etcd for a few seconds.
    PauseEtcd,
    /// Delete random package pods.
    DeletePods,
    /// Delete random package Jobs.
    DeleteJobs,
}

impl Fault {
    pub const ALL: [Fault; 6] = [
        Fault::KillLeader,
        Fault::KillSole,
        Fault::RestartApiserver,
        Fault::PauseEtcd,
        Fault::DeletePods,
        Fault::DeleteJobs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::KillLeader => "kill-leader",
            Fault::KillSole => "kill-sole",
            Fault::RestartApiserver => "apiserver",
            Fault::PauseEtcd => "etcd-pause",
            Fault::DeletePods => "del-pods",
            Fault::DeleteJobs => "del-jobs",
        }
    }

    /// A fault that fits a trial with `replicas` operator replicas.
    pub fn pick(rng: &mut Rng, replicas: usize) -> Fault {
        let kill = if replicas > 1 {
            Fault::KillLeader
        } else {
            Fault::KillSole
        };
        match rng.below(5) {
            0 => kill,
            1 => Fault::RestartApiserver,
            2 => Fault::PauseEtcd,
            3 => Fault::DeletePods,
            _ => Fault::DeleteJobs,
        }
    }
}

/// The worst a replica's cgroup saw, over every replica of the run (kept when a replica goes).
#[derive(Debug, Default, Clone, Copy)]
pub struct Confinement {
    /// The limits in force (`None` when the machine could not confine the replicas).
    pub limits: Option<Limits>,
    /// Highest memory charged to one replica's cgroup.
    pub peak_bytes: u64,
    /// Replicas killed by the kernel's OOM killer at their limit.
    pub oom_kills: u64,
}

static CONFINEMENT: std::sync::Mutex<Confinement> = std::sync::Mutex::new(Confinement {
    limits: None,
    peak_bytes: 0,
    oom_kills: 0,
});

/// What the replicas' cgroups saw so far.
pub fn confinement() -> Confinement {
    CONFINEMENT.lock().map(|c| *c).unwrap_or_default()
}

/// One operator replica: the real binary, its log in the trial's directory, inside a cgroup with
/// the chart's default limits when the machine allows.
pub struct Replica {
    pub name: String,
    child: Child,
    cgroup: Option<Cgroup>,
}

impl Replica {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and reap it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Peak RSS (VmHWM) in KiB while it runs.
    pub fn peak_rss_kib(&self) -> u64 {
        peak_rss_kib(self.pid())
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let (Some(cgroup), Ok(mut c)) = (&self.cgroup, CONFINEMENT.lock()) {
            let usage = cgroup.usage();
            c.limits = Some(cgroup.limits());
            c.peak_bytes = c.peak_bytes.max(usage.peak_bytes);
            c.oom_kills += usage.oom_kills;
        }
    }
}

/// Starts the operator binary as replica `name` of a trial: leader election on, with short Lease
/// timings so a failover takes seconds (the defaults would make each one cost 15 s); inside a
/// cgroup with `limits` (the chart's defaults) when given and the machine allows.
pub fn spawn_replica(
    kubeconfig: &Path,
    namespace: &str,
    name: &str,
    logs: &Path,
    limits: Option<Limits>,
    max_disrupted: Option<usize>,
) -> Replica {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("{name}.log")))
        .expect("replica log");
    let program = Path::new(env!("CARGO_BIN_EXE_nodewright-operator"));
    let cgroup = limits.and_then(|l| {
        Cgroup::create(
            &format!("chaos-{}-{namespace}-{name}", std::process::id()),
            l,
        )
        .map_err(|e| eprintln!("chaos: replica {name} runs without limits: {e}"))
        .ok()
    });
    let mut command = match &cgroup {
        Some(c) => c.std_command(program),
        None => Command::new(program),
    };
    let child = command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("KUBECONFIG", kubeconfig)
        .env("NAMESPACE", namespace)
        .env("POD_NAME", name)
        .env("LEADER_ELECTION", "true")
        .env("LEASE_DURATION", "4s")
        .env("LEASE_RENEW_DEADLINE", "3s")
        .env("LEASE_RETRY_PERIOD", "500ms")
        .env("METRICS_LISTEN", "127.0.0.1:0")
        .env("PROBE_LISTEN", "127.0.0.1:0")
        .env("LOG_FORMAT", "text")
        .envs(max_disrupted.map(|cap| ("MAX_DISRUPTED_NODES", cap.to_string())))
        .env(
            "LOG_LEVEL",
            std::env::var("NODEWRIGHT_CHAOS_LOG_LEVEL").unwrap_or_else(|_| "info".to_owned()),
        )
        .stdout(Stdio::from(log.try_clone().expect("log clone")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("operator binary starts");
    Replica {
        name: name.to_owned(),
        child,
        cgroup,
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its parent) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_owned()))
        .is_some_and(|r| !r.starts_with('Z'))
}

/// How a control-plane process was started: enough to start it again the same way.
#[derive(Clone)]
struct Launch {
    argv: Vec<String>,
    env: Vec<String>,
    cwd: PathBuf,
    log: Option<PathBuf>,
}

impl Launch {
    fn of(pid: u32) -> Option<Launch> {
        let read = |what: &str| std::fs::read(format!("/proc/{pid}/{what}")).ok();
        let split = |bytes: Vec<u8>| -> Vec<String> {
            bytes
                .split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        };
        let argv = split(read("cmdline")?);
        (!argv.is_empty()).then(|| Launch {
            argv,
            env: read("environ").map(split).unwrap_or_default(),
            cwd: std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_else(|_| "/".into()),
            log: std::fs::read_link(format!("/proc/{pid}/fd/2"))
                .ok()
                .filter(|p| p.is_absolute() && p.is_file()),
        })
    }

    fn spawn(&self) -> u32 {
        let output = || -> Stdio {
            self.log
                .as_ref()
                .and_then(|p| std::fs::OpenOptions::new().append(true).open(p).ok())
                .map_or_else(Stdio::null, Stdio::from)
        };
        let mut command = Command::new(&self.argv[0]);
        command
            .args(&self.argv[1..])
            .env_clear()
            .envs(self.env.iter().filter_map(|kv| kv.split_once('=')))
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(output())
            .stderr(output());
        // Its own process group: it outlives this test process like the original (the cluster's
        // teardown stops it through the pid file).
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command
            .spawn()
            .expect("control-plane component starts again");
        let pid = child.id();
        // Not waited for here: the teardown stops it; a restart in this process reaps nothing.
        std::mem::forget(child);
        pid
    }
}

/// The control plane's components, as kwokctl's binary runtime started them.
const COMPONENTS: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok-controller",
];

/// The control plane's processes, found through kwokctl's pid files, with how each was started.
///
/// kube-controller-manager and kube-scheduler exit when they cannot renew their leader Lease (an
/// apiserver restart, a paused etcd), as they do in every cluster, where the kubelet restarts these
/// static pods. kwokctl's process runtime does not, so [`ControlPlane::supervise`] does: without it
/// the Job controller is gone after the first long apiserver restart and no Job completes again.
pub struct ControlPlane {
    pids: PathBuf,
    launches: Vec<(&'static str, Launch)>,
}

impl ControlPlane {
    pub fn new(cluster_name: &str) -> Self {
        let pids = nodewright_e2e::cache_root()
            .join("kwok/clusters")
            .join(cluster_name)
            .join("pids");
        let mut plane = ControlPlane {
            pids,
            launches: Vec::new(),
        };
        plane.launches = COMPONENTS
            .iter()
            .filter_map(|c| Some((*c, Launch::of(plane.pid(c))?)))
            .collect();
        assert_eq!(
            plane.launches.len(),
            COMPONENTS.len(),
            "cannot read how every control-plane component was started"
        );
        plane
    }

    fn pid(&self, component: &str) -> u32 {
        let file = self.pids.join(format!("{component}.pid"));
        std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {}", file.display()))
    }

    fn start(&self, component: &str) {
        let launch = self
            .launches
            .iter()
            .find(|(c, _)| *c == component)
            .map(|(_, l)| l)
            .expect("known component");
        let pid = launch.spawn();
        std::fs::write(self.pids.join(format!("{component}.pid")), pid.to_string())
            .expect("pid file");
    }

    /// Starts again every component that exited on its own (as the kubelet restarts a static
    /// pod); returns their names. etcd and kube-apiserver are left to the faults that stop them.
    pub fn supervise(&self) -> Vec<&'static str> {
        let mut restarted = Vec::new();
        for (component, _) in &self.launches {
            if matches!(*component, "etcd" | "kube-apiserver") {
                continue;
            }
            if !alive(self.pid(component)) {
                self.start(component);
                restarted.push(*component);
            }
        }
        restarted
    }

    /// Peak RSS (VmHWM, KiB) of a component.
    pub fn peak_rss_kib(&self, component: &str) -> u64 {
        peak_rss_kib(self.pid(component))
    }

    /// SIGSTOP etcd for `pause`, then SIGCONT (also if the caller's future is dropped meanwhile:
    /// the continue is sent from a guard).
    pub async fn pause_etcd(&self, pause: Duration) {
        struct Resume(u32);
        impl Drop for Resume {
            fn drop(&mut self) {
                signal(self.0, "CONT");
            }
        }
        let pid = self.pid("etcd");
        signal(pid, "STOP");
        let _resume = Resume(pid);
        tokio::time::sleep(pause).await;
    }

    /// Stops kube-apiserver (SIGTERM, SIGKILL after 20 s) and starts it again the way it was
    /// started; updates kwokctl's pid file so the cluster's teardown stops the new process.
    /// Returns once it serves again. While it is down its port is free: on a machine where other
    /// clusters are being created at the same time, one of them can take it (seen once in a
    /// 200-node run next to benchmark clusters); the restart then fails naming that cause.
    pub async fn restart_apiserver(&self, client: &kube::Client) {
        let pid = self.pid("kube-apiserver");
        signal(pid, "TERM");
        let stopping = Instant::now();
        while alive(pid) {
            if stopping.elapsed() > Duration::from_secs(20) {
                signal(pid, "KILL");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.start("kube-apiserver");
        let restarted = self.pid("kube-apiserver");
        let nodes: Api<Node> = Api::all(client.clone());
        let started = Instant::now();
        while nodes.list(&ListParams::default().limit(1)).await.is_err() {
            // On a machine shared with other clusters, one being created while this apiserver was
            // down can take its port (kwokctl picks free ports): say so rather than time out.
            assert!(
                alive(restarted),
                "kube-apiserver exited right after its restart: its port was probably taken by \
                 another cluster's process while it was down (see its log)"
            );
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "kube-apiserver did not serve again within 2 minutes"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Deletes up to `n` random package objects (label `nodewright.nvidia.com/name`) of `api`;
/// returns how many.
async fn delete_random<K>(api: Api<K>, rng: &mut Rng, n: u64, params: &DeleteParams) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Ok(list) = api
        .list(&ListParams::default().labels(keys::NAME_LABEL))
        .await
    else {
        return 0;
    };
    let mut items = list.items;
    let mut deleted = 0;
    for _ in 0..n {
        if items.is_empty() {
            break;
        }
        let object = items.swap_remove(rng.below(items.len() as u64) as usize);
        if api.delete(&object.name_any(), params).await.is_ok() {
            deleted += 1;
        }
    }
    deleted
}

/// Deletes up to `n` random package pods of the trial's namespace.
pub async fn delete_pods(client: &kube::Client, namespace: &str, rng: &mut Rng, n: u64) -> usize {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    delete_random(pods, rng, n, &DeleteParams::default()).await
}

/// Deletes up to `n` random package Jobs (with their pods) of the trial's namespace.
pub async fn delete_jobs(client: &kube::Client, namespace: &str, rng: &mut Rng, n: u64) -> usize {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    delete_random(jobs, rng, n, &params).await
}
