//! Rules for a DeploymentPolicy (CREATE/UPDATE) and for deleting one.
//!
//! The CRD schema carries the same numeric ranges, but objects can reach the webhook before schema
//! defaulting and validation in some paths (and the webhook is the layer that reports every problem at
//! once), so the ranges are checked here as well.

use std::collections::BTreeMap;

use nodewright_shared::api::{
    BatchParameters, DEFAULT_COMPARTMENT, DeploymentBudget, DeploymentPolicy, DeploymentStrategy,
};

use nodewright_shared::api::MAX_SOAK_HOURS;
use nodewright_shared::duration::GoDuration;
use nodewright_shared::window;

use super::cluster::ClusterView;
use super::findings::{Findings, child, item, short_list};
use super::selector::selector_errors;

/// The longest compartment name (it is a status map key; the CRD allows 63).
const MAX_COMPARTMENT_NAME_LEN: usize = 63;

/// Checks a DeploymentPolicy on CREATE or UPDATE.
pub fn check(policy: &DeploymentPolicy, f: &mut Findings) {
    let spec = &policy.spec;
    check_budget(
        &spec.default.budget,
        "spec.default.budget",
        "default budget",
        f,
    );
    check_strategy(
        &spec.default.strategy,
        "spec.default.strategy",
        "default strategy",
        f,
    );

    check_rollback(policy, f);

    if let Some(gates) = &spec.health_gates {
        super::health_gates::check(gates, "spec.healthGates", f);
    }

    if let Err(problems) = window::parse(&spec.windows) {
        for p in problems {
            f.error(format!("spec.{}", p.field()), p.problem());
        }
    }

    // First compartment with each name, and the compartments seen so far (for identical selectors).
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, c) in spec.compartments.iter().enumerate() {
        let path = item("spec.compartments", i);
        let n = c.name.as_str();
        let name_path = child(&path, "name");
        if n.is_empty() {
            f.error(
                &name_path,
                "compartment name is empty: give every compartment a unique name",
            );
        } else if n.len() > MAX_COMPARTMENT_NAME_LEN {
            f.error(
                &name_path,
                format!(
                    "compartment name {n:?} is {} characters: use at most {MAX_COMPARTMENT_NAME_LEN}",
                    n.len()
                ),
            );
        }
        if n == DEFAULT_COMPARTMENT {
            f.error(
                &name_path,
                format!(
                    "compartment name \"{DEFAULT_COMPARTMENT}\" is reserved and cannot be used: it is the compartment of nodes that match no other; pick another name (spec.default configures it)"
                ),
            );
        }
        if let Some(first) = names.get(n) {
            f.error(
                &name_path,
                format!(
                    "compartment name {n:?} is not unique (spec.compartments[{first}] has it too): give each compartment its own name"
                ),
            );
        } else {
            names.insert(n, i);
        }
        check_budget(
            &c.budget,
            &child(&path, "budget"),
            &format!("compartment {n:?} budget"),
            f,
        );
        if let Some(s) = &c.strategy {
            check_strategy(
                s,
                &child(&path, "strategy"),
                &format!("compartment {n:?} strategy"),
                f,
            );
        }
        let selector_path = child(&path, "selector");
        for e in selector_errors(&c.selector) {
            f.error(
                &selector_path,
                format!("compartment {n:?} has invalid selector: {e}"),
            );
        }
        if let Some(earlier) = spec.compartments[..i]
            .iter()
            .find(|e| e.selector == c.selector)
        {
            f.error(
                &selector_path,
                format!(
                    "compartment {n:?} has identical selector to compartment {:?}: both would claim the same nodes; change one selector or merge the compartments",
                    earlier.name
                ),
            );
        }
    }
}

/// `rollbackOnFailure` acts when a failure threshold stops a rollout: without any
/// `failureThreshold` nothing ever stops, so it would never act (a warning, not a denial: the
/// thresholds may be added later).
fn check_rollback(policy: &DeploymentPolicy, f: &mut Findings) {
    let spec = &policy.spec;
    if spec.rollback_on_failure != Some(true) {
        return;
    }
    let threshold = |s: &DeploymentStrategy| {
        [
            s.fixed.as_ref(),
            s.linear.as_ref().map(|l| &l.batch),
            s.exponential.as_ref().map(|e| &e.batch),
        ]
        .into_iter()
        .flatten()
        .any(|b| b.failure_threshold.is_some())
    };
    let any = threshold(&spec.default.strategy)
        || spec
            .compartments
            .iter()
            .filter_map(|c| c.strategy.as_ref())
            .any(threshold);
    if !any {
        f.warn(
            "spec.rollbackOnFailure: no strategy sets failureThreshold, so no rollout ever stops \
             and nothing is rolled back automatically; set failureThreshold on the strategies \
             whose failures should roll back",
        );
    }
}

