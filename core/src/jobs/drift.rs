//! Drift: when an unfinished package Job, or a timed-out one or timed-out interrupt Job, no longer
//! matches its package (DESIGN §4.4).
//!
//! The builder stores a hash of exactly what the package's pods run on the Job, and the reconciler
//! compares it with the hash of the current spec. In the hash: the images (package image reference and
//! effective agent image), the user env, the resources, and the content of the package ConfigMap.
//! Deliberately NOT in it:
//! - the NodeWright generation (it is in the agent's copy directory and resource id): an edit to one
//!   package must not kill the in-flight stages of every other package (DESIGN §9);
//! - `stageTimeout` and the backoff limit: they apply to the next Job only, so changing them never
//!   throws away an attempt in progress (documented in DESIGN §4.4);
//! - the node order, pause image and pull secret: they do not change what the package does.
//!
//! Upstream compared the pods' init containers field by field; a hash stored at creation makes the
//! check independent of what admission (LimitRange, defaulting) later adds to the pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use nodewright_shared::api::{Package, PackageResources};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::jobs::pod::{agent_image, package_image_ref};
use crate::jobs::{JobBuildError, JobConfig};
use crate::naming::hex;

/// Bumped whenever the hashed inputs change meaning, so old and new hashes never compare equal by
/// accident.
const HASH_SCHEMA: u32 = 1;

/// What the hash covers, in a fixed field order (serialised to JSON, then SHA-256).
#[derive(Serialize)]
struct TemplateInputs<'a> {
    schema: u32,
    package_image: String,
    agent_image: &'a str,
    env: &'a [EnvVar],
    #[serde(skip_serializing_if = "Option::is_none")]
    resources: Option<&'a PackageResources>,
    configmap: String,
}

/// `sha256:<hex>` of a ConfigMap's data (keys sorted, so insertion order never matters).
pub fn configmap_hash(data: &BTreeMap<String, String>) -> String {
    let mut hasher = Sha256::new();
    for (key, value) in data {
        hasher.update((key.len() as u64).to_le_bytes());
        hasher.update(key.as_bytes());
        hasher.update((value.len() as u64).to_le_bytes());
        hasher.update(value.as_bytes());
    }
    format!("sha256:{}", hex(&hasher.finalize()))
}

/// `sha256:<hex>` of what makes a package's running Job stale (see the module doc). `nodewright` and
/// `package_key` only name the package in an error.
pub fn package_template_hash(
    nodewright: &str,
    package_key: &str,
    package: &Package,
    config: &JobConfig,
) -> Result<String, JobBuildError> {
    let inputs = TemplateInputs {
        schema: HASH_SCHEMA,
        package_image: package_image_ref(package),
        agent_image: agent_image(package, config),
        env: &package.env,
        resources: package.resources.as_ref(),
        configmap: configmap_hash(&package.config_map),
    };
    let json = serde_json::to_vec(&inputs).map_err(|source| JobBuildError::Serialize {
        nodewright: nodewright.to_owned(),
        package: package_key.to_owned(),
        what: "drift hash inputs",
        source,
    })?;
    Ok(format!("sha256:{}", hex(&Sha256::digest(json))))
}

/// What the owner's interrupt Job hash covers: the owner package's [`package_template_hash`] and its
/// own `interrupt`.
#[derive(Serialize)]
struct InterruptInputs<'a> {
    schema: u32,
    package: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    interrupt: Option<&'a nodewright_shared::api::Interrupt>,
}

/// `sha256:<hex>` stored on an interrupt Job: what its owner package was when the Job was built.
/// Only a **timed-out** interrupt Job is compared with it (a running interrupt is never replaced: it
/// may be rebooting the node). A change of the owner package (its image, agent image, env,
/// resources, configMap, or its `interrupt`) then runs the interrupt again, as it does a package
/// stage (docs/timeouts.md).
pub fn interrupt_template_hash(
    nodewright: &str,
    owner_key: &str,
    owner: &Package,
    config: &JobConfig,
) -> Result<String, JobBuildError> {
    let inputs = InterruptInputs {
        schema: HASH_SCHEMA,
        package: package_template_hash(nodewright, owner_key, owner, config)?,
        interrupt: owner.interrupt.as_ref(),
    };
    let json = serde_json::to_vec(&inputs).map_err(|source| JobBuildError::Serialize {
        nodewright: nodewright.to_owned(),
        package: owner_key.to_owned(),
        what: "interrupt drift hash inputs",
        source,
    })?;
    Ok(format!("sha256:{}", hex(&Sha256::digest(json))))
}

