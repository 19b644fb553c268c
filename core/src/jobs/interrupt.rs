//! The merged, node-wide interrupt Job (stages interrupt and uninstall-interrupt, DESIGN §4.2), and the
//! merging of the interrupts of several packages into one (upstream-operator.md §4.3).
//!
//! Unlike package Jobs, the interrupt keeps upstream's `restartPolicy: OnFailure`: a reboot kills its
//! own pod, and the proven recovery is the in-place restart after the node returns (the agent finds its
//! flag and exits 0). Hence `backoffLimit: i32::MAX` (those restarts would spend a finite budget), no
//! podFailurePolicy (the API requires `Never` for it), and the bound on the whole stage, reboot
//! included, is the Job-level `activeDeadlineSeconds`.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::Container;
use nodewright_shared::api::{Interrupt, InterruptType, NodeWright, Package};
use nodewright_shared::deadline::stage_deadline;
use nodewright_shared::keys;
use nodewright_shared::node_state::Stage;
use serde::Serialize;

use super::config::JobConfig;
use super::error::JobBuildError;
use super::pod::{self, Owner};
use crate::naming;

/// The interrupt a node gets when several packages want one, and the package that owns it (the
/// others' entries are `skipped` and complete when the owner's interrupt does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedInterrupt {
    /// The package whose interrupt won.
    pub owner: String,
    /// The merged interrupt (for `service`, the union of every merged package's services, sorted).
    pub interrupt: Interrupt,
}

/// Merge priority: lower is more disruptive and wins.
const fn priority(kind: InterruptType) -> u8 {
    match kind {
        InterruptType::Reboot => 0,
        InterruptType::RestartAllServices => 1,
        InterruptType::Service => 2,
        InterruptType::Noop => 3,
    }
}

/// Merges candidate `(package, interrupt)` pairs into one interrupt (upstream's
/// `fudgeInterruptWithPriority`): candidates are taken in package-name order (a package may offer
/// several, e.g. matched configInterrupts, kept in the given order); reboot > restartAllServices >
/// service > noop; on a tie the earlier package keeps ownership, and equal `service` interrupts merge
/// their service lists (union, sorted). A reboot ends the walk: nothing can outrank it. `None` when
/// there is no candidate.
pub fn merge_interrupts<'a>(
    candidates: impl IntoIterator<Item = (&'a str, &'a Interrupt)>,
) -> Option<MergedInterrupt> {
    let mut candidates: Vec<(&str, &Interrupt)> = candidates.into_iter().collect();
    candidates.sort_by(|a, b| a.0.cmp(b.0));
    let mut merged: Option<MergedInterrupt> = None;
    for (package, interrupt) in candidates {
        match merged.as_mut() {
            None => {
                merged = Some(MergedInterrupt {
                    owner: package.to_owned(),
                    interrupt: interrupt.clone(),
                })
            }
            Some(current) if priority(interrupt.kind) < priority(current.interrupt.kind) => {
                *current = MergedInterrupt {
                    owner: package.to_owned(),
                    interrupt: interrupt.clone(),
                };
            }
            Some(current)
                if interrupt.kind == InterruptType::Service
                    && current.interrupt.kind == InterruptType::Service =>
            {
                current
                    .interrupt
                    .services
                    .extend(interrupt.services.iter().cloned());
            }
            Some(_) => {}
        }
        if merged
            .as_ref()
            .is_some_and(|m| m.interrupt.kind == InterruptType::Reboot)
        {
            break;
        }
    }
    merged.map(|mut m| {
        m.interrupt.services.sort();
        m.interrupt.services.dedup();
        m
    })
}

/// The agent's JSON for an interrupt: `{"type": <agent name>[, "services": [...]]}`.
#[derive(Serialize)]
struct AgentInterrupt<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    services: &'a [String],
}

/// The agent's interrupt argument: base64 (standard alphabet, padded) of
/// `{"type": "node_restart"|"service_restart"|"restart_all_services"|"no_op"[, "services": [...]]}`,
/// as upstream's `Interrupt.ToArgs`.
pub fn interrupt_argument(interrupt: &Interrupt) -> Result<String, serde_json::Error> {
    let json = serde_json::to_vec(&AgentInterrupt {
        kind: interrupt.kind.agent_name(),
        services: &interrupt.services,
    })?;
    Ok(base64::engine::general_purpose::STANDARD.encode(json))
}

