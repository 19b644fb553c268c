//! The pieces package and interrupt Jobs share: owner, labels, the agent's environment and copy
//! directory, images, tolerations, the main container, and the stage timeout.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, LocalObjectReference, PodSpec, PodTemplateSpec, ResourceRequirements,
    SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use nodewright_shared::api::{NodeWright, Package};
use nodewright_shared::deadline::parse_stage_timeout;
use nodewright_shared::defaulted;
use nodewright_shared::defaults::OperatorDefaults;
use nodewright_shared::keys;
use nodewright_shared::node_state::Stage;

use super::annotation::PackageAnnotation;
use super::config::JobConfig;
use super::error::JobBuildError;
use crate::naming;

/// Host root mount point inside the containers (agent contract: `/root`).
pub const ROOT_MOUNT_PATH: &str = "/root";
/// Node metadata ConfigMap mount (agent contract).
pub const NODE_METADATA_MOUNT_PATH: &str = "/skyhook-package/node-metadata";
/// Package ConfigMap mount (agent contract).
pub const CONFIGMAP_MOUNT_PATH: &str = "/skyhook-package/configmaps";
/// Volume: the host's `/`.
pub const ROOT_VOLUME: &str = "root-mount";
/// Volume: the node-metadata ConfigMap. A fixed name (upstream derived one from the node name): volume
/// names are pod-local, and a fixed one cannot collide with the package ConfigMap volume.
pub const NODE_METADATA_VOLUME: &str = "node-metadata";
/// Volume: the package ConfigMap. Upstream named it after the package, which could collide with the
/// two volumes above (`root-mount` is a valid package name); a fixed name cannot.
pub const PACKAGE_CONFIGMAP_VOLUME: &str = "package-configmap";
/// Value of the `nodewright.nvidia.com/interrupt` label on interrupt Jobs and their pods (upstream's).
pub const INTERRUPT_LABEL_VALUE: &str = "True";

/// The NodeWright fields a Job depends on, checked once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub name: String,
    pub uid: String,
    pub generation: i64,
    /// The packages whose `stageTimeout` is the default admission filled and nobody changed since:
    /// their Jobs get the operator's current default ([`nodewright_shared::defaulted`]).
    pub follows_default: BTreeSet<String>,
}

impl Owner {
    pub fn of(nodewright: &NodeWright) -> Result<Self, JobBuildError> {
        let meta = &nodewright.metadata;
        let name = meta.name.clone().filter(|n| !n.is_empty()).ok_or_else(|| {
            JobBuildError::MissingMetadata {
                nodewright: String::new(),
                field: "name",
            }
        })?;
        let missing = |field| JobBuildError::MissingMetadata {
            nodewright: name.clone(),
            field,
        };
        let uid = meta
            .uid
            .clone()
            .filter(|u| !u.is_empty())
            .ok_or_else(|| missing("uid"))?;
        let generation = meta.generation.ok_or_else(|| missing("generation"))?;
        Ok(Owner {
            name,
            uid,
            generation,
            follows_default: defaulted::following_default(nodewright),
        })
    }

