//! Rules for a whole NodeWright on CREATE and UPDATE: its name, budget, selectors, policy reference,
//! and (through `package` and `graph`) its packages.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nodewright_shared::api::{MAX_DEPENDS_ON, MAX_PACKAGES, NodeWright};
use nodewright_shared::defaulted;
use nodewright_shared::keys::MAX_NODEWRIGHT_NAME_LEN;

use super::cluster::ClusterView;
use super::findings::{FieldError, Findings, child};
use super::selector::selector_errors;
use super::{env, graph, package};

/// The CRD's size bounds (`maxProperties` of `spec.packages` and of every `dependsOn`), as findings:
/// the object can never be stored, so nothing else about it is worth checking (or defaulting). Work
/// and message stay bounded whatever the object holds: the oversized `dependsOn` maps are counted
/// and the first few named.
pub fn size_errors(nw: &NodeWright) -> Vec<FieldError> {
    let packages = &nw.spec.packages;
    let mut errors = Vec::new();
    if packages.len() > MAX_PACKAGES {
        errors.push(FieldError::new(
            "spec.packages",
            format!(
                "{} packages: at most {MAX_PACKAGES} are allowed (the bound keeps the CRD's validation within the apiserver's cost budget); split them over several NodeWrights",
                packages.len()
            ),
        ));
    }
    let oversized: Vec<&str> = packages
        .iter()
        .filter(|(_, p)| p.depends_on.len() > MAX_DEPENDS_ON)
        .map(|(k, _)| k.as_str())
        .collect();
    for key in oversized.iter().take(MAX_LISTED) {
        errors.push(FieldError::new(
            child(&child("spec.packages", key), "dependsOn"),
            format!(
                "{} entries: at most {MAX_DEPENDS_ON} are allowed; depend on fewer packages (dependencies are transitive)",
                packages[*key].depends_on.len()
            ),
        ));
    }
    if oversized.len() > MAX_LISTED {
        errors.push(FieldError::new(
            "spec.packages",
            format!(
                "{} more package(s) have more than {MAX_DEPENDS_ON} dependsOn entries",
                oversized.len() - MAX_LISTED
            ),
        ));
    }
    errors
}

/// Oversized `dependsOn` maps named one by one before the rest are only counted.
const MAX_LISTED: usize = 10;

