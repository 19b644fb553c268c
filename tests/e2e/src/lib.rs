//! Test fixture: a real Kubernetes control plane for NodeWright's end-to-end suites.
//!
//! [`Cluster::start`] runs `tests/controlplane/up.sh`, which starts etcd, kube-apiserver,
//! kube-controller-manager (Job, TTL-after-finished, garbage-collector, disruption, namespace
//! controllers, ...), kube-scheduler and kwok with N fake nodes, all built from their upstream Go
//! modules by `tests/controlplane/build.sh` (run on first use, so a plain `cargo test` works on a
//! fresh machine, slowly the first time). The cluster is torn down when the [`Cluster`] is
//! dropped, also while a failing test unwinds; a cluster held in a `static` (see
//! [`Cluster::shared`]) is torn down by a watcher process when the test binary exits, however it
//! exits. Every component's log stays in [`Cluster::logs_dir`], and every error of this crate
//! names that directory.
//!
//! Pods on the fake nodes do what their labels and annotations ask ([`PodFate`]): succeed, fail
//! with an exit code, hang until their deadline, never start, be rejected at admission, be
//! disrupted, live through a simulated reboot, or sit on an unreachable node. See `tests/README.md`.
//!
//! With `NODEWRIGHT_E2E_KUBECONFIG` set, the fixture uses that cluster instead of starting one
//! ([`ENV_EXTERNAL_KUBECONFIG`]); pod fates are then available only if that cluster runs kwok
//! with `tests/controlplane/stages/` ([`ENV_EXTERNAL_KWOK`]).

pub mod binaries;
pub mod chart;
pub mod churn;
pub mod lease;
pub mod limits;
pub mod ports;
pub mod process;
pub mod skip;

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Path of a kubeconfig for an existing cluster. When set, [`Cluster::start`] and
/// [`Cluster::shared`] use that cluster (its current context) instead of starting one, and never
/// stop it.
pub const ENV_EXTERNAL_KUBECONFIG: &str = "NODEWRIGHT_E2E_KUBECONFIG";

/// Set to `1` when the external cluster runs kwok with the Stages in `tests/controlplane/stages/`
/// applied (see `tests/README.md`); only then do tests that need [`PodFate`]s run against it.
pub const ENV_EXTERNAL_KWOK: &str = "NODEWRIGHT_E2E_KWOK";

/// Name of a node of the external cluster that runs real containers (what
/// [`ClusterOptions::real_node`] starts locally), for the suites that need one.
pub const ENV_EXTERNAL_REAL_NODE: &str = "NODEWRIGHT_E2E_REAL_NODE";

/// Directory of the test images built by `tests/images/build.sh` (its last output line exports
/// it). The real-node suites run only when it is set (tests/run-all.sh sets it); without it they
/// say so and pass, so a plain `cargo test` needs neither root nor the images.
pub const ENV_IMAGES_DIR: &str = "NODEWRIGHT_IMAGES_DIR";

/// Label that selects a pod's fate on the fake nodes (value: a [`Fate`]).
pub const FATE_LABEL: &str = "nodewright.test/fate";
/// Annotation: Go duration (`"2s"`) or RFC 3339 time before the fate happens.
pub const DELAY_ANNOTATION: &str = "nodewright.test/delay";
/// Annotation: exit code of the failing container (`fail`), default `"1"`.
pub const EXIT_CODE_ANNOTATION: &str = "nodewright.test/exit-code";
/// Annotation: which container fails (`fail`) or waits for its image (`never-start`).
pub const CONTAINER_ANNOTATION: &str = "nodewright.test/container";
/// Annotation: the reason (`fail`: container reason; `reject`: pod reason, default `OutOfcpu`;
/// `never-start`: waiting reason; `disrupt`: the DisruptionTarget condition's reason).
pub const REASON_ANNOTATION: &str = "nodewright.test/reason";
/// Annotation: the message that goes with [`REASON_ANNOTATION`].
pub const MESSAGE_ANNOTATION: &str = "nodewright.test/message";

