//! The rollout budget (DESIGN §5): how many of a compartment's nodes may be in progress at once.
//!
//! The ceiling always caps the nodes in progress, with or without a strategy (upstream only applied it
//! without one). A node is admitted into the rollout when it is picked (it then stays admitted until
//! it completes, upstream's stickiness), and occupies a slot while it is admitted, incomplete and not
//! timed out: a node whose stage timed out counts as that batch's failure and frees its slot rather
//! than pinning the rollout forever.

use nodewright_shared::api::{DeploymentBudget, InterruptionBudget};

/// The ceiling of a budget over `matched` nodes: a count as is (0 behaves as 1), a percent of the
/// matched nodes rounded down but at least 1 (0 when nothing matched). No budget: every node.
pub fn ceiling(count: Option<i32>, percent: Option<i32>, matched: usize) -> usize {
    let matched_i = i64::try_from(matched).unwrap_or(i64::MAX);
    match (count, percent) {
        (Some(count), _) => usize::try_from(count.max(1)).unwrap_or(1),
        (None, Some(_)) if matched == 0 => 0,
        (None, Some(percent)) => {
            let share = matched_i.saturating_mul(i64::from(percent.clamp(0, 100))) / 100;
            usize::try_from(share.max(1)).unwrap_or(1)
        }
        (None, None) => matched,
    }
}

/// The legacy `interruptionBudget` ceiling.
pub fn legacy_ceiling(budget: Option<&InterruptionBudget>, matched: usize) -> usize {
    ceiling(
        budget.and_then(|b| b.count),
        budget.and_then(|b| b.percent),
        matched,
    )
}

/// The batch size of the fixed strategy a legacy `interruptionBudget` stands for
/// (upstream-api.md §5.8): the count, at most the matched nodes; or the percent of the matched nodes
/// rounded down; no budget: every node. At least 1.
pub fn legacy_batch(budget: Option<&InterruptionBudget>, matched: usize) -> usize {
    let share = match (budget.and_then(|b| b.count), budget.and_then(|b| b.percent)) {
        (Some(count), _) => usize::try_from(count).unwrap_or(0).min(matched),
        (None, Some(percent)) => ceiling(None, Some(percent), matched),
        (None, None) => matched,
    };
    share.max(1)
}

/// A DeploymentPolicy budget's ceiling.
pub fn policy_ceiling(budget: &DeploymentBudget, matched: usize) -> usize {
    ceiling(budget.count, budget.percent, matched)
}

/// One candidate node of a compartment, in rollout order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot<'a> {
    /// Node name.
    pub node: &'a str,
    /// Already admitted (in `status.nodePriority`, or work recorded on it).
    pub admitted: bool,
    /// Every package finished.
    pub complete: bool,
    /// A stage timed out: a failure that frees its slot.
    pub timed_out: bool,
    /// Ignored or tainted: never admitted.
    pub blocked: bool,
}

/// The nodes that may be worked on now: every admitted incomplete node, plus new nodes (in the given
/// order) while the nodes occupying a slot stay within `ceiling`.
pub fn admit<'a>(slots: &[Slot<'a>], ceiling: usize) -> Vec<&'a str> {
    let occupied = slots
        .iter()
        .filter(|s| s.admitted && !s.complete && !s.timed_out && !s.blocked)
        .count();
    let mut free = ceiling.saturating_sub(occupied);
    let mut out = Vec::new();
    for slot in slots {
        if slot.complete || slot.blocked {
            continue;
        }
        if slot.admitted {
            out.push(slot.node);
        } else if free > 0 {
            free -= 1;
            out.push(slot.node);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_follow_upstream_arithmetic() {
        assert_eq!(ceiling(Some(3), None, 10), 3);
        assert_eq!(ceiling(Some(0), None, 10), 1);
        assert_eq!(ceiling(None, Some(29), 100), 29);
        assert_eq!(ceiling(None, Some(10), 5), 1);
        assert_eq!(ceiling(None, Some(50), 0), 0);
        assert_eq!(ceiling(None, None, 7), 7);
        assert_eq!(legacy_ceiling(None, 4), 4);
    }

    #[test]
    fn legacy_batches_follow_upstream_arithmetic() {
        let count = |c| InterruptionBudget {
            count: Some(c),
            percent: None,
        };
        let percent = |p| InterruptionBudget {
            count: None,
            percent: Some(p),
        };
        assert_eq!(legacy_batch(Some(&count(3)), 6), 3);
        assert_eq!(legacy_batch(Some(&count(9)), 6), 6, "at most the nodes");
        assert_eq!(legacy_batch(Some(&count(0)), 6), 1, "at least 1");
        assert_eq!(legacy_batch(Some(&count(3)), 0), 1);
        assert_eq!(
            legacy_batch(Some(&percent(29)), 100),
            29,
            "exact, not float-truncated"
        );
        assert_eq!(legacy_batch(Some(&percent(10)), 5), 1);
        assert_eq!(legacy_batch(Some(&percent(50)), 0), 1);
        assert_eq!(legacy_batch(None, 7), 7);
        assert_eq!(legacy_batch(None, 0), 1);
    }

    fn slot(node: &str, admitted: bool, complete: bool, timed_out: bool) -> Slot<'_> {
        Slot {
            node,
            admitted,
            complete,
            timed_out,
            blocked: false,
        }
    }

    #[test]
    fn new_nodes_are_admitted_up_to_the_ceiling() {
        let slots = [
            slot("a", false, false, false),
            slot("b", false, false, false),
            slot("c", false, false, false),
        ];
        assert_eq!(admit(&slots, 1), vec!["a"]);
        assert_eq!(admit(&slots, 2), vec!["a", "b"]);
        assert_eq!(admit(&slots, 5), vec!["a", "b", "c"]);
    }

    #[test]
    fn admitted_nodes_stay_and_hold_their_slots_until_complete() {
        let slots = [
            slot("a", true, true, false),
            slot("b", true, false, false),
            slot("c", false, false, false),
        ];
        // a is done, b holds the only slot.
        assert_eq!(admit(&slots, 1), vec!["b"]);
        assert_eq!(admit(&slots, 2), vec!["b", "c"]);
    }

    #[test]
    fn a_timed_out_node_frees_its_slot_but_blocked_nodes_never_run() {
        let slots = [
            slot("a", true, false, true),
            Slot {
                blocked: true,
                ..slot("b", false, false, false)
            },
            slot("c", false, false, false),
        ];
        assert_eq!(admit(&slots, 1), vec!["a", "c"]);
    }

    #[test]
    fn the_ceiling_caps_even_when_more_are_admitted() {
        // Three admitted (e.g. the budget was lowered): they continue, nobody new starts.
        let slots = [
            slot("a", true, false, false),
            slot("b", true, false, false),
            slot("c", true, false, false),
            slot("d", false, false, false),
        ];
        assert_eq!(admit(&slots, 1), vec!["a", "b", "c"]);
    }
}
