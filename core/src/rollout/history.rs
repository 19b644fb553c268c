//! The revision history of a NodeWright (`status.revisions`): which specs count as revisions, how
//! the list changes after a pass, and which revision a rollback goes to. Pure, so the operator
//! (which records), the command line (`history`, `rollback`) and the automatic rollback read the
//! same answers.
//!
//! A revision is the `spec.packages` of a spec that completed on at least one node (a spec that
//! never completed anywhere is nothing to go back to). Only the packages are kept, never the
//! status, and not the rest of the spec: node selection, the policy and the budget are how a
//! change rolls, and a rollback brings back what runs on the nodes under today's rules, as a
//! Deployment's rollback restores its pod template and not its strategy. Identical packages are one
//! revision: a spec applied again (a rollback) becomes the newest revision under the next number,
//! and numbers only grow. The list is bounded by the operator's `REVISION_HISTORY_LIMIT` and by
//! [`MAX_HISTORY_BYTES`] (the status shares the object's size limit with the spec and the per-node
//! records), oldest dropped first.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use nodewright_shared::api::{NodeWright, NodeWrightStatus, Package, Revision, Status};

/// The packages of a spec.
pub type Packages = BTreeMap<String, Package>;

/// The most the serialized history may take in the status (its JSON): revisions beyond it are
/// dropped oldest first, also below the count limit. A status write over the apiserver's object
/// size limit would fail every pass, so the history gives way first.
pub const MAX_HISTORY_BYTES: usize = 256 * 1024;

/// `REVISION_HISTORY_LIMIT` unless configured.
pub const DEFAULT_REVISION_HISTORY_LIMIT: usize = 10;

/// Whether the pass's status shows the spec it was computed for complete on at least one node
/// (a node's status is `complete` only when every package of the current spec is done there).
pub fn completed_somewhere(status: &NodeWrightStatus) -> bool {
    status.node_status.values().any(|s| *s == Status::Complete)
}

/// The history after a pass over the spec `packages` (of `generation`): when it `completed` on a
/// node and is not the newest revision already, it becomes the newest (a revision with the same
/// packages leaves the list: its spec moved to the top); then the list is cut to `limit` and to
/// [`MAX_HISTORY_BYTES`], oldest first. Sorted by revision, oldest first.
pub fn record(
    history: &[Revision],
    packages: &Packages,
    generation: i64,
    completed: bool,
    limit: usize,
    now: Timestamp,
) -> Vec<Revision> {
    let mut list: Vec<Revision> = history.to_vec();
    list.sort_by_key(|r| r.revision);
    let newest_is_current = list.last().is_some_and(|r| &r.packages == packages);
    if completed && !newest_is_current && limit > 0 {
        let next = list.last().map_or(1, |r| r.revision.saturating_add(1));
        list.retain(|r| &r.packages != packages);
        list.push(Revision {
            revision: next,
            recorded: Time(now),
            generation,
            packages: packages.clone(),
        });
    }
    let keep = limit.min(nodewright_shared::api::MAX_REVISIONS);
    if list.len() > keep {
        list.drain(..list.len() - keep);
    }
    while !list.is_empty() && size(&list) > MAX_HISTORY_BYTES {
        list.remove(0);
    }
    list
}

/// [`record`] into the status a pass writes over the spec of `nodewright` (as stored: a rollback
/// writes back what the user wrote, not the pass's in-memory view of it), completed when the
/// status shows it complete on a node.
pub fn record_pass(
    status: &mut NodeWrightStatus,
    nodewright: &NodeWright,
    limit: usize,
    now: Timestamp,
) {
    let completed = completed_somewhere(status);
    status.revisions = record(
        &status.revisions,
        &nodewright.spec.packages,
        nodewright.metadata.generation.unwrap_or_default(),
        completed,
        limit,
        now,
    );
}

/// The JSON size of the history as the status stores it.
fn size(list: &[Revision]) -> usize {
    serde_json::to_vec(list).map_or(usize::MAX, |v| v.len())
}

/// The revision whose packages are `packages`, if any.
pub fn matching<'a>(history: &'a [Revision], packages: &Packages) -> Option<&'a Revision> {
    history.iter().find(|r| &r.packages == packages)
}