    /// Controller reference: the Job is garbage-collected with its NodeWright, and the NodeWright's
    /// foreground deletion waits for it.
    pub fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: format!("{}/{}", keys::GROUP, keys::VERSION),
            kind: "NodeWright".to_owned(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// Host directory the package is copied to: `<COPY_DIR_ROOT>/<nw>/<pkg>-<ver>-<uid>-<generation>`
    /// (agent contract, upstream-operator.md §3.1).
    pub fn copy_dir(&self, config: &JobConfig, package: &str, version: &str) -> String {
        format!(
            "{}/{}-{version}-{}-{}",
            self.root_dir(config),
            package,
            self.uid,
            self.generation
        )
    }

    /// `SKYHOOK_ROOT_DIR`: `<COPY_DIR_ROOT>/<nw>`.
    fn root_dir(&self, config: &JobConfig) -> String {
        join_path(&config.copy_dir_root, &self.name)
    }

    /// The five agent variables, in upstream's order (agent contract, upstream-api.md §6).
    pub fn agent_env(
        &self,
        config: &JobConfig,
        package: &str,
        version: &str,
        node_order: i64,
    ) -> Vec<EnvVar> {
        vec![
            env(
                "SKYHOOK_LOG_DIR",
                join_path(&config.agent_log_root, &self.name),
            ),
            env("SKYHOOK_ROOT_DIR", self.root_dir(config)),
            env("COPY_RESOLV", "false".to_owned()),
            env(
                "SKYHOOK_RESOURCE_ID",
                format!(
                    "{}-{}-{}_{package}_{version}",
                    self.name, self.uid, self.generation
                ),
            ),
            env("SKYHOOK_NODE_ORDER", node_order.to_string()),
        ]
    }

    /// The package annotation JSON for `stage` of `package`.
    pub fn package_annotation(
        &self,
        package_name: &str,
        package: &Package,
        stage: Stage,
    ) -> Result<String, JobBuildError> {
        PackageAnnotation {
            name: package_name.to_owned(),
            version: package.version.clone(),
            nodewright: self.name.clone(),
            stage,
            image: package.image.clone(),
            container_sha: container_sha(package).map(str::to_owned),
        }
        .to_json()
        .map_err(|source| JobBuildError::Serialize {
            nodewright: self.name.clone(),
            package: package_name.to_owned(),
            what: "package annotation",
            source,
        })
    }

    /// Labels of the Job and its pods: name, package (`<pkg>-<ver>`), stage, node.
    pub fn labels(
        &self,
        package_name: &str,
        version: &str,
        stage: Stage,
        node: &str,
    ) -> BTreeMap<String, String> {
        BTreeMap::from([
            (keys::NAME_LABEL.to_owned(), self.name.clone()),
            (
                keys::PACKAGE_LABEL.to_owned(),
                naming::package_label_value(package_name, version),
            ),
            (keys::STAGE_LABEL.to_owned(), stage.as_str().to_owned()),
            (keys::NODE_LABEL.to_owned(), naming::label_value(node)),
        ])
    }

    /// The package's stage timeout: its `stageTimeout` when set, else the operator default; also
    /// the operator default when the value set is the one admission filled (so a changed
    /// `JOB_STAGE_TIMEOUT` reaches the next Job of every package that never chose its own). An
    /// unparseable or negative value is an error; a too-large one is accepted (and clamped by
    /// `stage_deadline`).
    pub fn stage_timeout(
        &self,
        package_name: &str,
        package: &Package,
        defaults: &OperatorDefaults,
    ) -> Result<Duration, JobBuildError> {
        match &package.stage_timeout {
            None => Ok(defaults.stage_timeout_duration),
            Some(_) if self.follows_default.contains(package_name) => {
                Ok(defaults.stage_timeout_duration)
            }
            Some(value) => {
                parse_stage_timeout(value).map_err(|source| JobBuildError::StageTimeout {
                    nodewright: self.name.clone(),
                    package: package_name.to_owned(),
                    value: value.clone(),
                    source: Box::new(source),
                })
            }
        }
    }
}

/// What differs between a package Job and an interrupt Job around the same host pod.
pub(crate) struct NodeJob {
    /// The Job's deterministic name.
    pub name: String,
    /// Labels of the Job and its pods.
    pub labels: BTreeMap<String, String>,
    /// The Job's annotations (the pods' plus the template hash).
    pub job_annotations: BTreeMap<String, String>,
    /// The pods' annotations.
    pub pod_annotations: BTreeMap<String, String>,
    /// The pod spec ([`host_pod_spec`] plus what the kind adds).
    pub pod_spec: PodSpec,
    /// The Job spec's own fields (backoff, deadline, failure policy); the template is set here.
    pub spec: JobSpec,
}

impl Owner {
    /// The Job: owned by the NodeWright (controller reference), in the operator namespace, one
    /// completion at a time, and a replacement pod only once the failed one is gone (two attempts
    /// never share the host copy directory, two interrupts never run on one node at once, and a
    /// terminating pod is not double-counted).
    pub fn job(&self, config: &JobConfig, parts: NodeJob) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some(parts.name),
                namespace: Some(config.namespace.clone()),
                labels: Some(parts.labels.clone()),
                annotations: Some(parts.job_annotations),
                owner_references: Some(vec![self.reference()]),
                ..ObjectMeta::default()
            },
            spec: Some(JobSpec {
                completions: Some(1),
                parallelism: Some(1),
                pod_replacement_policy: Some("Failed".to_owned()),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(parts.labels),
                        annotations: Some(parts.pod_annotations),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(parts.pod_spec),
                },
                ..parts.spec
            }),
            status: None,
        }
    }
}

/// The pod every NodeWright Job runs: pinned to its node, host PID and network, the pause container
/// after `init_containers`, the NodeWright's tolerations, the pull secret, and the package
/// ServiceAccount with no API token: a package runs as root on the host, it has no business with
/// the Kubernetes API, and a token mounted here would be readable by every package (DESIGN: safe by
/// default).
pub fn host_pod_spec(
    nodewright: &NodeWright,
    config: &JobConfig,
    node: &str,
    restart_policy: &str,
    init_containers: Vec<Container>,
    volumes: Vec<Volume>,
) -> PodSpec {
    PodSpec {
        node_name: Some(node.to_owned()),
        restart_policy: Some(restart_policy.to_owned()),
        host_pid: Some(true),
        host_network: Some(true),
        init_containers: Some(init_containers),
        containers: vec![pause_container(config)],
        volumes: Some(volumes),
        tolerations: Some(tolerations(nodewright, config)),
        image_pull_secrets: image_pull_secrets(config),
        automount_service_account_token: Some(false),
        service_account_name: service_account(config),
        ..PodSpec::default()
    }
}

fn env(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value),
        value_from: None,
    }
}

/// `root/child`, without doubling a trailing slash of `root`.
fn join_path(root: &str, child: &str) -> String {
    format!("{}/{child}", root.trim_end_matches('/'))
}

