//! Kubernetes Events with upstream's reasons (upstream-operator.md §6.5), so `kubectl describe`
//! shows what the operator did and why. Publishing is best effort: a failed Event is logged, never
//! a failed reconcile. Like every write, an Event is not sent once the leadership term ended, and
//! past a burst per (object, reason) repeats are dropped ([`super::event_filter`]).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use nodewright_shared::api::NodeWright;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::event_filter::SpamFilter;

/// The component name in every Event.
pub const REPORTER: &str = "nodewright-operator";

/// Publishes the operator's Events.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    term: CancellationToken,
    /// Shared by every clone, so the whole term has one budget per (object, reason).
    filter: Arc<Mutex<SpamFilter>>,
}

impl Events {
    /// A publisher reporting as `instance` (the pod name) for the leadership term `term`.
    pub fn new(client: kube::Client, instance: &str, term: CancellationToken) -> Self {
        Events {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: REPORTER.to_owned(),
                    instance: Some(instance.to_owned()),
                },
            ),
            term,
            filter: Arc::default(),
        }
    }

    async fn publish(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        if self.term.is_cancelled() {
            debug!(reason, "the leadership term ended; Event not sent");
            return;
        }
        let key = format!(
            "{}/{}/{}/{}|{reason}",
            reference.kind.as_deref().unwrap_or_default(),
            reference.namespace.as_deref().unwrap_or_default(),
            reference.name.as_deref().unwrap_or_default(),
            reference.uid.as_deref().unwrap_or_default(),
        );
        let allowed = self
            .filter
            .lock()
            .map(|mut f| f.allow(&key, Instant::now()))
            // A poisoned lock only means another publish panicked: publish rather than lose it.
            .unwrap_or(true);
        if !allowed {
            debug!(
                reason,
                "Event dropped by the spam filter (burst spent for this object)"
            );
            return;
        }
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: reason.to_owned(),
            secondary: related,
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            debug!(%error, reason, "publishing an Event failed");
        }
    }

    /// A Normal Event on a NodeWright; `related`: the object it is about (see [`job_ref`]).
    pub async fn on_nodewright(
        &self,
        nodewright: &NodeWright,
        reason: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        self.publish(
            nodewright.object_ref(&()),
            EventType::Normal,
            reason,
            note,
            related,
        )
        .await;
    }

    /// A Warning Event on a NodeWright (something a user must act on).
    pub async fn warn_on_nodewright(
        &self,
        nodewright: &NodeWright,
        reason: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        self.publish(
            nodewright.object_ref(&()),
            EventType::Warning,
            reason,
            note,
            related,
        )
        .await;
    }

    /// A Warning Event on a node.
    pub async fn warn_on_node(
        &self,
        node: &Node,
        reason: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        self.publish(
            node.object_ref(&()),
            EventType::Warning,
            reason,
            note,
            related,
        )
        .await;
    }

    /// A Normal Event on a node.
    pub async fn on_node(
        &self,
        node: &Node,
        reason: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        self.publish(
            node.object_ref(&()),
            EventType::Normal,
            reason,
            note,
            related,
        )
        .await;
    }
}

/// The `related` object of an Event about one stage's Job. Events of one reason on one object form
/// a single series (events.k8s.io keys a series by regarding, related, reason and action, not by the
/// note), so without it the timeout of a second package on the same node would only raise the
/// count of the first package's Event, and its note would never be seen.
pub fn job_ref(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".to_owned()),
        kind: Some("Job".to_owned()),
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        ..ObjectReference::default()
    }
}