/// Default number of fake nodes.
pub const DEFAULT_NODES: u32 = 3;

/// Everything that can go wrong while starting, using or stopping a test cluster. Each variant
/// that concerns a running cluster carries where its logs are, because that is the first thing
/// a person reading a failed test needs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A script under `tests/controlplane` failed.
    #[error("{script} failed ({status}); component logs: {logs}; last output:\n{output}")]
    Script {
        script: String,
        status: String,
        output: String,
        logs: String,
    },
    /// A local command (script, kubectl, helm) could not be run at all.
    #[error("could not run {command}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// A command ran and failed.
    #[error("`{command}` failed ({status}): {stderr}; cluster logs: {logs}")]
    Command {
        command: String,
        status: String,
        stderr: String,
        logs: String,
    },
    /// up.sh printed something the fixture does not understand.
    #[error("unexpected output from up.sh (no `export KUBECONFIG=` line): {0}")]
    UpOutput(String),
    /// The kubeconfig could not be read or turned into a client configuration.
    #[error("kubeconfig {path}: {message}; cluster logs: {logs}")]
    Kubeconfig {
        path: String,
        message: String,
        logs: String,
    },
    /// A Kubernetes API call failed.
    #[error("{context}: {source}; cluster logs: {logs}")]
    Kube {
        context: String,
        #[source]
        source: kube::Error,
        logs: String,
    },
    /// A condition a test or the fixture waited for did not come true in time.
    #[error(
        "timed out after {timeout:?} waiting for {what}; last seen: {last}; cluster logs: {logs}"
    )]
    Timeout {
        what: String,
        timeout: Duration,
        last: String,
        logs: String,
    },
    /// A CRD file of the repository could not be read or parsed.
    #[error("CRD file {path}: {message}")]
    Crd { path: String, message: String },
    /// The shared cluster failed to start earlier in this test binary.
    #[error("the shared cluster of this test binary failed to start: {0}")]
    SharedStart(String),
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a pod on a fake node does, chosen by [`FATE_LABEL`]. The kwok Stages implementing each
/// one are in `tests/controlplane/stages/pod.yaml`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Running, then Succeeded (containers exit 0) after the delay.
    Succeed,
    /// Running, then Failed with the exit code (restartPolicy Never), or a crash loop with
    /// restartCount going up (OnFailure/Always).
    Fail,
    /// Running until `activeDeadlineSeconds` passes, then Failed with reason DeadlineExceeded.
    Hang,
    /// Pending with a container waiting on ImagePullBackOff; deadline as for [`Fate::Hang`].
    NeverStart,
    /// Failed by kubelet admission (reason OutOfcpu by default), no container statuses.
    Reject,
    /// Failed with condition DisruptionTarget=True (kubelet eviction) after the delay.
    Disrupt,
    /// The node reboots (its bootID changes), the containers restart once, then Succeeded.
    Reboot,
    /// The node never answers: nothing changes the pod (Pending, no statuses), and once deleted it
    /// stays Terminating, never terminal. Removing the label lets it terminate.
    Unreachable,
}

impl Fate {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Fate::Succeed => "succeed",
            Fate::Fail => "fail",
            Fate::Hang => "hang",
            Fate::NeverStart => "never-start",
            Fate::Reject => "reject",
            Fate::Disrupt => "disrupt",
            Fate::Reboot => "reboot",
            Fate::Unreachable => "unreachable",
        }
    }
}

/// A pod fate with its parameters, to put on a pod or a pod template's metadata.
///
/// ```
/// use nodewright_e2e::PodFate;
/// let mut meta = Default::default();
/// PodFate::fail().exit_code(2).delay("1s").apply(&mut meta);
/// assert_eq!(meta.labels.unwrap()["nodewright.test/fate"], "fail");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFate {
    fate: Fate,
    annotations: BTreeMap<String, String>,
}

