//! The automatic rollback of a DeploymentPolicy's `rollbackOnFailure`, as pure decisions: when a
//! status write records it as due ([`mark`]), and what the operator does next about a due one
//! ([`next`]). The operator carries them out (`operator/src/rollout/rollback.rs`).
//!
//! It happens once, and survives a restart at any moment without repeating, by keeping its state
//! in `status.rollback` ([`AutomaticRollback`]):
//! - **due**: the status write that records a compartment's `shouldStop` (false before) records the
//!   rollback `Pending` in the same write, for the stopped generation and the revision to go to. A
//!   crash before it loses both; after it, the next pass finds it due.
//! - **written**: a due rollback is carried out before the pass plans: the revision's packages are
//!   written as the spec, guarded by the object's resourceVersion (a user's edit in between wins
//!   and the rollback is `Superseded`), then `RolledBack` is recorded with the generation written,
//!   every compartment's batch state cleared and a Warning Event. A crash between the two writes
//!   leaves a due rollback whose spec is already the revision: [`next`] settles it without writing.
//! - **not repeated**: the generation an automatic rollback wrote is kept; when its own rollout
//!   stops, nothing is written again (`NotRepeated`). A later edit of the spec is a new generation,
//!   which may roll back again.
//! - **refused**: the API may refuse the write (the webhook's update guards refuse lowering the
//!   version of, or removing, a package with `uninstall.enabled` that is still installed; a
//!   validation rule added since the revision was admitted): the rollout stays stopped, the refusal
//!   is recorded (`Refused`) and announced once.
//!
//! Why the batch state is cleared: the stopped state counts the failures of the spec rolled back
//! from, and its `shouldStop` would hold the rollback's own rollout before it started (a version
//! change clears it anyway when `resetBatchStateOnCompletion` is on; a rollback of a configMap or
//! image change, or with the reset off, would not). Cleared, the next pass starts batch 1 with its
//! checkpoints at the nodes already complete or failed under the restored spec, as after a reset.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use nodewright_shared::api::{
    AutomaticRollback, NodeWright, NodeWrightStatus, Revision, RollbackPhase,
};

use super::history::{self, Packages};
use super::spec_diff;

/// The Event reason of a rollback written.
pub const ROLLED_BACK: &str = "RolledBack";
/// The Event reason of a rollback the API refused.
pub const ROLLBACK_REFUSED: &str = "RollbackRefused";
/// The Event reason of a rollback with no revision to go to.
pub const NO_REVISION: &str = "RollbackNoRevision";
/// The Event reason of a rollback overtaken by an edit of the spec.
pub const SUPERSEDED: &str = "RollbackSuperseded";
/// The Event reason of a stopped rollback that is not rolled back again.
pub const NOT_REPEATED: &str = "RollbackNotRepeated";

/// The compartments whose batch state is stopped in `new` and was not in `old`.
pub fn newly_stopped(old: &NodeWrightStatus, new: &NodeWrightStatus) -> Vec<String> {
    let stopped = |s: &NodeWrightStatus, name: &str| {
        s.compartment_statuses
            .get(name)
            .and_then(|c| c.batch_state.as_ref())
            .is_some_and(|b| b.should_stop)
    };
    new.compartment_statuses
        .keys()
        .filter(|name| stopped(new, name) && !stopped(old, name))
        .cloned()
        .collect()
}

/// Records in `new` (the status about to be written over `old`) that an automatic rollback is due,
/// when `enabled` (the policy's `rollbackOnFailure`) and this write stops a compartment. Returns
/// whether it did. The revision to go to is the newest one that differs from the current spec
/// (`nodewright` as stored: its packages and generation).
pub fn mark(
    old: &NodeWrightStatus,
    new: &mut NodeWrightStatus,
    nodewright: &NodeWright,
    enabled: bool,
    now: Timestamp,
) -> bool {
    let stopped = newly_stopped(old, new);
    if !enabled || stopped.is_empty() {
        return false;
    }
    let generation = nodewright.metadata.generation.unwrap_or_default();
    let prior = new.rollback.as_ref();
    if prior.is_some_and(|r| r.phase == RollbackPhase::Pending && r.failed_generation == generation)
    {
        return false;
    }
    // Kept across marks: a stop of the generation the last rollback wrote is not rolled back.
    let written_generation = prior.and_then(|r| r.written_generation);
    let packages = &nodewright.spec.packages;
    new.rollback = Some(AutomaticRollback {
        phase: RollbackPhase::Pending,
        failed_generation: generation,
        compartments: stopped,
        from_revision: history::matching(&new.revisions, packages).map(|r| r.revision),
        to_revision: history::target(&new.revisions, packages, None)
            .ok()
            .map(|r| r.revision),
        written_generation,
        message: None,
        last_transition_time: Time(now),
    });
    true
}

