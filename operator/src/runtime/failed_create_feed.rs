//! The watch of the Job controller's `FailedCreate` Events in the Jobs' namespace: a stage whose
//! pods cannot be created (Pod Security admission refusing a privileged pod, a ResourceQuota, an
//! admission webhook) leaves no pod and no Job condition behind, only these Events, and the Job
//! controller retries for ever. Each Event triggers the outcome controller for its Job, which
//! surfaces the stage within seconds ([`crate::outcomes::not_created`]).
//!
//! Scoped by field selector to `FailedCreate` Events about Jobs, and stored trimmed to what is
//! read (the Job's uid, the apiserver's message, when it was last seen), so the store stays small
//! whatever else the namespace's Events hold.

use futures::{Stream, TryStreamExt};
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};

/// The field selector of the watch.
pub const SELECTOR: &str = "involvedObject.kind=Job,reason=FailedCreate";

/// What the store keeps of an Event: its identity, the Job it is about, the message and times.
pub fn trim(event: &mut Event) {
    event.metadata.managed_fields = None;
    event.metadata.annotations = None;
    event.metadata.labels = None;
    event.source = None;
    event.related = None;
    event.series = None;
    event.reporting_component = None;
    event.reporting_instance = None;
    let ObjectReference { name, uid, .. } = std::mem::take(&mut event.involved_object);
    event.involved_object = ObjectReference {
        kind: Some("Job".to_owned()),
        name,
        uid,
        ..ObjectReference::default()
    };
}

/// Watches `api` (the Jobs' namespace) into `writer`, yielding every `FailedCreate` Event applied.
pub fn failed_create_feed(
    api: Api<Event>,
    mut writer: Writer<Event>,
) -> impl Stream<Item = Result<Event, watcher::Error>> + Send + 'static {
    watcher(api, watcher::Config::default().fields(SELECTOR))
        .default_backoff()
        .modify(trim)
        .inspect_ok(move |event| writer.apply_watcher_event(event))
        .applied_objects()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_store_keeps_the_job_the_message_and_the_times() {
        let mut event: Event = serde_json::from_value(json!({
            "metadata": {"name": "j.1", "namespace": "ns", "managedFields": [{"manager": "kcm"}],
                         "labels": {"a": "b"}},
            "involvedObject": {"kind": "Job", "name": "j", "uid": "u-1", "namespace": "ns",
                               "apiVersion": "batch/v1", "resourceVersion": "7"},
            "reason": "FailedCreate",
            "message": "Error creating: pods \"j-x\" is forbidden: violates PodSecurity",
            "source": {"component": "job-controller"},
            "lastTimestamp": "2026-12-03T10:00:00Z",
            "count": 4,
            "type": "Warning",
        }))
        .expect("event");
        trim(&mut event);
        assert_eq!(event.metadata.managed_fields, None);
        assert_eq!(event.metadata.labels, None);
        assert_eq!(event.source, None);
        assert_eq!(event.involved_object.uid.as_deref(), Some("u-1"));
        assert_eq!(event.involved_object.name.as_deref(), Some("j"));
        assert_eq!(event.involved_object.resource_version, None);
        assert!(
            event
                .message
                .as_deref()
                .is_some_and(|m| m.contains("PodSecurity"))
        );
        assert!(event.last_timestamp.is_some());
        assert_eq!(event.count, Some(4));
    }
}
