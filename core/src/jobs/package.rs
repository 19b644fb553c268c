//! The Job that runs one stage (apply, config, upgrade, uninstall, post-interrupt) of one package on one
//! node (DESIGN §4.1).
//!
//! The pod is upstream's package pod (upstream-operator.md §3.1) so the upstream agent and existing
//! packages keep working, with two changes that make each attempt a bounded, archivable unit:
//! `restartPolicy: Never` (a failed attempt is a Failed pod the Job controller replaces, up to
//! `backoffLimit`) and the pod's `activeDeadlineSeconds` from the package's `stageTimeout` (one
//! attempt, not the whole stage, is bounded; there is deliberately no Job-level deadline).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EnvVar, PodSpec, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use nodewright_shared::api::{NodeWright, Package, PackageResources};
use nodewright_shared::deadline::stage_deadline;
use nodewright_shared::duration::GoDuration;
use nodewright_shared::keys;
use nodewright_shared::node_state::Stage;

use super::config::JobConfig;
use super::drift;
use super::error::JobBuildError;
use super::pod::{self, Owner};
use crate::naming;

/// Everything a package-stage Job is built from.
#[derive(Debug, Clone, Copy)]
pub struct PackageJobInput<'a> {
    /// The NodeWright owning the package (read from the API server: it needs uid and generation).
    pub nodewright: &'a NodeWright,
    /// The package's key in `spec.packages` (its name).
    pub package_key: &'a str,
    /// The package.
    pub package: &'a Package,
    /// The stage to run; not an interrupt stage.
    pub stage: Stage,
    /// The node the Job is pinned to.
    pub node: &'a str,
    /// `SKYHOOK_NODE_ORDER`: the node's position in the rollout.
    pub node_order: i64,
    /// Operator configuration.
    pub config: &'a JobConfig,
}

/// Builds the Job for one package stage on one node.
///
/// `ttlSecondsAfterFinished` is left unset: the operator sets it only after recording the outcome, so
/// a Job is never garbage-collected before its result is in node state (DESIGN §4.4).
pub fn build_package_job(input: &PackageJobInput<'_>) -> Result<Job, JobBuildError> {
    let PackageJobInput {
        nodewright,
        package_key,
        package,
        stage,
        node,
        node_order,
        config,
    } = *input;
    let owner = Owner::of(nodewright)?;
    if stage.is_interrupt() {
        return Err(JobBuildError::NotAPackageStage {
            nodewright: owner.name,
            package: package_key.to_owned(),
            stage,
        });
    }
    let version = package.version.as_str();
    let timeout = owner.stage_timeout(package_key, package, &config.defaults)?;
    let grace = graceful_shutdown_seconds(&owner, package_key, package)?;
    let annotation = owner.package_annotation(package_key, package, stage)?;
    let template_hash = drift::package_template_hash(&owner.name, package_key, package, config)?;
    let labels = owner.labels(package_key, version, stage, node);

    let job_annotations = BTreeMap::from([
        (keys::PACKAGE_ANNOTATION.to_owned(), annotation.clone()),
        (keys::TEMPLATE_HASH_ANNOTATION.to_owned(), template_hash),
    ]);
    let pod_annotations = BTreeMap::from([(keys::PACKAGE_ANNOTATION.to_owned(), annotation)]);

    let copy_dir = owner.copy_dir(config, package_key, version);
    let has_configmap = !package.config_map.is_empty();
    let mounts = volume_mounts(has_configmap);
    let resources = package_resources(package.resources.as_ref());
    let mut agent_env = package.env.clone();
    agent_env.extend(owner.agent_env(config, package_key, version, node_order));
    let parts = PackagePod {
        package_key,
        package,
        config,
        copy_dir,
        mounts,
        resources,
    };
    let copy = parts.copy_container();
    let [run, check] = parts.stage_containers(stage, agent_env);

    let package_configmap =
        has_configmap.then(|| naming::package_configmap_name(&owner.name, package_key, version));
    let volumes = package_volumes(&owner.name, node, package_configmap);

    let pod_spec = PodSpec {
        active_deadline_seconds: stage_deadline(timeout).map(i64::from),
        termination_grace_period_seconds: grace,
        ..pod::host_pod_spec(
            nodewright,
            config,
            node,
            "Never",
            vec![copy, run, check],
            volumes,
        )
    };

    Ok(owner.job(
        config,
        pod::NodeJob {
            name: naming::package_job_name(&owner.name, package_key, version, stage, node),
            labels,
            job_annotations,
            pod_annotations,
            pod_spec,
            spec: JobSpec {
                backoff_limit: Some(config.defaults.backoff_limit),
                pod_failure_policy: Some(disruptions_spend_no_attempt()),
                ..JobSpec::default()
            },
        },
    ))
}

