//! `spec.packages.<name>`: one host package, its stages' inputs and its disruption.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most `dependsOn` entries a package may have (the CRD's `maxProperties`), for the same cost
/// budget as [`super::MAX_PACKAGES`].
pub const MAX_DEPENDS_ON: usize = 100;

/// Go duration syntax as a regular expression (for CEL and OpenAPI): `0`, or one or more
/// `<number><unit>` with units ns, us, µs, μs, ms, s, m, h, optionally signed. The webhook and the
/// operator parse with the exact Go algorithm ([`crate::duration`]); this only catches the shape.
pub const GO_DURATION_PATTERN: &str =
    r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$";

/// A host package: a container image carrying the scripts and files for the host, run by the agent
/// through the stages apply, config, [interrupt, post-interrupt], upgrade and uninstall.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    /// Package name. Filled from the key of `spec.packages`; do not set it, or set it to the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 43), pattern(r"^[a-z][-a-z0-9]{0,41}[a-z]$"))]
    pub name: Option<String>,

    /// Package version. It is also the image tag (the image is pulled as `image:version` unless
    /// `containerSHA` is set), so it must be a valid semantic version usable in a label value.
    #[schemars(length(min = 1, max = 63))]
    #[schemars(extend("x-kubernetes-validations" = super::cel::version_rules()))]
    pub version: String,

    /// Container image of the package, WITHOUT tag or digest: the tag is `version` and the digest is
    /// `containerSHA`. A registry port (`registry:5000/pkg`) is fine.
    #[schemars(length(min = 1))]
    pub image: String,

    /// Image digest (`sha256:…`) to pull instead of the `version` tag; recorded in node state.
    #[serde(
        rename = "containerSHA",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub container_sha: Option<String>,

    /// Full agent image (with tag) for this package's Jobs, overriding the operator's `AGENT_IMAGE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_image_override: Option<String>,

    /// Disruptive action run after config (reboot, service restart...). When set, the node is cordoned
    /// and drained before the package is applied, and the interrupt and post-interrupt stages follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<Interrupt>,

    /// Packages of this NodeWright (name → exact version) that must be complete on a node before this
    /// package starts there. A package waits only for its own dependencies; cycles are rejected.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_DEPENDS_ON, "additionalProperties" = {"type": "string", "maxLength": 63}))]
    #[schemars(extend("x-kubernetes-validations" = super::cel::depends_on_rules()))]
    pub depends_on: BTreeMap<String, String>,

    /// Interrupts to run when the given configMap keys change (keys may be `*` globs matching at least
    /// one configMap key). Overrides `interrupt` for config-only changes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_interrupts: BTreeMap<String, Interrupt>,

    /// Files for the package (scripts, configuration), mounted into its Jobs. A change reruns the
    /// config stage on every node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_map: BTreeMap<String, String>,

    /// Environment for the package's stage and check containers (the operator adds its own `SKYHOOK_*`
    /// variables for the agent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,

    /// CPU and memory for the package's stage containers; all four or none. Without it the namespace's
    /// LimitRange applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<PackageResources>,

    /// Termination grace period of the package's pods, as a Go duration (`30s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.matches('^[-+]?(0|(([0-9]+(\\\\.[0-9]*)?|\\\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$')",
        "message": "gracefulShutdown must be a Go duration such as \"30s\" or \"2m\""
    }]))]
    pub graceful_shutdown: Option<String>,

    /// Explicit uninstall support.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uninstall: Option<Uninstall>,

    /// Time bound of this package's stages on one node, as a Go duration (`45s`, `1h30m`). Package
    /// stages (apply, config, upgrade, uninstall, post-interrupt): it bounds ONE attempt, from the
    /// moment the kubelet starts the pod; an attempt that exceeds it fails with DeadlineExceeded
    /// and counts against the retry budget. Interrupt: it bounds the WHOLE stage, across the reboot
    /// and every restart, counted from the start of the interrupt Job. A package-stage pod the
    /// kubelet never accepts (rejected at admission, e.g. OutOfcpu, or on a node whose kubelet
    /// never picks it up) never starts its attempt's clock: no stageTimeout bounds it, a rejection
    /// is not counted as a failure, and the stage runs again. Unset: the operator default
    /// (`JOB_STAGE_TIMEOUT`, 1h unless configured), filled in at admission and recorded in the
    /// annotation `nodewright.nvidia.com/defaulted-stage-timeouts`; while the value stays the one
    /// filled, the package follows the operator's current default (a changed `JOB_STAGE_TIMEOUT`
    /// reaches its next Job). `"0"`: no bound at all, so a stage that hangs hangs until someone
    /// acts. At most 596523h14m7s (activeDeadlineSeconds is an int32). A change applies to the
    /// next Job only; a running Job keeps its bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "self.matches('^[-+]?(0|(([0-9]+(\\\\.[0-9]*)?|\\\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$')",
            "message": "stageTimeout must be a Go duration such as \"45s\" or \"1h30m\", or \"0\" for no time bound"
        },
        {
            "rule": "!self.startsWith('-')",
            "message": "stageTimeout must not be negative: use a positive duration, or \"0\" for no time bound"
        }
    ]))]
    pub stage_timeout: Option<String>,
}

/// A disruptive action on the node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Interrupt {
    /// What to do: `reboot` the node, restart `service`s, `restartAllServices`, or `noop`.
    #[serde(rename = "type")]
    pub kind: InterruptType,
    /// systemd units to restart, for type `service`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
}

/// The kinds of interrupt. When several packages interrupt a node in one pass, they are merged into
/// one, the most disruptive winning: reboot > restartAllServices > service > noop.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum InterruptType {
    /// Reboot the node.
    #[serde(rename = "reboot")]
    Reboot,
    /// Restart every service.
    #[serde(rename = "restartAllServices")]
    RestartAllServices,
    /// Restart the listed services.
    #[serde(rename = "service")]
    Service,
    /// Nothing (still runs the interrupt and post-interrupt stages).
    #[serde(rename = "noop")]
    Noop,
}

impl InterruptType {
    /// The argument the agent expects (upstream contract).
    pub const fn agent_name(self) -> &'static str {
        match self {
            InterruptType::Reboot => "node_restart",
            InterruptType::RestartAllServices => "restart_all_services",
            InterruptType::Service => "service_restart",
            InterruptType::Noop => "no_op",
        }
    }
}

/// Per-package CPU and memory override for the stage containers; all four or none, limits ≥ requests.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.cpuRequest) && has(self.cpuLimit) && has(self.memoryRequest) && has(self.memoryLimit)) || !(has(self.cpuRequest) || has(self.cpuLimit) || has(self.memoryRequest) || has(self.memoryLimit))",
    "message": "resources: set all of cpuRequest, cpuLimit, memoryRequest and memoryLimit, or none of them"
}]))]
pub struct PackageResources {
    /// CPU request of each stage container (e.g. `250m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_request: Option<Quantity>,
    /// CPU limit of each stage container; at least cpuRequest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit: Option<Quantity>,
    /// Memory request of each stage container (e.g. `256Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_request: Option<Quantity>,
    /// Memory limit of each stage container; at least memoryRequest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<Quantity>,
}

/// Explicit uninstall.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!self.apply || self.enabled",
    "message": "uninstall.apply requires uninstall.enabled to be true"
}]))]
pub struct Uninstall {
    /// The package ships uninstall scripts: the operator uninstalls it before removal from the spec
    /// and when the NodeWright is deleted.
    #[serde(default)]
    pub enabled: bool,
    /// Uninstall now on every target node; setting it back to false cancels (where not yet done).
    #[serde(default)]
    pub apply: bool,
}
