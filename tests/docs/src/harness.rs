//! The example cluster the docs' tested blocks run on: the local control plane (kwok nodes), the
//! operator and the webhook in-process as the chart would run them (operator namespace
//! `nodewright`, its Jobs in `nodewright-packages`, leader election on, the webhook registered by URL with its own CA), their metrics
//! endpoints, and the pod fates a page asks for. One for all pages; [`Env::run_page`] runs a page's
//! steps in order and cleans up what it created.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::batch::v1::Job;
use nodewright_e2e::{Cluster, ClusterOptions};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::pages::{Step, steps, unmatched};

/// The operator's namespace on the example cluster (as the docs' commands name it).
pub const NAMESPACE: &str = "nodewright";
/// The package namespace (the chart's default for `helm install nodewright -n nodewright`): the
/// stage Jobs and their pods, as the docs' commands name it.
pub const PACKAGE_NAMESPACE: &str = "nodewright-packages";
/// Kwok nodes of the example cluster.
pub const NODES: u32 = 4;

type Fates = Arc<Mutex<BTreeMap<String, (String, Vec<(String, String)>)>>>;

/// What went wrong running a page.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// Setting up the cluster or the services.
    #[error("example cluster: {0}")]
    Setup(String),
    /// A page's step failed.
    #[error("{page}:{line}: {message}")]
    Step {
        /// Page path.
        page: String,
        /// Line of the block.
        line: usize,
        /// What failed, with the output.
        message: String,
    },
}

fn setup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> HarnessError + '_ {
    move |e| HarnessError::Setup(format!("{what}: {e}"))
}

/// The running example cluster.
pub struct Env {
    /// The control plane.
    pub cluster: Cluster,
    dir: tempfile_dir::Dir,
    /// Base URL of the operator's `/metrics` (open).
    pub operator_metrics: String,
    /// Base URL of the operator's `/metrics` behind the authentication.
    pub operator_metrics_auth: String,
    /// Base URL of the webhook's `/metrics`.
    pub webhook_metrics: String,
    fates: Fates,
    /// A directory holding only `kubectl-nodewright` (the workspace's), on every shell block's
    /// PATH: `kubectl nodewright ...` runs the plugin of this checkout.
    plugin_dir: PathBuf,
    /// Seconds the operator's clock runs ahead of the system clock (`<!-- test: clock -->`).
    clock_offset: Arc<AtomicI64>,
    /// Starts the operator (again, with a page's settings: `<!-- test: operator -->`).
    launcher: Launcher,
    /// The operator running now.
    operator: tokio::sync::Mutex<RunningOperator>,
    stop: CancellationToken,
    webhook_stop: watch::Sender<bool>,
}

/// A scratch directory removed on drop (no dev-dependency in the library).
mod tempfile_dir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new(prefix: &str) -> std::io::Result<Dir> {
            let path = std::env::temp_dir().join(format!(
                "{prefix}-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or_default()
            ));
            std::fs::create_dir_all(&path)?;
            Ok(Dir(path))
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// `<scratch>/plugin` holding a link to the workspace's `kubectl-nodewright` (built when not
/// current; `NODEWRIGHT_CLI_BIN` names another).
async fn plugin_dir(scratch: &Path) -> Result<PathBuf, HarnessError> {
    let binary = tokio::task::spawn_blocking(|| {
        nodewright_e2e::binaries::workspace_binary_of(
            "NODEWRIGHT_CLI_BIN",
            "nodewright-cli",
            "kubectl-nodewright",
        )
    })
    .await
    .map_err(setup("building kubectl-nodewright"))?;
    let dir = scratch.join("plugin");
    std::fs::create_dir_all(&dir).map_err(setup("plugin directory"))?;
    std::os::unix::fs::symlink(&binary, dir.join("kubectl-nodewright"))
        .map_err(setup("linking kubectl-nodewright"))?;
    Ok(dir)
}

async fn local_listener() -> Result<(TcpListener, String), HarnessError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(setup("binding a local port"))?;
    let addr = listener.local_addr().map_err(setup("local address"))?;
    Ok((listener, format!("http://{addr}")))
}

/// A CA and a serving certificate for 127.0.0.1: (CA PEM, certificate PEM, key PEM).
fn webhook_certs() -> Result<(String, String, String), HarnessError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let mut ca_params =
        CertificateParams::new(Vec::<String>::new()).map_err(setup("CA parameters"))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "nodewright docs CA");
    let ca_key = KeyPair::generate().map_err(setup("CA key"))?;
    let ca = ca_params.self_signed(&ca_key).map_err(setup("CA"))?;
    let issuer = Issuer::new(ca_params, ca_key);
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .map_err(setup("serving parameters"))?;
    let key = KeyPair::generate().map_err(setup("serving key"))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(setup("serving certificate"))?;
    Ok((ca.pem(), cert.pem(), key.serialize_pem()))
}