/// What the containers of a package-stage pod share: the package, where its files are copied on
/// the host, the mounts and the resources.
struct PackagePod<'a> {
    package_key: &'a str,
    package: &'a Package,
    config: &'a JobConfig,
    /// The package's directory under the host root (`SKYHOOK_DIR`).
    copy_dir: String,
    mounts: Vec<VolumeMount>,
    resources: Option<ResourceRequirements>,
}

impl PackagePod<'_> {
    /// The init container that copies the package image's files onto the host.
    fn copy_container(&self) -> Container {
        Container {
            name: naming::init_container_name(self.package_key),
            image: Some(pod::package_image_ref(self.package)),
            image_pull_policy: Some(self.config.image_pull_policy.clone()),
            command: Some(vec!["/bin/sh".to_owned()]),
            // `-f`: every stage after the first copies over the previous stage's copy, and the
            // ConfigMap volumes hold symlinks (`..data`, each key), which a plain `cp -r` refuses
            // to overwrite ("File exists"), failing every config/post-interrupt stage on a real
            // kubelet (upstream's `cp -r` has the same flaw). Symlinks stay symlinks (root_dir may
            // need them). The directory is quoted: it is built from the NodeWright, package and
            // version names, and unquoted, a character the shell splits on would copy somewhere
            // else on the host.
            args: Some(vec![
                "-c".to_owned(),
                "mkdir -p \"/root/${SKYHOOK_DIR}\" && cp -rf /skyhook-package/* \"/root/${SKYHOOK_DIR}\""
                    .to_owned(),
            ]),
            env: Some(vec![k8s_openapi::api::core::v1::EnvVar {
                name: "SKYHOOK_DIR".to_owned(),
                value: Some(self.copy_dir.clone()),
                value_from: None,
            }]),
            security_context: pod::privileged(),
            volume_mounts: Some(self.mounts.clone()),
            resources: self.resources.clone(),
            ..Container::default()
        }
    }

    /// The agent's two containers for `stage`: the stage itself, then its check (`<stage>-check`).
    fn stage_containers(&self, stage: Stage, env: Vec<EnvVar>) -> [Container; 2] {
        let image = pod::agent_image(self.package, self.config);
        let agent_container = |name: String, mode: String| Container {
            name,
            image: Some(image.to_owned()),
            image_pull_policy: Some(self.config.image_pull_policy.clone()),
            args: Some(vec![
                mode,
                pod::ROOT_MOUNT_PATH.to_owned(),
                self.copy_dir.clone(),
            ]),
            env: Some(env.clone()),
            security_context: pod::privileged(),
            volume_mounts: Some(self.mounts.clone()),
            resources: self.resources.clone(),
            ..Container::default()
        };
        [
            agent_container(
                naming::stage_container_name(self.package_key, stage),
                stage.as_str().to_owned(),
            ),
            agent_container(
                naming::check_container_name(self.package_key, stage),
                format!("{}-check", stage.as_str()),
            ),
        ]
    }
}

/// The one podFailurePolicy rule: a pod the cluster disrupted (preemption, eviction, node shutdown,
/// pod GC on a lost node) spends no attempt.
fn disruptions_spend_no_attempt() -> PodFailurePolicy {
    PodFailurePolicy {
        rules: vec![PodFailurePolicyRule {
            action: "Ignore".to_owned(),
            on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                type_: "DisruptionTarget".to_owned(),
                status: "True".to_owned(),
            }]),
            on_exit_codes: None,
        }],
    }
}

