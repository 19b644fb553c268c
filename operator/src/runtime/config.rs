//! The operator's configuration, read from the environment once at startup (upstream-operator.md
//! §1.1, renamed). Every value is validated before anything starts, and every problem is reported
//! at once, each naming the variable, its value and what is accepted, so an administrator fixes a
//! broken Deployment in one round instead of one crash loop per typo.
//!
//! Parsing goes through a lookup closure ([`OperatorConfig::from_lookup`]) so tests state every
//! input without touching the process environment.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use nodewright_shared::defaults::{EnvProblem, OperatorDefaults};
use nodewright_shared::duration::GoDuration;

use crate::runtime::leader::{LeaseConfig, LeaseTimings};
use nodewright_core::jobs::{
    DEFAULT_AGENT_IMAGE, DEFAULT_AGENT_LOG_ROOT, DEFAULT_COPY_DIR_ROOT,
    DEFAULT_PACKAGE_IMAGE_PULL_POLICY, DEFAULT_PAUSE_IMAGE, DEFAULT_RUNTIME_REQUIRED_TAINT,
    JobConfig, RuntimeTaint,
};
use nodewright_core::naming::{is_dns_label, is_dns_subdomain};
use nodewright_core::rollout::disruption::MaxDisrupted;

/// The operator's own namespace: its Lease, its certificate Secrets, and the package Jobs unless
/// `PACKAGE_NAMESPACE` names another.
pub const ENV_NAMESPACE: &str = "NAMESPACE";
/// Namespace of the package and interrupt Jobs, their pods and ConfigMaps. Privileged pods need a
/// namespace Pod Security lets them run in; keeping them out of the operator's namespace keeps them
/// away from its Secrets (the chart creates and labels it). Unset = `NAMESPACE`.
pub const ENV_PACKAGE_NAMESPACE: &str = "PACKAGE_NAMESPACE";
/// Agent image of the stage, check and interrupt containers.
pub const ENV_AGENT_IMAGE: &str = "AGENT_IMAGE";
/// Main container image of every operator pod.
pub const ENV_PAUSE_IMAGE: &str = "PAUSE_IMAGE";
/// Host directory of package copies.
pub const ENV_COPY_DIR_ROOT: &str = "COPY_DIR_ROOT";
/// Host directory of agent logs.
pub const ENV_AGENT_LOG_ROOT: &str = "AGENT_LOG_ROOT";
/// Optional `imagePullSecrets` entry of every pod.
pub const ENV_IMAGE_PULL_SECRET: &str = "IMAGE_PULL_SECRET";
/// Optional ServiceAccount of every package and interrupt pod (the chart's rightless one).
pub const ENV_PACKAGE_SERVICE_ACCOUNT: &str = "PACKAGE_SERVICE_ACCOUNT";
/// `imagePullPolicy` of the package and agent containers.
pub const ENV_PACKAGE_IMAGE_PULL_POLICY: &str = "PACKAGE_IMAGE_PULL_POLICY";
/// The taint every operator pod tolerates.
pub const ENV_RUNTIME_REQUIRED_TAINT: &str = "RUNTIME_REQUIRED_TAINT";
/// Requeue interval of a reconcile that found nothing to do.
pub const ENV_DEFAULT_INTERVAL: &str = "DEFAULT_INTERVAL";
/// Whether a node reboot resets its state (everything re-runs).
pub const ENV_REAPPLY_ON_REBOOT: &str = "REAPPLY_ON_REBOOT";
/// Whether replicas elect a leader through a Lease.
pub const ENV_LEADER_ELECTION: &str = "LEADER_ELECTION";
/// Name of the Lease.
pub const ENV_LEASE_NAME: &str = "LEASE_NAME";
/// `leaseDurationSeconds`: how long a silent holder keeps the Lease.
pub const ENV_LEASE_DURATION: &str = "LEASE_DURATION";
/// How long the leader keeps failing to renew before it gives up leadership.
pub const ENV_LEASE_RENEW_DEADLINE: &str = "LEASE_RENEW_DEADLINE";
/// How often the Lease is renewed (leader) or checked (standby).
pub const ENV_LEASE_RETRY_PERIOD: &str = "LEASE_RETRY_PERIOD";
/// This replica's identity in the Lease (the chart sets it from `metadata.name`).
pub const ENV_POD_NAME: &str = "POD_NAME";
/// Fallback identity when `POD_NAME` is unset (a pod's hostname is its name).
pub const ENV_HOSTNAME: &str = "HOSTNAME";
/// How long a stage's pods may be refused (Pod Security, a quota, an admission webhook) before
/// the stage ends timed out and its node's cordon is released; `0` = only `stageTimeout` ends it.
pub const ENV_PODS_NOT_CREATED_TIMEOUT: &str = "PODS_NOT_CREATED_TIMEOUT";
/// How long an attempt may wait on an image the kubelet cannot pull before the stage is surfaced
/// (a Warning Event, the node's Erroring condition, `why`).
pub const ENV_IMAGE_PULL_FAILING_AFTER: &str = "IMAGE_PULL_FAILING_AFTER";
/// How many revisions of each NodeWright's spec the operator keeps in `status.revisions` for
/// `kubectl nodewright rollback` and `rollbackOnFailure` (0..=100, default 10; 0 keeps none).
pub const ENV_REVISION_HISTORY_LIMIT: &str = "REVISION_HISTORY_LIMIT";
/// The cluster-wide disruption cap: at most this many nodes (`10`) or this percent of the cluster's
/// nodes (`10%`) cordoned by NodeWrights at once, whichever NodeWrights they are. Unset = no cap.
pub const ENV_MAX_DISRUPTED_NODES: &str = "MAX_DISRUPTED_NODES";
/// Plain-HTTP address of `/metrics`.
pub const ENV_METRICS_LISTEN: &str = "METRICS_LISTEN";
/// Plain-HTTP address of `/healthz` and `/readyz`.
pub const ENV_PROBE_LISTEN: &str = "PROBE_LISTEN";
/// `true`: `/metrics` answers only a bearer token the apiserver authenticates and authorises for
/// `get` on `/metrics` (TokenReview + SubjectAccessReview); default `false`.
pub const ENV_METRICS_AUTH: &str = "METRICS_AUTH";
/// `json` or `text`.
pub const ENV_LOG_FORMAT: &str = "LOG_FORMAT";
/// A tracing `EnvFilter` directive.
pub const ENV_LOG_LEVEL: &str = "LOG_LEVEL";