fn webhook_configurations(port: u16, ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let hook = |name: &str, resource: &str, ops: &str| {
        format!(
            "  - name: {name}.nodewright.nvidia.com\n    admissionReviewVersions: [\"v1\"]\n    sideEffects: None\n    failurePolicy: Fail\n    timeoutSeconds: 10\n    clientConfig:\n      url: https://127.0.0.1:{port}/{name}\n      caBundle: {ca}\n    rules:\n      - apiGroups: [\"nodewright.nvidia.com\"]\n        apiVersions: [\"v1alpha1\"]\n        resources: [\"{resource}\"]\n        operations: [{ops}]\n        scope: Cluster\n"
        )
    };
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: nodewright-docs\nwebhooks:\n{}{}---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: nodewright-docs\nwebhooks:\n{}{}",
        hook("mutate-nodewright", "nodewrights", "\"CREATE\", \"UPDATE\""),
        hook(
            "mutate-deploymentpolicy",
            "deploymentpolicies",
            "\"CREATE\", \"UPDATE\""
        ),
        hook(
            "validate-nodewright",
            "nodewrights",
            "\"CREATE\", \"UPDATE\""
        ),
        hook(
            "validate-deploymentpolicy",
            "deploymentpolicies",
            "\"CREATE\", \"UPDATE\", \"DELETE\""
        ),
    )
}

/// The operator's settings on the example cluster (what the docs pages say it runs with).
pub fn operator_env() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        ("NAMESPACE", NAMESPACE),
        ("PACKAGE_NAMESPACE", PACKAGE_NAMESPACE),
        ("POD_NAME", "nodewright-operator-0"),
        ("LEADER_ELECTION", "true"),
        ("LEASE_NAME", "nodewright-operator"),
        // An attempt waiting on an image is named after 5 s here (the default is 1 m).
        ("IMAGE_PULL_FAILING_AFTER", "5s"),
        // A stage gets 2 attempts here (the default 3 retries take minutes of Job back-off).
        ("JOB_BACKOFF_LIMIT", "1"),
        ("LOG_LEVEL", "warn"),
    ])
}

/// What starting the docs operator takes, kept so a page can restart it with other settings.
struct Launcher {
    kube_config: kube::Config,
    api_metrics: nodewright_operator::metrics::api::ApiMetrics,
    leader: nodewright_operator::metrics::LeaderMetrics,
    state_metrics: nodewright_operator::metrics::nodewright_gauges::StateMetrics,
    options: nodewright_operator::RunOptions,
}

/// The docs operator as it runs now.
struct RunningOperator {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    /// The settings a page added to [`operator_env`].
    extra: Vec<(String, String)>,
}

impl Launcher {
    /// Starts the operator with [`operator_env`] and `extra` (later ones win), until `parent` or
    /// its own token is cancelled.
    fn launch(
        &self,
        parent: &CancellationToken,
        extra: &[(String, String)],
    ) -> Result<RunningOperator, HarnessError> {
        let env = operator_env();
        let config = nodewright_operator::runtime::config::OperatorConfig::from_lookup(|var| {
            extra
                .iter()
                .rev()
                .find(|(k, _)| k == var)
                .map(|(_, v)| v.clone())
                .or_else(|| env.get(var).map(|v| (*v).to_owned()))
        })
        .map_err(setup("operator configuration"))?;
        // As the binary builds it.
        let client = nodewright_operator::runtime::client::build(
            self.kube_config.clone(),
            &self.api_metrics,
        )
        .map_err(setup("operator client"))?;
        let stop = parent.child_token();
        let shutdown = stop.clone();
        let (options, leader, state) = (
            self.options.clone(),
            self.leader.clone(),
            self.state_metrics.clone(),
        );
        let task = tokio::spawn(async move {
            if let Err(e) = nodewright_operator::run_instrumented(
                config,
                client,
                options,
                Some(leader),
                state,
                shutdown,
            )
            .await
            {
                eprintln!("docs operator stopped: {e}");
            }
        });
        Ok(RunningOperator {
            stop,
            task,
            extra: extra.to_vec(),
        })
    }
}

impl Env {
    /// Runs the operator with `extra` settings from now on (none: as it started). The running one
    /// stops first (its reconcilers end, its Lease is released), so one operator leads at a time.
    async fn restart_operator(&self, extra: &[(String, String)]) -> Result<(), HarnessError> {
        let mut running = self.operator.lock().await;
        if running.extra == extra {
            return Ok(());
        }
        running.stop.cancel();
        (&mut running.task)
            .await
            .map_err(setup("stopping the operator"))?;
        *running = self.launcher.launch(&self.stop, extra)?;
        Ok(())
    }

