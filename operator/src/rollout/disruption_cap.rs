//! The cluster-wide disruption cap as the operator grants it ([`nodewright_core::rollout::disruption`]):
//! one [`Ledger`] per leadership term, shared by every pass, behind a lock held only for the
//! in-memory decision (never across an API call). A pass asks for a slot just before it writes a
//! node's first cordon, and reports the write; at the end of the pass it says whether it still
//! waits, so the next freed slot goes to the first waiting NodeWright by priority, then age.

use std::sync::{Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::Store;
use nodewright_core::rollout::disruption::{Grant, Ledger, MaxDisrupted, Rank};

/// The cap and its ledger.
#[derive(Debug, Default)]
pub struct DisruptionCap {
    cap: Option<MaxDisrupted>,
    ledger: Mutex<Ledger>,
}

impl DisruptionCap {
    /// The cap `MAX_DISRUPTED_NODES` configures (`None`: every request is granted).
    pub fn new(cap: Option<MaxDisrupted>) -> Self {
        DisruptionCap {
            cap,
            ledger: Mutex::default(),
        }
    }

    /// Whether a cap is configured.
    pub fn enabled(&self) -> bool {
        self.cap.is_some()
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // The ledger is consistent after every call (no call panics half-way); a poisoned lock
        // says only that some other thread panicked while holding it.
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for cordoning `node` for the NodeWright ranked `rank`, counted against `nodes` (the
    /// node cache). Without a cap: [`Grant::Counted`].
    pub fn request(&self, nodes: &Store<Node>, node: &Node, rank: &Rank) -> Grant {
        let Some(cap) = self.cap else {
            return Grant::Counted;
        };
        let every_node = nodes.state();
        self.ledger().request(cap, &every_node, node, rank)
    }

    /// The cordon a [`Grant::Reserved`] was for is written; `resource_version` is the node's after
    /// the write.
    pub fn written(&self, node: &str, resource_version: Option<&str>) {
        if self.enabled() {
            self.ledger().written(node, resource_version);
        }
    }

    /// The cordon a [`Grant::Reserved`] was for was not written.
    pub fn withdraw(&self, node: &str) {
        if self.enabled() {
            self.ledger().withdraw(node);
        }
    }

    /// The end of a pass: whether the NodeWright still waits for a slot.
    pub fn settle(&self, rank: &Rank, held: bool) {
        if self.enabled() {
            self.ledger().settle(rank, held);
        }
    }

    /// The NodeWright `name` is gone.
    pub fn forget(&self, name: &str) {
        self.ledger().forget(name);
    }

    /// Keeps the waiting NodeWrights `live` accepts.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        self.ledger().retain(live);
    }
}
