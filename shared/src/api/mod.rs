//! The API (DESIGN §2): `NodeWright` and `DeploymentPolicy`, group `nodewright.nvidia.com/v1alpha1`,
//! both cluster-scoped. The CRDs in `crds/` are generated from these types (see [`crate::crd`]), so
//! every doc comment here is what users read in `kubectl explain`.

mod cel;
mod drain;
mod health_gates;
mod history;
mod nodewright;
mod package;
mod patterns;
mod policy;
mod status;

pub use drain::DrainConfig;
pub use health_gates::{
    AlertGate, ConditionStatus, DEFAULT_GATE_TIMEOUT, GateFailureAction, HealthGate, HealthGates,
    MAX_GATE_TIMEOUT_HOURS, MAX_HEALTH_GATES, NODE_PLACEHOLDER, NodeConditionGate, PodsReadyGate,
};
pub use history::{AutomaticRollback, MAX_REVISIONS, Revision, RollbackPhase};
pub use nodewright::{
    DEFAULT_PRIORITY, DeploymentPolicyOptions, InterruptionBudget, MAX_PACKAGES, NodeWright,
    NodeWrightSpec, Sequencing,
};
pub use package::{
    GO_DURATION_PATTERN, Interrupt, InterruptType, MAX_DEPENDS_ON, Package, PackageResources,
    Uninstall,
};
pub use patterns::{PACKAGE_NAME_PATTERN, PACKAGE_VERSION_PATTERN};
pub use policy::{
    BatchParameters, Compartment, DEFAULT_COMPARTMENT, DeploymentBudget, DeploymentPolicy,
    DeploymentPolicySpec, DeploymentStrategy, ExponentialStrategy, LinearStrategy, MAX_SOAK_HOURS,
    MaintenanceWindow, PolicyDefault, Weekday,
};
pub use status::{BatchState, CompartmentStatus, NodeWrightStatus, Status};