impl PodFate {
    /// A fate without parameters.
    pub fn new(fate: Fate) -> Self {
        Self {
            fate,
            annotations: BTreeMap::new(),
        }
    }
    pub fn succeed() -> Self {
        Self::new(Fate::Succeed)
    }
    pub fn fail() -> Self {
        Self::new(Fate::Fail)
    }
    pub fn hang() -> Self {
        Self::new(Fate::Hang)
    }
    pub fn never_start() -> Self {
        Self::new(Fate::NeverStart)
    }
    pub fn reject() -> Self {
        Self::new(Fate::Reject)
    }
    pub fn disrupt() -> Self {
        Self::new(Fate::Disrupt)
    }
    pub fn reboot() -> Self {
        Self::new(Fate::Reboot)
    }
    pub fn unreachable() -> Self {
        Self::new(Fate::Unreachable)
    }

    fn with(mut self, key: &str, value: String) -> Self {
        self.annotations.insert(key.to_string(), value);
        self
    }
    /// Time before the fate happens: a Go duration such as `"2s"`.
    pub fn delay(self, delay: &str) -> Self {
        self.with(DELAY_ANNOTATION, delay.to_string())
    }
    /// Exit code of the failing container.
    pub fn exit_code(self, code: i32) -> Self {
        self.with(EXIT_CODE_ANNOTATION, code.to_string())
    }
    /// The container that fails or waits for its image.
    pub fn container(self, name: &str) -> Self {
        self.with(CONTAINER_ANNOTATION, name.to_string())
    }
    /// The reason reported (see [`REASON_ANNOTATION`]).
    pub fn reason(self, reason: &str) -> Self {
        self.with(REASON_ANNOTATION, reason.to_string())
    }
    /// The message reported with the reason.
    pub fn message(self, message: &str) -> Self {
        self.with(MESSAGE_ANNOTATION, message.to_string())
    }

    /// The fate.
    pub fn fate(&self) -> Fate {
        self.fate
    }
    /// The label to set.
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(FATE_LABEL.to_string(), self.fate.as_str().to_string())])
    }
    /// The annotations to set.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.annotations.clone()
    }
    /// Adds the label and annotations to `meta` (a pod's or a pod template's).
    pub fn apply(&self, meta: &mut ObjectMeta) {
        meta.labels
            .get_or_insert_with(Default::default)
            .extend(self.labels());
        meta.annotations
            .get_or_insert_with(Default::default)
            .extend(self.annotations());
    }
}

/// How to start a local cluster.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Number of fake nodes (`kwok-node-0` ..). The machine copes with hundreds.
    pub nodes: u32,
    /// Cluster name; default `nw-e2e-<pid>-<n>`, unique per process, so clusters can coexist.
    pub name: Option<String>,
    /// How long up.sh may wait for readiness (not counting a first build of the binaries).
    pub timeout: Duration,
    /// Install `crds/*.yaml` while starting (default). A suite that tests the CRDs themselves
    /// turns this off and calls [`Cluster::install_crds`], so a broken CRD fails that test
    /// only, not the start of every test that shares the cluster.
    pub install_crds: bool,
    /// Also start the machine's one real node (`up.sh --real-node`): a kubelet with containerd
    /// running real containers, named by [`Cluster::real_node`]. Needs root; the test images are
    /// imported into it from `NODEWRIGHT_IMAGES_DIR` (tests/images/build.sh). A second cluster
    /// asking for it waits until the first one's is torn down.
    pub real_node: bool,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            nodes: DEFAULT_NODES,
            name: None,
            timeout: Duration::from_secs(300),
            install_crds: true,
            real_node: false,
        }
    }
}

