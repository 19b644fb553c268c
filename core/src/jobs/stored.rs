//! The Jobs and Pods as the operator's caches keep them (DESIGN §4.5: caches trimmed).
//!
//! On a fleet the operator holds one Job per package stage per node, and its pods, for the Jobs'
//! TTL. A `k8s-openapi` `Job` is 2.6 KB before it holds anything (its pod template is inline), a
//! `Pod` 2.2 KB, a container status 0.75 KB: kept whole, a finished stage cost tens of kilobytes, so
//! the memory grew with every retained Job. These types keep only what a reconciler reads, under the
//! same field names (so the readers in [`crate::jobs::read`] and [`crate::jobs::classify`] read them
//! as they would read the full objects), and are decoded straight from the API's JSON: the fields
//! left out (the pod spec, managed fields, images, timestamps nobody reads) are skipped by the
//! decoder, never allocated.
//!
//! Labels, annotations and the owner reference are not kept as maps (a `BTreeMap` allocates room
//! for eleven entries for its first): the few the operator reads are typed fields. Of the
//! `last-logs` annotation only its presence is kept (its text, up to 4 KiB, is for administrators).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::{NamespaceResourceScope, Resource as _};
use nodewright_shared::keys::{self, TEMPLATE_HASH_ANNOTATION};
use serde::Deserialize;

/// The label Kubernetes puts on a Job's pods: the Job's uid.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";

// ---------------------------------------------------------------------------------------------
// Metadata

/// `metadata` as decoded; [`WireMeta::identity`] is what is kept of it.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
}

impl WireMeta {
    /// Identity and timestamps (what kube's stores and object references need).
    fn identity(&mut self) -> ObjectMeta {
        ObjectMeta {
            name: self.name.take(),
            namespace: self.namespace.take(),
            uid: self.uid.take(),
            resource_version: self.resource_version.take(),
            creation_timestamp: self.creation_timestamp.take(),
            deletion_timestamp: self.deletion_timestamp.take(),
            ..ObjectMeta::default()
        }
    }

    fn label(&mut self, key: &str) -> Option<String> {
        self.labels.as_mut()?.remove(key)
    }

    fn annotation(&mut self, key: &str) -> Option<String> {
        self.annotations.as_mut()?.remove(key)
    }

    /// The name of the controller owner of `kind`.
    fn controller(&mut self, kind: &str) -> Option<String> {
        self.owner_references
            .take()?
            .into_iter()
            .find(|o| o.controller == Some(true) && o.kind == kind)
            .map(|o| o.name)
    }
}

// ---------------------------------------------------------------------------------------------
// Jobs

/// A Job as cached: identity, the labels and annotations the operator reads, the parts of its spec
/// and status it reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "WireJob")]
pub struct StoredJob {
    /// Name, namespace, uid, resourceVersion, creation and deletion timestamps.
    pub metadata: ObjectMeta,
    /// Label `nodewright.nvidia.com/name`: the NodeWright (as a label value).
    pub nodewright: Option<String>,
    /// The NodeWright named by its controller owner reference.
    pub owner: Option<String>,
    /// Label `nodewright.nvidia.com/interrupt=True`: an interrupt Job.
    pub interrupt: bool,
    /// Annotation `nodewright.nvidia.com/package` (JSON: package, version, NodeWright, stage).
    pub package: Option<String>,
    /// Annotation `nodewright.nvidia.com/state-recorded`.
    pub recorded: Option<String>,
    /// Annotation of the pod template's drift hash.
    pub template_hash: Option<String>,
    /// Annotation `nodewright.nvidia.com/last-logs` is there.
    pub has_last_logs: bool,
    /// Annotation `nodewright.nvidia.com/pods-not-created`: why the Job's pod cannot be created.
    pub pods_not_created: Option<String>,
    /// Annotation `nodewright.nvidia.com/image-pull-failing`: an attempt waits on an image.
    pub image_pull_failing: Option<String>,
    /// What of the spec is read.
    pub spec: Option<StoredJobSpec>,
    /// What of the status is read.
    pub status: Option<StoredJobStatus>,
}

/// The read part of a Job's spec.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StoredJobSpec {
    /// `suspend` (pause).
    pub suspend: Option<bool>,
    /// `backoffLimit` ("N of M attempts").
    pub backoff_limit: Option<i32>,
    /// `activeDeadlineSeconds` (an interrupt Job's bound).
    pub active_deadline_seconds: Option<i64>,
    /// Of the pod template, the node it is pinned to.
    pub template: StoredTemplate,
}

/// The read part of a Job's pod template.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StoredTemplate {
    /// Of the pod spec, `nodeName`.
    pub spec: Option<StoredPodSpec>,
}

/// The read part of a pod spec.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StoredPodSpec {
    /// The node the pod runs on.
    pub node_name: Option<String>,
}

