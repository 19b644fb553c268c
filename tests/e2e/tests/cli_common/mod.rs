//! What the CLI suites share beyond the operator suites' support (included from
//! `operator/tests/support`): running the real `kubectl-nodewright` binary as a user would (no
//! terminal on stdin, the cluster's kubeconfig), kwok `Logs` objects that give fake pods a log,
//! and a watch recording the order in which nodes get their first Job.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use nodewright_e2e::Cluster;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// The binary under test: `NODEWRIGHT_CLI_BIN` when set, else `kubectl-nodewright` built from the
/// workspace ([`nodewright_e2e::binaries::workspace_binary_of`]).
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        nodewright_e2e::binaries::workspace_binary_of(
            "NODEWRIGHT_CLI_BIN",
            "nodewright-cli",
            "kubectl-nodewright",
        )
        .to_string_lossy()
        .into_owned()
    })
}

/// What a run of the binary gave.
#[derive(Debug, Clone)]
pub struct Run {
    /// Exit status.
    pub code: i32,
    /// Stdout.
    pub stdout: String,
    /// Stderr.
    pub stderr: String,
}

impl Run {
    /// Asserts exit status 0; returns stdout.
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "expected success: {self:#?}");
        &self.stdout
    }

    /// Asserts exit status `code` and a message on stderr containing `text`.
    pub fn fails(&self, code: i32, text: &str) {
        assert_eq!(self.code, code, "expected exit {code}: {self:#?}");
        assert!(
            self.stderr.contains(text),
            "stderr should contain {text:?}: {self:#?}"
        );
    }

    /// Stdout parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| panic!("JSON output: {e}: {self:#?}"))
    }

    /// Stdout parsed as YAML.
    pub fn yaml(&self) -> Value {
        yaml_serde::from_str(self.ok()).unwrap_or_else(|e| panic!("YAML output: {e}: {self:#?}"))
    }
}

/// Runs `kubectl-nodewright` against the cluster with the operator namespace `namespace`, stdin
/// not a terminal.
pub async fn cli(cluster: &Cluster, namespace: &str, args: &[&str]) -> Run {
    let mut all: Vec<String> = vec![
        "--kubeconfig".into(),
        cluster.kubeconfig_path().display().to_string(),
        "-n".into(),
        namespace.into(),
    ];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    run_binary(bin(), &all, None).await
}

/// Runs `program` with `args` (stdin from `stdin`, else /dev/null).
pub async fn run_binary(program: &str, args: &[String], stdin: Option<&str>) -> Run {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use tokio::io::AsyncWriteExt;
        pipe.write_all(text.as_bytes()).await.expect("stdin");
    }
    let out = child.wait_with_output().await.expect("wait");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The resourceVersion of every node and NodeWright: equal before and after a command that must
/// write nothing.
pub async fn fingerprint(client: &kube::Client) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for n in Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("nodes")
    {
        out.insert(
            format!("node/{}", n.name_any()),
            n.resource_version().unwrap_or_default(),
        );
    }
    for nw in Api::<nodewright_shared::api::NodeWright>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("nodewrights")
    {
        out.insert(
            format!("nodewright/{}", nw.name_any()),
            nw.resource_version().unwrap_or_default(),
        );
    }
    out
}

/// Node writes that happen without anyone asking (kwok's heartbeats write node status, which
/// moves the resourceVersion): compare the objects' annotations, labels and spec instead.
pub async fn node_marks(client: &kube::Client, names: &[&str]) -> Vec<Value> {
    let api = Api::<Node>::all(client.clone());
    let mut out = Vec::new();
    for name in names {
        let n = api.get(name).await.expect("node");
        out.push(json!({
            "name": name,
            "annotations": n.metadata.annotations,
            "labels": n.metadata.labels,
            "unschedulable": n.spec.as_ref().and_then(|s| s.unschedulable),
            "taints": n.spec.as_ref().and_then(|s| s.taints.clone()),
        }));
    }
    out
}

fn kwok_logs() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kwok.x-k8s.io", "v1alpha1", "Logs"),
        "logs",
    )
}

