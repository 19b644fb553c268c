//! The webhook's two replicas as the chart runs them, as local processes, and what the kubelet and
//! the EndpointSlice controller would do for them: each replica is one EndpointSlice endpoint of
//! the chart's webhook Service (the kube-apiserver, with aggregator routing, calls a random ready
//! endpoint per connection), marked ready once the chart's readiness probe (`GET /readyz` over
//! HTTPS, its `periodSeconds`) passes, marked not ready as soon as the process is seen to exit
//! (the kubelet's PLEG relists every second), and restarted at once (a container's first restart
//! has no back-off).
//!
//! The apiserver refuses loopback addresses in an EndpointSlice, so the replicas listen on
//! [`ENDPOINT_IP`], an address this suite adds to the loopback device (as the real node's address
//! is, in tests/controlplane/realnode.sh): the traffic never leaves the machine.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use nodewright_e2e::limits::{Cgroup, Usage};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::chart_support::services::{Listen, free_port, spawn_logged, webhook_command};

/// The replicas' address: on `lo`, outside 127.0.0.0/8.
pub const ENDPOINT_IP: &str = "10.254.253.1";

/// Adds [`ENDPOINT_IP`] to `lo` unless it is there; `Ok(true)` if this call added it (and should
/// remove it), `Err` with the reason when it cannot (not root, no `ip`).
pub fn add_endpoint_ip() -> Result<bool, String> {
    let show = std::process::Command::new("ip")
        .args(["-4", "addr", "show", "dev", "lo"])
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if String::from_utf8_lossy(&show.stdout).contains(&format!("inet {ENDPOINT_IP}/")) {
        return Ok(false);
    }
    let add = std::process::Command::new("ip")
        .args(["addr", "add", &format!("{ENDPOINT_IP}/32"), "dev", "lo"])
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if add.status.success() {
        Ok(true)
    } else {
        Err(format!(
            "ip addr add {ENDPOINT_IP}/32 dev lo: {}",
            String::from_utf8_lossy(&add.stderr).trim()
        ))
    }
}

/// Removes [`ENDPOINT_IP`] from `lo` (best effort).
pub fn remove_endpoint_ip() {
    let _ = std::process::Command::new("ip")
        .args(["addr", "del", &format!("{ENDPOINT_IP}/32"), "dev", "lo"])
        .output();
}

/// The kubelet's PLEG relist period: how soon a container's exit is noticed.
const RELIST: Duration = Duration::from_secs(1);

/// Something that happened to a replica, for the report.
#[derive(Debug, Clone)]
pub struct Happening {
    pub at: Instant,
    pub replica: String,
    pub what: &'static str,
}

/// One replica: its process, its endpoint, its cgroup.
pub struct Replica {
    pub name: String,
    pub listen: Listen,
    pub log: PathBuf,
    pub cgroup: Option<Cgroup>,
    pid: Mutex<Option<u32>>,
    history: Arc<Mutex<Vec<Happening>>>,
    /// Peak RSS (VmHWM, KiB) of each process this replica has run.
    peaks: Mutex<Vec<u64>>,
}

/// What the replicas need to run.
pub struct Setup {
    pub manifest: Vec<Value>,
    pub rel: String,
    pub namespace: String,
    pub service: String,
    pub kubeconfig: PathBuf,
    pub probe_period: Duration,
    pub slices: Api<EndpointSlice>,
    /// The Service's Endpoints object, which the suite writes too ([`Replica::write_endpoints`]).
    pub endpoints: Api<Endpoints>,
    /// Each replica's port and readiness as last written to the Endpoints object (held across the
    /// write, so two replicas' writes never interleave).
    pub published: tokio::sync::Mutex<std::collections::BTreeMap<String, (u16, bool)>>,
}

fn slice_name(service: &str, replica: &str) -> String {
    format!("{service}-local-{replica}")
}

pub use nodewright_e2e::process::peak_rss_kib;

impl Replica {
    pub fn new(
        name: &str,
        dir: &std::path::Path,
        cgroup: Option<Cgroup>,
        history: Arc<Mutex<Vec<Happening>>>,
    ) -> Replica {
        Replica {
            name: name.to_owned(),
            listen: Listen {
                serve: format!("{ENDPOINT_IP}:{}", free_port()),
                metrics: format!("127.0.0.1:{}", free_port()),
            },
            log: dir.join(format!("webhook-{name}.log")),
            cgroup,
            pid: Mutex::new(None),
            history,
            peaks: Mutex::new(Vec::new()),
        }
    }

    fn note(&self, what: &'static str) {
        if let Ok(mut h) = self.history.lock() {
            h.push(Happening {
                at: Instant::now(),
                replica: self.name.clone(),
                what,
            });
        }
    }

    /// The port its HTTPS listener binds.
    pub fn port(&self) -> u16 {
        self.listen
            .serve
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("listen address has a port")
    }

