//! Folding completed Jobs into the pass (DESIGN §4.4, terminal path, Complete): a Job whose stage
//! completed but whose outcome is not recorded yet is recorded by the pass that plans its node, in
//! the same guarded node write as the next stage's record, so a stage costs one node write instead
//! of two and the next Job is created by the very pass the completion woke.
//!
//! The Job is marked `state-recorded` only after that write succeeded. A crash between the two
//! leaves the record moved on and the Job unmarked.
//!
//! The rollout owns every Complete outcome of its NodeWright: the Jobs no pass can fold into a
//! node write ([`unabsorbable`]: their node left the selection, or its records no longer wait on
//! them, as after that crash) are recorded by the pass on their own (a no-op write when the record
//! moved on) and marked. The outcome recorder records a Complete Job only when no NodeWright it
//! reconciles owns it. One owner, no timer between two.

use std::collections::BTreeSet;

use nodewright_shared::api::NodeWright;
use nodewright_shared::node_state::{NodeState, State};

use crate::jobs::classify::{JobOutcome, RecordedEvidence, classify_job, is_interrupt_job};
use crate::jobs::read::{JobIndex, node_of, package_of, recorded};
use crate::jobs::stored::StoredJob;
use crate::naming;
use crate::node::record::{Record, apply_record};

/// The names of the Jobs a pass may fold into `node`'s records: the Jobs of the stages `state`
/// shows in progress or erroring.
fn candidates(nw: &str, node: &str, state: &NodeState) -> BTreeSet<String> {
    state
        .iter()
        .filter(|r| matches!(r.state, Some(State::InProgress | State::Erroring)))
        .map(|r| {
            if r.stage.is_interrupt() {
                naming::interrupt_job_name(nw, node)
            } else {
                naming::package_job_name(nw, &r.name, &r.version, r.stage, node)
            }
        })
        .collect()
}

/// Whether `job` is a Complete Job of `nw` whose outcome is not recorded yet.
fn unrecorded_completion(job: &StoredJob, nw: &str) -> bool {
    recorded(job).is_none()
        && job.metadata.deletion_timestamp.is_none()
        // A Complete Job's outcome needs no pods.
        && classify_job(job, &[], RecordedEvidence::None) == JobOutcome::Succeeded
        && package_of(job).is_some_and(|a| a.nodewright == nw)
}

/// A node as the pass holds it: its records with the completed Jobs folded in (`None`: malformed),
/// and those Jobs.
pub struct Folded<'r> {
    pub state: Option<&'r NodeState>,
    pub absorbed: &'r [String],
}

/// The NodeWright's Complete, unrecorded Jobs that this pass does not fold into a node write: on a
/// node it does not select (`row_of` gives none), or on a node whose records (after folding) no
/// longer wait on them and which this pass did not absorb. The pass records each
/// on its own and marks it, so that a completed stage is recorded by the rollout alone, however its
/// node changed.
pub fn unabsorbable<'j, 'r>(
    nodewright: &NodeWright,
    jobs: &'j JobIndex,
    row_of: impl Fn(&str) -> Option<Folded<'r>>,
) -> Vec<&'j StoredJob> {
    let nw = nodewright.metadata.name.as_deref().unwrap_or_default();
    jobs.iter()
        .filter(|job| unrecorded_completion(job, nw))
        .filter(|job| {
            let Some(node) = node_of(job) else {
                return false;
            };
            let name = job.metadata.name.as_deref().unwrap_or_default();
            match row_of(node) {
                None => true,
                Some(row) => {
                    !row.absorbed.iter().any(|a| a == name)
                        && row
                            .state
                            .as_ref()
                            .is_none_or(|state| !candidates(nw, node, state).contains(name))
                }
            }
        })
        .collect()
}

