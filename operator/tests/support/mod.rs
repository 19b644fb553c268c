//! What the in-process operator suites (e2e_rollout, e2e_outcomes, e2e_lifecycle) share: the local
//! control plane, an operator started in the test process and stopped when dropped, and NodeWrights
//! scoped to one suite by a label so the suites can share the cluster.
//!
//! Each suite compiles this module on its own and uses part of it.
#![allow(dead_code)]

pub mod admin_http;
pub mod job_write_block;
pub mod scenario;

// Not every suite starts a scenario.
#[allow(unused_imports)]
pub use scenario::{scenario, scenario_with_node};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use nodewright_e2e::{Cluster, ClusterOptions, PodFate};
use nodewright_operator::metrics::nodewright_gauges::StateMetrics;
use nodewright_operator::runtime::config::OperatorConfig;
use nodewright_operator::{JobHook, RunOptions};
use nodewright_shared::api::{Interrupt, InterruptType, NodeWright, NodeWrightSpec, Status};
use nodewright_shared::keys;
use nodewright_shared::node_state::NodeState;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Upper bound of every wait (a bound, never a timing assertion).
pub const BOUND: Duration = Duration::from_secs(240);

/// The local control plane shared by the tests of one binary.
pub async fn cluster() -> &'static Cluster {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Cluster::shared(ClusterOptions::default())
        .await
        .expect("local control plane")
}

/// A client for an in-process operator, built as the binary builds its own
/// ([`nodewright_operator::runtime::client::build`]): what a test of the operator's API calls (a
/// refused eviction, a 429) must run with, rather than the fixture's client.
pub async fn operator_client() -> kube::Client {
    let config = cluster().await.config().await.expect("kube config");
    nodewright_operator::runtime::client::build(
        config,
        &nodewright_operator::metrics::api::ApiMetrics::default(),
    )
    .expect("operator client")
}

/// An in-process operator, stopped when dropped.
pub struct Operator {
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Operator {
    /// Stops gracefully: the reconcilers stop, then the Lease is released.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(BOUND, task)
                .await
                .expect("the operator stops")
                .expect("the operator task ends cleanly");
        }
    }

    /// Kills it: the task is aborted mid-flight, nothing is released or finished.
    pub async fn kill(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = tokio::time::timeout(BOUND, task).await;
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The environment of a test operator without leader election: Jobs in `namespace`, the given
/// backoff limit, text logs.
pub fn operator_env(
    namespace: &str,
    pod_name: String,
    backoff_limit: i32,
) -> BTreeMap<&'static str, String> {
    BTreeMap::from([
        ("NAMESPACE", namespace.to_owned()),
        ("LEADER_ELECTION", "false".to_owned()),
        ("POD_NAME", pod_name),
        ("JOB_BACKOFF_LIMIT", backoff_limit.to_string()),
        ("LOG_LEVEL", "info".to_owned()),
        ("LOG_FORMAT", "text".to_owned()),
    ])
}

/// Starts an operator configured by `env` that reconciles only the NodeWrights matching
/// `selector`, with `hook` applied to every Job it creates; `metrics` receive its state metrics.
pub fn spawn_operator(
    client: kube::Client,
    env: &BTreeMap<&'static str, String>,
    selector: String,
    hook: Option<JobHook>,
    metrics: Option<StateMetrics>,
) -> Operator {
    let options = RunOptions {
        nodewright_selector: Some(selector),
        job_hook: hook,
        ..RunOptions::default()
    };
    spawn_with_options(client, env, options, metrics)
}

