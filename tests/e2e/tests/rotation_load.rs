//! Admission through certificate rotation under load (issue 13, part 2), on the local control
//! plane with the chart installed by helm in its default mode: the kube-apiserver calls the
//! webhook through the chart's Service (`failurePolicy: Fail`), whose two endpoints are two webhook
//! processes run with the chart's env, its ServiceAccount and its resource limits
//! (`rotation/replicas.rs` plays the kubelet and the EndpointSlice controller for them). The
//! operator, also with the chart's env, limits and token, runs the certificate controller in
//! self-managed mode.
//!
//! While 64 clients create and update NodeWrights through the apiserver for the whole run
//! (`rotation/load.rs`), the operator renews the serving certificate, then rotates the CA with its
//! overlap (the new CA joins the published bundle, a serving certificate it signed replaces the
//! old one, the old CA leaves), and then one webhook process is SIGKILLed and comes back. The
//! stored CA and serving certificate are seeded so these fall due at set points of the run (a
//! cluster whose CA nears the end of its life); everything after that is the operator's doing.
//!
//! Checked: no admission fails outside the kill (during rotation or not); the rotation went
//! through every step, seen by the test's own watch of the Secrets, the published caBundle and the
//! certificate each replica serves in a TLS handshake; the processes stayed under their limits
//! (no OOM kill). Printed: failed admissions and p50/p99 latency during rotation, outside it and
//! while a replica is down; each process's peak memory against its limit.
//!
//! `rotation_under_load` (the CI variant, about 80 s of load) runs in `cargo test`;
//! `tests/chaos/rotation.sh [SECONDS] [CLIENTS]` runs `rotation_under_load_long`.

mod chart_support;
mod rotation;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chart_support::services::{Listen, operator_command, spawn_logged, token_kubeconfig};
use chart_support::{chart_dir, container, env, find, parse_manifest};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use nodewright_certs::time::OffsetDateTime;
use nodewright_certs::{CertificateAuthority, PemPair, Validity};
use nodewright_e2e::limits::{Cgroup, Limits, Usage};
use nodewright_e2e::{Cluster, ClusterOptions};
use nodewright_operator::webhook_certs::Settings;
use nodewright_shared::api::NodeWright;
use rotation::observe::{self, Timeline};
use rotation::replicas::{Happening, Replica, Setup, peak_rss_kib};
use rotation::report::{self, Phase, Window};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const REL: &str = "nw";
/// Time from seeding the material to the start of the load: the operator publishes the bundle,
/// both replicas load the certificate and pass their readiness probe. The run fails, saying so,
/// if setup takes longer. Setup takes seconds on an idle machine; 30 s was once too short on a
/// machine running two end-to-end suites beside it, and the seeded certificates then fell due
/// before the load began. The load starts at this mark whatever setup took.
const SETUP: Duration = Duration::from_secs(60);

/// When things happen, from the start of the load.
#[derive(Debug, Clone)]
struct Schedule {
    load: Duration,
    clients: usize,
    /// The seeded serving certificate falls due for renewal.
    serving_renew: Duration,
    /// The seeded CA falls due for renewal (the overlap follows).
    ca_renew: Duration,
    /// `certs.selfManaged.propagation`.
    propagation: Duration,
    /// SIGKILL of replica (index) at these points.
    kills: Vec<(Duration, usize)>,
}

impl Schedule {
    fn ci() -> Schedule {
        Schedule {
            load: Duration::from_secs(80),
            clients: 64,
            serving_renew: Duration::from_secs(15),
            ca_renew: Duration::from_secs(35),
            propagation: Duration::from_secs(5),
            kills: vec![(Duration::from_secs(60), 0)],
        }
    }

