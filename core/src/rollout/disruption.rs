//! The operator-wide disruption cap (issue 24 §4): at most `MAX_DISRUPTED_NODES` nodes (a count, or
//! a percent of the cluster's nodes) are cordoned by NodeWrights at once, whichever NodeWrights they
//! are. Budgets and batches bound one NodeWright's compartment; without this, two NodeWrights could
//! each cordon up to their own ceiling at the same time.
//!
//! A node is *disrupted* while any NodeWright holds a cordon claim on it
//! ([`crate::node::cordon::claimants`]). Taking a cordon on a node nobody has claimed yet takes one
//! slot of the cap; a second NodeWright's claim on a node already claimed takes none (the node is
//! out of service once). When the cap is full, the node waits: its disruptive stages do not start
//! (the cordon is what they wait for), its other stages go on.
//!
//! Passes of different NodeWrights run at once, and the node cache shows a cordon only after the
//! write's watch event: counting from the cache alone, two passes could both see one free slot and
//! both take it. The [`Ledger`] closes that gap: a slot is reserved under one lock before the
//! cordon is written, and stays counted until the cache shows the write. It also keeps the
//! NodeWrights that wait for a slot, so a freed slot goes to the first by `priority` (lower
//! first, as NodeWrights are ordered), then age (older first), then name.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube_core::ResourceExt;
use nodewright_shared::api::NodeWright;

use crate::node::cordon;

/// How `status.waitingFor` names the cap (followed by how many nodes are disrupted).
pub const WAITING: &str = "waiting for the cluster-wide disruption cap";

/// `MAX_DISRUPTED_NODES`: how many nodes NodeWrights may have cordoned at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxDisrupted {
    /// A number of nodes (at least 1).
    Count(u32),
    /// A percent of the cluster's nodes (1 to 100), rounded down, at least 1 node.
    Percent(u8),
}

/// A `MAX_DISRUPTED_NODES` value that is neither a count nor a percent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value:?} is not a node count or percent: write a whole number of nodes of at least 1 \
     (e.g. \"10\") or a percent of the cluster's nodes from 1% to 100% (e.g. \"10%\"); leave it \
     unset for no cluster-wide cap"
)]
pub struct CapError {
    /// The value as given.
    pub value: String,
}

impl MaxDisrupted {
    /// Parses `10` or `10%` (surrounding whitespace ignored).
    pub fn parse(text: &str) -> Result<Self, CapError> {
        let error = || CapError {
            value: text.to_owned(),
        };
        let text = text.trim();
        match text.strip_suffix('%') {
            Some(percent) => match percent.trim().parse::<u8>() {
                Ok(p @ 1..=100) => Ok(MaxDisrupted::Percent(p)),
                _ => Err(error()),
            },
            None => match text.parse::<u32>() {
                Ok(n @ 1..) => Ok(MaxDisrupted::Count(n)),
                _ => Err(error()),
            },
        }
    }

    /// The number of nodes the cap allows in a cluster of `cluster_nodes` nodes: the count as is;
    /// a percent rounded down, but at least 1 (a cap of 0 would stop every disruptive stage).
    pub fn limit(self, cluster_nodes: usize) -> usize {
        match self {
            MaxDisrupted::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            MaxDisrupted::Percent(p) => (cluster_nodes.saturating_mul(usize::from(p)) / 100).max(1),
        }
    }
}

impl fmt::Display for MaxDisrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxDisrupted::Count(1) => f.write_str("1 node"),
            MaxDisrupted::Count(n) => write!(f, "{n} nodes"),
            MaxDisrupted::Percent(p) => write!(f, "{p}% of the cluster's nodes"),
        }
    }
}

/// Whether some NodeWright holds a cordon claim on the node.
pub fn is_disrupted(node: &Node) -> bool {
    cordon::claimants(node).next().is_some()
}

/// The nodes NodeWrights hold cordoned, among `nodes`.
pub fn disrupted<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> BTreeSet<String> {
    nodes
        .into_iter()
        .filter(|n| is_disrupted(n))
        .map(ResourceExt::name_any)
        .collect()
}

/// The cap as a pass (or the preview) sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CapState {
    /// Most nodes disrupted at once.
    pub limit: usize,
    /// Nodes disrupted now (including slots reserved for cordons being written).
    pub disrupted: usize,
}

impl CapState {
    /// The cap over `nodes` (every node of the cluster).
    pub fn of<'a>(cap: MaxDisrupted, nodes: impl IntoIterator<Item = &'a Node>) -> CapState {
        let (mut total, mut disrupted) = (0, 0);
        for node in nodes {
            total += 1;
            disrupted += usize::from(is_disrupted(node));
        }
        CapState {
            limit: cap.limit(total),
            disrupted,
        }
    }

    /// Slots free now.
    pub fn free(self) -> usize {
        self.limit.saturating_sub(self.disrupted)
    }

    /// `status.waitingFor`'s part for nodes held by the cap.
    pub fn waiting(self) -> String {
        format!(
            "{WAITING} ({} of {} nodes disrupted)",
            self.disrupted, self.limit
        )
    }
}

