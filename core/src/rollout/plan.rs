//! What to do on one node for one NodeWright, decided without any API call: the node-state records to
//! write, the Jobs to create, the recorded Jobs to delete so a stage can run again, whether the node
//! must be cordoned and drained, and whether a stage timed out.
//!
//! The plan is computed from the node as cached. A decision that would throw away evidence (deleting
//! a Job whose outcome is recorded) is only taken on a freshly read node: from a stale cache it would
//! rerun a stage that in fact completed a moment ago. Such a plan says [`Plan::stale`] instead.

use nodewright_shared::api::{NodeWright, Package};
use nodewright_shared::node_state::{NodeState, PackageStatus, Stage, State};

use super::graph;
use super::stages::{Step, next_step};
use crate::jobs::read::{JobIndex, Recorded, ended_unstarted, is_finished, recorded};
use crate::jobs::{MergedInterrupt, merge_interrupts};
use crate::naming;

/// A Job to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Creation {
    /// A package stage.
    Package {
        /// Package key.
        key: String,
        /// Stage.
        stage: Stage,
        /// The package disrupts the node: it runs only on a drained node.
        drain_first: bool,
    },
    /// The node's merged interrupt (always on a drained node).
    Interrupt {
        /// The merged interrupt and its owner.
        merged: MergedInterrupt,
        /// `interrupt` or `uninstall-interrupt`.
        stage: Stage,
    },
}

/// The decision for one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The node state to record (before any Job is created).
    pub state: NodeState,
    /// Jobs to create.
    pub create: Vec<Creation>,
    /// Finished, recorded Jobs to delete so their stage runs again.
    pub delete: Vec<String>,
    /// A disruptive package is in flight: the node must be (stay) cordoned.
    pub cordon: bool,
    /// A disruptive stage ended without ever getting a pod (refused until its bound) and nothing
    /// else disruptive is in flight: the NodeWright's cordon is released (issue 22 item 7: never
    /// hold a node cordoned without a pod able to run on it). The node counts as failed
    /// ([`Plan::timed_out`]).
    pub release_cordon: bool,
    /// A stage timed out on this node.
    pub timed_out: bool,
    /// The cached node may be stale for a decision: re-read it and plan again.
    pub stale: bool,
}

fn record(
    name: &str,
    nodewright: &NodeWright,
    stage: Stage,
    state: State,
) -> Option<PackageStatus> {
    let package = nodewright.spec.packages.get(name)?;
    Some(PackageStatus {
        name: name.to_owned(),
        version: package.version.clone(),
        image: package.image.clone(),
        container_sha: package.container_sha.clone().unwrap_or_default(),
        stage,
        state: Some(state),
        restarts: 0,
    })
}

/// One node's plan as [`plan_node`] builds it, package by package.
struct NodePlanner<'a> {
    nodewright: &'a NodeWright,
    nw: &'a str,
    node: &'a str,
    jobs: &'a JobIndex,
    fresh: bool,
    /// `spec.serial` and a package occupies the node: no other package stage starts.
    serial_busy: bool,
    /// A finished package Job whose outcome is not recorded yet, or whose stage runs again: the
    /// package is not ready for the interrupt either, so the interrupt waits for it (it would
    /// otherwise run without that package and a second interrupt would follow).
    package_pending: bool,
    out: Plan,
}

