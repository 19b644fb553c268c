//! NodeWright writes: the finalizer (a JSON Patch on the object, guarded by a resourceVersion
//! `test`) and the status subresource, always replaced whole under the same guard.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use nodewright_shared::api::{NodeWright, NodeWrightStatus};
use serde_json::json;

use super::{WriteError, Writer};
use crate::error::ReconcileError;

impl Writer {
    /// Patches the NodeWright `name`.
    pub async fn patch_nodewright(
        &self,
        name: &str,
        patch: &Patch<serde_json::Value>,
    ) -> Result<NodeWright, WriteError> {
        let client = self.gate()?;
        Ok(Api::<NodeWright>::all(client.clone())
            .patch(name, &PatchParams::default(), patch)
            .await?)
    }

    /// Replaces the NodeWright's status with `status` (JSON Patch `add /status`, so entries of
    /// nodes that left are dropped too), only for the version of the object it was computed from:
    /// a `test` of the resourceVersion makes a write from a stale cache fail with 422 (a conflict,
    /// retried at once on a fresh read) instead of overwriting a newer status (e.g. rolling a
    /// batch state back). The one way the operator writes a NodeWright's status. Returns the object
    /// as written (its new resourceVersion guards the next write of the same pass).
    pub async fn replace_nodewright_status(
        &self,
        nodewright: &NodeWright,
        status: &NodeWrightStatus,
    ) -> Result<NodeWright, ReconcileError> {
        let name = nodewright.name_any();
        let json = |what: &str| {
            let what = format!("{what} of NodeWright {name}");
            move |source| ReconcileError::Json { what, source }
        };
        let value = serde_json::to_value(status).map_err(json("status"))?;
        let mut ops = Vec::new();
        if let Some(rv) = &nodewright.metadata.resource_version {
            ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
        }
        ops.push(json!({"op": "add", "path": "/status", "value": value}));
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::Value::Array(ops)).map_err(json("status patch"))?;
        self.patch_nodewright_status(&name, &Patch::Json(patch))
            .await
            .map_err(super::failed(format!(
                "writing the status of NodeWright {name}"
            )))
    }

    /// Patches the NodeWright's status subresource.
    async fn patch_nodewright_status(
        &self,
        name: &str,
        patch: &Patch<serde_json::Value>,
    ) -> Result<NodeWright, WriteError> {
        let client = self.gate()?;
        Ok(Api::<NodeWright>::all(client.clone())
            .patch_status(name, &PatchParams::default(), patch)
            .await?)
    }
}