/// `/root` on every init container, the node metadata, and the package ConfigMap when it has one.
fn volume_mounts(has_configmap: bool) -> Vec<VolumeMount> {
    let mut mounts = vec![
        pod::root_mount(),
        VolumeMount {
            name: pod::NODE_METADATA_VOLUME.to_owned(),
            mount_path: pod::NODE_METADATA_MOUNT_PATH.to_owned(),
            ..VolumeMount::default()
        },
    ];
    if has_configmap {
        mounts.push(VolumeMount {
            name: pod::PACKAGE_CONFIGMAP_VOLUME.to_owned(),
            mount_path: pod::CONFIGMAP_MOUNT_PATH.to_owned(),
            ..VolumeMount::default()
        });
    }
    mounts
}

/// The host root, the node's metadata ConfigMap and, when the package has one, its own ConfigMap.
fn package_volumes(nodewright: &str, node: &str, package_configmap: Option<String>) -> Vec<Volume> {
    let mut volumes = vec![
        pod::root_volume(),
        configmap_volume(
            pod::NODE_METADATA_VOLUME,
            naming::node_metadata_configmap_name(nodewright, node),
        ),
    ];
    volumes.extend(
        package_configmap.map(|name| configmap_volume(pod::PACKAGE_CONFIGMAP_VOLUME, name)),
    );
    volumes
}