/// The package's digest, when it pins a non-empty one.
pub(crate) fn container_sha(package: &Package) -> Option<&str> {
    package.container_sha.as_deref().filter(|s| !s.is_empty())
}

/// The image the copy container runs: `image@containerSHA` when a digest is pinned, else
/// `image:version` (the version is the tag).
pub fn package_image_ref(package: &Package) -> String {
    match container_sha(package) {
        Some(sha) => format!("{}@{sha}", package.image),
        None => format!("{}:{}", package.image, package.version),
    }
}

/// The agent image for a package's containers: its `agentImageOverride`, else `AGENT_IMAGE`.
pub fn agent_image<'a>(package: &'a Package, config: &'a JobConfig) -> &'a str {
    package
        .agent_image_override
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or(&config.agent_image)
}

/// Every operator pod tolerates: a cordon (`node.kubernetes.io/unschedulable`, the node is cordoned
/// for the package's own interrupt), the runtime-required taint (the packages are what lifts it),
/// then the NodeWright's `additionalTolerations`.
pub fn tolerations(nodewright: &NodeWright, config: &JobConfig) -> Vec<Toleration> {
    let mut tolerations = vec![
        Toleration {
            key: Some("node.kubernetes.io/unschedulable".to_owned()),
            operator: Some("Exists".to_owned()),
            effect: Some("NoSchedule".to_owned()),
            value: None,
            toleration_seconds: None,
        },
        config.runtime_required_taint.toleration(),
    ];
    tolerations.extend(nodewright.spec.additional_tolerations.iter().cloned());
    tolerations
}

/// `serviceAccountName`: the configured rightless ServiceAccount, when there is one.
pub fn service_account(config: &JobConfig) -> Option<String> {
    config.service_account.clone().filter(|s| !s.is_empty())
}

/// `imagePullSecrets`: the configured secret, when there is one.
pub fn image_pull_secrets(config: &JobConfig) -> Option<Vec<LocalObjectReference>> {
    config
        .image_pull_secret
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|name| {
            vec![LocalObjectReference {
                name: name.to_owned(),
            }]
        })
}

/// Requests equal to limits (Guaranteed-style sizing for the operator's own containers).
pub fn fixed_resources(cpu: &str, memory: &str) -> ResourceRequirements {
    let list = BTreeMap::from([
        ("cpu".to_owned(), Quantity(cpu.to_owned())),
        ("memory".to_owned(), Quantity(memory.to_owned())),
    ]);
    ResourceRequirements {
        limits: Some(list.clone()),
        requests: Some(list),
        claims: None,
    }
}

/// The main container, `pause` with `PAUSE_IMAGE`, 100m/20Mi.
///
/// It runs `pause -v`, which prints the version and exits 0. Upstream's pause ran forever because
/// upstream deleted the pod itself once the init containers succeeded; a Job is only Complete when its
/// pod reaches Succeeded, which needs every container to terminate. `-v` keeps the configured image
/// (no new image to pull or mirror) and still makes the pod finish.
pub fn pause_container(config: &JobConfig) -> Container {
    Container {
        name: naming::PAUSE_CONTAINER_NAME.to_owned(),
        image: Some(config.pause_image.clone()),
        args: Some(vec!["-v".to_owned()]),
        resources: Some(fixed_resources("100m", "20Mi")),
        ..Container::default()
    }
}

/// Privileged: the agent chroots into the host and runs the package's steps there.
pub fn privileged() -> Option<SecurityContext> {
    Some(SecurityContext {
        privileged: Some(true),
        ..SecurityContext::default()
    })
}

/// The host's `/`.
pub fn root_volume() -> Volume {
    Volume {
        name: ROOT_VOLUME.to_owned(),
        host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
            path: "/".to_owned(),
            type_: None,
        }),
        ..Volume::default()
    }
}

/// `/root` ← the host's `/`, with host-to-container propagation so mounts the host makes later (a
/// package installing a driver that mounts something) are visible.
pub fn root_mount() -> VolumeMount {
    VolumeMount {
        name: ROOT_VOLUME.to_owned(),
        mount_path: ROOT_MOUNT_PATH.to_owned(),
        mount_propagation: Some("HostToContainer".to_owned()),
        ..VolumeMount::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_path_does_not_double_slashes() {
        assert_eq!(join_path("/var/lib/skyhook", "nw"), "/var/lib/skyhook/nw");
        assert_eq!(join_path("/var/lib/skyhook/", "nw"), "/var/lib/skyhook/nw");
    }

    #[test]
    fn image_refs() {
        let mut package = Package {
            image: "ghcr.io/x/dax".into(),
            version: "1.2.3".into(),
            ..Package::default()
        };
        assert_eq!(package_image_ref(&package), "ghcr.io/x/dax:1.2.3");
        package.container_sha = Some(String::new());
        assert_eq!(package_image_ref(&package), "ghcr.io/x/dax:1.2.3");
        package.container_sha = Some("sha256:abc".into());
        assert_eq!(package_image_ref(&package), "ghcr.io/x/dax@sha256:abc");
    }
}