/// Starts an operator configured by `env`, run with `options` (a test clock, a hook...).
pub fn spawn_with_options(
    client: kube::Client,
    env: &BTreeMap<&'static str, String>,
    options: RunOptions,
    metrics: Option<StateMetrics>,
) -> Operator {
    let config = OperatorConfig::from_lookup(|var| env.get(var).cloned())
        .expect("valid operator configuration");
    // Operator logs go to the test's output (shown for a failing test).
    nodewright_operator::runtime::telemetry::init(&config);
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let task = tokio::spawn(async move {
        // A failing operator shows up as the test's wait running out; its error is printed here.
        let result = match metrics {
            Some(metrics) => {
                nodewright_operator::run_instrumented(config, client, options, None, metrics, stop)
                    .await
            }
            None => nodewright_operator::run(config, client, options, None, stop).await,
        };
        if let Err(e) = result {
            eprintln!("operator stopped with an error: {e}");
        }
    });
    Operator {
        shutdown,
        task: Some(task),
    }
}

/// The operator of one test, built up from what the suites vary: Jobs in a namespace, only the
/// NodeWrights labelled `suite_label=scope`, a backoff limit (3 unless set), extra variables, a
/// Job hook, state metrics. Every suite starts its operators through this one builder.
pub struct SuiteOperator {
    client: kube::Client,
    env: BTreeMap<&'static str, String>,
    selector: String,
    hook: Option<JobHook>,
    metrics: Option<StateMetrics>,
    clock: Option<nodewright_operator::Clock>,
}

impl SuiteOperator {
    /// Jobs in `namespace`, reconciling only the NodeWrights labelled `suite_label=scope`, its
    /// pod name `operator-{scope}`.
    pub fn new(client: &kube::Client, namespace: &str, suite_label: &str, scope: &str) -> Self {
        Self {
            client: client.clone(),
            env: operator_env(namespace, format!("operator-{scope}"), 3),
            selector: format!("{suite_label}={scope}"),
            hook: None,
            metrics: None,
            clock: None,
        }
    }

    /// The Jobs' backoff limit.
    pub fn backoff_limit(mut self, limit: i32) -> Self {
        self.env.insert("JOB_BACKOFF_LIMIT", limit.to_string());
        self
    }

    /// The operator's pod name (its identity in logs and the leader election).
    pub fn pod_name(mut self, name: String) -> Self {
        self.env.insert("POD_NAME", name);
        self
    }

    /// More variables of its environment.
    pub fn env(mut self, extra: &[(&'static str, &str)]) -> Self {
        self.env
            .extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        self
    }

    /// Applied to every Job it creates.
    pub fn hook(mut self, hook: Option<JobHook>) -> Self {
        self.hook = hook;
        self
    }

    /// Where its state metrics go.
    pub fn metrics(mut self, metrics: Option<StateMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The clock its passes read (a test moves time with it).
    pub fn clock(mut self, clock: nodewright_operator::Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Starts it.
    pub fn start(self) -> Operator {
        let options = RunOptions {
            nodewright_selector: Some(self.selector),
            job_hook: self.hook,
            clock: self.clock,
            ..RunOptions::default()
        };
        spawn_with_options(self.client, &self.env, options, self.metrics)
    }
}

/// Creates the NodeWright `name` labelled `suite_label=name`, so only its suite's operator sees it.
pub async fn create_labelled_nodewright(
    client: &kube::Client,
    suite_label: &str,
    name: &str,
    spec: NodeWrightSpec,
) -> NodeWright {
    create_scoped_nodewright(client, suite_label, name, NodeWright::new(name, spec)).await
}

/// Creates `nw` labelled `suite_label=scope`, so only the test operator scoped to `scope` sees it,
/// with the API's default priority when it has none (`NodeWrightSpec::default()` has priority 0,
/// which the CRD rejects; the API default is 200).
pub async fn create_scoped_nodewright(
    client: &kube::Client,
    suite_label: &str,
    scope: &str,
    mut nw: NodeWright,
) -> NodeWright {
    if nw.spec.priority == 0 {
        nw.spec.priority = nodewright_shared::api::DEFAULT_PRIORITY;
    }
    nw.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(suite_label.to_owned(), scope.to_owned());
    Api::<NodeWright>::all(client.clone())
        .create(&PostParams::default(), &nw)
        .await
        .expect("NodeWright created")
}

/// A node selector matching exactly the named nodes.
pub fn on_nodes<S: AsRef<str>>(names: &[S]) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/hostname".into(),
            operator: "In".into(),
            values: Some(names.iter().map(|n| n.as_ref().to_owned()).collect()),
        }]),
    })
}

