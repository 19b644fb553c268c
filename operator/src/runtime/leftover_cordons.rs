//! Cordon claims (`cordon_<name>`) of NodeWrights that no longer exist. A NodeWright releases its
//! claims when it completes a node and when it is deleted (its finalizer), but one deleted without
//! its finalizer running (removed by hand, an operator that was not running, an older operator's
//! leftovers) would hold its nodes cordoned for ever: no pass of any NodeWright would ever release
//! a claim that is not its own.
//!
//! During each leadership term this task looks at every node as it changes, and at all of them
//! once a minute (a NodeWright deleted without its finalizer changes no node): a claim whose
//! NodeWright is not in the store is confirmed gone with a GET (the store only holds the NodeWrights
//! this replica reconciles) and, if the NodeWright is still absent [`GRACE`] later (a migration
//! writes node records moments before it creates their NodeWright), released under the same rule
//! as any release
//! ([`nodewright_core::node::cordon::release`]: the node is uncordoned unless it was cordoned before the
//! first claim), with a Warning Event on the node.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use nodewright_shared::api::NodeWright;
use tokio::sync::broadcast;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::context::Context;
use crate::runtime::nodes::{NodeChange, changes};
use crate::writes::NodeWriteError;
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::node::{cordon, runtime_cordon};

/// Event reason on a node whose leftover claim was released.
pub const LEFTOVER_CORDON_RELEASED: &str = "LeftoverCordonReleased";

/// How often every cached node is looked at, whether it changed or not.
const SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// How long a claim's NodeWright must stay absent before the claim is released: `kubectl
/// nodewright migrate-from-skyhook` copies the node records (claims included) just before it
/// creates the NodeWrights they belong to.
const GRACE: Duration = Duration::from_secs(30);

/// When each (node, NodeWright) claim was first found without its NodeWright.
type FirstSeen = std::collections::HashMap<(String, String), tokio::time::Instant>;

/// Releases leftover claims until the term ends.
pub async fn run(ctx: Arc<Context>, node_changes: broadcast::Receiver<Node>) {
    async move {
        // Before the store has listed, every claim would look like a leftover (and cost a GET).
        // Not the store's own signal: the rollout controller waits on it (Context::nodewrights_synced).
        let mut synced = ctx.nodewrights_synced.clone();
        tokio::select! {
            () = ctx.term.cancelled() => return,
            ready = synced.wait_for(|synced| *synced) => if ready.is_err() { return },
        }
        let mut node_changes = std::pin::pin!(changes(node_changes));
        let mut tick = tokio::time::interval(SWEEP_INTERVAL);
        let mut first_seen = FirstSeen::new();
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let nodes: Vec<Arc<Node>> = tokio::select! {
                () = ctx.term.cancelled() => return,
                _ = tick.tick() => ctx.nodes.state(),
                change = node_changes.next() => match change {
                    Some(NodeChange::Changed(node)) => vec![Arc::new(*node)],
                    Some(NodeChange::Missed) => ctx.nodes.state(),
                    None => return,
                },
            };
            for node in nodes {
                if ctx.term.is_cancelled() {
                    return;
                }
                release_leftovers(&ctx, &node, &mut first_seen).await;
            }
        }
    }
    .instrument(info_span!("leftover_cordons"))
    .await;
}

/// The claimants of `node` that are not in `known` (the store): those that may be gone.
fn suspects(node: &Node, known: impl Fn(&str) -> bool) -> Vec<String> {
    cordon::claimants(node)
        .filter(|name| !known(name))
        .map(str::to_owned)
        .collect()
}

/// What became of a node whose leftover claims were released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// Another NodeWright still holds a cordon on it.
    StillHeld,
    /// It holds the persistent runtime-required cordon, which only a validator releases.
    RuntimeRequiredCordon,
    /// It was cordoned before the first claim.
    CordonedBefore,
    /// It is schedulable again.
    Uncordoned,
}

impl After {
    /// What becomes of `node` once the claims of `released` go ([`cordon::release`]).
    fn of(node: &Node, released: &[&str]) -> Self {
        if cordon::claimants(node).any(|n| !released.contains(&n)) {
            Self::StillHeld
        } else if runtime_cordon::is_marked(node) {
            Self::RuntimeRequiredCordon
        } else if cordon::cordoned_before(node) {
            Self::CordonedBefore
        } else {
            Self::Uncordoned
        }
    }
}