/// Checks everything that does not need the previous version of the object.
pub fn check(nw: &NodeWright, cluster: &dyn ClusterView, f: &mut Findings) {
    if let Some(name) = &nw.metadata.name
        && name.len() > MAX_NODEWRIGHT_NAME_LEN
    {
        f.error(
            "metadata.name",
            format!(
                "name {name:?} is {} characters, at most {MAX_NODEWRIGHT_NAME_LEN} are allowed: it is part of node annotation and label keys (nodewright.nvidia.com/nodeState_<name>, whose name part is limited to 63 characters); choose a shorter name",
                name.len()
            ),
        );
    }
    if let Err(e) = defaulted::recorded(nw) {
        f.error(defaulted::RECORD_PATH, e.to_string());
    }
    let spec = &nw.spec;
    let policy = spec.deployment_policy.as_deref().filter(|p| !p.is_empty());

    if let Some(budget) = &spec.interruption_budget {
        if budget.percent.is_some() && budget.count.is_some() {
            f.error(
                "spec.interruptionBudget",
                "InterruptionBudget is not valid, both percent and count can not be set at the same time: keep only one of them",
            );
        }
        if policy.is_some() && (budget.percent.is_some() || budget.count.is_some()) {
            f.error(
                "spec.interruptionBudget",
                "deploymentPolicy and interruptionBudget are mutually exclusive: remove interruptionBudget (the DeploymentPolicy's budgets limit the rollout) or remove deploymentPolicy",
            );
        }
        if let Some(p) = budget.percent
            && !(0..=100).contains(&p)
        {
            f.error(
                "spec.interruptionBudget.percent",
                format!("percent is {p}: it is a share of the targeted nodes, use 0 to 100"),
            );
        }
        if let Some(c) = budget.count
            && c < 0
        {
            f.error(
                "spec.interruptionBudget.count",
                format!("count is {c}: it is a number of nodes, use 0 or more"),
            );
        }
    }
    if let Some(gates) = &spec.health_gates {
        if policy.is_some() {
            f.error(
                "spec.healthGates",
                "deploymentPolicy and healthGates are mutually exclusive: put the gates in the DeploymentPolicy (spec.healthGates there), or remove deploymentPolicy",
            );
        }
        super::health_gates::check(gates, "spec.healthGates", f);
    }
    if spec.priority < 1 {
        f.error(
            "spec.priority",
            format!(
                "priority is {}: it must be at least 1 (lower runs first; the default is 200)",
                spec.priority
            ),
        );
    }
    check_selector(
        spec.node_selectors.as_ref(),
        "spec.nodeSelectors",
        "node selectors are not valid",
        f,
    );
    check_selector(
        spec.pod_non_interrupt_labels.as_ref(),
        "spec.podNonInterruptLabels",
        "pod non-interrupt labels are not valid",
        f,
    );
    if let Err(e) = nodewright_core::node::drain::DrainOptions::of(spec.drain_config.as_ref()) {
        f.error(format!("spec.drainConfig.{}", e.field), e.to_string());
    }
    let oversized = size_errors(nw);
    if oversized.is_empty() {
        for (key, p) in &spec.packages {
            package::check(key, p, f);
            env::check(key, p, cluster.env_names(), f);
        }
        graph::check(&spec.packages, f);
    } else {
        for e in oversized {
            f.error(e.path, e.message);
        }
    }

    if let Some(policy) = policy
        && !cluster.policy_exists(policy)
    {
        f.error(
            "spec.deploymentPolicy",
            format!(
                "deploymentPolicy {policy:?} not found: create the DeploymentPolicy {policy:?} first, or fix the name"
            ),
        );
    }
}