/// The operator's namespace unless configured (the chart's release namespace normally).
pub const DEFAULT_NAMESPACE: &str = "nodewright";
/// `PODS_NOT_CREATED_TIMEOUT` unless configured.
pub const DEFAULT_PODS_NOT_CREATED_TIMEOUT: &str = "10m";
/// Requeue interval of an idle reconcile (upstream's).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(600);
/// Shorter intervals would turn the idle resync into load on the apiserver (upstream's minimum).
pub const MIN_INTERVAL: Duration = Duration::from_secs(60);
/// The Lease's name unless configured.
pub const DEFAULT_LEASE_NAME: &str = "nodewright-operator";
/// `/metrics` address unless configured.
pub const DEFAULT_METRICS_LISTEN: &str = "0.0.0.0:8080";
/// Probe address unless configured.
pub const DEFAULT_PROBE_LISTEN: &str = "0.0.0.0:8081";
/// Log filter unless configured.
pub const DEFAULT_LOG_LEVEL: &str = "info";
/// Retry periods below this would hammer the apiserver with Lease reads.
pub const MIN_RETRY_PERIOD: Duration = Duration::from_millis(100);

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (default: what log pipelines want).
    Json,
    /// Human-readable lines.
    Text,
}

/// The validated configuration of the operator process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorConfig {
    /// `NAMESPACE`: the operator's own (Lease, certificate Secrets). Package Jobs left here by a
    /// version that ran them in this namespace are settled before Jobs start in `jobs.namespace`
    /// (`runtime::legacy_jobs`).
    pub namespace: String,
    /// What the Job builders read: `PACKAGE_NAMESPACE` (Jobs, their pods and ConfigMaps live there),
    /// `AGENT_IMAGE`, `PAUSE_IMAGE`, `COPY_DIR_ROOT`, `AGENT_LOG_ROOT`, `IMAGE_PULL_SECRET`,
    /// `RUNTIME_REQUIRED_TAINT` and the `JOB_*` defaults shared with the webhook. Nested, not
    /// copied, so the builders and the reconcilers read the same values.
    pub jobs: JobConfig,
    /// `DEFAULT_INTERVAL`: requeue-after of a reconcile with nothing to do.
    pub default_interval: Duration,
    /// `REAPPLY_ON_REBOOT`.
    pub reapply_on_reboot: bool,
    /// `PODS_NOT_CREATED_TIMEOUT` (default 10m; `None` for `0`): how long a stage's pods may be
    /// refused before it ends timed out and its cordon is released (issue 22 item 7: a drained node
    /// is never held for a pod that cannot run).
    pub pods_not_created_timeout: Option<Duration>,
    /// `IMAGE_PULL_FAILING_AFTER` (default 1m): how long an attempt may wait on an image the
    /// kubelet cannot pull before it is surfaced (`outcomes::image_pull`).
    pub image_pull_failing_after: Duration,
    /// `REVISION_HISTORY_LIMIT` (default 10, at most 100): the revisions of each NodeWright kept
    /// in its status ([`nodewright_core::rollout::history`]).
    pub revision_history_limit: usize,
    /// `MAX_DISRUPTED_NODES` (default unset: no cap): how many nodes NodeWrights may hold cordoned
    /// at once ([`nodewright_core::rollout::disruption`]).
    pub max_disrupted_nodes: Option<MaxDisrupted>,
    /// `LEADER_ELECTION`: when false this replica acts as the leader unconditionally (one replica only).
    pub leader_election: bool,
    /// The Lease (namespace = `NAMESPACE`, `LEASE_NAME`, identity = `POD_NAME`, timings).
    pub lease: LeaseConfig,
    /// `METRICS_LISTEN`.
    pub metrics_listen: SocketAddr,
    /// `PROBE_LISTEN`.
    pub probe_listen: SocketAddr,
    /// `METRICS_AUTH`: authenticate and authorise scrapes of `/metrics` against the apiserver.
    pub metrics_auth: bool,
    /// `LOG_FORMAT`.
    pub log_format: LogFormat,
    /// `LOG_LEVEL`, already known to parse as an `EnvFilter`.
    pub log_level: String,
}

