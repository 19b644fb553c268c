//! Folding completed Jobs into the pass (DESIGN §4.4, terminal path, Complete): a Job whose stage
//! completed but whose outcome is not recorded yet is recorded by the pass that plans its node, in
//! the same guarded node write as the next stage's record, so a stage costs one node write instead
//! of two and the next Job is created by the very pass the completion woke.
//!
//! The Job is marked `state-recorded` only after that write succeeded. A crash between the two
//! leaves the record moved on and the Job unmarked: the outcome recorder then finds nothing to
//! write and marks it (the operator's `outcomes::ABSORB_GRACE`), so no outcome is lost or repeated.

use std::collections::BTreeSet;

use nodewright_shared::api::NodeWright;
use nodewright_shared::node_state::{NodeState, State};

use crate::jobs::classify::{JobOutcome, RecordedEvidence, classify_job, is_interrupt_job};
use crate::jobs::read::{JobIndex, package_of, recorded};
use crate::naming;
use crate::node::record::{Record, apply_record};

/// `state` with the outcomes of the node's completed, unrecorded Jobs of `nodewright` applied, and
/// the names of those Jobs (to mark once the state is written).
pub fn completions(
    nodewright: &NodeWright,
    node: &str,
    mut state: NodeState,
    jobs: &JobIndex,
) -> (NodeState, Vec<String>) {
    let nw = nodewright.metadata.name.as_deref().unwrap_or_default();
    let candidates: BTreeSet<String> = state
        .iter()
        .filter(|r| matches!(r.state, Some(State::InProgress | State::Erroring)))
        .map(|r| {
            if r.stage.is_interrupt() {
                naming::interrupt_job_name(nw, node)
            } else {
                naming::package_job_name(nw, &r.name, &r.version, r.stage, node)
            }
        })
        .collect();
    let mut absorbed = Vec::new();
    for name in candidates {
        let Some(job) = jobs.get(&name) else {
            continue;
        };
        if recorded(job).is_some()
            || job.metadata.deletion_timestamp.is_some()
            // A Complete Job's outcome needs no pods.
            || classify_job(job, &[], RecordedEvidence::None) != JobOutcome::Succeeded
        {
            continue;
        }
        let Some(annotation) = package_of(job).filter(|a| a.nodewright == nw) else {
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
}
