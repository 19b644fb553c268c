//! What the in-memory caches of Jobs and Pods keep (DESIGN §4.5: caches trimmed). On a fleet the
//! operator holds one Job per package stage per node, and their pods, until the Jobs' TTLs run out;
//! most of each object is its pod spec (containers, env, mounts), which no reconciler reads from a
//! cache.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodSpec};

/// The Job store both controllers read: metadata (managed fields aside), the Job's spec and status,
/// and of the pod template only `nodeName` (which node the Job runs on). Nothing reads a stored
/// Job's containers: drift compares the template-hash annotation, outcomes read status and pods.
pub fn job(job: &mut Job) {
    job.metadata.managed_fields = None;
    if let Some(template) = job.spec.as_mut().map(|s| &mut s.template) {
        template.spec = template.spec.take().map(node_only);
    }
}

/// The pod store (running Jobs' pods, read by the outcome controller): metadata and status, and of
/// the spec only `nodeName`. A finished Job's pods are listed live, in full.
pub fn pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.spec = pod.spec.take().map(node_only);
}

fn node_only(spec: PodSpec) -> PodSpec {
    PodSpec {
        node_name: spec.node_name,
        ..PodSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobSpec, JobStatus};
    use k8s_openapi::api::core::v1::{Container, PodStatus, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    fn spec() -> PodSpec {
        PodSpec {
            node_name: Some("n1".into()),
            containers: vec![Container {
                name: "pause".into(),
                ..Container::default()
            }],
            ..PodSpec::default()
        }
    }

    fn meta() -> ObjectMeta {
        ObjectMeta {
            name: Some("x".into()),
            managed_fields: Some(vec![ManagedFieldsEntry::default()]),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn stored_jobs_keep_their_node_hash_and_status_but_not_the_containers() {
        let mut job = Job {
            metadata: meta(),
            spec: Some(JobSpec {
                backoff_limit: Some(3),
                template: PodTemplateSpec {
                    metadata: None,
                    spec: Some(spec()),
                },
                ..JobSpec::default()
            }),
            status: Some(JobStatus {
                failed: Some(1),
                ..JobStatus::default()
            }),
        };
        job.metadata.annotations = Some(
            [(
                crate::jobs::drift::TEMPLATE_HASH_ANNOTATION.to_owned(),
                "sha256:x".to_owned(),
            )]
            .into(),
        );
        super::job(&mut job);
        assert!(
            !crate::jobs::drift::is_stale(&job, "sha256:x"),
            "drift detection reads the hash"
        );
        assert!(job.metadata.managed_fields.is_none());
        assert_eq!(crate::jobs::read::node_of(&job), Some("n1"));
        assert_eq!(job.spec.as_ref().and_then(|s| s.backoff_limit), Some(3));
        assert_eq!(job.status.as_ref().and_then(|s| s.failed), Some(1));
        assert!(
            job.spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .is_some_and(|s| s.containers.is_empty())
        );
    }

    #[test]
    fn pods_keep_metadata_status_and_node() {
        let mut p = Pod {
            metadata: meta(),
            spec: Some(spec()),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..PodStatus::default()
            }),
        };
        pod(&mut p);
        assert!(p.metadata.managed_fields.is_none());
        assert_eq!(p.metadata.name.as_deref(), Some("x"));
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("n1")
        );
        assert!(p.spec.as_ref().is_some_and(|s| s.containers.is_empty()));
        assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Running"));
    }
}