/// Exactly one of percent (1–100) or count (≥ 1).
fn check_budget(budget: &DeploymentBudget, path: &str, what: &str, f: &mut Findings) {
    match (budget.percent, budget.count) {
        (None, None) => f.error(
            path,
            format!(
                "{what}: exactly one of percent or count must be set: add percent (1-100, a share of the nodes) or count (a number of nodes)"
            ),
        ),
        (Some(_), Some(_)) => f.error(
            path,
            format!("{what}: percent and count are mutually exclusive: keep only one of them"),
        ),
        _ => {}
    }
    if let Some(p) = budget.percent
        && !(1..=100).contains(&p)
    {
        f.error(
            child(path, "percent"),
            format!("{what}: percent is {p}: use 1 to 100"),
        );
    }
    if let Some(c) = budget.count
        && c < 1
    {
        f.error(
            child(path, "count"),
            format!("{what}: count is {c}: use at least 1"),
        );
    }
}

/// Exactly one of fixed, linear or exponential, each with its parameters in range.
fn check_strategy(strategy: &DeploymentStrategy, path: &str, what: &str, f: &mut Findings) {
    let set: Vec<&str> = [
        strategy.fixed.as_ref().map(|_| "fixed"),
        strategy.linear.as_ref().map(|_| "linear"),
        strategy.exponential.as_ref().map(|_| "exponential"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if set.len() != 1 {
        let found = if set.is_empty() {
            "none is set".to_owned()
        } else {
            format!("{} are set", set.join(" and "))
        };
        f.error(
            path,
            format!(
                "{what}: exactly one of fixed, linear, or exponential must be set ({found}): keep exactly one"
            ),
        );
    }
    if let Some(p) = &strategy.fixed {
        check_batch(p, &child(path, "fixed"), what, f);
    }
    if let Some(l) = &strategy.linear {
        let at = child(path, "linear");
        check_batch(&l.batch, &at, what, f);
        at_least(l.delta, 1, &child(&at, "delta"), what, "delta", f);
    }
    if let Some(e) = &strategy.exponential {
        let at = child(path, "exponential");
        check_batch(&e.batch, &at, what, f);
        at_least(
            e.growth_factor,
            2,
            &child(&at, "growthFactor"),
            what,
            "growthFactor",
            f,
        );
    }
}

fn check_batch(p: &BatchParameters, path: &str, what: &str, f: &mut Findings) {
    at_least(
        p.initial_batch,
        1,
        &child(path, "initialBatch"),
        what,
        "initialBatch",
        f,
    );
    at_least(
        p.failure_threshold,
        1,
        &child(path, "failureThreshold"),
        what,
        "failureThreshold",
        f,
    );
    percent(
        p.batch_threshold,
        &child(path, "batchThreshold"),
        what,
        "batchThreshold",
        f,
    );
    percent(
        p.safety_limit,
        &child(path, "safetyLimit"),
        what,
        "safetyLimit",
        f,
    );
    if let Some(text) = &p.soak {
        check_soak(text, &child(path, "soak"), what, f);
    }
}

/// A Go duration from 0 to [`MAX_SOAK_HOURS`] (the bound the planner caps at).
fn check_soak(text: &str, path: &str, what: &str, f: &mut Findings) {
    match GoDuration::parse(text) {
        Err(e) => f.error(path, format!("{what}: soak: {e}")),
        Ok(d) if d.is_negative() => f.error(
            path,
            format!("{what}: soak {text:?} is negative: use a duration from 0 to {MAX_SOAK_HOURS}h, e.g. \"10m\""),
        ),
        Ok(d) if d.to_std().is_some_and(|d| d.as_secs() > MAX_SOAK_HOURS.unsigned_abs() * 3600) => f.error(
            path,
            format!("{what}: soak {text:?} is longer than {MAX_SOAK_HOURS}h: a batch soaks at most a week"),
        ),
        Ok(_) => {}
    }
}

fn at_least(value: Option<i32>, min: i32, path: &str, what: &str, field: &str, f: &mut Findings) {
    if let Some(v) = value.filter(|v| *v < min) {
        f.error(path, format!("{what}: {field} is {v}: use at least {min}"));
    }
}

fn percent(value: Option<i32>, path: &str, what: &str, field: &str, f: &mut Findings) {
    if let Some(v) = value.filter(|v| !(1..=100).contains(v)) {
        f.error(
            path,
            format!("{what}: {field} is {v}: it is a percentage, use 1 to 100"),
        );
    }
}

/// A policy still named by NodeWrights cannot be deleted: their rollouts would block.
pub fn check_delete(name: &str, cluster: &dyn ClusterView, f: &mut Findings) {
    let users = cluster.nodewrights_using_policy(name);
    if users.is_empty() {
        return;
    }
    f.error(
        "metadata.name",
        format!(
            "cannot delete DeploymentPolicy {name:?}: still referenced by {} NodeWright(s): [{}]: change their spec.deploymentPolicy (or delete them) first",
            users.len(),
            short_list(&users, 20)
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::super::testing::Cluster;
    use super::super::{validate_deployment_policy, validate_deployment_policy_delete};
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use nodewright_shared::api::{
        Compartment, DeploymentPolicySpec, ExponentialStrategy, LinearStrategy, PolicyDefault,
    };

    fn count(n: i32) -> DeploymentBudget {
        DeploymentBudget {
            percent: None,
            count: Some(n),
        }
    }

    fn fixed() -> DeploymentStrategy {
        DeploymentStrategy {
            fixed: Some(BatchParameters::default()),
            ..DeploymentStrategy::default()
        }
    }

    fn selector(k: &str, v: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some([(k.to_owned(), v.to_owned())].into()),
            match_expressions: None,
        }
    }

    fn compartment(name: &str, sel: LabelSelector) -> Compartment {
        Compartment {
            name: name.to_owned(),
            selector: sel,
            budget: count(1),
            strategy: None,
        }
    }

    fn policy(compartments: Vec<Compartment>) -> DeploymentPolicy {
        DeploymentPolicy::new(
            "p",
            DeploymentPolicySpec {
                default: PolicyDefault {
                    budget: count(1),
                    strategy: fixed(),
                },
                compartments,
                windows: Vec::new(),
                health_gates: None,
                reset_batch_state_on_completion: None,
                rollback_on_failure: None,
            },
        )
    }

    fn lines(p: &DeploymentPolicy) -> Vec<String> {
        validate_deployment_policy(p)
            .errors
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn assert_err(p: &DeploymentPolicy, want: &str) {
        let got = lines(p);
        assert!(
            got.iter().any(|l| l.contains(want)),
            "{want:?} not in {got:?}"
        );
    }

    #[test]
    fn rollback_on_failure_without_a_failure_threshold_is_warned_about() {
        let mut p = policy(Vec::new());
        p.spec.rollback_on_failure = Some(true);
        let v = validate_deployment_policy(&p);
        assert!(v.is_allowed(), "a warning, never a denial");
        assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
        assert!(
            v.warnings[0].starts_with("spec.rollbackOnFailure: no strategy sets failureThreshold")
        );
        let mut with = p.clone();
        with.spec.compartments = vec![Compartment {
            strategy: Some(DeploymentStrategy {
                fixed: Some(BatchParameters {
                    failure_threshold: Some(1),
                    ..BatchParameters::default()
                }),
                ..DeploymentStrategy::default()
            }),
            ..compartment("canary", selector("canary", "true"))
        }];
        assert!(validate_deployment_policy(&with).warnings.is_empty());
        p.spec.rollback_on_failure = Some(false);
        assert!(validate_deployment_policy(&p).warnings.is_empty());
    }

    #[test]
    fn a_soak_is_a_go_duration_up_to_a_week() {
        let with = |soak: &str| {
            let mut p = policy(vec![]);
            if let Some(b) = p.spec.default.strategy.fixed.as_mut() {
                b.soak = Some(soak.to_owned());
            }
            lines(&p)
        };
        assert!(with("10m").is_empty() && with("0").is_empty() && with("168h").is_empty());
        assert_eq!(
            with("10 minutes"),
            [
                "spec.default.strategy.fixed.soak: default strategy: soak: unknown unit \" minutes\" in duration \"10 minutes\": use one of ns, us, ms, s, m, h"
            ]
        );
        assert!(with("-5m")[0].contains("soak \"-5m\" is negative: use a duration from 0 to 168h"));
        assert!(with("169h")[0].contains("soak \"169h\" is longer than 168h"));
    }

    #[test]
    fn bad_windows_are_refused_naming_the_field() {
        use nodewright_shared::api::{MaintenanceWindow, Weekday};
        let mut p = policy(vec![]);
        p.spec.windows = vec![
            MaintenanceWindow {
                days: vec![Weekday::Sat, Weekday::Sun],
                start: "22:00".into(),
                end: "04:00".into(),
                time_zone: Some("Europe/Berlin".into()),
            },
            MaintenanceWindow {
                days: vec![],
                start: "7:00".into(),
                end: "09:00".into(),
                time_zone: Some("Mars/Olympus".into()),
            },
        ];
        let got = lines(&p);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_err(
            &p,
            "spec.windows[1].start: \"7:00\" is not a time of day; write HH:MM",
        );
        assert_err(
            &p,
            "spec.windows[1].timeZone: \"Mars/Olympus\" is not an IANA time zone name",
        );
        p.spec.windows.truncate(1);
        assert!(lines(&p).is_empty(), "{:?}", lines(&p));
    }

    #[test]
    fn accepted_policies() {
        let mut p = policy(vec![
            compartment("a", selector("rack", "a")),
            compartment("b", selector("rack", "b")),
            // {} and {matchLabels: {}} are different selectors (structural equality, as upstream).
            compartment("all", LabelSelector::default()),
            compartment(
                "all2",
                LabelSelector {
                    match_labels: Some(Default::default()),
                    match_expressions: None,
                },
            ),
        ]);
        p.spec.compartments[0].strategy = Some(DeploymentStrategy {
            linear: Some(LinearStrategy {
                delta: Some(1),
                ..LinearStrategy::default()
            }),
            ..DeploymentStrategy::default()
        });
        p.spec.default.strategy = DeploymentStrategy {
            exponential: Some(ExponentialStrategy {
                growth_factor: Some(2),
                batch: BatchParameters {
                    initial_batch: Some(1),
                    batch_threshold: Some(100),
                    failure_threshold: Some(1),
                    safety_limit: Some(1),
                    soak: None,
                },
            }),
            ..DeploymentStrategy::default()
        };
        p.spec.default.budget = DeploymentBudget {
            percent: Some(100),
            count: None,
        };
        assert_eq!(lines(&p), Vec::<String>::new());
    }

    #[test]
    fn budgets() {
        let with = |b: DeploymentBudget| {
            let mut p = policy(vec![]);
            p.spec.default.budget = b;
            p
        };
        assert_err(
            &with(DeploymentBudget::default()),
            "spec.default.budget: default budget: exactly one of percent or count must be set",
        );
        assert_err(
            &with(DeploymentBudget {
                percent: Some(10),
                count: Some(3),
            }),
            "spec.default.budget: default budget: percent and count are mutually exclusive",
        );
        assert_err(
            &with(DeploymentBudget {
                percent: Some(0),
                count: None,
            }),
            "spec.default.budget.percent: default budget: percent is 0: use 1 to 100",
        );
        assert_err(
            &with(DeploymentBudget {
                percent: Some(101),
                count: None,
            }),
            "percent is 101",
        );
        assert_err(
            &with(count(0)),
            "spec.default.budget.count: default budget: count is 0: use at least 1",
        );
        let mut p = policy(vec![compartment("rack", selector("a", "b"))]);
        p.spec.compartments[0].budget = DeploymentBudget::default();
        assert_err(
            &p,
            "spec.compartments[0].budget: compartment \"rack\" budget: exactly one of percent or count must be set",
        );
    }

    #[test]
    fn strategies() {
        let with = |s: DeploymentStrategy| {
            let mut p = policy(vec![]);
            p.spec.default.strategy = s;
            p
        };
        assert_err(
            &with(DeploymentStrategy::default()),
            "spec.default.strategy: default strategy: exactly one of fixed, linear, or exponential must be set (none is set)",
        );
        assert_err(
            &with(DeploymentStrategy {
                linear: Some(LinearStrategy::default()),
                ..fixed()
            }),
            "(fixed and linear are set)",
        );
        let exp = |g| {
            with(DeploymentStrategy {
                exponential: Some(ExponentialStrategy {
                    growth_factor: Some(g),
                    ..ExponentialStrategy::default()
                }),
                ..DeploymentStrategy::default()
            })
        };
        assert_err(
            &exp(1),
            "spec.default.strategy.exponential.growthFactor: default strategy: growthFactor is 1: use at least 2",
        );
        let lin = |d| {
            with(DeploymentStrategy {
                linear: Some(LinearStrategy {
                    delta: Some(d),
                    ..LinearStrategy::default()
                }),
                ..DeploymentStrategy::default()
            })
        };
        assert_err(
            &lin(0),
            "spec.default.strategy.linear.delta: default strategy: delta is 0: use at least 1",
        );
        let batch = |b: BatchParameters| {
            with(DeploymentStrategy {
                fixed: Some(b),
                ..DeploymentStrategy::default()
            })
        };
        assert_err(
            &batch(BatchParameters {
                initial_batch: Some(0),
                ..Default::default()
            }),
            "spec.default.strategy.fixed.initialBatch: default strategy: initialBatch is 0",
        );
        assert_err(
            &batch(BatchParameters {
                batch_threshold: Some(101),
                ..Default::default()
            }),
            "fixed.batchThreshold: default strategy: batchThreshold is 101: it is a percentage",
        );
        assert_err(
            &batch(BatchParameters {
                safety_limit: Some(0),
                ..Default::default()
            }),
            "fixed.safetyLimit",
        );
        assert_err(
            &batch(BatchParameters {
                failure_threshold: Some(0),
                ..Default::default()
            }),
            "fixed.failureThreshold",
        );
        let mut p = policy(vec![compartment("rack", selector("a", "b"))]);
        p.spec.compartments[0].strategy = Some(DeploymentStrategy::default());
        assert_err(
            &p,
            "spec.compartments[0].strategy: compartment \"rack\" strategy: exactly one of fixed, linear, or exponential must be set",
        );
    }

    #[test]
    fn compartments() {
        assert_err(
            &policy(vec![compartment("__default__", selector("a", "b"))]),
            "spec.compartments[0].name: compartment name \"__default__\" is reserved and cannot be used",
        );
        assert_err(
            &policy(vec![
                compartment("rack", selector("a", "b")),
                compartment("rack", selector("c", "d")),
            ]),
            "spec.compartments[1].name: compartment name \"rack\" is not unique (spec.compartments[0] has it too)",
        );
        assert_err(
            &policy(vec![compartment("", selector("a", "b"))]),
            "compartment name is empty",
        );
        assert_err(
            &policy(vec![compartment(&"c".repeat(64), selector("a", "b"))]),
            "is 64 characters",
        );
        assert_err(
            &policy(vec![
                compartment("one", selector("rack", "a")),
                compartment("two", selector("rack", "a")),
            ]),
            "spec.compartments[1].selector: compartment \"two\" has identical selector to compartment \"one\"",
        );
        let bad = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "rack".into(),
                operator: "Exists".into(),
                values: Some(vec!["a".into()]),
            }]),
        };
        assert_err(
            &policy(vec![compartment("rack", bad)]),
            "spec.compartments[0].selector: compartment \"rack\" has invalid selector: matchExpressions[0].values: operator Exists takes no values",
        );
        // Three identical: each later one names the first.
        let got = lines(&policy(vec![
            compartment("a", selector("r", "1")),
            compartment("b", selector("r", "1")),
            compartment("c", selector("r", "1")),
        ]));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[1].contains("\"c\" has identical selector to compartment \"a\""),
            "{got:?}"
        );
    }

    #[test]
    fn delete() {
        let mut cluster = Cluster::with_policies(&["free", "used"]);
        cluster
            .policies
            .insert("used".into(), vec!["nw-b".into(), "nw-a".into()]);
        assert!(validate_deployment_policy_delete("free", &cluster).is_allowed());
        assert!(validate_deployment_policy_delete("gone", &cluster).is_allowed());
        let v = validate_deployment_policy_delete("used", &cluster);
        assert_eq!(
            v.message(),
            "metadata.name: cannot delete DeploymentPolicy \"used\": still referenced by 2 NodeWright(s): [nw-a, nw-b]: change their spec.deploymentPolicy (or delete them) first"
        );
    }
}