/// The spec of a NodeWright on `nodes` (by hostname) with these packages and every other field
/// at its default: the shape most tests roll out.
pub fn spec_on<S: AsRef<str>, N: Into<String>>(
    nodes: &[S],
    packages: impl IntoIterator<Item = (N, nodewright_shared::api::Package)>,
) -> NodeWrightSpec {
    NodeWrightSpec {
        node_selectors: on_nodes(nodes),
        packages: packages.into_iter().map(|(n, p)| (n.into(), p)).collect(),
        ..NodeWrightSpec::default()
    }
}

/// The `<package>-<version>` label of a Job.
pub fn job_package(job: &Job) -> Option<String> {
    job.labels().get(keys::PACKAGE_LABEL).cloned()
}

/// A hook that gives the pods of the `stage` Jobs of `package` `fate`.
pub fn fate_for(package: &'static str, stage: &'static str, fate: PodFate) -> JobHook {
    Arc::new(move |job: &mut Job| {
        if job_package(job).is_some_and(|p| p.starts_with(&format!("{package}-")))
            && job.labels().get(keys::STAGE_LABEL).map(String::as_str) == Some(stage)
            && let Some(spec) = job.spec.as_mut()
        {
            fate.apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    })
}

/// A hook under which every Job on the node `node` fails at once (exit code 1), whatever its
/// package: a package broken on one node only.
pub fn fail_on_node(node: String) -> JobHook {
    Arc::new(move |job: &mut Job| {
        if job.labels().get(keys::NODE_LABEL) == Some(&node)
            && let Some(spec) = job.spec.as_mut()
        {
            PodFate::fail()
                .exit_code(1)
                .apply(spec.template.metadata.get_or_insert_with(Default::default));
        }
    })
}

/// Waits until `ready` holds on the object `name` of `api`; returns it.
async fn wait_object<K>(
    cluster: &Cluster,
    api: Api<K>,
    name: &str,
    what: &str,
    ready: impl Fn(&K) -> bool,
) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_pick(cluster, api, name, what, |object: &K| {
        ready(object).then(|| object.clone())
    })
    .await
}

/// Reads the object `name` of `api` until `pick` takes something from it; returns that.
pub async fn wait_pick<K, T>(
    cluster: &Cluster,
    api: Api<K>,
    name: &str,
    what: &str,
    pick: impl Fn(&K) -> Option<T>,
) -> T
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let pick = &pick;
    cluster
        .wait_for(what, BOUND, || {
            let api = api.clone();
            async move {
                let object = api
                    .get(name)
                    .await
                    .map_err(|e| cluster.kube_error(format!("get {name}"), e))?;
                Ok(pick(&object))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until `ready` holds on the NodeWright `name` (and its status); returns it.
pub async fn wait_nodewright(
    cluster: &Cluster,
    client: &kube::Client,
    name: &str,
    what: &str,
    ready: impl Fn(&NodeWright) -> bool,
) -> NodeWright {
    let api = Api::<NodeWright>::all(client.clone());
    wait_object(
        cluster,
        api,
        name,
        &format!("NodeWright {name}: {what}"),
        ready,
    )
    .await
}

/// Waits until `ready` holds on the node `name`; returns it.
pub async fn wait_node(
    cluster: &Cluster,
    client: &kube::Client,
    name: &str,
    what: &str,
    ready: impl Fn(&Node) -> bool,
) -> Node {
    let api = Api::<Node>::all(client.clone());
    wait_object(cluster, api, name, &format!("node {name}: {what}"), ready).await
}

/// Sets the Pod Security `enforce` level of namespace `ns` (`privileged`, `baseline`...).
pub async fn pod_security(client: &kube::Client, ns: &str, level: &str) {
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": level,
            }}})),
        )
        .await
        .unwrap_or_else(|e| panic!("namespace {ns} at Pod Security {level}: {e}"));
}