/// `state` with the outcomes of the node's completed, unrecorded Jobs of `nodewright` applied, and
/// the names of those Jobs (to mark once the state is written).
pub fn completions(
    nodewright: &NodeWright,
    node: &str,
    mut state: NodeState,
    jobs: &JobIndex,
) -> (NodeState, Vec<String>) {
    let nw = nodewright.metadata.name.as_deref().unwrap_or_default();
    let mut absorbed = Vec::new();
    for name in candidates(nw, node, &state) {
        let Some(job) = jobs.get(&name).filter(|job| unrecorded_completion(job, nw)) else {
            continue;
        };
        let Some(annotation) = package_of(job) else {
            continue;
        };
        if apply_record(
            &mut state,
            &annotation,
            is_interrupt_job(job),
            Record::Complete,
        ) {
            absorbed.push(name);
        }
    }
    (state, absorbed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::stored::StoredJob;
    use nodewright_shared::api::{NodeWrightSpec, Package};
    use nodewright_shared::keys;
    use nodewright_shared::node_state::{PackageStatus, Stage};
    use serde_json::json;

    use crate::jobs::PackageAnnotation;

    fn nodewright() -> NodeWright {
        let package = Package {
            version: "1.0.0".into(),
            image: "img".into(),
            ..Package::default()
        };
        NodeWright::new(
            "nw",
            NodeWrightSpec {
                packages: [("a".to_owned(), package.clone()), ("b".to_owned(), package)].into(),
                ..NodeWrightSpec::default()
            },
        )
    }

    fn record(name: &str, stage: Stage, state: State) -> PackageStatus {
        PackageStatus {
            name: name.into(),
            version: "1.0.0".into(),
            image: "img".into(),
            container_sha: String::new(),
            stage,
            state: Some(state),
            restarts: 0,
        }
    }

    fn job(package: &str, stage: Stage, condition: &str, recorded: Option<&str>) -> StoredJob {
        let annotation = PackageAnnotation {
            name: package.into(),
            version: "1.0.0".into(),
            nodewright: "nw".into(),
            stage,
            image: "img".into(),
            container_sha: None,
        };
        let mut annotations = serde_json::Map::new();
        annotations.insert(
            keys::PACKAGE_ANNOTATION.into(),
            json!(annotation.to_json().expect("annotation")),
        );
        if let Some(r) = recorded {
            annotations.insert(keys::STATE_RECORDED_ANNOTATION.into(), json!(r));
        }
        serde_json::from_value(json!({
            "metadata": {
                "name": naming::package_job_name("nw", package, "1.0.0", stage, "n1"),
                "annotations": annotations,
            },
            "spec": {"template": {"spec": {"nodeName": "n1", "containers": []}}},
            "status": {"conditions": [{"type": condition, "status": "True"}]}
        }))
        .expect("job")
    }

    #[test]
    fn a_complete_unrecorded_job_is_folded_into_its_record() {
        let mut state = NodeState::default();
        state.upsert(record("a", Stage::Apply, State::InProgress));
        state.upsert(record("b", Stage::Apply, State::InProgress));
        let jobs = JobIndex::new([
            job("a", Stage::Apply, "Complete", None),
            // Still running: untouched.
            job("b", Stage::Apply, "SuccessCriteriaMet", None),
        ]);
        let (state, absorbed) = completions(&nodewright(), "n1", state, &jobs);
        assert_eq!(
            absorbed,
            [naming::package_job_name(
                "nw",
                "a",
                "1.0.0",
                Stage::Apply,
                "n1"
            )]
        );
        assert_eq!(
            state.get("a", "1.0.0").and_then(|r| r.state),
            Some(State::Complete)
        );
        assert_eq!(
            state.get("b", "1.0.0").and_then(|r| r.state),
            Some(State::InProgress)
        );
    }

    #[test]
    fn recorded_failed_or_other_stage_jobs_are_not_folded() {
        let mut state = NodeState::default();
        state.upsert(record("a", Stage::Config, State::InProgress));
        state.upsert(record("b", Stage::Apply, State::Erroring));
        let jobs = JobIndex::new([
            // The apply Job of `a` completed long ago: its stage is not the record's any more.
            job("a", Stage::Apply, "Complete", None),
            job("a", Stage::Config, "Complete", Some("complete")),
            job("b", Stage::Apply, "Failed", None),
        ]);
        let before = state.clone();
        let (state, absorbed) = completions(&nodewright(), "n1", state, &jobs);
        assert!(absorbed.is_empty());
        assert_eq!(state, before);
    }

    #[test]
    fn an_erroring_stage_whose_retry_succeeded_completes() {
        let mut state = NodeState::default();
        state.upsert(record("a", Stage::Apply, State::Erroring));
        let jobs = JobIndex::new([job("a", Stage::Apply, "Complete", None)]);
        let (state, absorbed) = completions(&nodewright(), "n1", state, &jobs);
        assert_eq!(absorbed.len(), 1);
        assert_eq!(
            state.get("a", "1.0.0").and_then(|r| r.state),
            Some(State::Complete)
        );
    }

    fn names(jobs: &[&StoredJob]) -> Vec<String> {
        jobs.iter()
            .map(|j| j.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    /// The pass records on its own exactly the completions no node write of it carries: on a node
    /// it has no row for, or whose records moved past the Job; never one it absorbed, one its
    /// records still wait on, a recorded one, or one that did not complete.
    #[test]
    fn unabsorbable_are_the_completions_no_node_write_carries() {
        let nw = nodewright();
        let a_apply = naming::package_job_name("nw", "a", "1.0.0", Stage::Apply, "n1");
        let jobs = JobIndex::new([
            job("a", Stage::Apply, "Complete", None),
            job("b", Stage::Apply, "Complete", None),
            job("a", Stage::Config, "Complete", Some("complete")),
            job("b", Stage::Config, "Failed", None),
        ]);
        // No row for n1 (it left the selection): both unrecorded completions.
        let none = unabsorbable(&nw, &jobs, |_| None);
        assert_eq!(names(&none).len(), 2, "{:?}", names(&none));

        // n1's records: `a` moved past its apply (a pass stopped before the mark), `b` waits on
        // its apply and this pass folded it in.
        let mut state = NodeState::default();
        state.upsert(record("a", Stage::Config, State::InProgress));
        state.upsert(record("b", Stage::Apply, State::Complete));
        let b_apply = naming::package_job_name("nw", "b", "1.0.0", Stage::Apply, "n1");
        let absorbed = vec![b_apply.clone()];
        let row = |_: &str| {
            Some(Folded {
                state: Some(&state),
                absorbed: &absorbed,
            })
        };
        assert_eq!(names(&unabsorbable(&nw, &jobs, row)), [a_apply]);

        // Records still waiting on `a`'s apply: the node write of a later pass carries it.
        let mut waiting = NodeState::default();
        waiting.upsert(record("a", Stage::Apply, State::InProgress));
        let row = |_: &str| {
            Some(Folded {
                state: Some(&waiting),
                absorbed: &absorbed,
            })
        };
        assert!(unabsorbable(&nw, &jobs, row).is_empty());

        // Malformed records are never written by a pass: its completions are recorded on their own.
        let row = |_: &str| {
            Some(Folded {
                state: None,
                absorbed: &[],
            })
        };
        assert_eq!(names(&unabsorbable(&nw, &jobs, row)).len(), 2);
    }
}
