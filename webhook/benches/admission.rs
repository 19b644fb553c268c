//! The webhook's per-request work for each endpoint: decode the AdmissionReview, default or
//! validate, build the JSON Patch, encode the response (`review` + `Answer::to_json`, what the
//! handler runs), for a 20-package NodeWright and a four-compartment DeploymentPolicy; and the same
//! through the real axum router in process (adds routing, body collection, metrics and the tracing
//! span), without TLS.
//!
//! Times are the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time: on a shared
//! host a wall clock also counts the time other processes hold the CPU.
//! Run: `cargo bench -p nodewright-webhook --bench admission`. Instruction counts of the same work,
//! immune to other load on the machine: `webhook/benches/callgrind.sh`.

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::Request;
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nodewright_shared::defaults::OperatorDefaults;
use nodewright_webhook::admission::{Webhook, review};
use nodewright_webhook::cache::StaticView;
use nodewright_webhook::metrics::Metrics;
use nodewright_webhook::routes::{AppState, Readiness, router};
use nodewright_webhook::tls::CertStore;
use tower::ServiceExt;

/// CPU time of the calling thread.
struct ThreadCpuTime;

fn thread_cpu_now() -> Duration {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID) {
        Ok(t) => Duration::from(t),
        Err(e) => panic!("clock_gettime(CLOCK_THREAD_CPUTIME_ID): {e}"),
    }
}

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_now()
    }
    fn end(&self, started: Duration) -> Duration {
        thread_cpu_now().saturating_sub(started)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

/// Nanoseconds of CPU, shown in the largest unit that keeps the typical value above 1.
struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical < 1e3 {
            (1.0, "ns")
        } else if typical < 1e6 {
            (1e-3, "µs")
        } else {
            (1e-6, "ms")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }
    fn scale_throughputs(
        &self,
        _: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per = match throughput {
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) | Throughput::Elements(n) => {
                *n as f64
            }
            Throughput::Bits(n) => *n as f64,
        };
        values.iter_mut().for_each(|v| *v = per * 1e9 / *v);
        "/s (CPU)"
    }
    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn view() -> StaticView {
    StaticView {
        policies: vec!["policy".into()],
        users: vec![],
        ..StaticView::default()
    }
}

fn handler_work(c: &mut Criterion<ThreadCpuTime>) {
    let defaults = OperatorDefaults::default();
    let view = view();
    for webhook in Webhook::ALL {
        let body = common::body(webhook);
        c.bench_function(&format!("{}/review_and_encode", webhook.name()), |b| {
            b.iter(|| {
                review(webhook, black_box(&body), &defaults, &view)
                    .to_json()
                    .map(|bytes| bytes.len())
            })
        });
    }
}

/// The validating NodeWright review with the blast-radius warnings computed over a cluster of
/// `nodes` nodes (a quarter of them in the NodeWright's `pool: gpu`, spread over the policy's
/// four rack compartments): the selection, compartments and batches the warnings count.
fn blast_radius(c: &mut Criterion<ThreadCpuTime>) {
    let defaults = OperatorDefaults::default();
    let body = common::body(Webhook::ValidateNodeWright);
    let policy: nodewright_shared::api::DeploymentPolicy =
        match serde_json::from_value(common::deployment_policy(true)) {
            Ok(p) => p,
            Err(e) => panic!("policy: {e}"),
        };
    for count in [100_usize, 5_000] {
        let nodes: Vec<k8s_openapi::api::core::v1::Node> = (0..count)
            .map(|i| {
                let labels = serde_json::json!({
                    "pool": if i.is_multiple_of(4) { "gpu" } else { "cpu" },
                    "topology.example.com/rack": format!("r{}a", i % 5),
                    "kubernetes.io/hostname": format!("node-{i}"),
                });
                match serde_json::from_value(
                    serde_json::json!({"metadata": {"name": format!("node-{i}"), "labels": labels}}),
                ) {
                    Ok(n) => n,
                    Err(e) => panic!("node: {e}"),
                }
            })
            .collect();
        let view = StaticView {
            policy_specs: vec![policy.clone()],
            nodes: Some(nodes),
            ..view()
        };
        let warned = review(Webhook::ValidateNodeWright, &body, &defaults, &view)
            .to_json()
            .map(|b| String::from_utf8_lossy(&b).contains("this change"))
            .unwrap_or(false);
        assert!(warned, "the review warns its blast radius");
        c.bench_function(
            &format!("validate-nodewright/blast_radius_{count}_nodes"),
            |b| {
                b.iter(|| {
                    review(
                        Webhook::ValidateNodeWright,
                        black_box(&body),
                        &defaults,
                        &view,
                    )
                    .to_json()
                    .map(|bytes| bytes.len())
                })
            },
        );
    }
}

fn through_router(c: &mut Criterion<ThreadCpuTime>) {
    let state = Arc::new(AppState {
        defaults: OperatorDefaults::default(),
        restrictions: Default::default(),
        cluster: Arc::new(view()),
        metrics: Metrics::new(),
        ready: Readiness::new(CertStore::new()),
    });
    let app = router(state, 8 * 1024 * 1024, Duration::from_secs(10));
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => panic!("tokio runtime: {e}"),
    };
    for webhook in [Webhook::MutateNodeWright, Webhook::ValidateNodeWright] {
        let body = Bytes::from(common::body(webhook));
        let path = format!("/{}", webhook.name());
        c.bench_function(&format!("{}/router", webhook.name()), |b| {
            b.iter(|| {
                runtime.block_on(async {
                    let request = Request::post(path.as_str())
                        .header("content-type", "application/json")
                        .body(Body::from(body.clone()));
                    match request {
                        Ok(r) => app.clone().oneshot(r).await.map(|r| r.status()).ok(),
                        Err(_) => None,
                    }
                })
            })
        });
    }
}

criterion_group! {
    name = admission;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = handler_work, blast_radius, through_router
}
criterion_main!(admission);
