//! `status.revisions` and `status.rollback`: the short history of a NodeWright's packages the
//! operator keeps for rollbacks, and the record of its last automatic rollback
//! (`rollbackOnFailure`). Both live in the status, which the operator alone writes, so they survive
//! operator restarts and anyone who can read the NodeWright can read them (no extra RBAC).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::package::Package;

/// Most revisions the history may hold (the CRD's `maxItems`, and the largest
/// `REVISION_HISTORY_LIMIT` the operator accepts).
pub const MAX_REVISIONS: usize = 100;

/// One revision: the packages of a spec that completed on at least one node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    /// The revision's number. Numbers only grow: a spec applied again becomes the newest revision
    /// under a new number (as a Deployment's revisions do).
    pub revision: i64,
    /// When the spec was recorded: the first pass that saw it complete on a node (applied again:
    /// the first pass that saw that).
    pub recorded: Time,
    /// The `metadata.generation` of the spec when it was recorded.
    pub generation: i64,
    /// `spec.packages` as it was stored, what a rollback writes back. Kept without the spec's
    /// validation rules: a revision admitted once must never make a status write fail.
    #[schemars(schema_with = "preserved_object")]
    pub packages: BTreeMap<String, Package>,
}

/// An object whose fields are kept as written (not validated or pruned by the apiserver).
fn preserved_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// What became of the last automatic rollback.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RollbackPhase {
    /// The failure threshold stopped the rollout; the rollback is about to be written.
    Pending,
    /// The earlier revision was written back as the spec and the batch state reset.
    RolledBack,
    /// The API refused the write (an admission guard, validation): the rollout stays stopped.
    Refused,
    /// There was no earlier revision to roll back to: the rollout stays stopped.
    NoRevision,
    /// The spec changed before the rollback was written: nothing was rolled back.
    Superseded,
    /// The stopped rollout was itself an automatic rollback: it is not rolled back again.
    NotRepeated,
}

impl RollbackPhase {
    /// The name as the status spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            RollbackPhase::Pending => "Pending",
            RollbackPhase::RolledBack => "RolledBack",
            RollbackPhase::Refused => "Refused",
            RollbackPhase::NoRevision => "NoRevision",
            RollbackPhase::Superseded => "Superseded",
            RollbackPhase::NotRepeated => "NotRepeated",
        }
    }
}

/// The last automatic rollback (`rollbackOnFailure` on the DeploymentPolicy).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutomaticRollback {
    /// Where it is.
    pub phase: RollbackPhase,
    /// The `metadata.generation` whose rollout the failure threshold stopped.
    pub failed_generation: i64,
    /// The compartments that stopped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compartments: Vec<String>,
    /// The revision of the spec that stopped (absent: it never completed on a node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_revision: Option<i64>,
    /// The revision rolled back to (absent: there was none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_revision: Option<i64>,
    /// The `metadata.generation` the last automatic rollback wrote: a stop of that generation's
    /// rollout is never rolled back automatically again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_generation: Option<i64>,
    /// Why it ended as it did (the API's refusal, what changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the phase last changed.
    pub last_transition_time: Time,
}