/// The read part of a Job's status.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StoredJobStatus {
    /// Its conditions (`Complete`, `Failed`, `FailureTarget`, `SuccessCriteriaMet`, `Suspended`).
    pub conditions: Option<Vec<StoredJobCondition>>,
    /// Pods pending or running.
    pub active: Option<i32>,
    /// Pods that failed.
    pub failed: Option<i32>,
    /// Pods that succeeded.
    pub succeeded: Option<i32>,
    /// When the Job controller started it (what `activeDeadlineSeconds` counts from).
    #[serde(rename = "startTime")]
    pub start_time: Option<Time>,
}

/// A Job condition.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StoredJobCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason (`BackoffLimitExceeded`, `DeadlineExceeded`, ...).
    pub reason: Option<String>,
    /// When it last changed.
    pub last_transition_time: Option<Time>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireJob {
    metadata: WireMeta,
    spec: Option<StoredJobSpec>,
    status: Option<StoredJobStatus>,
}

impl From<WireJob> for StoredJob {
    fn from(wire: WireJob) -> Self {
        let mut m = wire.metadata;
        StoredJob {
            metadata: m.identity(),
            nodewright: m.label(keys::NAME_LABEL),
            owner: m.controller("NodeWright"),
            interrupt: m.label(keys::INTERRUPT_LABEL).as_deref()
                == Some(crate::jobs::pod::INTERRUPT_LABEL_VALUE),
            package: m.annotation(keys::PACKAGE_ANNOTATION),
            recorded: m.annotation(keys::STATE_RECORDED_ANNOTATION),
            template_hash: m.annotation(TEMPLATE_HASH_ANNOTATION),
            has_last_logs: m.annotation(keys::LAST_LOGS_ANNOTATION).is_some(),
            pods_not_created: m.annotation(keys::PODS_NOT_CREATED_ANNOTATION),
            image_pull_failing: m.annotation(keys::IMAGE_PULL_FAILING_ANNOTATION),
            spec: wire.spec,
            status: wire.status,
        }
    }
}

impl StoredJob {
    /// The stored form of a full Job (a Job just built or read in full).
    pub fn of(job: &Job) -> StoredJob {
        serde_json::to_value(job)
            .ok()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
// Pods

/// A pod of a Job as cached: identity, its Job, its node, and the status the outcome paths classify
/// (phase, reason, disruption, container states).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "WirePod")]
pub struct StoredPod {
    /// Name, namespace, uid, resourceVersion, creation and deletion timestamps.
    pub metadata: ObjectMeta,
    /// Label `batch.kubernetes.io/controller-uid`: its Job's uid.
    pub job_uid: Option<String>,
    /// The Job named by its controller owner reference.
    pub job: Option<String>,
    /// Of the spec, `nodeName`.
    pub spec: Option<StoredPodSpec>,
    /// What of the status is read.
    pub status: Option<StoredPodStatus>,
}

/// The read part of a pod's status.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StoredPodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed`.
    pub phase: Option<String>,
    /// `DeadlineExceeded`, an admission rejection (`OutOfcpu`), ...
    pub reason: Option<String>,
    /// Its message.
    pub message: Option<String>,
    /// Its conditions (`DisruptionTarget` is read).
    pub conditions: Option<Vec<StoredPodCondition>>,
    /// Init containers, in order.
    pub init_container_statuses: Option<Vec<StoredContainerStatus>>,
    /// Regular containers.
    pub container_statuses: Option<Vec<StoredContainerStatus>>,
}

/// A pod condition.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StoredPodCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

/// A container's status.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StoredContainerStatus {
    /// Container name.
    pub name: String,
    /// Its image, as the kubelet reports it.
    pub image: Option<String>,
    /// Its current state.
    pub state: Option<StoredContainerState>,
    /// Its previous state (a restart in place: the interrupt's reboot).
    pub last_state: Option<StoredContainerState>,
}

/// A container state: waiting, running or terminated.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StoredContainerState {
    /// Waiting, with why.
    pub waiting: Option<StoredWaiting>,
    /// Running (nothing of it is read but that it is).
    pub running: Option<serde::de::IgnoredAny>,
    /// Terminated, with how.
    pub terminated: Option<StoredTerminated>,
}

/// A waiting container's reason.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StoredWaiting {
    /// `ImagePullBackOff`, `PodInitializing`, ...
    pub reason: Option<String>,
    /// Its message.
    pub message: Option<String>,
}

/// How a container terminated.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StoredTerminated {
    /// Exit code.
    pub exit_code: i32,
    /// `Completed`, `Error`, `OOMKilled`, `ContainerStatusUnknown`, ...
    pub reason: Option<String>,
    /// Its message.
    pub message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WirePod {
    metadata: WireMeta,
    spec: Option<StoredPodSpec>,
    status: Option<StoredPodStatus>,
}

