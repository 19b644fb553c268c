//! Explicit uninstall (upstream-operator.md §2.12, §7.3): `packages.<p>.uninstall.enabled` says the
//! package ships uninstall scripts; `apply: true` uninstalls it now on every node (through the
//! rollout budget, DESIGN §5), and deleting the NodeWright uninstalls every enabled package before
//! the finalizer lets the object go. The stage machine itself is in [`super::stages`]; this module
//! decides when deletion must wait.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use nodewright_shared::api::NodeWright;
use nodewright_shared::node_state::{NodeState, Stage, State};

use super::stages::{package_done, uninstall_requested};

/// Condition type set while a deletion cannot make progress.
pub const DELETION_BLOCKED: &str = "DeletionBlocked";

/// Condition type: a package is in an uninstall stage on some node.
pub const UNINSTALL_IN_PROGRESS: &str = "UninstallInProgress";
/// Condition type: an uninstall stage is erroring on some node.
pub const UNINSTALL_FAILED: &str = "UninstallFailed";

/// Why a deletion with pending uninstalls cannot progress (reason, message), upstream's texts: a
/// paused or disabled NodeWright does no work, so its uninstalls never run until the user acts; a
/// malformed node state cannot be read to know what is installed.
pub fn deletion_blocked(
    paused: bool,
    disabled: bool,
    malformed: bool,
) -> Option<(&'static str, &'static str)> {
    if malformed {
        Some((
            "MalformedNodeState",
            "Cannot safely delete NodeWright: malformed nodeState on one or more nodes. \
             Repair the nodeState annotation before deletion.",
        ))
    } else if paused {
        Some((
            "PausedWithPendingUninstall",
            "NodeWright is paused with uninstall-enabled packages still tracked in nodeState. \
             Unpause to let uninstall complete before deletion.",
        ))
    } else if disabled {
        Some((
            "DisabledWithPendingUninstall",
            "NodeWright is disabled with uninstall-enabled packages still tracked in nodeState. \
             Re-enable the NodeWright to let uninstall complete before deletion.",
        ))
    } else {
        None
    }
}

/// The UninstallInProgress and UninstallFailed conditions (reason, message) from the nodes' states
/// (upstream-operator.md §2.12): a current spec package at an uninstall stage on any readable node,
/// and such a record erroring.
pub fn uninstall_conditions<'a>(
    nodewright: &NodeWright,
    states: impl IntoIterator<Item = &'a NodeState>,
) -> [(&'static str, Option<(&'static str, &'static str)>); 2] {
    let mut in_progress = false;
    let mut failed = false;
    for state in states {
        for (name, package) in &nodewright.spec.packages {
            if let Some(r) = state
                .get(name, &package.version)
                .filter(|r| matches!(r.stage, Stage::Uninstall | Stage::UninstallInterrupt))
            {
                in_progress = true;
                failed |= r.state == Some(State::Erroring);
            }
        }
    }
    [
        (
            UNINSTALL_IN_PROGRESS,
            in_progress.then_some((
                "UninstallInProgress",
                "One or more packages are being uninstalled",
            )),
        ),
        (
            UNINSTALL_FAILED,
            failed.then_some((
                "UninstallPodFailing",
                "One or more uninstall pods are failing",
            )),
        ),
    ]
}

/// Condition type: packages wait on a dependency that is being (or has been) uninstalled.
pub const BLOCKED: &str = "Blocked";
/// Reason of [`BLOCKED`].
pub const DEPENDENCY_UNINSTALLED: &str = "DependencyUninstalled";

/// The message of the Blocked condition (upstream's texts, sorted, `; `-joined): every package not
/// finished on every node whose dependency is to be uninstalled waits for good; `None` when none.
pub fn dependency_block<'a>(
    nodewright: &NodeWright,
    states: impl IntoIterator<Item = &'a NodeState>,
) -> Option<String> {
    let states: Vec<&NodeState> = states.into_iter().collect();
    let packages = &nodewright.spec.packages;
    let mut lines: Vec<String> = Vec::new();
    for (name, package) in packages {
        if uninstall_requested(package)
            || states
                .iter()
                .all(|s| package_done(package, s.get(name, &package.version)))
        {
            continue;
        }
        for (dep, version) in &package.depends_on {
            if !packages
                .get(dep)
                .is_some_and(|d| &d.version == version && uninstall_requested(d))
            {
                continue;
            }
            let being = states.iter().any(|s| s.get(dep, version).is_some());
            let what = if being {
                "is being uninstalled"
            } else {
                "has been uninstalled"
            };
            lines.push(format!(
                "package {name} is blocked: dependency {dep} {what}"
            ));
        }
    }
    lines.sort();
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// Sets (`Some`) or removes (`None`) the condition `type_` (True with that reason and message);
/// returns whether it was newly set or its reason changed (worth an event). The transition time is
/// kept while nothing changes, so the status is not rewritten every pass.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    value: Option<(&str, &str)>,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let Some((reason, message)) = value else {
        conditions.retain(|c| c.type_ != type_);
        return false;
    };
    if let Some(c) = conditions
        .iter_mut()
        .find(|c| c.type_ == type_ && c.status == "True")
    {
        // Still true: the transition time stays; a new reason is news, a new message is not.
        let news = c.reason != reason;
        c.reason = reason.to_owned();
        c.message = message.to_owned();
        c.observed_generation = generation;
        return news;
    }
    conditions.retain(|c| c.type_ != type_);
    conditions.push(Condition {
        last_transition_time: Time(now),
        message: message.to_owned(),
        observed_generation: generation,
        reason: reason.to_owned(),
        status: "True".to_owned(),
        type_: type_.to_owned(),
    });
    true
}

