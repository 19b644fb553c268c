//! Kubernetes Events with upstream's reasons (upstream-operator.md §6.5), so `kubectl describe`
//! shows what the operator did and why. Publishing is best effort: a failed Event is logged, never
//! a failed reconcile. Like every write, an Event is not sent once the leadership term ended, and
//! past a burst per (object, reason) repeats are dropped ([`super::event_filter`]).
//!
//! kube's [`Recorder`] folds a repeat into the series of the Event it created (a PATCH of its
//! count) from a cache of every Event it published in the last six minutes, keyed by the full
//! object reference (resourceVersion included), so nearly every Event adds an entry of about 2 KiB.
//! Under NodeWright churn that cache holds thousands of entries (heaptrack: 8 MiB of table alone,
//! and a hash table never shrinks). It is bounded here: after [`SERIES_CACHE`] publishes the
//! recorder is replaced by a fresh one, so a repeat across the swap starts a new Event instead of
//! raising the count of the old one (client-go's Event cache, an LRU, forgets the same way).

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

/// Publishes one recorder serves before it is replaced (see the module doc): its cache never holds
/// more entries than this.
pub const SERIES_CACHE: u32 = 1024;

/// The recorder in use and how many publishes it has served.
struct Generation {
    recorder: Recorder,
    published: u32,
}

/// Publishes the operator's Events.
#[derive(Clone)]
pub struct Events {
    client: kube::Client,
    reporter: Reporter,
    /// Shared by every clone; replaced every [`SERIES_CACHE`] publishes.
    recorder: Arc<Mutex<Generation>>,
    term: CancellationToken,
    /// Shared by every clone, so the whole term has one budget per (object, reason).
    filter: Arc<Mutex<SpamFilter>>,
}

impl Events {
    /// A publisher reporting as `instance` (the pod name) for the leadership term `term`.
    pub fn new(client: kube::Client, instance: &str, term: CancellationToken) -> Self {
        let reporter = Reporter {
            controller: REPORTER.to_owned(),
            instance: Some(instance.to_owned()),
        };
        Events {
            recorder: Arc::new(Mutex::new(Generation {
                recorder: Recorder::new(client.clone(), reporter.clone()),
                published: 0,
            })),
            client,
            reporter,
            term,
            filter: Arc::default(),
        }
    }

    /// The recorder for the next publish: the current one, or a fresh one (an empty series cache)
    /// once the current one has served [`SERIES_CACHE`] publishes.
    fn recorder(&self) -> Recorder {
        let mut generation = self.recorder.lock().unwrap_or_else(|e| e.into_inner());
        if generation.published >= SERIES_CACHE {
            *generation = Generation {
                recorder: Recorder::new(self.client.clone(), self.reporter.clone()),
                published: 0,
            };
        }
        generation.published += 1;
        generation.recorder.clone()
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
        if let Err(error) = self.recorder().publish(&event, &reference).await {
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    async fn once(events: &Events, name: &str) {
        events
            .on_node(&node(name), "Cordon", "cordoned".into(), None)
            .await;
    }

    /// A repeat of an Event is a PATCH of its series while the recorder that created it serves;
    /// after [`SERIES_CACHE`] publishes a fresh recorder (an empty cache) creates it anew, so the
    /// cache of Events published never holds more than that many.
    #[tokio::test]
    async fn the_series_cache_is_replaced_after_its_capacity() {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = seen.clone();
        let (client, server) = super::super::mock::serve(move |method, _path, body| {
            log.lock().expect("log").push(method.to_string());
            (
                if method == http::Method::POST {
                    201
                } else {
                    200
                },
                body,
            )
        });
        let events = Events::new(client, "operator-0", CancellationToken::new());
        let methods = || seen.lock().expect("log").clone();

        once(&events, "n0").await;
        once(&events, "n0").await;
        assert_eq!(
            methods(),
            ["POST", "PATCH"],
            "a repeat raises the series' count"
        );
        for i in 1..=(SERIES_CACHE - 2) {
            once(&events, &format!("n{i}")).await;
        }
        assert_eq!(methods().len(), SERIES_CACHE as usize);
        once(&events, "n0").await;
        assert_eq!(
            methods().last().map(String::as_str),
            Some("POST"),
            "the recorder was replaced: its cache is empty"
        );
        once(&events, "n0").await;
        assert_eq!(methods().last().map(String::as_str), Some("PATCH"));
        drop(events);
        server.abort();
    }
}