/// Whether the cluster's kwok serves fake pods' logs (its `Logs` CRD is installed, as
/// `tests/controlplane/up.sh` does); says SKIPPED for `test` when not.
pub async fn skip_without_kwok_logs(cluster: &Cluster, test: &str) -> bool {
    if cluster.skip_without_pod_fates(test) {
        return true;
    }
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(cluster.client().await.expect("client"));
    if crds
        .get_opt("logs.kwok.x-k8s.io")
        .await
        .ok()
        .flatten()
        .is_some()
    {
        return false;
    }
    nodewright_e2e::skip::skip(
        test,
        "needs kwok's Logs CRD (kwokctl enableCRDs: [Logs], as tests/controlplane/up.sh sets), \
         which this cluster does not have",
    )
}

/// Writes a log file in the CRI format the kubelet (and kwok) serve logs from.
pub fn write_cri_log(path: &Path, lines: &[&str]) {
    let text: String = lines
        .iter()
        .enumerate()
        .map(|(i, l)| format!("2026-12-01T10:00:{:02}.000000000Z stdout F {l}\n", i % 60))
        .collect();
    std::fs::write(path, text).expect("log file");
}

/// Appends a line to a CRI log file.
pub fn append_cri_log(path: &Path, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("log file");
    writeln!(f, "2026-12-01T10:01:00.000000000Z stdout F {line}").expect("append");
}

/// Gives the pod `pod` of `namespace` logs: kwok serves each file for its containers.
pub async fn give_log(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    logs: &[(String, PathBuf)],
) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &kwok_logs());
    let mut object = DynamicObject::new(pod, &kwok_logs()).within(namespace);
    let entries: Vec<Value> = logs
        .iter()
        .map(|(container, file)| {
            json!({"containers": [container], "logsFile": file.display().to_string(), "follow": true})
        })
        .collect();
    object.data = json!({"spec": {"logs": entries}});
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("Logs object for pod {pod}: {e}"),
    }
}

/// Gives every pod of `namespace` that matches `wanted` its logs (container, file) as soon as it
/// appears, until dropped.
pub struct LogGiver {
    task: JoinHandle<()>,
}

impl LogGiver {
    /// Starts watching.
    pub fn start(
        client: kube::Client,
        namespace: String,
        logs: Vec<(String, PathBuf)>,
        wanted: impl Fn(&Pod) -> bool + Send + 'static,
    ) -> Self {
        let task = tokio::spawn(async move {
            let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            let mut given = std::collections::BTreeSet::new();
            while let Some(next) = stream.next().await {
                let Ok(pod) = next else { continue };
                if !wanted(&pod) || !given.insert(pod.name_any()) {
                    continue;
                }
                give_log(&client, &namespace, &pod.name_any(), &logs).await;
            }
        });
        LogGiver { task }
    }
}

impl Drop for LogGiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Records, from a watch, the order in which nodes get their first Job in a namespace, and every
/// (node, `<package>-<version>`, stage) a Job was created for.
pub struct FirstJobs {
    order: Arc<Mutex<Vec<String>>>,
    runs: Arc<Mutex<std::collections::BTreeSet<(String, String, String)>>>,
    task: JoinHandle<()>,
}

impl FirstJobs {
    /// Starts watching the Jobs of `namespace`.
    pub fn start(client: kube::Client, namespace: &str) -> Self {
        let order: Arc<Mutex<Vec<String>>> = Arc::default();
        let runs: Arc<Mutex<std::collections::BTreeSet<(String, String, String)>>> = Arc::default();
        let sink = order.clone();
        let run_sink = runs.clone();
        let api: Api<Job> = Api::namespaced(client, namespace);
        let task = tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(next) = stream.next().await {
                let Ok(job) = next else { continue };
                let node = job
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.spec.as_ref())
                    .and_then(|s| s.node_name.clone());
                if let Some(node) = node {
                    let labels = job.labels();
                    let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
                    run_sink.lock().expect("lock").insert((
                        node.clone(),
                        get(nodewright_shared::keys::PACKAGE_LABEL),
                        get(nodewright_shared::keys::STAGE_LABEL),
                    ));
                    let mut order = sink.lock().expect("lock");
                    if !order.contains(&node) {
                        order.push(node);
                    }
                }
            }
        });
        FirstJobs { order, runs, task }
    }

    /// Every (node, `<package>-<version>`, stage) a Job was created for so far.
    pub fn runs(&self) -> Vec<(String, String, String)> {
        self.runs.lock().expect("lock").iter().cloned().collect()
    }

    /// The nodes so far, in the order they got their first Job.
    pub fn order(&self) -> Vec<String> {
        self.order.lock().expect("lock").clone()
    }
}

impl Drop for FirstJobs {
    fn drop(&mut self) {
        self.task.abort();
    }
}