/// On deletion, every uninstall-enabled package is to be uninstalled: the rollout then runs with
/// `apply` set on them (in memory only).
pub fn on_delete(nodewright: &mut NodeWright) {
    if nodewright.metadata.deletion_timestamp.is_none() {
        return;
    }
    for package in nodewright.spec.packages.values_mut() {
        if let Some(u) = package.uninstall.as_mut().filter(|u| u.enabled) {
            u.apply = true;
        }
    }
}

/// Whether a deletion still has uninstall work: an uninstall-enabled package of the spec is still
/// recorded (any stage) on one of the nodes. `None` (a malformed node state) counts as pending: the
/// operator cannot tell, and deleting would leave host files behind silently.
pub fn pending<'a>(
    nodewright: &NodeWright,
    states: impl IntoIterator<Item = Option<&'a NodeState>>,
) -> bool {
    let enabled: Vec<(&String, &str)> = nodewright
        .spec
        .packages
        .iter()
        .filter(|(_, p)| p.uninstall.as_ref().is_some_and(|u| u.enabled))
        .map(|(name, p)| (name, p.version.as_str()))
        .collect();
    if enabled.is_empty() {
        return false;
    }
    states.into_iter().any(|state| match state {
        None => true,
        Some(s) => enabled
            .iter()
            .any(|(name, version)| s.get(name, version).is_some()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use nodewright_shared::api::{NodeWrightSpec, Package, Uninstall};
    use nodewright_shared::node_state::{PackageStatus, Stage, State};

    fn package(enabled: bool) -> Package {
        Package {
            version: "1.0.0".into(),
            image: "img".into(),
            uninstall: Some(Uninstall {
                enabled,
                apply: false,
            }),
            ..Package::default()
        }
    }

    fn nodewright() -> NodeWright {
        NodeWright::new(
            "nw",
            NodeWrightSpec {
                packages: BTreeMap::from([
                    ("on".to_owned(), package(true)),
                    ("off".to_owned(), package(false)),
                ]),
                ..NodeWrightSpec::default()
            },
        )
    }

    fn state(name: &str) -> NodeState {
        let mut s = NodeState::default();
        s.upsert(PackageStatus {
            name: name.into(),
            version: "1.0.0".into(),
            image: "img".into(),
            container_sha: String::new(),
            stage: Stage::Config,
            state: Some(State::Complete),
            restarts: 0,
        });
        s
    }

    #[test]
    fn deletion_requests_the_uninstall_of_enabled_packages_only() {
        let mut nw = nodewright();
        on_delete(&mut nw);
        assert!(
            !nw.spec.packages["on"]
                .uninstall
                .as_ref()
                .is_some_and(|u| u.apply)
        );
        nw.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        on_delete(&mut nw);
        assert!(
            nw.spec.packages["on"]
                .uninstall
                .as_ref()
                .is_some_and(|u| u.apply)
        );
        assert!(
            !nw.spec.packages["off"]
                .uninstall
                .as_ref()
                .is_some_and(|u| u.apply)
        );
    }

    #[test]
    fn a_paused_or_disabled_deletion_is_reported_blocked_once() {
        let now = k8s_openapi::jiff::Timestamp::UNIX_EPOCH;
        let set = |c: &mut Vec<Condition>, v| set_condition(c, DELETION_BLOCKED, v, Some(2), now);
        let mut conditions = Vec::new();
        assert!(!set(&mut conditions, deletion_blocked(false, false, false)));
        assert!(conditions.is_empty());
        let paused = deletion_blocked(true, true, false);
        assert_eq!(paused.map(|(r, _)| r), Some("PausedWithPendingUninstall"));
        assert!(set(&mut conditions, paused));
        assert!(!set(&mut conditions, paused));
        let disabled = deletion_blocked(false, true, false);
        assert!(set(&mut conditions, disabled));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].reason, "DisabledWithPendingUninstall");
        assert_eq!(
            deletion_blocked(true, false, true).map(|(r, _)| r),
            Some("MalformedNodeState")
        );
        assert!(!set(&mut conditions, None));
        assert!(conditions.is_empty());
    }

    #[test]
    fn dependents_of_an_uninstalled_package_are_reported_blocked() {
        let mut nw = nodewright();
        let mut dependent = package(false);
        dependent.depends_on = BTreeMap::from([("on".to_owned(), "1.0.0".to_owned())]);
        nw.spec.packages.insert("dep".to_owned(), dependent);
        let empty = NodeState::default();
        assert_eq!(dependency_block(&nw, [&empty]), None);
        if let Some(u) = nw
            .spec
            .packages
            .get_mut("on")
            .and_then(|p| p.uninstall.as_mut())
        {
            u.apply = true;
        }
        let on = state("on");
        assert_eq!(
            dependency_block(&nw, [&empty, &on]).as_deref(),
            Some("package dep is blocked: dependency on is being uninstalled")
        );
        assert_eq!(
            dependency_block(&nw, [&empty]).as_deref(),
            Some("package dep is blocked: dependency on has been uninstalled")
        );
        // Already finished everywhere: not blocked.
        let mut finished = state("dep");
        finished.upsert(PackageStatus {
            name: "dep".into(),
            ..on.get("on", "1.0.0").cloned().expect("record")
        });
        assert_eq!(dependency_block(&nw, [&finished]), None);
    }

    #[test]
    fn uninstall_conditions_follow_the_records() {
        let nw = nodewright();
        let mut s = state("on");
        type Conditions = [(&'static str, Option<(&'static str, &'static str)>); 2];
        let names = |c: Conditions| c.map(|(_, v)| v.map(|(r, _)| r));
        assert_eq!(names(uninstall_conditions(&nw, [&s])), [None, None]);
        let mut r = s.get("on", "1.0.0").cloned().expect("record");
        r.stage = Stage::Uninstall;
        r.state = Some(State::InProgress);
        s.upsert(r.clone());
        assert_eq!(
            names(uninstall_conditions(&nw, [&s])),
            [Some("UninstallInProgress"), None]
        );
        r.state = Some(State::Erroring);
        s.upsert(r);
        assert_eq!(
            names(uninstall_conditions(&nw, [&NodeState::default(), &s])),
            [Some("UninstallInProgress"), Some("UninstallPodFailing")]
        );
    }

    #[test]
    fn deletion_waits_while_an_enabled_package_is_recorded_or_a_state_is_unreadable() {
        let nw = nodewright();
        let (on, off, empty) = (state("on"), state("off"), NodeState::default());
        assert!(pending(&nw, [Some(&empty), Some(&on)]));
        assert!(!pending(&nw, [Some(&empty), Some(&off)]));
        assert!(pending(&nw, [Some(&empty), None]));
        let mut none_enabled = nodewright();
        none_enabled.spec.packages.remove("on");
        assert!(!pending(&none_enabled, [None]));
    }
}
