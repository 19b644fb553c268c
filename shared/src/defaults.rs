//! Operator defaults and the defaulting functions (DESIGN §3, "the same defaulting functions live in
//! `shared/`").
//!
//! The mutating webhook fills defaults at admission; the operator applies the very same functions to any
//! object that reached storage without them (webhook down or bypassed). Both read [`OperatorDefaults`]
//! from the same environment variables (one ConfigMap in the chart), so they can never disagree.
//!
//! Each defaulting function mutates the typed spec *and* returns what it filled as JSON Pointer +
//! value pairs, so the webhook can turn exactly those decisions into JSON Patch `add` operations without
//! re-serialising (and so rewriting) anything the user wrote.

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use crate::api::{BatchParameters, DeploymentPolicySpec, DeploymentStrategy, NodeWrightSpec};
use crate::deadline::{StageTimeoutError, check_stage_timeout};
use crate::duration::GoDuration;

/// Environment variable: default `stageTimeout` for packages that set none (Go duration, `0` = none).
pub const ENV_JOB_STAGE_TIMEOUT: &str = "JOB_STAGE_TIMEOUT";
/// Environment variable: retries of a failed package stage attempt (a Job's `backoffLimit`).
pub const ENV_JOB_BACKOFF_LIMIT: &str = "JOB_BACKOFF_LIMIT";
/// Environment variable: how long a succeeded Job is kept after its outcome was recorded.
pub const ENV_JOB_TTL_SUCCEEDED: &str = "JOB_TTL_SUCCEEDED";
/// Environment variable: how long a failed Job is kept (as evidence) after its outcome was recorded.
pub const ENV_JOB_TTL_FAILED: &str = "JOB_TTL_FAILED";

const DEFAULT_STAGE_TIMEOUT: &str = "1h";
const DEFAULT_BACKOFF_LIMIT: i32 = 3;
const DEFAULT_TTL_SUCCEEDED: &str = "10m";
const DEFAULT_TTL_FAILED: &str = "24h";
/// TTLs shorter than this would let a Job vanish before anyone (or a restarted operator) looks at it.
pub const MIN_JOB_TTL: Duration = Duration::from_secs(60);

/// DeploymentPolicy strategy defaults.
pub const DEFAULT_INITIAL_BATCH: i32 = 1;
/// See [`DEFAULT_INITIAL_BATCH`].
pub const DEFAULT_BATCH_THRESHOLD: i32 = 100;
/// See [`DEFAULT_INITIAL_BATCH`].
pub const DEFAULT_SAFETY_LIMIT: i32 = 50;
/// See [`DEFAULT_INITIAL_BATCH`].
pub const DEFAULT_LINEAR_DELTA: i32 = 1;
/// See [`DEFAULT_INITIAL_BATCH`].
pub const DEFAULT_GROWTH_FACTOR: i32 = 2;

/// Job settings both services read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorDefaults {
    /// `stageTimeout` for packages that set none, exactly as configured (e.g. `"1h"`), so the webhook
    /// fills in what the administrator wrote.
    pub stage_timeout: String,
    /// The same, parsed.
    pub stage_timeout_duration: Duration,
    /// `backoffLimit` of package Jobs: failed attempts retried before the stage times out.
    pub backoff_limit: i32,
    /// `ttlSecondsAfterFinished` for succeeded Jobs.
    pub ttl_succeeded: Duration,
    /// `ttlSecondsAfterFinished` for failed Jobs.
    pub ttl_failed: Duration,
}

impl Default for OperatorDefaults {
    fn default() -> Self {
        OperatorDefaults {
            stage_timeout: DEFAULT_STAGE_TIMEOUT.to_owned(),
            stage_timeout_duration: Duration::from_secs(3600),
            backoff_limit: DEFAULT_BACKOFF_LIMIT,
            ttl_succeeded: Duration::from_secs(600),
            ttl_failed: Duration::from_secs(24 * 3600),
        }
    }
}

/// One bad environment variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvProblem {
    /// The variable.
    pub var: &'static str,
    /// Its value.
    pub value: String,
    /// What is accepted instead.
    pub accepted: String,
}