    /// Creates this replica's EndpointSlice (not ready): the Service's endpoint
    /// `ENDPOINT_IP:<port>`.
    pub async fn publish_endpoint(&self, setup: &Setup) {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": slice_name(&setup.service, &self.name),
                "namespace": setup.namespace,
                "labels": {
                    "kubernetes.io/service-name": setup.service,
                    // Not the EndpointSlice controller's: it leaves this slice alone.
                    "endpointslice.kubernetes.io/managed-by": "nodewright-e2e",
                },
            },
            "addressType": "IPv4",
            "ports": [{"name": "https", "port": self.port(), "protocol": "TCP"}],
            "endpoints": [{"addresses": [ENDPOINT_IP], "conditions": {"ready": false}}],
        }))
        .expect("endpoint slice");
        setup
            .slices
            .patch(
                &slice_name(&setup.service, &self.name),
                &PatchParams::apply("nodewright-e2e").force(),
                &Patch::Apply(&slice),
            )
            .await
            .expect("endpoint slice created");
        self.write_endpoints(setup, false)
            .await
            .expect("endpoints written");
    }

    /// The replicas' endpoints as the Service's one Endpoints object too: kube-aggregator's
    /// resolver, which routes the apiserver's calls to a webhook Service, reads Endpoints in 1.31
    /// and 1.32 and EndpointSlices in 1.35 and later. The Service has no selector here (no controller writes either),
    /// and the object is labelled so the mirroring controller makes no slices of it.
    async fn write_endpoints(&self, setup: &Setup, ready: bool) -> Result<(), kube::Error> {
        let mut published = setup.published.lock().await;
        published.insert(self.name.clone(), (self.port(), ready));
        let subsets: Vec<Value> = published
            .values()
            .map(|(port, ready)| {
                let key = if *ready {
                    "addresses"
                } else {
                    "notReadyAddresses"
                };
                json!({
                    key: [{"ip": ENDPOINT_IP}],
                    "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                })
            })
            .collect();
        let endpoints = json!({
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {
                "name": setup.service,
                "namespace": setup.namespace,
                "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
            },
            "subsets": subsets,
        });
        setup
            .endpoints
            .patch(
                &setup.service,
                &PatchParams::apply("nodewright-e2e").force(),
                &Patch::Apply(&endpoints),
            )
            .await
            .map(|_| ())
    }

    async fn set_ready(&self, setup: &Setup, ready: bool) {
        let patch = json!({
            "endpoints": [{"addresses": [ENDPOINT_IP], "conditions": {"ready": ready}}],
        });
        // The apiserver may be briefly busy; the kubelet and the controller retry too.
        for _ in 0..20 {
            let result = setup
                .slices
                .patch(
                    &slice_name(&setup.service, &self.name),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await;
            if result.is_ok() && self.write_endpoints(setup, ready).await.is_ok() {
                self.note(if ready { "ready" } else { "not ready" });
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("replica {}: endpoint never set ready={ready}", self.name);
    }

    /// SIGKILL of the running process (the container's OOM kill or a node's crash look the same
    /// to the apiserver).
    pub fn kill(&self) {
        let pid = self.pid.lock().ok().and_then(|p| *p);
        let Some(pid) = pid else {
            panic!("replica {} has no process to kill", self.name);
        };
        self.note("killed");
        let status = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -KILL {pid}");
    }

    /// Runs the replica until `stop`: start the process, mark it ready when the readiness probe
    /// passes, and on its exit mark it not ready and start it again.
    pub async fn run(self: Arc<Self>, setup: Arc<Setup>, stop: CancellationToken) {
        let probe = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(3))
            .build()
            .expect("probe client");
        let readyz = format!("https://{}/readyz", self.listen.serve);
        loop {
            let command = webhook_command(
                &setup.manifest,
                &setup.rel,
                &setup.kubeconfig,
                &self.listen,
                self.cgroup.as_ref(),
            );
            let mut child = spawn_logged(command, &self.log);
            let pid = child.id().expect("webhook pid");
            if let Ok(mut p) = self.pid.lock() {
                *p = Some(pid);
            }
            self.note("started");
            let mut ready = false;
            let mut last_probe: Option<Instant> = None;
            let mut last_peak = 0;
            let exited = loop {
                if stop.is_cancelled() {
                    break false;
                }
                last_peak = peak_rss_kib(pid).max(last_peak);
                if let Ok(Some(_)) = child.try_wait() {
                    break true;
                }
                let due = last_probe.is_none_or(|t| t.elapsed() >= setup.probe_period);
                if !ready && due {
                    last_probe = Some(Instant::now());
                    let ok = probe
                        .get(&readyz)
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    if ok {
                        self.set_ready(&setup, true).await;
                        ready = true;
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::time::sleep(RELIST) => {}
                }
            };
            if let Ok(mut p) = self.peaks.lock() {
                p.push(last_peak);
            }
            if !exited {
                let _ = child.start_kill();
                let _ = child.wait().await;
                return;
            }
            self.note("exited");
            if ready {
                self.set_ready(&setup, false).await;
            }
        }
    }

    /// Peak RSS (KiB) over the processes it ran.
    pub fn peak_rss_kib(&self) -> u64 {
        self.peaks
            .lock()
            .map(|p| p.iter().copied().max().unwrap_or(0))
            .unwrap_or(0)
    }

    /// The cgroup's figures, when confined.
    pub fn usage(&self) -> Option<Usage> {
        self.cgroup.as_ref().map(Cgroup::usage)
    }
}
