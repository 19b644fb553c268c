//! Which pods a drain before an interrupt moves, and how (upstream #264's `drainConfig`, its rules
//! and order): a pod that need not leave is ignored, one that may not be moved under the
//! NodeWright's settings holds the drain (it is never deleted for it), the rest is evicted through
//! the Eviction API (PodDisruptionBudgets apply) or, with `disableEviction`, deleted. And when a
//! drain has taken longer than `drainConfig.timeout`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube_core::ResourceExt;
use nodewright_shared::api::DrainConfig;
use nodewright_shared::duration::GoDuration;

/// The drain settings of a NodeWright, defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainOptions {
    /// Delete instead of evict (bypasses PodDisruptionBudgets).
    pub disable_eviction: bool,
    /// Pods with emptyDir volumes are drained (else they hold the drain).
    pub delete_empty_dir_data: bool,
    /// Pods without a controller are drained (else they hold the drain).
    pub force: bool,
    /// DaemonSet pods stay.
    pub ignore_daemon_sets: bool,
    /// The grace period of each eviction or deletion, in whole seconds (`None`: the pod's own).
    pub grace_period_seconds: Option<u32>,
    /// How long the drain may take (`None`: no bound).
    pub timeout: Option<Duration>,
}

impl Default for DrainOptions {
    /// The drain without a `drainConfig`: evict, emptyDir and unmanaged pods included, DaemonSet
    /// pods left, no grace override, no bound.
    fn default() -> Self {
        DrainOptions {
            disable_eviction: false,
            delete_empty_dir_data: true,
            force: true,
            ignore_daemon_sets: true,
            grace_period_seconds: None,
            timeout: None,
        }
    }
}

/// A `drainConfig` duration that is not a non-negative Go duration (admission refuses it; an object
/// that got in without the webhook is reported, not guessed at).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "drainConfig.{field} {value:?} is not a non-negative Go duration: write one such as \"10m\" or \"30s\""
)]
pub struct DrainConfigError {
    /// `timeout` or `gracePeriod`.
    pub field: &'static str,
    /// The value as written.
    pub value: String,
}

fn duration(
    field: &'static str,
    value: Option<&String>,
) -> Result<Option<Duration>, DrainConfigError> {
    value
        .map(|v| {
            GoDuration::parse(v)
                .ok()
                .and_then(GoDuration::to_std)
                .ok_or_else(|| DrainConfigError {
                    field,
                    value: v.clone(),
                })
        })
        .transpose()
}

impl DrainOptions {
    /// The options of `config` (unset fields: the defaults).
    pub fn of(config: Option<&DrainConfig>) -> Result<Self, DrainConfigError> {
        let mut options = DrainOptions::default();
        let Some(c) = config else {
            return Ok(options);
        };
        options.disable_eviction = c.disable_eviction.unwrap_or(options.disable_eviction);
        options.delete_empty_dir_data = c
            .delete_empty_dir_data
            .unwrap_or(options.delete_empty_dir_data);
        options.force = c.force.unwrap_or(options.force);
        options.ignore_daemon_sets = c.ignore_daemon_sets.unwrap_or(options.ignore_daemon_sets);
        options.timeout = duration("timeout", c.timeout.as_ref())?.filter(|d| !d.is_zero());
        // Rounded up: a grace period of 1.5s gives the pod 2 s, never less than asked.
        options.grace_period_seconds = duration("gracePeriod", c.grace_period.as_ref())?.map(|d| {
            let whole = u32::try_from(d.as_secs()).unwrap_or(u32::MAX);
            whole.saturating_add(u32::from(d.subsec_nanos() > 0))
        });
        Ok(options)
    }
}

/// Why a pod holds the drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// It is being deleted already: the drain waits for it to go.
    Terminating,
    /// No controller manages it and `force` is false.
    Unmanaged,
    /// It has emptyDir data and `deleteEmptyDirData` is false.
    EmptyDir,
}

impl Holding {
    /// As a log or Event word.
    pub fn as_str(self) -> &'static str {
        match self {
            Holding::Terminating => "terminating",
            Holding::Unmanaged => "unmanaged",
            Holding::EmptyDir => "emptydir",
        }
    }
}

/// What the drain does with one pod on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodDrain {
    /// It need not leave.
    Ignore,
    /// It must leave but may not be moved: the node is not drained while it is there.
    Hold(Holding),
    /// Evict it (the Eviction API: its PodDisruptionBudget may say not now).
    Evict,
    /// Delete it (`disableEviction`).
    Delete,
}

fn tolerates_cordon(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| {
            t.key.as_deref() == Some("node.kubernetes.io/unschedulable")
                || (t.key.is_none() && t.operator.as_deref() == Some("Exists"))
        })
}

/// What the drain does with `pod`, in upstream's order: not Running or Pending, tolerating the
/// cordon (the operator's own pods among them), a DaemonSet's (unless `ignoreDaemonSets` is false),
/// in `kube-system`, or a static pod's mirror: ignored; being deleted: held (waited for); without a
/// controller and not `force`, or with emptyDir data and not `deleteEmptyDirData`: held; else
/// deleted with `disableEviction`, evicted without.
pub fn decide(pod: &Pod, options: &DrainOptions) -> PodDrain {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !matches!(phase, Some("Running" | "Pending")) || tolerates_cordon(pod) {
        return PodDrain::Ignore;
    }
    let controller = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true));
    if options.ignore_daemon_sets && pod.owner_references().iter().any(|o| o.kind == "DaemonSet") {
        return PodDrain::Ignore;
    }
    if pod.namespace().as_deref() == Some("kube-system")
        || pod
            .annotations()
            .contains_key("kubernetes.io/config.mirror")
    {
        return PodDrain::Ignore;
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return PodDrain::Hold(Holding::Terminating);
    }
    if controller.is_none() && !options.force {
        return PodDrain::Hold(Holding::Unmanaged);
    }
    let empty_dir = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .any(|v| v.empty_dir.is_some());
    if empty_dir && !options.delete_empty_dir_data {
        return PodDrain::Hold(Holding::EmptyDir);
    }
    if options.disable_eviction {
        PodDrain::Delete
    } else {
        PodDrain::Evict
    }
}