impl fmt::Display for EnvProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={:?} is invalid: {}",
            self.var, self.value, self.accepted
        )
    }
}

/// Every bad variable at once, so an administrator fixes them in one round.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct DefaultsError {
    /// The problems, in variable order.
    pub problems: Vec<EnvProblem>,
}

impl fmt::Display for DefaultsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid operator defaults in the environment:")?;
        for p in &self.problems {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

impl OperatorDefaults {
    /// Reads the defaults from the process environment.
    pub fn from_env() -> Result<Self, DefaultsError> {
        Self::from_lookup(|var| std::env::var_os(var).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Reads the defaults through `lookup` (unset ⇒ `None`); surrounding whitespace is ignored.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, DefaultsError> {
        let mut problems = Vec::new();
        let get = |var: &str, default: &str| {
            lookup(var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_owned())
        };

        let stage_timeout = get(ENV_JOB_STAGE_TIMEOUT, DEFAULT_STAGE_TIMEOUT);
        let stage_timeout_duration = match check_stage_timeout(&stage_timeout) {
            Ok(d) => d,
            Err(e) => {
                let why = match e {
                    StageTimeoutError::Unparseable(e) => e.to_string(),
                    other => other.to_string(),
                };
                problems.push(EnvProblem {
                    var: ENV_JOB_STAGE_TIMEOUT,
                    value: stage_timeout.clone(),
                    accepted: format!(
                        "a Go duration from \"0\" (no time bound) to {} such as \"1h\" ({why})",
                        crate::deadline::max_stage_timeout()
                    ),
                });
                Duration::ZERO
            }
        };

        let backoff_text = get(ENV_JOB_BACKOFF_LIMIT, &DEFAULT_BACKOFF_LIMIT.to_string());
        let backoff_limit = match backoff_text.parse::<i32>() {
            Ok(n) if n >= 0 => n,
            _ => {
                problems.push(EnvProblem {
                    var: ENV_JOB_BACKOFF_LIMIT,
                    value: backoff_text,
                    accepted: format!(
                        "a whole number from 0 to {} (retries after the first failed attempt; default {DEFAULT_BACKOFF_LIMIT})",
                        i32::MAX
                    ),
                });
                0
            }
        };

        let mut ttl = |var: &'static str, default: &str| {
            let text = get(var, default);
            match parse_ttl(&text) {
                Some(d) => d,
                None => {
                    problems.push(EnvProblem {
                        var,
                        value: text,
                        accepted: format!(
                            "a Go duration of at least 1m and at most {} (default {default})",
                            crate::deadline::max_stage_timeout()
                        ),
                    });
                    MIN_JOB_TTL
                }
            }
        };
        let ttl_succeeded = ttl(ENV_JOB_TTL_SUCCEEDED, DEFAULT_TTL_SUCCEEDED);
        let ttl_failed = ttl(ENV_JOB_TTL_FAILED, DEFAULT_TTL_FAILED);

        if !problems.is_empty() {
            return Err(DefaultsError { problems });
        }
        Ok(OperatorDefaults {
            stage_timeout,
            stage_timeout_duration,
            backoff_limit,
            ttl_succeeded,
            ttl_failed,
        })
    }

    /// `ttlSecondsAfterFinished` for a succeeded Job.
    pub fn ttl_succeeded_seconds(&self) -> i32 {
        whole_seconds(self.ttl_succeeded)
    }

    /// `ttlSecondsAfterFinished` for a failed Job.
    pub fn ttl_failed_seconds(&self) -> i32 {
        whole_seconds(self.ttl_failed)
    }
}

/// A TTL: Go syntax, at least [`MIN_JOB_TTL`], whole seconds within int32.
fn parse_ttl(text: &str) -> Option<Duration> {
    let d = GoDuration::parse(text).ok()?.to_std()?;
    (d >= MIN_JOB_TTL && d.as_secs() < i32::MAX as u64).then_some(d)
}

fn whole_seconds(d: Duration) -> i32 {
    let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    i32::try_from(secs).unwrap_or(i32::MAX)
}

/// A default that was filled in: where (an RFC 6901 JSON Pointer from the object root) and what.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDefault {
    /// JSON Pointer of the filled field, e.g. `/spec/packages/foo/stageTimeout`. Its parent exists.
    pub pointer: String,
    /// The value filled in.
    pub value: Value,
}

/// Escapes one JSON Pointer reference token (RFC 6901).
pub(crate) fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn fill<T: Clone + Into<Value>>(
    slot: &mut Option<T>,
    value: T,
    pointer: String,
    filled: &mut Vec<FieldDefault>,
) {
    if slot.is_none() {
        *slot = Some(value.clone());
        filled.push(FieldDefault {
            pointer,
            value: value.into(),
        });
    }
}

/// Fills a NodeWright's defaults: every package's `name` from its key and its `stageTimeout` from the
/// operator default. Never changes a value that is set. Returns what was filled, in a stable order.
pub fn default_nodewright(
    spec: &mut NodeWrightSpec,
    defaults: &OperatorDefaults,
) -> Vec<FieldDefault> {
    let mut filled = Vec::new();
    for (key, package) in spec.packages.iter_mut() {
        let base = format!("/spec/packages/{}", escape_token(key));
        fill(
            &mut package.name,
            key.clone(),
            format!("{base}/name"),
            &mut filled,
        );
        fill(
            &mut package.stage_timeout,
            defaults.stage_timeout.clone(),
            format!("{base}/stageTimeout"),
            &mut filled,
        );
    }
    filled
}

/// Fills a DeploymentPolicy's strategy defaults (initialBatch 1, batchThreshold 100, safetyLimit 50,
/// linear delta 1, exponential growthFactor 2) in the default strategy and every compartment's.
/// `failureThreshold` stays unset (never stop). Returns what was filled, in a stable order.
pub fn default_deployment_policy(spec: &mut DeploymentPolicySpec) -> Vec<FieldDefault> {
    let mut filled = Vec::new();
    default_strategy(
        &mut spec.default.strategy,
        "/spec/default/strategy",
        &mut filled,
    );
    for (i, compartment) in spec.compartments.iter_mut().enumerate() {
        if let Some(strategy) = compartment.strategy.as_mut() {
            default_strategy(
                strategy,
                &format!("/spec/compartments/{i}/strategy"),
                &mut filled,
            );
        }
    }
    filled
}

fn default_strategy(strategy: &mut DeploymentStrategy, base: &str, filled: &mut Vec<FieldDefault>) {
    if let Some(fixed) = strategy.fixed.as_mut() {
        default_batch(fixed, &format!("{base}/fixed"), filled);
    }
    if let Some(linear) = strategy.linear.as_mut() {
        let base = format!("{base}/linear");
        default_batch(&mut linear.batch, &base, filled);
        fill(
            &mut linear.delta,
            DEFAULT_LINEAR_DELTA,
            format!("{base}/delta"),
            filled,
        );
    }
    if let Some(exponential) = strategy.exponential.as_mut() {
        let base = format!("{base}/exponential");
        default_batch(&mut exponential.batch, &base, filled);
        fill(
            &mut exponential.growth_factor,
            DEFAULT_GROWTH_FACTOR,
            format!("{base}/growthFactor"),
            filled,
        );
    }
}

fn default_batch(batch: &mut BatchParameters, base: &str, filled: &mut Vec<FieldDefault>) {
    fill(
        &mut batch.initial_batch,
        DEFAULT_INITIAL_BATCH,
        format!("{base}/initialBatch"),
        filled,
    );
    fill(
        &mut batch.batch_threshold,
        DEFAULT_BATCH_THRESHOLD,
        format!("{base}/batchThreshold"),
        filled,
    );
    fill(
        &mut batch.safety_limit,
        DEFAULT_SAFETY_LIMIT,
        format!("{base}/safetyLimit"),
        filled,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        Compartment, DeploymentBudget, DeploymentPolicy, ExponentialStrategy, LinearStrategy,
        NodeWright, Package, PolicyDefault,
    };
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<OperatorDefaults, DefaultsError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        OperatorDefaults::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn unset_environment_gives_documented_defaults() {
        let d = env(&[]).expect("defaults");
        assert_eq!(d, OperatorDefaults::default());
        assert_eq!(d.stage_timeout, "1h");
        assert_eq!(d.stage_timeout_duration, Duration::from_secs(3600));
        assert_eq!(d.backoff_limit, 3);
        assert_eq!(d.ttl_succeeded_seconds(), 600);
        assert_eq!(d.ttl_failed_seconds(), 86400);
    }

    #[test]
    fn configured_values_are_used() {
        let d = env(&[
            ("JOB_STAGE_TIMEOUT", " 45m "),
            ("JOB_BACKOFF_LIMIT", "0"),
            ("JOB_TTL_SUCCEEDED", "1m"),
            ("JOB_TTL_FAILED", "72h"),
        ])
        .expect("valid");
        assert_eq!(d.stage_timeout, "45m");
        assert_eq!(d.stage_timeout_duration, Duration::from_secs(2700));
        assert_eq!(d.backoff_limit, 0);
        assert_eq!(d.ttl_succeeded_seconds(), 60);
        assert_eq!(d.ttl_failed_seconds(), 72 * 3600);
        assert_eq!(
            env(&[("JOB_STAGE_TIMEOUT", "0")]).map(|d| d.stage_timeout_duration),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn bad_values_name_variable_value_and_what_is_accepted() {
        let err = env(&[
            ("JOB_STAGE_TIMEOUT", "-5m"),
            ("JOB_BACKOFF_LIMIT", "-1"),
            ("JOB_TTL_SUCCEEDED", "30s"),
            ("JOB_TTL_FAILED", "forever"),
        ])
        .expect_err("all four are bad");
        let vars: Vec<_> = err.problems.iter().map(|p| p.var).collect();
        assert_eq!(
            vars,
            [
                "JOB_STAGE_TIMEOUT",
                "JOB_BACKOFF_LIMIT",
                "JOB_TTL_SUCCEEDED",
                "JOB_TTL_FAILED"
            ]
        );
        let text = err.to_string();
        assert!(text.contains("JOB_STAGE_TIMEOUT=\"-5m\""), "{text}");
        assert!(
            text.contains("JOB_BACKOFF_LIMIT=\"-1\"") && text.contains("from 0"),
            "{text}"
        );
        assert!(
            text.contains("JOB_TTL_SUCCEEDED=\"30s\"") && text.contains("at least 1m"),
            "{text}"
        );
        assert!(text.contains("JOB_TTL_FAILED=\"forever\""), "{text}");
    }

    #[test]
    fn stage_timeout_default_must_fit_int32() {
        let err = env(&[("JOB_STAGE_TIMEOUT", "600000h")]).expect_err("too large");
        assert!(err.to_string().contains("596523h14m7s"), "{err}");
        assert!(env(&[("JOB_BACKOFF_LIMIT", "2147483648")]).is_err());
        assert!(env(&[("JOB_BACKOFF_LIMIT", "three")]).is_err());
    }

    fn package(stage_timeout: Option<&str>, name: Option<&str>) -> Package {
        Package {
            name: name.map(str::to_owned),
            version: "1.0.0".into(),
            image: "example.com/pkg".into(),
            stage_timeout: stage_timeout.map(str::to_owned),
            ..Package::default()
        }
    }

    #[test]
    fn nodewright_defaults_fill_only_what_is_missing() {
        let mut nw = NodeWright::new("demo", NodeWrightSpec::default());
        nw.spec.packages.insert("a/b~c".into(), package(None, None));
        nw.spec
            .packages
            .insert("set".into(), package(Some("0"), Some("set")));
        let d = OperatorDefaults::default();
        let filled = default_nodewright(&mut nw.spec, &d);
        assert_eq!(
            filled,
            vec![
                FieldDefault {
                    pointer: "/spec/packages/a~1b~0c/name".into(),
                    value: "a/b~c".into()
                },
                FieldDefault {
                    pointer: "/spec/packages/a~1b~0c/stageTimeout".into(),
                    value: "1h".into()
                },
            ]
        );
        assert_eq!(nw.spec.packages["set"].stage_timeout.as_deref(), Some("0"));
        assert_eq!(
            nw.spec.packages["a/b~c"].stage_timeout.as_deref(),
            Some("1h")
        );
        // Idempotent: a second pass fills nothing.
        assert!(default_nodewright(&mut nw.spec, &d).is_empty());
    }

    #[test]
    fn filled_pointers_apply_to_the_json_the_user_sent() {
        // The webhook's use: pointers address the original JSON, whose parents exist.
        let mut original = serde_json::json!({
            "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
            "metadata": {"name": "x"},
            "spec": {"packages": {"p": {"version": "1.0.0", "image": "img"}}}
        });
        let mut nw: NodeWright = serde_json::from_value(original.clone()).expect("decodes");
        for f in default_nodewright(&mut nw.spec, &OperatorDefaults::default()) {
            let (parent, leaf) = f.pointer.rsplit_once('/').expect("has a parent");
            let target = original
                .pointer_mut(parent)
                .and_then(Value::as_object_mut)
                .expect("parent exists");
            target.insert(leaf.to_owned(), f.value);
        }
        assert_eq!(original["spec"]["packages"]["p"]["name"], "p");
        assert_eq!(original["spec"]["packages"]["p"]["stageTimeout"], "1h");
        let typed: NodeWright = serde_json::from_value(original).expect("still decodes");
        assert_eq!(typed.spec, nw.spec);
    }

    #[test]
    fn policy_defaults_fill_every_strategy_but_never_failure_threshold() {
        let mut p = DeploymentPolicy::new(
            "p",
            DeploymentPolicySpec {
                default: PolicyDefault {
                    budget: DeploymentBudget {
                        percent: Some(10),
                        count: None,
                    },
                    strategy: DeploymentStrategy {
                        fixed: Some(BatchParameters::default()),
                        ..Default::default()
                    },
                },
                compartments: vec![
                    Compartment {
                        name: "lin".into(),
                        strategy: Some(DeploymentStrategy {
                            linear: Some(LinearStrategy {
                                batch: BatchParameters {
                                    initial_batch: Some(5),
                                    ..Default::default()
                                },
                                delta: None,
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    Compartment {
                        name: "exp".into(),
                        strategy: Some(DeploymentStrategy {
                            exponential: Some(ExponentialStrategy::default()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    Compartment {
                        name: "none".into(),
                        ..Default::default()
                    },
                ],
                windows: Vec::new(),
                health_gates: None,
                reset_batch_state_on_completion: None,
                rollback_on_failure: None,
            },
        );
        let filled = default_deployment_policy(&mut p.spec);
        let pointers: Vec<_> = filled.iter().map(|f| f.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/spec/default/strategy/fixed/initialBatch",
                "/spec/default/strategy/fixed/batchThreshold",
                "/spec/default/strategy/fixed/safetyLimit",
                "/spec/compartments/0/strategy/linear/batchThreshold",
                "/spec/compartments/0/strategy/linear/safetyLimit",
                "/spec/compartments/0/strategy/linear/delta",
                "/spec/compartments/1/strategy/exponential/initialBatch",
                "/spec/compartments/1/strategy/exponential/batchThreshold",
                "/spec/compartments/1/strategy/exponential/safetyLimit",
                "/spec/compartments/1/strategy/exponential/growthFactor",
            ]
        );
        let lin = p.spec.compartments[0]
            .strategy
            .as_ref()
            .and_then(|s| s.linear.as_ref())
            .expect("linear");
        assert_eq!(
            lin.batch.initial_batch,
            Some(5),
            "a set value is never rewritten"
        );
        assert_eq!(lin.delta, Some(1));
        assert_eq!(
            p.spec
                .default
                .strategy
                .fixed
                .as_ref()
                .and_then(|f| f.failure_threshold),
            None
        );
        assert!(
            p.spec.compartments[2].strategy.is_none(),
            "no strategy is invented"
        );
        assert!(default_deployment_policy(&mut p.spec).is_empty());
    }
}