/// A running cluster: local (started by this fixture, stopped when dropped) or external.
#[derive(Debug)]
pub struct Cluster {
    name: String,
    kubeconfig: PathBuf,
    logs_dir: Option<PathBuf>,
    bin_dir: Option<PathBuf>,
    nodes: Vec<String>,
    real_node: Option<String>,
    real_node_host_dir: Option<PathBuf>,
    real_node_dir: Option<PathBuf>,
    pod_fates: bool,
    /// Whether dropping this value stops the cluster (local clusters not held in a static).
    teardown: bool,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);
static SHARED: tokio::sync::OnceCell<std::result::Result<Cluster, String>> =
    tokio::sync::OnceCell::const_new();
static LIVE_LOGS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static PANIC_HOOK: OnceLock<()> = OnceLock::new();

fn controlplane_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../controlplane")
}

pub(crate) fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Mirrors `cp_logs_dir` in tests/controlplane/lib.sh, so errors can name the directory even
/// when up.sh fails before printing it.
fn expected_logs_dir(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("NODEWRIGHT_LOGS") {
        return PathBuf::from(dir).join(name);
    }
    cache_root().join("logs").join(name)
}

/// Mirrors `cp_cache_root` in tests/controlplane/lib.sh: where the control plane's binaries,
/// clusters and logs live.
pub fn cache_root() -> PathBuf {
    std::env::var_os("NODEWRIGHT_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/nodewright")))
        .unwrap_or_else(|| PathBuf::from("/tmp/nodewright-cache"))
}

/// Prints the logs directory of every live cluster when a test panics, after the panic message,
/// so a failed assertion always points at the component logs.
fn install_panic_hook() {
    PANIC_HOOK.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            let dirs = LIVE_LOGS.lock().unwrap_or_else(|e| e.into_inner());
            for dir in dirs.iter() {
                eprintln!(
                    "nodewright-e2e: component logs of the test cluster: {}",
                    dir.display()
                );
            }
        }));
    });
}