impl NodePlanner<'_> {
    /// Package `name` has `stage` to run on the node (its record there is `current`): cordon for
    /// it when it disrupts, start its Job, or act on the Job it already has.
    fn run_stage(
        &mut self,
        name: &str,
        package: &Package,
        stage: Stage,
        current: Option<&PackageStatus>,
    ) {
        let disruptive = package.interrupt.is_some()
            && matches!(stage, Stage::Apply | Stage::Upgrade | Stage::Uninstall);
        let job_name = naming::package_job_name(self.nw, name, &package.version, stage, self.node);
        let unstarted = self.jobs.get(&job_name).is_some_and(ended_unstarted);
        self.out.cordon |= disruptive && !unstarted;
        self.out.release_cordon |= disruptive && unstarted;
        if stage == Stage::Apply && current.is_some_and(|r| r.stage == Stage::Uninstall) {
            // A cancelled uninstall: its Job, if still running, is stopped (upstream
            // invalidates its pod); its outcome would no longer be recorded anyway.
            let uninstall = naming::package_job_name(
                self.nw,
                name,
                &package.version,
                Stage::Uninstall,
                self.node,
            );
            if self.jobs.get(&uninstall).is_some_and(|j| !is_finished(j)) {
                self.out.delete.push(uninstall);
            }
        }
        let at_stage = current.filter(|r| r.stage == stage);
        match self.jobs.get(&job_name) {
            None if self.serial_busy => {}
            None => {
                self.serial_busy = self.nodewright.spec.serial;
                if at_stage.and_then(|r| r.state) != Some(State::InProgress)
                    && let Some(r) = record(name, self.nodewright, stage, State::InProgress)
                {
                    self.out.state.upsert(r);
                }
                self.out.create.push(Creation::Package {
                    key: name.to_owned(),
                    stage,
                    drain_first: disruptive,
                });
            }
            Some(job) if !is_finished(job) => {}
            Some(job) => match recorded(job) {
                // The outcome path records it first.
                None => self.package_pending = true,
                // Processed (only admission rejections): the outcome path deletes it right
                // after the mark, but that DELETE can fail or never be sent (5xx, a lost
                // term, a killed process), and nothing else would reconcile a recorded Job.
                // Deleting it throws away no evidence, so no fresh read is needed: the
                // stage then runs again instead of waiting for the failed-Job TTL.
                Some(Recorded::Rejected) => {
                    self.package_pending = true;
                    self.out.delete.push(job_name);
                }
                Some(Recorded::TimedOut)
                    if at_stage.and_then(|r| r.state) == Some(State::Erroring) =>
                {
                    self.out.timed_out = true;
                }
                // Recorded, yet the record says the stage still has to run: a rerun (state
                // reset, config change), or a stale cache.
                Some(_) if self.fresh => {
                    self.package_pending = true;
                    self.out.delete.push(job_name);
                }
                Some(_) => {
                    self.package_pending = true;
                    self.out.stale = true;
                }
            },
        }
    }
}

/// Plans the work of `nodewright` (already defaulted) on `node`, whose records are `state`. `fresh`:
/// the node was just read from the API server (not the cache).
pub fn plan_node(
    nodewright: &NodeWright,
    node: &str,
    state: &NodeState,
    jobs: &JobIndex,
    fresh: bool,
) -> Plan {
    let nw = nodewright.metadata.name.as_deref().unwrap_or_default();
    let packages = &nodewright.spec.packages;
    let mut wants_interrupt: Vec<&str> = Vec::new();
    let mut in_interrupt: Vec<&str> = Vec::new();
    let mut wants_uninstall_interrupt: Vec<&str> = Vec::new();
    let mut in_uninstall_interrupt: Vec<&str> = Vec::new();
    // `spec.serial`: one package at a time per node (upstream handles one package per reconcile).
    // A package whose stage Job is running occupies the node; otherwise the first one to start does.
    let serial_busy = nodewright.spec.serial
        && graph::runnable(packages, state).into_iter().any(|name| {
            packages.get(name).is_some_and(|package| {
                matches!(next_step(name, package, state), Step::Run(stage)
                    if jobs
                        .get(&naming::package_job_name(nw, name, &package.version, stage, node))
                        .is_some_and(|j| !is_finished(j)))
            })
        });

    let mut planner = NodePlanner {
        nodewright,
        nw,
        node,
        jobs,
        fresh,
        serial_busy,
        package_pending: false,
        out: Plan {
            state: state.clone(),
            ..Plan::default()
        },
    };

    for name in graph::runnable(packages, state) {
        let Some(package) = packages.get(name) else {
            continue;
        };
        let current = state.get(name, &package.version);
        match next_step(name, package, state) {
            Step::Done => {}
            Step::WantsInterrupt => wants_interrupt.push(name),
            Step::InInterrupt => in_interrupt.push(name),
            Step::WantsUninstallInterrupt => wants_uninstall_interrupt.push(name),
            Step::InUninstallInterrupt => in_uninstall_interrupt.push(name),
            Step::Remove => {
                planner.out.state.remove(name, &package.version);
            }
            Step::Run(stage) => planner.run_stage(name, package, stage, current),
        }
    }
    let NodePlanner {
        mut out,
        package_pending,
        ..
    } = planner;

    // Both interrupt stages share the node's one interrupt Job: an uninstall-interrupt goes first.
    let uninstall = [
        wants_uninstall_interrupt.as_slice(),
        in_uninstall_interrupt.as_slice(),
    ];
    let install = [wants_interrupt.as_slice(), in_interrupt.as_slice()];
    let phases = [
        (Stage::UninstallInterrupt, uninstall),
        (Stage::Interrupt, install),
    ];
    for (stage, [wants, inside]) in phases {
        if !wants.is_empty() || !inside.is_empty() {
            let packages_cordon = out.cordon;
            out.cordon = true;
            let input = PhaseInput {
                nodewright,
                node,
                state,
                jobs,
                fresh,
                package_pending,
            };
            if interrupt_phase(&mut out, &input, stage, wants, inside) {
                // The interrupt ended without ever having a pod (the node was drained, nothing ran
                // on it): only a disruptive package still in flight keeps the cordon.
                out.cordon = packages_cordon;
                out.release_cordon = true;
            }
            break;
        }
    }
    out.release_cordon &= !out.cordon;
    out
}