/// Whether the NodeWright's rolled-up status is `want`.
pub fn status_is(nw: &NodeWright, want: Status) -> bool {
    nw.status.as_ref().and_then(|s| s.status) == Some(want)
}

/// Waits until the NodeWright's rolled-up status is `want`.
pub async fn wait_status(
    cluster: &Cluster,
    client: &kube::Client,
    name: &str,
    want: Status,
) -> NodeWright {
    wait_nodewright(cluster, client, name, want.as_str(), |nw| {
        status_is(nw, want)
    })
    .await
}

/// A namespace (named after `prefix`) and a fake node `<namespace>-n0` of a test's own.
pub async fn own_node(cluster: &Cluster, client: &kube::Client, prefix: &str) -> (String, String) {
    let ns = cluster.create_namespace(prefix).await.expect("namespace");
    let node = format!("{ns}-n0");
    create_fake_node(client, &node, &[], serde_json::json!([])).await;
    (ns, node)
}

/// The taint the runtime-required feature puts on a new node until its NodeWrights complete.
pub const RUNTIME_REQUIRED: (&str, &str) = ("nodewright.nvidia.com", "runtime-required");

/// `NoSchedule` taints with these keys and values, as [`create_fake_node`] takes them.
pub fn no_schedule(taints: &[(&str, &str)]) -> serde_json::Value {
    taints
        .iter()
        .map(|(key, value)| serde_json::json!({"key": key, "value": value, "effect": "NoSchedule"}))
        .collect()
}

/// Creates a fake node `name` of a test's own (kwok manages nodes annotated
/// `kwok.x-k8s.io/node=fake`), labelled `kubernetes.io/hostname=<name>` and `type=kwok` plus
/// `labels`, with `taints` (a JSON list, `[]` for none).
pub async fn create_fake_node(
    client: &kube::Client,
    name: &str,
    labels: &[(&str, &str)],
    taints: serde_json::Value,
) {
    let mut all = serde_json::Map::new();
    all.insert("kubernetes.io/hostname".into(), name.into());
    all.insert("type".into(), "kwok".into());
    for (k, v) in labels {
        all.insert((*k).to_owned(), (*v).into());
    }
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": all
        },
        "spec": {"taints": taints}
    }))
    .expect("node");
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("node created");
    wait_node_ready(client, name).await;
}

/// Creates a fake node `<prefix>-<suffix>` for each `(suffix, labels)`, without taints: nodes of
/// the test's own, so a policy's batches are not shared with other tests. They are created in this
/// order (the rollout order within a compartment is creation time, then name); returns their
/// names, each Ready ([`create_fake_node`]).
pub async fn create_nodes(
    client: &kube::Client,
    prefix: &str,
    nodes: &[(&str, &[(&str, &str)])],
) -> Vec<String> {
    let mut names = Vec::new();
    for (suffix, labels) in nodes {
        let name = format!("{prefix}-{suffix}");
        create_fake_node(client, &name, labels, serde_json::json!([])).await;
        names.push(name);
    }
    names
}

/// [`create_nodes`] of `count` unlabelled nodes `<prefix>-n0`, `<prefix>-n1`...
pub async fn create_numbered_nodes(
    client: &kube::Client,
    prefix: &str,
    count: usize,
) -> Vec<String> {
    let suffixes: Vec<String> = (0..count).map(|i| format!("n{i}")).collect();
    let nodes: Vec<(&str, &[(&str, &str)])> =
        suffixes.iter().map(|s| (s.as_str(), &[][..])).collect();
    create_nodes(client, prefix, &nodes).await
}

