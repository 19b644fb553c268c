//! The stage machine of one package on one node (upstream-operator.md §2.8), as a pure decision:
//! given the package and its node-state record, what happens next.
//!
//! Fresh install `apply → config [→ interrupt → post-interrupt]`; a version bump over an installed
//! older version starts at `upgrade` instead of `apply`. The next stage is only decided once the
//! current one is `complete`; an in-progress or erroring stage keeps its stage (its Job, or its
//! absence, decides what happens).

use nodewright_shared::api::Package;
use nodewright_shared::node_state::{NodeState, PackageStatus, Stage, State};

/// What a package needs next on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Finished: complete at its terminal stage.
    Done,
    /// Run (or keep running) this package stage as a Job.
    Run(Stage),
    /// Ready for the node's merged interrupt (config complete, the package has an interrupt).
    WantsInterrupt,
    /// Inside the node's interrupt: owner running it, or folded into another package's (`skipped`).
    InInterrupt,
    /// Uninstalled (and its uninstall-interrupt done, if any): drop the record.
    Remove,
    /// Uninstall complete, the package has an interrupt: ready for the node's uninstall-interrupt.
    WantsUninstallInterrupt,
    /// Inside the node's uninstall-interrupt (it cannot be cancelled once started, upstream's rule).
    InUninstallInterrupt,
}

/// Whether the package is to be uninstalled (`uninstall.enabled` and `uninstall.apply`; on deletion
/// the rollout sets `apply` on every enabled package, see [`super::uninstall`]).
pub fn uninstall_requested(package: &Package) -> bool {
    package
        .uninstall
        .as_ref()
        .is_some_and(|u| u.enabled && u.apply)
}

/// The stage at which the package is finished: `post-interrupt` with an interrupt, else `config`.
pub fn terminal_stage(package: &Package) -> Stage {
    if package.interrupt.is_some() {
        Stage::PostInterrupt
    } else {
        Stage::Config
    }
}

/// Whether the record says the package is finished.
pub fn package_done(package: &Package, record: Option<&PackageStatus>) -> bool {
    if uninstall_requested(package) {
        // Absent is uninstalled (also for a package that was never installed, as upstream).
        return record.is_none();
    }
    record.is_some_and(|r| {
        r.state == Some(State::Complete)
            && (r.stage == terminal_stage(package)
                || (r.stage == Stage::PostInterrupt && package.interrupt.is_none()))
    })
}

/// Whether an older installed version of the package is recorded (so the new one upgrades).
fn has_older_version(name: &str, version: &str, state: &NodeState) -> bool {
    let Ok(wanted) = parse_version(version) else {
        return false;
    };
    state.iter().any(|r| {
        r.name == name
            && r.version != version
            && parse_version(&r.version).is_ok_and(|installed| installed < wanted)
            && r.state == Some(State::Complete)
    })
}

/// Semver with an optional leading `v` (upstream accepts both).
fn parse_version(v: &str) -> Result<semver::Version, semver::Error> {
    semver::Version::parse(v.strip_prefix('v').unwrap_or(v))
}

/// The uninstall cycle (upstream-operator.md §2.12), when it decides the step: `uninstall [→
/// uninstall-interrupt] → record removed`. An uninstall starts only from a completed stage (an
/// install in flight finishes first); cancelling (`apply` back to false) during `uninstall` installs
/// again from `apply`; an uninstall-interrupt, once started, runs to its end.
fn uninstall_step(package: &Package, record: Option<&PackageStatus>) -> Option<Step> {
    let Some(record) = record else {
        // Absent is uninstalled.
        return uninstall_requested(package).then_some(Step::Done);
    };
    let complete = record.state == Some(State::Complete);
    if uninstall_requested(package) {
        return match record.stage {
            Stage::Uninstall if complete && package.interrupt.is_some() => {
                Some(Step::WantsUninstallInterrupt)
            }
            Stage::Uninstall if complete => Some(Step::Remove),
            Stage::Uninstall => Some(Step::Run(Stage::Uninstall)),
            Stage::UninstallInterrupt if complete => Some(Step::Remove),
            Stage::UninstallInterrupt => Some(Step::InUninstallInterrupt),
            _ if complete => Some(Step::Run(Stage::Uninstall)),
            // An install stage still running: it finishes first.
            _ => None,
        };
    }
    match record.stage {
        Stage::Uninstall if !complete => Some(Step::Run(Stage::Apply)),
        Stage::UninstallInterrupt if !complete => Some(Step::InUninstallInterrupt),
        _ => None,
    }
}