/// Everything wrong with the environment, in variable order (shared defaults first).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// One entry per bad variable (or bad combination, named by the variable to change).
    pub problems: Vec<EnvProblem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid operator configuration in the environment:")?;
        for p in &self.problems {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

impl OperatorConfig {
    /// Reads the process environment. When neither `POD_NAME` nor `HOSTNAME` is set, the kernel's
    /// hostname is the identity (in a pod that is the pod's name).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|var| {
            let value = std::env::var_os(var).map(|v| v.to_string_lossy().into_owned());
            if value.is_none() && var == ENV_HOSTNAME {
                return std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
            }
            value
        })
    }

    /// Reads the configuration through `lookup` (unset ⇒ `None`). Surrounding whitespace is ignored
    /// and an empty value counts as unset, as for the shared defaults.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env(&lookup);
        let mut p = Problems::default();

        let defaults = match OperatorDefaults::from_lookup(&lookup) {
            Ok(d) => Some(d),
            Err(e) => {
                p.0.extend(e.problems);
                None
            }
        };
        let namespace = p.check(
            ENV_NAMESPACE,
            env.or(ENV_NAMESPACE, DEFAULT_NAMESPACE),
            |v| {
                is_dns_label(v).then_some(()).ok_or_else(|| {
                "a namespace name: a DNS-1123 label (1-63 of a-z, 0-9, '-', starting and ending \
                 alphanumeric), e.g. \"nodewright\""
                    .to_owned()
            })
            },
        );
        let jobs = job_config(&env, &mut p, &namespace, defaults);
        let default_interval = p.duration(
            ENV_DEFAULT_INTERVAL,
            env.or(ENV_DEFAULT_INTERVAL, "10m"),
            "a Go duration of at least 1m, e.g. \"10m\" (default)",
            |d| d >= MIN_INTERVAL,
        );
        let reapply_on_reboot =
            p.boolean(ENV_REAPPLY_ON_REBOOT, env.get(ENV_REAPPLY_ON_REBOOT), false);
        let pods_not_created_timeout = p
            .duration(
                ENV_PODS_NOT_CREATED_TIMEOUT,
                env.or(
                    ENV_PODS_NOT_CREATED_TIMEOUT,
                    DEFAULT_PODS_NOT_CREATED_TIMEOUT,
                ),
                "a Go duration of whole seconds, e.g. \"10m\" (default), or \"0\" to let only a \
                 package's stageTimeout end a stage whose pods are refused",
                |d| d.subsec_nanos() == 0,
            )
            .map(|d| (!d.is_zero()).then_some(d));
        let image_pull_failing_after = p.duration(
            ENV_IMAGE_PULL_FAILING_AFTER,
            env.or(ENV_IMAGE_PULL_FAILING_AFTER, "1m"),
            "a Go duration of at least 1s, e.g. \"1m\" (default): how long an attempt may wait on \
             an image the kubelet cannot pull before it is surfaced",
            |d| d >= Duration::from_secs(1),
        );
        let revision_history_limit = p.count(
            ENV_REVISION_HISTORY_LIMIT,
            env.get(ENV_REVISION_HISTORY_LIMIT),
            nodewright_core::rollout::history::DEFAULT_REVISION_HISTORY_LIMIT,
            nodewright_shared::api::MAX_REVISIONS,
            "revisions of each NodeWright kept for rollbacks",
        );
        let max_disrupted_nodes = match env.get(ENV_MAX_DISRUPTED_NODES) {
            None => Some(None),
            Some(v) => match MaxDisrupted::parse(&v) {
                Ok(cap) => Some(Some(cap)),
                Err(e) => {
                    p.push(ENV_MAX_DISRUPTED_NODES, v, e.to_string());
                    None
                }
            },
        };
        let leader_election = p.boolean(ENV_LEADER_ELECTION, env.get(ENV_LEADER_ELECTION), true);

        let lease = lease_config(&env, &mut p, &namespace);
        let metrics_listen = p.address(
            ENV_METRICS_LISTEN,
            env.or(ENV_METRICS_LISTEN, DEFAULT_METRICS_LISTEN),
        );
        let probe_listen = p.address(
            ENV_PROBE_LISTEN,
            env.or(ENV_PROBE_LISTEN, DEFAULT_PROBE_LISTEN),
        );
        let metrics_auth = p.boolean(ENV_METRICS_AUTH, env.get(ENV_METRICS_AUTH), false);
        let log_format_text = env.or(ENV_LOG_FORMAT, "json");
        let log_format = match log_format_text.as_str() {
            "json" => Some(LogFormat::Json),
            "text" => Some(LogFormat::Text),
            _ => {
                p.push(
                    ENV_LOG_FORMAT,
                    log_format_text,
                    "json (default) or text".to_owned(),
                );
                None
            }
        };
        let log_level = p.check(
            ENV_LOG_LEVEL,
            env.or(ENV_LOG_LEVEL, DEFAULT_LOG_LEVEL),
            log_filter_rule,
        );

        match (
            namespace,
            jobs,
            default_interval,
            reapply_on_reboot,
            pods_not_created_timeout,
            image_pull_failing_after,
            revision_history_limit,
            max_disrupted_nodes,
            leader_election,
            lease,
            metrics_listen,
            probe_listen,
            metrics_auth,
            log_format,
            log_level,
        ) {
            (
                Some(namespace),
                Some(jobs),
                Some(default_interval),
                Some(reapply_on_reboot),
                Some(pods_not_created_timeout),
                Some(image_pull_failing_after),
                Some(revision_history_limit),
                Some(max_disrupted_nodes),
                Some(leader_election),
                Some(lease),
                Some(metrics_listen),
                Some(probe_listen),
                Some(metrics_auth),
                Some(log_format),
                Some(log_level),
            ) if p.0.is_empty() => Ok(OperatorConfig {
                lease,
                namespace,
                jobs,
                default_interval,
                reapply_on_reboot,
                pods_not_created_timeout,
                image_pull_failing_after,
                revision_history_limit,
                max_disrupted_nodes,
                leader_election,
                metrics_listen,
                probe_listen,
                metrics_auth,
                log_format,
                log_level,
            }),
            _ => Err(ConfigError { problems: p.0 }),
        }
    }
}

/// The environment as the operator reads it: surrounding whitespace is ignored and an empty value
/// counts as unset, as for the shared defaults.
struct Env<'a, F>(&'a F);

impl<F: Fn(&str) -> Option<String>> Env<'_, F> {
    /// The value of `var`, if set and not blank.
    fn get(&self, var: &str) -> Option<String> {
        (self.0)(var)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// The value of `var`, else `default`.
    fn or(&self, var: &str, default: &str) -> String {
        self.get(var).unwrap_or_else(|| default.to_owned())
    }
}

/// The package Jobs' settings (`PACKAGE_NAMESPACE` through `RUNTIME_REQUIRED_TAINT`), each bad one
/// recorded in `p`; `None` when any is bad (or `namespace` / `defaults` were).
fn job_config<F: Fn(&str) -> Option<String>>(
    env: &Env<'_, F>,
    p: &mut Problems,
    namespace: &Option<String>,
    defaults: Option<OperatorDefaults>,
) -> Option<JobConfig> {
    let package_namespace = match env.get(ENV_PACKAGE_NAMESPACE) {
        None => namespace.clone(),
        Some(v) => p.check(ENV_PACKAGE_NAMESPACE, v, |v| {
            is_dns_label(v).then_some(()).ok_or_else(|| {
                "a namespace name: a DNS-1123 label (1-63 of a-z, 0-9, '-', starting and \
                     ending alphanumeric), e.g. \"nodewright-packages\"; unset = NAMESPACE"
                    .to_owned()
            })
        }),
    };
    let agent_image = p.check(
        ENV_AGENT_IMAGE,
        env.or(ENV_AGENT_IMAGE, DEFAULT_AGENT_IMAGE),
        |v| image_rule(v, DEFAULT_AGENT_IMAGE),
    );
    let pause_image = p.check(
        ENV_PAUSE_IMAGE,
        env.or(ENV_PAUSE_IMAGE, DEFAULT_PAUSE_IMAGE),
        |v| image_rule(v, DEFAULT_PAUSE_IMAGE),
    );
    let copy_dir_root = p.check(
        ENV_COPY_DIR_ROOT,
        env.or(ENV_COPY_DIR_ROOT, DEFAULT_COPY_DIR_ROOT),
        |v| absolute_path_rule(v, DEFAULT_COPY_DIR_ROOT),
    );
    let agent_log_root = p.check(
        ENV_AGENT_LOG_ROOT,
        env.or(ENV_AGENT_LOG_ROOT, DEFAULT_AGENT_LOG_ROOT),
        |v| absolute_path_rule(v, DEFAULT_AGENT_LOG_ROOT),
    );
    let image_pull_secret = p.optional_name(
        ENV_IMAGE_PULL_SECRET,
        env.get(ENV_IMAGE_PULL_SECRET),
        "a Secret name",
        "registry-credentials",
    );
    let service_account = p.optional_name(
        ENV_PACKAGE_SERVICE_ACCOUNT,
        env.get(ENV_PACKAGE_SERVICE_ACCOUNT),
        "a ServiceAccount name",
        "nodewright-packages",
    );
    let image_pull_policy = p.check(
        ENV_PACKAGE_IMAGE_PULL_POLICY,
        env.or(
            ENV_PACKAGE_IMAGE_PULL_POLICY,
            DEFAULT_PACKAGE_IMAGE_PULL_POLICY,
        ),
        |v| {
            matches!(v, "Always" | "IfNotPresent" | "Never")
                .then_some(())
                .ok_or_else(|| {
                    "one of Always (the default), IfNotPresent, Never (exact case)".to_owned()
                })
        },
    );
    let taint_text = env.or(ENV_RUNTIME_REQUIRED_TAINT, DEFAULT_RUNTIME_REQUIRED_TAINT);
    let runtime_required_taint = match RuntimeTaint::parse(&taint_text) {
        Ok(t) => Some(t),
        Err(e) => {
            p.push(
                ENV_RUNTIME_REQUIRED_TAINT,
                taint_text,
                format!(
                    "{}: use kubectl taint syntax key[=value]:Effect (not a key- removal) with \
                         Effect one of NoSchedule, PreferNoSchedule, NoExecute, e.g. \
                         {DEFAULT_RUNTIME_REQUIRED_TAINT:?}",
                    e.reason
                ),
            );
            None
        }
    };
    Some(JobConfig {
        namespace: package_namespace?,
        agent_image: agent_image?,
        pause_image: pause_image?,
        copy_dir_root: copy_dir_root?,
        agent_log_root: agent_log_root?,
        image_pull_secret: image_pull_secret?,
        service_account: service_account?,
        image_pull_policy: image_pull_policy?,
        runtime_required_taint: runtime_required_taint?,
        defaults: defaults?,
    })
}