impl From<WirePod> for StoredPod {
    fn from(wire: WirePod) -> Self {
        let mut m = wire.metadata;
        StoredPod {
            metadata: m.identity(),
            job_uid: m.label(CONTROLLER_UID_LABEL),
            job: m.controller("Job"),
            spec: wire.spec,
            status: wire.status,
        }
    }
}

impl StoredPod {
    /// The stored form of a full Pod.
    pub fn of(pod: &Pod) -> StoredPod {
        serde_json::to_value(pod)
            .ok()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
// kube: the API of Jobs and Pods, decoded into these types.

macro_rules! resource_as {
    ($stored:ty, $full:ty) => {
        impl kube_core::Resource for $stored {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$full>::KIND)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$full>::GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$full>::VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$full>::URL_PATH_SEGMENT)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

resource_as!(StoredJob, Job);
resource_as!(StoredPod, Pod);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_keeps_what_is_read_and_drops_the_rest() {
        let job: StoredJob = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {
                "name": "j", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "labels": {keys::NAME_LABEL: "nw", "other": "x", keys::INTERRUPT_LABEL: "True"},
                "annotations": {keys::PACKAGE_ANNOTATION: "{}", keys::LAST_LOGS_ANNOTATION: "a long log",
                                keys::STATE_RECORDED_ANNOTATION: "complete",
                                TEMPLATE_HASH_ANNOTATION: "sha256:x",
                                "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "ownerReferences": [{"apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright",
                                     "name": "nw", "uid": "o", "controller": true}],
                "managedFields": [{"manager": "m", "operation": "Update"}]
            },
            "spec": {"backoffLimit": 3, "suspend": false,
                     "template": {"metadata": {"labels": {"a": "b"}},
                                  "spec": {"nodeName": "n1", "containers": [{"name": "pause", "image": "p"}]}}},
            "status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                                                     "reason": "BackoffLimitExceeded",
                                                     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .expect("job");
        assert_eq!(job.metadata.name.as_deref(), Some("j"));
        assert_eq!(job.metadata.namespace.as_deref(), Some("ns"));
        assert!(job.metadata.labels.is_none() && job.metadata.annotations.is_none());
        assert!(job.metadata.managed_fields.is_none() && job.metadata.owner_references.is_none());
        assert_eq!(job.nodewright.as_deref(), Some("nw"));
        assert_eq!(job.owner.as_deref(), Some("nw"));
        assert!(job.interrupt);
        assert_eq!(job.package.as_deref(), Some("{}"));
        assert_eq!(job.recorded.as_deref(), Some("complete"));
        assert_eq!(job.template_hash.as_deref(), Some("sha256:x"));
        assert!(job.has_last_logs);
        assert_eq!(crate::jobs::read::node_of(&job), Some("n1"));
        assert_eq!(job.spec.as_ref().and_then(|s| s.backoff_limit), Some(3));
        let condition = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.first())
            .cloned()
            .unwrap_or_default();
        assert_eq!(condition.reason.as_deref(), Some("BackoffLimitExceeded"));
        assert!(condition.last_transition_time.is_some());
    }

    #[test]
    fn a_pod_keeps_its_states_and_its_job() {
        let pod: StoredPod = serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {CONTROLLER_UID_LABEL: "u", "job-name": "j"},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                              "uid": "u", "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "pause", "image": "p"}]},
            "status": {"phase": "Failed", "reason": "DeadlineExceeded",
                       "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "x"}],
                       "initContainerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false,
                           "restartCount": 0, "state": {"terminated": {"exitCode": 3, "reason": "Error",
                           "startedAt": "2026-01-01T00:00:00Z"}},
                           "lastState": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
        }))
        .expect("pod");
        assert_eq!(pod.job_uid.as_deref(), Some("u"));
        assert_eq!(pod.job.as_deref(), Some("j"));
        assert!(pod.metadata.labels.is_none());
        let status = pod.status.clone().unwrap_or_default();
        let c = status
            .init_container_statuses
            .unwrap_or_default()
            .first()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            c.state.and_then(|s| s.terminated).map(|t| t.exit_code),
            Some(3)
        );
        assert!(c.last_state.is_some_and(|s| s.running.is_some()));
        assert_eq!(pod.spec.and_then(|s| s.node_name).as_deref(), Some("n1"));
    }

    #[test]
    fn the_stored_form_of_a_full_object_is_the_decoded_one() {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "j", "labels": {keys::NAME_LABEL: "nw"}},
            "spec": {"template": {"spec": {"nodeName": "n1", "containers": []}}}
        }))
        .expect("job");
        let stored = StoredJob::of(&job);
        assert_eq!(stored.metadata.name.as_deref(), Some("j"));
        assert_eq!(stored.nodewright.as_deref(), Some("nw"));
        assert_eq!(crate::jobs::read::node_of(&stored), Some("n1"));
    }
}
