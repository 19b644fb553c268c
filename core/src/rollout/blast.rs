//! The blast radius of a NodeWright change (issue 24 §6): what a create or an edit will make run,
//! on how many nodes and in how many batches, said at admission as warnings (never a denial), so
//! the person who types `kubectl apply` reads "this change reboots 120 nodes" before the operator
//! starts doing it.
//!
//! Per package: a new package or a new version runs every stage again (apply or upgrade, config,
//! and its interrupt); a changed `configMap` of the same version runs the config stage again, with
//! the interrupt its `configInterrupts` pick for the changed keys; a removed package with uninstall
//! enabled runs its uninstall. Anything else (an image tag of the same version, resources, env)
//! reruns nothing on a node where the package is done. The nodes are those the NodeWright selects
//! now; the batches are the policy's, computed as if every batch passes.

use std::collections::BTreeMap;

use nodewright_shared::api::{Interrupt, InterruptType, Package};

use super::batches;
use super::compartments::Compartment;
use super::config_updates::{changed_keys, config_interrupt};

/// What a change makes one package do on every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Impact {
    /// The package.
    pub package: String,
    /// What runs.
    pub change: Change,
    /// The interrupt that follows, if any.
    pub interrupt: Option<Interrupt>,
}

/// Why the package runs again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A package the NodeWright did not have: every stage.
    Install {
        /// Its version.
        version: String,
    },
    /// Another version: every stage of the new one.
    Version {
        /// The version before.
        from: String,
        /// The version after.
        to: String,
    },
    /// Its `configMap` changed: the config stage.
    Config {
        /// The version.
        version: String,
        /// The keys added or changed.
        keys: Vec<String>,
    },
    /// Removed with uninstall enabled: its uninstall.
    Uninstall {
        /// The version removed.
        version: String,
    },
}

/// The packages a change from `old` (`None`: a new NodeWright) to `new` makes run again, by name.
pub fn impacts(
    old: Option<&BTreeMap<String, Package>>,
    new: &BTreeMap<String, Package>,
) -> Vec<Impact> {
    let empty = BTreeMap::new();
    let old = old.unwrap_or(&empty);
    let mut out: Vec<Impact> = new
        .iter()
        .filter_map(|(name, p)| {
            let (change, interrupt) = match old.get(name) {
                None => (
                    Change::Install {
                        version: p.version.clone(),
                    },
                    p.interrupt.clone(),
                ),
                Some(before) if before.version != p.version => (
                    Change::Version {
                        from: before.version.clone(),
                        to: p.version.clone(),
                    },
                    p.interrupt.clone(),
                ),
                Some(before) => {
                    let keys = changed_keys(&before.config_map, &p.config_map);
                    if keys.is_empty() {
                        return None;
                    }
                    let interrupt = config_interrupt(p, &keys);
                    (
                        Change::Config {
                            version: p.version.clone(),
                            keys,
                        },
                        interrupt,
                    )
                }
            };
            Some(Impact {
                package: name.clone(),
                change,
                interrupt,
            })
        })
        .collect();
    out.extend(
        old.iter()
            .filter(|(name, p)| {
                !new.contains_key(*name) && p.uninstall.as_ref().is_some_and(|u| u.enabled)
            })
            .map(|(name, p)| Impact {
                package: name.clone(),
                change: Change::Uninstall {
                    version: p.version.clone(),
                },
                interrupt: p.interrupt.clone(),
            }),
    );
    out.sort_by(|a, b| a.package.cmp(&b.package));
    out
}

/// How the rollout of the change is paced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pace {
    /// Batches over every compartment, each as if every batch before it passed.
    pub batches: usize,
    /// Most nodes in progress at once (the sum of the compartments' ceilings).
    pub at_once: usize,
    /// The DeploymentPolicy, or `None` for the legacy `interruptionBudget`.
    pub policy: Option<String>,
}

impl Pace {
    /// The pace of `compartments` under `policy`.
    pub fn of(compartments: &[Compartment], policy: Option<&str>) -> Pace {
        let mut pace = Pace {
            batches: 0,
            at_once: 0,
            policy: policy.map(str::to_owned),
        };
        for c in compartments.iter().filter(|c| !c.nodes.is_empty()) {
            let ceiling = c.ceiling.clamp(1, c.nodes.len());
            pace.at_once += ceiling;
            pace.batches += match &c.strategy {
                Some(s) if batches::is_set(s) => batches::planned(s, c.nodes.len()).len(),
                _ => c.nodes.len().div_ceil(ceiling),
            };
        }
        pace
    }
}