/// The text of the Event on a node whose leftover claims of `gone` were released.
fn note(gone: &[String], after: After) -> String {
    let names = gone.join(", ");
    let after = match after {
        After::StillHeld => "the node stays cordoned: another NodeWright holds a cordon on it",
        After::RuntimeRequiredCordon => {
            "the node stays cordoned: it holds the runtime-required cordon \
             (nodewright.nvidia.com/runtimeRequiredCordon), which its validator releases"
        }
        After::CordonedBefore => {
            "the node stays cordoned: it was cordoned before any NodeWright cordoned it"
        }
        After::Uncordoned => "the node is uncordoned",
    };
    format!("released the cordon of NodeWright [{names}], which no longer exists; {after}")
}

/// Releases the claims on `node` of NodeWrights that do not exist (confirmed by the API server).
async fn release_leftovers(ctx: &Context, node: &Node, first_seen: &mut FirstSeen) {
    let suspects = suspects(node, |name| {
        ctx.nodewrights
            .get(&ObjectRef::<NodeWright>::new(name))
            .is_some()
    });
    let node_name = node.name_any();
    first_seen.retain(|(n, nw), _| *n != node_name || suspects.contains(nw));
    if suspects.is_empty() {
        return;
    }
    let api = Api::<NodeWright>::all(ctx.client.clone());
    let mut gone = Vec::new();
    for name in suspects {
        match api.get_opt(&name).await {
            Ok(None) => {
                let since = *first_seen
                    .entry((node_name.clone(), name.clone()))
                    .or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= GRACE {
                    gone.push(name);
                }
            }
            Ok(Some(_)) => {
                first_seen.remove(&(node_name.clone(), name));
            }
            Err(error) => {
                warn!(nodewright = %name, %error, "could not tell whether a cordon's NodeWright exists");
                return;
            }
        }
    }
    if gone.is_empty() {
        return;
    }
    let released: Vec<&str> = gone.iter().map(String::as_str).collect();
    let mut edit = NodeEdit::default();
    cordon::release(&mut edit, node, &released);
    let after = After::of(node, &released);
    let name = node_name;
    match ctx.writer.apply_node_edit(node, &edit).await {
        Ok(_) => {
            for nw in &gone {
                first_seen.remove(&(name.clone(), nw.clone()));
            }
            info!(node = %name, nodewrights = ?gone, "released leftover cordon claims");
            ctx.events
                .warn_on_node(node, LEFTOVER_CORDON_RELEASED, note(&gone, after), None)
                .await;
        }
        // The node changed since the cache saw it: its change comes back here as an event.
        Err(NodeWriteError::Conflict { .. }) => {
            debug!(node = %name, "node changed under the leftover release; next change retries")
        }
        Err(error) => warn!(node = %name, %error, "could not release leftover cordon claims"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::keys;
    use serde_json::json;

    #[test]
    fn only_claims_of_nodewrights_not_known_are_suspects() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n", "annotations": {
            keys::cordon_key("live"): "true",
            keys::cordon_key("gone"): "true",
            keys::cordon_key("released"): "false",
            keys::node_state_key("other"): "{}",
        }}}))
        .expect("node");
        assert_eq!(suspects(&node, |n| n == "live"), ["gone"]);
        assert!(suspects(&node, |_| true).is_empty());
    }

    #[test]
    fn the_event_says_what_became_of_the_node() {
        let gone = ["old".to_owned()];
        assert!(note(&gone, After::Uncordoned).ends_with("the node is uncordoned"));
        assert!(note(&gone, After::CordonedBefore).contains("cordoned before any NodeWright"));
        assert!(note(&gone, After::StillHeld).contains("another NodeWright holds"));
        assert!(note(&gone, After::RuntimeRequiredCordon).contains("runtimeRequiredCordon"));
        assert!(note(&gone, After::Uncordoned).contains("NodeWright [old]"));
    }

    #[test]
    fn what_becomes_of_the_node_follows_the_release_rule() {
        use nodewright_core::testing::node_with;
        let gone = keys::cordon_key("gone");
        let mark = keys::RUNTIME_REQUIRED_CORDON_ANNOTATION;
        let before = keys::CORDONED_BEFORE_ANNOTATION;
        let of = |annotations: &[(&str, &str)]| After::of(&node_with(true, annotations), &["gone"]);
        assert_eq!(of(&[(&gone, "true")]), After::Uncordoned);
        assert_eq!(
            of(&[(&gone, "true"), (before, "true")]),
            After::CordonedBefore
        );
        assert_eq!(
            of(&[(&gone, "true"), (mark, "true")]),
            After::RuntimeRequiredCordon
        );
        let other = keys::cordon_key("live");
        assert_eq!(
            of(&[(&gone, "true"), (&other, "true"), (mark, "true")]),
            After::StillHeld
        );
    }
}
