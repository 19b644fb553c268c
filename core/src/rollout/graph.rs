//! Package ordering on a node: a package may start once every package it `dependsOn` (exact name and
//! version) is finished on that node. Unlike upstream (dependents waited for every root), a package
//! waits only for its own dependencies (DESIGN §9). The webhook and the CRD reject cycles and unknown
//! dependencies; should such an object reach storage anyway, the affected packages simply never
//! become runnable (they are reported, never guessed around).

use std::collections::BTreeMap;

use nodewright_shared::api::Package;
use nodewright_shared::node_state::NodeState;

use super::stages::{package_done, uninstall_requested};

/// Packages of `packages` whose dependencies are all finished on the node, and which are not finished
/// themselves, in name order.
pub fn runnable<'a>(packages: &'a BTreeMap<String, Package>, state: &NodeState) -> Vec<&'a str> {
    packages
        .iter()
        .filter(|(name, package)| !package_done(package, state.get(name, &package.version)))
        .filter(|(_, package)| {
            // Uninstalling waits for nothing (upstream does not cascade either way).
            // A dependency being (or already) uninstalled satisfies nothing: its dependents wait
            // (upstream's DependencyUninstalled block; uninstall does not cascade).
            uninstall_requested(package)
                || package.depends_on.iter().all(|(dep, version)| {
                    packages
                        .get(dep)
                        .filter(|d| &d.version == version && !uninstall_requested(d))
                        .is_some_and(|d| package_done(d, state.get(dep, version)))
                })
        })
        .map(|(name, _)| name.as_str())
        .collect()
}

/// Whether every package is finished on the node (no packages: finished).
pub fn all_done(packages: &BTreeMap<String, Package>, state: &NodeState) -> bool {
    packages
        .iter()
        .all(|(name, package)| package_done(package, state.get(name, &package.version)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::node_state::{PackageStatus, Stage, State};

    fn package(deps: &[(&str, &str)]) -> Package {
        Package {
            version: "1.0.0".into(),
            image: "img".into(),
            depends_on: deps
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Package::default()
        }
    }

    fn done(name: &str) -> PackageStatus {
        PackageStatus {
            name: name.into(),
            version: "1.0.0".into(),
            image: "img".into(),
            container_sha: String::new(),
            stage: Stage::Config,
            state: Some(State::Complete),
            restarts: 0,
        }
    }

    /// a, b roots; c depends on a only; d depends on a and b.
    fn packages() -> BTreeMap<String, Package> {
        BTreeMap::from([
            ("a".to_owned(), package(&[])),
            ("b".to_owned(), package(&[])),
            ("c".to_owned(), package(&[("a", "1.0.0")])),
            ("d".to_owned(), package(&[("a", "1.0.0"), ("b", "1.0.0")])),
        ])
    }

    #[test]
    fn roots_run_first() {
        assert_eq!(runnable(&packages(), &NodeState::default()), vec!["a", "b"]);
    }

    #[test]
    fn a_package_waits_only_for_its_own_dependencies() {
        let mut state = NodeState::default();
        state.upsert(done("a"));
        // b still runs; c (needs only a) starts; d (needs b too) waits.
        assert_eq!(runnable(&packages(), &state), vec!["b", "c"]);
        state.upsert(done("b"));
        assert_eq!(runnable(&packages(), &state), vec!["c", "d"]);
        state.upsert(done("c"));
        state.upsert(done("d"));
        assert!(runnable(&packages(), &state).is_empty());
        assert!(all_done(&packages(), &state));
    }

    #[test]
    fn a_dependency_on_a_missing_or_other_version_never_runs() {
        let packages = BTreeMap::from([
            ("a".to_owned(), package(&[])),
            ("x".to_owned(), package(&[("a", "2.0.0")])),
            ("y".to_owned(), package(&[("ghost", "1.0.0")])),
        ]);
        let mut state = NodeState::default();
        state.upsert(done("a"));
        assert!(runnable(&packages, &state).is_empty());
        assert!(!all_done(&packages, &state));
    }

    #[test]
    fn dependents_of_an_uninstalled_package_wait_and_the_uninstall_waits_for_nothing() {
        let mut packages = packages();
        if let Some(a) = packages.get_mut("a") {
            a.uninstall = Some(nodewright_shared::api::Uninstall {
                enabled: true,
                apply: true,
            });
        }
        // a is absent (uninstalled): c and d, which need it, never become runnable.
        assert_eq!(runnable(&packages, &NodeState::default()), vec!["b"]);
        let mut state = NodeState::default();
        state.upsert(done("a"));
        state.upsert(done("b"));
        // a installed and to be uninstalled: it runs (its uninstall), dependents still wait.
        assert_eq!(runnable(&packages, &state), vec!["a"]);
    }

    #[test]
    fn a_cycle_never_runs() {
        let packages = BTreeMap::from([
            ("a".to_owned(), package(&[("b", "1.0.0")])),
            ("b".to_owned(), package(&[("a", "1.0.0")])),
        ]);
        assert!(runnable(&packages, &NodeState::default()).is_empty());
    }
}