/// What an interrupt phase decides from.
struct PhaseInput<'a> {
    nodewright: &'a NodeWright,
    node: &'a str,
    state: &'a NodeState,
    jobs: &'a JobIndex,
    fresh: bool,
    /// Some package's stage is not settled yet (see `package_pending` in [`plan_node`]).
    package_pending: bool,
}

/// Drives the node's merged interrupt of `stage` (`interrupt` or `uninstall-interrupt`): `wants` are
/// the packages ready for it, `inside` those already in it (owner or skipped). Returns whether the
/// node's interrupt ended timed out without ever having had a pod.
fn interrupt_phase(
    out: &mut Plan,
    input: &PhaseInput<'_>,
    stage: Stage,
    wants: &[&str],
    inside: &[&str],
) -> bool {
    let PhaseInput {
        nodewright,
        node,
        state,
        jobs,
        fresh,
        package_pending,
    } = *input;
    let nw = nodewright.metadata.name.as_deref().unwrap_or_default();
    let packages = &nodewright.spec.packages;
    let interrupt_job = naming::interrupt_job_name(nw, node);
    let merged_of = |names: &[&str]| {
        merge_interrupts(names.iter().filter_map(|n| {
            packages
                .get(*n)
                .and_then(|p| p.interrupt.as_ref())
                .map(|i| (*n, i))
        }))
    };
    let owner_running = inside.iter().any(|n| {
        packages
            .get(*n)
            .and_then(|p| state.get(n, &p.version))
            .is_some_and(|r| {
                r.stage == stage
                    && matches!(r.state, Some(State::InProgress | State::Erroring) | None)
            })
    });
    if owner_running {
        let mut unstarted = false;
        match jobs.get(&interrupt_job) {
            None => {
                // Lost (deleted, or the node was rebooted and the Job garbage-collected): recreate.
                if let Some(merged) = merged_of(inside) {
                    // A rerun starts in progress, as a package stage's does: an `erroring` record
                    // (its timed-out Job expired or was deleted) would otherwise show the new run
                    // as failing until it ends.
                    let erroring = packages
                        .get(&merged.owner)
                        .and_then(|p| state.get(&merged.owner, &p.version))
                        .is_some_and(|r| r.stage == stage && r.state == Some(State::Erroring));
                    if erroring
                        && let Some(r) = record(&merged.owner, nodewright, stage, State::InProgress)
                    {
                        out.state.upsert(r);
                    }
                    out.create.push(Creation::Interrupt { merged, stage });
                }
            }
            Some(job) if !is_finished(job) => {}
            Some(job) => match recorded(job) {
                None => {}
                // Only rejected at admission and already processed: a DELETE after the mark that
                // failed leaves it here; remove it so the interrupt runs again (see the package
                // case in [`plan_node`]).
                Some(Recorded::Rejected) => out.delete.push(interrupt_job.clone()),
                Some(Recorded::TimedOut) => {
                    out.timed_out = true;
                    unstarted = ended_unstarted(job);
                }
                Some(Recorded::Complete) if fresh => out.delete.push(interrupt_job.clone()),
                Some(Recorded::Complete) => out.stale = true,
            },
        }
        return unstarted;
    }
    // Skipped packages whose owner is gone (e.g. its record was reset): take part again.
    let mut wants: Vec<&str> = wants.iter().chain(inside).copied().collect();
    wants.sort_unstable();
    let package_work = package_pending
        || jobs.unfinished_package_job_on(node)
        || out
            .create
            .iter()
            .any(|c| matches!(c, Creation::Package { .. }));
    if wants.is_empty() || package_work {
        return false;
    }
    match jobs.get(&interrupt_job) {
        Some(job) if !is_finished(job) => {}
        Some(job) => {
            // An earlier interrupt's Job, finished: remove it once its outcome is recorded.
            if recorded(job).is_some() {
                out.delete.push(interrupt_job.clone());
            }
        }
        None => {
            if let Some(merged) = merged_of(&wants) {
                for name in &wants {
                    let state = if *name == merged.owner {
                        State::InProgress
                    } else {
                        State::Skipped
                    };
                    if let Some(r) = record(name, nodewright, stage, state) {
                        out.state.upsert(r);
                    }
                }
                out.create.push(Creation::Interrupt { merged, stage });
            }
        }
    }
    false
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::jobs::stored::StoredJob;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
    use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use nodewright_shared::api::{Interrupt, InterruptType, NodeWrightSpec, Package};
    use nodewright_shared::keys;

    /// A package `1.0.0` depending on `deps` at `1.0.0` (also the preview's tests' fixture).
    pub(crate) fn package(deps: &[&str], interrupt: Option<InterruptType>) -> Package {
        Package {
            version: "1.0.0".into(),
            image: "img".into(),
            depends_on: deps
                .iter()
                .map(|d| ((*d).to_owned(), "1.0.0".to_owned()))
                .collect(),
            interrupt: interrupt.map(|kind| Interrupt {
                kind,
                services: vec![],
            }),
            ..Package::default()
        }
    }

    fn nodewright(packages: &[(&str, Package)]) -> NodeWright {
        let mut nw = NodeWright::new(
            "nw",
            NodeWrightSpec {
                packages: packages
                    .iter()
                    .map(|(k, p)| ((*k).to_owned(), p.clone()))
                    .collect(),
                ..NodeWrightSpec::default()
            },
        );
        nw.metadata.uid = Some("uid".into());
        nw.metadata.generation = Some(1);
        nw
    }

    fn entry(name: &str, stage: Stage, state: State) -> PackageStatus {
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

    fn state(entries: &[PackageStatus]) -> NodeState {
        let mut s = NodeState::default();
        for e in entries {
            s.upsert(e.clone());
        }
        s
    }

    fn job(name: String, condition: Option<&str>, recorded: Option<Recorded>) -> StoredJob {
        StoredJob::of(&Job {
            metadata: ObjectMeta {
                name: Some(name),
                annotations: recorded.map(|r| {
                    BTreeMap::from([(
                        keys::STATE_RECORDED_ANNOTATION.to_owned(),
                        r.as_str().to_owned(),
                    )])
                }),
                ..ObjectMeta::default()
            },
            // Pinned to n1, as every Job of these tests.
            spec: Some(JobSpec {
                template: PodTemplateSpec {
                    metadata: None,
                    spec: Some(PodSpec {
                        node_name: Some("n1".into()),
                        ..PodSpec::default()
                    }),
                },
                ..JobSpec::default()
            }),
            status: condition.map(|c| JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: c.into(),
                    status: "True".into(),
                    ..JobCondition::default()
                }]),
                ..JobStatus::default()
            }),
        })
    }

    fn package_job(
        pkg: &str,
        stage: Stage,
        condition: Option<&str>,
        rec: Option<Recorded>,
    ) -> StoredJob {
        job(
            naming::package_job_name("nw", pkg, "1.0.0", stage, "n1"),
            condition,
            rec,
        )
    }

    fn creates(plan: &Plan) -> Vec<(String, Stage)> {
        plan.create
            .iter()
            .map(|c| match c {
                Creation::Package { key, stage, .. } => (key.clone(), *stage),
                Creation::Interrupt { merged, stage } => {
                    (format!("interrupt:{}", merged.owner), *stage)
                }
            })
            .collect()
    }

    #[test]
    fn a_fresh_node_starts_the_roots_and_records_them_in_progress() {
        let nw = nodewright(&[
            ("a", package(&[], None)),
            ("b", package(&[], None)),
            ("c", package(&["a", "b"], None)),
        ]);
        let p = plan_node(
            &nw,
            "n1",
            &NodeState::default(),
            &JobIndex::default(),
            false,
        );
        assert_eq!(
            creates(&p),
            vec![("a".into(), Stage::Apply), ("b".into(), Stage::Apply)]
        );
        assert_eq!(
            p.state.get("a", "1.0.0").map(|r| (r.stage, r.state)),
            Some((Stage::Apply, Some(State::InProgress)))
        );
        assert!(p.state.get("c", "1.0.0").is_none());
        assert!(!p.cordon);
    }

    #[test]
    fn serial_runs_one_package_at_a_time_on_a_node() {
        let mut nw = nodewright(&[("a", package(&[], None)), ("b", package(&[], None))]);
        nw.spec.serial = true;
        let fresh = plan_node(
            &nw,
            "n1",
            &NodeState::default(),
            &JobIndex::default(),
            false,
        );
        assert_eq!(creates(&fresh), vec![("a".into(), Stage::Apply)]);
        assert!(fresh.state.get("b", "1.0.0").is_none(), "b is not started");
        // a's Job runs: b still waits; once a moved on to its next stage, b is not blocked by a's
        // finished Job.
        let s = state(&[entry("a", Stage::Apply, State::InProgress)]);
        let running = JobIndex::new([package_job("a", Stage::Apply, None, None)]);
        assert!(plan_node(&nw, "n1", &s, &running, false).create.is_empty());
        nw.spec.serial = false;
        assert_eq!(
            creates(&plan_node(&nw, "n1", &s, &running, false)),
            vec![("b".into(), Stage::Apply)]
        );
    }

    #[test]
    fn a_running_job_is_left_alone_and_a_finished_unrecorded_one_waits_for_its_outcome() {
        let nw = nodewright(&[("a", package(&[], None))]);
        let s = state(&[entry("a", Stage::Apply, State::InProgress)]);
        for j in [
            package_job("a", Stage::Apply, None, None),
            package_job("a", Stage::Apply, Some("Complete"), None),
        ] {
            let p = plan_node(&nw, "n1", &s, &JobIndex::new([j]), false);
            assert!(p.create.is_empty() && p.delete.is_empty() && !p.stale);
            assert_eq!(p.state, s);
        }
    }

    #[test]
    fn a_completed_stage_moves_to_the_next() {
        let nw = nodewright(&[("a", package(&[], None))]);
        let s = state(&[entry("a", Stage::Apply, State::Complete)]);
        let jobs = JobIndex::new([package_job(
            "a",
            Stage::Apply,
            Some("Complete"),
            Some(Recorded::Complete),
        )]);
        let p = plan_node(&nw, "n1", &s, &jobs, false);
        assert_eq!(creates(&p), vec![("a".into(), Stage::Config)]);
    }

    #[test]
    fn a_timed_out_stage_stays_and_is_reported() {
        let nw = nodewright(&[("a", package(&[], None))]);
        let s = state(&[entry("a", Stage::Apply, State::Erroring)]);
        let jobs = JobIndex::new([package_job(
            "a",
            Stage::Apply,
            Some("Failed"),
            Some(Recorded::TimedOut),
        )]);
        let p = plan_node(&nw, "n1", &s, &jobs, false);
        assert!(p.timed_out);
        assert!(p.create.is_empty() && p.delete.is_empty());
        // Once the evidence is gone (failure TTL), the stage runs again.
        let p = plan_node(&nw, "n1", &s, &JobIndex::default(), false);
        assert_eq!(creates(&p), vec![("a".into(), Stage::Apply)]);
        assert_eq!(
            p.state.get("a", "1.0.0").and_then(|r| r.state),
            Some(State::InProgress)
        );
    }

    /// D1: the outcome path marked a rejected-only Job (`state-recorded: rejected`) but its DELETE
    /// failed. Nothing reconciles a recorded Job again, so the plan must delete it (from the cache:
    /// it is no evidence), or the stage waits for the failed-Job TTL holding its slot.
    #[test]
    fn a_marked_rejected_only_job_whose_delete_failed_is_deleted_by_the_next_pass() {
        let nw = nodewright(&[("a", package(&[], Some(InterruptType::Reboot)))]);
        let s = state(&[entry("a", Stage::Apply, State::InProgress)]);
        let rejected = package_job("a", Stage::Apply, Some("Failed"), Some(Recorded::Rejected));
        let p = plan_node(&nw, "n1", &s, &JobIndex::new([rejected]), false);
        assert_eq!(
            p.delete,
            vec![naming::package_job_name(
                "nw",
                "a",
                "1.0.0",
                Stage::Apply,
                "n1"
            )]
        );
        assert!(!p.stale && p.create.is_empty() && !p.timed_out);
        assert_eq!(p.state, s, "the record stays in progress");

        // The same for the node's interrupt Job.
        let s = state(&[entry("a", Stage::Interrupt, State::InProgress)]);
        let interrupt = job(
            naming::interrupt_job_name("nw", "n1"),
            Some("Failed"),
            Some(Recorded::Rejected),
        );
        let p = plan_node(&nw, "n1", &s, &JobIndex::new([interrupt]), false);
        assert_eq!(p.delete, vec![naming::interrupt_job_name("nw", "n1")]);
        assert!(p.create.is_empty() && !p.timed_out);
    }

    /// D5: the interrupt Job of a timed-out interrupt went away (failed-Job TTL, a user deleting
    /// it): the recreated Job's run starts `in_progress`, as a package stage's rerun does.
    #[test]
    fn a_recreated_interrupt_job_resets_an_erroring_record_to_in_progress() {
        let nw = nodewright(&[
            ("a", package(&[], Some(InterruptType::Reboot))),
            ("b", package(&[], Some(InterruptType::Service))),
        ]);
        let mut owner = entry("a", Stage::Interrupt, State::Erroring);
        owner.restarts = 3;
        let s = state(&[owner, entry("b", Stage::Interrupt, State::Skipped)]);
        let p = plan_node(&nw, "n1", &s, &JobIndex::default(), false);
        assert_eq!(creates(&p), vec![("interrupt:a".into(), Stage::Interrupt)]);
        assert_eq!(
            p.state
                .get("a", "1.0.0")
                .map(|r| (r.stage, r.state, r.restarts)),
            Some((Stage::Interrupt, Some(State::InProgress), 0))
        );
        assert_eq!(
            p.state.get("b", "1.0.0").and_then(|r| r.state),
            Some(State::Skipped),
            "the merged packages stay skipped"
        );
    }

    /// An unrecorded Failed Job: its outcome is the outcome path's to record (timed out or
    /// rejected); the plan neither deletes it nor reruns the stage, and the node's interrupt waits.
    #[test]
    fn an_unrecorded_failed_job_waits_for_its_outcome_and_holds_the_interrupt() {
        let nw = nodewright(&[
            ("a", package(&[], Some(InterruptType::Service))),
            ("b", package(&[], Some(InterruptType::Service))),
        ]);
        let s = state(&[
            entry("a", Stage::Config, State::Complete),
            entry("b", Stage::Config, State::InProgress),
        ]);
        let jobs = JobIndex::new([package_job("b", Stage::Config, Some("Failed"), None)]);
        for fresh in [false, true] {
            let p = plan_node(&nw, "n1", &s, &jobs, fresh);
            assert!(p.create.is_empty(), "{:?}", creates(&p));
            assert!(p.delete.is_empty() && !p.stale && !p.timed_out);
            assert_eq!(p.state, s);
        }
    }

    #[test]
    fn rerunning_over_a_recorded_job_needs_a_fresh_read() {
        let nw = nodewright(&[("a", package(&[], None))]);
        // The record was reset while the completed apply Job is still kept.
        let jobs = JobIndex::new([package_job(
            "a",
            Stage::Apply,
            Some("Complete"),
            Some(Recorded::Complete),
        )]);
        let cached = plan_node(&nw, "n1", &NodeState::default(), &jobs, false);
        assert!(cached.stale && cached.delete.is_empty());
        let fresh = plan_node(&nw, "n1", &NodeState::default(), &jobs, true);
        assert_eq!(fresh.delete.len(), 1);
    }

    fn uninstalling(mut p: Package) -> Package {
        p.uninstall = Some(nodewright_shared::api::Uninstall {
            enabled: true,
            apply: true,
        });
        p
    }

    #[test]
    fn uninstall_runs_on_a_drained_node_then_its_interrupt_then_the_record_goes() {
        let nw = nodewright(&[
            ("a", uninstalling(package(&[], Some(InterruptType::Reboot)))),
            ("b", package(&[], None)),
        ]);
        let s = state(&[
            entry("a", Stage::PostInterrupt, State::Complete),
            entry("b", Stage::Config, State::Complete),
        ]);
        let p = plan_node(&nw, "n1", &s, &JobIndex::default(), false);
        assert_eq!(creates(&p), vec![("a".into(), Stage::Uninstall)]);
        assert!(p.cordon);
        assert!(matches!(
            p.create[0],
            Creation::Package {
                drain_first: true,
                ..
            }
        ));
        assert_eq!(
            p.state.get("a", "1.0.0").map(|r| (r.stage, r.state)),
            Some((Stage::Uninstall, Some(State::InProgress)))
        );

        let s = state(&[
            entry("a", Stage::Uninstall, State::Complete),
            entry("b", Stage::Config, State::Complete),
        ]);
        let p = plan_node(&nw, "n1", &s, &JobIndex::default(), false);
        assert_eq!(
            creates(&p),
            vec![("interrupt:a".into(), Stage::UninstallInterrupt)]
        );
        assert_eq!(
            p.state.get("a", "1.0.0").map(|r| (r.stage, r.state)),
            Some((Stage::UninstallInterrupt, Some(State::InProgress)))
        );

        let s = state(&[
            entry("a", Stage::UninstallInterrupt, State::Complete),
            entry("b", Stage::Config, State::Complete),
        ]);
        let p = plan_node(&nw, "n1", &s, &JobIndex::default(), false);
        assert!(p.create.is_empty());
        assert!(p.state.get("a", "1.0.0").is_none());
        assert!(graph::all_done(&nw.spec.packages, &p.state));
    }

    #[test]
    fn cancelling_an_uninstall_stops_its_job_and_installs_again() {
        let nw = nodewright(&[("a", package(&[], None))]);
        let s = state(&[entry("a", Stage::Uninstall, State::InProgress)]);
        let jobs = JobIndex::new([package_job("a", Stage::Uninstall, None, None)]);
        let p = plan_node(&nw, "n1", &s, &jobs, false);
        assert_eq!(creates(&p), vec![("a".into(), Stage::Apply)]);
        assert_eq!(
            p.delete,
            vec![naming::package_job_name(
                "nw",
                "a",
                "1.0.0",
                Stage::Uninstall,
                "n1"
            )]
        );
        assert_eq!(
            p.state.get("a", "1.0.0").map(|r| (r.stage, r.state)),
            Some((Stage::Apply, Some(State::InProgress)))
        );
    }

    /// A Job that failed at its deadline; `pods`: how many pods it ever had (failed ones).
    fn timed_out_job(name: String, pods: i32) -> StoredJob {
        let mut j = job(name, Some("Failed"), Some(Recorded::TimedOut));
        if let Some(status) = j.status.as_mut() {
            status.failed = Some(pods);
        }
        j
    }

    /// Issue 22 item 7: a disruptive stage whose pods were refused until it timed out ran nothing
    /// on the node: the cordon is released (the node counts as failed); a stage that ran and timed
    /// out keeps it, for the administrator to look at the node.
    #[test]
    fn a_disruptive_stage_that_never_got_a_pod_releases_the_cordon() {
        let nw = nodewright(&[("a", package(&[], Some(InterruptType::Reboot)))]);
        let s = state(&[entry("a", Stage::Apply, State::Erroring)]);
        let apply = naming::package_job_name("nw", "a", "1.0.0", Stage::Apply, "n1");
        let p = plan_node(
            &nw,
            "n1",
            &s,
            &JobIndex::new([timed_out_job(apply.clone(), 0)]),
            false,
        );
        assert!(!p.cordon && p.release_cordon && p.timed_out, "{p:?}");
        assert!(p.create.is_empty() && p.delete.is_empty(), "{p:?}");
        let p = plan_node(
            &nw,
            "n1",
            &s,
            &JobIndex::new([timed_out_job(apply, 2)]),
            false,
        );
        assert!(p.cordon && !p.release_cordon && p.timed_out, "{p:?}");

        // The merged interrupt likewise.
        let s = state(&[entry("a", Stage::Interrupt, State::Erroring)]);
        let interrupt = naming::interrupt_job_name("nw", "n1");
        let p = plan_node(
            &nw,
            "n1",
            &s,
            &JobIndex::new([timed_out_job(interrupt.clone(), 0)]),
            false,
        );
        assert!(!p.cordon && p.release_cordon && p.timed_out, "{p:?}");
        let p = plan_node(
            &nw,
            "n1",
            &s,
            &JobIndex::new([timed_out_job(interrupt, 1)]),
            false,
        );
        assert!(p.cordon && !p.release_cordon, "{p:?}");

        // Another disruptive package still in flight on the node keeps it cordoned.
        let nw = nodewright(&[
            ("a", package(&[], Some(InterruptType::Reboot))),
            ("b", package(&[], Some(InterruptType::Reboot))),
        ]);
        let s = state(&[
            entry("a", Stage::Apply, State::Erroring),
            entry("b", Stage::Apply, State::InProgress),
        ]);
        let apply = naming::package_job_name("nw", "a", "1.0.0", Stage::Apply, "n1");
        let running = package_job("b", Stage::Apply, None, None);
        let p = plan_node(
            &nw,
            "n1",
            &s,
            &JobIndex::new([timed_out_job(apply, 0), running.clone()]),
            false,
        );
        assert!(p.cordon && !p.release_cordon, "{p:?}");
        // Also when it is the interrupt that ended without a pod.
        let s = state(&[
            entry("a", Stage::Interrupt, State::Erroring),
            entry("b", Stage::Apply, State::InProgress),
        ]);
        let interrupt = naming::interrupt_job_name("nw", "n1");
        let p = plan_node(
            &nw,
            "n1",
            &s,
            &JobIndex::new([timed_out_job(interrupt, 0), running]),
            false,
        );
        assert!(p.cordon && !p.release_cordon, "{p:?}");
    }

    #[test]
    fn the_interrupt_waits_for_a_finished_job_whose_outcome_is_not_recorded_yet() {
        let nw = nodewright(&[
            ("a", package(&[], Some(InterruptType::Service))),
            ("b", package(&[], Some(InterruptType::Service))),
        ]);
        let s = state(&[
            entry("a", Stage::Config, State::Complete),
            entry("b", Stage::Config, State::InProgress),
        ]);
        let jobs = JobIndex::new([package_job("b", Stage::Config, Some("Complete"), None)]);
        let p = plan_node(&nw, "n1", &s, &jobs, false);
        assert!(p.create.is_empty(), "{:?}", p.create);
        assert!(p.cordon);
    }

    #[test]
    fn a_queued_config_rerun_runs_config_again_over_the_recorded_job() {
        let nw = nodewright(&[("a", package(&[], None))]);
        let s = state(&[entry("a", Stage::Config, State::Unknown)]);
        assert!(!graph::all_done(&nw.spec.packages, &s));
        let jobs = JobIndex::new([package_job(
            "a",
            Stage::Config,
            Some("Complete"),
            Some(Recorded::Complete),
        )]);
        // The earlier config Job is removed (on a fresh read), then the stage runs again.
        let p = plan_node(&nw, "n1", &s, &jobs, true);
        assert_eq!(p.delete.len(), 1);
        let p = plan_node(&nw, "n1", &s, &JobIndex::default(), false);
        assert_eq!(creates(&p), vec![("a".into(), Stage::Config)]);
        assert_eq!(
            p.state.get("a", "1.0.0").and_then(|r| r.state),
            Some(State::InProgress)
        );
    }

    #[test]
    fn interrupt_packages_cordon_and_merge_into_one_interrupt_after_package_work() {
        let nw = nodewright(&[
            ("a", package(&[], Some(InterruptType::Service))),
            ("b", package(&[], Some(InterruptType::Reboot))),
        ]);
        let p = plan_node(
            &nw,
            "n1",
            &NodeState::default(),
            &JobIndex::default(),
            false,
        );
        assert!(p.cordon);
        assert!(p.create.iter().all(|c| matches!(
            c,
            Creation::Package {
                drain_first: true,
                ..
            }
        )));

        // a's config still runs: no interrupt yet.
        let s = state(&[
            entry("a", Stage::Config, State::InProgress),
            entry("b", Stage::Config, State::Complete),
        ]);
        let jobs = JobIndex::new([package_job("a", Stage::Config, None, None)]);
        let p = plan_node(&nw, "n1", &s, &jobs, false);
        assert!(p.create.is_empty());

        let s = state(&[
            entry("a", Stage::Config, State::Complete),
            entry("b", Stage::Config, State::Complete),
        ]);
        // Another NodeWright's package Job still runs on the node: the interrupt waits for it too
        // (its pod tolerates the cordon and would run through the reboot).
        let mut other = job("other-nw-job".into(), None, None);
        other.metadata.labels = Some(BTreeMap::from([(
            keys::NAME_LABEL.to_owned(),
            "other".to_owned(),
        )]));
        let busy = JobIndex::with_fleet([], &[Arc::new(other.clone())]);
        let p = plan_node(&nw, "n1", &s, &busy, false);
        assert!(p.create.is_empty(), "{:?}", creates(&p));
        // Being deleted (foreground propagation keeps it until its pod, maybe still in its
        // graceful shutdown, is gone), it still holds the interrupt.
        let mut deleting = job("other-nw-job".into(), None, None);
        deleting.metadata.labels = other.metadata.labels.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let p = plan_node(
            &nw,
            "n1",
            &s,
            &JobIndex::with_fleet([], &[Arc::new(deleting)]),
            false,
        );
        assert!(p.create.is_empty(), "{:?}", creates(&p));
        // Another NodeWright's unfinished Job on another node does not hold this one.
        let mut elsewhere = job("other-nw-job".into(), None, None);
        if let Some(pod) = elsewhere
            .spec
            .as_mut()
            .and_then(|s| s.template.spec.as_mut())
        {
            pod.node_name = Some("n2".into());
        }
        let p = plan_node(
            &nw,
            "n1",
            &s,
            &JobIndex::with_fleet([], &[Arc::new(elsewhere)]),
            false,
        );
        assert_eq!(creates(&p), vec![("interrupt:b".into(), Stage::Interrupt)]);

        let p = plan_node(&nw, "n1", &s, &JobIndex::default(), false);
        assert_eq!(creates(&p), vec![("interrupt:b".into(), Stage::Interrupt)]);
        assert_eq!(
            p.state.get("a", "1.0.0").and_then(|r| r.state),
            Some(State::Skipped)
        );
        assert_eq!(
            p.state.get("b", "1.0.0").and_then(|r| r.state),
            Some(State::InProgress)
        );

        // After the interrupt: post-interrupt for both.
        let s = state(&[
            entry("a", Stage::Interrupt, State::Complete),
            entry("b", Stage::Interrupt, State::Complete),
        ]);
        let p = plan_node(&nw, "n1", &s, &JobIndex::default(), false);
        assert_eq!(
            creates(&p),
            vec![
                ("a".into(), Stage::PostInterrupt),
                ("b".into(), Stage::PostInterrupt)
            ]
        );
    }
}
