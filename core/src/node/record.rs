//! How an outcome changes a package's record in a node's state (DESIGN §4.4): only the record of the
//! Job's own package, version and stage, never once it is complete, and a completed install or
//! upgrade replaces the versions it supersedes. Pure: both the rollout (which folds a completed
//! Job into the same node write as the next stage's record) and the outcome recorder apply it.

use nodewright_shared::node_state::{NodeState, Stage, State};

use crate::jobs::PackageAnnotation;

/// What an outcome does to the package's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The stage completed.
    Complete,
    /// A genuine failure: erroring with this many failed attempts.
    Erroring(i32),
}

/// Applies an outcome to the node state; returns whether anything changed. Only the record of the
/// Job's own package, version and stage is touched, and never once it is complete.
pub fn apply_record(
    state: &mut NodeState,
    job: &PackageAnnotation,
    interrupt: bool,
    record: Record,
) -> bool {
    let Some(current) = state.get(&job.name, &job.version).cloned() else {
        return false;
    };
    if current.stage != job.stage || current.state == Some(State::Complete) {
        return false;
    }
    let mut next = current.clone();
    match record {
        Record::Erroring(restarts) => {
            next.state = Some(State::Erroring);
            // The attempt count of one stage run only grows: a later reconcile may count fewer
            // failed pods once the middle attempts were pruned as evidence (or from a lagging
            // view), and must not lower what was recorded.
            next.restarts = if current.state == Some(State::Erroring) {
                restarts.max(current.restarts)
            } else {
                restarts
            };
        }
        Record::Complete => next.state = Some(State::Complete),
    }
    let mut changed = next != current;
    state.upsert(next);
    if record == Record::Complete {
        if interrupt {
            // The packages folded into this merged interrupt complete with it.
            let skipped: Vec<_> = state
                .iter()
                .filter(|r| r.stage == job.stage && r.state == Some(State::Skipped))
                .cloned()
                .collect();
            for mut r in skipped {
                r.state = Some(State::Complete);
                state.upsert(r);
                changed = true;
            }
        }
        if matches!(job.stage, Stage::Upgrade | Stage::Apply) {
            // The new version is installed: an upgrade replaces every other version (upstream), and
            // any install replaces other versions that never completed installing (a stage that
            // timed out at 1.0.0, then the user moved to 1.0.1): left behind, they would show an
            // erroring package to every reader of node state. A completed other version installed
            // by `apply` stays (a downgrade keeps both records, as upstream), and so does an entry
            // in its uninstall cycle (that cycle removes it).
            let old: Vec<_> = state
                .iter()
                .filter(|r| r.name == job.name && r.version != job.version)
                .filter(|r| {
                    job.stage == Stage::Upgrade
                        || (r.state != Some(State::Complete)
                            && !matches!(r.stage, Stage::Uninstall | Stage::UninstallInterrupt))
                })
                .map(|r| r.version.clone())
                .collect();
            for version in old {
                state.remove(&job.name, &version);
                changed = true;
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::node_state::PackageStatus;

    fn entry(name: &str, version: &str, stage: Stage, state: State) -> PackageStatus {
        PackageStatus {
            name: name.into(),
            version: version.into(),
            image: "img".into(),
            container_sha: String::new(),
            stage,
            state: Some(state),
            restarts: 0,
        }
    }

    fn job(name: &str, version: &str, stage: Stage) -> PackageAnnotation {
        PackageAnnotation {
            name: name.into(),
            version: version.into(),
            nodewright: "nw".into(),
            stage,
            image: "img".into(),
            container_sha: None,
        }
    }

    #[test]
    fn outcomes_only_touch_their_own_stage_and_never_undo_completion() {
        let mut s = NodeState::default();
        s.upsert(entry("a", "1", Stage::Config, State::InProgress));
        // A late event of the finished apply Job changes nothing.
        assert!(!apply_record(
            &mut s,
            &job("a", "1", Stage::Apply),
            false,
            Record::Erroring(2)
        ));
        assert!(apply_record(
            &mut s,
            &job("a", "1", Stage::Config),
            false,
            Record::Erroring(1)
        ));
        assert_eq!(
            s.get("a", "1").map(|r| (r.state, r.restarts)),
            Some((Some(State::Erroring), 1))
        );
        assert!(apply_record(
            &mut s,
            &job("a", "1", Stage::Config),
            false,
            Record::Complete
        ));
        assert!(!apply_record(
            &mut s,
            &job("a", "1", Stage::Config),
            false,
            Record::Erroring(3)
        ));
        assert_eq!(s.get("a", "1").and_then(|r| r.state), Some(State::Complete));
    }

    #[test]
    fn the_recorded_attempt_count_never_goes_down() {
        let mut s = NodeState::default();
        s.upsert(entry("a", "1", Stage::Apply, State::InProgress));
        let apply = job("a", "1", Stage::Apply);
        assert!(apply_record(&mut s, &apply, false, Record::Erroring(3)));
        // A later pass after the middle attempt was pruned counts 2 failed pods.
        assert!(!apply_record(&mut s, &apply, false, Record::Erroring(2)));
        assert_eq!(s.get("a", "1").map(|r| r.restarts), Some(3));
        // A new run of the stage starts from a fresh in-progress record.
        s.upsert(entry("a", "1", Stage::Apply, State::InProgress));
        assert!(apply_record(&mut s, &apply, false, Record::Erroring(1)));
        assert_eq!(s.get("a", "1").map(|r| r.restarts), Some(1));
    }

    #[test]
    fn an_interrupt_completes_the_packages_folded_into_it() {
        let mut s = NodeState::default();
        s.upsert(entry("a", "1", Stage::Interrupt, State::Skipped));
        s.upsert(entry("b", "1", Stage::Interrupt, State::InProgress));
        assert!(apply_record(
            &mut s,
            &job("b", "1", Stage::Interrupt),
            true,
            Record::Complete
        ));
        assert!(s.iter().all(|r| r.state == Some(State::Complete)));
    }

    #[test]
    fn a_completed_install_drops_other_versions_that_never_installed() {
        let mut s = NodeState::default();
        // 1.0.0 timed out at apply; the user moved to 1.0.1.
        s.upsert(entry("a", "1.0.0", Stage::Apply, State::Erroring));
        // An older version that did install (a downgrade keeps it, as upstream), and one being
        // uninstalled (its cycle removes it).
        s.upsert(entry("a", "0.9.0", Stage::Config, State::Complete));
        s.upsert(entry("a", "0.8.0", Stage::Uninstall, State::InProgress));
        s.upsert(entry("b", "1.0.0", Stage::Apply, State::Erroring));
        s.upsert(entry("a", "1.0.1", Stage::Apply, State::InProgress));
        // While 1.0.1 only runs, the old record stays (nothing installed yet).
        assert!(apply_record(
            &mut s,
            &job("a", "1.0.1", Stage::Apply),
            false,
            Record::Erroring(1)
        ));
        assert!(s.get("a", "1.0.0").is_some());
        s.upsert(entry("a", "1.0.1", Stage::Apply, State::InProgress));
        assert!(apply_record(
            &mut s,
            &job("a", "1.0.1", Stage::Apply),
            false,
            Record::Complete
        ));
        assert!(s.get("a", "1.0.0").is_none(), "the timed-out version goes");
        assert!(s.get("a", "0.9.0").is_some());
        assert!(s.get("a", "0.8.0").is_some());
        assert!(
            s.get("b", "1.0.0").is_some(),
            "other packages are untouched"
        );
    }

    #[test]
    fn a_completed_upgrade_drops_the_old_version() {
        let mut s = NodeState::default();
        s.upsert(entry("a", "1.0.0", Stage::Config, State::Complete));
        s.upsert(entry("a", "2.0.0", Stage::Upgrade, State::InProgress));
        assert!(apply_record(
            &mut s,
            &job("a", "2.0.0", Stage::Upgrade),
            false,
            Record::Complete
        ));
        assert!(s.get("a", "1.0.0").is_none());
        assert!(s.get("a", "2.0.0").is_some());
    }
}