/// The leader election's Lease (`LEASE_NAME`, its timings, the holder identity from `POD_NAME` or
/// `HOSTNAME`), each bad variable recorded in `p`; `None` when any is bad.
fn lease_config<F: Fn(&str) -> Option<String>>(
    env: &Env<'_, F>,
    p: &mut Problems,
    namespace: &Option<String>,
) -> Option<LeaseConfig> {
    let lease_name = p.check(
        ENV_LEASE_NAME,
        env.or(ENV_LEASE_NAME, DEFAULT_LEASE_NAME),
        |v| {
            is_dns_subdomain(v).then_some(()).ok_or_else(|| {
                format!(
                    "a Lease name: a DNS-1123 subdomain (at most 253 of a-z, 0-9, '-', '.'), e.g. \
                     {DEFAULT_LEASE_NAME:?}"
                )
            })
        },
    );
    let lease_duration_text = env.or(ENV_LEASE_DURATION, "15s");
    let lease_duration = p.duration(
        ENV_LEASE_DURATION,
        lease_duration_text.clone(),
        "a Go duration of whole seconds, at least 1s, e.g. \"15s\" (default; \
             leaseDurationSeconds is whole seconds)",
        |d| d >= Duration::from_secs(1) && d.subsec_nanos() == 0 && d.as_secs() <= i32::MAX as u64,
    );
    let renew_text = env.or(ENV_LEASE_RENEW_DEADLINE, "10s");
    let renew_deadline = p.duration(
        ENV_LEASE_RENEW_DEADLINE,
        renew_text.clone(),
        "a Go duration above 0, shorter than LEASE_DURATION, e.g. \"10s\" (default)",
        |d| d > Duration::ZERO,
    );
    let retry_text = env.or(ENV_LEASE_RETRY_PERIOD, "2s");
    let retry_period = p.duration(
        ENV_LEASE_RETRY_PERIOD,
        retry_text.clone(),
        "a Go duration of at least 100ms, shorter than LEASE_RENEW_DEADLINE, e.g. \"2s\" (default)",
        |d| d >= MIN_RETRY_PERIOD,
    );
    let timings = match (lease_duration, renew_deadline, retry_period) {
        (Some(lease_duration), Some(renew_deadline), Some(retry_period)) => {
            let timings = LeaseTimings {
                lease_duration,
                renew_deadline,
                retry_period,
            };
            if renew_deadline >= lease_duration {
                p.push(
                    ENV_LEASE_RENEW_DEADLINE,
                    renew_text,
                    format!(
                        "must be shorter than LEASE_DURATION ({lease_duration_text}), so the \
                             leader stops before a standby may take the Lease over"
                    ),
                );
            }
            if retry_period >= renew_deadline {
                p.push(
                    ENV_LEASE_RETRY_PERIOD,
                    retry_text,
                    "must be shorter than LEASE_RENEW_DEADLINE, so the leader retries a failed \
                         renewal before giving up"
                        .to_owned(),
                );
            }
            Some(timings)
        }
        _ => None,
    };
    // A bad identity is reported under the variable it came from: HOSTNAME when POD_NAME is
    // unset, so the administrator fixes the variable that is actually wrong.
    let identity_source = env
        .get(ENV_POD_NAME)
        .map(|v| (ENV_POD_NAME, v))
        .or_else(|| env.get(ENV_HOSTNAME).map(|v| (ENV_HOSTNAME, v)));
    let identity = match identity_source {
        Some((var, v)) => p.check(var, v, |v| {
            (v.len() <= 253 && !v.chars().any(|c| c.is_whitespace() || c.is_control()))
                .then_some(())
                .ok_or_else(|| {
                    "at most 253 characters without whitespace: the Lease holder identity, \
                         unique per replica (the chart sets it from metadata.name)"
                        .to_owned()
                })
        }),
        None => {
            p.push(
                ENV_POD_NAME,
                String::new(),
                "unset, and so is HOSTNAME: set POD_NAME to this replica's unique name (the \
                     chart sets it from metadata.name)"
                    .to_owned(),
            );
            None
        }
    };

    Some(LeaseConfig {
        namespace: namespace.clone()?,
        name: lease_name?,
        identity: identity?,
        timings: timings?,
    })
}

/// The problems found so far, with helpers that record one and return `None` on a bad value. Shared
/// with the other settings read from the environment (`webhook_certs::settings`), so every variable
/// is parsed and reported alike.
#[derive(Default)]
pub(crate) struct Problems(pub(crate) Vec<EnvProblem>);

impl Problems {
    pub(crate) fn push(&mut self, var: &'static str, value: String, accepted: String) {
        self.0.push(EnvProblem {
            var,
            value,
            accepted,
        });
    }

    /// Keeps `value` when `rule` accepts it; otherwise records what the rule says is accepted.
    /// An optional object name (unset = `None`): a DNS-1123 subdomain, as Secret and ServiceAccount
    /// names are. `Some(None)` when unset, `None` (a problem recorded) when invalid.
    fn optional_name(
        &mut self,
        var: &'static str,
        value: Option<String>,
        what: &str,
        example: &str,
    ) -> Option<Option<String>> {
        let Some(value) = value else {
            return Some(None);
        };
        self.check(var, value, |v| {
            is_dns_subdomain(v).then_some(()).ok_or_else(|| {
                format!(
                    "unset, or {what}: a DNS-1123 subdomain (at most 253 of a-z, 0-9, '-', '.'), \
                     e.g. {example:?}"
                )
            })
        })
        .map(Some)
    }

    fn check(
        &mut self,
        var: &'static str,
        value: String,
        rule: impl FnOnce(&str) -> Result<(), String>,
    ) -> Option<String> {
        match rule(&value) {
            Ok(()) => Some(value),
            Err(accepted) => {
                self.push(var, value, accepted);
                None
            }
        }
    }

