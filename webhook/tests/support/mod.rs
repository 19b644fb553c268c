//! The webhook binary as the suites start it: on 127.0.0.1 with a fresh test CA, certificate files
//! and a kubeconfig, killed when dropped so a failing test never leaves it behind.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// The webhook process.
pub struct Webhook {
    pub child: tokio::process::Child,
    pub log: PathBuf,
    pub port: u16,
}

impl Webhook {
    /// The process id (while it runs).
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the webhook is running")
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A CA and a serving certificate for 127.0.0.1 in `dir` (`tls.crt`, `tls.key`); returns the CA PEM.
pub fn write_certs(dir: &Path) -> String {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "nodewright e2e CA");
    let ca_key = KeyPair::generate().expect("key");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA");
    let issuer = Issuer::new(ca_params, ca_key);
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("params");
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &issuer).expect("leaf");
    std::fs::write(dir.join("tls.crt"), cert.pem()).expect("write cert");
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).expect("write key");
    ca_cert.pem()
}

/// Starts the binary with the certificate files of [`write_certs`] in `dir`, talking to the
/// cluster of `kubeconfig`, with `env` on top.
pub fn start_webhook(kubeconfig: &Path, dir: &Path, env: &[(&str, &str)]) -> Webhook {
    let port = free_port();
    let log = dir.join("webhook.log");
    let log_file = std::fs::File::create(&log).expect("log file");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodewright-webhook"));
    command
        .env("KUBECONFIG", kubeconfig)
        .env("JOB_STAGE_TIMEOUT", "1h")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{}", free_port())])
        .arg("--tls-cert-file")
        .arg(dir.join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.join("tls.key"))
        .args(["--log-format", "text"]);
    for (k, v) in env {
        command.env(k, v);
    }
    let child = command
        .stdout(Stdio::from(log_file.try_clone().expect("log clone")))
        .stderr(Stdio::from(log_file))
        .kill_on_drop(true)
        .spawn()
        .expect("webhook binary starts");
    Webhook { child, log, port }
}

/// An HTTPS client that trusts only `ca_pem`.
pub fn https_client(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("ca"))
        .build()
        .expect("client")
}

/// Waits (up to a minute) for `/readyz` to answer 200.
pub async fn wait_ready(webhook: &Webhook, ca_pem: &str) {
    let client = https_client(ca_pem);
    let url = format!("https://127.0.0.1:{}/readyz", webhook.port);
    for _ in 0..300 {
        if client
            .get(&url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("webhook never became ready; its log:\n{}", webhook.log());
}

/// The environment the chart gives the webhook container (its literal `env` values, as
/// `helm template` renders them with default values), without what is this machine's: the listen
/// addresses, the certificate source and the log format.
pub fn chart_env(objects: &[serde_json::Value]) -> Vec<(String, String)> {
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "nw-nodewright-webhook")
        .expect("the chart renders the webhook Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|var| Some((var["name"].as_str()?, var["value"].as_str()?)))
        .filter(|(name, _)| {
            ![
                "WEBHOOK_LISTEN",
                "WEBHOOK_METRICS_LISTEN",
                "WEBHOOK_TLS_SECRET",
                "LOG_FORMAT",
            ]
            .contains(name)
        })
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect()
}

/// As [`start_webhook`], inside `cgroup` (so the chart's resource limits apply to every byte it
/// allocates), configured through the environment only (the cgroup's shell passes no arguments).
pub fn start_webhook_confined(
    kubeconfig: &Path,
    dir: &Path,
    env: &[(String, String)],
    cgroup: &nodewright_e2e::limits::Cgroup,
) -> Webhook {
    let port = free_port();
    let log = dir.join("webhook.log");
    let log_file = std::fs::File::create(&log).expect("log file");
    let mut command = cgroup.command(Path::new(env!("CARGO_BIN_EXE_nodewright-webhook")));
    command
        .env("KUBECONFIG", kubeconfig)
        .env("JOB_STAGE_TIMEOUT", "1h")
        .env("WEBHOOK_LISTEN", format!("127.0.0.1:{port}"))
        .env(
            "WEBHOOK_METRICS_LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env("WEBHOOK_TLS_CERT_FILE", dir.join("tls.crt"))
        .env("WEBHOOK_TLS_KEY_FILE", dir.join("tls.key"))
        .env("LOG_FORMAT", "text");
    for (k, v) in env {
        command.env(k, v);
    }
    let child = command
        .stdout(Stdio::from(log_file.try_clone().expect("log clone")))
        .stderr(Stdio::from(log_file))
        .kill_on_drop(true)
        .spawn()
        .expect("webhook binary starts");
    Webhook { child, log, port }
}