fn check_selector(selector: Option<&LabelSelector>, path: &str, what: &str, f: &mut Findings) {
    for e in selector.map(selector_errors).unwrap_or_default() {
        f.error(path, format!("{what}: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Cluster, nodewright, package};
    use super::super::validate_nodewright;
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use nodewright_shared::api::{InterruptionBudget, NodeWright, Package, PackageResources};

    #[test]
    fn a_drain_config_duration_admission_would_misread_is_refused_naming_it() {
        let mut nw = nodewright("nw", [("tool", package("1.0.0"))]);
        nw.spec.drain_config = Some(nodewright_shared::api::DrainConfig {
            timeout: Some("-5m".into()),
            grace_period: Some("30s".into()),
            ..Default::default()
        });
        let got = lines(&nw);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("spec.drainConfig.timeout: drainConfig.timeout \"-5m\" is not a non-negative Go duration"),
            "{got:?}"
        );
        nw.spec.drain_config = Some(nodewright_shared::api::DrainConfig {
            timeout: Some("10m".into()),
            ..Default::default()
        });
        assert!(lines(&nw).is_empty());
    }

    fn lines(nw: &NodeWright) -> Vec<String> {
        let v = validate_nodewright(
            nw,
            None,
            &Cluster::with_policies(&["gpu-rollout"]),
            &Default::default(),
        );
        v.errors.iter().map(ToString::to_string).collect()
    }

    fn assert_ok(nw: &NodeWright) {
        assert_eq!(lines(nw), Vec::<String>::new(), "{:?}", nw.spec);
    }

    fn assert_err(nw: &NodeWright, want: &str) {
        let got = lines(nw);
        assert!(
            got.iter().any(|l| l.contains(want)),
            "{want:?} not in {got:?}"
        );
    }

    #[test]
    fn names() {
        assert_ok(&nodewright(&"a".repeat(53), []));
        assert_err(
            &nodewright(&"a".repeat(54), []),
            "metadata.name: name \"aaaa",
        );
        assert_err(
            &nodewright(&"a".repeat(54), []),
            "is 54 characters, at most 53",
        );
        let mut unnamed = nodewright("x", []);
        unnamed.metadata.name = None;
        assert_ok(&unnamed);
    }

    #[test]
    fn the_defaulted_stage_timeouts_record() {
        let annotated = |text: &str| {
            let mut nw = nodewright("nw", []);
            nw.metadata.annotations = Some(
                [(
                    nodewright_shared::keys::DEFAULTED_STAGE_TIMEOUTS_ANNOTATION.to_owned(),
                    text.to_owned(),
                )]
                .into(),
            );
            nw
        };
        assert_ok(&annotated(r#"{"a":"1h"}"#));
        assert_ok(&annotated("{}"));
        for bad in ["a=1h", r#"{"a":5}"#, "[]"] {
            assert_err(
                &annotated(bad),
                "metadata.annotations[nodewright.nvidia.com/defaulted-stage-timeouts]: not a JSON object of package name to stageTimeout",
            );
        }
    }

    #[test]
    fn budgets_and_policies() {
        let budget = |percent, count| {
            let mut nw = nodewright("nw", []);
            nw.spec.interruption_budget = Some(InterruptionBudget { percent, count });
            nw
        };
        assert_ok(&budget(Some(10), None));
        assert_ok(&budget(None, Some(0)));
        assert_ok(&budget(None, None));
        assert_err(
            &budget(Some(10), Some(2)),
            "spec.interruptionBudget: InterruptionBudget is not valid, both percent and count can not be set",
        );
        assert_err(
            &budget(Some(150), None),
            "spec.interruptionBudget.percent: percent is 150",
        );
        assert_err(
            &budget(None, Some(-1)),
            "spec.interruptionBudget.count: count is -1",
        );

        let mut with_policy = nodewright("nw", []);
        with_policy.spec.deployment_policy = Some("gpu-rollout".into());
        assert_ok(&with_policy);
        let mut empty_policy = nodewright("nw", []);
        empty_policy.spec.deployment_policy = Some(String::new());
        assert_ok(&empty_policy);
        let mut both = budget(None, Some(2));
        both.spec.deployment_policy = Some("gpu-rollout".into());
        assert_err(
            &both,
            "spec.interruptionBudget: deploymentPolicy and interruptionBudget are mutually exclusive",
        );
        // An empty budget object next to a policy is fine.
        let mut empty_budget = budget(None, None);
        empty_budget.spec.deployment_policy = Some("gpu-rollout".into());
        assert_ok(&empty_budget);
        let mut missing = nodewright("nw", []);
        missing.spec.deployment_policy = Some("no-such-policy".into());
        assert_err(
            &missing,
            "spec.deploymentPolicy: deploymentPolicy \"no-such-policy\" not found: create the DeploymentPolicy",
        );
    }

    /// The CRD's size bounds, named with the counts; an object over them gets only those findings, so
    /// its work and its message stay bounded.
    #[test]
    fn size_bounds() {
        let with = |n: usize, deps: usize| {
            let mut nw = nodewright("nw", []);
            for i in 0..n {
                let mut p = package("1.0.0");
                p.depends_on = (0..deps)
                    .map(|d| (format!("dep-{d}"), "1.0.0".into()))
                    .collect();
                nw.spec.packages.insert(format!("pkg-{i:05}x"), p);
            }
            nw
        };
        assert_eq!(lines(&with(100, 0)), Vec::<String>::new());
        let got = lines(&with(10_000, 0));
        assert_eq!(
            got,
            vec![
                "spec.packages: 10000 packages: at most 100 are allowed (the bound keeps the CRD's validation within the apiserver's cost budget); split them over several NodeWrights"
            ]
        );
        let got = lines(&with(20, 101));
        assert_eq!(got.len(), 11, "{got:?}");
        assert!(
            got.iter()
                .any(|l| l == "spec.packages.pkg-00000x.dependsOn: 101 entries: at most 100 are allowed; depend on fewer packages (dependencies are transitive)"),
            "{got:?}"
        );
        assert!(
            got.iter()
                .any(|l| l.contains("10 more package(s) have more than 100 dependsOn entries")),
            "{got:?}"
        );
        assert_eq!(super::super::nodewright_oversized(&with(100, 0)), None);
        assert!(
            super::super::nodewright_oversized(&with(101, 0))
                .is_some_and(|m| m.starts_with("spec.packages: 101 packages: at most 100"))
        );
    }

    #[test]
    fn priority() {
        let mut nw = nodewright("nw", []);
        nw.spec.priority = 1;
        assert_ok(&nw);
        nw.spec.priority = 0;
        assert_err(&nw, "spec.priority: priority is 0: it must be at least 1");
    }

    #[test]
    fn selectors() {
        let bad = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "pool".into(),
                operator: "Near".into(),
                values: Some(vec!["gpu".into()]),
            }]),
        };
        let good = LabelSelector {
            match_labels: Some(
                [("nodewright.example.com/pool".to_owned(), "gpu".to_owned())].into(),
            ),
            match_expressions: None,
        };
        let mut nw = nodewright("nw", []);
        nw.spec.node_selectors = Some(good.clone());
        nw.spec.pod_non_interrupt_labels = Some(good);
        assert_ok(&nw);
        nw.spec.node_selectors = Some(bad.clone());
        assert_err(
            &nw,
            "spec.nodeSelectors: node selectors are not valid: matchExpressions[0].operator: \"Near\" is not a valid label selector operator: use one of In, NotIn, Exists, DoesNotExist",
        );
        nw.spec.node_selectors = None;
        nw.spec.pod_non_interrupt_labels = Some(bad);
        assert_err(
            &nw,
            "spec.podNonInterruptLabels: pod non-interrupt labels are not valid: matchExpressions[0].operator",
        );
    }

    /// All problems of one object come back together, sorted by path then message.
    #[test]
    fn every_error_together_and_sorted() {
        let q = |s: &str| Some(Quantity(s.to_owned()));
        let mut nw = nodewright(
            &"n".repeat(60),
            [
                (
                    "zz",
                    Package {
                        version: "01.0.0".into(),
                        image: "img:1".into(),
                        ..package("1")
                    },
                ),
                (
                    "aa",
                    Package {
                        stage_timeout: Some("600000h".into()),
                        resources: Some(PackageResources {
                            cpu_request: q("500m"),
                            cpu_limit: q("100m"),
                            memory_request: q("1Gi"),
                            memory_limit: q("1Gi"),
                        }),
                        ..package("1.0.0")
                    },
                ),
                (
                    "mm",
                    Package {
                        depends_on: [("mm".to_owned(), "1.0.0".to_owned())].into(),
                        ..package("1.0.0")
                    },
                ),
            ],
        );
        nw.spec.deployment_policy = Some("nope".into());
        nw.spec.interruption_budget = Some(InterruptionBudget {
            percent: Some(1),
            count: Some(1),
        });
        let v = validate_nodewright(&nw, None, &Cluster::with_policies(&[]), &Default::default());
        let paths: Vec<&str> = v.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "metadata.name",
                "spec.deploymentPolicy",
                "spec.interruptionBudget",
                "spec.interruptionBudget",
                "spec.packages.aa.resources.cpuLimit",
                "spec.packages.aa.stageTimeout",
                "spec.packages.mm.dependsOn",
                "spec.packages.zz.image",
                "spec.packages.zz.version",
            ],
            "{}",
            v.message()
        );
        let mut sorted = v.errors.clone();
        sorted.sort();
        assert_eq!(sorted, v.errors);
        assert_eq!(v.message().lines().count(), v.errors.len());
        assert!(!v.is_allowed());
    }
}