fn install_crypto_provider() {
    // Only one provider may be installed per process; a second call returns Err, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Cluster {
    /// Starts a local cluster (or attaches to the external one, see [`ENV_EXTERNAL_KUBECONFIG`]).
    /// Builds the binaries first if this machine has none for the pinned versions.
    pub async fn start(options: ClusterOptions) -> Result<Cluster> {
        install_crypto_provider();
        if let Some(path) = std::env::var_os(ENV_EXTERNAL_KUBECONFIG) {
            return Self::external(PathBuf::from(path), &options).await;
        }
        install_panic_hook();
        let name = options.name.clone().unwrap_or_else(|| {
            format!(
                "nw-e2e-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            )
        });
        let expected_logs = expected_logs_dir(&name);
        let script = controlplane_dir().join("up.sh");
        let mut command = tokio::process::Command::new(&script);
        if !options.install_crds {
            command.arg("--no-crds");
        }
        if options.real_node {
            command.arg("--real-node");
        }
        command
            .arg("--name")
            .arg(&name)
            .arg("--nodes")
            .arg(options.nodes.to_string())
            .arg("--owner-pid")
            .arg(std::process::id().to_string())
            .arg("--timeout")
            .arg(options.timeout.as_secs().max(1).to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|source| Error::Spawn {
            command: script.display().to_string(),
            source,
        })?;
        // Progress (and a first build's output, which takes many minutes) is shown live on the
        // process's stderr, past the test harness's capture, and its tail kept for the error.
        let progress = child.stderr.take().map(|stderr| {
            tokio::spawn(async move {
                use tokio::io::AsyncBufReadExt;
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                let mut kept: Vec<String> = Vec::new();
                while let Ok(Some(line)) = lines.next_line().await {
                    let _ = writeln!(std::io::stderr(), "{line}");
                    kept.push(line);
                    if kept.len() > 40 {
                        kept.remove(0);
                    }
                }
                kept.join("\n")
            })
        });
        let output = child
            .wait_with_output()
            .await
            .map_err(|source| Error::Spawn {
                command: script.display().to_string(),
                source,
            })?;
        let stderr_tail = match progress {
            Some(task) => task.await.unwrap_or_default(),
            None => String::new(),
        };
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            return Err(Error::Script {
                script: "tests/controlplane/up.sh".into(),
                status: output.status.to_string(),
                output: stderr_tail,
                logs: expected_logs.display().to_string(),
            });
        }
        let mut kubeconfig = None;
        let mut logs_dir = None;
        let mut bin_dir = None;
        let mut real_node = None;
        let mut real_node_host_dir = None;
        let mut real_node_dir = None;
        for line in stdout.lines() {
            if let Some(node) = line.strip_prefix("export NODEWRIGHT_REAL_NODE=") {
                real_node = Some(node.trim().to_owned());
            } else if let Some(dir) = line.strip_prefix("export NODEWRIGHT_REAL_NODE_HOST_DIR=") {
                real_node_host_dir = Some(PathBuf::from(dir.trim()));
            } else if let Some(dir) = line.strip_prefix("export NODEWRIGHT_REAL_NODE_DIR=") {
                real_node_dir = Some(PathBuf::from(dir.trim()));
            }
            if let Some(path) = line.strip_prefix("export KUBECONFIG=") {
                kubeconfig = Some(PathBuf::from(path.trim()));
            } else if let Some(path) = line.strip_prefix("export NODEWRIGHT_LOGS_DIR=") {
                logs_dir = Some(PathBuf::from(path.trim()));
            } else if let Some(path) = line.strip_prefix("export NODEWRIGHT_BIN_DIR=") {
                bin_dir = Some(PathBuf::from(path.trim()));
            }
        }
        let kubeconfig = kubeconfig.ok_or_else(|| Error::UpOutput(stdout.clone()))?;
        let logs_dir = logs_dir.unwrap_or(expected_logs);
        LIVE_LOGS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(logs_dir.clone());
        Ok(Cluster {
            name,
            kubeconfig,
            logs_dir: Some(logs_dir),
            bin_dir,
            nodes: (0..options.nodes)
                .map(|i| format!("kwok-node-{i}"))
                .collect(),
            real_node,
            real_node_host_dir,
            real_node_dir,
            pod_fates: true,
            teardown: true,
        })
    }

    /// One cluster for the whole test binary, started by the first test that asks (with that
    /// test's options) and reused by the others; each test should work in its own namespace
    /// ([`Cluster::create_namespace`]). It is stopped by up.sh's watcher when the test binary
    /// exits. A failed start is reported to every test rather than retried.
    pub async fn shared(options: ClusterOptions) -> Result<&'static Cluster> {
        let result = SHARED
            .get_or_init(|| async {
                Cluster::start(options)
                    .await
                    .map(|mut c| {
                        // Statics are never dropped; the watcher tears this one down.
                        c.teardown = false;
                        c
                    })
                    .map_err(|e| e.to_string())
            })
            .await;
        result.as_ref().map_err(|e| Error::SharedStart(e.clone()))
    }

    async fn external(kubeconfig: PathBuf, options: &ClusterOptions) -> Result<Cluster> {
        let nodes = options.nodes;
        let pod_fates = std::env::var(ENV_EXTERNAL_KWOK).is_ok_and(|v| v == "1" || v == "true");
        let mut cluster = Cluster {
            name: "external".into(),
            kubeconfig,
            logs_dir: None,
            bin_dir: None,
            nodes: Vec::new(),
            real_node: std::env::var(ENV_EXTERNAL_REAL_NODE).ok(),
            real_node_host_dir: None,
            real_node_dir: None,
            pod_fates,
            teardown: false,
        };
        if options.install_crds {
            cluster.install_crds().await?;
        }
        let client = cluster.client().await?;
        let api: Api<Node> = Api::all(client);
        if pod_fates {
            // kwok manages nodes annotated kwok.x-k8s.io/node=fake; create the ones missing.
            for i in 0..nodes {
                let name = format!("kwok-node-{i}");
                let node: Node = serde_json::from_value(serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                        "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                                   "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
                    }
                }))
                .map_err(|e| cluster.kubeconfig_error(format!("building a node object: {e}")))?;
                match api.create(&PostParams::default(), &node).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(source) => {
                        return Err(cluster.kube_error(format!("creating node {name}"), source));
                    }
                }
                cluster.nodes.push(name);
            }
        } else {
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| cluster.kube_error("listing nodes".into(), e))?;
            cluster.nodes = list
                .items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .take(nodes as usize)
                .collect();
        }
        Ok(cluster)
    }

    /// A new client for this cluster. Build one per test: a kube `Client` is bound to the tokio
    /// runtime it was made in, and every `#[tokio::test]` has its own.
    pub async fn client(&self) -> Result<kube::Client> {
        let config = self.config().await?;
        kube::Client::try_from(config).map_err(|e| self.kubeconfig_error(e.to_string()))
    }

    /// The client configuration, for a test that needs to change it before building a client:
    /// e.g. `default_retry = false` to see a 429 (kube retries 429, 503 and 504 by default,
    /// which turns a refused eviction into minutes of retries).
    pub async fn config(&self) -> Result<kube::Config> {
        install_crypto_provider();
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .map_err(|e| self.kubeconfig_error(e.to_string()))?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| self.kubeconfig_error(e.to_string()))
    }

    fn kubeconfig_error(&self, message: String) -> Error {
        Error::Kubeconfig {
            path: self.kubeconfig.display().to_string(),
            message,
            logs: self.logs_text(),
        }
    }

    /// The cluster's name (`external` for an external cluster).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Path of an admin kubeconfig for the cluster.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Where every component's log is (kept after the cluster stops); `None` for an external
    /// cluster.
    pub fn logs_dir(&self) -> Option<&Path> {
        self.logs_dir.as_deref()
    }

    fn logs_text(&self) -> String {
        match &self.logs_dir {
            Some(dir) => dir.display().to_string(),
            None => format!("(external cluster from ${ENV_EXTERNAL_KUBECONFIG}; no local logs)"),
        }
    }

    /// "cluster NAME (logs: DIR)", for assertion messages.
    pub fn describe(&self) -> String {
        format!("cluster {} (logs: {})", self.name, self.logs_text())
    }

    /// The real node (a kubelet running real containers), when the cluster has one: started with
    /// [`ClusterOptions::real_node`], or named by [`ENV_EXTERNAL_REAL_NODE`] for an external cluster.
    pub fn real_node(&self) -> Option<&str> {
        self.real_node.as_deref()
    }

    /// A host directory that is removed with the real node, for what package stages write on the
    /// host (copy and log roots), so a test leaves nothing on the machine.
    pub fn real_node_host_dir(&self) -> Option<&Path> {
        self.real_node_host_dir.as_deref()
    }

    /// The real node's supervisor records (tests/controlplane/realnode.sh, `rn_node_dir`):
    /// `boots.log` (one line per boot: number, boot ID, time), `host-commands.log` (every `reboot`,
    /// `systemctl` and `service` the node's stand-in ran), and `hold` (while it exists, a node that
    /// went down stays down).
    pub fn real_node_dir(&self) -> Option<&Path> {
        self.real_node_dir.as_deref()
    }

    /// Names of the fake nodes (for an external cluster without kwok: its first nodes); the real
    /// node is not among them.
    pub fn node_names(&self) -> &[String] {
        &self.nodes
    }

    /// Whether pods on [`Cluster::node_names`] follow [`PodFate`]s.
    pub fn simulates_pod_fates(&self) -> bool {
        self.pod_fates
    }

    /// For tests that need [`PodFate`]s: returns true (and says why on stderr) when the test
    /// must be skipped because the cluster is external and does not run kwok with our Stages.
    pub fn skip_without_pod_fates(&self, test: &str) -> bool {
        if self.pod_fates {
            return false;
        }
        skip::skip(
            test,
            &format!(
                "needs kwok pod fates (tests/controlplane/stages) which the external cluster does \
                 not run; set {ENV_EXTERNAL_KWOK}=1 if it does, or unset \
                 {ENV_EXTERNAL_KUBECONFIG} to use the local control plane"
            ),
        )
    }

    /// Path of one of the built binaries (kubectl, helm, kwokctl, ...); `None` for an external
    /// cluster, whose tools come from PATH.
    pub fn binary(&self, name: &str) -> Option<PathBuf> {
        self.bin_dir.as_ref().map(|d| d.join(name))
    }

    fn tool(&self, name: &str) -> PathBuf {
        self.binary(name).unwrap_or_else(|| PathBuf::from(name))
    }

    /// Runs kubectl against the cluster; returns its stdout, or an error with its stderr.
    pub async fn kubectl(&self, args: &[&str]) -> Result<String> {
        self.run_tool("kubectl", "--kubeconfig", args).await
    }

    /// Runs helm against the cluster; returns its stdout, or an error with its stderr.
    pub async fn helm(&self, args: &[&str]) -> Result<String> {
        self.run_tool("helm", "--kubeconfig", args).await
    }

    async fn run_tool(&self, tool: &str, kubeconfig_flag: &str, args: &[&str]) -> Result<String> {
        let program = self.tool(tool);
        let command = format!("{tool} {}", args.join(" "));
        let output = tokio::process::Command::new(&program)
            .arg(kubeconfig_flag)
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|source| Error::Spawn {
                command: program.display().to_string(),
                source,
            })?;
        if !output.status.success() {
            return Err(Error::Command {
                command,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
                logs: self.logs_text(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// An error for a failed API call, naming the logs.
    pub fn kube_error(&self, context: String, source: kube::Error) -> Error {
        Error::Kube {
            context,
            source,
            logs: self.logs_text(),
        }
    }

    /// Creates a namespace `<prefix>-<unique suffix>` and waits for its default ServiceAccount,
    /// without which no pod can be created in it.
    pub async fn create_namespace(&self, prefix: &str) -> Result<String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "{prefix}-{}-{:x}",
            COUNTER.fetch_add(1, Ordering::Relaxed),
            nanos & 0xfffff
        );
        let client = self.client().await?;
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .map_err(|e| self.kube_error(format!("creating namespace {name}"), e))?;
        let sa: Api<ServiceAccount> = Api::namespaced(client, &name);
        self.wait_for(
            &format!("the default ServiceAccount of namespace {name}"),
            Duration::from_secs(60),
            || async {
                match sa.get_opt("default").await {
                    Ok(found) => Ok(found.map(|_| ())),
                    Err(e) => Err(self.kube_error("reading ServiceAccount default".into(), e)),
                }
            },
        )
        .await?;
        Ok(name)
    }

    /// [`Cluster::create_namespace`] at Pod Security's `restricted` level, as a hardened cluster
    /// has its namespaces: where the chart's services must run (never its privileged package pods).
    pub async fn create_restricted_namespace(&self, prefix: &str) -> Result<String> {
        let name = self.create_namespace(prefix).await?;
        self.kubectl(&[
            "label",
            "namespace",
            &name,
            "pod-security.kubernetes.io/enforce=restricted",
        ])
        .await?;
        Ok(name)
    }

    /// Polls `probe` every 250 ms until it returns `Ok(Some(value))`, an error, or `timeout`
    /// passes. The timeout is a bound on a hang, not an assertion on speed: choose it generously.
    pub async fn wait_for<T, F, Fut>(
        &self,
        what: &str,
        timeout: Duration,
        mut probe: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<T>>>,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(value) = probe().await? {
                return Ok(value);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: what.to_string(),
                    timeout,
                    last: "condition not met".into(),
                    logs: self.logs_text(),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until the object `name` of `api` is gone (deleted, its finalizers released). A failed
    /// read counts as not gone yet: fault-injection runs restart the apiserver under the wait.
    pub async fn wait_deleted<K>(&self, api: &Api<K>, name: &str, timeout: Duration) -> Result<()>
    where
        K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let what = format!("{} {name} deleted", K::kind(&()));
        self.wait_for(&what, timeout, || async move {
            Ok(api
                .get_opt(name)
                .await
                .ok()
                .and_then(|object| object.is_none().then_some(())))
        })
        .await
    }

    /// Server-side applies every `crds/*.yaml` of the repository (up.sh already does this for a
    /// local cluster; an external one gets them here) and waits until they are Established.
    /// `NODEWRIGHT_E2E_CRDS_DIR` points it at another directory (to try a candidate CRD).
    pub async fn install_crds(&self) -> Result<()> {
        let dir = std::env::var_os("NODEWRIGHT_E2E_CRDS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_dir().join("crds"));
        let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect(),
            Err(_) => Vec::new(),
        };
        files.sort();
        let client = self.client().await?;
        let api: Api<CustomResourceDefinition> = Api::all(client);
        let params = PatchParams::apply("nodewright-e2e").force();
        for file in files {
            let crd_err = |message: String| Error::Crd {
                path: file.display().to_string(),
                message,
            };
            let text = std::fs::read_to_string(&file).map_err(|e| crd_err(e.to_string()))?;
            for doc in yaml_serde::Deserializer::from_str(&text) {
                let value: yaml_serde::Value =
                    serde::Deserialize::deserialize(doc).map_err(|e| crd_err(e.to_string()))?;
                if value.is_null() {
                    continue;
                }
                let crd: CustomResourceDefinition =
                    yaml_serde::from_value(value).map_err(|e| crd_err(e.to_string()))?;
                let name = crd.metadata.name.clone().unwrap_or_default();
                api.patch(&name, &params, &Patch::Apply(&crd))
                    .await
                    .map_err(|e| self.kube_error(format!("applying CRD {name}"), e))?;
                self.wait_for(
                    &format!("CRD {name} to be Established"),
                    Duration::from_secs(60),
                    || async {
                        let crd = api
                            .get(&name)
                            .await
                            .map_err(|e| self.kube_error(format!("reading CRD {name}"), e))?;
                        let established = crd
                            .status
                            .and_then(|s| s.conditions)
                            .unwrap_or_default()
                            .iter()
                            .any(|c| c.type_ == "Established" && c.status == "True");
                        Ok(established.then_some(()))
                    },
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Stops a local cluster now (dropping it does the same). No-op for an external cluster.
    pub fn stop(mut self) -> Result<()> {
        self.teardown = false;
        self.run_down()
    }

    fn run_down(&self) -> Result<()> {
        if self.logs_dir.is_none() {
            return Ok(());
        }
        let script = controlplane_dir().join("down.sh");
        let output = std::process::Command::new(&script)
            .arg("--name")
            .arg(&self.name)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| Error::Spawn {
                command: script.display().to_string(),
                source,
            })?;
        if let Some(dir) = &self.logs_dir {
            LIVE_LOGS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|d| d != dir);
        }
        if !output.status.success() {
            return Err(Error::Script {
                script: "tests/controlplane/down.sh".into(),
                status: output.status.to_string(),
                output: tail(&String::from_utf8_lossy(&output.stderr), 20),
                logs: self.logs_text(),
            });
        }
        Ok(())
    }
}

impl Drop for Cluster {
    /// Stops a local cluster, also while a failing test unwinds. Blocking is deliberate: the
    /// processes must be gone before the next test starts its own cluster.
    fn drop(&mut self) {
        if !self.teardown {
            return;
        }
        self.teardown = false;
        if let Err(e) = self.run_down() {
            eprintln!("nodewright-e2e: teardown of {} failed: {e}", self.name);
        }
    }
}