/// What to do about the NodeWright's last automatic rollback.
#[derive(Debug, Clone, PartialEq)]
pub enum Next<'a> {
    /// Nothing (none is due).
    Nothing,
    /// Write `to`'s packages as the spec, then [`written`].
    Write {
        /// The revision to write back.
        to: &'a Revision,
    },
    /// Record this outcome (no spec write); `reset` also clears the batch states.
    Record {
        /// The outcome.
        outcome: AutomaticRollback,
        /// The rollback is in the spec already: clear the batch states.
        reset: bool,
    },
}

/// What the operator does next about a due rollback of `nodewright` (as stored, with its status).
pub fn next(nodewright: &NodeWright, now: Timestamp) -> Next<'_> {
    let Some(status) = nodewright.status.as_ref() else {
        return Next::Nothing;
    };
    let Some(due) = status
        .rollback
        .as_ref()
        .filter(|r| r.phase == RollbackPhase::Pending)
    else {
        return Next::Nothing;
    };
    let generation = nodewright.metadata.generation.unwrap_or_default();
    let record = |phase, message: String| Next::Record {
        outcome: outcome(due, phase, Some(message), now),
        reset: false,
    };
    if due.written_generation == Some(due.failed_generation) {
        return record(
            RollbackPhase::NotRepeated,
            format!(
                "generation {} is itself an automatic rollback; it is not rolled back again",
                due.failed_generation
            ),
        );
    }
    let to = due
        .to_revision
        .and_then(|n| status.revisions.iter().find(|r| r.revision == n));
    let Some(to) = to else {
        let why = match due.to_revision {
            Some(n) => format!(
                "revision {n} is no longer in the history (REVISION_HISTORY_LIMIT, or the size bound)"
            ),
            None => "no earlier revision in the history".to_owned(),
        };
        return record(RollbackPhase::NoRevision, why);
    };
    if generation == due.failed_generation {
        return Next::Write { to };
    }
    if nodewright.spec.packages == to.packages {
        // Written before a restart, not recorded yet.
        return Next::Record {
            outcome: written(due, generation, now),
            reset: true,
        };
    }
    record(
        RollbackPhase::Superseded,
        format!(
            "the spec changed (generation {generation}) before the rollback to revision {} was written",
            to.revision
        ),
    )
}

fn outcome(
    due: &AutomaticRollback,
    phase: RollbackPhase,
    message: Option<String>,
    now: Timestamp,
) -> AutomaticRollback {
    AutomaticRollback {
        phase,
        message,
        last_transition_time: Time(now),
        ..due.clone()
    }
}

/// The outcome of a due rollback written as `generation`.
pub fn written(due: &AutomaticRollback, generation: i64, now: Timestamp) -> AutomaticRollback {
    AutomaticRollback {
        written_generation: Some(generation),
        ..outcome(due, RollbackPhase::RolledBack, None, now)
    }
}

/// The outcome of a due rollback the API refused with `message`.
pub fn refused(due: &AutomaticRollback, message: &str, now: Timestamp) -> AutomaticRollback {
    outcome(due, RollbackPhase::Refused, Some(message.to_owned()), now)
}

/// How a revision is named in messages: `revision 2` (absent: the spec of generation N, which
/// never completed on a node).
fn revision_name(revision: Option<i64>, generation: i64) -> String {
    match revision {
        Some(r) => format!("revision {r}"),
        None => format!("generation {generation} (never complete on a node, so not a revision)"),
    }
}