/// Items shown in one warning (services, keys) before `+N more`: the apiserver may truncate a
/// warning past 256 characters.
const SHOWN: usize = 3;
/// Warnings of one change: one per package, the rest summed up in the last.
const MAX_WARNINGS: usize = 10;

fn list(items: &[String]) -> String {
    let mut text = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        text.push_str(&format!(" +{} more", items.len() - SHOWN));
    }
    text
}

/// One line: `reboots 120 nodes`, `restarts services kubelet, containerd on 3 nodes`...
fn verb(interrupt: Option<&Interrupt>, nodes: usize) -> String {
    let on = if nodes == 1 {
        "1 node".to_owned()
    } else {
        format!("{nodes} nodes")
    };
    match interrupt.map(|i| (i.kind, &i.services)) {
        Some((InterruptType::Reboot, _)) => format!("reboots {on}"),
        Some((InterruptType::RestartAllServices, _)) => {
            format!("cordons, drains and restarts all services on {on}")
        }
        Some((InterruptType::Service, services)) => format!(
            "cordons, drains and restarts {} on {on}",
            if services.is_empty() {
                "services".to_owned()
            } else {
                list(services)
            }
        ),
        Some((InterruptType::Noop, _)) => format!("cordons and drains {on}"),
        None => format!("runs package stages on {on}"),
    }
}

fn what(impact: &Impact) -> String {
    let p = &impact.package;
    match &impact.change {
        Change::Install { version } => format!("package {p} {version} installed"),
        Change::Version { from, to } => format!("package {p} {from} → {to}"),
        Change::Config { version, keys } => {
            format!("package {p} {version} config {}", list(keys))
        }
        Change::Uninstall { version } => format!("package {p} {version} uninstalled"),
    }
}