/// Whether an unfinished Job must be deleted and recreated because its package changed. A Job without
/// the annotation counts as stale: every package Job this operator builds carries it, so one without
/// it predates the hash (or was edited) and cannot be shown to match.
pub fn is_stale(job: &crate::jobs::stored::StoredJob, desired_hash: &str) -> bool {
    job.template_hash
        .as_deref()
        .is_none_or(|current| current != desired_hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::stored::StoredJob;
    use crate::jobs::test_support::{config, nodewright, package};
    use crate::jobs::{PackageJobInput, build_package_job};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use nodewright_shared::keys::TEMPLATE_HASH_ANNOTATION;
    use nodewright_shared::node_state::Stage;

    fn hash(package: &Package, config: &JobConfig) -> String {
        package_template_hash("gpu", "dax", package, config).expect("hash")
    }

    fn job_for(package: &Package) -> Job {
        let nw = nodewright();
        let cfg = config();
        build_package_job(&PackageJobInput {
            nodewright: &nw,
            package_key: "dax",
            package,
            stage: Stage::Apply,
            node: "n",
            node_order: 0,
            config: &cfg,
        })
        .expect("job builds")
    }

    #[test]
    fn the_builder_stores_the_hash_and_an_unchanged_package_is_not_stale() {
        let pkg = package();
        let job = job_for(&pkg);
        let desired = hash(&pkg, &config());
        assert!(desired.starts_with("sha256:") && desired.len() == 7 + 64);
        assert!(!is_stale(&StoredJob::of(&job), &desired));
    }

    #[test]
    fn changes_that_make_a_job_stale() {
        let base = package();
        let job = job_for(&base);
        let cfg = config();
        let changed: Vec<(&str, Package)> = vec![
            (
                "image",
                Package {
                    image: "ghcr.io/other/dax".into(),
                    ..base.clone()
                },
            ),
            (
                "digest",
                Package {
                    container_sha: Some("sha256:abc".into()),
                    ..base.clone()
                },
            ),
            (
                "agent image",
                Package {
                    agent_image_override: Some("example.com/agent:2".into()),
                    ..base.clone()
                },
            ),
            (
                "env",
                Package {
                    env: vec![],
                    ..base.clone()
                },
            ),
            (
                "resources",
                Package {
                    resources: Some(PackageResources {
                        cpu_request: Some(Quantity("1".into())),
                        cpu_limit: Some(Quantity("1".into())),
                        memory_request: Some(Quantity("1Gi".into())),
                        memory_limit: Some(Quantity("1Gi".into())),
                    }),
                    ..base.clone()
                },
            ),
            (
                "configmap",
                Package {
                    config_map: BTreeMap::from([("a".into(), "1".into())]),
                    ..base.clone()
                },
            ),
        ];
        for (what, pkg) in changed {
            assert!(
                is_stale(&StoredJob::of(&job), &hash(&pkg, &cfg)),
                "{what} change not detected"
            );
        }
        // The operator's AGENT_IMAGE is an image too.
        let mut other_agent = config();
        other_agent.agent_image = "ghcr.io/nvidia/skyhook/agent:7.0.0".into();
        assert!(is_stale(&StoredJob::of(&job), &hash(&base, &other_agent)));
    }

    #[test]
    fn changes_that_do_not_make_a_job_stale() {
        let base = package();
        let job = job_for(&base);
        let same: Vec<(&str, Package)> = vec![
            (
                "stageTimeout",
                Package {
                    stage_timeout: Some("5m".into()),
                    ..base.clone()
                },
            ),
            (
                "gracefulShutdown",
                Package {
                    graceful_shutdown: Some("30s".into()),
                    ..base.clone()
                },
            ),
            (
                "dependsOn",
                Package {
                    depends_on: BTreeMap::from([("other".into(), "1.0.0".into())]),
                    ..base.clone()
                },
            ),
        ];
        for (what, pkg) in same {
            assert!(
                !is_stale(&StoredJob::of(&job), &hash(&pkg, &config())),
                "{what} made the job stale"
            );
        }
        // Backoff limit and a new NodeWright generation (an edit to another package).
        let mut cfg = config();
        cfg.defaults.backoff_limit = 9;
        assert!(!is_stale(&StoredJob::of(&job), &hash(&base, &cfg)));
        let mut nw = nodewright();
        nw.metadata.generation = Some(99);
        let newer = build_package_job(&PackageJobInput {
            nodewright: &nw,
            package_key: "dax",
            package: &base,
            stage: Stage::Apply,
            node: "n",
            node_order: 7,
            config: &config(),
        })
        .expect("job builds");
        assert_eq!(
            newer
                .metadata
                .annotations
                .and_then(|a| a.get(TEMPLATE_HASH_ANNOTATION).cloned()),
            job.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(TEMPLATE_HASH_ANNOTATION).cloned())
        );
    }

    #[test]
    fn a_job_without_the_annotation_is_stale() {
        assert!(is_stale(
            &StoredJob::default(),
            &hash(&package(), &config())
        ));
    }

    #[test]
    fn configmap_hash_is_content_based_and_unambiguous() {
        let a = BTreeMap::from([("ab".to_owned(), "c".to_owned())]);
        let b = BTreeMap::from([("a".to_owned(), "bc".to_owned())]);
        assert_ne!(configmap_hash(&a), configmap_hash(&b));
        assert_eq!(configmap_hash(&a), configmap_hash(&a.clone()));
        assert_ne!(configmap_hash(&BTreeMap::new()), configmap_hash(&a));
    }
}