    /// `NODEWRIGHT_ROTATION_SECONDS` of load (default 600) and `NODEWRIGHT_ROTATION_CLIENTS`
    /// (default 64); the steps at the same fractions of the run as in CI, and one kill of each
    /// replica.
    fn long() -> Schedule {
        let number = |var: &str, default: u64| {
            std::env::var(var)
                .ok()
                .map(|v| {
                    v.parse::<u64>()
                        .unwrap_or_else(|_| panic!("{var}={v:?}: expected a whole number"))
                })
                .unwrap_or(default)
        };
        let secs = number("NODEWRIGHT_ROTATION_SECONDS", 600).max(80) as f64;
        let at = |f: f64| Duration::from_secs_f64(secs * f);
        Schedule {
            load: at(1.0),
            clients: number("NODEWRIGHT_ROTATION_CLIENTS", 64).max(1) as usize,
            serving_renew: at(0.19),
            ca_renew: at(0.44),
            propagation: Duration::from_secs(5),
            kills: vec![(at(0.62), 0), (at(0.85), 1)],
        }
    }
}

/// A validity window whose renewal point (two thirds of its life, as the operator renews) is
/// `due` from now, made a while ago.
fn due_in(due: Duration) -> Validity {
    let now = OffsetDateTime::now_utc();
    let made = nodewright_certs::time::Duration::seconds(600);
    let not_before = now - made;
    let life = (made + nodewright_certs::time::Duration::try_from(due).expect("due")) * 3 / 2;
    Validity {
        not_before,
        not_after: not_before + life,
    }
}

/// The operator's certificate settings from the chart's rendered env.
fn chart_settings(manifest: &[Value], ns: &str) -> Settings {
    let deployment = find(
        manifest,
        "Deployment",
        &format!("{REL}-nodewright-operator"),
    );
    let vars = env(container(deployment));
    Settings::from_lookup(|var| {
        if var == "NAMESPACE" {
            return Some(ns.to_owned());
        }
        vars.iter()
            .find(|(n, _)| n == var)
            .and_then(|(_, v)| v.clone())
    })
    .expect("the chart's certificate settings are valid")
    .expect("self-managed mode")
}

async fn store(secrets: &Api<Secret>, name: &str, data: Vec<(&str, String)>) {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "stringData": data.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
    }))
    .expect("secret");
    secrets
        .patch(
            name,
            &PatchParams::apply("nodewright-e2e").force(),
            &Patch::Apply(&secret),
        )
        .await
        .expect("seed secret");
}

/// A cgroup with the chart's limits for `deployment`'s container, or `None` (said why) when this
/// machine cannot confine processes.
fn confine(manifest: &[Value], deployment: &str, name: &str) -> Option<Cgroup> {
    let resources = &container(find(manifest, "Deployment", deployment))["resources"];
    let limits = Limits::from_resources(resources).expect("chart limits");
    match Cgroup::create(&format!("rotation-{}-{name}", std::process::id()), limits) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("rotation: {name} runs without its limits: {e}");
            None
        }
    }
}

/// Sum of `nodewright_webhook_requests_total` a replica reports (since its last start).
async fn served_requests(metrics: &str) -> u64 {
    counter_sum(metrics, "nodewright_webhook_requests_total").await
}

/// Sum of the counter `name` over its labels, as a replica reports it (since its last start).
async fn counter_sum(metrics: &str, name: &str) -> u64 {
    let text = match reqwest::get(format!("http://{metrics}/metrics")).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => return 0,
    };
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn memory_row(name: &str, peak_rss_kib: u64, usage: Option<Usage>, limit: Option<u64>) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    match (usage, limit) {
        (Some(u), Some(l)) => format!(
            "{name:<12} peak RSS {:>6.1} MiB, cgroup peak {:>6.1} MiB of a {:.0} MiB limit ({:.0}%), OOM kills {}, CPU-throttled periods {}",
            peak_rss_kib as f64 / 1024.0,
            mib(u.peak_bytes),
            mib(l),
            100.0 * u.peak_bytes as f64 / l as f64,
            u.oom_kills,
            u.throttled_periods
        ),
        _ => format!(
            "{name:<12} peak RSS {:>6.1} MiB (not confined)",
            peak_rss_kib as f64 / 1024.0
        ),
    }
}