    pub(crate) fn duration(
        &mut self,
        var: &'static str,
        value: String,
        accepted: &str,
        within: impl FnOnce(Duration) -> bool,
    ) -> Option<Duration> {
        match GoDuration::parse(&value).ok().and_then(GoDuration::to_std) {
            Some(d) if within(d) => Some(d),
            _ => {
                self.push(var, value, accepted.to_owned());
                None
            }
        }
    }

    /// Go's `strconv.ParseBool` spellings (upstream read these with go-envconfig).
    pub(crate) fn boolean(
        &mut self,
        var: &'static str,
        value: Option<String>,
        default: bool,
    ) -> Option<bool> {
        let Some(value) = value else {
            return Some(default);
        };
        match value.as_str() {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
            _ => {
                self.push(
                    var,
                    value,
                    format!("true or false (also 1/0, t/f, TRUE/FALSE; default {default})"),
                );
                None
            }
        }
    }

    /// A whole number from 0 to `max` (unset: `default`); `what` says what it counts.
    fn count(
        &mut self,
        var: &'static str,
        value: Option<String>,
        default: usize,
        max: usize,
        what: &str,
    ) -> Option<usize> {
        let Some(value) = value else {
            return Some(default);
        };
        match value.parse::<usize>() {
            Ok(n) if n <= max => Some(n),
            _ => {
                self.push(
                    var,
                    value,
                    format!("a whole number from 0 to {max} ({what}; default {default})"),
                );
                None
            }
        }
    }

    /// `HOST:PORT`, or `:PORT` for every interface (upstream's `METRICS_PORT` spelling).
    fn address(&mut self, var: &'static str, value: String) -> Option<SocketAddr> {
        let full = match value.strip_prefix(':') {
            Some(port) => format!("0.0.0.0:{port}"),
            None => value.clone(),
        };
        match full.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.push(
                    var,
                    value,
                    "an IP address and port such as 0.0.0.0:8080 or [::]:8080, or :PORT for every \
                     IPv4 interface"
                        .to_owned(),
                );
                None
            }
        }
    }
}

/// A tracing `EnvFilter`, stricter in one way: a bare word must be a level. `EnvFilter` reads a
/// bare `infoo` as "trace for target infoo", which silently turns every other log line off.
fn log_filter_rule(filter: &str) -> Result<(), String> {
    let accepted = |why: String| {
        format!(
            "a tracing filter ({why}): comma-separated LEVEL or TARGET=LEVEL with LEVEL one of \
             trace, debug, info, warn, error, off, e.g. \"info\" or \
             \"nodewright_operator=debug,kube=warn,info\""
        )
    };
    tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| accepted(e.to_string()))?;
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    for directive in filter.split(',').map(str::trim) {
        if !directive.contains('=')
            && !directive.contains('[')
            && !directive.is_empty()
            && !LEVELS.contains(&directive.to_ascii_lowercase().as_str())
        {
            return Err(accepted(format!(
                "{directive:?} is neither a level nor TARGET=LEVEL"
            )));
        }
    }
    Ok(())
}

