//! Observing a node's health gates ([`nodewright_core::node::health_gates`] decides from what is
//! observed here): the gate's pods on the node (one LIST, by namespace, label selector and node
//! name), a node condition (from the node as just read, never the trimmed cache), and a Prometheus
//! instant query. Anything that cannot be observed does not pass (fail closed).
//!
//! Cost: only nodes waiting at their gates are observed, once per pass over their NodeWright (a
//! pass rechecks every [`GATE_RECHECK`] while one waits): one GET of the node, one LIST per
//! pods-Ready gate, one HTTP query per no-firing-alert gate.

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::core::Selector;
use nodewright_core::node::health_gates::{
    Observation, observe_condition, observe_pods, observe_query_answer, query_for,
};
use nodewright_shared::api::{AlertGate, HealthGates, PodsReadyGate};
use tracing::debug;

use crate::context::Context;

/// Requeue while a node waits at its gates: what they look at (pods, conditions, alerts) changing
/// triggers nothing the operator watches.
pub const GATE_RECHECK: Duration = Duration::from_secs(5);
/// The bound of one Prometheus query (a gate that cannot be asked in time does not pass).
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The HTTP client of the no-firing-alert gates: one per process (its connections are reused),
/// trusting the system's certificate authorities.
static PROMETHEUS: LazyLock<Result<reqwest::Client, String>> = LazyLock::new(|| {
    reqwest::Client::builder()
        .timeout(QUERY_TIMEOUT)
        .build()
        .map_err(|e| format!("no HTTP client for Prometheus queries: {e}"))
});

/// One observation per gate of `gates`, in order, on `node` (read fresh from the API server).
pub async fn observe(ctx: &Context, gates: &HealthGates, node: &Node) -> Vec<Observation> {
    let name = node.name_any();
    let mut out = Vec::with_capacity(gates.gates.len());
    for gate in &gates.gates {
        let observation = if let Some(p) = &gate.pods_ready {
            pods(ctx, p, &name).await
        } else if let Some(c) = &gate.node_condition {
            observe_condition(node, &c.type_)
        } else if let Some(a) = &gate.no_firing_alert {
            alert(a, &name).await
        } else {
            Observation::Unobservable("the gate sets no kind".to_owned())
        };
        debug!(node = %name, gate = %gate.name, ?observation, "health gate observed");
        out.push(observation);
    }
    out
}

/// The gate's pods on the node.
async fn pods(ctx: &Context, gate: &PodsReadyGate, node: &str) -> Observation {
    let selector = match Selector::try_from(gate.selector.clone()) {
        Ok(s) => s.to_string(),
        Err(e) => return Observation::Unobservable(format!("the selector is invalid: {e}")),
    };
    let params = ListParams::default()
        .labels(&selector)
        .fields(&format!("spec.nodeName={node}"));
    match Api::<Pod>::namespaced(ctx.client.clone(), &gate.namespace)
        .list(&params)
        .await
    {
        Ok(list) => observe_pods(&list.items),
        Err(e) => Observation::Unobservable(format!(
            "listing the pods in namespace {} failed: {e}",
            gate.namespace
        )),
    }
}

/// The gate's query for the node, asked of its Prometheus.
async fn alert(gate: &AlertGate, node: &str) -> Observation {
    let client = match &*PROMETHEUS {
        Ok(c) => c,
        Err(e) => return Observation::Unobservable(e.clone()),
    };
    let url = format!("{}/api/v1/query", gate.prometheus_url.trim_end_matches('/'));
    let query = query_for(&gate.query, node);
    let answer = client
        .get(&url)
        .query(&[("query", query.as_str())])
        .send()
        .await;
    match answer {
        Ok(response) => {
            let code = response.status();
            match response.bytes().await {
                // Prometheus answers errors (a bad query: 400, 422) with its JSON error body.
                Ok(body) if code.is_success() || code.is_client_error() => {
                    observe_query_answer(&body)
                }
                Ok(_) => Observation::Unobservable(format!("{url} answered {code}")),
                Err(e) => Observation::Unobservable(format!("reading the answer of {url}: {e}")),
            }
        }
        Err(e) => Observation::Unobservable(format!("asking {url} failed: {e}")),
    }
}