fn configmap_volume(volume: &str, configmap: String) -> Volume {
    Volume {
        name: volume.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: configmap,
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The package's resources on its three init containers, when it sets any; otherwise none, and the
/// namespace's LimitRange applies.
pub(crate) fn package_resources(
    resources: Option<&PackageResources>,
) -> Option<ResourceRequirements> {
    let r = resources?;
    let limits = quantities(r.cpu_limit.as_ref(), r.memory_limit.as_ref());
    let requests = quantities(r.cpu_request.as_ref(), r.memory_request.as_ref());
    (limits.is_some() || requests.is_some()).then_some(ResourceRequirements {
        limits,
        requests,
        claims: None,
    })
}

/// `{cpu, memory}` with the quantities that are set; `None` when neither is.
fn quantities(
    cpu: Option<&Quantity>,
    memory: Option<&Quantity>,
) -> Option<BTreeMap<String, Quantity>> {
    let list: BTreeMap<String, Quantity> = [("cpu", cpu), ("memory", memory)]
        .into_iter()
        .filter_map(|(name, q)| Some((name.to_owned(), q?.clone())))
        .collect();
    (!list.is_empty()).then_some(list)
}

/// `terminationGracePeriodSeconds` from `gracefulShutdown`: whole seconds, rounded up so the package
/// never gets less time than it asked for.
fn graceful_shutdown_seconds(
    owner: &Owner,
    package_key: &str,
    package: &Package,
) -> Result<Option<i64>, JobBuildError> {
    let Some(value) = package.graceful_shutdown.as_deref() else {
        return Ok(None);
    };
    let error = |reason: String| JobBuildError::GracefulShutdown {
        nodewright: owner.name.clone(),
        package: package_key.to_owned(),
        value: value.to_owned(),
        reason,
    };
    let duration = GoDuration::parse(value)
        .map_err(|e| error(format!("is not a duration ({e})")))?
        .to_std()
        .ok_or_else(|| error("is negative".to_owned()))?;
    let secs = duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0));
    Ok(Some(i64::try_from(secs).unwrap_or(i64::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::test_support::{config, nodewright, package};
    use k8s_openapi::api::core::v1::{EnvVar, Toleration};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn build(package: &Package, stage: Stage) -> Result<Job, JobBuildError> {
        let nw = nodewright();
        let cfg = config();
        build_package_job(&PackageJobInput {
            nodewright: &nw,
            package_key: "dax",
            package,
            stage,
            node: "node-1.example",
            node_order: 3,
            config: &cfg,
        })
    }

    fn pod_spec(job: &Job) -> PodSpec {
        job.spec
            .as_ref()
            .and_then(|s| s.template.spec.clone())
            .unwrap_or_default()
    }

    fn deadline_for(timeout: Option<&str>) -> (Option<i64>, Option<i64>) {
        let pkg = Package {
            stage_timeout: timeout.map(str::to_owned),
            ..package()
        };
        // A builder error must fail the test, not read as "no deadline".
        let job = build(&pkg, Stage::Apply)
            .unwrap_or_else(|e| panic!("stageTimeout {timeout:?} must build: {e}"));
        let spec = job.spec;
        (
            spec.as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|p| p.active_deadline_seconds),
            spec.and_then(|s| s.active_deadline_seconds),
        )
    }

    #[test]
    fn stage_timeout_bounds_the_pod_not_the_job() {
        assert_eq!(deadline_for(Some("90s")), (Some(90), None));
        assert_eq!(deadline_for(Some("1.5s")), (Some(2), None));
        assert_eq!(deadline_for(Some("0")), (None, None));
        assert_eq!(
            deadline_for(Some("596523h14m8s")),
            (Some(i64::from(i32::MAX)), None)
        );
        // Unset: the operator default (1h).
        assert_eq!(deadline_for(None), (Some(3600), None));
    }

    #[test]
    fn a_stage_timeout_admission_filled_follows_the_current_default() {
        // Admitted under JOB_STAGE_TIMEOUT=1h; the operator now runs with 2m.
        let mut cfg = config();
        cfg.defaults = nodewright_shared::defaults::OperatorDefaults::from_lookup(|var| {
            (var == "JOB_STAGE_TIMEOUT").then(|| "2m".to_owned())
        })
        .expect("defaults");
        let deadline = |stored: &str| {
            let pkg = Package {
                stage_timeout: Some(stored.to_owned()),
                ..package()
            };
            let mut nw = nodewright();
            nw.spec.packages.insert("dax".into(), pkg.clone());
            nw.metadata.annotations = Some(BTreeMap::from([(
                keys::DEFAULTED_STAGE_TIMEOUTS_ANNOTATION.to_owned(),
                r#"{"dax":"1h"}"#.to_owned(),
            )]));
            build_package_job(&PackageJobInput {
                nodewright: &nw,
                package_key: "dax",
                package: &pkg,
                stage: Stage::Apply,
                node: "node-1.example",
                node_order: 0,
                config: &cfg,
            })
            .map(|job| {
                job.spec
                    .and_then(|s| s.template.spec)
                    .and_then(|p| p.active_deadline_seconds)
            })
            .unwrap_or_else(|e| panic!("{e}"))
        };
        assert_eq!(deadline("1h"), Some(120), "unchanged since admission");
        assert_eq!(deadline("30m"), Some(1800), "set by the user since");
    }

    #[test]
    fn bad_stage_timeouts_are_errors_naming_the_package() {
        for bad in ["-5m", "soon", "30"] {
            let pkg = Package {
                stage_timeout: Some(bad.to_owned()),
                ..package()
            };
            let err = build(&pkg, Stage::Apply).err();
            assert!(
                matches!(&err, Some(JobBuildError::StageTimeout { package, value, .. }) if package == "dax" && value == bad),
                "{err:?}"
            );
            let msg = err.map(|e| e.to_string()).unwrap_or_default();
            assert!(
                msg.contains("dax") && msg.contains(bad) && msg.contains("gpu"),
                "{msg}"
            );
        }
    }

    #[test]
    fn job_metadata() {
        let job = build(&package(), Stage::Config);
        let job = job.expect("job builds");
        let meta = &job.metadata;
        assert_eq!(
            meta.name,
            Some(naming::package_job_name(
                "gpu",
                "dax",
                "1.2.3",
                Stage::Config,
                "node-1.example"
            ))
        );
        assert_eq!(meta.namespace.as_deref(), Some("nodewright"));
        let labels = BTreeMap::from([
            (keys::NAME_LABEL.to_owned(), "gpu".to_owned()),
            (keys::PACKAGE_LABEL.to_owned(), "dax-1.2.3".to_owned()),
            (keys::STAGE_LABEL.to_owned(), "config".to_owned()),
            (keys::NODE_LABEL.to_owned(), "node-1.example".to_owned()),
        ]);
        assert_eq!(meta.labels.as_ref(), Some(&labels));
        let annotations = meta.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations
                .get(keys::PACKAGE_ANNOTATION)
                .map(String::as_str),
            Some(
                r#"{"name":"dax","version":"1.2.3","nodewright":"gpu","stage":"config","image":"ghcr.io/nvidia/dax"}"#
            )
        );
        assert!(annotations.contains_key(keys::TEMPLATE_HASH_ANNOTATION));
        assert_eq!(annotations.len(), 2);
        assert_eq!(
            meta.owner_references,
            Some(vec![OwnerReference {
                api_version: "nodewright.nvidia.com/v1alpha1".into(),
                kind: "NodeWright".into(),
                name: "gpu".into(),
                uid: "0b6c2a5e-uid".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }])
        );
        // The pods carry the same labels and the package annotation (the live path reads them).
        let template_meta = job
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.clone())
            .unwrap_or_default();
        assert_eq!(template_meta.labels.as_ref(), Some(&labels));
        assert_eq!(
            template_meta
                .annotations
                .and_then(|a| a.get(keys::PACKAGE_ANNOTATION).cloned()),
            annotations.get(keys::PACKAGE_ANNOTATION).cloned()
        );
    }

    #[test]
    fn annotation_carries_the_digest_when_pinned() {
        let pkg = Package {
            container_sha: Some("sha256:abc".into()),
            ..package()
        };
        let job = build(&pkg, Stage::Apply).expect("job builds");
        let value = job
            .metadata
            .annotations
            .and_then(|a| a.get(keys::PACKAGE_ANNOTATION).cloned());
        assert_eq!(
            value.as_deref(),
            Some(
                r#"{"name":"dax","version":"1.2.3","nodewright":"gpu","stage":"apply","image":"ghcr.io/nvidia/dax","containerSHA":"sha256:abc"}"#
            )
        );
    }

    #[test]
    fn job_spec() {
        let job = build(&package(), Stage::Apply).expect("job builds");
        let spec = job.spec.unwrap_or_default();
        assert_eq!(spec.completions, Some(1));
        assert_eq!(spec.parallelism, Some(1));
        assert_eq!(spec.backoff_limit, Some(3));
        assert_eq!(spec.pod_replacement_policy.as_deref(), Some("Failed"));
        assert_eq!(
            spec.pod_failure_policy,
            Some(PodFailurePolicy {
                rules: vec![PodFailurePolicyRule {
                    action: "Ignore".into(),
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: "DisruptionTarget".into(),
                        status: "True".into(),
                    }]),
                    on_exit_codes: None,
                }],
            })
        );
        assert_eq!(spec.active_deadline_seconds, None);
        assert_eq!(spec.ttl_seconds_after_finished, None);
        assert_eq!(spec.suspend, None);
        assert_eq!(spec.selector, None);
        assert_eq!(spec.manual_selector, None);
        assert_eq!(spec.completion_mode, None);
        assert_eq!(spec.success_policy, None);
        assert_eq!(spec.backoff_limit_per_index, None);
    }

    #[test]
    fn backoff_limit_comes_from_the_defaults() {
        let nw = nodewright();
        let mut cfg = config();
        cfg.defaults.backoff_limit = 7;
        let pkg = package();
        let job = build_package_job(&PackageJobInput {
            nodewright: &nw,
            package_key: "dax",
            package: &pkg,
            stage: Stage::Apply,
            node: "n",
            node_order: 0,
            config: &cfg,
        });
        assert_eq!(
            job.ok().and_then(|j| j.spec).and_then(|s| s.backoff_limit),
            Some(7)
        );
    }

    #[test]
    fn pod_spec_shape() {
        let job = build(&package(), Stage::PostInterrupt).expect("job builds");
        let spec = pod_spec(&job);
        assert_eq!(spec.node_name.as_deref(), Some("node-1.example"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.host_pid, Some(true));
        assert_eq!(spec.host_network, Some(true));
        assert_eq!(spec.active_deadline_seconds, Some(3600));
        assert_eq!(spec.termination_grace_period_seconds, None);
        assert_eq!(spec.image_pull_secrets, None);
        assert_eq!(
            spec.tolerations,
            Some(vec![
                Toleration {
                    key: Some("node.kubernetes.io/unschedulable".into()),
                    operator: Some("Exists".into()),
                    effect: Some("NoSchedule".into()),
                    value: None,
                    toleration_seconds: None,
                },
                Toleration {
                    key: Some("nodewright.nvidia.com".into()),
                    operator: Some("Equal".into()),
                    value: Some("runtime-required".into()),
                    effect: Some("NoSchedule".into()),
                    toleration_seconds: None,
                },
                Toleration {
                    key: Some("dedicated".into()),
                    operator: Some("Equal".into()),
                    value: Some("gpu".into()),
                    effect: Some("NoSchedule".into()),
                    toleration_seconds: None,
                },
            ])
        );
        // Main container: pause, exits 0 so the pod can succeed, 100m/20Mi requests = limits.
        assert_eq!(spec.containers.len(), 1);
        let pause = &spec.containers[0];
        assert_eq!(pause.name, "pause");
        assert_eq!(pause.image.as_deref(), Some("registry.k8s.io/pause:3.10"));
        assert_eq!(pause.args, Some(vec!["-v".to_owned()]));
        assert_eq!(pause.resources, Some(pod::fixed_resources("100m", "20Mi")));
        let res = pause.resources.clone().unwrap_or_default();
        assert_eq!(res.limits, res.requests);
        assert_eq!(
            res.limits.and_then(|l| l.get("cpu").cloned()),
            Some(Quantity("100m".into()))
        );
    }

    #[test]
    fn init_containers_follow_the_agent_contract() {
        let job = build(&package(), Stage::PostInterrupt).expect("job builds");
        let spec = pod_spec(&job);
        let inits = spec.init_containers.unwrap_or_default();
        let names: Vec<_> = inits.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["dax-init", "dax-post-interrupt", "dax-post-interruptcheck"]
        );
        let copy_dir = "/var/lib/skyhook/gpu/dax-1.2.3-0b6c2a5e-uid-4";

        let copy = &inits[0];
        assert_eq!(copy.image.as_deref(), Some("ghcr.io/nvidia/dax:1.2.3"));
        assert_eq!(copy.image_pull_policy.as_deref(), Some("Always"));
        assert_eq!(copy.command, Some(vec!["/bin/sh".to_owned()]));
        assert_eq!(
            copy.args,
            Some(vec![
                "-c".to_owned(),
                "mkdir -p \"/root/${SKYHOOK_DIR}\" && cp -rf /skyhook-package/* \"/root/${SKYHOOK_DIR}\""
                    .to_owned()
            ])
        );
        assert_eq!(
            copy.env,
            Some(vec![EnvVar {
                name: "SKYHOOK_DIR".into(),
                value: Some(copy_dir.into()),
                value_from: None
            }])
        );

        let expected_env = vec![
            EnvVar {
                name: "USER_VAR".into(),
                value: Some("x".into()),
                value_from: None,
            },
            env("SKYHOOK_LOG_DIR", "/var/log/skyhook/gpu"),
            env("SKYHOOK_ROOT_DIR", "/var/lib/skyhook/gpu"),
            env("COPY_RESOLV", "false"),
            env("SKYHOOK_RESOURCE_ID", "gpu-0b6c2a5e-uid-4_dax_1.2.3"),
            env("SKYHOOK_NODE_ORDER", "3"),
        ];
        for (container, mode) in [
            (&inits[1], "post-interrupt"),
            (&inits[2], "post-interrupt-check"),
        ] {
            assert_eq!(
                container.image.as_deref(),
                Some("ghcr.io/nvidia/skyhook/agent:6.2.0")
            );
            assert_eq!(container.image_pull_policy.as_deref(), Some("Always"));
            assert_eq!(container.command, None);
            assert_eq!(
                container.args,
                Some(vec![
                    mode.to_owned(),
                    "/root".to_owned(),
                    copy_dir.to_owned()
                ])
            );
            assert_eq!(container.env.as_ref(), Some(&expected_env));
        }
        for container in &inits {
            assert_eq!(
                container
                    .security_context
                    .as_ref()
                    .and_then(|s| s.privileged),
                Some(true)
            );
            assert_eq!(container.resources, None, "no package resources set");
            let mounts: Vec<_> = container
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| {
                    (
                        m.name.as_str(),
                        m.mount_path.as_str(),
                        m.mount_propagation.as_deref(),
                    )
                })
                .collect();
            assert_eq!(
                mounts,
                [
                    ("root-mount", "/root", Some("HostToContainer")),
                    ("node-metadata", "/skyhook-package/node-metadata", None),
                ]
            );
        }
    }

    fn env(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    /// Every stage's pod runs as the configured rightless ServiceAccount.
    #[test]
    fn package_pods_run_as_the_configured_service_account() {
        let nw = nodewright();
        let cfg = JobConfig {
            service_account: Some("nw-packages".into()),
            ..config()
        };
        for stage in [Stage::Apply, Stage::Config, Stage::Uninstall] {
            let job = build_package_job(&PackageJobInput {
                nodewright: &nw,
                package_key: "dax",
                package: &package(),
                stage,
                node: "n",
                node_order: 0,
                config: &cfg,
            })
            .expect("job builds");
            let spec = pod_spec(&job);
            assert_eq!(
                spec.service_account_name.as_deref(),
                Some("nw-packages"),
                "{stage:?}"
            );
        }
        assert_eq!(
            pod_spec(&build(&package(), Stage::Apply).expect("job builds")).service_account_name,
            None
        );
    }

    #[test]
    fn package_pods_mount_no_api_token_and_quote_the_copy_directory() {
        let job = build(&package(), Stage::Apply).expect("job builds");
        let spec = pod_spec(&job);
        assert_eq!(spec.automount_service_account_token, Some(false));
        let args = spec.init_containers.unwrap_or_default()[0]
            .args
            .clone()
            .unwrap_or_default();
        assert!(
            args.iter().any(|a| a.contains("\"/root/${SKYHOOK_DIR}\"")),
            "{args:?}"
        );
    }

    #[test]
    fn volumes_without_and_with_a_configmap() {
        let job = build(&package(), Stage::Apply).expect("job builds");
        let volumes = pod_spec(&job).volumes.unwrap_or_default();
        assert_eq!(volumes.len(), 2);
        assert_eq!(volumes[0].name, "root-mount");
        assert_eq!(
            volumes[0].host_path.as_ref().map(|h| h.path.as_str()),
            Some("/")
        );
        assert_eq!(volumes[1].name, "node-metadata");
        assert_eq!(
            volumes[1].config_map.as_ref().map(|c| c.name.as_str()),
            Some("gpu-node-1-example-metadata-44fed90a9d4b")
        );

        let pkg = Package {
            config_map: BTreeMap::from([("a.conf".into(), "x".into())]),
            ..package()
        };
        let job = build(&pkg, Stage::Config).expect("job builds");
        let spec = pod_spec(&job);
        let volumes = spec.volumes.unwrap_or_default();
        assert_eq!(volumes.len(), 3);
        assert_eq!(volumes[2].name, "package-configmap");
        assert_eq!(
            volumes[2].config_map.as_ref().map(|c| c.name.as_str()),
            Some("gpu-dax-1-2-3-80cec697f805")
        );
        for container in spec.init_containers.unwrap_or_default() {
            let mounts: Vec<_> = container
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| (m.name.as_str(), m.mount_path.as_str()))
                .collect();
            assert_eq!(
                mounts,
                [
                    ("root-mount", "/root"),
                    ("node-metadata", "/skyhook-package/node-metadata"),
                    ("package-configmap", "/skyhook-package/configmaps"),
                ]
            );
        }
    }

    #[test]
    fn package_resources_go_on_the_three_init_containers() {
        let pkg = Package {
            resources: Some(PackageResources {
                cpu_request: Some(Quantity("250m".into())),
                cpu_limit: Some(Quantity("500m".into())),
                memory_request: Some(Quantity("256Mi".into())),
                memory_limit: Some(Quantity("512Mi".into())),
            }),
            ..package()
        };
        let job = build(&pkg, Stage::Apply).expect("job builds");
        let spec = pod_spec(&job);
        let expected = ResourceRequirements {
            limits: Some(BTreeMap::from([
                ("cpu".into(), Quantity("500m".into())),
                ("memory".into(), Quantity("512Mi".into())),
            ])),
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("250m".into())),
                ("memory".into(), Quantity("256Mi".into())),
            ])),
            claims: None,
        };
        let inits = spec.init_containers.unwrap_or_default();
        assert_eq!(inits.len(), 3);
        for c in &inits {
            assert_eq!(c.resources.as_ref(), Some(&expected), "{}", c.name);
        }
        // The main container keeps its own sizing.
        assert_eq!(
            spec.containers[0].resources,
            Some(pod::fixed_resources("100m", "20Mi"))
        );
        // An empty resources object sets nothing.
        assert_eq!(package_resources(Some(&PackageResources::default())), None);
    }

    #[test]
    fn agent_image_override_pull_secret_and_grace_period() {
        let nw = nodewright();
        let mut cfg = config();
        cfg.image_pull_secret = Some("regcred".into());
        let pkg = Package {
            agent_image_override: Some("example.com/agent:7".into()),
            graceful_shutdown: Some("1m30.5s".into()),
            container_sha: Some("sha256:feed".into()),
            ..package()
        };
        let job = build_package_job(&PackageJobInput {
            nodewright: &nw,
            package_key: "dax",
            package: &pkg,
            stage: Stage::Upgrade,
            node: "n",
            node_order: 0,
            config: &cfg,
        })
        .expect("job builds");
        let spec = pod_spec(&job);
        assert_eq!(
            spec.image_pull_secrets,
            Some(vec![k8s_openapi::api::core::v1::LocalObjectReference {
                name: "regcred".into()
            }])
        );
        assert_eq!(spec.termination_grace_period_seconds, Some(91));
        let inits = spec.init_containers.unwrap_or_default();
        assert_eq!(
            inits[0].image.as_deref(),
            Some("ghcr.io/nvidia/dax@sha256:feed")
        );
        assert_eq!(inits[1].image.as_deref(), Some("example.com/agent:7"));
        assert_eq!(inits[2].image.as_deref(), Some("example.com/agent:7"));
    }

    #[test]
    fn bad_graceful_shutdown_is_an_error() {
        for bad in ["-1s", "later"] {
            let pkg = Package {
                graceful_shutdown: Some(bad.into()),
                ..package()
            };
            let err = build(&pkg, Stage::Apply).err();
            assert!(
                matches!(&err, Some(JobBuildError::GracefulShutdown { package, value, .. }) if package == "dax" && value == bad),
                "{err:?}"
            );
        }
    }

    #[test]
    fn interrupt_stages_are_refused() {
        for stage in [Stage::Interrupt, Stage::UninstallInterrupt] {
            let err = build(&package(), stage).err();
            assert!(
                matches!(err, Some(JobBuildError::NotAPackageStage { stage: s, .. }) if s == stage),
                "{err:?}"
            );
        }
    }

    #[test]
    fn every_package_stage_builds_with_its_own_name() {
        let names: std::collections::BTreeSet<_> = [
            Stage::Apply,
            Stage::Config,
            Stage::PostInterrupt,
            Stage::Upgrade,
            Stage::Uninstall,
        ]
        .into_iter()
        .filter_map(|s| build(&package(), s).ok())
        .filter_map(|j| j.metadata.name)
        .collect();
        assert_eq!(names.len(), 5);
        assert!(names.iter().all(|n| naming::is_dns_label(n)));
    }

    #[test]
    fn missing_metadata_is_an_error() {
        let mut nw = nodewright();
        nw.metadata.uid = None;
        let cfg = config();
        let pkg = package();
        let err = build_package_job(&PackageJobInput {
            nodewright: &nw,
            package_key: "dax",
            package: &pkg,
            stage: Stage::Apply,
            node: "n",
            node_order: 0,
            config: &cfg,
        })
        .err();
        assert!(
            matches!(
                err,
                Some(JobBuildError::MissingMetadata { field: "uid", .. })
            ),
            "{err:?}"
        );
    }

    #[test]
    fn long_node_names_still_make_valid_labels() {
        let nw = nodewright();
        let cfg = config();
        let pkg = package();
        let node = format!("{}.compute.internal", "x".repeat(80));
        let job = build_package_job(&PackageJobInput {
            nodewright: &nw,
            package_key: "dax",
            package: &pkg,
            stage: Stage::Apply,
            node: &node,
            node_order: 0,
            config: &cfg,
        })
        .expect("job builds");
        let labels = job.metadata.labels.unwrap_or_default();
        let value = labels.get(keys::NODE_LABEL).cloned().unwrap_or_default();
        assert!(
            naming::is_label_value(&value) && !value.is_empty(),
            "{value}"
        );
        assert_eq!(value, naming::label_value(&node));
        assert_eq!(
            pod_spec_node(&job_spec_of(&nw, &cfg, &pkg, &node)),
            Some(node)
        );
    }

    fn job_spec_of(nw: &NodeWright, cfg: &JobConfig, pkg: &Package, node: &str) -> Job {
        build_package_job(&PackageJobInput {
            nodewright: nw,
            package_key: "dax",
            package: pkg,
            stage: Stage::Apply,
            node,
            node_order: 0,
            config: cfg,
        })
        .expect("job builds")
    }

    fn pod_spec_node(job: &Job) -> Option<String> {
        pod_spec(job).node_name
    }
}