/// Waits until kwok reports the node Ready and the node lifecycle controller lifted its
/// `node.kubernetes.io/not-ready` taint. Until then the operator rightly treats the node as blocked
/// (a taint its packages do not tolerate), and a test whose batches follow the node order would see
/// them start with the next node instead.
pub async fn wait_node_ready(client: &kube::Client, name: &str) {
    let cluster = cluster().await;
    let api = Api::<Node>::all(client.clone());
    cluster
        .wait_for(&format!("node {name} ready"), BOUND, || {
            let api = api.clone();
            async move {
                let node = api
                    .get(name)
                    .await
                    .map_err(|e| cluster.kube_error(format!("get node {name}"), e))?;
                let not_ready_taint = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"));
                let ready = node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                Ok((ready && !not_ready_taint).then_some(()))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Creates the pod `name`, labelled `app=<app>`, in `namespace` on `node` (a workload the drain
/// of that node must evict; kwok keeps it running).
pub async fn create_workload_pod(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    app: &str,
    node: &str,
) {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .expect("pod");
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &pod)
        .await
        .expect("workload created");
}

/// Creates the PodDisruptionBudget `app` in `namespace`, `minAvailable: 1` over the `app=<app>`
/// pods (one, running), and waits until the disruption controller has counted that pod and allows
/// no disruption: from then on the Eviction API refuses its eviction for the budget (429).
pub async fn create_blocking_pdb(
    cluster: &Cluster,
    client: &kube::Client,
    namespace: &str,
    app: &str,
) -> Api<PodDisruptionBudget> {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), namespace);
    let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": app},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}
    }))
    .expect("pdb");
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("PDB created");
    cluster
        .wait_for(&format!("PDB {app} allowing no disruption"), BOUND, || {
            let pdbs = pdbs.clone();
            async move {
                let p = pdbs
                    .get(app)
                    .await
                    .map_err(|e| cluster.kube_error(format!("get pdb {app}"), e))?;
                Ok(p.status
                    .as_ref()
                    .is_some_and(|s| {
                        s.current_healthy == 1
                            && s.disruptions_allowed == 0
                            && s.observed_generation == p.metadata.generation
                    })
                    .then_some(()))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    pdbs
}

/// An interrupt of `kind` (restarting `services`, for the `service` kind).
pub fn interrupt(kind: InterruptType, services: &[&str]) -> Option<Interrupt> {
    Some(Interrupt {
        kind,
        services: services.iter().map(|s| (*s).to_owned()).collect(),
    })
}

/// Waits until the NodeWright `name` is gone (its finalizer let it go).
pub async fn wait_nodewright_gone(cluster: &Cluster, client: &kube::Client, name: &str) {
    wait_gone(cluster, &Api::<NodeWright>::all(client.clone()), name).await;
}

/// Waits until the object `name` of `api` is gone (deleted, its finalizers released).
pub async fn wait_gone<K: Watchable>(cluster: &Cluster, api: &Api<K>, name: &str) {
    cluster
        .wait_deleted(api, name, BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Waits until a Job of namespace `ns` carries the `state-recorded: timed-out` marker; returns it.
pub async fn wait_timed_out_job(cluster: &Cluster, client: &kube::Client, ns: &str) -> Job {
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    cluster
        .wait_for("a stage recorded as timed out", BOUND, || {
            let api = api.clone();
            async move {
                let jobs = api
                    .list(&kube::api::ListParams::default())
                    .await
                    .map_err(|e| cluster.kube_error("jobs".into(), e))?;
                Ok(jobs.items.into_iter().find(|j| {
                    j.annotations()
                        .get(keys::STATE_RECORDED_ANNOTATION)
                        .map(String::as_str)
                        == Some("timed-out")
                }))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A package of the agentless image at `version`, depending on `deps` (name, version).
pub fn package(version: &str, deps: &[(&str, &str)]) -> nodewright_shared::api::Package {
    nodewright_shared::api::Package {
        version: version.into(),
        image: "ghcr.io/nvidia/skyhook/agentless".into(),
        depends_on: deps
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    }
}

/// Merge-patches the NodeWright `name`.
pub async fn patch_nodewright(client: &kube::Client, name: &str, patch: serde_json::Value) {
    Api::<NodeWright>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("NodeWright patched");
}

/// Merge-patches the node `name`.
pub async fn patch_node(client: &kube::Client, name: &str, patch: serde_json::Value) {
    Api::<Node>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("node patched");
}

/// Deletes the node `name`.
pub async fn delete_node(client: &kube::Client, name: &str) {
    Api::<Node>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .expect("node deleted");
}

/// The node's state for `nodewright`, if it has one (a malformed one fails the test).
pub fn state_of(node: &Node, nodewright: &str) -> Option<NodeState> {
    node.annotations()
        .get(&keys::node_state_key(nodewright))
        .map(|t| NodeState::parse(t).expect("node state parses"))
}

/// Reads the node and returns its state for `nodewright`.
pub async fn node_state(client: &kube::Client, node: &str, nodewright: &str) -> Option<NodeState> {
    let node = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .expect("node");
    state_of(&node, nodewright)
}

/// The record of `package` `version` in the node's state for the NodeWright `nodewright` (cloned),
/// which must exist.
pub async fn record(
    client: &kube::Client,
    node: &str,
    nodewright: &str,
    package: &str,
    version: &str,
) -> nodewright_shared::node_state::PackageStatus {
    let state = node_state(client, node, nodewright)
        .await
        .unwrap_or_else(|| panic!("{node} has no state for {nodewright}"));
    state
        .get(package, version)
        .cloned()
        .unwrap_or_else(|| panic!("{node}: no record of {package} {version}: {state:?}"))
}

/// Every object `api` lists (one list, no paging: a test's own namespace holds few).
pub async fn list_all<K>(api: &Api<K>) -> Vec<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing {}: {e}", std::any::type_name::<K>()))
        .items
}

/// The NodeWright's NodeStateMalformed condition, asserted to be a parse error whose message names
/// what `names_bad` accepts and never the node `good`.
pub fn assert_malformed<'a>(
    nw: &'a NodeWright,
    good: &str,
    names_bad: impl Fn(&str) -> bool,
) -> &'a Condition {
    let malformed = condition(nw, "NodeStateMalformed").expect("NodeStateMalformed condition");
    assert_eq!(malformed.reason, "ParseError");
    assert!(
        names_bad(&malformed.message) && !malformed.message.contains(good),
        "{}",
        malformed.message
    );
    malformed
}

/// Asserts the NodeWright is Ready and reports no malformed node state (the condition gone or
/// False): what a repaired node record leads back to.
pub fn assert_ready_and_well_formed(nw: &NodeWright) {
    assert!(
        condition(nw, "NodeStateMalformed").is_none_or(|c| c.status == "False"),
        "{:?}",
        condition(nw, "NodeStateMalformed")
    );
    assert!(
        condition(nw, "Ready").is_some_and(|c| c.status == "True"),
        "{:?}",
        condition(nw, "Ready")
    );
}

/// The NodeWright's condition `type_`.
pub fn condition<'a>(nw: &'a NodeWright, type_: &str) -> Option<&'a Condition> {
    nw.status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == type_)
}

/// Whether the condition is `status` with that reason (any reason when `None`).
pub fn condition_is(nw: &NodeWright, type_: &str, status: &str, reason: Option<&str>) -> bool {
    condition(nw, type_).is_some_and(|c| c.status == status && reason.is_none_or(|r| c.reason == r))
}

/// Events about the object `name` with `reason` (any namespace: cluster-scoped objects' Events land
/// in `default`).
pub async fn events(client: &kube::Client, name: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::all(client.clone())
        .list(&ListParams::default().fields(&format!("involvedObject.name={name},reason={reason}")))
        .await
        .expect("events listed")
        .items
}

/// Waits for an Event about the `kind` object `name` with `reason`; returns it.
pub async fn wait_event(
    cluster: &Cluster,
    client: &kube::Client,
    name: &str,
    reason: &str,
    kind: &str,
) -> Event {
    cluster
        .wait_for(&format!("a {reason} Event on {kind} {name}"), BOUND, || {
            let client = client.clone();
            async move {
                Ok(events(&client, name, reason)
                    .await
                    .into_iter()
                    .find(|e| e.involved_object.kind.as_deref() == Some(kind)))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Every version of every object a watch delivered, in the order delivered: a watch sees versions
/// (and objects) that a later list would miss.
pub struct Watched<K> {
    seen: Arc<Mutex<Vec<K>>>,
    task: JoinHandle<()>,
}

impl<K: Watchable> Watched<K> {
    /// Starts the watch.
    pub fn start(api: Api<K>, config: watcher::Config) -> Self {
        let seen: Arc<Mutex<Vec<K>>> = Arc::default();
        let sink = seen.clone();
        let task = watch_applied(api, config, move |object| {
            sink.lock().expect("lock").push(object);
        });
        Watched { seen, task }
    }

    /// Every version delivered so far, in order.
    pub fn all(&self) -> Vec<K> {
        self.seen.lock().expect("lock").clone()
    }

    /// The last version seen of each object, by uid.
    pub fn latest(&self) -> Vec<K> {
        self.latest_by_uid().into_values().collect()
    }

    /// The last version seen of each object, keyed by uid.
    pub fn latest_by_uid(&self) -> BTreeMap<String, K> {
        let mut by_uid: BTreeMap<String, K> = BTreeMap::new();
        for object in self.all() {
            if let Some(uid) = object.meta().uid.clone() {
                by_uid.insert(uid, object);
            }
        }
        by_uid
    }

    /// Stops the watch (what it delivered stays).
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl<K> Drop for Watched<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The pods of the Job with this uid (the Job controller's `batch.kubernetes.io/controller-uid`
/// label), every attempt that is still there.
pub async fn job_pods(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    uid: &str,
) -> kube::Result<Vec<k8s_openapi::api::core::v1::Pod>> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}")))
        .await
        .map(|list| list.items)
}

/// Waits until `pick` finds what it wants among the pods of the Job with this uid ([`job_pods`]);
/// returns what it picked.
pub async fn wait_job_pods<T>(
    cluster: &Cluster,
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    uid: &str,
    what: &str,
    pick: impl Fn(Vec<k8s_openapi::api::core::v1::Pod>) -> Option<T>,
) -> T {
    let pick = &pick;
    cluster
        .wait_for(what, BOUND, || async move {
            let listed = job_pods(pods, uid)
                .await
                .map_err(|e| cluster.kube_error(format!("pods of Job {uid}"), e))?;
            Ok(pick(listed))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The Job's condition `type_` with status True.
pub fn job_condition<'a>(
    job: &'a Job,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// When the Job's condition `type_` turned True.
pub fn job_condition_time(
    job: &Job,
    type_: &str,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    job_condition(job, type_).and_then(|c| c.last_transition_time.clone())
}

/// A kind a test can watch ([`watch_applied`], [`Watched`]).
pub trait Watchable:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watchable for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Watches `api` (with `config`) from now on and hands every object version the watch delivers to
/// `on`, in order, until the returned task is aborted.
pub fn watch_applied<K>(
    api: Api<K>,
    config: watcher::Config,
    mut on: impl FnMut(K) + Send + 'static,
) -> JoinHandle<()>
where
    K: Watchable,
{
    tokio::spawn(async move {
        let mut stream = watcher(api, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(next) = stream.next().await {
            if let Ok(object) = next {
                on(object);
            }
        }
    })
}