/// The admission warnings of `impacts` over `nodes` selected nodes at `pace`: one per package,
/// e.g. `this change reboots 120 nodes (package driver 1.4.0 → 1.5.0), 12 batches of at most 10
/// nodes at once under DeploymentPolicy gpu-rollout`. None when no node is selected.
pub fn warnings(impacts: &[Impact], nodes: usize, pace: &Pace) -> Vec<String> {
    if nodes == 0 {
        return Vec::new();
    }
    let under = match &pace.policy {
        Some(policy) => format!("DeploymentPolicy {policy}"),
        None => "its interruptionBudget".to_owned(),
    };
    let batches = if pace.batches == 1 {
        "1 batch".to_owned()
    } else {
        format!("{} batches", pace.batches)
    };
    let at_once = if pace.at_once == 1 {
        "1 node".to_owned()
    } else {
        format!("{} nodes", pace.at_once)
    };
    let mut out: Vec<String> = impacts
        .iter()
        .take(MAX_WARNINGS)
        .map(|impact| {
            format!(
                "this change {} ({}), {batches} of at most {at_once} at once under {under}",
                verb(impact.interrupt.as_ref(), nodes),
                what(impact),
            )
        })
        .collect();
    if impacts.len() > MAX_WARNINGS {
        out.push(format!(
            "this change also runs {} more packages on those {nodes} nodes (kubectl nodewright plan shows every stage)",
            impacts.len() - MAX_WARNINGS
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{DeploymentStrategy, LinearStrategy, Uninstall};

    fn package(version: &str, interrupt: Option<InterruptType>) -> Package {
        Package {
            version: version.into(),
            image: "example.com/p".into(),
            interrupt: interrupt.map(|kind| Interrupt {
                kind,
                services: Vec::new(),
            }),
            ..Package::default()
        }
    }

    fn packages(list: &[(&str, Package)]) -> BTreeMap<String, Package> {
        list.iter()
            .map(|(n, p)| ((*n).to_owned(), p.clone()))
            .collect()
    }

    fn compartment(
        nodes: usize,
        ceiling: usize,
        strategy: Option<DeploymentStrategy>,
    ) -> Compartment {
        Compartment {
            name: "c".into(),
            ceiling,
            nodes: (0..nodes).map(|i| format!("n{i}")).collect(),
            strategy,
        }
    }

    #[test]
    fn a_new_version_reruns_everything_and_says_the_reboot() {
        let old = packages(&[("driver", package("1.4.0", Some(InterruptType::Reboot)))]);
        let new = packages(&[("driver", package("1.5.0", Some(InterruptType::Reboot)))]);
        let impacts = impacts(Some(&old), &new);
        let fixed = DeploymentStrategy {
            fixed: Some(nodewright_shared::api::BatchParameters {
                initial_batch: Some(10),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pace = Pace::of(&[compartment(120, 10, Some(fixed))], Some("gpu-rollout"));
        assert_eq!(
            warnings(&impacts, 120, &pace),
            [
                "this change reboots 120 nodes (package driver 1.4.0 → 1.5.0), 12 batches of at most 10 nodes at once under DeploymentPolicy gpu-rollout"
            ]
        );
    }

    #[test]
    fn what_reruns_for_each_kind_of_change() {
        let mut configured = package("1.0.0", None);
        configured.config_map = BTreeMap::from([("a.conf".into(), "1".into())]);
        configured.config_interrupts = BTreeMap::from([(
            "a.*".into(),
            Interrupt {
                kind: InterruptType::Service,
                services: vec!["containerd".into()],
            },
        )]);
        let mut gone = package("2.0.0", None);
        gone.uninstall = Some(Uninstall {
            enabled: true,
            apply: false,
        });
        let old = packages(&[
            ("conf", configured.clone()),
            ("gone", gone),
            ("kept", package("1.0.0", None)),
            ("dropped", package("1.0.0", None)),
        ]);
        let mut reconfigured = configured;
        reconfigured.config_map = BTreeMap::from([("a.conf".into(), "2".into())]);
        let mut retagged = package("1.0.0", None);
        retagged.image = "example.com/other".into();
        let new = packages(&[
            ("conf", reconfigured),
            ("kept", retagged),
            ("new", package("0.1.0", Some(InterruptType::Noop))),
        ]);
        let got = impacts(Some(&old), &new);
        let changes: Vec<(&str, &Change, Option<InterruptType>)> = got
            .iter()
            .map(|i| {
                (
                    i.package.as_str(),
                    &i.change,
                    i.interrupt.as_ref().map(|x| x.kind),
                )
            })
            .collect();
        assert_eq!(
            changes,
            [
                (
                    "conf",
                    &Change::Config {
                        version: "1.0.0".into(),
                        keys: vec!["a.conf".into()]
                    },
                    Some(InterruptType::Service)
                ),
                (
                    "gone",
                    &Change::Uninstall {
                        version: "2.0.0".into()
                    },
                    None
                ),
                (
                    "new",
                    &Change::Install {
                        version: "0.1.0".into()
                    },
                    Some(InterruptType::Noop)
                ),
            ],
            "an image change of the same version and a package dropped without uninstall rerun nothing"
        );
        let pace = Pace::of(&[compartment(3, 3, None)], None);
        let lines = warnings(&got, 3, &pace);
        assert_eq!(
            lines[0],
            "this change cordons, drains and restarts containerd on 3 nodes (package conf 1.0.0 config a.conf), 1 batch of at most 3 nodes at once under its interruptionBudget"
        );
        assert!(
            lines[1].starts_with(
                "this change runs package stages on 3 nodes (package gone 2.0.0 uninstalled)"
            ),
            "{lines:?}"
        );
        assert!(
            lines[2].starts_with(
                "this change cordons and drains 3 nodes (package new 0.1.0 installed)"
            ),
            "{lines:?}"
        );
        // No node selected: nothing to say.
        assert!(warnings(&got, 0, &pace).is_empty());
        // Long lists are cut, and so are many packages.
        assert_eq!(
            list(&["a".into(), "b".into(), "c".into(), "d".into(), "e".into()]),
            "a, b, c +2 more"
        );
        let many: Vec<Impact> = (0..12).map(|_| got[2].clone()).collect();
        let lines = warnings(&many, 3, &pace);
        assert_eq!(lines.len(), MAX_WARNINGS + 1);
        assert!(
            lines[MAX_WARNINGS].starts_with("this change also runs 2 more packages"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_new_nodewright_runs_every_package_and_an_unchanged_one_nothing() {
        let new = packages(&[("a", package("1.0.0", None))]);
        assert_eq!(impacts(None, &new).len(), 1);
        assert!(impacts(Some(&new), &new).is_empty());
    }

    #[test]
    fn the_pace_sums_compartments_and_follows_each_strategy() {
        let linear = DeploymentStrategy {
            linear: Some(LinearStrategy {
                batch: nodewright_shared::api::BatchParameters {
                    initial_batch: Some(1),
                    ..Default::default()
                },
                delta: Some(1),
            }),
            ..Default::default()
        };
        // Linear 1, 2, 3: six nodes in three batches; plus 5 nodes, no strategy, 2 at a time.
        let pace = Pace::of(
            &[
                compartment(6, 3, Some(linear)),
                compartment(5, 2, None),
                compartment(0, 4, None),
            ],
            Some("p"),
        );
        assert_eq!(
            pace,
            Pace {
                batches: 3 + 3,
                at_once: 3 + 2,
                policy: Some("p".into())
            }
        );
    }
}