fn is_subsequence<T: PartialEq>(needle: &[T], hay: &[T]) -> bool {
    let mut it = hay.iter();
    needle.iter().all(|n| it.any(|h| h == n))
}

async fn run(schedule: Schedule) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let added_ip = match rotation::replicas::add_endpoint_ip() {
        Ok(added) => added,
        Err(why) => {
            // As the real-node suite: the Service's endpoints need an address on `lo`, which only
            // root can add.
            nodewright_e2e::skip::skip(
                "rotation_load",
                &format!("the replicas' endpoint address cannot be set up: {why}"),
            );
            return;
        }
    };
    struct RemoveIp(bool);
    impl Drop for RemoveIp {
        fn drop(&mut self) {
            if self.0 {
                rotation::replicas::remove_endpoint_ip();
            }
        }
    }
    let _remove_ip = RemoveIp(added_ip);
    // Built before anything is timed.
    chart_support::services::operator_binary();
    chart_support::services::webhook_binary();
    let cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        install_crds: false,
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster");
    let admin = cluster.client().await.expect("client");
    let ns = cluster
        .create_namespace("rotation")
        .await
        .expect("namespace");
    let work = tempfile::tempdir().expect("tempdir");
    let chart = chart_dir();
    cluster
        .helm(&[
            "install",
            REL,
            &chart.to_string_lossy(),
            "-n",
            &ns,
            "--set=crds.keep=false",
            &format!(
                "--set=certs.selfManaged.propagation={}s",
                schedule.propagation.as_secs()
            ),
        ])
        .await
        .expect("helm install");
    let manifest = parse_manifest(
        &cluster
            .helm(&["get", "manifest", REL, "-n", &ns])
            .await
            .expect("manifest"),
    );
    // The local processes stand in for the Deployments' pods: kwok would run those as fake pods
    // whose (unreachable) IPs the EndpointSlice controller would add to the Service.
    for deployment in ["operator", "webhook"] {
        cluster
            .kubectl(&[
                "scale",
                "deployment",
                &format!("{REL}-nodewright-{deployment}"),
                "-n",
                &ns,
                "--replicas=0",
            ])
            .await
            .expect("scale the chart's Deployment to 0");
    }
    let settings = chart_settings(&manifest, &ns);
    // The suite writes the Service's endpoints itself (Replica::publish_endpoint): without a
    // selector, neither the Endpoints nor the EndpointSlice controller writes any.
    cluster
        .kubectl(&[
            "patch",
            "service",
            &settings.service,
            "-n",
            &ns,
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/spec/selector"}]"#,
        ])
        .await
        .expect("the Service's selector removed");
    let webhook_deployment = format!("{REL}-nodewright-webhook");
    let webhook = container(find(&manifest, "Deployment", &webhook_deployment)).clone();
    let probe_period = Duration::from_secs(
        webhook["readinessProbe"]["periodSeconds"]
            .as_u64()
            .unwrap_or(10),
    );
    let replicas_wanted = find(&manifest, "Deployment", &webhook_deployment)["spec"]["replicas"]
        .as_u64()
        .expect("webhook replicas");
    assert_eq!(replicas_wanted, 2, "the chart runs two webhook replicas");
    let configuration = settings.mutating_configuration.clone();
    let cfg_json = cluster
        .kubectl(&[
            "get",
            "mutatingwebhookconfiguration",
            &configuration,
            "-o",
            "json",
        ])
        .await
        .expect("mutating configuration");
    let cfg: Value = serde_json::from_str(&cfg_json).expect("json");
    for hook in cfg["webhooks"].as_array().expect("webhooks") {
        assert_eq!(hook["failurePolicy"], "Fail", "{hook}");
        assert_eq!(
            hook["clientConfig"]["service"]["name"], settings.service,
            "called through the Service: {hook}"
        );
    }

    // Seed: a CA that falls due at `ca_renew` into the load, a serving certificate it signed that
    // falls due at `serving_renew`.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let ca = CertificateAuthority::generate_with("seeded CA", due_in(SETUP + schedule.ca_renew))
        .expect("CA");
    let serving = ca
        .issue_serving_with(&settings.names(), due_in(SETUP + schedule.serving_renew))
        .expect("serving");
    let PemPair { cert_pem, key_pem } = ca.pem().clone();
    store(
        &secrets,
        &settings.ca_secret,
        vec![
            ("ca.crt", cert_pem.clone()),
            ("ca.key", key_pem),
            ("bundle.crt", cert_pem.clone()),
        ],
    )
    .await;
    store(
        &secrets,
        &settings.tls_secret,
        vec![
            ("tls.crt", serving.cert_pem.clone()),
            ("tls.key", serving.key_pem.clone()),
            ("ca.crt", cert_pem.clone()),
        ],
    )
    .await;
    let seeded = Instant::now();

    // The operator.
    let op_kubeconfig = token_kubeconfig(
        &cluster,
        &ns,
        &format!("{REL}-nodewright-operator"),
        work.path(),
    )
    .await;
    let op_cgroup = confine(&manifest, &format!("{REL}-nodewright-operator"), "operator");
    let op_listen = Listen::local();
    let op_log = work.path().join("operator.log");
    let mut operator = spawn_logged(
        operator_command(
            &manifest,
            REL,
            &ns,
            &op_kubeconfig,
            &format!("{REL}-nodewright-operator-0"),
            &op_listen,
            op_cgroup.as_ref(),
        ),
        &op_log,
    );
    let op_pid = operator.id().expect("operator pid");

    // The two replicas behind the Service.
    let wh_kubeconfig = token_kubeconfig(&cluster, &ns, &webhook_deployment, work.path()).await;
    let setup = Arc::new(Setup {
        manifest: manifest.clone(),
        rel: REL.to_owned(),
        namespace: ns.clone(),
        service: settings.service.clone(),
        kubeconfig: wh_kubeconfig,
        probe_period,
        slices: Api::namespaced(admin.clone(), &ns),
        endpoints: Api::namespaced(admin.clone(), &ns),
        published: Default::default(),
    });
    let history: Arc<Mutex<Vec<Happening>>> = Arc::default();
    let replicas: Vec<Arc<Replica>> = ["a", "b"]
        .iter()
        .map(|name| {
            Arc::new(Replica::new(
                name,
                work.path(),
                confine(&manifest, &webhook_deployment, &format!("webhook-{name}")),
                history.clone(),
            ))
        })
        .collect();
    let stop_replicas = CancellationToken::new();
    let mut replica_tasks = Vec::new();
    for r in &replicas {
        r.publish_endpoint(&setup).await;
        replica_tasks.push(tokio::spawn(
            r.clone().run(setup.clone(), stop_replicas.clone()),
        ));
    }

    // The test's own watch of the material.
    let timeline: Arc<Mutex<Timeline>> = Arc::default();
    let stop_watch = CancellationToken::new();
    let watcher = tokio::spawn(observe::watch(
        observe::Sources {
            client: admin.clone(),
            secrets: secrets.clone(),
            ca_secret: settings.ca_secret.clone(),
            tls_secret: settings.tls_secret.clone(),
            configuration: configuration.clone(),
            replicas: replicas
                .iter()
                .map(|r| (r.name.clone(), r.listen.serve.clone()))
                .collect(),
        },
        timeline.clone(),
        stop_watch.clone(),
    ));
    let logs = || {
        let mut out = format!(
            "operator log:\n{}",
            std::fs::read_to_string(&op_log).unwrap_or_default()
        );
        for r in &replicas {
            out.push_str(&format!(
                "\nwebhook {} log (tail):\n{}",
                r.name,
                std::fs::read_to_string(&r.log)
                    .unwrap_or_default()
                    .lines()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
        out
    };

    // Ready: the seeded bundle published everywhere, both replicas serving the seeded certificate
    // and ready, and one NodeWright admitted through the Service.
    let nodewrights: Api<NodeWright> = Api::all(admin.clone());
    let first = serde_json::from_value::<NodeWright>(json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
        "metadata": {"name": format!("{ns}-first")},
        "spec": {"nodeSelectors": {"matchLabels": {"nodewright-e2e/none": "none"}},
                 "packages": {"base": {"version": "1.0.0", "image": "ghcr.io/example/base"}}},
    }))
    .expect("NodeWright");
    // What the last look at the setup saw, for the message when it never completes.
    let last_setup: Mutex<String> = Mutex::default();
    let ready = cluster
        .wait_for(
            "setup: bundle published, both replicas ready, an admission through the Service",
            SETUP,
            || async {
                let t = timeline.lock().map(|t| {
                    t.published().last().cloned() == Some(vec![Some(0)])
                        && replicas
                            .iter()
                            .all(|r| t.served(&r.name).last() == Some(&Some(0)))
                });
                let h = history.lock().map(|h| {
                    replicas.iter().all(|r| {
                        h.iter()
                            .rev()
                            .find(|e| e.replica == r.name && e.what != "started")
                            .is_some_and(|e| e.what == "ready")
                    })
                });
                // No slice of the EndpointSlice controller names an endpoint. It wrote one for
                // the chart's fake pods before the Deployment was scaled down and the selector
                // removed, and it leaves the slices of a Service without a selector as they are:
                // those endpoints (unreachable kwok pod IPs) are deleted here until none is left.
                let controllers = ListParams::default().labels(&format!(
                    "kubernetes.io/service-name={},endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io",
                    settings.service
                ));
                let pods = setup
                    .slices
                    .list(&controllers)
                    .await
                    .map(|l| l.items.iter().map(|s| s.endpoints.len()).sum::<usize>())
                    .unwrap_or(1);
                if pods > 0 {
                    let _ = setup
                        .slices
                        .delete_collection(&Default::default(), &controllers)
                        .await;
                }
                let mut note = format!(
                    "bundle published and served: {t:?}, replicas ready: {h:?}, endpoints of the \
                     controller's slice: {pods}"
                );
                let created = if t.unwrap_or(false) && h.unwrap_or(false) && pods == 0 {
                    match nodewrights.create(&PostParams::default(), &first).await {
                        Ok(_) => Some(()),
                        Err(e) => {
                            note.push_str(&format!(", admission through the Service: {e}"));
                            None
                        }
                    }
                } else {
                    None
                };
                if let Ok(mut last) = last_setup.lock() {
                    *last = note;
                }
                Ok(created)
            },
        )
        .await;
    if let Err(e) = ready {
        let last = last_setup.lock().map(|l| l.clone()).unwrap_or_default();
        panic!("{e}\nlast look at the setup: {last}\n{}", logs());
    }
    let setup_took = seeded.elapsed();
    assert!(
        setup_took < SETUP,
        "setup took {setup_took:?}, more than the {SETUP:?} the seeded certificates allow"
    );
    tokio::time::sleep(SETUP - setup_took).await;

    // The load, the kills.
    let load_start = Instant::now();
    let config = cluster.config().await.expect("config");
    let stop_load = CancellationToken::new();
    let clients: Vec<_> = (0..schedule.clients)
        .map(|id| {
            tokio::spawn(rotation::load::client(
                config.clone(),
                format!("{ns}-load"),
                id,
                stop_load.clone(),
            ))
        })
        .collect();
    let mut served_before_kill = Vec::new();
    for (at, index) in &schedule.kills {
        tokio::time::sleep((load_start + *at).saturating_duration_since(Instant::now())).await;
        let counts: Vec<u64> =
            futures::future::join_all(replicas.iter().map(|r| served_requests(&r.listen.metrics)))
                .await;
        served_before_kill.push(counts);
        replicas[*index].kill();
    }
    tokio::time::sleep((load_start + schedule.load).saturating_duration_since(Instant::now()))
        .await;
    stop_load.cancel();
    let load_end = Instant::now();
    let mut samples = Vec::new();
    for c in clients {
        samples.extend(c.await.expect("client task"));
    }
    let served_at_end: Vec<u64> =
        futures::future::join_all(replicas.iter().map(|r| served_requests(&r.listen.metrics)))
            .await;
    let shed_at_end: Vec<u64> = futures::future::join_all(
        replicas
            .iter()
            .map(|r| counter_sum(&r.listen.metrics, "nodewright_webhook_shed_total")),
    )
    .await;
    let op_peak_kib = peak_rss_kib(op_pid);
    stop_watch.cancel();
    let _ = watcher.await;
    stop_replicas.cancel();
    for t in replica_tasks {
        let _ = t.await;
    }
    let operator_alive = operator.try_wait().ok().flatten().is_none();
    let _ = operator.start_kill();
    let _ = operator.wait().await;

    // Phases.
    let timeline = Arc::try_unwrap(timeline)
        .ok()
        .and_then(|m| m.into_inner().ok())
        .expect("timeline");
    let history = history.lock().map(|h| h.clone()).unwrap_or_default();
    let settle = report::settle(schedule.propagation);
    let rotation_windows = report::merge(
        timeline
            .rotation_steps()
            .into_iter()
            .filter(|t| *t >= load_start)
            .map(|t| Window {
                from: t.checked_sub(Duration::from_millis(500)).unwrap_or(t),
                to: t + settle,
            })
            .collect(),
    );
    let mut down_windows = Vec::new();
    for (i, e) in history.iter().enumerate() {
        if e.what == "killed" {
            let back = history[i..]
                .iter()
                .find(|x| x.replica == e.replica && x.what == "ready")
                .map(|x| x.at)
                .unwrap_or(load_end);
            down_windows.push(Window {
                from: e.at,
                to: back + Duration::from_secs(2),
            });
        }
    }
    let down_windows = report::merge(down_windows);
    let phased: Vec<(Phase, &rotation::load::Sample)> = samples
        .iter()
        .map(|s| (report::phase(s, &rotation_windows, &down_windows), s))
        .collect();
    let down_secs = report::covered(&down_windows, load_start, load_end);
    let rotation_secs = report::covered(&rotation_windows, load_start, load_end)
        - down_windows
            .iter()
            .map(|d| report::covered(&rotation_windows, d.from, d.to))
            .sum::<f64>();
    let total_secs = (load_end - load_start).as_secs_f64();
    let rows: Vec<(Phase, report::Figures)> = [
        (Phase::Outside, total_secs - rotation_secs - down_secs),
        (Phase::Rotation, rotation_secs),
        (Phase::ReplicaDown, down_secs),
    ]
    .into_iter()
    .map(|(p, secs)| (p, report::figures(&phased, p, secs)))
    .collect();

    // The report.
    let rel = |t: Instant| {
        if t >= load_start {
            format!("{:>+7.1}s", (t - load_start).as_secs_f64())
        } else {
            format!("{:>+7.1}s", -(load_start - t).as_secs_f64())
        }
    };
    let mut steps = String::new();
    for (t, c) in &timeline.changes {
        steps.push_str(&format!("  {} {c:?}\n", rel(*t)));
    }
    for e in &history {
        steps.push_str(&format!(
            "  {} replica {} {}\n",
            rel(e.at),
            e.replica,
            e.what
        ));
    }
    let mut memory = vec![memory_row(
        "operator",
        op_peak_kib,
        op_cgroup.as_ref().map(Cgroup::usage),
        op_cgroup.as_ref().and_then(|c| c.limits().memory_bytes),
    )];
    for r in &replicas {
        memory.push(memory_row(
            &format!("webhook {}", r.name),
            r.peak_rss_kib(),
            r.usage(),
            r.cgroup.as_ref().and_then(|c| c.limits().memory_bytes),
        ));
    }
    let failures: Vec<String> = phased
        .iter()
        .filter_map(|(p, s)| {
            s.error
                .as_ref()
                .map(|e| format!("  {} {:?} {:?}: {e}", rel(s.start), p.label(), s.op))
        })
        .collect();
    println!(
        "\n==== admission through certificate rotation under load ====\n\
         {} clients for {:.0} s through the kube-apiserver, two webhook replicas behind the Service; \
         steps seen by the test (times from the start of the load):\n{steps}\n\
         {}\n\
         requests each replica served (its own count since its last start): before each kill {:?}, at the end {:?}; shed (503, retried by the apiserver) at the end {:?}\n\
         memory against the chart's limits:\n  {}\n\
         failed requests: {}\n{}",
        schedule.clients,
        total_secs,
        report::table(&rows),
        served_before_kill,
        served_at_end,
        shed_at_end,
        memory.join("\n  "),
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
    );

    // The rotation's steps, as seen independently: CA 0 then 1; serving 0 (seeded), 1 (renewed by
    // CA 0), 2 (signed by CA 1); bundle {0} -> {0,1} -> {1}; both replicas end serving 2.
    assert_eq!(timeline.cas(), vec![0, 1], "the CA rotated once\n{steps}");
    assert_eq!(
        timeline.servings(),
        vec![0, 1, 2],
        "serving certificate renewed, then replaced by one the new CA signed\n{steps}"
    );
    assert!(
        is_subsequence(
            &[vec![Some(0)], vec![Some(0), Some(1)], vec![Some(1)]],
            &timeline.published()
        ),
        "the new CA joined the published bundle before the old one left\n{steps}"
    );
    for r in &replicas {
        assert_eq!(
            timeline.served(&r.name).last(),
            Some(&Some(2)),
            "replica {} serves the final certificate\n{steps}",
            r.name
        );
    }
    // Every kill came back.
    for (_, index) in &schedule.kills {
        let name = &replicas[*index].name;
        let kills = history
            .iter()
            .filter(|e| &e.replica == name && e.what == "killed")
            .count();
        let readies = history
            .iter()
            .filter(|e| &e.replica == name && e.what == "ready")
            .count();
        assert!(
            readies > kills,
            "replica {name} ready again after its kill\n{steps}"
        );
    }
    let outside = &rows[0].1;
    let during = &rows[1].1;
    assert!(
        outside.requests > 0 && during.requests > 0,
        "requests ran both outside and during rotation\n{}",
        report::table(&rows)
    );
    assert_eq!(
        outside.failed + during.failed,
        0,
        "no admission fails while both replicas run, rotation or not:\n{}\n{}",
        failures.join("\n"),
        logs()
    );
    assert!(operator_alive, "the operator stayed up\n{}", logs());
    for (name, usage) in
        std::iter::once(("operator".to_owned(), op_cgroup.as_ref().map(Cgroup::usage))).chain(
            replicas
                .iter()
                .map(|r| (format!("webhook {}", r.name), r.usage())),
        )
    {
        if let Some(u) = usage {
            assert_eq!(
                u.oom_kills, 0,
                "{name} was OOM-killed under the chart's limit"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotation_under_load() {
    run(Schedule::ci()).await;
}

/// The long run: `tests/chaos/rotation.sh [SECONDS] [CLIENTS]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "long: tests/chaos/rotation.sh"]
async fn rotation_under_load_long() {
    run(Schedule::long()).await;
}