/// The Event announcing `outcome`: (reason, message, whether a Warning). `from` and `to` are the
/// packages rolled back from and to, when known, for the list of what changes.
pub fn event(
    outcome: &AutomaticRollback,
    from: Option<&Packages>,
    to: Option<&Packages>,
) -> (&'static str, String, bool) {
    let stopped = format!(
        "The failure threshold stopped the rollout of {} in compartment {}",
        revision_name(outcome.from_revision, outcome.failed_generation),
        outcome.compartments.join(", ")
    );
    let target = outcome
        .to_revision
        .map_or_else(String::new, |r| format!(" to revision {r}"));
    let why = outcome.message.clone().unwrap_or_default();
    match outcome.phase {
        RollbackPhase::RolledBack => {
            let changes = match (from, to) {
                (Some(from), Some(to)) => {
                    format!(" ({})", spec_diff::summary(&spec_diff::diff(from, to)))
                }
                _ => String::new(),
            };
            (
                ROLLED_BACK,
                format!(
                    "{stopped}; rolled back automatically{target}{changes}, written as generation {}. \
                     The nodes return to it through the policy's budget and batches (the batch \
                     state was reset); its rollout is not rolled back again.",
                    outcome.written_generation.unwrap_or_default()
                ),
                true,
            )
        }
        RollbackPhase::Refused => (
            ROLLBACK_REFUSED,
            format!(
                "{stopped}; the automatic rollback{target} was refused: {why}. The rollout stays \
                 stopped.{}",
                refusal_hint(&why)
            ),
            true,
        ),
        RollbackPhase::NoRevision => (
            NO_REVISION,
            format!(
                "{stopped}; no automatic rollback: {why}. The rollout stays stopped (a spec becomes \
                 a revision once it completed on a node)."
            ),
            true,
        ),
        RollbackPhase::Superseded => (
            SUPERSEDED,
            format!("{stopped}; no automatic rollback{target}: {why}."),
            false,
        ),
        RollbackPhase::NotRepeated => (
            NOT_REPEATED,
            format!(
                "{stopped}; {why}. Fix the spec, or roll back by hand with `kubectl nodewright \
                 rollback`."
            ),
            true,
        ),
        RollbackPhase::Pending => (ROLLED_BACK, stopped, true),
    }
}

/// What to do about a refusal by the webhook's update guards (a package with `uninstall.enabled`
/// may lose its version, or leave the spec, only once it is uninstalled from every node).
pub fn refusal_hint(message: &str) -> &'static str {
    if message.contains("downgrade not allowed") || message.contains("uninstall.enabled=true") {
        " A package with uninstall.enabled is moved to a lower version or removed only once it is \
         uninstalled from every node: set its uninstall.apply=true, wait for the uninstall to \
         complete, then roll back (kubectl nodewright rollback)."
    } else {
        ""
    }
}

