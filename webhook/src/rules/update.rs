//! UPDATE-only guards: a package that ships uninstall scripts may leave the spec, or move to a lower
//! version, only once it is uninstalled from every node; cancelling an uninstall is allowed but warned
//! about.
//!
//! Without the guards, removing such a package (or downgrading it) would orphan what it installed on
//! the nodes: the operator uninstalls only packages it still knows. "Uninstalled" is read, as upstream,
//! from the old object's `status.nodeState` (the operator's mirror of the node annotations): no node
//! still has a record `K|oldVersion`.

use nodewright_shared::api::{NodeWright, Package};

use super::findings::{Findings, Path, short_list};
use super::package::semver_text;
use super::semver;

/// Checks `new` against the stored `old`.
pub fn check(old: &NodeWright, new: &NodeWright, f: &mut Findings) {
    let packages = Path::Root("spec.packages");
    for (key, was) in &old.spec.packages {
        let enabled = was.uninstall.as_ref().is_some_and(|u| u.enabled);
        let path = packages.child(key);
        match new.spec.packages.get(key) {
            None if enabled => removal(old, key, was, &path, f),
            None => {}
            Some(now) => {
                if enabled {
                    downgrade(old, key, was, now, &path.child("version"), f);
                }
                cancel(key, was, now, f);
            }
        }
    }
}

/// Nodes whose state still records `key|version`, sorted (BTreeMap order).
fn nodes_with<'a>(old: &'a NodeWright, key: &str, version: &str) -> Vec<&'a str> {
    old.status
        .iter()
        .flat_map(|s| s.node_state.iter())
        .filter(|(_, state)| state.get(key, version).is_some())
        .map(|(node, _)| node.as_str())
        .collect()
}

fn removal(old: &NodeWright, key: &str, was: &Package, path: &Path<'_>, f: &mut Findings) {
    let nodes = nodes_with(old, key, &was.version);
    if nodes.is_empty() {
        return;
    }
    let applying = was.uninstall.as_ref().is_some_and(|u| u.apply);
    let where_ = format!(
        "still installed on {} node(s): {}",
        nodes.len(),
        short_list(&nodes, 5)
    );
    let message = if applying {
        format!(
            "package {key:?} has uninstall.enabled=true and its uninstall has not yet completed ({where_}): wait for completion before removing it from spec"
        )
    } else {
        format!(
            "package {key:?} has uninstall.enabled=true; set uninstall.apply=true and wait for completion before removing from spec ({where_})"
        )
    };
    f.error(path, message);
}

fn downgrade(
    old: &NodeWright,
    key: &str,
    was: &Package,
    now: &Package,
    path: &Path<'_>,
    f: &mut Findings,
) {
    let (from, to) = (semver_text(&was.version), semver_text(&now.version));
    if was.version == now.version
        || !semver::is_valid(&from)
        || !semver::is_valid(&to)
        || semver::compare(&to, &from).is_ge()
    {
        return;
    }
    let applying = was.uninstall.as_ref().is_some_and(|u| u.apply);
    let change = format!("{} to {}", was.version, now.version);
    if !applying {
        f.error(
            path,
            format!(
                "package {key:?}: downgrade not allowed — set uninstall.apply=true first, wait for uninstall to complete, then change version (downgrade from {change})"
            ),
        );
        return;
    }
    let nodes = nodes_with(old, key, &was.version);
    if !nodes.is_empty() {
        f.error(
            path,
            format!(
                "package {key:?}: downgrade not allowed — uninstall has not yet completed on all nodes ({} still at {}: {}); wait for it to complete, then change version (downgrade from {change})",
                nodes.len(),
                was.version,
                short_list(&nodes, 5)
            ),
        );
    }
}

