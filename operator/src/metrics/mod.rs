//! The operator's Prometheus registry (metric names `nodewright_*`, DESIGN §10). Built mutable at
//! startup so each reconciler registers its own metrics, then shared read-only with the admin
//! server that encodes it on every scrape. The NodeWright gauges and reconcile counters live in
//! [`crate::metrics::state`].

pub mod api;
pub mod state;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::api::ApiMetrics;
use crate::metrics::state::StateMetrics;

/// The metrics of the leader election, updated by [`crate::runtime::leader::Elector::with_metrics`].
#[derive(Debug, Clone, Default)]
pub struct LeaderMetrics {
    /// `nodewright_operator_is_leader`: 1 while this replica leads, else 0. Alert when the sum over
    /// replicas is not 1 for longer than a lease duration.
    pub is_leader: Gauge,
    /// `nodewright_operator_leader_transitions_total`: times this replica gained or lost leadership.
    /// A steady climb means the lease flaps (a slow apiserver, too tight timings).
    pub transitions: Counter,
}

/// The registry and the metrics owned by the process itself.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    leader: LeaderMetrics,
    state: StateMetrics,
    api: ApiMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with the `nodewright` prefix and the leader-election metrics registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nodewright");
        let leader = LeaderMetrics::default();
        registry.register(
            "operator_is_leader",
            "Whether this operator replica holds the leader Lease (1) or stands by (0)",
            leader.is_leader.clone(),
        );
        registry.register(
            "operator_leader_transitions",
            "Times this operator replica gained or lost leadership",
            leader.transitions.clone(),
        );
        let state = StateMetrics::registered(&mut registry);
        let api = ApiMetrics::registered(&mut registry);
        Metrics {
            registry,
            leader,
            state,
            api,
        }
    }

    /// Handles on the NodeWright gauges and reconcile counters ([`crate::metrics::state`]).
    pub fn state(&self) -> StateMetrics {
        self.state.clone()
    }

    /// The client's request counter ([`crate::metrics::api`]).
    pub fn api(&self) -> ApiMetrics {
        self.api.clone()
    }

    /// Handles on the leader-election metrics (they share state with the registered ones).
    pub fn leader(&self) -> LeaderMetrics {
        self.leader.clone()
    }

    /// Where reconcilers register their metrics; names get the `nodewright_` prefix.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; a metric's own encoder failing would leave a partial
        // exposition, which Prometheus rejects visibly.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding the metrics failed");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_metrics_are_registered_under_the_product_prefix() {
        let mut metrics = Metrics::new();
        let extra = Gauge::<i64>::default();
        metrics
            .registry_mut()
            .register("packages_in_progress", "test", extra.clone());
        extra.set(4);
        let leader = metrics.leader();
        leader.is_leader.set(1);
        leader.transitions.inc();
        let text = metrics.encode();
        assert!(text.contains("nodewright_operator_is_leader 1"), "{text}");
        assert!(
            text.contains("nodewright_operator_leader_transitions_total 1"),
            "{text}"
        );
        assert!(text.contains("nodewright_packages_in_progress 4"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
