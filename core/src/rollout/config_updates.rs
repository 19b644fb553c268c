//! Config updates (upstream-operator.md §2.10): when a package's `configMap` changes after it was
//! installed, its `config` stage runs again on every node that has it, and the interrupt that follows
//! is chosen by the package's `configInterrupts` whose key globs match a changed key (merged as
//! interrupts are), not by `interrupt`. The changed keys are kept in `status.configUpdates[<p>]`:
//! they decide that interrupt until the next change, a version change or the package's removal.
//!
//! Unlike upstream, the rerun goes through the rollout budget (DESIGN §5): a node is only *queued*
//! (its record becomes `(config, unknown)`), which makes it incomplete without admitting it; the
//! budget admits queued nodes like any other incomplete node.
//!
//! A change waits (its ConfigMap is not written) until the package has settled on every node, as
//! upstream: a stage in flight finishes first.
//!
//! Recording the changes, queueing the reruns and writing the ConfigMaps is the operator's.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube_core::ResourceExt;
use nodewright_shared::api::{Interrupt, NodeWright, Package};
use nodewright_shared::glob;
use nodewright_shared::node_state::{NodeState, Stage, State};

use tracing::info;

use crate::jobs::merge_interrupts;

/// Keys added or whose value changed, sorted (removed keys are ignored, as upstream).
pub fn changed_keys(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Vec<String> {
    new.iter()
        .filter(|(k, v)| old.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect()
}

/// The interrupt a config change of `package` calls for: the merge of its configInterrupts whose
/// key glob matches a changed key; `None` when none matches (the config stage is then terminal).
///
/// Keys are matched with the matcher admission validated them with ([`glob::matches`], Go's
/// `filepath.Match`), so a pattern the webhook accepted selects the keys it was accepted for. A
/// malformed pattern matches nothing, as upstream (which ignores the error).
pub fn config_interrupt(package: &Package, changed: &[String]) -> Option<Interrupt> {
    let matching = package.config_interrupts.iter().filter(|(pattern, _)| {
        changed
            .iter()
            .any(|k| glob::matches(pattern, k) == Ok(true))
    });
    merge_interrupts(matching.map(|(pattern, i)| (pattern.as_str(), i))).map(|m| m.interrupt)
}

/// The NodeWright as the stage machine must see it: every package with recorded config updates has
/// the interrupt those updates call for instead of its own `interrupt` (upstream's "has interrupt"
/// rule, §2.8).
pub fn effective(nodewright: &NodeWright) -> NodeWright {
    let mut nw = nodewright.clone();
    let Some(updates) = nodewright.status.as_ref().map(|s| &s.config_updates) else {
        return nw;
    };
    for (name, package) in &mut nw.spec.packages {
        if let Some(keys) = updates.get(name).filter(|k| !k.is_empty()) {
            package.interrupt = config_interrupt(package, keys);
        }
    }
    nw
}

/// Whether a config change of package `name` (at `version`) may start on a node now: only once the
/// package has settled there (complete, erroring, queued, or not installed), as upstream waits. A
/// stage in flight would otherwise finish under the new `configUpdates` (an install skipping its
/// interrupt) or be torn apart inside its interrupt; the change is taken on a later pass.
pub fn may_start(state: &NodeState, name: &str, version: &str) -> bool {
    state.get(name, version).is_none_or(|r| match r.state {
        Some(State::Complete | State::Erroring) => true,
        Some(State::Unknown) => r.stage == Stage::Config,
        _ => false,
    })
}

/// Queues the config rerun of package `name` on a node: a record that completed a stage, or that
/// errors at config or later, becomes `(config, unknown)`. A package still installing (apply or
/// upgrade in flight) is left alone: its Job is replaced by the drift check and runs with the new
/// files anyway; a package absent from the node installs with them. Returns whether the record
/// changed.
pub fn queue(state: &mut NodeState, name: &str, version: &str) -> bool {
    let Some(record) = state.get(name, version) else {
        return false;
    };
    let rerun = match record.state {
        Some(State::Complete) => {
            !matches!(record.stage, Stage::Uninstall | Stage::UninstallInterrupt)
        }
        Some(State::Erroring) => matches!(
            record.stage,
            Stage::Config | Stage::Interrupt | Stage::PostInterrupt
        ),
        _ => false,
    };
    if !rerun || (record.stage == Stage::Config && record.state == Some(State::Unknown)) {
        return false;
    }
    let mut next = record.clone();
    next.stage = Stage::Config;
    next.state = Some(State::Unknown);
    next.restarts = 0;
    state.upsert(next);
    true
}

/// The new `status.configUpdates[<p>]`: the changed keys replace the previous ones when every node
/// had finished the previous rollout, otherwise they are added to them (a node that has not rerun
/// yet must still see the earlier keys' interrupt).
pub fn merged_keys(
    previous: Option<&Vec<String>>,
    changed: &[String],
    all_done: bool,
) -> Vec<String> {
    let mut keys: BTreeSet<String> = if all_done {
        BTreeSet::new()
    } else {
        previous.into_iter().flatten().cloned().collect()
    };
    keys.extend(changed.iter().cloned());
    keys.into_iter().collect()
}

/// What the config-update step decides from the package ConfigMaps as they are (`existing`) and
/// the node states of the selected nodes, without writing: the new `status.configUpdates`, the
/// `(package, version)` whose config stage reruns on every node ([`queue`]), and the ConfigMaps held
/// back (a node is inside that package's stage).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Detected {
    /// `status.configUpdates` after the step.
    pub updates: BTreeMap<String, Vec<String>>,
    /// Package versions whose config stage reruns.
    pub changes: Vec<(String, String)>,
    /// ConfigMaps not written yet.
    pub hold: BTreeSet<String>,
}

/// Detects the config changes of `nodewright` (see [`Detected`]).
pub fn detect(nodewright: &NodeWright, existing: &[ConfigMap], states: &[NodeState]) -> Detected {
    let name = nodewright.name_any();
    let previous = nodewright
        .status
        .as_ref()
        .map(|s| s.config_updates.clone())
        .unwrap_or_default();
    let mut updates = previous.clone();
    // A package that left the spec or has no files has no config updates.
    updates.retain(|p, _| {
        nodewright
            .spec
            .packages
            .get(p)
            .is_some_and(|p| !p.config_map.is_empty())
    });
    let mut hold = BTreeSet::new();
    let mut changes: Vec<(String, String)> = Vec::new();
    for (cm_name, (package, version, data)) in
        crate::jobs::configmaps::wanted_package_configmaps(nodewright)
    {
        // After an upgrade from the plain names, the content is still under the old name: a change
        // made meanwhile is detected against it, not mistaken for a first install.
        let legacy = crate::naming::legacy_package_configmap_name(&name, &package, &version);
        let old = [cm_name.as_str(), legacy.as_str()]
            .into_iter()
            .find_map(|wanted| {
                existing
                    .iter()
                    .find(|c| c.metadata.name.as_deref() == Some(wanted))
                    .map(|c| c.data.clone().unwrap_or_default())
            });
        let Some(old) = old else {
            // First install or a new version: its files are new, not changed.
            updates.remove(&package);
            continue;
        };
        let changed = changed_keys(&old, &data);
        if changed.is_empty() {
            continue;
        }
        if !states.iter().all(|s| may_start(s, &package, &version)) {
            info!(nodewright = %name, %package, "config change waits for the package to settle");
            hold.insert(cm_name);
            continue;
        }
        let all_done = states.iter().all(|s| {
            s.get(&package, &version)
                .is_none_or(|r| r.state == Some(State::Complete))
        });
        let keys = merged_keys(previous.get(&package), &changed, all_done);
        info!(nodewright = %name, %package, ?changed, "config changed: the config stage runs again");
        updates.insert(package.clone(), keys);
        changes.push((package, version));
    }
    Detected {
        updates,
        changes,
        hold,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{InterruptType, NodeWrightSpec, NodeWrightStatus};
    use nodewright_shared::node_state::PackageStatus;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn changed_keys_are_added_or_modified_ones() {
        let old = map(&[("a", "1"), ("b", "2"), ("gone", "x")]);
        let new = map(&[("a", "1"), ("b", "3"), ("c", "4")]);
        assert_eq!(changed_keys(&old, &new), ["b", "c"]);
        assert!(changed_keys(&new, &new).is_empty());
    }

    fn interrupt(kind: InterruptType, services: &[&str]) -> Interrupt {
        Interrupt {
            kind,
            services: services.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn package() -> Package {
        Package {
            version: "1.0.0".into(),
            image: "img".into(),
            interrupt: Some(interrupt(InterruptType::Reboot, &[])),
            config_interrupts: BTreeMap::from([
                (
                    "containerd.toml".to_owned(),
                    interrupt(InterruptType::Service, &["containerd"]),
                ),
                (
                    "*.service".to_owned(),
                    interrupt(InterruptType::Service, &["cron"]),
                ),
            ]),
            config_map: map(&[("containerd.toml", "x")]),
            ..Package::default()
        }
    }

    #[test]
    fn matching_config_interrupts_merge_and_no_match_means_none() {
        let p = package();
        assert_eq!(
            config_interrupt(&p, &["containerd.toml".into(), "a.service".into()]),
            Some(interrupt(InterruptType::Service, &["containerd", "cron"]))
        );
        assert_eq!(
            config_interrupt(&p, &["a.service".into()]),
            Some(interrupt(InterruptType::Service, &["cron"]))
        );
        assert_eq!(config_interrupt(&p, &["readme".into()]), None);
    }

    /// `[!a]` is the class {`!`, `a`} (Go's `filepath.Match`), not "anything but `a`": the same
    /// answers the webhook gives when it validates the pattern (rules::package tests).
    #[test]
    fn a_bang_class_selects_the_keys_admission_matched_it_against() {
        let p = Package {
            config_interrupts: BTreeMap::from([
                (
                    "[!a]*".to_owned(),
                    interrupt(InterruptType::Service, &["bang"]),
                ),
                (
                    "[^a]*".to_owned(),
                    interrupt(InterruptType::Service, &["caret"]),
                ),
                // Malformed (`]` right after `[`): matches nothing, not even "]".
                ("[]a]".to_owned(), interrupt(InterruptType::Reboot, &[])),
            ]),
            ..package()
        };
        let selected = |key: &str| config_interrupt(&p, &[key.to_owned()]);
        assert_eq!(
            selected("!x"),
            Some(interrupt(InterruptType::Service, &["bang", "caret"]))
        );
        assert_eq!(
            selected("ax"),
            Some(interrupt(InterruptType::Service, &["bang"]))
        );
        assert_eq!(
            selected("bx"),
            Some(interrupt(InterruptType::Service, &["caret"]))
        );
        assert_eq!(
            selected("]"),
            Some(interrupt(InterruptType::Service, &["caret"]))
        );
    }

    #[test]
    fn the_effective_spec_takes_the_config_interrupt() {
        let mut nw = NodeWright::new(
            "nw",
            NodeWrightSpec {
                packages: BTreeMap::from([
                    ("p".to_owned(), package()),
                    ("q".to_owned(), package()),
                ]),
                ..NodeWrightSpec::default()
            },
        );
        nw.status = Some(NodeWrightStatus {
            config_updates: BTreeMap::from([
                ("p".to_owned(), vec!["readme".to_owned()]),
                ("q".to_owned(), vec!["containerd.toml".to_owned()]),
            ]),
            ..NodeWrightStatus::default()
        });
        let e = effective(&nw);
        assert_eq!(e.spec.packages["p"].interrupt, None);
        assert_eq!(
            e.spec.packages["q"].interrupt,
            Some(interrupt(InterruptType::Service, &["containerd"]))
        );
        // Without updates the package keeps its own interrupt.
        nw.status = None;
        assert_eq!(
            effective(&nw).spec.packages["p"].interrupt,
            Some(interrupt(InterruptType::Reboot, &[]))
        );
    }

    fn record(stage: Stage, state: State) -> NodeState {
        let mut s = NodeState::default();
        s.upsert(PackageStatus {
            name: "p".into(),
            version: "1.0.0".into(),
            image: "img".into(),
            container_sha: String::new(),
            stage,
            state: Some(state),
            restarts: 2,
        });
        s
    }

    #[test]
    fn only_settled_records_are_queued() {
        for (stage, state, queued) in [
            (Stage::Config, State::Complete, true),
            (Stage::PostInterrupt, State::Complete, true),
            (Stage::Interrupt, State::Erroring, true),
            (Stage::Config, State::Erroring, true),
            (Stage::Apply, State::Erroring, false),
            (Stage::Apply, State::InProgress, false),
            (Stage::Config, State::InProgress, false),
            (Stage::Uninstall, State::Complete, false),
        ] {
            let mut s = record(stage, state);
            assert_eq!(queue(&mut s, "p", "1.0.0"), queued, "{stage} {state:?}");
            if queued {
                let r = s.get("p", "1.0.0").expect("record");
                assert_eq!(
                    (r.stage, r.state, r.restarts),
                    (Stage::Config, Some(State::Unknown), 0)
                );
                // Idempotent.
                assert!(!queue(&mut s, "p", "1.0.0"));
            }
        }
        assert!(!queue(&mut NodeState::default(), "p", "1.0.0"));
    }

    #[test]
    fn a_change_waits_until_the_package_settled() {
        assert!(!may_start(
            &record(Stage::Interrupt, State::InProgress),
            "p",
            "1.0.0"
        ));
        assert!(!may_start(
            &record(Stage::Interrupt, State::Skipped),
            "p",
            "1.0.0"
        ));
        assert!(!may_start(
            &record(Stage::PostInterrupt, State::InProgress),
            "p",
            "1.0.0"
        ));
        assert!(may_start(
            &record(Stage::PostInterrupt, State::Complete),
            "p",
            "1.0.0"
        ));
        assert!(may_start(&NodeState::default(), "p", "1.0.0"));
        assert!(!may_start(
            &record(Stage::Apply, State::InProgress),
            "p",
            "1.0.0"
        ));
        assert!(may_start(
            &record(Stage::Apply, State::Erroring),
            "p",
            "1.0.0"
        ));
        assert!(may_start(
            &record(Stage::Config, State::Unknown),
            "p",
            "1.0.0"
        ));
    }

    #[test]
    fn keys_replace_after_a_finished_rollout_and_accumulate_during_one() {
        let previous = vec!["a".to_owned()];
        assert_eq!(merged_keys(Some(&previous), &["b".into()], true), ["b"]);
        assert_eq!(
            merged_keys(Some(&previous), &["b".into()], false),
            ["a", "b"]
        );
        assert_eq!(merged_keys(None, &["b".into()], false), ["b"]);
    }
}