fn cancel(key: &str, was: &Package, now: &Package, f: &mut Findings) {
    let applying = |p: &Package| p.uninstall.as_ref().is_some_and(|u| u.enabled && u.apply);
    if applying(was) && !applying(now) {
        f.warn(format!(
            "package {key:?}: uninstall cancelled — nodes where uninstall completed will need to re-install"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::findings::Verdict;
    use super::super::testing::{Cluster, nodewright, package};
    use super::super::validate_nodewright;
    use nodewright_shared::api::{NodeWrightStatus, Uninstall};
    use nodewright_shared::node_state::{NodeState, PackageStatus, Stage, State};

    use super::*;

    fn pkg(version: &str, enabled: bool, apply: bool) -> Package {
        Package {
            uninstall: Some(Uninstall { enabled, apply }),
            ..package(version)
        }
    }

    /// `old` with `tools` recorded on these nodes at `version`.
    fn installed(mut nw: NodeWright, version: &str, nodes: &[&str]) -> NodeWright {
        let mut status = NodeWrightStatus::default();
        for node in nodes {
            let mut state = NodeState::default();
            state.upsert(PackageStatus {
                name: "tools".into(),
                version: version.into(),
                image: "ghcr.io/example/pkg".into(),
                container_sha: String::new(),
                stage: Stage::Config,
                state: Some(State::Complete),
                restarts: 0,
            });
            status.node_state.insert((*node).to_owned(), state);
        }
        nw.status = Some(status);
        nw
    }

    fn update(old: &NodeWright, new: &NodeWright) -> Verdict {
        validate_nodewright(new, Some(old), &Cluster::default(), &Default::default())
    }

    fn assert_err(v: &Verdict, want: &str) {
        assert!(
            v.message().contains(want),
            "{want:?} not in {}",
            v.message()
        );
    }

    #[test]
    fn removal_guard() {
        let new = nodewright("nw", []);
        // Not uninstall-enabled: removal is fine even when installed.
        let old = installed(
            nodewright("nw", [("tools", pkg("1.0.0", false, false))]),
            "1.0.0",
            &["n1"],
        );
        assert!(update(&old, &new).is_allowed());
        // Enabled but recorded nowhere (fully uninstalled): fine.
        let old = installed(
            nodewright("nw", [("tools", pkg("1.0.0", true, true))]),
            "1.0.0",
            &[],
        );
        assert!(update(&old, &new).is_allowed());
        // Recorded at another version only: fine.
        let old = installed(
            nodewright("nw", [("tools", pkg("1.0.0", true, true))]),
            "0.9.0",
            &["n1"],
        );
        assert!(update(&old, &new).is_allowed());
        // Enabled, not applied, still installed.
        let old = installed(
            nodewright("nw", [("tools", pkg("1.0.0", true, false))]),
            "1.0.0",
            &["n2", "n1"],
        );
        let v = update(&old, &new);
        assert_err(
            &v,
            "spec.packages.tools: package \"tools\" has uninstall.enabled=true; set uninstall.apply=true and wait for completion before removing from spec (still installed on 2 node(s): n1, n2)",
        );
        // Enabled, applied, not yet complete.
        let old = installed(
            nodewright("nw", [("tools", pkg("1.0.0", true, true))]),
            "1.0.0",
            &["n1"],
        );
        assert_err(
            &update(&old, &new),
            "its uninstall has not yet completed (still installed on 1 node(s): n1)",
        );
        // No status at all: nothing recorded, fine (as upstream).
        let old = nodewright("nw", [("tools", pkg("1.0.0", true, false))]);
        assert!(update(&old, &new).is_allowed());
    }

    #[test]
    fn downgrade_guard() {
        let to = |v: &str, enabled, apply| nodewright("nw", [("tools", pkg(v, enabled, apply))]);
        let old_applied = installed(to("2.0.0", true, true), "2.0.0", &["n1"]);
        let old_not_applied = installed(to("2.0.0", true, false), "2.0.0", &["n1"]);
        let old_disabled = installed(to("2.0.0", false, false), "2.0.0", &["n1"]);
        // Upgrades, same version and non-enabled downgrades are always fine.
        assert!(update(&old_not_applied, &to("2.1.0", true, false)).is_allowed());
        assert!(update(&old_not_applied, &to("v2", true, false)).is_allowed());
        assert!(update(&old_disabled, &to("1.0.0", false, false)).is_allowed());
        // Invalid versions are not compared (the version rule reports them).
        let v = update(&old_not_applied, &to("latest", true, false));
        assert!(!v.message().contains("downgrade"), "{}", v.message());
        // Enabled, apply false.
        assert_err(
            &update(&old_not_applied, &to("1.0.0", true, false)),
            "spec.packages.tools.version: package \"tools\": downgrade not allowed — set uninstall.apply=true first, wait for uninstall to complete, then change version (downgrade from 2.0.0 to 1.0.0)",
        );
        // Pre-release of the same version is lower.
        assert_err(
            &update(&old_not_applied, &to("2.0.0-rc.1", true, false)),
            "downgrade not allowed",
        );
        // Enabled, applied, not yet complete.
        assert_err(
            &update(&old_applied, &to("1.0.0", true, true)),
            "package \"tools\": downgrade not allowed — uninstall has not yet completed on all nodes (1 still at 2.0.0: n1)",
        );
        // Enabled, applied and complete everywhere.
        let done = installed(to("2.0.0", true, true), "2.0.0", &[]);
        assert!(update(&done, &to("1.0.0", true, true)).is_allowed());
    }

    #[test]
    fn metadata_only_updates_are_not_rechecked() {
        // Stored without the webhook: a missing policy and a bad version.
        let mut old = nodewright("nw", [("tools", package("2024/07/06"))]);
        old.spec.deployment_policy = Some("gone".into());
        let mut new = old.clone();
        new.metadata.finalizers = Some(vec!["nodewright.nvidia.com/nodewright".into()]);
        new.metadata.annotations =
            Some([("nodewright.nvidia.com/pause".to_owned(), "true".to_owned())].into());
        assert_eq!(update(&old, &new), Verdict::default());
        // Any spec change is checked in full, old problems included.
        new.spec.priority = 5;
        let v = update(&old, &new);
        assert_err(
            &v,
            "spec.deploymentPolicy: deploymentPolicy \"gone\" not found",
        );
        assert_err(&v, "spec.packages.tools.version");
        // A create is always checked.
        assert!(
            !validate_nodewright(&old, None, &Cluster::default(), &Default::default()).is_allowed()
        );
    }

    #[test]
    fn cancel_is_a_warning() {
        let old = nodewright("nw", [("tools", pkg("1.0.0", true, true))]);
        let new = nodewright("nw", [("tools", pkg("1.0.0", true, false))]);
        let v = update(&old, &new);
        assert!(v.is_allowed(), "{}", v.message());
        assert_eq!(
            v.warnings,
            vec!["package \"tools\": uninstall cancelled — nodes where uninstall completed will need to re-install".to_owned()]
        );
        // Still applying, or never applying: no warning.
        assert!(update(&old, &old).warnings.is_empty());
        assert!(update(&new, &new).warnings.is_empty());
        // Dropping the uninstall block altogether cancels too.
        let bare = nodewright("nw", [("tools", package("1.0.0"))]);
        assert_eq!(update(&old, &bare).warnings.len(), 1);
        // A create never warns.
        assert!(
            validate_nodewright(&old, None, &Cluster::default(), &Default::default())
                .warnings
                .is_empty()
        );
    }
}
