//! `spec.drainConfig`: how a node is drained before a NodeWright's interrupt (upstream #264, its
//! field names and defaults). Unset, or a field unset: the drain as it always was (evict through
//! the Eviction API, which PodDisruptionBudgets govern; pods without a controller and pods with
//! emptyDir data are evicted too; DaemonSet pods stay; no time bound).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the node is drained before an interrupt.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainConfig {
    /// Delete pods directly instead of evicting them. This bypasses PodDisruptionBudgets: a
    /// workload's availability guarantee no longer holds the drain back. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_eviction: Option<bool>,
    /// Drain pods that use emptyDir volumes (their data is lost). False: such a pod holds the drain
    /// until it goes away on its own. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_empty_dir_data: Option<bool>,
    /// Drain pods no controller manages (nothing recreates them elsewhere). False: such a pod holds
    /// the drain until it goes away on its own. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// Leave DaemonSet pods on the node (their controller would put them back at once). False: they
    /// are drained like the others. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_daemon_sets: Option<bool>,
    /// How long a node may take to drain, from the first pass that found it not drained (a Go
    /// duration such as "10m"): past it the node is reported erroring with a DrainTimeout Warning
    /// Event and stays cordoned; nothing is forced. Unset or "0": no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "self.matches('^[-+]?(0|(([0-9]+(\\\\.[0-9]*)?|\\\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$')",
            "message": "drainConfig.timeout must be a Go duration such as \"10m\", or \"0\" for no bound"
        },
        {
            "rule": "!self.startsWith('-')",
            "message": "drainConfig.timeout must not be negative: use a positive duration, or \"0\" for no bound"
        }
    ]))]
    pub timeout: Option<String>,
    /// The grace period given to each drained pod (a Go duration, rounded up to whole seconds).
    /// Unset: each pod's own terminationGracePeriodSeconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "self.matches('^[-+]?(0|(([0-9]+(\\\\.[0-9]*)?|\\\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$')",
            "message": "drainConfig.gracePeriod must be a Go duration such as \"30s\""
        },
        {
            "rule": "!self.startsWith('-')",
            "message": "drainConfig.gracePeriod must not be negative"
        }
    ]))]
    pub grace_period: Option<String>,
}
