//! NodeWright for real: the chart's two services and package stages running as real containers on
//! the local control plane's real node (a kubelet with containerd, `up.sh --real-node`), next to
//! kwok nodes.
//!
//! In order, on one cluster (there is one real node per machine, and each step builds on the last):
//! 1. the real node runs beside the kwok nodes, and kwok leaves it to its kubelet;
//! 2. `helm install` of the release's packaged chart with the release images (the operator and
//!    webhook images `release/build.sh` built, linux/amd64 from each image index, pinned by tag
//!    and digest in the chart) into a namespace at Pod Security's `restricted` level (the
//!    package pods run in the chart's privileged package namespace): the operator pods start and
//!    one becomes the leader; the
//!    webhook runs as 2 replicas behind its Service and the apiserver calls it through the Service;
//!    the operator's certificate controller issues its certificate and injects the caBundle;
//! 3. `kubectl apply` of a bad NodeWright is denied by the in-cluster webhook;
//! 4. an expiring serving certificate is renewed by the operator and served by every webhook pod,
//!    with 0 failed admissions while a client loops through the apiserver;
//! 5. the webhook scaled to 3 and back to 2 under the same loop: 0 failed admissions;
//! 6. real package stages through the test agent: a success (its logs in `kubectl logs` and on the
//!    host), a script exiting 3 (the exit code is the evidence), a hanging script killed by the
//!    kubelet at its `stageTimeout` (DeadlineExceeded, retried per JOB_BACKOFF_LIMIT, recorded timed
//!    out with the script's last lines kept in `last-logs`);
//! 7. pause with a stage's container running: the Job is suspended and its container killed; resume
//!    runs the stage again to completion;
//! 8. a `service` interrupt: the node is cordoned, a real workload under a PodDisruptionBudget is
//!    drained without ever dropping below the budget, the interrupt runs (the node's `systemctl`
//!    records `daemon-reload`, then each service's restart, in order), the node is uncordoned;
//! 9. a `reboot` interrupt reboots the real node for real (tests/controlplane/realnode.sh): cordon,
//!    drain under the budget, every container killed (the interrupt's mid-command, the chart's
//!    pods too), the node NotReady and back with a new boot ID (the kubelet's `Rebooted` event),
//!    the interrupt completes in place, `post-interrupt` runs on the new boot, uncordon; never
//!    erroring, every stage run once (the scripts' own record on the host), one reboot;
//! 10. a reboot that never comes back within the interrupt's `stageTimeout` (the node held down)
//!     ends timed out: the Job at its deadline, recorded once the node is back, a StageTimedOut
//!     event; deleting the NodeWright releases the node;
//! 11. with `operator.reapplyOnReboot=true`, a reboot nobody asked NodeWright for (out of band)
//!     makes the operator run the node's packages again on the new boot, each stage once per boot;
//! 12. `helm upgrade` keeps admission and leadership and rotates nothing; `helm uninstall` leaves
//!     nothing behind.
//!
//! Runs when `NODEWRIGHT_IMAGES_DIR` (tests/images/build.sh: the test agent, package and pause
//! images) and `NODEWRIGHT_RELEASE_DIR` (release/build.sh: the chart and the operator and webhook
//! images) are set (tests/run-all.sh sets both), as root. Without them the test fails, unless
//! `NODEWRIGHT_ALLOW_SKIP` names `real_node` (as tests/run-all.sh does when it is not root): then
//! it says so, and the run counts the skip.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nodewright_certs::{CertificateAuthority, PemPair, Validity};
use nodewright_e2e::{Cluster, ClusterOptions, ENV_IMAGES_DIR};
use serde_json::{Value, json};

const REL: &str = "nw";
const BOUND: Duration = Duration::from_secs(240);
const BACKOFF_LIMIT: usize = 1;
const PACKAGE_IMAGE: &str = "nodewright.test/shellscript";
/// release/build.sh's dist: release.json, the packaged chart, the image layouts.
const ENV_RELEASE_DIR: &str = "NODEWRIGHT_RELEASE_DIR";

/// The release under test: release.json of `NODEWRIGHT_RELEASE_DIR`.
fn release() -> (PathBuf, Value) {
    let dir = PathBuf::from(std::env::var_os(ENV_RELEASE_DIR).expect("NODEWRIGHT_RELEASE_DIR"));
    let path = dir.join("release.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: Value = serde_json::from_str(&text).expect("release.json");
    (dir, json)
}

/// The release's packaged chart (appVersion, image tags and digests of the release images).
fn release_chart() -> PathBuf {
    let (dir, json) = release();
    dir.join(json["chart"].as_str().expect("release.json chart"))
}

/// The reference (`registry/name:version@sha256:...`) of the release image `name`.
fn release_image(name: &str) -> String {
    let (_, json) = release();
    json["images"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["name"] == name)
        .and_then(|i| i["reference"].as_str())
        .unwrap_or_else(|| panic!("release.json has no image {name}"))
        .to_owned()
}

/// Everything the steps share.
struct Real<'a> {
    cluster: &'a Cluster,
    client: kube::Client,
    node: String,
    ns: String,
    /// The chart's package namespace (privileged): the Jobs, their pods and ConfigMaps.
    pkg_ns: String,
    work: tempfile::TempDir,
    host_dir: PathBuf,
    operator: String,
    webhook: String,
}

fn enabled() -> bool {
    if std::env::var_os(ENV_IMAGES_DIR).is_some() {
        assert!(
            std::env::var_os(ENV_RELEASE_DIR).is_some(),
            "{ENV_RELEASE_DIR} is not set: the real node runs the release chart and images \
             (release/build.sh --images-only --arch amd64 prints the export; tests/run-all.sh sets it)"
        );
        return true;
    }
    !nodewright_e2e::skip::skip(
        "real_node",
        &format!(
            "{ENV_IMAGES_DIR} is not set (tests/run-all.sh builds the test images with \
             tests/images/build.sh and sets it; the real node needs root)"
        ),
    )
}

