//! Node writes: annotations, labels, taints and cordon (a JSON Patch carrying a resourceVersion
//! `test`, built by [`nodewright_core::node::edit`]), and node status conditions.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use nodewright_core::node::edit::{NodeEdit, node_patch};

use super::{WriteError, WriteFailed, Writer};

/// Why a node write failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeWriteError {
    /// The node changed since it was read (or is gone): re-read and recompute.
    #[error("node {node} changed since it was read (resourceVersion {resource_version})")]
    Conflict {
        /// Node name.
        node: String,
        /// The version the patch was computed from.
        resource_version: String,
    },
    /// The node object lacks a name or resourceVersion (not read from the API).
    #[error("node {node:?} has no {field}: it was not read from the API server")]
    Incomplete {
        /// Node name, if any.
        node: String,
        /// The missing field.
        field: &'static str,
    },
    /// Any other API error.
    #[error("patching node {node}: {source}")]
    Api {
        /// Node name.
        node: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// The leadership term ended: nothing was sent.
    #[error("the leadership term ended; node {node} not written")]
    TermEnded {
        /// Node name.
        node: String,
    },
}

impl Writer {
    /// Applies a JSON Patch to the node `name`.
    pub async fn patch_node(
        &self,
        name: &str,
        patch: json_patch::Patch,
    ) -> Result<Node, WriteError> {
        let client = self.gate()?;
        Ok(Api::<Node>::all(client.clone())
            .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await?)
    }

    /// Applies `edit` to `node` (as read) with the resourceVersion precondition. Returns the
    /// updated node, or `None` when nothing had to change. Callers that re-plan on a conflict use
    /// this directly; the others use [`Writer::write_node`].
    pub async fn apply_node_edit(
        &self,
        node: &Node,
        edit: &NodeEdit,
    ) -> Result<Option<Node>, NodeWriteError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let Some(resource_version) = node.metadata.resource_version.clone() else {
            return Err(NodeWriteError::Incomplete {
                node: name,
                field: "resourceVersion",
            });
        };
        let Some(patch) = node_patch(node, edit) else {
            return Ok(None);
        };
        match self.patch_node(&name, patch).await {
            Ok(updated) => Ok(Some(updated)),
            // 422: the `test` op failed; 409: a concurrent update won inside the apiserver; 404: gone.
            Err(e) if matches!(e.code(), Some(409 | 422 | 404)) => Err(NodeWriteError::Conflict {
                node: name,
                resource_version,
            }),
            Err(WriteError::TermEnded) => Err(NodeWriteError::TermEnded { node: name }),
            Err(WriteError::Api(source)) => Err(NodeWriteError::Api { node: name, source }),
        }
    }

    /// Strategic-merge-patches the node's status (its conditions).
    pub async fn patch_node_status(
        &self,
        name: &str,
        body: serde_json::Value,
    ) -> Result<Node, WriteError> {
        let client = self.gate()?;
        Ok(Api::<Node>::all(client.clone())
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(body))
            .await?)
    }
}

impl Writer {
    /// Writes a node-conditions status patch built by [`nodewright_core::node::conditions`] (`None`: the
    /// conditions already say so, nothing is sent).
    pub async fn patch_node_conditions(
        &self,
        node: &Node,
        patch: Option<serde_json::Value>,
    ) -> Result<(), WriteFailed> {
        let Some(body) = patch else {
            return Ok(());
        };
        let name = node.name_any();
        self.patch_node_status(&name, body)
            .await
            .map_err(super::failed(format!(
                "writing the conditions of node {name}"
            )))?;
        Ok(())
    }
}

/// What a node writer concludes when its edit finds nothing to write on the node it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unchanged {
    /// Nothing to do: the node it was given is recent enough for that answer.
    Believe,
    /// Only a fresh read may say so: the node came from a cache, which can lag behind a write
    /// that makes this one necessary again (e.g. a rerun reset the record an outcome goes into).
    Confirm,
}

/// How many times a node write is recomputed after losing a race before the reconcile gives up
/// (with a conflict, which requeues it at once).
const NODE_WRITE_ATTEMPTS: usize = 5;

impl Writer {
    /// Reads the node `name` from the API server (not a cache); `None` when it is gone.
    pub async fn read_node(&self, name: &str) -> Result<Option<Node>, WriteFailed> {
        Api::<Node>::all(self.client.clone())
            .get_opt(name)
            .await
            .map_err(|source| WriteFailed::Api {
                action: format!("reading node {name}"),
                source,
            })
    }

    /// The one node writer with the conflict-retry loop, used by the rollout and the outcome
    /// recorder alike: writes to `node` the edit that `edit` computes from it (`None`: nothing to
    /// write), with the resourceVersion precondition; when another writer won, reads the node again
    /// and recomputes. Returns the node as written, or `None` when nothing was written (no change,
    /// or the node is gone). Losing every race is an error (a conflict), never a silent no-op, so a
    /// caller that must not go on without its write (an outcome before its Job is marked) stops.
    pub async fn write_node(
        &self,
        node: &Node,
        unchanged: Unchanged,
        mut edit: impl FnMut(&Node) -> Option<NodeEdit>,
    ) -> Result<Option<Node>, WriteFailed> {
        let name = node.name_any();
        let mut current = node.clone();
        let mut fresh = false;
        for _ in 0..NODE_WRITE_ATTEMPTS {
            let Some(change) = edit(&current) else {
                if fresh || unchanged == Unchanged::Believe {
                    return Ok(None);
                }
                // "Nothing to write" on a cached node: confirm it from the API server.
                let Some(read) = self.read_node(&name).await? else {
                    return Ok(None);
                };
                (current, fresh) = (read, true);
                continue;
            };
            match self.apply_node_edit(&current, &change).await {
                Ok(written) => return Ok(written),
                Err(NodeWriteError::Conflict { .. }) => {
                    let Some(read) = self.read_node(&name).await? else {
                        return Ok(None);
                    };
                    (current, fresh) = (read, true);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(NodeWriteError::Conflict {
            node: name,
            resource_version: current.metadata.resource_version.unwrap_or_default(),
        }
        .into())
    }
}