/// Why a rollback has nowhere to go.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The history is empty.
    #[error(
        "it has no revision history yet: a spec becomes a revision once it completed on a node"
    )]
    NoHistory,
    /// Every revision is the current spec.
    #[error("its only revision ({0}) is the current spec: there is no earlier one to roll back to")]
    NoEarlier(i64),
    /// The asked revision is not in the history.
    #[error("revision {revision} is not in its history (revisions: {available})")]
    NotFound {
        /// The revision asked for.
        revision: i64,
        /// The revisions there are.
        available: String,
    },
    /// The asked revision is the current spec.
    #[error("revision {0} is the current spec: nothing to roll back")]
    IsCurrent(i64),
}

/// The revision a rollback of the spec `packages` goes to: `to` when given, else the newest
/// revision that differs from the current spec (the previous one, when the current spec is the
/// newest revision; the newest, when the current spec never completed anywhere).
pub fn target<'a>(
    history: &'a [Revision],
    packages: &Packages,
    to: Option<i64>,
) -> Result<&'a Revision, TargetError> {
    if history.is_empty() {
        return Err(TargetError::NoHistory);
    }
    match to {
        Some(revision) => {
            let found = history
                .iter()
                .find(|r| r.revision == revision)
                .ok_or_else(|| TargetError::NotFound {
                    revision,
                    available: history
                        .iter()
                        .map(|r| r.revision.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            if &found.packages == packages {
                return Err(TargetError::IsCurrent(revision));
            }
            Ok(found)
        }
        None => history
            .iter()
            .filter(|r| &r.packages != packages)
            .max_by_key(|r| r.revision)
            .ok_or_else(|| {
                TargetError::NoEarlier(history.iter().map(|r| r.revision).max().unwrap_or(0))
            }),
    }
}

/// `name:version` of every package, sorted, comma-separated (as `status.packageList`).
pub fn package_list(packages: &Packages) -> String {
    packages
        .iter()
        .map(|(name, p)| format!("{name}:{}", p.version))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packages(entries: &[(&str, &str)]) -> Packages {
        entries
            .iter()
            .map(|(name, version)| {
                (
                    (*name).to_owned(),
                    Package {
                        version: (*version).into(),
                        image: "ghcr.io/example/pkg".into(),
                        ..Package::default()
                    },
                )
            })
            .collect()
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("timestamp")
    }

    fn numbers(list: &[Revision]) -> Vec<(i64, String)> {
        list.iter()
            .map(|r| (r.revision, package_list(&r.packages)))
            .collect()
    }

    #[test]
    fn a_spec_becomes_a_revision_only_once_it_completed_on_a_node() {
        let v1 = packages(&[("tool", "1.0.0")]);
        let none = record(&[], &v1, 1, false, 10, at(1));
        assert!(none.is_empty());
        let one = record(&none, &v1, 1, true, 10, at(2));
        assert_eq!(numbers(&one), [(1, "tool:1.0.0".to_owned())]);
        assert_eq!((one[0].generation, one[0].recorded.0), (1, at(2)));
        // Seen complete again: unchanged (the time of the first sighting stays).
        assert_eq!(record(&one, &v1, 1, true, 10, at(3)), one);
        // A new generation with the same packages (a selector edit): still one revision.
        assert_eq!(record(&one, &v1, 2, true, 10, at(4)), one);
    }

    #[test]
    fn a_spec_applied_again_moves_to_the_top_under_the_next_number() {
        let (v1, v2) = (
            packages(&[("tool", "1.0.0")]),
            packages(&[("tool", "2.0.0")]),
        );
        let h = record(&[], &v1, 1, true, 10, at(1));
        let h = record(&h, &v2, 2, true, 10, at(2));
        assert_eq!(
            numbers(&h),
            [(1, "tool:1.0.0".to_owned()), (2, "tool:2.0.0".to_owned())]
        );
        // Rolled back to v1: revision 1 becomes revision 3.
        let h = record(&h, &v1, 3, true, 10, at(3));
        assert_eq!(
            numbers(&h),
            [(2, "tool:2.0.0".to_owned()), (3, "tool:1.0.0".to_owned())]
        );
        assert_eq!(h[1].generation, 3);
    }

    #[test]
    fn the_history_keeps_the_newest_within_the_limit_and_the_size_bound() {
        let mut h = Vec::new();
        for i in 1..=5 {
            h = record(
                &h,
                &packages(&[("tool", &format!("{i}.0.0"))]),
                i,
                true,
                3,
                at(i),
            );
        }
        assert_eq!(h.iter().map(|r| r.revision).collect::<Vec<_>>(), [3, 4, 5]);
        // A lower limit applies on the next pass, also without a new revision.
        let v5 = packages(&[("tool", "5.0.0")]);
        let cut = record(&h, &v5, 5, true, 1, at(9));
        assert_eq!(cut.iter().map(|r| r.revision).collect::<Vec<_>>(), [5]);
        // Limit 0: no history at all.
        assert!(record(&h, &v5, 5, true, 0, at(9)).is_empty());
        // Numbers keep growing after old revisions are dropped.
        let h = record(&cut, &packages(&[("tool", "6.0.0")]), 6, true, 1, at(10));
        assert_eq!(h[0].revision, 6);

        // Large specs: the size bound drops the oldest before the count does.
        let big = |v: &str| {
            let mut p = packages(&[("tool", v)]);
            if let Some(tool) = p.get_mut("tool") {
                tool.config_map =
                    BTreeMap::from([("script.sh".to_owned(), "x".repeat(MAX_HISTORY_BYTES / 3))]);
            }
            p
        };
        let mut h = Vec::new();
        for i in 1..=4 {
            h = record(&h, &big(&format!("{i}.0.0")), i, true, 10, at(i));
        }
        assert_eq!(h.iter().map(|r| r.revision).collect::<Vec<_>>(), [3, 4]);
        assert!(size(&h) <= MAX_HISTORY_BYTES);
        // A spec larger than the bound on its own is not kept (the status must stay writable).
        let huge = {
            let mut p = big("9.0.0");
            if let Some(tool) = p.get_mut("tool") {
                tool.config_map =
                    BTreeMap::from([("script.sh".to_owned(), "x".repeat(MAX_HISTORY_BYTES))]);
            }
            p
        };
        assert!(record(&[], &huge, 9, true, 10, at(9)).is_empty());
    }

    #[test]
    fn the_target_is_the_newest_other_revision_or_the_one_asked_for() {
        let (v1, v2, v3) = (
            packages(&[("tool", "1.0.0")]),
            packages(&[("tool", "2.0.0")]),
            packages(&[("tool", "3.0.0")]),
        );
        assert_eq!(target(&[], &v1, None), Err(TargetError::NoHistory));
        let h = record(&[], &v1, 1, true, 10, at(1));
        assert_eq!(target(&h, &v1, None), Err(TargetError::NoEarlier(1)));
        let h = record(&h, &v2, 2, true, 10, at(2));
        // The current spec is the newest revision: back to the one before.
        assert_eq!(target(&h, &v2, None).map(|r| r.revision), Ok(1));
        // The current spec never completed anywhere: back to the newest revision.
        assert_eq!(target(&h, &v3, None).map(|r| r.revision), Ok(2));
        assert_eq!(target(&h, &v3, Some(1)).map(|r| r.revision), Ok(1));
        assert_eq!(target(&h, &v2, Some(2)), Err(TargetError::IsCurrent(2)));
        assert_eq!(
            target(&h, &v2, Some(7)).map_err(|e| e.to_string()),
            Err("revision 7 is not in its history (revisions: 1, 2)".to_owned())
        );
        assert_eq!(matching(&h, &v2).map(|r| r.revision), Some(2));
        assert!(matching(&h, &v3).is_none());
    }

    #[test]
    fn completed_somewhere_reads_the_node_statuses() {
        let mut status = NodeWrightStatus::default();
        assert!(!completed_somewhere(&status));
        status.node_status.insert("n0".into(), Status::Erroring);
        assert!(!completed_somewhere(&status));
        status.node_status.insert("n1".into(), Status::Complete);
        assert!(completed_somewhere(&status));
    }
}
