//! Prometheus metrics of the webhook, served on the plain-HTTP metrics port.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a request count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `mutate-nodewright`, `validate-deploymentpolicy`...
    pub webhook: &'static str,
    /// CREATE, UPDATE, DELETE, CONNECT, or `unknown` when the request could not be read.
    pub operation: &'static str,
    /// `allowed`, `patched`, `denied` or `error` (malformed request).
    pub result: &'static str,
}

/// Label of the latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabel {
    /// The webhook.
    pub webhook: &'static str,
}

/// Label of the shed count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShedLabel {
    /// `connection` (refused at the connection cap, or evicted for a newer one) or `request`
    /// (answered 503 over the in-flight limits).
    pub what: &'static str,
}

type HistogramFamily = Family<WebhookLabel, Histogram, fn() -> Histogram>;

/// All webhook metrics and their registry.
pub struct Metrics {
    registry: Registry,
    /// `nodewright_webhook_requests_total`.
    pub requests: Family<RequestLabels, Counter>,
    /// `nodewright_webhook_request_duration_seconds`.
    pub latency: HistogramFamily,
    /// `nodewright_webhook_certificate_loads`: certificates loaded since start.
    pub certificate_loads: Gauge,
    /// `nodewright_webhook_certificate_expiry_timestamp_seconds`: notAfter of the served
    /// certificate (the expiry alert fires when it nears `time()`).
    pub certificate_expiry: Gauge,
    /// `nodewright_webhook_shed_total`: connections and requests turned away under load.
    pub shed: Family<ShedLabel, Counter>,
}

fn latency_histogram() -> Histogram {
    // 100µs .. ~3.3s: admission p99 should sit far below the apiserver's timeout.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

impl Metrics {
    /// Registers the process collector (`process_*`) and every webhook metric under the
    /// `nodewright_webhook` prefix.
    pub fn new() -> Arc<Self> {
        let mut root = Registry::default();
        nodewright_telemetry::ProcessCollector::register(&mut root);
        let registry = root.sub_registry_with_prefix("nodewright_webhook");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Admission requests by webhook, operation and result",
            requests.clone(),
        );
        let latency: HistogramFamily = Family::new_with_constructor(latency_histogram);
        registry.register(
            "request_duration_seconds",
            "Time to answer an admission request, by webhook",
            latency.clone(),
        );
        let certificate_loads = Gauge::default();
        registry.register(
            "certificate_loads",
            "Serving certificates loaded since start (first load and every reload)",
            certificate_loads.clone(),
        );
        let certificate_expiry = Gauge::default();
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When the served certificate expires (notAfter), in seconds since the Unix epoch",
            certificate_expiry.clone(),
        );
        let shed = Family::<ShedLabel, Counter>::default();
        registry.register(
            "shed",
            "Connections refused or evicted at the connection cap, and requests answered 503 over the in-flight limits",
            shed.clone(),
        );
        Arc::new(Metrics {
            registry: root,
            requests,
            latency,
            certificate_loads,
            certificate_expiry,
            shed,
        })
    }

    /// A registry with one series in every family (an exposition leaves empty families out), for
    /// the generated metrics reference.
    pub fn exemplified() -> Arc<Self> {
        let m = Metrics::new();
        m.requests
            .get_or_create(&RequestLabels {
                webhook: "validate-nodewright",
                operation: "CREATE",
                result: "allowed",
            })
            .inc();
        m.latency
            .get_or_create(&WebhookLabel {
                webhook: "validate-nodewright",
            })
            .observe(0.001);
        m.shed.get_or_create(&ShedLabel { what: "request" }).inc();
        m
    }

    /// The counter of connections turned away.
    pub fn shed_connections(&self) -> Counter {
        self.shed
            .get_or_create(&ShedLabel { what: "connection" })
            .clone()
    }

    /// The counter of requests answered 503.
    pub fn shed_requests(&self) -> Counter {
        self.shed
            .get_or_create(&ShedLabel { what: "request" })
            .clone()
    }

    /// The label names of every metric family the webhook exports, by full name (without the
    /// exposition's `_total`/`_bucket`/`_sum`/`_count` suffixes), for the metrics reference.
    pub fn catalogue() -> Vec<(String, Vec<&'static str>)> {
        let mut out: Vec<(String, Vec<&'static str>)> = vec![
            (
                "nodewright_webhook_requests".into(),
                vec!["webhook", "operation", "result"],
            ),
            (
                "nodewright_webhook_request_duration_seconds".into(),
                vec!["webhook"],
            ),
            ("nodewright_webhook_certificate_loads".into(), vec![]),
            (
                "nodewright_webhook_certificate_expiry_timestamp_seconds".into(),
                vec![],
            ),
            ("nodewright_webhook_shed".into(), vec!["what"]),
        ];
        for process in nodewright_telemetry::process::NAMES {
            out.push(((*process).into(), vec![]));
        }
        out
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