    /// Starts the cluster, the webhook and the operator.
    pub async fn start() -> Result<Env, HarnessError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cluster = Cluster::start(ClusterOptions {
            nodes: NODES,
            name: Some("nodewright-docs".to_owned()),
            ..ClusterOptions::default()
        })
        .await
        .map_err(setup("control plane"))?;
        let dir = tempfile_dir::Dir::new("nodewright-docs").map_err(setup("scratch dir"))?;
        let plugin_dir = plugin_dir(dir.path()).await?;
        for namespace in [NAMESPACE, PACKAGE_NAMESPACE] {
            cluster
                .kubectl(&["create", "namespace", namespace])
                .await
                .map_err(setup("operator namespace"))?;
        }
        let stop = CancellationToken::new();

        // The webhook, in-process, as its binary wires it.
        let (ca, cert, key) = webhook_certs()?;
        let wh_metrics = nodewright_webhook::metrics::Metrics::new();
        let certs = nodewright_webhook::tls::CertStore::with_metrics(
            wh_metrics.certificate_loads.clone(),
            wh_metrics.certificate_expiry.clone(),
        );
        certs.set(
            nodewright_webhook::tls::load_pem(cert.as_bytes(), key.as_bytes())
                .map_err(setup("serving certificate"))?,
        );
        let client = cluster.client().await.map_err(setup("client"))?;
        let ready = nodewright_webhook::routes::Readiness::new(certs.clone());
        let cache = nodewright_webhook::cache::ClusterCache::start(client.clone());
        // The node watch too: the pages show the blast-radius warnings it feeds.
        if !cache.synced().await || !cache.nodes_synced().await {
            return Err(HarnessError::Setup("webhook caches did not sync".into()));
        }
        ready.caches_synced.store(true, Ordering::SeqCst);
        let state = Arc::new(nodewright_webhook::routes::AppState {
            defaults: nodewright_shared::defaults::OperatorDefaults::default(),
            restrictions: Default::default(),
            cluster: Arc::new(cache),
            metrics: wh_metrics.clone(),
            ready,
        });
        let tls = Arc::new(
            nodewright_webhook::tls::server_config(certs).map_err(setup("TLS configuration"))?,
        );
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(setup("webhook port"))?;
        let port = listener.local_addr().map_err(setup("webhook port"))?.port();
        let (webhook_stop, stop_rx) = watch::channel(false);
        tokio::spawn(nodewright_webhook::server::serve_tls(
            listener,
            tls,
            nodewright_webhook::routes::router(state, 8 << 20, Duration::from_secs(10)),
            nodewright_webhook::server::Limits {
                read_timeout: Duration::from_secs(10),
                shutdown_grace: Duration::from_secs(1),
                max_connections: nodewright_webhook::server::DEFAULT_MAX_CONNECTIONS,
            },
            stop_rx,
        ));
        let (wh_listener, webhook_metrics) = local_listener().await?;
        {
            let router = nodewright_webhook::routes::metrics_router(wh_metrics);
            let stop = stop.clone();
            tokio::spawn(async move {
                let _ = axum_serve(wh_listener, router, stop).await;
            });
        }
        let configs = dir.path().join("webhooks.yaml");
        std::fs::write(&configs, webhook_configurations(port, &ca)).map_err(setup("write"))?;
        cluster
            .kubectl(&["apply", "-f", &configs.to_string_lossy()])
            .await
            .map_err(setup("webhook configurations"))?;