/// An image reference the kubelet pulls reproducibly: a tag after the last `/` (a `:` before it is
/// a registry port, not a tag) or a digest.
fn image_rule(image: &str, example: &str) -> Result<(), String> {
    let accepted = || {
        format!(
            "an image reference with a tag or a digest, e.g. {example:?} or \
             \"repo/image@sha256:<64 hex>\" (a ':' before the last '/' is a registry port, not a tag)"
        )
    };
    if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(accepted());
    }
    let ok = match image.split_once('@') {
        Some((name, digest)) => !name.is_empty() && is_digest(digest),
        None => {
            let last = image.rsplit('/').next().unwrap_or(image);
            match last.rsplit_once(':') {
                Some((repo, tag)) => !repo.is_empty() && is_tag(tag),
                None => false,
            }
        }
    };
    if ok { Ok(()) } else { Err(accepted()) }
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}` (the OCI distribution tag grammar).
fn is_tag(tag: &str) -> bool {
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// `algorithm:hex`, with the lengths of sha256 and sha512 checked.
fn is_digest(digest: &str) -> bool {
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    match digest.split_once(':') {
        Some(("sha256", h)) => hex(h, 64),
        Some(("sha512", h)) => hex(h, 128),
        _ => false,
    }
}

/// An absolute host path: it is mounted into every pod, where a relative path means nothing.
fn absolute_path_rule(path: &str, example: &str) -> Result<(), String> {
    let ok = path.starts_with('/')
        && !path.chars().any(|c| c.is_control())
        && !path.split('/').any(|segment| segment == "..");
    ok.then_some(()).ok_or_else(|| {
        format!("an absolute host path without '..' segments, e.g. {example:?} (default)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Parses with exactly these variables set (plus a POD_NAME unless given).
    fn env(pairs: &[(&str, &str)]) -> Result<OperatorConfig, ConfigError> {
        let mut map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if !map.contains_key(ENV_HOSTNAME) {
            map.entry(ENV_POD_NAME.to_owned())
                .or_insert_with(|| "operator-0".to_owned());
        }
        OperatorConfig::from_lookup(|k| map.get(k).cloned())
    }

    /// The one problem `var=value` causes (and asserts there is exactly one).
    fn problem(var: &str, value: &str) -> EnvProblem {
        let err = env(&[(var, value)]).expect_err(&format!("{var}={value:?} must be rejected"));
        assert_eq!(err.problems.len(), 1, "{err}");
        let p = err.problems[0].clone();
        assert_eq!(p.var, var, "{err}");
        assert_eq!(p.value, value.trim(), "{err}");
        assert!(err.to_string().contains(&format!("{var}=")), "{err}");
        p
    }

    fn accepts(var: &str, value: &str) -> OperatorConfig {
        env(&[(var, value)]).unwrap_or_else(|e| panic!("{var}={value:?} rejected: {e}"))
    }

    #[test]
    fn unset_environment_gives_documented_defaults() {
        let c = env(&[]).expect("defaults");
        assert_eq!(c.jobs.namespace, "nodewright");
        assert_eq!(
            c.jobs.agent_image,
            "nvcr.io/nvidia/skyhook/agent:v6.4.1@sha256:dedf73c19455444e2663671368eaf3fcd657ea1417f0d8738c6133ed738b9c52",
            "upstream's agent release, pinned by digest"
        );
        assert_eq!(c.jobs.pause_image, "registry.k8s.io/pause:3.10");
        assert_eq!(c.jobs.copy_dir_root, "/var/lib/skyhook");
        assert_eq!(c.jobs.agent_log_root, "/var/log/skyhook");
        assert_eq!(c.jobs.image_pull_secret, None);
        assert_eq!(c.jobs.service_account, None);
        assert_eq!(
            c.jobs.runtime_required_taint.to_string(),
            "nodewright.nvidia.com=runtime-required:NoSchedule"
        );
        assert_eq!(c.default_interval, Duration::from_secs(600));
        assert!(!c.reapply_on_reboot);
        assert!(c.leader_election);
        assert_eq!(
            c.lease,
            LeaseConfig {
                namespace: "nodewright".into(),
                name: "nodewright-operator".into(),
                identity: "operator-0".into(),
                timings: LeaseTimings::default(),
            }
        );
        assert_eq!(c.lease.timings.lease_duration, Duration::from_secs(15));
        assert_eq!(c.lease.timings.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.lease.timings.retry_period, Duration::from_secs(2));
        assert_eq!(c.metrics_listen, "0.0.0.0:8080".parse().expect("addr"));
        assert_eq!(c.probe_listen, "0.0.0.0:8081".parse().expect("addr"));
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.log_level, "info");
        assert_eq!(c.jobs.defaults, OperatorDefaults::default());
    }

    #[test]
    fn job_config_carries_every_job_setting() {
        let c = env(&[
            ("NAMESPACE", "ops"),
            ("AGENT_IMAGE", "example.com/agent:6.2.0"),
            ("IMAGE_PULL_SECRET", "pull"),
            ("PACKAGE_SERVICE_ACCOUNT", "nw-packages"),
            ("JOB_BACKOFF_LIMIT", "5"),
        ])
        .expect("valid");
        let j = &c.jobs;
        assert_eq!(j.namespace, "ops");
        assert_eq!(j.agent_image, "example.com/agent:6.2.0");
        assert_eq!(j.pause_image, DEFAULT_PAUSE_IMAGE);
        assert_eq!(j.copy_dir_root, DEFAULT_COPY_DIR_ROOT);
        assert_eq!(j.agent_log_root, DEFAULT_AGENT_LOG_ROOT);
        assert_eq!(j.image_pull_secret.as_deref(), Some("pull"));
        assert_eq!(j.service_account.as_deref(), Some("nw-packages"));
        assert_eq!(
            j.runtime_required_taint.to_string(),
            DEFAULT_RUNTIME_REQUIRED_TAINT
        );
        assert_eq!(j.defaults.backoff_limit, 5);
        assert_eq!(c.lease.namespace, "ops", "the Lease lives in NAMESPACE");
    }

    #[test]
    fn namespace() {
        assert_eq!(accepts("NAMESPACE", " ops-1 ").jobs.namespace, "ops-1");
        assert_eq!(
            accepts("NAMESPACE", "").jobs.namespace,
            "nodewright",
            "empty ⇒ default"
        );
        for bad in ["Ops", "ops_1", "-ops", "ops.example", &"a".repeat(64)] {
            assert!(
                problem("NAMESPACE", bad)
                    .accepted
                    .contains("DNS-1123 label")
            );
        }
    }

    #[test]
    fn pods_not_created_timeout() {
        assert_eq!(
            env(&[]).expect("valid").pods_not_created_timeout,
            Some(Duration::from_secs(600)),
            "default 10m"
        );
        assert_eq!(
            accepts("PODS_NOT_CREATED_TIMEOUT", "90s").pods_not_created_timeout,
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            accepts("PODS_NOT_CREATED_TIMEOUT", "0").pods_not_created_timeout,
            None,
            "0 = only stageTimeout"
        );
        for bad in ["-1m", "1.5s", "ten minutes"] {
            let p = problem("PODS_NOT_CREATED_TIMEOUT", bad);
            assert!(p.accepted.contains("stageTimeout"), "{p:?}");
        }
        assert_eq!(
            env(&[]).expect("valid").image_pull_failing_after,
            Duration::from_secs(60)
        );
        assert_eq!(
            accepts("IMAGE_PULL_FAILING_AFTER", "20s").image_pull_failing_after,
            Duration::from_secs(20)
        );
        for bad in ["0", "500ms", "soon"] {
            assert!(
                problem("IMAGE_PULL_FAILING_AFTER", bad)
                    .accepted
                    .contains("at least 1s")
            );
        }
    }

    #[test]
    fn revision_history_limit() {
        assert_eq!(env(&[]).expect("valid").revision_history_limit, 10);
        assert_eq!(
            accepts("REVISION_HISTORY_LIMIT", "0").revision_history_limit,
            0
        );
        assert_eq!(
            accepts("REVISION_HISTORY_LIMIT", " 100 ").revision_history_limit,
            100
        );
        for bad in ["101", "-1", "ten", "2.5"] {
            let p = problem("REVISION_HISTORY_LIMIT", bad);
            assert!(p.accepted.contains("from 0 to 100"), "{p:?}");
        }
    }

    #[test]
    fn max_disrupted_nodes() {
        assert_eq!(env(&[]).expect("valid").max_disrupted_nodes, None, "no cap");
        assert_eq!(
            accepts("MAX_DISRUPTED_NODES", " 12 ").max_disrupted_nodes,
            Some(MaxDisrupted::Count(12))
        );
        assert_eq!(
            accepts("MAX_DISRUPTED_NODES", "5%").max_disrupted_nodes,
            Some(MaxDisrupted::Percent(5))
        );
        for bad in ["0", "0%", "150%", "-3", "half"] {
            let p = problem("MAX_DISRUPTED_NODES", bad);
            assert!(
                p.accepted.contains("unset for no cluster-wide cap"),
                "{p:?}"
            );
        }
    }

    /// Package Jobs run in `PACKAGE_NAMESPACE` (the chart's privileged one); the Lease and the
    /// operator's own namespace stay in `NAMESPACE`; unset, the Jobs stay with the operator.
    #[test]
    fn package_namespace() {
        let c = env(&[
            ("NAMESPACE", "ops"),
            ("PACKAGE_NAMESPACE", " ops-packages "),
        ])
        .expect("valid");
        assert_eq!(c.jobs.namespace, "ops-packages");
        assert_eq!(c.namespace, "ops");
        assert_eq!(c.lease.namespace, "ops");
        let c = env(&[("NAMESPACE", "ops"), ("PACKAGE_NAMESPACE", "")]).expect("valid");
        assert_eq!(c.jobs.namespace, "ops", "empty ⇒ NAMESPACE");
        for bad in ["Pkgs", "pkgs_1", "pkgs.example", &"a".repeat(64)] {
            let p = problem("PACKAGE_NAMESPACE", bad);
            assert!(p.accepted.contains("DNS-1123 label"), "{p:?}");
            assert!(p.accepted.contains("unset = NAMESPACE"), "{p:?}");
        }
    }

    #[test]
    fn images() {
        for var in ["AGENT_IMAGE", "PAUSE_IMAGE"] {
            for good in [
                "agent:1",
                "example.com/agent:6.2.0",
                "registry:5000/team/agent:v1_rc-2",
                "example.com/agent@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "example.com/agent:1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            ] {
                let c = accepts(var, good);
                let got = if var == "AGENT_IMAGE" {
                    c.jobs.agent_image
                } else {
                    c.jobs.pause_image
                };
                assert_eq!(got, good);
            }
            for bad in [
                "agent",
                "example.com/agent",
                "registry:5000/agent",
                "example.com/agent:",
                ":1",
                "example.com/agent:-x",
                "example.com/agent@sha256:abc",
                "example.com/agent@md5:0123456789abcdef0123456789abcdef",
                "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "example.com/my agent:1",
            ] {
                let p = problem(var, bad);
                assert!(p.accepted.contains("tag or a digest"), "{p}");
            }
        }
    }

    #[test]
    fn host_paths() {
        for var in ["COPY_DIR_ROOT", "AGENT_LOG_ROOT"] {
            let c = accepts(var, "/opt/nodewright");
            let got = if var == "COPY_DIR_ROOT" {
                c.jobs.copy_dir_root
            } else {
                c.jobs.agent_log_root
            };
            assert_eq!(got, "/opt/nodewright");
            for bad in ["var/lib/x", "./x", "/var/../etc", "~/x"] {
                assert!(problem(var, bad).accepted.contains("absolute host path"));
            }
        }
    }

    #[test]
    fn image_pull_secret() {
        assert_eq!(
            accepts("IMAGE_PULL_SECRET", "").jobs.image_pull_secret,
            None
        );
        assert_eq!(
            accepts("IMAGE_PULL_SECRET", "regcred.team-a")
                .jobs
                .image_pull_secret
                .as_deref(),
            Some("regcred.team-a")
        );
        for bad in ["Regcred", "reg_cred", "-x", "a..b", &"a".repeat(254)] {
            assert!(
                problem("IMAGE_PULL_SECRET", bad)
                    .accepted
                    .contains("DNS-1123 subdomain")
            );
        }
    }

    #[test]
    fn package_service_account() {
        assert_eq!(
            accepts("PACKAGE_SERVICE_ACCOUNT", "").jobs.service_account,
            None
        );
        assert_eq!(
            accepts("PACKAGE_SERVICE_ACCOUNT", " nw-packages ")
                .jobs
                .service_account
                .as_deref(),
            Some("nw-packages")
        );
        for bad in ["Packages", "pkg_sa", "-x", "a..b"] {
            let accepted = problem("PACKAGE_SERVICE_ACCOUNT", bad).accepted;
            assert!(
                accepted.contains("DNS-1123 subdomain") && accepted.contains("ServiceAccount"),
                "{accepted}"
            );
        }
    }

    #[test]
    fn package_image_pull_policy() {
        assert_eq!(env(&[]).expect("defaults").jobs.image_pull_policy, "Always");
        for ok in ["Always", "IfNotPresent", "Never"] {
            assert_eq!(
                accepts("PACKAGE_IMAGE_PULL_POLICY", ok)
                    .jobs
                    .image_pull_policy,
                ok
            );
        }
        assert_eq!(
            accepts("PACKAGE_IMAGE_PULL_POLICY", "")
                .jobs
                .image_pull_policy,
            "Always"
        );
        for bad in ["always", "Sometimes"] {
            assert!(
                problem("PACKAGE_IMAGE_PULL_POLICY", bad)
                    .accepted
                    .contains("IfNotPresent")
            );
        }
    }

    #[test]
    fn runtime_required_taint() {
        let t = accepts("RUNTIME_REQUIRED_TAINT", "example.com/wait:NoExecute")
            .jobs
            .runtime_required_taint;
        assert_eq!(
            (t.key.as_str(), t.value, t.effect.as_str()),
            ("example.com/wait", None, "NoExecute")
        );
        assert_eq!(
            accepts("RUNTIME_REQUIRED_TAINT", "k=v:PreferNoSchedule")
                .jobs
                .runtime_required_taint
                .to_string(),
            "k=v:PreferNoSchedule"
        );
        for bad in [
            "nodewright.nvidia.com=runtime-required:NoSchedule-",
            "k-",
            "k=v",
            "k=v:Never",
            ":NoSchedule",
        ] {
            let p = problem("RUNTIME_REQUIRED_TAINT", bad);
            assert!(p.accepted.contains("key[=value]:Effect"), "{p}");
        }
        assert!(
            problem("RUNTIME_REQUIRED_TAINT", "k-")
                .accepted
                .contains("removal")
        );
    }

    #[test]
    fn default_interval() {
        assert_eq!(
            accepts("DEFAULT_INTERVAL", "1m").default_interval,
            Duration::from_secs(60)
        );
        assert_eq!(
            accepts("DEFAULT_INTERVAL", "1h30m").default_interval,
            Duration::from_secs(5400)
        );
        for bad in ["59s", "0", "-10m", "10", "ten minutes", "3d"] {
            assert!(
                problem("DEFAULT_INTERVAL", bad)
                    .accepted
                    .contains("at least 1m")
            );
        }
    }

    #[test]
    fn booleans() {
        for (var, default) in [("REAPPLY_ON_REBOOT", false), ("LEADER_ELECTION", true)] {
            let get = |c: OperatorConfig| {
                if var == "REAPPLY_ON_REBOOT" {
                    c.reapply_on_reboot
                } else {
                    c.leader_election
                }
            };
            assert_eq!(get(accepts(var, "")), default);
            for yes in ["true", "TRUE", "True", "t", "1"] {
                assert!(get(accepts(var, yes)), "{var}={yes}");
            }
            for no in ["false", "FALSE", "f", "0"] {
                assert!(!get(accepts(var, no)), "{var}={no}");
            }
            for bad in ["yes", "on", "2", "truee"] {
                assert!(problem(var, bad).accepted.contains("true or false"));
            }
        }
    }

    #[test]
    fn lease_name_and_identity() {
        assert_eq!(accepts("LEASE_NAME", "nw.leader").lease.name, "nw.leader");
        for bad in ["Leader", "leader_1", "leader."] {
            assert!(
                problem("LEASE_NAME", bad)
                    .accepted
                    .contains("DNS-1123 subdomain")
            );
        }
        assert_eq!(
            accepts("POD_NAME", "operator-7d9f-x2").lease.identity,
            "operator-7d9f-x2"
        );
        assert!(
            problem("POD_NAME", "two words")
                .accepted
                .contains("identity")
        );
        // Without POD_NAME the hostname is the identity; without either, that is a problem.
        let host = env(&[("HOSTNAME", "host-1\n")]).expect("hostname");
        assert_eq!(host.lease.identity, "host-1");
        let none = OperatorConfig::from_lookup(|_| None).expect_err("no identity");
        assert_eq!(none.problems.len(), 1);
        assert_eq!(none.problems[0].var, "POD_NAME");
        assert!(none.to_string().contains("metadata.name"), "{none}");
        let both = env(&[("HOSTNAME", "host-1"), ("POD_NAME", "pod-1")]).expect("both");
        assert_eq!(both.lease.identity, "pod-1", "POD_NAME wins");
    }

    #[test]
    fn lease_timings() {
        let t = env(&[
            ("LEASE_DURATION", "30s"),
            ("LEASE_RENEW_DEADLINE", "20s"),
            ("LEASE_RETRY_PERIOD", "500ms"),
        ])
        .expect("valid")
        .lease
        .timings;
        assert_eq!(
            (t.lease_duration, t.renew_deadline, t.retry_period),
            (
                Duration::from_secs(30),
                Duration::from_secs(20),
                Duration::from_millis(500)
            )
        );
        for bad in ["0s", "1500ms", "-15s", "15", "forever"] {
            assert!(
                problem("LEASE_DURATION", bad)
                    .accepted
                    .contains("whole seconds")
            );
        }
        for bad in ["0s", "-1s", "soon"] {
            assert!(
                problem("LEASE_RENEW_DEADLINE", bad)
                    .accepted
                    .contains("above 0")
            );
        }
        for bad in ["0s", "50ms", "x"] {
            assert!(
                problem("LEASE_RETRY_PERIOD", bad)
                    .accepted
                    .contains("at least 100ms")
            );
        }
        // Each alone is fine; together the order renew < duration, retry < renew is enforced.
        let p = problem("LEASE_RENEW_DEADLINE", "15s");
        assert!(
            p.accepted.contains("shorter than LEASE_DURATION (15s)"),
            "{p}"
        );
        let p = problem("LEASE_RETRY_PERIOD", "10s");
        assert!(
            p.accepted.contains("shorter than LEASE_RENEW_DEADLINE"),
            "{p}"
        );
        // A short LEASE_DURATION is blamed on the deadline that no longer fits under it.
        let err = env(&[("LEASE_DURATION", "10s")]).expect_err("renew 10s >= duration 10s");
        assert_eq!(err.problems.len(), 1, "{err}");
        assert_eq!(err.problems[0].var, "LEASE_RENEW_DEADLINE", "{err}");
        assert!(err.to_string().contains("LEASE_DURATION (10s)"), "{err}");
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            accepts("METRICS_LISTEN", "127.0.0.1:9000").metrics_listen,
            "127.0.0.1:9000".parse().expect("addr")
        );
        assert_eq!(
            accepts("PROBE_LISTEN", ":9001").probe_listen,
            "0.0.0.0:9001".parse().expect("addr")
        );
        assert_eq!(
            accepts("PROBE_LISTEN", "[::]:9001").probe_listen,
            "[::]:9001".parse().expect("addr")
        );
        for var in ["METRICS_LISTEN", "PROBE_LISTEN"] {
            for bad in ["8080", "localhost:8080", "0.0.0.0:99999", ":http"] {
                assert!(problem(var, bad).accepted.contains("port"));
            }
        }
    }

    #[test]
    fn logging() {
        assert_eq!(accepts("LOG_FORMAT", "text").log_format, LogFormat::Text);
        assert_eq!(accepts("LOG_FORMAT", "json").log_format, LogFormat::Json);
        for bad in ["console", "JSON", "logfmt"] {
            assert!(
                problem("LOG_FORMAT", bad)
                    .accepted
                    .contains("json (default) or text")
            );
        }
        assert_eq!(
            accepts("LOG_LEVEL", "nodewright_operator=debug,kube=warn,info").log_level,
            "nodewright_operator=debug,kube=warn,info"
        );
        for bad in ["verbose", "info,[", "x=notalevel"] {
            assert!(
                problem("LOG_LEVEL", bad)
                    .accepted
                    .contains("tracing filter")
            );
        }
    }

    #[test]
    fn every_bad_value_is_reported_at_once() {
        let err = env(&[
            ("JOB_BACKOFF_LIMIT", "-1"),
            ("NAMESPACE", "Bad_NS"),
            ("AGENT_IMAGE", "agent"),
            ("PAUSE_IMAGE", "registry:5000/pause"),
            ("COPY_DIR_ROOT", "relative"),
            ("AGENT_LOG_ROOT", "logs"),
            ("IMAGE_PULL_SECRET", "Nope"),
            ("PACKAGE_IMAGE_PULL_POLICY", "sometimes"),
            ("RUNTIME_REQUIRED_TAINT", "k-"),
            ("DEFAULT_INTERVAL", "5s"),
            ("REAPPLY_ON_REBOOT", "maybe"),
            ("LEADER_ELECTION", "sure"),
            ("LEASE_NAME", "Lease"),
            ("LEASE_DURATION", "15s"),
            ("LEASE_RENEW_DEADLINE", "20s"),
            ("LEASE_RETRY_PERIOD", "30s"),
            ("POD_NAME", "a b"),
            ("METRICS_LISTEN", "nowhere"),
            ("PROBE_LISTEN", "8081"),
            ("LOG_FORMAT", "xml"),
            ("LOG_LEVEL", "loud"),
        ])
        .expect_err("everything is wrong");
        let vars: Vec<&str> = err.problems.iter().map(|p| p.var).collect();
        assert_eq!(
            vars,
            [
                "JOB_BACKOFF_LIMIT",
                "NAMESPACE",
                "AGENT_IMAGE",
                "PAUSE_IMAGE",
                "COPY_DIR_ROOT",
                "AGENT_LOG_ROOT",
                "IMAGE_PULL_SECRET",
                "PACKAGE_IMAGE_PULL_POLICY",
                "RUNTIME_REQUIRED_TAINT",
                "DEFAULT_INTERVAL",
                "REAPPLY_ON_REBOOT",
                "LEADER_ELECTION",
                "LEASE_NAME",
                "LEASE_RENEW_DEADLINE",
                "LEASE_RETRY_PERIOD",
                "POD_NAME",
                "METRICS_LISTEN",
                "PROBE_LISTEN",
                "LOG_FORMAT",
                "LOG_LEVEL",
            ]
        );
        let text = err.to_string();
        assert!(text.starts_with("invalid operator configuration"), "{text}");
        for needle in [
            "NAMESPACE=\"Bad_NS\"",
            "AGENT_IMAGE=\"agent\"",
            "LEASE_RENEW_DEADLINE=\"20s\" is invalid: must be shorter than LEASE_DURATION",
            "LOG_LEVEL=\"loud\"",
            "JOB_BACKOFF_LIMIT=\"-1\"",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
        assert_eq!(
            text.lines().count(),
            1 + vars.len(),
            "one line per problem:\n{text}"
        );
    }
}