/// Whether cordoning `node` for `nodewright` takes a slot of the cap: no NodeWright holds a cordon
/// claim on it yet (a node already taken out of service by another NodeWright is counted already).
pub fn takes_slot(node: &Node) -> bool {
    !is_disrupted(node)
}

/// Which NodeWright gets a freed slot first: lower `priority`, then older, then name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank {
    priority: i32,
    created: Timestamp,
    name: String,
}

impl Rank {
    /// The rank of `nodewright`.
    pub fn of(nodewright: &NodeWright) -> Rank {
        Rank {
            priority: nodewright.spec.priority,
            created: nodewright
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(Timestamp::MAX, |t| t.0),
            name: nodewright.name_any(),
        }
    }

    /// The NodeWright's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// What [`Ledger::request`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The node is disrupted already (another NodeWright's cordon, or a slot reserved before): no
    /// slot taken.
    Counted,
    /// A slot is reserved for the node: write the cordon, then [`Ledger::written`] (or
    /// [`Ledger::withdraw`] when the write failed).
    Reserved,
    /// No slot: the node waits (the cap as the ledger counted it).
    Held(CapState),
}

impl Grant {
    /// Whether the cordon may be written.
    pub fn granted(self) -> bool {
        !matches!(self, Grant::Held(_))
    }
}

/// A slot reserved for a cordon the cache may not show yet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    /// Granted; the write is in flight.
    Writing,
    /// Written: the node's resourceVersion after the write. Counted until the cache has it (or a
    /// later version).
    Written(u64),
}

/// The operator's record of the cap between the node cache and the cordons being written (see the
/// module documentation). One per leadership term; the caller holds it under a lock and never
/// across an await.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    pending: BTreeMap<String, Pending>,
    /// NodeWrights with a node held by the cap in their last pass.
    waiting: BTreeSet<Rank>,
}

fn revision(node: &Node) -> Option<u64> {
    node.metadata.resource_version.as_deref()?.parse().ok()
}

impl Ledger {
    /// Asks for a slot for cordoning `node` for the NodeWright ranked `rank`, against `every_node`
    /// (the node cache now).
    pub fn request(
        &mut self,
        cap: MaxDisrupted,
        every_node: &[Arc<Node>],
        node: &Node,
        rank: &Rank,
    ) -> Grant {
        let name = node.name_any();
        let cached: BTreeMap<String, &Node> = every_node
            .iter()
            .map(|n| (n.name_any(), n.as_ref()))
            .collect();
        // A written cordon the cache shows now is counted from the cache.
        self.pending.retain(|n, p| match (p, cached.get(n)) {
            (_, None) => false,
            (Pending::Writing, _) => true,
            // A version the cache has that cannot be compared: the cache's claim counts it.
            (Pending::Written(rv), Some(c)) => revision(c).is_some_and(|seen| seen < *rv),
        });
        let mut state = CapState::of(cap, cached.values().copied());
        state.disrupted += self
            .pending
            .keys()
            .filter(|n| cached.get(*n).is_some_and(|c| !is_disrupted(c)))
            .count();
        let already = cached.get(&name).is_some_and(|c| is_disrupted(c)) || is_disrupted(node);
        if already || self.pending.contains_key(&name) {
            return Grant::Counted;
        }
        // Slots the NodeWrights ranked before this one wait for come first.
        let ahead = self
            .waiting
            .iter()
            .take_while(|w| *w < rank)
            .filter(|w| w.name != rank.name)
            .count();
        if state.disrupted.saturating_add(ahead) < state.limit {
            self.pending.insert(name, Pending::Writing);
            Grant::Reserved
        } else {
            self.waiting.retain(|w| w.name != rank.name);
            self.waiting.insert(rank.clone());
            Grant::Held(state)
        }
    }

    /// The cordon reserved for `node` is written: the node's resourceVersion after the write.
    pub fn written(&mut self, node: &str, resource_version: Option<&str>) {
        match resource_version.and_then(|rv| rv.parse().ok()) {
            Some(rv) => {
                self.pending.insert(node.to_owned(), Pending::Written(rv));
            }
            // Nothing to compare the cache with: the cache's claim counts it from now on.
            None => {
                self.pending.remove(node);
            }
        }
    }

