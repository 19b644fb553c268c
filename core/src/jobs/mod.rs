//! The Jobs the operator creates: one per package stage per node (DESIGN §4.1) and one merged
//! interrupt per node (DESIGN §4.2). Pure builders: they take the NodeWright, the package and the
//! operator configuration and return the `batch/v1` Job to create; nothing here calls the API.
//! Also pure: the package ConfigMaps the Jobs mount ([`configmaps`]), the hash that makes an
//! unfinished Job stale ([`drift`]), what a Job says about itself ([`read`]) and the classification
//! of a finished one ([`classify`]).

mod annotation;
pub mod classify;
mod config;
pub mod configmaps;
pub mod drift;
mod error;
mod interrupt;
mod package;
pub mod pod;
pub mod read;
pub mod stored;

pub use annotation::PackageAnnotation;
pub use config::{
    DEFAULT_AGENT_IMAGE, DEFAULT_AGENT_LOG_ROOT, DEFAULT_COPY_DIR_ROOT,
    DEFAULT_PACKAGE_IMAGE_PULL_POLICY, DEFAULT_PAUSE_IMAGE, DEFAULT_RUNTIME_REQUIRED_TAINT,
    JobConfig, RuntimeTaint, TaintParseError,
};
pub use error::JobBuildError;
pub use interrupt::{
    InterruptJobInput, MergedInterrupt, build_interrupt_job, interrupt_argument, merge_interrupts,
};
pub use package::{PackageJobInput, build_package_job};

#[cfg(test)]
pub(crate) mod test_support {
    //! Fixtures shared by the builder tests.

    use k8s_openapi::api::core::v1::{EnvVar, Toleration};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use nodewright_shared::api::{NodeWright, NodeWrightSpec, Package};
    use nodewright_shared::defaults::OperatorDefaults;

    use super::{JobConfig, RuntimeTaint};

    /// NodeWright `gpu`, uid `0b6c2a5e-uid`, generation 4, one additional toleration.
    pub fn nodewright() -> NodeWright {
        NodeWright {
            metadata: ObjectMeta {
                name: Some("gpu".into()),
                uid: Some("0b6c2a5e-uid".into()),
                generation: Some(4),
                ..ObjectMeta::default()
            },
            spec: NodeWrightSpec {
                additional_tolerations: vec![Toleration {
                    key: Some("dedicated".into()),
                    operator: Some("Equal".into()),
                    value: Some("gpu".into()),
                    effect: Some("NoSchedule".into()),
                    toleration_seconds: None,
                }],
                ..NodeWrightSpec::default()
            },
            status: None,
        }
    }

    /// Package `dax` 1.2.3 with one user env var and no stageTimeout.
    pub fn package() -> Package {
        Package {
            name: Some("dax".into()),
            version: "1.2.3".into(),
            image: "ghcr.io/nvidia/dax".into(),
            env: vec![EnvVar {
                name: "USER_VAR".into(),
                value: Some("x".into()),
                value_from: None,
            }],
            ..Package::default()
        }
    }

    /// Upstream's defaults, namespace `nodewright`, agent 6.2.0.
    pub fn config() -> JobConfig {
        JobConfig {
            namespace: "nodewright".into(),
            agent_image: "ghcr.io/nvidia/skyhook/agent:6.2.0".into(),
            pause_image: super::DEFAULT_PAUSE_IMAGE.into(),
            copy_dir_root: super::DEFAULT_COPY_DIR_ROOT.into(),
            agent_log_root: super::DEFAULT_AGENT_LOG_ROOT.into(),
            image_pull_secret: None,
            service_account: None,
            image_pull_policy: super::DEFAULT_PACKAGE_IMAGE_PULL_POLICY.into(),
            runtime_required_taint: RuntimeTaint {
                key: "nodewright.nvidia.com".into(),
                value: Some("runtime-required".into()),
                effect: "NoSchedule".into(),
            },
            defaults: OperatorDefaults::default(),
        }
    }
}

#[cfg(test)]
mod golden;