/// The JSON Patch that writes `packages` as the spec's packages of the object read at
/// `resource_version`: the resourceVersion in the patched object makes the apiserver refuse it
/// with 409 Conflict when the object changed since (no change is overwritten unseen), and the
/// patch verb is all it needs.
pub fn packages_patch(
    resource_version: &str,
    packages: &Packages,
) -> Result<json_patch::Patch, serde_json::Error> {
    serde_json::from_value(serde_json::json!([
        {"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version},
        {"op": "replace", "path": "/spec/packages", "value": serde_json::to_value(packages)?},
    ]))
}

/// The status fields (a merge patch's `status` object) that clear every compartment's batch state,
/// for a rollback's rollout to start at batch 1; `None` when no compartment has one.
pub fn batch_state_reset(
    status: &NodeWrightStatus,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let cleared: serde_json::Map<String, serde_json::Value> = status
        .compartment_statuses
        .iter()
        .filter(|(_, c)| c.batch_state.is_some())
        .map(|(name, _)| (name.clone(), serde_json::json!({"batchState": null})))
        .collect();
    (!cleared.is_empty()).then(|| {
        serde_json::Map::from_iter([(
            "compartmentStatuses".to_owned(),
            serde_json::Value::Object(cleared),
        )])
    })
}

/// The packages of `from` that ship uninstall scripts (`uninstall.enabled`) and that going to `to`
/// removes or moves to a lower version: the webhook's update guards refuse that while the package
/// is still installed on a node (upstream-api.md §4.3, rules 7 and 8), so a rollback across them
/// needs their uninstall first.
pub fn uninstall_guarded<'a>(from: &'a Packages, to: &Packages) -> Vec<&'a str> {
    let parse = |v: &str| semver::Version::parse(v.strip_prefix('v').unwrap_or(v));
    from.iter()
        .filter(|(_, p)| p.uninstall.as_ref().is_some_and(|u| u.enabled))
        .filter(|(name, p)| match to.get(*name) {
            None => true,
            Some(next) if next.version == p.version => false,
            Some(next) => match (parse(&next.version), parse(&p.version)) {
                (Ok(next), Ok(now)) => next < now,
                _ => true,
            },
        })
        .map(|(name, _)| name.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{
        BatchState, CompartmentStatus, NodeWrightSpec, Package, RollbackPhase,
    };
    use std::collections::BTreeMap;

    fn packages(version: &str) -> Packages {
        BTreeMap::from([(
            "tool".to_owned(),
            Package {
                version: version.into(),
                image: "img".into(),
                ..Package::default()
            },
        )])
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("timestamp")
    }

    /// The NodeWright at `generation` running `version`, with revisions of v1 and v2.
    fn nodewright(version: &str, generation: i64) -> NodeWright {
        let mut nw = NodeWright::new(
            "nw",
            NodeWrightSpec {
                packages: packages(version),
                ..NodeWrightSpec::default()
            },
        );
        nw.metadata.generation = Some(generation);
        let h = history::record(&[], &packages("1.0.0"), 1, true, 10, at(1));
        let h = history::record(&h, &packages("2.0.0"), 2, true, 10, at(2));
        nw.status = Some(NodeWrightStatus {
            revisions: h,
            ..NodeWrightStatus::default()
        });
        nw
    }

    fn stopped(status: &mut NodeWrightStatus, stop: bool) {
        status.compartment_statuses.insert(
            "__default__".into(),
            CompartmentStatus {
                batch_state: Some(BatchState {
                    should_stop: stop,
                    ..BatchState::default()
                }),
                ..CompartmentStatus::default()
            },
        );
    }

    /// The due rollback of `nw`.
    fn record_of(nw: &NodeWright) -> AutomaticRollback {
        nw.status
            .as_ref()
            .and_then(|s| s.rollback.clone())
            .expect("a rollback record")
    }

    /// The status `nw` has after its write of `new` over its current one, with `mark` applied.
    fn write(nw: &mut NodeWright, stop: bool, enabled: bool) -> bool {
        let old = nw.status.clone().unwrap_or_default();
        let mut new = old.clone();
        stopped(&mut new, stop);
        let marked = mark(&old, &mut new, nw, enabled, at(10));
        nw.status = Some(new);
        marked
    }

    #[test]
    fn a_stop_marks_the_rollback_due_once_and_only_when_enabled() {
        let mut nw = nodewright("2.0.0", 3);
        assert!(!write(&mut nw.clone(), true, false), "not enabled");
        assert!(!write(&mut nw, false, true), "nothing stopped");
        assert!(write(&mut nw, true, true));
        let due = record_of(&nw);
        assert_eq!(
            (
                due.phase,
                due.failed_generation,
                due.from_revision,
                due.to_revision
            ),
            (RollbackPhase::Pending, 3, Some(2), Some(1))
        );
        assert_eq!(due.compartments, ["__default__"]);
        // Already stopped: the next write marks nothing again.
        assert!(!write(&mut nw, true, true));
        // A spec that never completed anywhere rolls back to the newest revision.
        let mut fresh = nodewright("3.0.0", 4);
        assert!(write(&mut fresh, true, true));
        let due = record_of(&fresh);
        assert_eq!((due.from_revision, due.to_revision), (None, Some(2)));
    }

    #[test]
    fn a_due_rollback_is_written_then_settled_once() {
        let mut nw = nodewright("2.0.0", 3);
        write(&mut nw, true, true);
        let Next::Write { to } = next(&nw, at(11)) else {
            panic!("a write: {:?}", next(&nw, at(11)));
        };
        assert_eq!(to.revision, 1);
        let to_packages = to.packages.clone();
        // Written (generation 4), then a restart before the outcome was recorded: settled.
        nw.spec.packages = to_packages;
        nw.metadata.generation = Some(4);
        let Next::Record { outcome, reset } = next(&nw, at(12)) else {
            panic!("a record");
        };
        assert!(reset, "the batch states are cleared");
        assert_eq!(
            (outcome.phase, outcome.written_generation),
            (RollbackPhase::RolledBack, Some(4))
        );
        if let Some(s) = nw.status.as_mut() {
            s.rollback = Some(outcome);
        }
        assert_eq!(next(&nw, at(13)), Next::Nothing);

        // The rollback's own rollout stops: due again, but never written again.
        stopped(nw.status.as_mut().expect("status"), false);
        write(&mut nw, true, true);
        let due = record_of(&nw);
        assert_eq!(due.written_generation, Some(4), "kept across the new mark");
        let Next::Record { outcome, reset } = next(&nw, at(14)) else {
            panic!("a record");
        };
        assert_eq!((outcome.phase, reset), (RollbackPhase::NotRepeated, false));
        let (reason, message, warning) = event(&outcome, None, None);
        assert_eq!(reason, NOT_REPEATED);
        assert!(warning);
        assert!(
            message.contains("generation 4 is itself an automatic rollback"),
            "{message}"
        );
    }

    #[test]
    fn an_edit_before_the_write_supersedes_it_and_a_lost_revision_is_said() {
        let mut nw = nodewright("2.0.0", 3);
        write(&mut nw, true, true);
        let mut edited = nw.clone();
        edited.spec.packages = packages("2.0.1");
        edited.metadata.generation = Some(4);
        let Next::Record { outcome, reset } = next(&edited, at(11)) else {
            panic!("a record");
        };
        assert_eq!((outcome.phase, reset), (RollbackPhase::Superseded, false));
        assert_eq!(event(&outcome, None, None).0, SUPERSEDED);

        let mut lost = nw.clone();
        if let Some(s) = lost.status.as_mut() {
            s.revisions.retain(|r| r.revision != 1);
        }
        let Next::Record { outcome, .. } = next(&lost, at(11)) else {
            panic!("a record");
        };
        assert_eq!(outcome.phase, RollbackPhase::NoRevision);
        assert!(
            outcome
                .message
                .as_deref()
                .is_some_and(|m| m.contains("revision 1 is no longer in the history")),
            "{outcome:?}"
        );
    }

    #[test]
    fn the_batch_state_reset_clears_every_compartment_with_one() {
        let mut status = NodeWrightStatus::default();
        assert_eq!(batch_state_reset(&status), None);
        stopped(&mut status, true);
        status
            .compartment_statuses
            .insert("plain".into(), CompartmentStatus::default());
        assert_eq!(
            batch_state_reset(&status).map(serde_json::Value::Object),
            Some(serde_json::json!({"compartmentStatuses": {"__default__": {"batchState": null}}}))
        );
    }

    #[test]
    fn uninstall_enabled_packages_lowered_or_removed_are_named() {
        use nodewright_shared::api::Uninstall;
        let with = |version: &str, enabled: bool| Package {
            uninstall: Some(Uninstall {
                enabled,
                apply: false,
            }),
            ..packages(version).remove("tool").expect("tool")
        };
        let from: Packages = BTreeMap::from([
            ("agent".to_owned(), with("2.0.0", true)),
            ("gone".to_owned(), with("1.0.0", true)),
            ("plain".to_owned(), with("2.0.0", false)),
            ("up".to_owned(), with("1.0.0", true)),
        ]);
        let to: Packages = BTreeMap::from([
            ("agent".to_owned(), with("1.0.0", true)),
            ("plain".to_owned(), with("1.0.0", false)),
            ("up".to_owned(), with("1.1.0", true)),
        ]);
        assert_eq!(uninstall_guarded(&from, &to), ["agent", "gone"]);
        assert!(uninstall_guarded(&to, &to).is_empty());
    }

    #[test]
    fn the_events_name_both_revisions_and_what_changes() {
        let mut nw = nodewright("2.0.0", 3);
        write(&mut nw, true, true);
        let due = record_of(&nw);
        let done = written(&due, 4, at(12));
        let (reason, message, warning) =
            event(&done, Some(&packages("2.0.0")), Some(&packages("1.0.0")));
        assert_eq!((reason, warning), (ROLLED_BACK, true));
        assert_eq!(
            message,
            "The failure threshold stopped the rollout of revision 2 in compartment __default__; \
             rolled back automatically to revision 1 (tool 2.0.0 -> 1.0.0), written as generation \
             4. The nodes return to it through the policy's budget and batches (the batch state \
             was reset); its rollout is not rolled back again."
        );
        let no = refused(
            &due,
            "admission webhook denied the request: spec.packages.tool.version: package \"tool\": downgrade not allowed — set uninstall.apply=true first",
            at(12),
        );
        let (reason, message, _) = event(&no, None, None);
        assert_eq!(reason, ROLLBACK_REFUSED);
        assert!(
            message.contains("set its uninstall.apply=true"),
            "{message}"
        );
    }
}
