//! The node cache (DESIGN §4.5): one watch of all Nodes into a reflector store, trimmed of what the
//! operator never reads (managed fields, image lists, condition heartbeats), so a large fleet's cache
//! stays small. It runs on every replica, leader or not, so a new leader starts with a warm cache.
//!
//! Changes that matter to a rollout (labels, annotations, taints, cordon, boot ID) are forwarded with
//! the node, so the rollout wakes only the NodeWrights concerned ([`nodewright_core::rollout::wake`]);
//! heartbeats are not, so a quiet fleet causes no reconciles.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo};
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use nodewright_shared::keys;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span, warn};

/// Drops what the operator never reads from a cached node: of its status only the boot ID (reboot
/// detection) and the operator's own conditions (written only on a change) stay; of its spec the
/// taints and `unschedulable`. Addresses, capacity, images, daemon endpoints, system info and the
/// kubelet's conditions are most of a node and none of the operator's business.
pub fn trim(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(spec) = node.spec.as_mut() {
        *spec = NodeSpec {
            taints: spec.taints.take(),
            unschedulable: spec.unschedulable.take(),
            ..NodeSpec::default()
        };
    }
    if let Some(status) = node.status.as_mut() {
        let boot_id = status.node_info.take().map(|info| info.boot_id);
        let conditions: Vec<NodeCondition> = status
            .conditions
            .take()
            .into_iter()
            .flatten()
            .filter(|c| c.type_.starts_with(keys::PREFIX))
            .map(|c| NodeCondition {
                last_heartbeat_time: None,
                ..c
            })
            .collect();
        *status = NodeStatus {
            node_info: boot_id.map(|boot_id| NodeSystemInfo {
                boot_id,
                ..NodeSystemInfo::default()
            }),
            conditions: (!conditions.is_empty()).then_some(conditions),
            ..NodeStatus::default()
        };
    }
}

/// Hash of what can change a rollout decision; equal hashes are not forwarded.
pub fn rollout_relevant(node: &Node) -> Option<u64> {
    let mut h = DefaultHasher::new();
    node.metadata.name.hash(&mut h);
    node.metadata.labels.hash(&mut h);
    node.metadata.annotations.hash(&mut h);
    node.metadata.deletion_timestamp.is_some().hash(&mut h);
    if let Some(spec) = &node.spec {
        spec.unschedulable.hash(&mut h);
        for t in spec.taints.iter().flatten() {
            (&t.key, &t.value, &t.effect).hash(&mut h);
        }
    }
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| &i.boot_id)
        .hash(&mut h);
    Some(h.finish())
}

/// Keeps `writer`'s store in sync with the cluster's nodes until `shutdown`, sending the node on
/// every relevant change.
pub async fn run(
    client: kube::Client,
    writer: Writer<Node>,
    triggers: broadcast::Sender<Node>,
    shutdown: CancellationToken,
) {
    let api: Api<Node> = Api::all(client);
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .touched_objects()
        .predicate_filter(rollout_relevant, PredicateConfig::default());
    let mut stream = std::pin::pin!(stream);
    async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                next = stream.next() => match next {
                    Some(Ok(node)) => {
                        // No receiver (no term running) is fine.
                        let _ = triggers.send(node);
                    }
                    Some(Err(error)) => warn!(%error, "node watch error; retrying"),
                    None => break,
                },
            }
        }
    }
    .instrument(info_span!("node_cache"))
    .await;
}

/// What a receiver of node changes hears next.
#[derive(Debug, Clone)]
pub enum NodeChange {
    /// This node changed.
    Changed(Box<Node>),
    /// The receiver fell behind and missed changes: every node may have changed.
    Missed,
}

/// A stream of node changes from a broadcast receiver.
pub fn changes(rx: broadcast::Receiver<Node>) -> impl Stream<Item = NodeChange> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(node) => Some((NodeChange::Changed(Box::new(node)), rx)),
            Err(broadcast::error::RecvError::Lagged(_)) => Some((NodeChange::Missed, rx)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn heartbeats_are_trimmed_and_do_not_trigger() {
        let mut node = Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_heartbeat_time: Some(Time(Timestamp::UNIX_EPOCH)),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
        };
        let before = rollout_relevant(&node);
        trim(&mut node);
        assert!(node.metadata.managed_fields.is_none());
        assert_eq!(rollout_relevant(&node), before);
        node.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into());
        assert_ne!(rollout_relevant(&node), before);
    }

    #[test]
    fn a_cached_node_keeps_what_the_rollout_reads() {
        let ours = format!("{}gpu/NotReady", keys::PREFIX);
        let mut node = Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                labels: Some([("pool".to_owned(), "gpu".to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: Some("10.0.0.0/24".into()),
                unschedulable: Some(true),
                taints: Some(vec![Taint {
                    key: "k".into(),
                    effect: "NoSchedule".into(),
                    ..Taint::default()
                }]),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    address: "10.0.0.1".into(),
                    type_: "InternalIP".into(),
                }]),
                conditions: Some(vec![
                    NodeCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        ..NodeCondition::default()
                    },
                    NodeCondition {
                        type_: ours.clone(),
                        status: "True".into(),
                        last_heartbeat_time: Some(Time(Timestamp::UNIX_EPOCH)),
                        ..NodeCondition::default()
                    },
                ]),
                node_info: Some(NodeSystemInfo {
                    boot_id: "boot-1".into(),
                    kernel_version: "6.1".into(),
                    ..NodeSystemInfo::default()
                }),
                ..NodeStatus::default()
            }),
        };
        let before = rollout_relevant(&node);
        trim(&mut node);
        assert_eq!(
            rollout_relevant(&node),
            before,
            "nothing a rollout reads changed"
        );
        let spec = node.spec.clone().unwrap_or_default();
        assert_eq!(
            (spec.unschedulable, spec.taints.map(|t| t.len())),
            (Some(true), Some(1))
        );
        assert!(spec.pod_cidr.is_none());
        let status = node.status.unwrap_or_default();
        assert!(status.addresses.is_none());
        let conditions = status.conditions.unwrap_or_default();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, ours);
        assert!(conditions[0].last_heartbeat_time.is_none());
        assert_eq!(
            status.node_info.map(|i| i.boot_id).as_deref(),
            Some("boot-1")
        );
    }
}