        // The operator, in-process, with the binary's metrics wiring and the pod fates as its Job
        // hook.
        let fates: Fates = Arc::default();
        let hook_fates = fates.clone();
        let hook: nodewright_operator::JobHook = Arc::new(move |job: &mut Job| {
            let package = job
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(nodewright_shared::keys::PACKAGE_LABEL))
                .cloned()
                .unwrap_or_default();
            let fates = hook_fates.lock().unwrap_or_else(|e| e.into_inner());
            // The package label is `<package>-<version>`.
            let Some((fate, params)) = fates
                .iter()
                .find(|(p, _)| package.starts_with(&format!("{p}-")))
                .map(|(_, f)| f.clone())
            else {
                return;
            };
            if let Some(template) = job.spec.as_mut().map(|s| &mut s.template) {
                let meta = template.metadata.get_or_insert_with(Default::default);
                meta.labels
                    .get_or_insert_with(Default::default)
                    .insert("nodewright.test/fate".into(), fate);
                let annotations = meta.annotations.get_or_insert_with(Default::default);
                for (k, v) in params {
                    annotations.insert(format!("nodewright.test/{k}"), v);
                }
            }
        });
        let metrics = nodewright_operator::metrics::Metrics::new();
        let kube_config = cluster.config().await.map_err(setup("kube config"))?;
        let api_metrics = metrics.api();
        let leader = metrics.leader();
        let state_metrics = metrics.state();
        let metrics = Arc::new(metrics);
        let readiness = nodewright_operator::runtime::admin::Readiness::waiting_for(["nodes"]);
        let (listener, operator_metrics) = local_listener().await?;
        let (auth_listener, operator_metrics_auth) = local_listener().await?;
        {
            let open =
                nodewright_operator::runtime::admin::router(metrics.clone(), readiness.clone());
            let authed = nodewright_operator::runtime::admin::router_with_auth(
                metrics,
                readiness.clone(),
                Some(nodewright_telemetry::MetricsAuth::new(
                    client.clone(),
                    "/metrics",
                )),
            );
            let (s1, s2) = (stop.clone(), stop.clone());
            tokio::spawn(async move {
                let _ = axum_serve(listener, open, s1).await;
            });
            tokio::spawn(async move {
                let _ = axum_serve(auth_listener, authed, s2).await;
            });
        }
        let clock_offset = Arc::new(AtomicI64::new(0));
        let offset = clock_offset.clone();
        let clock: nodewright_operator::Clock = Arc::new(move || {
            let now = k8s_openapi::jiff::Timestamp::now();
            now.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(
                offset.load(Ordering::SeqCst),
            ))
            .unwrap_or(now)
        });
        let options = nodewright_operator::RunOptions {
            job_hook: Some(hook),
            readiness: Some(readiness),
            clock: Some(clock),
            ..nodewright_operator::RunOptions::default()
        };
        let launcher = Launcher {
            kube_config,
            api_metrics,
            leader,
            state_metrics,
            options,
        };
        let operator = launcher.launch(&stop, &[])?;
        let env = Env {
            cluster,
            dir,
            operator_metrics,
            operator_metrics_auth,
            webhook_metrics,
            fates,
            plugin_dir,
            clock_offset,
            launcher,
            operator: tokio::sync::Mutex::new(operator),
            stop,
            webhook_stop,
        };
        env.wait_admission().await?;
        Ok(env)
    }

    /// Waits until the apiserver calls the webhook (configurations are picked up asynchronously).
    async fn wait_admission(&self) -> Result<(), HarnessError> {
        let probe = crate::repo_dir().join("examples/deploymentpolicy.yaml");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self
                .shell(&format!(
                    "kubectl apply --dry-run=server -f {}",
                    probe.display()
                ))
                .await;
            if out.0 && self.webhook_called().await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HarnessError::Setup(format!(
                    "the apiserver never called the webhook: {}",
                    out.1
                )));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn webhook_called(&self) -> bool {
        match reqwest::get(format!("{}/metrics", self.webhook_metrics)).await {
            Ok(r) => r
                .text()
                .await
                .is_ok_and(|t| t.contains("nodewright_webhook_requests_total{")),
            Err(_) => false,
        }
    }

    /// The environment of every shell block.
    pub fn shell_env(&self) -> Vec<(String, String)> {
        let bin = crate::tools::controlplane_bin()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let path = format!(
            "{bin}:{}:{}",
            self.plugin_dir.display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        );
        vec![
            (
                "NODEWRIGHT_PACKAGE_NAMESPACE".into(),
                PACKAGE_NAMESPACE.into(),
            ),
            ("PATH".into(), path),
            (
                "KUBECONFIG".into(),
                self.cluster.kubeconfig_path().display().to_string(),
            ),
            ("OPERATOR_METRICS".into(), self.operator_metrics.clone()),
            (
                "OPERATOR_METRICS_AUTH".into(),
                self.operator_metrics_auth.clone(),
            ),
            ("WEBHOOK_METRICS".into(), self.webhook_metrics.clone()),
            ("REPO".into(), crate::repo_dir().display().to_string()),
            ("HOME".into(), std::env::var("HOME").unwrap_or_default()),
        ]
    }

    /// Runs `code` in bash: (success, stdout + stderr).
    pub async fn shell(&self, code: &str) -> (bool, String) {
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-euo")
            .arg("pipefail")
            .arg("-c")
            .arg(code)
            .current_dir(crate::repo_dir())
            .env_clear();
        for (k, v) in self.shell_env() {
            cmd.env(k, v);
        }
        match tokio::time::timeout(Duration::from_secs(300), cmd.output()).await {
            Ok(Ok(o)) => {
                let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
                text.push_str(&String::from_utf8_lossy(&o.stderr));
                (o.status.success(), text)
            }
            Ok(Err(e)) => (false, format!("cannot run bash: {e}")),
            Err(_) => (false, "timed out after 300s".into()),
        }
    }

    /// Runs one page's steps, then removes the NodeWrights and DeploymentPolicies it made and
    /// its pod fates.
    pub async fn run_page(&self, path: &Path) -> Result<Duration, HarnessError> {
        let started = Instant::now();
        let page = path
            .strip_prefix(crate::repo_dir())
            .unwrap_or(path)
            .display()
            .to_string();
        let text = std::fs::read_to_string(path).map_err(|e| HarnessError::Step {
            page: page.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        let fail = |line: usize, message: String| HarnessError::Step {
            page: page.clone(),
            line,
            message,
        };
        let mut last = String::new();
        let mut result = Ok(());
        for step in steps(&text) {
            match step {
                Step::Shell { code, line } => {
                    let (ok, out) = self.shell(&code).await;
                    if !ok {
                        result = Err(fail(line, format!("`{code}` failed:\n{out}")));
                        break;
                    }
                    last = out;
                }
                Step::Apply {
                    yaml,
                    rejected,
                    line,
                } => {
                    let file = self.dir.path().join(format!("page-{line}.yaml"));
                    if let Err(e) = std::fs::write(&file, &yaml) {
                        result = Err(fail(line, e.to_string()));
                        break;
                    }
                    let (ok, out) = self
                        .shell(&format!("kubectl apply -f {}", file.display()))
                        .await;
                    if ok == rejected {
                        result = Err(fail(
                            line,
                            format!(
                                "expected the manifest to be {}: {out}",
                                if rejected { "refused" } else { "applied" }
                            ),
                        ));
                        break;
                    }
                    last = out;
                }
                Step::Expect { patterns, line } => {
                    let missing = unmatched(&patterns, &last);
                    if !missing.is_empty() {
                        result = Err(fail(
                            line,
                            format!(
                                "output lacks (in order):\n  {}\noutput was:\n{last}",
                                missing.join("\n  ")
                            ),
                        ));
                        break;
                    }
                }
                Step::Fate {
                    package,
                    fate,
                    params,
                    ..
                } => {
                    let params: Vec<(&str, &str)> = params
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    self.set_fate(&package, &fate, &params);
                }
                Step::Operator { settings, line } => {
                    if let Err(e) = self.restart_operator(&settings).await {
                        result = Err(fail(line, format!("restarting the operator: {e}")));
                        break;
                    }
                }
                Step::Clock { at, line } => match at.parse::<k8s_openapi::jiff::Timestamp>() {
                    Ok(at) => self.set_clock(at),
                    Err(e) => {
                        result = Err(fail(line, format!("clock {at:?}: {e}")));
                        break;
                    }
                },
            }
        }
        self.fates.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.clock_offset.store(0, Ordering::SeqCst);
        let cleanup = self
            .shell(
                "kubectl delete nodewrights --all --wait=true --timeout=120s >/dev/null && \
                 kubectl delete deploymentpolicies --all --wait=true --timeout=60s >/dev/null",
            )
            .await;
        // The next page starts with the operator as it started.
        let restored = self.restart_operator(&[]).await;
        result?;
        restored?;
        if !cleanup.0 {
            return Err(fail(
                0,
                format!("cleaning up after the page: {}", cleanup.1),
            ));
        }
        Ok(started.elapsed())
    }

    /// From now on the operator's clock reads `at`, and runs on from there.
    pub fn set_clock(&self, at: k8s_openapi::jiff::Timestamp) {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        self.clock_offset
            .store(at.as_second().saturating_sub(now), Ordering::SeqCst);
    }

    /// From now on, the stage pods of `package` play `fate` (`none` removes it).
    pub fn set_fate(&self, package: &str, fate: &str, params: &[(&str, &str)]) {
        let mut fates = self.fates.lock().unwrap_or_else(|e| e.into_inner());
        if fate == "none" {
            fates.remove(package);
        } else {
            let params = params
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            fates.insert(package.to_owned(), (fate.to_owned(), params));
        }
    }

    /// Stops the services (the cluster stops when dropped).
    pub fn stop(&self) {
        self.stop.cancel();
        let _ = self.webhook_stop.send(true);
    }

    /// The scratch directory.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

/// Serves a metrics router until `stop`.
async fn axum_serve(
    listener: TcpListener,
    router: axum::Router,
    stop: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}