/// Whether a drain that started at `started` (the node's drain-start annotation) has run past
/// `timeout` at `now`.
pub fn timed_out(started: Timestamp, timeout: Option<Duration>, now: Timestamp) -> bool {
    let Some(timeout) = timeout else {
        return false;
    };
    let Ok(span) = k8s_openapi::jiff::SignedDuration::try_from(timeout) else {
        return false;
    };
    started.checked_add(span).is_ok_and(|end| now >= end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(extra: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "p", "namespace": "apps",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "rs", "uid": "u", "controller": true}]},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        });
        merge(&mut base, extra);
        serde_json::from_value(base).expect("pod")
    }

    fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
        match (base, extra) {
            (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }

    #[test]
    fn the_defaults_evict_what_must_leave_and_ignore_the_rest() {
        let d = DrainOptions::default();
        assert_eq!(decide(&pod(json!({})), &d), PodDrain::Evict);
        assert_eq!(
            decide(&pod(json!({"status": {"phase": "Succeeded"}})), &d),
            PodDrain::Ignore
        );
        assert_eq!(
            decide(&pod(json!({"metadata": {"namespace": "kube-system"}})), &d),
            PodDrain::Ignore
        );
        assert_eq!(
            decide(
                &pod(json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}})),
                &d
            ),
            PodDrain::Ignore
        );
        assert_eq!(
            decide(
                &pod(
                    json!({"spec": {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}})
                ),
                &d
            ),
            PodDrain::Ignore
        );
        let daemon = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d", "controller": true}]}});
        assert_eq!(decide(&pod(daemon.clone()), &d), PodDrain::Ignore);
        assert_eq!(
            decide(
                &pod(daemon),
                &DrainOptions {
                    ignore_daemon_sets: false,
                    ..d
                }
            ),
            PodDrain::Evict
        );
        assert_eq!(
            decide(
                &pod(json!({"metadata": {"deletionTimestamp": "2026-12-04T00:00:00Z"}})),
                &d
            ),
            PodDrain::Hold(Holding::Terminating)
        );
    }

    #[test]
    fn unmanaged_and_emptydir_pods_hold_the_drain_unless_allowed_and_deletion_replaces_eviction() {
        let d = DrainOptions::default();
        let bare = json!({"metadata": {"ownerReferences": []}});
        let scratch = json!({"spec": {"volumes": [{"name": "tmp", "emptyDir": {}}]}});
        assert_eq!(decide(&pod(bare.clone()), &d), PodDrain::Evict);
        assert_eq!(decide(&pod(scratch.clone()), &d), PodDrain::Evict);
        let strict = DrainOptions {
            force: false,
            delete_empty_dir_data: false,
            ..d
        };
        assert_eq!(
            decide(&pod(bare), &strict),
            PodDrain::Hold(Holding::Unmanaged)
        );
        assert_eq!(
            decide(&pod(scratch), &strict),
            PodDrain::Hold(Holding::EmptyDir)
        );
        assert_eq!(
            decide(
                &pod(json!({})),
                &DrainOptions {
                    disable_eviction: true,
                    ..d
                }
            ),
            PodDrain::Delete
        );
    }

    #[test]
    fn options_from_the_config_round_the_grace_up_and_refuse_bad_durations() {
        assert_eq!(DrainOptions::of(None), Ok(DrainOptions::default()));
        let config = DrainConfig {
            disable_eviction: Some(true),
            force: Some(false),
            timeout: Some("10m".into()),
            grace_period: Some("1.5s".into()),
            ..DrainConfig::default()
        };
        let o = DrainOptions::of(Some(&config)).expect("valid");
        assert!(o.disable_eviction && !o.force && o.delete_empty_dir_data && o.ignore_daemon_sets);
        assert_eq!(o.timeout, Some(Duration::from_secs(600)));
        assert_eq!(o.grace_period_seconds, Some(2));
        let zero = DrainConfig {
            timeout: Some("0".into()),
            grace_period: Some("0s".into()),
            ..DrainConfig::default()
        };
        let o = DrainOptions::of(Some(&zero)).expect("valid");
        assert_eq!((o.timeout, o.grace_period_seconds), (None, Some(0)));
        for (field, bad) in [("timeout", "-1m"), ("gracePeriod", "soon")] {
            let config = if field == "timeout" {
                DrainConfig {
                    timeout: Some(bad.into()),
                    ..DrainConfig::default()
                }
            } else {
                DrainConfig {
                    grace_period: Some(bad.into()),
                    ..DrainConfig::default()
                }
            };
            let e = DrainOptions::of(Some(&config)).expect_err(bad);
            assert_eq!(e.field, field);
            assert!(e.to_string().contains("drainConfig."), "{e}");
        }
    }

    #[test]
    fn a_drain_times_out_only_past_its_bound() {
        let start = Timestamp::from_second(1_000).expect("time");
        let at = |s: i64| Timestamp::from_second(s).expect("time");
        let bound = Some(Duration::from_secs(60));
        assert!(!timed_out(start, bound, at(1_059)));
        assert!(timed_out(start, bound, at(1_060)));
        assert!(!timed_out(start, None, at(1_000_000)));
    }
}
