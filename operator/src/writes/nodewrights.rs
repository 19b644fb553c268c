//! NodeWright writes: the finalizer (a JSON Patch on the object, guarded by a resourceVersion
//! `test`) and the status subresource (the pass's status, boot IDs, config updates).

use kube::api::{Api, Patch, PatchParams};
use nodewright_shared::api::NodeWright;

use super::{WriteError, Writer};

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

    /// Patches the NodeWright's status subresource.
    pub async fn patch_nodewright_status(
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