#[tokio::test]
async fn chart_and_package_stages_on_a_real_node() {
    if !enabled() {
        return;
    }
    let cluster = Cluster::start(ClusterOptions {
        nodes: 2,
        real_node: true,
        install_crds: false,
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster with a real node");
    let node = cluster
        .real_node()
        .expect("the real node's name")
        .to_owned();
    let client = cluster.client().await.expect("client");
    // The services run at Pod Security's `restricted` level; the privileged package pods run in
    // the chart's package namespace.
    let ns = cluster
        .create_restricted_namespace("nw-real")
        .await
        .expect("namespace");
    let work = tempfile::tempdir().expect("tempdir");
    // The package stages' host directories: under the real node's root, removed with it.
    let host_dir = cluster
        .real_node_host_dir()
        .expect("the real node's host directory")
        .to_owned();
    let t = Real {
        cluster: &cluster,
        client,
        node,
        pkg_ns: format!("{ns}-{REL}-nodewright-packages"),
        ns,
        work,
        host_dir,
        operator: format!("{REL}-nodewright-operator"),
        webhook: format!("{REL}-nodewright-webhook"),
    };
    t.real_node_beside_kwok().await;
    t.install().await;
    t.denies_a_bad_nodewright().await;
    t.renews_the_serving_certificate_under_load().await;
    t.scales_the_webhook_under_load().await;
    t.package_stages().await;
    t.pause_kills_a_running_stage_and_resume_completes_it()
        .await;
    t.service_interrupt_drains_under_a_pdb().await;
    t.reboot_interrupt_reboots_the_node().await;
    t.reboot_that_never_comes_back_times_out().await;
    t.reapply_on_reboot_reruns_after_an_out_of_band_reboot()
        .await;
    t.upgrade_then_uninstall().await;
}

impl Real<'_> {
    async fn kubectl(&self, args: &[&str]) -> String {
        self.cluster
            .kubectl(args)
            .await
            .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
    }

    async fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(&all).await).expect("kubectl -o json")
    }

    /// The `items` of a `kubectl get ... -o json` list.
    async fn items(&self, args: &[&str]) -> Vec<Value> {
        match self.json(args).await {
            Value::Object(mut list) => match list.remove("items") {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// The pods of release REL in the release namespace.
    async fn release_pods(&self) -> Vec<Value> {
        self.items(&[
            "get",
            "pods",
            "-n",
            &self.ns,
            "-l",
            &format!("app.kubernetes.io/instance={REL}"),
        ])
        .await
    }

    async fn wait<T, F, Fut>(&self, what: &str, probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = nodewright_e2e::Result<Option<T>>>,
    {
        self.cluster
            .wait_for(what, BOUND, probe)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", self.describe_on_failure()))
    }

    fn describe_on_failure(&self) -> String {
        let out = std::process::Command::new(
            self.cluster
                .binary("kubectl")
                .unwrap_or_else(|| "kubectl".into()),
        )
        .arg("--kubeconfig")
        .arg(self.cluster.kubeconfig_path())
        .args(["get", "pods,jobs,nw", "-A", "-o", "wide"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
        format!("{out}\n({})", self.cluster.describe())
    }

    /// Step 1: The real node is Ready with a real kubelet; kwok manages only the fake nodes.
    async fn real_node_beside_kwok(&self) {
        let node = self.json(&["get", "node", &self.node]).await;
        let kubelet = node["status"]["nodeInfo"]["kubeletVersion"]
            .as_str()
            .unwrap_or_default();
        assert!(kubelet.starts_with('v') && kubelet != "fake", "{kubelet}");
        assert!(
            node["status"]["nodeInfo"]["containerRuntimeVersion"]
                .as_str()
                .is_some_and(|r| r.starts_with("containerd://")),
            "{}",
            node["status"]["nodeInfo"]
        );
        assert!(
            node["metadata"]["annotations"]["kwok.x-k8s.io/node"].is_null(),
            "the real node must not be kwok's"
        );
        for fake in self.cluster.node_names() {
            let n = self.json(&["get", "node", fake]).await;
            assert_eq!(n["metadata"]["annotations"]["kwok.x-k8s.io/node"], "fake");
        }
    }

    async fn values(&self) -> PathBuf {
        let config = self.cluster.config().await.expect("config");
        let port = config.cluster_url.port_u16().unwrap_or(443).to_string();
        let node_ip =
            std::env::var("NODEWRIGHT_REAL_NODE_IP").unwrap_or_else(|_| "10.254.254.1".into());
        // No kube-proxy here: the in-cluster Service address of the apiserver does not route, so
        // the pods are pointed at its address directly (as kube-proxy-free clusters do).
        let api_env = json!([
            {"name": "KUBERNETES_SERVICE_HOST", "value": node_ip},
            {"name": "KUBERNETES_SERVICE_PORT", "value": port},
        ]);
        let placement = |extra: Value| {
            let mut v = json!({
                // The chart's own image references (the release's tags and digests), imported
                // into the node rather than pulled.
                "image": {"pullPolicy": "Never"},
                "nodeSelector": {"kubernetes.io/hostname": self.node},
                // Never drained off the only real node by the interrupt step.
                "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                 "effect": "NoSchedule"}],
                "extraEnv": api_env,
            });
            if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
                v.extend(extra.clone());
            }
            v
        };
        let operator = placement(json!({
            "agentImage": "nodewright.test/agent:dev",
            "pauseImage": "nodewright.test/pause:dev",
            "packageImagePullPolicy": "Never",
            "copyDirRoot": self.host_dir.join("lib").display().to_string(),
            "agentLogRoot": self.host_dir.join("log").display().to_string(),
            "logFormat": "text",
            // The outcome recorder's reasoning, for whoever reads a failed run's pod logs.
            "logLevel": "nodewright_operator::outcomes=debug,info",
        }));
        let webhook = placement(json!({"logFormat": "text"}));
        let values = json!({
            "operator": operator,
            "webhook": webhook,
            "defaults": {"jobBackoffLimit": BACKOFF_LIMIT},
            "certs": {"selfManaged": {"propagation": "5s"}},
            "crds": {"keep": false},
        });
        let path = self.work.path().join("values.json");
        std::fs::write(&path, values.to_string()).expect("values");
        path
    }

    async fn ready_pods(&self, deployment: &str) -> Vec<Value> {
        self.release_pods()
            .await
            .into_iter()
            .filter(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&format!("{deployment}-")))
                    && p["metadata"]["deletionTimestamp"].is_null()
                    && p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .collect()
    }

    /// The chart's pods ready again (restarted in place after a reboot of the node) and both
    /// webhook replicas behind the Service, before the next step.
    async fn wait_services_back(&self, after: &str) {
        self.wait_ready(&self.operator, 2).await;
        self.wait_ready(&self.webhook, 2).await;
        self.wait(&format!("2 ready webhook endpoints {after}"), || async {
            Ok((self.webhook_endpoints().await.len() == 2).then_some(()))
        })
        .await;
    }

    /// `helm upgrade` with the test's values plus `set` (`--set=...`); returns once both operator
    /// pods run with `env` (name, value), i.e. the upgrade rolled them.
    async fn upgrade_operator(&self, set: &str, env: (&str, &str)) {
        let values = self.work.path().join("values.json");
        let chart = release_chart();
        self.cluster
            .helm(&[
                "upgrade",
                REL,
                &chart.to_string_lossy(),
                "-n",
                &self.ns,
                "-f",
                &values.to_string_lossy(),
                set,
            ])
            .await
            .unwrap_or_else(|e| panic!("helm upgrade {set}: {e}"));
        let (name, value) = env;
        self.wait(
            &format!("2 ready operator pods with {name}={value}"),
            || async {
                let pods = self.ready_pods(&self.operator).await;
                Ok((pods.len() == 2
                    && pods.iter().all(|p| {
                        p["spec"]["containers"][0]["env"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|e| e["name"] == name && e["value"] == value)
                    }))
                .then_some(()))
            },
        )
        .await;
    }

    async fn wait_ready(&self, deployment: &str, replicas: usize) -> Vec<Value> {
        self.wait(
            &format!("{replicas} ready pods of {deployment}"),
            || async {
                let pods = self.ready_pods(deployment).await;
                Ok((pods.len() == replicas).then_some(pods))
            },
        )
        .await
    }

    /// The webhook Service's ready endpoint addresses.
    async fn webhook_endpoints(&self) -> BTreeSet<String> {
        self.items(&[
            "get",
            "endpointslices",
            "-n",
            &self.ns,
            "-l",
            &format!("kubernetes.io/service-name={}", self.webhook),
        ])
        .await
        .into_iter()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"] == true)
        .filter_map(|e| e["addresses"][0].as_str().map(str::to_owned))
        .collect()
    }

    /// Step 2: helm install, for real.
    async fn install(&self) {
        let values = self.values().await;
        let chart = release_chart();
        self.cluster
            .helm(&[
                "install",
                REL,
                &chart.to_string_lossy(),
                "-n",
                &self.ns,
                "-f",
                &values.to_string_lossy(),
            ])
            .await
            .expect("helm install");
        let operators = self.wait_ready(&self.operator, 2).await;
        let webhooks = self.wait_ready(&self.webhook, 2).await;
        // The release images, as the packaged chart pins them (tag and index digest).
        for (pods, image) in [
            (&operators, release_image("nodewright-operator")),
            (&webhooks, release_image("nodewright-webhook")),
        ] {
            for pod in pods {
                assert_eq!(pod["spec"]["containers"][0]["image"], image.as_str());
            }
        }
        for pod in operators.iter().chain(&webhooks) {
            assert_eq!(pod["spec"]["nodeName"], self.node.as_str());
            let c = &pod["spec"]["containers"][0];
            assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
            assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 65532);
            assert!(
                pod["status"]["containerStatuses"][0]["state"]["running"].is_object(),
                "{}",
                pod["status"]
            );
        }
        // One operator pod holds the Lease and says so.
        let names: BTreeSet<String> = operators
            .iter()
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        let leader = self
            .wait("an operator pod holding the Lease", || async {
                let leases = self.items(&["get", "leases", "-n", &self.ns]).await;
                Ok(leases
                    .iter()
                    .filter_map(|l| l["spec"]["holderIdentity"].as_str())
                    .find(|h| names.contains(*h))
                    .map(str::to_owned))
            })
            .await;
        self.wait("the leader logs its leadership", || async {
            let logs = self
                .kubectl(&["logs", "-n", &self.ns, &leader, "--tail=-1"])
                .await;
            Ok(logs.to_lowercase().contains("lead").then_some(()))
        })
        .await;
        // Both webhook pods are the Service's endpoints, and the caBundle is injected.
        self.wait("2 ready webhook endpoints", || async {
            Ok((self.webhook_endpoints().await.len() == 2).then_some(()))
        })
        .await;
        self.wait("caBundle injected by the operator", || async {
            let items = self
                .items(&[
                    "get",
                    "validatingwebhookconfigurations,mutatingwebhookconfigurations",
                    "-l",
                    &format!("app.kubernetes.io/instance={REL}"),
                ])
                .await;
            Ok((items.len() == 2
                && items.iter().all(|h| {
                    h["webhooks"].as_array().into_iter().flatten().all(|w| {
                        w["clientConfig"]["caBundle"]
                            .as_str()
                            .is_some_and(|b| !b.is_empty())
                            && w["clientConfig"]["service"]["name"] == self.webhook.as_str()
                    })
                }))
            .then_some(()))
        })
        .await;
    }

    fn nodewright(&self, name: &str, packages: Value) -> Value {
        json!({
            "apiVersion": "nodewright.nvidia.com/v1alpha1",
            "kind": "NodeWright",
            "metadata": {"name": name},
            "spec": {
                "nodeSelectors": {"matchLabels": {"kubernetes.io/hostname": self.node}},
                "packages": packages,
            }
        })
    }

    fn package(script: &str) -> Value {
        json!({"version": "1.0.0", "image": PACKAGE_IMAGE, "configMap": {"apply.sh": script}})
    }

    async fn apply(&self, object: &Value) -> Result<String, String> {
        let path = self.work.path().join(format!(
            "{}.json",
            object["metadata"]["name"].as_str().unwrap_or("object")
        ));
        std::fs::write(&path, object.to_string()).expect("write manifest");
        self.cluster
            .kubectl(&["apply", "-f", &path.to_string_lossy()])
            .await
            .map_err(|e| e.to_string())
    }

    /// Step 3: The in-cluster webhook denies a bad NodeWright, naming the field.
    async fn denies_a_bad_nodewright(&self) {
        let mut bad = self.nodewright("real-bad", json!({"pkg": Self::package("true")}));
        bad["spec"]["packages"]["pkg"]["dependsOn"] = json!({"pkg": "1.0.0"});
        let err = self
            .apply(&bad)
            .await
            .expect_err("a self-dependency is denied");
        assert!(
            err.contains("admission webhook") && err.contains("denied the request"),
            "{err}"
        );
        assert!(err.contains("dependsOn") || err.contains("cycle"), "{err}");
    }

    /// A client looping admissions through the apiserver (dry-run creates of a valid and an
    /// invalid NodeWright); counts requests and failures until stopped.
    fn admission_loop(&self) -> AdmissionLoop {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let api: Api<nodewright_shared::api::NodeWright> = Api::all(self.client.clone());
        let good: nodewright_shared::api::NodeWright = serde_json::from_value(
            self.nodewright("real-loop", json!({"pkg": Self::package("true")})),
        )
        .expect("valid NodeWright");
        let mut bad = good.clone();
        if let Some(p) = bad.spec.packages.get_mut("pkg") {
            p.depends_on.insert("pkg".into(), "1.0.0".into());
        }
        let task = {
            let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
            tokio::spawn(async move {
                let dry = PostParams {
                    dry_run: true,
                    ..PostParams::default()
                };
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let mut g = good.clone();
                    g.metadata.name = Some(format!("real-loop-{i}"));
                    match api.create(&dry, &g).await {
                        Ok(_) => {}
                        Err(e) => lock(&failures).push(format!("valid #{i}: {e}")),
                    }
                    let mut b = bad.clone();
                    b.metadata.name = Some(format!("real-loop-bad-{i}"));
                    match api.create(&dry, &b).await {
                        Err(kube::Error::Api(s)) if s.message.contains("denied the request") => {}
                        Ok(_) => lock(&failures).push(format!("invalid #{i} admitted")),
                        Err(e) => lock(&failures).push(format!("invalid #{i}: {e}")),
                    }
                    ok.fetch_add(2, Ordering::Relaxed);
                }
            })
        };
        AdmissionLoop {
            stop,
            requests: ok,
            failures,
            task,
        }
    }

    /// The certificate served at `ip:port`, as PEM.
    async fn served_certificate(&self, ip: &str) -> Option<String> {
        let output = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "openssl s_client -connect {ip}:9443 -servername {svc}.{ns}.svc </dev/null \
                 2>/dev/null | openssl x509",
                svc = self.webhook,
                ns = self.ns
            ))
            .output()
            .await
            .ok()?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.contains("BEGIN CERTIFICATE").then_some(text)
    }

    async fn secret(&self, name: &str, key: &str) -> Option<String> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.ns);
        let s = api.get_opt(name).await.ok()??;
        let bytes = s.data?.get(key)?.0.clone();
        String::from_utf8(bytes).ok()
    }

    /// Step 4: the operator renews an expiring serving certificate; every webhook pod serves the
    /// new one; no admission fails meanwhile.
    async fn renews_the_serving_certificate_under_load(&self) {
        let ca_secret = format!("{REL}-nodewright-webhook-ca");
        let tls_secret = self
            .json(&["get", "deploy", &self.webhook, "-n", &self.ns])
            .await["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == "WEBHOOK_TLS_SECRET")
            .and_then(|e| e["value"].as_str())
            .and_then(|v| v.split_once('/').map(|(_, n)| n.to_owned()))
            .expect("WEBHOOK_TLS_SECRET");
        let first = self
            .wait("the operator issued the serving certificate", || async {
                Ok(self.secret(&tls_secret, "tls.crt").await)
            })
            .await;
        let ca = CertificateAuthority::from_pem(&PemPair {
            cert_pem: self.secret(&ca_secret, "ca.crt").await.expect("ca.crt"),
            key_pem: self.secret(&ca_secret, "ca.key").await.expect("ca.key"),
        })
        .expect("the CA parses");
        let names = nodewright_certs::service_names(&self.webhook, &self.ns, "cluster.local");
        let now = nodewright_certs::time::OffsetDateTime::now_utc();
        let expiring = ca
            .issue_serving_with(
                &names,
                Validity::starting_at(
                    now - nodewright_certs::time::Duration::days(89),
                    Duration::from_secs(90 * 86_400),
                )
                .expect("validity"),
            )
            .expect("an expiring certificate");

        let load = self.admission_loop();
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.ns);
        secrets
            .patch(
                &tls_secret,
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {
                    "tls.crt": expiring.cert_pem, "tls.key": expiring.key_pem}})),
            )
            .await
            .expect("plant an expiring certificate");
        let renewed = self
            .wait("the operator renewed the expiring certificate", || async {
                Ok(self
                    .secret(&tls_secret, "tls.crt")
                    .await
                    .filter(|c| *c != expiring.cert_pem && *c != first))
            })
            .await;
        let renewed_der = first_der(&renewed);
        self.wait(
            "every webhook pod serves the renewed certificate",
            || async {
                let endpoints = self.webhook_endpoints().await;
                let mut all = !endpoints.is_empty();
                for ip in &endpoints {
                    let served = self.served_certificate(ip).await;
                    all &= served.as_deref().map(first_der) == Some(renewed_der.clone());
                }
                Ok(all.then_some(()))
            },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        load.finish("certificate renewal");
    }

    /// Step 5: The webhook scaled to 3 and back to 2 while admissions loop: none fails.
    async fn scales_the_webhook_under_load(&self) {
        let load = self.admission_loop();
        tokio::time::sleep(Duration::from_secs(2)).await;
        self.kubectl(&[
            "scale",
            "-n",
            &self.ns,
            "deploy",
            &self.webhook,
            "--replicas=3",
        ])
        .await;
        self.wait_ready(&self.webhook, 3).await;
        self.wait("3 webhook endpoints", || async {
            Ok((self.webhook_endpoints().await.len() == 3).then_some(()))
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        self.kubectl(&[
            "scale",
            "-n",
            &self.ns,
            "deploy",
            &self.webhook,
            "--replicas=2",
        ])
        .await;
        self.wait("the third webhook pod gone", || async {
            let pods = self
                .items(&[
                    "get",
                    "pods",
                    "-n",
                    &self.ns,
                    "-l",
                    "app.kubernetes.io/component=webhook",
                ])
                .await;
            Ok((pods.len() == 2).then_some(()))
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        load.finish("webhook scale 2 -> 3 -> 2");
    }

    async fn status(&self, nodewright: &str) -> Value {
        self.json(&["get", "nodewright", nodewright])
            .await
            .get("status")
            .cloned()
            .unwrap_or(Value::Null)
    }

    async fn package_state(&self, nodewright: &str, package: &str) -> (String, String) {
        let status = self.status(nodewright).await;
        let entry = &status["nodeState"][&self.node][format!("{package}|1.0.0")];
        (
            entry["stage"].as_str().unwrap_or_default().to_owned(),
            entry["state"].as_str().unwrap_or_default().to_owned(),
        )
    }

    async fn jobs_of(&self, nodewright: &str) -> Vec<Value> {
        self.items(&[
            "get",
            "jobs",
            "-n",
            &self.pkg_ns,
            "-l",
            &format!("nodewright.nvidia.com/name={nodewright}"),
        ])
        .await
    }

    async fn pods_of_job(&self, job: &str) -> Vec<Value> {
        self.items(&[
            "get",
            "pods",
            "-n",
            &self.pkg_ns,
            "-l",
            &format!("job-name={job}"),
        ])
        .await
    }

    async fn wait_timed_out_job(&self, nodewright: &str, package: &str) -> Value {
        self.wait(&format!("{package}'s stage recorded timed out"), || async {
            Ok(self.jobs_of(nodewright).await.into_iter().find(|j| {
                j["metadata"]["labels"]["nodewright.nvidia.com/package"]
                    .as_str()
                    .is_some_and(|p| p.starts_with(package))
                    && j["metadata"]["annotations"]["nodewright.nvidia.com/state-recorded"]
                        == "timed-out"
            }))
        })
        .await
    }

    async fn events(&self, ns: Option<&str>, reason: &str) -> Vec<Value> {
        let mut args = vec!["get", "events", "--field-selector"];
        let selector = format!("reason={reason}");
        args.push(&selector);
        match ns {
            Some(ns) => args.extend(["-n", ns]),
            None => args.push("-A"),
        }
        self.items(&args).await
    }

    /// Step 6: Real stages: success, exit 3, and a hang killed at its deadline.
    async fn package_stages(&self) {
        let name = "real-stages";
        let mut hang = Self::package(
            "echo starting to hang; i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done",
        );
        hang["stageTimeout"] = json!("10s");
        let nw = self.nodewright(
            name,
            json!({
                "ok": Self::package("echo hello from ok; echo second line from ok"),
                "fails": Self::package("echo about to fail; exit 3"),
                "hangs": hang,
            }),
        );
        self.apply(&nw).await.expect("apply the stages NodeWright");

        // Success: complete, the script's lines in `kubectl logs` of the retained pod and in the
        // agent's log file on the host.
        self.wait("ok complete", || async {
            let (_, state) = self.package_state(name, "ok").await;
            Ok((state == "complete").then_some(()))
        })
        .await;
        let ok_apply = self
            .jobs_of(name)
            .await
            .into_iter()
            .find(|j| {
                j["metadata"]["labels"]["nodewright.nvidia.com/package"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("ok"))
                    && j["metadata"]["labels"]["nodewright.nvidia.com/stage"] == "apply"
            })
            .expect("ok's apply Job is retained");
        let job_name = ok_apply["metadata"]["name"].as_str().unwrap_or_default();
        let pod = self.pods_of_job(job_name).await;
        let pod = pod.first().expect("ok's apply pod is retained");
        let agent_container = pod["spec"]["initContainers"][1]["name"]
            .as_str()
            .unwrap_or_default();
        let logs = self
            .kubectl(&[
                "logs",
                "-n",
                &self.pkg_ns,
                pod["metadata"]["name"].as_str().unwrap_or_default(),
                "-c",
                agent_container,
            ])
            .await;
        assert!(
            logs.contains("[out]") && logs.contains("hello from ok"),
            "{logs}"
        );

        // Exit 3 on every attempt: the retries are spent, recorded timed out with the exit code as
        // the evidence.
        let fails = self.wait_timed_out_job(name, "fails").await;
        let pods = self
            .pods_of_job(fails["metadata"]["name"].as_str().unwrap_or_default())
            .await;
        assert_eq!(pods.len(), BACKOFF_LIMIT + 1, "attempts: {pods:#?}");
        for p in &pods {
            let codes: Vec<i64> = p["status"]["initContainerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["state"]["terminated"]["exitCode"].as_i64())
                .collect();
            assert!(codes.contains(&3), "{codes:?}");
        }
        assert_eq!(self.package_state(name, "fails").await.1, "erroring");

        // A hang: killed by the kubelet at the 10 s deadline on every attempt, recorded timed out,
        // the script's last lines kept.
        let hangs = self.wait_timed_out_job(name, "hangs").await;
        let hang_job = hangs["metadata"]["name"].as_str().unwrap_or_default();
        let pods = self.pods_of_job(hang_job).await;
        assert_eq!(pods.len(), BACKOFF_LIMIT + 1, "attempts: {pods:#?}");
        for p in &pods {
            assert_eq!(p["status"]["reason"], "DeadlineExceeded", "{}", p["status"]);
        }
        let last_logs = self
            .wait("the last-logs snapshot of the hung stage", || async {
                let job = self
                    .json(&["get", "job", "-n", &self.pkg_ns, hang_job])
                    .await;
                Ok(
                    job["metadata"]["annotations"]["nodewright.nvidia.com/last-logs"]
                        .as_str()
                        .map(str::to_owned),
                )
            })
            .await;
        assert!(last_logs.contains("tick"), "{last_logs}");
        assert_eq!(self.package_state(name, "hangs").await.1, "erroring");

        let timed_out = self.events(None, "StageTimedOut").await;
        let message = |pkg: &str| {
            timed_out
                .iter()
                .filter(|e| e["involvedObject"]["kind"] == "NodeWright")
                .filter_map(|e| e["message"].as_str())
                .find(|m| m.contains(pkg))
                .map(str::to_owned)
                .unwrap_or_default()
        };
        assert!(message("fails").contains("exit code 3"), "{timed_out:#?}");
        assert!(message("hangs").contains("deadline"), "{timed_out:#?}");
        let status = self.status(name).await;
        assert_eq!(status["nodeStatus"][&self.node], "erroring", "{status}");
        // The node itself says so (kubectl describe node).
        let node = self.json(&["get", "node", &self.node]).await;
        let erroring = format!("nodewright.nvidia.com/{name}/Erroring");
        assert!(
            node["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == erroring.as_str() && c["status"] == "True"),
            "no {erroring} condition: {}",
            node["status"]["conditions"]
        );

        self.delete_nodewright(name).await;
    }

    async fn delete_nodewright(&self, name: &str) {
        self.kubectl(&[
            "delete",
            "nodewright",
            name,
            "--wait=true",
            "--timeout=120s",
        ])
        .await;
    }

    /// Step 7: Pause while a stage's container runs; resume.
    async fn pause_kills_a_running_stage_and_resume_completes_it(&self) {
        let name = "real-pause";
        let nw = self.nodewright(
            name,
            json!({"slow": Self::package("echo slow started; sleep 15; echo slow finished")}),
        );
        self.apply(&nw).await.expect("apply");
        let (job, pod) = self
            .wait("slow's agent container running", || async {
                for job in self.jobs_of(name).await {
                    let job_name = job["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    for pod in self.pods_of_job(&job_name).await {
                        let running = pod["status"]["initContainerStatuses"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| c["state"]["running"].is_object());
                        if running {
                            let pod_name = pod["metadata"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned();
                            return Ok(Some((job_name, pod_name)));
                        }
                    }
                }
                Ok(None)
            })
            .await;
        self.kubectl(&[
            "annotate",
            "nodewright",
            name,
            "nodewright.nvidia.com/pause=true",
        ])
        .await;
        self.wait("the Job suspended and its pod gone", || async {
            let j = self.json(&["get", "job", "-n", &self.pkg_ns, &job]).await;
            let pod_left = self
                .pods_of_job(&job)
                .await
                .iter()
                .any(|p| p["metadata"]["name"] == pod.as_str());
            Ok((j["spec"]["suspend"] == true && !pod_left).then_some(()))
        })
        .await;
        // Paused: nothing runs for a while.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            self.pods_of_job(&job).await.is_empty(),
            "a pod ran while paused"
        );
        assert_eq!(self.package_state(name, "slow").await.1, "in_progress");
        self.kubectl(&[
            "annotate",
            "nodewright",
            name,
            "nodewright.nvidia.com/pause-",
        ])
        .await;
        self.wait("slow complete after resume", || async {
            let (_, state) = self.package_state(name, "slow").await;
            Ok((state == "complete").then_some(()))
        })
        .await;
        // The agent's log files on the host (agent contract: <log root>/<nodewright>/<package>/
        // <version>/<step>-<time>.log) hold the run that finished.
        let host_logs = self.host_dir.join("log").join(name);
        let found = walk(&host_logs)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .any(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains("slow finished")));
        assert!(
            found,
            "no agent log under {} has the script's output: {:?}",
            host_logs.display(),
            walk(&host_logs)
        );
        self.delete_nodewright(name).await;
    }

    /// A Deployment of 2 pods preferring the real node, under a PodDisruptionBudget of
    /// minAvailable 1; returns once both run on the real node.
    async fn start_workload(&self) {
        let workload = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "workload", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "workload"}},
                "template": {
                    "metadata": {"labels": {"app": "workload"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 2,
                        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                            "weight": 100,
                            "preference": {"matchExpressions": [{"key": "kubernetes.io/hostname",
                                "operator": "In", "values": [self.node]}]}}]}},
                        "containers": [{"name": "sleep", "image": "nodewright.test/pause:dev",
                                        "imagePullPolicy": "Never"}]
                    }
                }
            }
        });
        let pdb = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "workload-pdb", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "workload"}}}
        });
        self.apply(&workload).await.expect("workload");
        self.apply(&pdb).await.expect("pdb");
        self.wait("2 workload pods running on the real node", || async {
            Ok((self.workload_on_real_node().await == 2).then_some(()))
        })
        .await;
    }

    async fn workload_on_real_node(&self) -> usize {
        self.items(&["get", "pods", "-n", "default", "-l", "app=workload"])
            .await
            .iter()
            .filter(|p| {
                p["spec"]["nodeName"] == self.node.as_str()
                    && p["status"]["phase"] == "Running"
                    && p["metadata"]["deletionTimestamp"].is_null()
            })
            .count()
    }

    async fn stop_workload(&self) {
        self.kubectl(&[
            "delete",
            "-n",
            "default",
            "deploy/workload",
            "pdb/workload-pdb",
        ])
        .await;
    }

    /// Samples the workload's budget (currentHealthy) until finished: the lowest seen.
    fn sample_budget(&self) -> Sampler<u64> {
        let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
            Api::namespaced(self.client.clone(), "default");
        Sampler::start(
            u64::MAX,
            move || {
                let pdbs = pdbs.clone();
                async move {
                    let p = pdbs.get("workload-pdb").await.ok()?;
                    let s = p.status?;
                    s.observed_generation?;
                    Some(s.current_healthy.max(0) as u64)
                }
            },
            |lowest, seen| {
                if let Some(seen) = seen {
                    *lowest = (*lowest).min(seen);
                }
            },
        )
    }

    /// The real node's host commands so far (`host-commands.log`: `<time> <command> <args>`), as
    /// `<command> <args>`.
    fn host_commands(&self) -> Vec<String> {
        let log = self.node_dir().join("host-commands.log");
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' ').map(|(_, cmd)| cmd.trim().to_owned()))
            .collect()
    }

    fn node_dir(&self) -> PathBuf {
        self.cluster
            .real_node_dir()
            .expect("the real node's supervisor directory")
            .to_owned()
    }

    /// The real node's boots (`boots.log`): `(number, boot ID)`.
    fn boots(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(self.node_dir().join("boots.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                Some((f.next()?.to_owned(), f.next()?.to_owned()))
            })
            .collect()
    }

    async fn boot_id(&self) -> String {
        self.json(&["get", "node", &self.node]).await["status"]["nodeInfo"]["bootID"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Step 8: A `service` interrupt: cordon, drain a real workload under its PDB, interrupt (the
    /// node's `systemctl` runs `daemon-reload`, then restarts each service in order), uncordon.
    async fn service_interrupt_drains_under_a_pdb(&self) {
        self.start_workload().await;
        let budget = self.sample_budget();
        let commands_before = self.host_commands().len();

        let name = "real-interrupt";
        let mut svc = Self::package("echo installing the service package");
        svc["interrupt"] = json!({"type": "service",
            "services": ["nodewright-test.service", "nodewright-other.service"]});
        self.apply(&self.nodewright(name, json!({"svc": svc})))
            .await
            .expect("apply");
        self.wait("the node cordoned for the interrupt", || async {
            let n = self.json(&["get", "node", &self.node]).await;
            Ok((n["spec"]["unschedulable"] == true).then_some(()))
        })
        .await;
        self.wait("the workload drained off the real node", || async {
            Ok((self.workload_on_real_node().await == 0).then_some(()))
        })
        .await;
        self.wait("svc complete", || async {
            let (_, state) = self.package_state(name, "svc").await;
            Ok((state == "complete").then_some(()))
        })
        .await;
        self.wait("the node uncordoned", || async {
            let n = self.json(&["get", "node", &self.node]).await;
            Ok((n["spec"]["unschedulable"] != true).then_some(()))
        })
        .await;
        let lowest = budget.finish().await;
        assert!(
            lowest >= 1 && lowest != u64::MAX,
            "the workload dropped to {lowest} healthy pods (minAvailable 1)"
        );

        // The interrupt ran on the node, through the agent, for the named service.
        let interrupt = self
            .jobs_of(name)
            .await
            .into_iter()
            .find(|j| j["metadata"]["labels"]["nodewright.nvidia.com/interrupt"].is_string())
            .expect("the interrupt Job is retained");
        let pods = self
            .pods_of_job(interrupt["metadata"]["name"].as_str().unwrap_or_default())
            .await;
        let pod = pods.first().expect("the interrupt pod is retained");
        assert_eq!(pod["spec"]["nodeName"], self.node.as_str());
        let logs = self
            .kubectl(&[
                "logs",
                "-n",
                &self.pkg_ns,
                pod["metadata"]["name"].as_str().unwrap_or_default(),
                "--all-containers",
            ])
            .await;
        assert!(logs.contains("nodewright-test.service"), "{logs}");
        // The node's systemctl ran: daemon-reload, then the merged services in (sorted) order.
        let commands = self.host_commands().split_off(commands_before);
        assert_eq!(
            commands,
            [
                "systemctl daemon-reload",
                "systemctl restart nodewright-other.service",
                "systemctl restart nodewright-test.service",
            ],
            "the host commands of the service interrupt"
        );

        self.delete_nodewright(name).await;
        self.stop_workload().await;
    }

    /// Step 9: A `reboot` interrupt, for real: the node is cordoned, a real workload under its
    /// PDB drained, the agent's `reboot` reaches the node, which goes down (every container
    /// SIGKILLed, the interrupt's mid-command, the operator's and the webhook's with them), is
    /// seen NotReady and comes back with a new boot ID; the interrupt pod finds its flag and
    /// completes, `post-interrupt` runs on the new boot, the node is uncordoned. No stage ever
    /// erroring, none run twice (the scripts' own record on the host), one reboot.
    async fn reboot_interrupt_reboots_the_node(&self) {
        let old_boot = self.boot_id().await;
        assert!(!old_boot.is_empty(), "the node reports no boot ID");
        let boots_before = self.boots().len();
        let commands_before = self.host_commands().len();
        self.start_workload().await;
        let budget = self.sample_budget();

        let name = "real-reboot";
        // The node's state sampled all along: never erroring.
        let erroring = {
            let api: Api<nodewright_shared::api::NodeWright> = Api::all(self.client.clone());
            let node = self.node.clone();
            Sampler::start(
                Vec::<String>::new(),
                move || {
                    let (api, node) = (api.clone(), node.clone());
                    async move {
                        let mut seen = Vec::new();
                        if let Ok(Some(nw)) = api.get_opt(name).await
                            && let Some(status) = nw.status
                            && let Ok(v) = serde_json::to_value(&status)
                            && let Some(entries) = v["nodeState"][&node].as_object()
                        {
                            for (key, entry) in entries {
                                if entry["state"] == "erroring" {
                                    seen.push(format!("{key}: {entry}"));
                                }
                            }
                        }
                        seen
                    }
                },
                |all, seen| all.extend(seen),
            )
        };
        // Each stage records the boot it ran in, on the host (its scripts run chrooted there).
        let runs = self.host_dir.join("reboot-runs.log");
        let record = |stage: &str| {
            format!(
                "echo \"{stage} $(cat /proc/sys/kernel/random/boot_id)\" >> {}",
                runs.display()
            )
        };
        let mut pkg = Self::package(&record("apply"));
        pkg["configMap"] = json!({
            "apply.sh": record("apply"),
            "apply_check.sh": record("apply_check"),
            "post_interrupt.sh": record("post_interrupt"),
            "post_interrupt_check.sh": record("post_interrupt_check"),
        });
        pkg["interrupt"] = json!({"type": "reboot"});
        pkg["stageTimeout"] = json!("5m");
        self.apply(&self.nodewright(name, json!({"rb": pkg})))
            .await
            .expect("apply");
        self.wait("the node cordoned for the reboot", || async {
            let n = self.json(&["get", "node", &self.node]).await;
            Ok((n["spec"]["unschedulable"] == true).then_some(()))
        })
        .await;
        self.wait("the workload drained off the real node", || async {
            Ok((self.workload_on_real_node().await == 0).then_some(()))
        })
        .await;
        let boot = self
            .wait("the node rebooted (a new boot)", || async {
                Ok(self.boots().get(boots_before).cloned())
            })
            .await;
        self.wait("the kubelet reports the new boot ID", || async {
            Ok((self.boot_id().await == boot.1).then_some(()))
        })
        .await;
        self.wait("rb complete after the reboot", || async {
            let (stage, state) = self.package_state(name, "rb").await;
            Ok((stage == "post-interrupt" && state == "complete").then_some(()))
        })
        .await;
        self.wait("the node uncordoned", || async {
            let n = self.json(&["get", "node", &self.node]).await;
            Ok((n["spec"]["unschedulable"] != true).then_some(()))
        })
        .await;
        let lowest = budget.finish().await;
        let erroring = erroring.finish().await;

        // The boot: new, recorded by the kubelet (its Rebooted event) and seen NotReady between.
        let new_boot = boot.1;
        assert_ne!(new_boot, old_boot, "the boot ID did not change");
        let rebooted = self
            .wait("the kubelet's Rebooted event", || async {
                Ok(self
                    .events(Some("default"), "Rebooted")
                    .await
                    .into_iter()
                    .find(|e| {
                        e["involvedObject"]["name"] == self.node.as_str()
                            && e["message"].as_str().is_some_and(|m| m.contains(&new_boot))
                    }))
            })
            .await;
        eprintln!("real_node: {}", rebooted["message"]);
        assert_eq!(self.boots().len(), boots_before + 1, "exactly one reboot");
        let commands = self.host_commands().split_off(commands_before);
        assert_eq!(commands, ["reboot"], "the host commands of the reboot");
        assert!(
            lowest >= 1 && lowest != u64::MAX,
            "the workload dropped to {lowest} healthy pods (minAvailable 1)"
        );
        assert!(
            erroring.is_empty(),
            "erroring during the reboot: {erroring:#?}"
        );
        let status = self.status(name).await;
        assert_eq!(status["nodeStatus"][&self.node], "complete", "{status}");

        // Every stage ran exactly once, the post-interrupt ones on the new boot.
        let runs = std::fs::read_to_string(&runs).expect("the stages' record");
        let runs: Vec<&str> = runs.lines().collect();
        assert_eq!(
            runs,
            [
                format!("apply {old_boot}"),
                format!("apply_check {old_boot}"),
                format!("post_interrupt {new_boot}"),
                format!("post_interrupt_check {new_boot}"),
            ],
            "each stage once, the post-interrupt ones after the reboot"
        );

        // The interrupt: its Job complete, its container killed by the reboot (the previous run's
        // last state), then restarted in place and done (the agent found its flag).
        let interrupt = self
            .jobs_of(name)
            .await
            .into_iter()
            .find(|j| j["metadata"]["labels"]["nodewright.nvidia.com/interrupt"].is_string())
            .expect("the interrupt Job is retained");
        let pods = self
            .pods_of_job(interrupt["metadata"]["name"].as_str().unwrap_or_default())
            .await;
        let killed: Vec<Value> = pods
            .iter()
            .flat_map(|p| {
                p["status"]["initContainerStatuses"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|c| c["lastState"]["terminated"].as_object().cloned())
            .map(Value::Object)
            .collect();
        eprintln!(
            "real_node: the interrupt's pods after the reboot: {}",
            serde_json::to_string(
                &pods
                    .iter()
                    .map(
                        |p| json!({"name": p["metadata"]["name"], "phase": p["status"]["phase"],
                                    "init": p["status"]["initContainerStatuses"]})
                    )
                    .collect::<Vec<_>>()
            )
            .unwrap_or_default()
        );
        // The kubelet records a container that died with its node as `Unknown`/255 (its shim died
        // with it, so nobody saw the exit); a signal is 137/143. A replacement pod: gone with it.
        // The 1.31 kubelet keeps no last state of a container whose runtime record went with the
        // reboot: it only counts the run again (restartCount 1). The interrupt container is what
        // reboots the node, so its first run was still running when the node went down (the
        // stage record above shows the boot ID change); that second run is the kubelet's answer.
        let gone_with_the_node = pods.len() > 1;
        let run_again = pods.iter().any(|p| {
            p["status"]["initContainerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["name"] == "interrupt" && c["restartCount"].as_i64() >= Some(1))
        });
        assert!(
            gone_with_the_node
                || run_again
                || killed.iter().any(|t| {
                    matches!(t["exitCode"].as_i64(), Some(137 | 143))
                        || (t["exitCode"] == 255 && t["reason"] == "Unknown")
                }),
            "the interrupt container was not killed by the reboot: {pods:#?}"
        );

        // Time from the interrupt's start to post-interrupt complete.
        let post = self
            .jobs_of(name)
            .await
            .into_iter()
            .find(|j| j["metadata"]["labels"]["nodewright.nvidia.com/stage"] == "post-interrupt")
            .expect("the post-interrupt Job is retained");
        let started = interrupt["metadata"]["creationTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        let done = post["status"]["completionTime"]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        if let (Some(started), Some(done)) = (started, done) {
            eprintln!(
                "real_node: reboot interrupt: interrupt Job created {started}, post-interrupt complete {done}: {}s",
                done.duration_since(started).as_secs()
            );
        }

        self.delete_nodewright(name).await;
        self.stop_workload().await;
        // The chart's pods are back (restarted in place after the reboot) before the next step.
        self.wait_services_back("after the reboot").await;
    }

    /// Step 10: A reboot that never comes back within the interrupt's `stageTimeout`: the node
    /// is held down (the supervisor's `hold`), the Job controller ends the interrupt Job at its
    /// deadline, and once the node is back the operator records the interrupt timed out, with the
    /// Job kept as evidence and a StageTimedOut event; deleting the NodeWright releases the node.
    async fn reboot_that_never_comes_back_times_out(&self) {
        let hold = self.node_dir().join("hold");
        std::fs::write(&hold, "held down by real_node.rs").expect("hold the node down");
        let boots_before = self.boots().len();
        let name = "real-reboot-lost";
        let mut pkg = Self::package("echo before the lost reboot");
        pkg["interrupt"] = json!({"type": "reboot"});
        pkg["stageTimeout"] = json!("30s");
        self.apply(&self.nodewright(name, json!({"lost": pkg})))
            .await
            .expect("apply");
        let job = self
            .wait("the interrupt Job ended at its deadline", || async {
                Ok(self.jobs_of(name).await.into_iter().find(|j| {
                    j["metadata"]["labels"]["nodewright.nvidia.com/interrupt"].is_string()
                        && j["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| {
                                matches!(c["type"].as_str(), Some("FailureTarget" | "Failed"))
                                    && c["status"] == "True"
                                    && c["reason"] == "DeadlineExceeded"
                            })
                }))
            })
            .await;
        // Still down all that time: no new boot.
        assert_eq!(self.boots().len(), boots_before, "the node came back");
        let node = self.json(&["get", "node", &self.node]).await;
        let ready = node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .map(|c| c["status"].clone());
        assert_ne!(ready, Some(json!("True")), "a node held down is not Ready");
        std::fs::remove_file(&hold).expect("release the node");
        let job_name = job["metadata"]["name"].as_str().unwrap_or_default();
        let recorded = self
            .wait("the interrupt recorded timed out", || async {
                let j = self
                    .json(&["get", "job", "-n", &self.pkg_ns, job_name])
                    .await;
                Ok(
                    (j["metadata"]["annotations"]["nodewright.nvidia.com/state-recorded"]
                        == "timed-out")
                        .then_some(j),
                )
            })
            .await;
        assert!(
            recorded["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Failed" && c["reason"] == "DeadlineExceeded"),
            "{}",
            recorded["status"]
        );
        let (stage, state) = self.package_state(name, "lost").await;
        assert_eq!((stage.as_str(), state.as_str()), ("interrupt", "erroring"));
        let timed_out = self
            .wait("the StageTimedOut event of the lost reboot", || async {
                Ok(self
                    .events(None, "StageTimedOut")
                    .await
                    .into_iter()
                    .find(|e| {
                        e["involvedObject"]["name"] == name
                            && e["message"].as_str().is_some_and(|m| m.contains("lost"))
                    }))
            })
            .await;
        eprintln!(
            "real_node: the reboot that never came back: {}",
            timed_out["message"]
        );
        assert_eq!(
            self.boots().len(),
            boots_before + 1,
            "one boot after the hold"
        );

        self.delete_nodewright(name).await;
        self.wait("the node uncordoned", || async {
            let n = self.json(&["get", "node", &self.node]).await;
            Ok((n["spec"]["unschedulable"] != true).then_some(()))
        })
        .await;
        self.wait_services_back("after the lost reboot").await;
    }

    /// Step 11: `REAPPLY_ON_REBOOT` (the chart's `operator.reapplyOnReboot`, for ephemeral OS
    /// images): a reboot no NodeWright asked for (out of band: the machine's own `reboot`, as an
    /// administrator's or a kernel update's) makes the operator run the node's packages again, on
    /// the new boot, to completion; nothing runs twice on one boot.
    async fn reapply_on_reboot_reruns_after_an_out_of_band_reboot(&self) {
        self.upgrade_operator(
            "--set=operator.reapplyOnReboot=true",
            ("REAPPLY_ON_REBOOT", "true"),
        )
        .await;

        let name = "real-reapply";
        let runs = self.host_dir.join("reapply-runs.log");
        let record = |stage: &str| {
            format!(
                "echo \"{stage} $(cat /proc/sys/kernel/random/boot_id)\" >> {}",
                runs.display()
            )
        };
        let mut pkg = Self::package(&record("apply"));
        pkg["configMap"] = json!({
            "apply.sh": record("apply"),
            "apply_check.sh": record("apply_check"),
        });
        self.apply(&self.nodewright(name, json!({"ra": pkg})))
            .await
            .expect("apply");
        let old_boot = self.boot_id().await;
        // Complete, and the boot it completed on recorded (what a reboot is detected against).
        self.wait("ra complete with the node's boot ID recorded", || async {
            let (_, state) = self.package_state(name, "ra").await;
            let status = self.status(name).await;
            Ok(
                (state == "complete" && status["nodeBootIds"][&self.node] == old_boot.as_str())
                    .then_some(()),
            )
        })
        .await;

        // Out of band: the node's supervisor is asked directly, as the node's own `reboot` does.
        let boots_before = self.boots().len();
        let request = self.node_dir().join("reboot-request");
        let staged = self.node_dir().join("reboot-request.tmp");
        std::fs::write(&staged, "reboot (out of band, real_node.rs)").expect("reboot request");
        std::fs::rename(&staged, &request).expect("reboot request");
        let boot = self
            .wait("the node rebooted out of band (a new boot)", || async {
                Ok(self.boots().get(boots_before).cloned())
            })
            .await;
        let new_boot = boot.1;
        assert_ne!(new_boot, old_boot, "the boot ID did not change");
        self.wait("the kubelet reports the new boot ID", || async {
            Ok((self.boot_id().await == new_boot).then_some(()))
        })
        .await;
        self.wait("ra applied again on the new boot, complete", || async {
            let ran = std::fs::read_to_string(&runs).unwrap_or_default();
            let (_, state) = self.package_state(name, "ra").await;
            let status = self.status(name).await;
            Ok((ran.contains(&format!("apply_check {new_boot}"))
                && state == "complete"
                && status["nodeBootIds"][&self.node] == new_boot.as_str())
            .then_some(ran))
        })
        .await;
        let ran = std::fs::read_to_string(&runs).expect("the stages' record");
        assert_eq!(
            ran.lines().collect::<Vec<_>>(),
            [
                format!("apply {old_boot}"),
                format!("apply_check {old_boot}"),
                format!("apply {new_boot}"),
                format!("apply_check {new_boot}"),
            ],
            "each stage once per boot, again after the out-of-band reboot"
        );
        assert_eq!(self.boots().len(), boots_before + 1, "exactly one reboot");
        eprintln!("real_node: REAPPLY_ON_REBOOT ran ra again on boot {new_boot}");

        self.delete_nodewright(name).await;
        self.wait_services_back("after the out-of-band reboot")
            .await;
    }

    /// Step 12: helm upgrade keeps admission and rotates nothing; helm uninstall leaves nothing.
    async fn upgrade_then_uninstall(&self) {
        let tls_before = self
            .secret(&format!("{REL}-nodewright-webhook-tls"), "tls.crt")
            .await;
        self.upgrade_operator("--set=operator.logLevel=debug", ("LOG_LEVEL", "debug"))
            .await;
        let load = self.admission_loop();
        tokio::time::sleep(Duration::from_secs(5)).await;
        load.finish("after helm upgrade");
        assert_eq!(
            self.secret(&format!("{REL}-nodewright-webhook-tls"), "tls.crt")
                .await,
            tls_before,
            "helm upgrade rotated the serving certificate"
        );

        self.cluster
            .helm(&["uninstall", REL, "-n", &self.ns, "--wait", "--timeout=180s"])
            .await
            .expect("helm uninstall");
        self.wait("the release namespace emptied", || async {
            let names = self
                .kubectl(&[
                    "get",
                    "deploy,rs,pod,svc,sa,cm,secret,role,rolebinding,pdb,limitrange,lease,job",
                    "-n",
                    &self.ns,
                    "-o",
                    "name",
                ])
                .await;
            Ok(names
                .lines()
                .all(|l| matches!(l, "serviceaccount/default" | "configmap/kube-root-ca.crt"))
                .then_some(()))
        })
        .await;
        let cluster_wide = self
            .kubectl(&[
                "get",
                "clusterrole,clusterrolebinding,mutatingwebhookconfiguration,validatingwebhookconfiguration,crd",
                "-l",
                &format!("app.kubernetes.io/instance={REL}"),
                "-o",
                "name",
            ])
            .await;
        assert!(
            cluster_wide.trim().is_empty(),
            "left behind: {cluster_wide}"
        );
        // Nothing of the release runs on the real node any more.
        let pods = self
            .items(&[
                "get",
                "pods",
                "-A",
                "--field-selector",
                &format!("spec.nodeName={}", self.node),
            ])
            .await;
        assert!(pods.is_empty(), "{pods:#?}");
    }
}

struct AdmissionLoop {
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl AdmissionLoop {
    /// Stops the loop and asserts that every admission answered as expected.
    fn finish(self, during: &str) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.abort();
        let requests = self.requests.load(Ordering::Relaxed);
        let failures = lock(&self.failures).clone();
        eprintln!(
            "real_node: {during}: {requests} admissions through the apiserver, {} failed",
            failures.len()
        );
        assert!(requests > 0, "no admission went through during {during}");
        assert!(
            failures.is_empty(),
            "{} of {requests} admissions failed during {during}: {:#?}",
            failures.len(),
            &failures[..failures.len().min(10)]
        );
    }
}

/// A value folded from a probe run every 200 ms until [`Sampler::finish`].
struct Sampler<T> {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<T>,
}

impl<T: Send + 'static> Sampler<T> {
    fn start<U, F, Fut>(initial: T, mut probe: F, fold: fn(&mut T, U)) -> Self
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = U> + Send,
        U: Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut value = initial;
                while !stop.load(Ordering::Relaxed) {
                    let seen = probe().await;
                    fold(&mut value, seen);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                value
            })
        };
        Sampler { stop, task }
    }

    async fn finish(self) -> T {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the sampler task")
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The DER of the first certificate in `pem`, for comparing what different tools printed.
fn first_der(pem: &str) -> Vec<u8> {
    nodewright_certs::material::bundle_ders(pem)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}