/// The next step of `package` (named `name`) on a node whose records are `state`.
pub fn next_step(name: &str, package: &Package, state: &NodeState) -> Step {
    let record = state.get(name, &package.version);
    if let Some(step) = uninstall_step(package, record) {
        return step;
    }
    let Some(record) = record else {
        return if has_older_version(name, &package.version, state) {
            Step::Run(Stage::Upgrade)
        } else {
            Step::Run(Stage::Apply)
        };
    };
    if package_done(package, Some(record)) {
        return Step::Done;
    }
    match record.state {
        Some(State::Complete) => match record.stage {
            Stage::Apply | Stage::Upgrade => Step::Run(Stage::Config),
            Stage::Config if package.interrupt.is_some() => Step::WantsInterrupt,
            Stage::Interrupt => Step::Run(Stage::PostInterrupt),
            // Uninstall without a removal, or an uninstall-interrupt: the package is not installed.
            Stage::Uninstall | Stage::UninstallInterrupt => Step::Run(Stage::Apply),
            // Config without interrupt and post-interrupt are terminal (handled by package_done).
            Stage::Config | Stage::PostInterrupt => Step::Done,
        },
        Some(State::Skipped) => Step::InInterrupt,
        _ if record.stage.is_interrupt() => Step::InInterrupt,
        _ => Step::Run(record.stage),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{Interrupt, InterruptType};

    fn package(version: &str, interrupt: bool) -> Package {
        Package {
            version: version.into(),
            image: "img".into(),
            interrupt: interrupt.then(|| Interrupt {
                kind: InterruptType::Reboot,
                services: vec![],
            }),
            ..Package::default()
        }
    }

    fn record(version: &str, stage: Stage, state: State) -> PackageStatus {
        PackageStatus {
            name: "p".into(),
            version: version.into(),
            image: "img".into(),
            container_sha: String::new(),
            stage,
            state: Some(state),
            restarts: 0,
        }
    }

    fn with(records: &[PackageStatus]) -> NodeState {
        let mut s = NodeState::default();
        for r in records {
            s.upsert(r.clone());
        }
        s
    }

    #[test]
    fn fresh_install_without_interrupt_is_apply_then_config() {
        let p = package("1.0.0", false);
        assert_eq!(
            next_step("p", &p, &NodeState::default()),
            Step::Run(Stage::Apply)
        );
        let s = with(&[record("1.0.0", Stage::Apply, State::InProgress)]);
        assert_eq!(next_step("p", &p, &s), Step::Run(Stage::Apply));
        let s = with(&[record("1.0.0", Stage::Apply, State::Erroring)]);
        assert_eq!(next_step("p", &p, &s), Step::Run(Stage::Apply));
        let s = with(&[record("1.0.0", Stage::Apply, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::Run(Stage::Config));
        let s = with(&[record("1.0.0", Stage::Config, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::Done);
        assert!(package_done(&p, s.get("p", "1.0.0")));
    }

    #[test]
    fn interrupt_packages_go_through_interrupt_and_post_interrupt() {
        let p = package("1.0.0", true);
        let s = with(&[record("1.0.0", Stage::Config, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::WantsInterrupt);
        assert!(!package_done(&p, s.get("p", "1.0.0")));
        let s = with(&[record("1.0.0", Stage::Interrupt, State::InProgress)]);
        assert_eq!(next_step("p", &p, &s), Step::InInterrupt);
        let s = with(&[record("1.0.0", Stage::Interrupt, State::Skipped)]);
        assert_eq!(next_step("p", &p, &s), Step::InInterrupt);
        let s = with(&[record("1.0.0", Stage::Interrupt, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::Run(Stage::PostInterrupt));
        let s = with(&[record("1.0.0", Stage::PostInterrupt, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::Done);
    }

    fn uninstalling(mut p: Package, apply: bool) -> Package {
        p.uninstall = Some(nodewright_shared::api::Uninstall {
            enabled: true,
            apply,
        });
        p
    }

    #[test]
    fn uninstall_runs_from_a_completed_stage_then_removes_the_record() {
        let p = uninstalling(package("1.0.0", false), true);
        assert_eq!(next_step("p", &p, &NodeState::default()), Step::Done);
        assert!(package_done(&p, None));
        let s = with(&[record("1.0.0", Stage::Config, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::Run(Stage::Uninstall));
        assert!(!package_done(&p, s.get("p", "1.0.0")));
        // An install in flight finishes first.
        let s = with(&[record("1.0.0", Stage::Apply, State::InProgress)]);
        assert_eq!(next_step("p", &p, &s), Step::Run(Stage::Apply));
        let s = with(&[record("1.0.0", Stage::Uninstall, State::Erroring)]);
        assert_eq!(next_step("p", &p, &s), Step::Run(Stage::Uninstall));
        let s = with(&[record("1.0.0", Stage::Uninstall, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::Remove);
    }

    #[test]
    fn uninstall_of_an_interrupt_package_goes_through_the_uninstall_interrupt() {
        let p = uninstalling(package("1.0.0", true), true);
        let s = with(&[record("1.0.0", Stage::PostInterrupt, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::Run(Stage::Uninstall));
        let s = with(&[record("1.0.0", Stage::Uninstall, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::WantsUninstallInterrupt);
        let s = with(&[record(
            "1.0.0",
            Stage::UninstallInterrupt,
            State::InProgress,
        )]);
        assert_eq!(next_step("p", &p, &s), Step::InUninstallInterrupt);
        let s = with(&[record("1.0.0", Stage::UninstallInterrupt, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::Remove);
    }

    #[test]
    fn cancelling_an_uninstall_installs_again_except_inside_its_interrupt() {
        let p = uninstalling(package("1.0.0", true), false);
        let s = with(&[record("1.0.0", Stage::Uninstall, State::InProgress)]);
        assert_eq!(next_step("p", &p, &s), Step::Run(Stage::Apply));
        let s = with(&[record(
            "1.0.0",
            Stage::UninstallInterrupt,
            State::InProgress,
        )]);
        assert_eq!(next_step("p", &p, &s), Step::InUninstallInterrupt);
        // Enabled but not applied: an ordinary installed package.
        let s = with(&[record("1.0.0", Stage::PostInterrupt, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::Done);
    }

    #[test]
    fn a_newer_version_over_an_installed_one_upgrades() {
        let p = package("2.0.0", false);
        let s = with(&[record("1.0.0", Stage::Config, State::Complete)]);
        assert_eq!(next_step("p", &p, &s), Step::Run(Stage::Upgrade));
        let older = package("0.9.0", false);
        assert_eq!(next_step("p", &older, &s), Step::Run(Stage::Apply));
        let s = with(&[
            record("1.0.0", Stage::Config, State::Complete),
            record("2.0.0", Stage::Upgrade, State::Complete),
        ]);
        assert_eq!(next_step("p", &p, &s), Step::Run(Stage::Config));
    }
}