    /// The cordon reserved for `node` was not written: the slot is free again.
    pub fn withdraw(&mut self, node: &str) {
        if self.pending.get(node) == Some(&Pending::Writing) {
            self.pending.remove(node);
        }
    }

    /// The end of a pass of the NodeWright ranked `rank`: it waits for a slot only while some node
    /// of its was held in that pass.
    pub fn settle(&mut self, rank: &Rank, held: bool) {
        self.waiting.retain(|w| w.name != rank.name);
        if held {
            self.waiting.insert(rank.clone());
        }
    }

    /// The NodeWright `name` is gone: it waits for nothing.
    pub fn forget(&mut self, name: &str) {
        self.waiting.retain(|w| w.name != name);
    }

    /// Keeps only the waiting NodeWrights `live` accepts (after a relist).
    pub fn retain(&mut self, live: impl Fn(&str) -> bool) {
        self.waiting.retain(|w| live(&w.name));
    }

    /// The NodeWrights waiting for a slot, first served first.
    pub fn waiting(&self) -> impl Iterator<Item = &str> {
        self.waiting.iter().map(|w| w.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use nodewright_shared::api::NodeWrightSpec;
    use nodewright_shared::keys;
    use serde_json::json;

    fn node(name: &str, rv: u64, claims: &[&str]) -> Arc<Node> {
        let annotations: serde_json::Map<String, serde_json::Value> = claims
            .iter()
            .map(|c| (keys::cordon_key(c), json!("true")))
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "resourceVersion": rv.to_string(),
                             "annotations": annotations},
            }))
            .expect("node"),
        )
    }

    fn rank(name: &str, priority: i32, created: i64) -> Rank {
        let mut nw = NodeWright::new(
            name,
            NodeWrightSpec {
                priority,
                ..Default::default()
            },
        );
        nw.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).expect("time")));
        Rank::of(&nw)
    }

    #[test]
    fn parses_a_count_or_a_percent_and_refuses_the_rest() {
        assert_eq!(MaxDisrupted::parse(" 10 "), Ok(MaxDisrupted::Count(10)));
        assert_eq!(MaxDisrupted::parse("25%"), Ok(MaxDisrupted::Percent(25)));
        assert_eq!(MaxDisrupted::parse("100%"), Ok(MaxDisrupted::Percent(100)));
        for bad in ["0", "0%", "101%", "-1", "1.5", "ten", "%", "", "5 nodes"] {
            let e = MaxDisrupted::parse(bad).expect_err(bad);
            assert!(e.to_string().contains("e.g. \"10%\""), "{e}");
        }
    }

    #[test]
    fn a_percent_rounds_down_but_allows_one_node() {
        assert_eq!(MaxDisrupted::Percent(10).limit(95), 9);
        assert_eq!(MaxDisrupted::Percent(10).limit(5), 1);
        assert_eq!(MaxDisrupted::Percent(100).limit(7), 7);
        assert_eq!(MaxDisrupted::Count(3).limit(1), 3);
        assert_eq!(MaxDisrupted::Count(3).to_string(), "3 nodes");
        assert_eq!(
            MaxDisrupted::Percent(5).to_string(),
            "5% of the cluster's nodes"
        );
    }

    #[test]
    fn a_node_claimed_already_takes_no_slot_and_a_full_cap_holds_the_next() {
        let cap = MaxDisrupted::Count(2);
        let nodes = vec![
            node("a", 1, &["other"]),
            node("b", 1, &[]),
            node("c", 1, &[]),
        ];
        let mut ledger = Ledger::default();
        let me = rank("me", 200, 10);
        // Another NodeWright's node: counted already.
        assert_eq!(ledger.request(cap, &nodes, &nodes[0], &me), Grant::Counted);
        assert_eq!(ledger.request(cap, &nodes, &nodes[1], &me), Grant::Reserved);
        // The cache does not show b's cordon yet: its reserved slot still counts.
        assert_eq!(
            ledger.request(cap, &nodes, &nodes[2], &me),
            Grant::Held(CapState {
                limit: 2,
                disrupted: 2
            })
        );
        assert_eq!(ledger.waiting().collect::<Vec<_>>(), ["me"]);
        assert_eq!(
            CapState {
                limit: 2,
                disrupted: 2
            }
            .waiting(),
            "waiting for the cluster-wide disruption cap (2 of 2 nodes disrupted)"
        );
    }

    #[test]
    fn a_written_slot_counts_until_the_cache_shows_the_write() {
        let cap = MaxDisrupted::Count(1);
        let me = rank("me", 200, 10);
        let before = vec![node("a", 5, &[]), node("b", 5, &[])];
        let mut ledger = Ledger::default();
        assert_eq!(
            ledger.request(cap, &before, &before[0], &me),
            Grant::Reserved
        );
        ledger.written("a", Some("7"));
        // The cache still has the version before the write: a is counted through the ledger.
        assert!(!ledger.request(cap, &before, &before[1], &me).granted());
        // The cache caught up and shows the claim: counted once, from the cache.
        let after = vec![node("a", 7, &["me"]), node("b", 5, &[])];
        assert!(!ledger.request(cap, &after, &after[1], &me).granted());
        // The claim released (a later version): the slot is free.
        let released = vec![node("a", 9, &[]), node("b", 5, &[])];
        assert_eq!(
            ledger.request(cap, &released, &released[1], &me),
            Grant::Reserved
        );
    }

    #[test]
    fn a_withdrawn_reservation_frees_its_slot() {
        let cap = MaxDisrupted::Count(1);
        let me = rank("me", 200, 10);
        let nodes = vec![node("a", 5, &[]), node("b", 5, &[])];
        let mut ledger = Ledger::default();
        assert_eq!(ledger.request(cap, &nodes, &nodes[0], &me), Grant::Reserved);
        ledger.withdraw("a");
        assert_eq!(ledger.request(cap, &nodes, &nodes[1], &me), Grant::Reserved);
    }

    #[test]
    fn a_freed_slot_goes_to_the_first_by_priority_then_age() {
        let cap = MaxDisrupted::Count(1);
        let urgent = rank("urgent", 100, 50);
        let old = rank("old", 200, 10);
        let young = rank("young", 200, 20);
        let full = vec![
            node("x", 1, &["someone"]),
            node("a", 1, &[]),
            node("b", 1, &[]),
        ];
        let mut ledger = Ledger::default();
        for r in [&young, &old, &urgent] {
            assert!(!ledger.request(cap, &full, &full[1], r).granted());
        }
        assert_eq!(
            ledger.waiting().collect::<Vec<_>>(),
            ["urgent", "old", "young"]
        );
        // The slot frees: the young NodeWright's pass comes first, yet the slot is the urgent one's.
        let free = vec![node("x", 2, &[]), node("a", 1, &[]), node("b", 1, &[])];
        assert!(!ledger.request(cap, &free, &free[1], &young).granted());
        assert!(!ledger.request(cap, &free, &free[1], &old).granted());
        assert_eq!(
            ledger.request(cap, &free, &free[1], &urgent),
            Grant::Reserved
        );
        // The urgent one got what it waited for: the next slot is the old one's.
        ledger.settle(&urgent, false);
        ledger.written("a", Some("3"));
        let next = vec![
            node("x", 2, &[]),
            node("a", 3, &["urgent"]),
            node("b", 1, &[]),
        ];
        assert!(!ledger.request(cap, &next, &next[2], &old).granted());
        let done = vec![node("x", 2, &[]), node("a", 4, &[]), node("b", 1, &[])];
        assert!(!ledger.request(cap, &done, &done[2], &young).granted());
        assert_eq!(ledger.request(cap, &done, &done[2], &old), Grant::Reserved);
    }

    #[test]
    fn spare_slots_serve_lower_ranks_and_a_settled_or_forgotten_waiter_stops_waiting() {
        let cap = MaxDisrupted::Count(3);
        let first = rank("first", 100, 10);
        let second = rank("second", 200, 10);
        let nodes = vec![
            node("x", 1, &["first"]),
            node("y", 1, &["first"]),
            node("a", 1, &[]),
            node("b", 1, &[]),
        ];
        let mut ledger = Ledger::default();
        ledger.settle(&first, true);
        // One slot free, and the first NodeWright waits for one: it is kept for it.
        assert!(!ledger.request(cap, &nodes, &nodes[2], &second).granted());
        ledger.settle(&first, false);
        assert_eq!(
            ledger.request(cap, &nodes, &nodes[2], &second),
            Grant::Reserved
        );
        ledger.settle(&second, true);
        ledger.forget("second");
        ledger.settle(&first, true);
        ledger.retain(|n| n != "first");
        assert_eq!(ledger.waiting().count(), 0);
    }

    /// Many passes asking at once (in any interleaving the lock allows) never reserve more slots
    /// than the cap.
    #[test]
    fn reservations_never_exceed_the_cap() {
        let cap = MaxDisrupted::Count(4);
        let nodes: Vec<Arc<Node>> = (0..20).map(|i| node(&format!("n{i}"), 1, &[])).collect();
        let mut ledger = Ledger::default();
        let ranks: Vec<Rank> = (0..5).map(|i| rank(&format!("nw{i}"), 200, i)).collect();
        let granted = nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| {
                ledger
                    .request(cap, &nodes, n, &ranks[i % ranks.len()])
                    .granted()
            })
            .count();
        assert_eq!(granted, 4);
    }
}
