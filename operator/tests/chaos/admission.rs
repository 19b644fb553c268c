//! The webhook in the chaos run's admission path, as a `helm install` puts it there: the chart's
//! webhook configurations (`failurePolicy: Fail`, its rules and timeouts, in URL mode pointing at
//! 127.0.0.1), the webhook binary with the chart's env and inside a cgroup with the chart's default
//! resource limits. Every NodeWright and DeploymentPolicy the trials create, and every update the
//! operator replicas make to them, passes through it while the faults hit the control plane. If
//! it exits it is started again, as the kubelet would, and counted (an OOM kill is a violation).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, PostParams};
use nodewright_certs::CertificateAuthority;
use nodewright_e2e::Cluster;
use nodewright_e2e::limits::{Cgroup, Limits, Usage};
use nodewright_e2e::process::{free_port, peak_rss_kib};
use serde_json::Value;

/// The webhook process and what it needs to be started again.
pub struct Admission {
    command: Vec<(String, String)>,
    program: PathBuf,
    log: PathBuf,
    cgroup: Option<Cgroup>,
    child: Child,
    /// Times it was started again after exiting.
    pub restarts: usize,
    peak_rss_kib: u64,
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("the chart renders no {kind}"))
}

impl Admission {
    /// Renders the chart for a webhook on a free local port, starts the webhook and installs the
    /// chart's webhook configurations with the test CA as their caBundle.
    pub async fn start(cluster: &Cluster, dir: &Path) -> Admission {
        let port = free_port();
        let objects = nodewright_e2e::chart::render(
            cluster,
            &[&format!("--set=webhook.url=https://127.0.0.1:{port}")],
        )
        .await
        .expect("the chart renders");
        let deployment = objects
            .iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "nw-nodewright-webhook")
            .expect("webhook Deployment");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let limits = Limits::from_resources(&container["resources"]).expect("chart limits");
        let cgroup = Cgroup::create(&format!("chaos-{}-webhook", std::process::id()), limits)
            .map_err(|e| eprintln!("chaos: the webhook runs without limits: {e}"))
            .ok();

        // Certificates: a CA of the test's own for the configurations, a serving certificate for
        // 127.0.0.1 (the operator's certificate controller is off in this suite).
        let ca = CertificateAuthority::generate("chaos webhook CA", Duration::from_secs(86_400))
            .expect("CA");
        let serving = ca
            .issue_serving(&["127.0.0.1".to_owned()], Duration::from_secs(86_400))
            .expect("serving certificate");
        std::fs::create_dir_all(dir).expect("webhook dir");
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &serving.cert_pem).expect("write cert");
        std::fs::write(&key, &serving.key_pem).expect("write key");

        // The chart's env: the defaults ConfigMap, then the container's literal values; the listen
        // addresses and the certificate source are this machine's.
        let mut env: Vec<(String, String)> = Vec::new();
        if let Some(data) = find(&objects, "ConfigMap")["data"].as_object() {
            for (k, v) in data {
                env.push((k.clone(), v.as_str().unwrap_or_default().to_owned()));
            }
        }
        for var in container["env"].as_array().into_iter().flatten() {
            if let (Some(name), Some(value)) = (var["name"].as_str(), var["value"].as_str()) {
                env.push((name.to_owned(), value.to_owned()));
            }
        }
        env.retain(|(k, _)| k != "WEBHOOK_TLS_SECRET");
        for (k, v) in [
            ("WEBHOOK_LISTEN", format!("127.0.0.1:{port}")),
            (
                "WEBHOOK_METRICS_LISTEN",
                format!("127.0.0.1:{}", free_port()),
            ),
            ("WEBHOOK_TLS_CERT_FILE", cert.display().to_string()),
            ("WEBHOOK_TLS_KEY_FILE", key.display().to_string()),
            (
                "KUBECONFIG",
                cluster.kubeconfig_path().display().to_string(),
            ),
            ("LOG_FORMAT", "text".to_owned()),
        ] {
            env.retain(|(name, _)| name != k);
            env.push((k.to_owned(), v));
        }
        let program = nodewright_e2e::binaries::workspace_binary(
            "NODEWRIGHT_WEBHOOK_BIN",
            "nodewright-webhook",
        );
        let log = dir.join("webhook.log");
        let child = spawn(&program, &env, &log, cgroup.as_ref());
        let admission = Admission {
            command: env,
            program,
            log,
            cgroup,
            child,
            restarts: 0,
            peak_rss_kib: 0,
        };

        // The configurations, as rendered, trusting the test CA.
        let client = cluster.client().await.expect("client");
        let bundle = ByteString(ca.pem().cert_pem.clone().into_bytes());
        let mut mutating: MutatingWebhookConfiguration =
            serde_json::from_value(find(&objects, "MutatingWebhookConfiguration").clone())
                .expect("mutating configuration");
        for hook in mutating.webhooks.iter_mut().flatten() {
            hook.client_config.ca_bundle = Some(bundle.clone());
        }
        let mut validating: ValidatingWebhookConfiguration =
            serde_json::from_value(find(&objects, "ValidatingWebhookConfiguration").clone())
                .expect("validating configuration");
        for hook in validating.webhooks.iter_mut().flatten() {
            hook.client_config.ca_bundle = Some(bundle.clone());
        }
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &mutating)
            .await
            .expect("mutating configuration created");
        Api::<ValidatingWebhookConfiguration>::all(client)
            .create(&PostParams::default(), &validating)
            .await
            .expect("validating configuration created");
        admission
    }

    /// Starts the webhook again if it has exited (as the kubelet restarts a container); true if
    /// it did.
    pub fn supervise(&mut self) -> bool {
        self.peak_rss_kib = self.peak_rss_kib.max(peak_rss_kib(self.child.id()));
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            return false;
        }
        eprintln!("chaos: the webhook had exited; started again (as a kubelet would)");
        self.child = spawn(
            &self.program,
            &self.command,
            &self.log,
            self.cgroup.as_ref(),
        );
        self.restarts += 1;
        true
    }

    /// Peak RSS (KiB) over its processes, and its cgroup's figures when confined.
    pub fn usage(&mut self) -> (u64, Option<(Limits, Usage)>) {
        self.peak_rss_kib = self.peak_rss_kib.max(peak_rss_kib(self.child.id()));
        (
            self.peak_rss_kib,
            self.cgroup.as_ref().map(|c| (c.limits(), c.usage())),
        )
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(program: &Path, env: &[(String, String)], log: &Path, cgroup: Option<&Cgroup>) -> Child {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("webhook log");
    let mut command = match cgroup {
        Some(c) => c.std_command(program),
        None => Command::new(program),
    };
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::from(file.try_clone().expect("log clone")))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("webhook binary starts")
}