/// Everything the interrupt Job of a node is built from.
#[derive(Debug, Clone, Copy)]
pub struct InterruptJobInput<'a> {
    /// The NodeWright (read from the API server).
    pub nodewright: &'a NodeWright,
    /// The package owning the merged interrupt ([`MergedInterrupt::owner`]).
    pub owner_key: &'a str,
    /// That package, as the spec has it, or as it was when an uninstall-interrupt runs for a package
    /// already removed from the spec. Its `stageTimeout` bounds the Job; its agent image runs it.
    pub owner: &'a Package,
    /// The merged interrupt to run.
    pub interrupt: &'a Interrupt,
    /// `interrupt` or `uninstall-interrupt`.
    pub stage: Stage,
    /// The node.
    pub node: &'a str,
    /// `SKYHOOK_NODE_ORDER`.
    pub node_order: i64,
    /// Operator configuration.
    pub config: &'a JobConfig,
}

/// Builds the node's interrupt Job.
pub fn build_interrupt_job(input: &InterruptJobInput<'_>) -> Result<Job, JobBuildError> {
    let InterruptJobInput {
        nodewright,
        owner_key,
        owner: package,
        interrupt,
        stage,
        node,
        node_order,
        config,
    } = *input;
    let owner = Owner::of(nodewright)?;
    if !stage.is_interrupt() {
        return Err(JobBuildError::NotAnInterruptStage {
            nodewright: owner.name,
            package: owner_key.to_owned(),
            stage,
        });
    }
    let version = package.version.as_str();
    let timeout = owner.stage_timeout(owner_key, package, &config.defaults)?;
    let annotation = owner.package_annotation(owner_key, package, stage)?;
    let argument = interrupt_argument(interrupt).map_err(|source| JobBuildError::Serialize {
        nodewright: owner.name.clone(),
        package: owner_key.to_owned(),
        what: "interrupt argument",
        source,
    })?;
    let mut labels = owner.labels(owner_key, version, stage, node);
    labels.insert(
        keys::INTERRUPT_LABEL.to_owned(),
        pod::INTERRUPT_LABEL_VALUE.to_owned(),
    );
    let template_hash =
        super::drift::interrupt_template_hash(&owner.name, owner_key, package, config)?;
    let annotations = BTreeMap::from([(keys::PACKAGE_ANNOTATION.to_owned(), annotation)]);
    let mut job_annotations = annotations.clone();
    job_annotations.insert(keys::TEMPLATE_HASH_ANNOTATION.to_owned(), template_hash);

    // The agent's mode is `interrupt` for both interrupt stages (upstream's contract).
    let container = Container {
        name: naming::INTERRUPT_CONTAINER_NAME.to_owned(),
        image: Some(pod::agent_image(package, config).to_owned()),
        image_pull_policy: Some(config.image_pull_policy.clone()),
        args: Some(vec![
            "interrupt".to_owned(),
            pod::ROOT_MOUNT_PATH.to_owned(),
            owner.copy_dir(config, owner_key, version),
            argument,
        ]),
        // Only the agent's variables: an interrupt is not the package's code.
        env: Some(owner.agent_env(config, owner_key, version, node_order)),
        security_context: pod::privileged(),
        volume_mounts: Some(vec![pod::root_mount()]),
        resources: Some(pod::fixed_resources("500m", "64Mi")),
        ..Container::default()
    };

    // Upstream also declared an unused node-metadata ConfigMap volume here, under a name that did not
    // match the real ConfigMap; it is left out (a missing ConfigMap volume can hold a pod in
    // ContainerCreating).
    let pod_spec = pod::host_pod_spec(
        nodewright,
        config,
        node,
        "OnFailure",
        vec![container],
        vec![pod::root_volume()],
    );

    Ok(owner.job(
        config,
        pod::NodeJob {
            name: naming::interrupt_job_name(&owner.name, node),
            labels,
            job_annotations,
            pod_annotations: annotations,
            pod_spec,
            spec: JobSpec {
                backoff_limit: Some(i32::MAX),
                active_deadline_seconds: stage_deadline(timeout).map(i64::from),
                ..JobSpec::default()
            },
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::test_support::{config, nodewright, package};
    use k8s_openapi::api::core::v1::EnvVar;

    fn service(services: &[&str]) -> Interrupt {
        Interrupt {
            kind: InterruptType::Service,
            services: services.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn of(kind: InterruptType) -> Interrupt {
        Interrupt {
            kind,
            services: vec![],
        }
    }

    #[test]
    fn merging_nothing_is_nothing() {
        assert_eq!(merge_interrupts(std::iter::empty()), None);
    }

    #[test]
    fn services_merge_sorted_under_the_first_package() {
        // upstream e2e: dax (containerd, foobar) + zeb (cron) => one interrupt for dax.
        let dax = service(&["foobar", "containerd"]);
        let zeb = service(&["cron", "containerd"]);
        let merged = merge_interrupts([("zeb", &zeb), ("dax", &dax)]);
        assert_eq!(
            merged,
            Some(MergedInterrupt {
                owner: "dax".into(),
                interrupt: service(&["containerd", "cron", "foobar"]),
            })
        );
    }

    #[test]
    fn most_disruptive_wins() {
        let noop = of(InterruptType::Noop);
        let svc = service(&["a"]);
        let all = of(InterruptType::RestartAllServices);
        let reboot = of(InterruptType::Reboot);
        let merged = merge_interrupts([("a", &noop), ("b", &svc), ("c", &all), ("d", &reboot)]);
        assert_eq!(
            merged.map(|m| (m.owner, m.interrupt.kind)),
            Some(("d".into(), InterruptType::Reboot))
        );
        let merged = merge_interrupts([("a", &noop), ("b", &svc), ("c", &all)]);
        assert_eq!(
            merged.map(|m| (m.owner, m.interrupt.kind)),
            Some(("c".into(), InterruptType::RestartAllServices))
        );
        let merged = merge_interrupts([("z", &svc), ("a", &noop)]);
        assert_eq!(
            merged.map(|m| (m.owner, m.interrupt)),
            Some(("z".into(), service(&["a"])))
        );
    }

    #[test]
    fn ties_go_to_the_first_package_by_name() {
        let reboot = of(InterruptType::Reboot);
        let merged = merge_interrupts([("b", &reboot), ("a", &reboot), ("c", &reboot)]);
        assert_eq!(merged.map(|m| m.owner), Some("a".into()));
        let noop = of(InterruptType::Noop);
        let merged = merge_interrupts([("y", &noop), ("x", &noop)]);
        assert_eq!(merged.map(|m| m.owner), Some("x".into()));
    }

    #[test]
    fn services_are_not_merged_into_a_more_disruptive_winner() {
        let all = of(InterruptType::RestartAllServices);
        let svc = service(&["cron"]);
        let merged = merge_interrupts([("a", &svc), ("b", &all)]);
        assert_eq!(
            merged,
            Some(MergedInterrupt {
                owner: "b".into(),
                interrupt: of(InterruptType::RestartAllServices)
            })
        );
    }

    #[test]
    fn agent_argument_matches_upstream() {
        let decode = |s: String| {
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
        };
        assert_eq!(
            interrupt_argument(&of(InterruptType::Reboot))
                .ok()
                .and_then(decode)
                .as_deref(),
            Some(r#"{"type":"node_restart"}"#)
        );
        assert_eq!(
            interrupt_argument(&service(&["containerd", "cron"]))
                .ok()
                .and_then(decode)
                .as_deref(),
            Some(r#"{"type":"service_restart","services":["containerd","cron"]}"#)
        );
        assert_eq!(
            interrupt_argument(&of(InterruptType::Noop))
                .ok()
                .and_then(decode)
                .as_deref(),
            Some(r#"{"type":"no_op"}"#)
        );
        assert_eq!(
            interrupt_argument(&of(InterruptType::RestartAllServices))
                .ok()
                .and_then(decode)
                .as_deref(),
            Some(r#"{"type":"restart_all_services"}"#)
        );
        // Exact upstream encoding of {"type":"node_restart"}.
        assert_eq!(
            interrupt_argument(&of(InterruptType::Reboot))
                .ok()
                .as_deref(),
            Some("eyJ0eXBlIjoibm9kZV9yZXN0YXJ0In0=")
        );
    }

    fn build(owner: &Package, stage: Stage) -> Result<Job, JobBuildError> {
        let nw = nodewright();
        let cfg = config();
        let interrupt = service(&["containerd"]);
        build_interrupt_job(&InterruptJobInput {
            nodewright: &nw,
            owner_key: "dax",
            owner,
            interrupt: &interrupt,
            stage,
            node: "node-1.example",
            node_order: 5,
            config: &cfg,
        })
    }

    #[test]
    fn job_shape() {
        let pkg = Package {
            stage_timeout: Some("20m".into()),
            ..package()
        };
        let job = build(&pkg, Stage::Interrupt).expect("job builds");
        let meta = &job.metadata;
        assert_eq!(
            meta.name,
            Some(naming::interrupt_job_name("gpu", "node-1.example"))
        );
        assert_eq!(meta.namespace.as_deref(), Some("nodewright"));
        assert_eq!(
            meta.labels,
            Some(BTreeMap::from([
                (keys::NAME_LABEL.to_owned(), "gpu".to_owned()),
                (keys::PACKAGE_LABEL.to_owned(), "dax-1.2.3".to_owned()),
                (keys::STAGE_LABEL.to_owned(), "interrupt".to_owned()),
                (keys::NODE_LABEL.to_owned(), "node-1.example".to_owned()),
                (keys::INTERRUPT_LABEL.to_owned(), "True".to_owned()),
            ]))
        );
        assert_eq!(
            meta.annotations
                .as_ref()
                .and_then(|a| a.get(keys::PACKAGE_ANNOTATION))
                .map(String::as_str),
            Some(
                r#"{"name":"dax","version":"1.2.3","nodewright":"gpu","stage":"interrupt","image":"ghcr.io/nvidia/dax"}"#
            )
        );
        assert_eq!(
            meta.owner_references.as_ref().map(|o| (
                o.len(),
                o[0].controller,
                o[0].block_owner_deletion
            )),
            Some((1, Some(true), Some(true)))
        );

        let spec = job.spec.clone().unwrap_or_default();
        assert_eq!(spec.completions, Some(1));
        assert_eq!(spec.parallelism, Some(1));
        assert_eq!(spec.backoff_limit, Some(i32::MAX));
        assert_eq!(spec.active_deadline_seconds, Some(1200));
        assert_eq!(spec.pod_failure_policy, None);
        assert_eq!(spec.ttl_seconds_after_finished, None);

        let pod = spec.template.spec.clone().unwrap_or_default();
        assert_eq!(pod.restart_policy.as_deref(), Some("OnFailure"));
        assert_eq!(pod.active_deadline_seconds, None);
        assert_eq!(pod.node_name.as_deref(), Some("node-1.example"));
        assert_eq!(pod.host_pid, Some(true));
        assert_eq!(pod.host_network, Some(true));
        assert_eq!(pod.termination_grace_period_seconds, None);
        assert_eq!(pod.tolerations.as_ref().map(Vec::len), Some(3));
        assert_eq!(
            pod.volumes
                .iter()
                .flatten()
                .map(|v| v.name.as_str())
                .collect::<Vec<_>>(),
            ["root-mount"]
        );
        assert_eq!(
            spec.template
                .metadata
                .and_then(|m| m.labels)
                .and_then(|l| l.get(keys::INTERRUPT_LABEL).cloned())
                .as_deref(),
            Some("True")
        );

        let inits = pod.init_containers.unwrap_or_default();
        assert_eq!(inits.len(), 1);
        let c = &inits[0];
        assert_eq!(c.name, "interrupt");
        assert_eq!(
            c.image.as_deref(),
            Some("ghcr.io/nvidia/skyhook/agent:6.2.0")
        );
        assert_eq!(c.resources, Some(pod::fixed_resources("500m", "64Mi")));
        assert_eq!(
            c.security_context.as_ref().and_then(|s| s.privileged),
            Some(true)
        );
        assert_eq!(
            c.args,
            Some(vec![
                "interrupt".to_owned(),
                "/root".to_owned(),
                "/var/lib/skyhook/gpu/dax-1.2.3-0b6c2a5e-uid-4".to_owned(),
                interrupt_argument(&service(&["containerd"])).unwrap_or_default(),
            ])
        );
        let env: Vec<_> = c
            .env
            .iter()
            .flatten()
            .map(|EnvVar { name, value, .. }| (name.as_str(), value.as_deref().unwrap_or("")))
            .collect();
        assert_eq!(
            env,
            [
                ("SKYHOOK_LOG_DIR", "/var/log/skyhook/gpu"),
                ("SKYHOOK_ROOT_DIR", "/var/lib/skyhook/gpu"),
                ("COPY_RESOLV", "false"),
                ("SKYHOOK_RESOURCE_ID", "gpu-0b6c2a5e-uid-4_dax_1.2.3"),
                ("SKYHOOK_NODE_ORDER", "5"),
            ]
        );
        assert_eq!(
            c.volume_mounts
                .iter()
                .flatten()
                .map(|m| m.mount_path.as_str())
                .collect::<Vec<_>>(),
            ["/root"]
        );
        assert_eq!(pod.containers.len(), 1);
        assert_eq!(pod.containers[0].name, "pause");
        assert_eq!(
            pod.containers[0].resources,
            Some(pod::fixed_resources("100m", "20Mi"))
        );
    }

    #[test]
    fn deadline_follows_the_owner_timeout() {
        let deadline = |t: Option<&str>| {
            let pkg = Package {
                stage_timeout: t.map(str::to_owned),
                ..package()
            };
            // A builder error must fail the test, not read as "no deadline".
            build(&pkg, Stage::Interrupt)
                .unwrap_or_else(|e| panic!("stageTimeout {t:?} must build: {e}"))
                .spec
                .and_then(|s| s.active_deadline_seconds)
        };
        assert_eq!(deadline(Some("0")), None);
        assert_eq!(deadline(Some("90s")), Some(90));
        assert_eq!(deadline(Some("596523h14m8s")), Some(i64::from(i32::MAX)));
        assert_eq!(deadline(None), Some(3600));
    }

    #[test]
    fn uninstall_interrupt_uses_the_same_name_and_agent_mode() {
        let job = build(&package(), Stage::UninstallInterrupt).expect("job builds");
        assert_eq!(
            job.metadata.name,
            Some(naming::interrupt_job_name("gpu", "node-1.example"))
        );
        assert_eq!(
            job.metadata
                .labels
                .and_then(|l| l.get(keys::STAGE_LABEL).cloned())
                .as_deref(),
            Some("uninstall-interrupt")
        );
        let first_arg = job
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.init_containers)
            .and_then(|c| c.first().and_then(|c| c.args.clone()))
            .and_then(|a| a.first().cloned());
        assert_eq!(first_arg.as_deref(), Some("interrupt"));
    }

    #[test]
    fn package_stages_are_refused() {
        let err = build(&package(), Stage::Config).err();
        assert!(
            matches!(
                err,
                Some(JobBuildError::NotAnInterruptStage {
                    stage: Stage::Config,
                    ..
                })
            ),
            "{err:?}"
        );
    }

    /// The configured rightless ServiceAccount runs the interrupt pod; without one, the namespace's
    /// default does (and no token is mounted either way).
    #[test]
    fn interrupt_pods_run_as_the_configured_service_account() {
        let nw = nodewright();
        let interrupt = service(&["containerd"]);
        let account = |service_account: Option<&str>| {
            let cfg = JobConfig {
                service_account: service_account.map(str::to_owned),
                ..config()
            };
            let job = build_interrupt_job(&InterruptJobInput {
                nodewright: &nw,
                owner_key: "dax",
                owner: &package(),
                interrupt: &interrupt,
                stage: Stage::Interrupt,
                node: "node-1.example",
                node_order: 5,
                config: &cfg,
            })
            .expect("job builds");
            let spec = job.spec.and_then(|s| s.template.spec).unwrap_or_default();
            assert_eq!(spec.automount_service_account_token, Some(false));
            spec.service_account_name
        };
        assert_eq!(account(Some("nw-packages")).as_deref(), Some("nw-packages"));
        assert_eq!(account(None), None);
        assert_eq!(account(Some("")), None);
    }

    #[test]
    fn override_image_and_bad_timeout() {
        let pkg = Package {
            agent_image_override: Some("example.com/agent:9".into()),
            ..package()
        };
        let image = build(&pkg, Stage::Interrupt)
            .ok()
            .and_then(|j| j.spec)
            .and_then(|s| s.template.spec)
            .and_then(|p| p.init_containers)
            .and_then(|c| c.first().and_then(|c| c.image.clone()));
        assert_eq!(image.as_deref(), Some("example.com/agent:9"));
        let pkg = Package {
            stage_timeout: Some("-1s".into()),
            ..package()
        };
        assert!(matches!(
            build(&pkg, Stage::Interrupt),
            Err(JobBuildError::StageTimeout { .. })
        ));
    }
}
