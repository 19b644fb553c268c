//! Running the product's two services as local processes the way the chart's Deployments run them:
//! the binary built from this workspace, the chart's env (the defaults ConfigMap, then the
//! container's env), and a ServiceAccount token of the release. Only what the kubelet would fill
//! in (fieldRefs) and the listen addresses (free local ports) are supplied by the suite.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::Api;
use nodewright_e2e::Cluster;
use nodewright_e2e::binaries::workspace_binary;
use nodewright_e2e::limits::Cgroup;
use nodewright_operator::webhook_certs;
use serde_json::Value;

use super::{container, env, find};

pub use nodewright_e2e::process::free_port;

/// A kubeconfig for the cluster that authenticates with a ServiceAccount token.
pub async fn token_kubeconfig(cluster: &Cluster, ns: &str, sa: &str, dir: &Path) -> PathBuf {
    let token = cluster
        .kubectl(&["create", "token", sa, "-n", ns, "--duration", "1h"])
        .await
        .expect("create token");
    let view: Value = serde_json::from_str(
        &cluster
            .kubectl(&["config", "view", "--raw", "--minify", "-o", "json"])
            .await
            .expect("config view"),
    )
    .expect("kubeconfig json");
    // The admin kubeconfig's cluster entry as is (server and CA, as data or as a file path).
    let cluster_entry = view["clusters"][0]["cluster"].clone();
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster_entry}],
        "users": [{"name": sa, "user": {"token": token.trim()}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": sa, "namespace": ns}}],
        "current-context": "c",
    });
    let path = dir.join(format!("{sa}.kubeconfig"));
    std::fs::write(&path, serde_json::to_vec(&config).expect("json")).expect("write kubeconfig");
    path
}

/// The webhook binary of this workspace (built when needed).
pub fn webhook_binary() -> PathBuf {
    workspace_binary("NODEWRIGHT_WEBHOOK_BIN", "nodewright-webhook")
}

/// The operator binary of this workspace (built when needed).
pub fn operator_binary() -> PathBuf {
    workspace_binary("NODEWRIGHT_OPERATOR_BIN", "nodewright-operator")
}

/// Spawns `command` with its stdout and stderr appended to `log` (killed when dropped).
pub fn spawn_logged(mut command: tokio::process::Command, log: &Path) -> tokio::process::Child {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log");
    command
        .stdout(Stdio::from(log_file.try_clone().expect("clone")))
        .stderr(Stdio::from(log_file))
        .kill_on_drop(true)
        .spawn()
        .expect("service starts")
}

/// The defaults ConfigMap's data (`envFrom` of both Deployments) of release `rel`.
fn defaults(manifest: &[Value], rel: &str) -> Vec<(String, String)> {
    find(manifest, "ConfigMap", &format!("{rel}-nodewright-defaults"))["data"]
        .as_object()
        .expect("defaults data")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// Where a local service listens.
#[derive(Debug, Clone)]
pub struct Listen {
    /// The HTTPS (webhook) or probe (operator) address.
    pub serve: String,
    /// The metrics address.
    pub metrics: String,
}

impl Listen {
    /// Both on free ports of 127.0.0.1.
    pub fn local() -> Listen {
        Listen {
            serve: format!("127.0.0.1:{}", free_port()),
            metrics: format!("127.0.0.1:{}", free_port()),
        }
    }
}

/// `program`, inside `cgroup` when given (its container's limits).
fn launch(program: &Path, cgroup: Option<&Cgroup>) -> tokio::process::Command {
    match cgroup {
        Some(c) => c.command(program),
        None => tokio::process::Command::new(program),
    }
}

/// The operator of release `rel` in `ns` as pod `pod`: a clean environment with exactly the
/// chart's env, inside `cgroup` when given.
pub fn operator_command(
    manifest: &[Value],
    rel: &str,
    ns: &str,
    kubeconfig: &Path,
    pod: &str,
    listen: &Listen,
    cgroup: Option<&Cgroup>,
) -> tokio::process::Command {
    let deployment = find(
        manifest,
        "Deployment",
        &format!("{rel}-nodewright-operator"),
    );
    let mut command = launch(&operator_binary(), cgroup);
    command.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    for (k, v) in defaults(manifest, rel) {
        command.env(k, v);
    }
    for (name, value) in env(container(deployment)) {
        match (name.as_str(), value) {
            ("NAMESPACE", _) => command.env(&name, ns),
            ("POD_NAME", _) => command.env(&name, pod),
            ("METRICS_LISTEN", _) => command.env(&name, &listen.metrics),
            ("PROBE_LISTEN", _) => command.env(&name, &listen.serve),
            (_, Some(value)) => command.env(&name, value),
            (_, None) => panic!("operator env {name} has no value and no known fieldRef"),
        };
    }
    command.env("KUBECONFIG", kubeconfig);
    command
}

/// The webhook of release `rel`: the chart's env (its literal values and the defaults ConfigMap),
/// listening on `listen`, logging text, inside `cgroup` when given.
pub fn webhook_command(
    manifest: &[Value],
    rel: &str,
    kubeconfig: &Path,
    listen: &Listen,
    cgroup: Option<&Cgroup>,
) -> tokio::process::Command {
    let deployment = find(manifest, "Deployment", &format!("{rel}-nodewright-webhook"));
    let mut command = launch(&webhook_binary(), cgroup);
    for (name, value) in env(container(deployment)) {
        if let Some(value) = value {
            command.env(name, value);
        }
    }
    for (k, v) in defaults(manifest, rel) {
        command.env(k, v);
    }
    command
        .env("KUBECONFIG", kubeconfig)
        .env("WEBHOOK_LISTEN", &listen.serve)
        .env("WEBHOOK_METRICS_LISTEN", &listen.metrics)
        .env("LOG_FORMAT", "text");
    command
}

/// Every caBundle (PEM) of the webhook configurations named `name`, mutating then validating
/// (empty strings where absent); `None` when either could not be read this time (a connection
/// the apiserver reset under load: the caller looks again).
pub async fn bundles(client: &kube::Client, name: &str) -> Option<Vec<String>> {
    let m = webhook_certs::publish::read_mutating(
        &Api::<MutatingWebhookConfiguration>::all(client.clone()),
        name,
    )
    .await
    .inspect_err(|e| eprintln!("reading the mutating configuration {name}: {e:?}"))
    .ok()?;
    let v = webhook_certs::publish::read_validating(
        &Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        name,
    )
    .await
    .inspect_err(|e| eprintln!("reading the validating configuration {name}: {e:?}"))
    .ok()?;
    Some(m.bundles().chain(v.bundles()).collect())
}
