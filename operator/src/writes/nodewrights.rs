//! NodeWright writes: the finalizer (a JSON Patch on the object, guarded by a resourceVersion
//! `test`) and the status subresource, through one method ([`Writer::write_status`]) under the
//! same guard: the pass's whole status, or the records it writes before it plans.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nodewright_shared::api::{NodeWright, NodeWrightStatus};
use serde::Serialize;

use super::{WriteError, WriteFailed, Writer, memo};

/// The prefix of the memo keys of the per-node records a NodeWright's status holds.
const NODE_STATE_KEY: &str = "nodewright-node-state/";

/// The memo key of the per-node records a NodeWright's status holds.
fn node_state_key(name: &str) -> String {
    format!("{NODE_STATE_KEY}{name}")
}

/// A NodeWright object (as `kubectl` would send it) with `status` set, serialized without cloning
/// either.
struct WithStatus<'a> {
    object: &'a NodeWright,
    status: &'a NodeWrightStatus,
}

impl Serialize for WithStatus<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(5))?;
        map.serialize_entry(
            "apiVersion",
            &format!(
                "{}/{}",
                nodewright_shared::keys::GROUP,
                nodewright_shared::keys::VERSION
            ),
        )?;
        map.serialize_entry("kind", "NodeWright")?;
        map.serialize_entry("metadata", &self.object.metadata)?;
        map.serialize_entry("spec", &self.object.spec)?;
        map.serialize_entry("status", self.status)?;
        map.end()
    }
}

/// A write of a NodeWright's status ([`Writer::write_status`]): what the status's two kinds of
/// content call for.
pub enum StatusWrite<'a> {
    /// The pass's status, whole, as `nodewright_core::rollout::status::build` composed it (every
    /// field an input of it, the records below among them).
    Whole(&'a NodeWrightStatus),
    /// Records a pass writes before it plans, ahead of the acts they guard, so that a crash
    /// between the two repeats the acts' guard and never the acts: the boot IDs of the reboots it
    /// handled, the config updates it queued, an automatic rollback's phase. Only these fields
    /// change: a whole write from the stored object would drop the per-node records, which the
    /// store does not keep.
    Records(StatusRecords),
}

/// Top-level status fields for [`StatusWrite::Records`], and what writing them is (for errors).
pub struct StatusRecords {
    action: String,
    fields: serde_json::Map<String, serde_json::Value>,
}

impl StatusRecords {
    /// Fields that `action` (e.g. "recording the boot IDs of NodeWright x") writes.
    pub fn new(action: impl Into<String>) -> Self {
        Self {
            action: action.into(),
            fields: serde_json::Map::new(),
        }
    }

    /// Sets the field `field` to `value`.
    pub fn value(mut self, field: &str, value: serde_json::Value) -> Self {
        self.fields.insert(field.to_owned(), value);
        self
    }

    /// Sets more fields (a `null` removes one).
    pub fn fields(mut self, fields: serde_json::Map<String, serde_json::Value>) -> Self {
        self.fields.extend(fields);
        self
    }

    /// Sets the map `field` from `old` to `new`: entries gone from `new` are removed, the others
    /// set (a merge patch of that map).
    pub fn map<V: Serialize>(
        mut self,
        field: &str,
        old: &std::collections::BTreeMap<String, V>,
        new: &std::collections::BTreeMap<String, V>,
    ) -> Result<Self, WriteFailed> {
        let mut entries = serde_json::Map::new();
        for key in old.keys().filter(|k| !new.contains_key(*k)) {
            entries.insert(key.clone(), serde_json::Value::Null);
        }
        for (key, value) in new {
            let value = serde_json::to_value(value).map_err(|source| WriteFailed::Json {
                action: self.action.clone(),
                source,
            })?;
            entries.insert(key.clone(), value);
        }
        self.fields
            .insert(field.to_owned(), serde_json::Value::Object(entries));
        Ok(self)
    }
}

impl Writer {
    /// Writes the NodeWright's status: the one way the operator does. Either kind is guarded by
    /// the object's resourceVersion (a write computed from a stale object fails with 409 instead
    /// of overwriting a newer status). Returns the object as written, trimmed as the store keeps
    /// it.
    pub async fn write_status(
        &self,
        nodewright: &NodeWright,
        write: StatusWrite<'_>,
    ) -> Result<NodeWright, WriteFailed> {
        match write {
            StatusWrite::Whole(status) => self.replace_status(nodewright, status).await,
            StatusWrite::Records(records) => {
                self.merge_status(nodewright, records.fields, &records.action)
                    .await
            }
        }
    }

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

    /// Replaces the NodeWright's status with `status` (a PUT of the status subresource, so entries
    /// of nodes that left are dropped too), only for the version of the object it was computed
    /// from: the object's resourceVersion makes a write from a stale cache fail with 409 (a
    /// conflict, retried at once on a fresh read) instead of overwriting a newer status (e.g.
    /// rolling a batch state back).
    ///
    /// The body is serialized straight to bytes (the status of a large fleet is a megabyte of
    /// JSON: no value tree of it is built). Returns the object as written, trimmed as the store
    /// keeps it ([`nodewright_core::stored::trim_nodewright`]); its new resourceVersion guards the next
    /// write of the same pass, and [`Writer::fresher`] serves it until the store catches up.
    async fn replace_status(
        &self,
        nodewright: &NodeWright,
        status: &NodeWrightStatus,
    ) -> Result<NodeWright, WriteFailed> {
        let name = nodewright.name_any();
        let client = self.gate().map_err(super::failed(format!(
            "writing the status of NodeWright {name}"
        )))?;
        let body = NodeWright {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                resource_version: nodewright.metadata.resource_version.clone(),
                ..ObjectMeta::default()
            },
            spec: nodewright.spec.clone(),
            status: None,
        };
        let action = || format!("writing the status of NodeWright {name}");
        let bytes = serde_json::to_vec(&WithStatus {
            object: &body,
            status,
        })
        .map_err(|source| WriteFailed::Json {
            action: action(),
            source,
        })?;
        let url = <NodeWright as kube::Resource>::url_path(&(), None);
        let request = kube::core::Request::new(url)
            .replace_subresource("status", &name, &PostParams::default(), bytes)
            .map_err(|e| WriteFailed::Api {
                action: action(),
                source: kube::Error::BuildRequest(e),
            })?;
        let written: NodeWright =
            client
                .request(request)
                .await
                .map_err(|source| WriteFailed::Api {
                    action: action(),
                    source,
                })?;
        self.memo
            .remember(node_state_key(&name), memo::stamp_json(&status.node_state));
        let mut trimmed = written;
        nodewright_core::stored::trim_nodewright(&mut trimmed);
        if let (Ok(mut written), Some(replaced)) = (
            self.written.lock(),
            nodewright.metadata.resource_version.clone(),
        ) {
            written.insert(name, (replaced, std::sync::Arc::new(trimmed.clone())));
        }
        Ok(trimmed)
    }

    /// Whether `new` is what the NodeWright's status already holds, as `old` (the stored status,
    /// without the per-node records) and the stamp of the records this term last wrote tell.
    pub fn status_unchanged(
        &self,
        name: &str,
        old: &NodeWrightStatus,
        new: &mut NodeWrightStatus,
    ) -> bool {
        let records = std::mem::take(&mut new.node_state);
        let same = *old == *new
            && self
                .memo
                .is_current(&node_state_key(name), memo::stamp_json(&records));
        new.node_state = records;
        same
    }

    /// `nodewright` as the store has it, or the object this term's last status write returned when
    /// the store has not seen that write yet (its resourceVersion is the one the write replaced):
    /// a pass that read the stale object would compute its status write from it and lose the race
    /// against its own previous write.
    pub fn fresher(&self, nodewright: std::sync::Arc<NodeWright>) -> std::sync::Arc<NodeWright> {
        let Ok(mut written) = self.written.lock() else {
            return nodewright;
        };
        let name = nodewright.name_any();
        match written.get(&name) {
            Some((replaced, ours))
                if nodewright.metadata.resource_version.as_ref() == Some(replaced) =>
            {
                ours.clone()
            }
            Some(_) => {
                // The store caught up (or moved on): it is the freshest.
                written.remove(&name);
                nodewright
            }
            None => nodewright,
        }
    }

    /// Drops what this term remembers of the NodeWright `name` (the object its last status write
    /// returned, the stamp of the records it wrote): it is gone, and a NodeWright created later
    /// under the same name starts afresh.
    pub fn forget_nodewright(&self, name: &str) {
        if let Ok(mut written) = self.written.lock() {
            written.remove(name);
        }
        self.memo.forget(&node_state_key(name));
    }

    /// Keeps only what this term remembers of the NodeWrights `live` says exist (after a relist of
    /// the NodeWrights, which reports no deletions).
    pub fn retain_nodewrights(&self, live: impl Fn(&str) -> bool) {
        if let Ok(mut written) = self.written.lock() {
            written.retain(|name, _| live(name));
        }
        self.memo
            .retain(|key| key.strip_prefix(NODE_STATE_KEY).is_none_or(&live));
    }

    /// The NodeWrights this term remembers a status write of.
    pub fn remembered_nodewrights(&self) -> std::collections::BTreeSet<String> {
        let mut names: std::collections::BTreeSet<String> = self
            .written
            .lock()
            .map(|w| w.keys().cloned().collect())
            .unwrap_or_default();
        names.extend(
            self.memo
                .keys()
                .iter()
                .filter_map(|k| k.strip_prefix(NODE_STATE_KEY))
                .map(str::to_owned),
        );
        names
    }

    /// Merge-patches the NodeWright's status with `status` (top-level fields as JSON; `null`
    /// removes), under the object's resourceVersion (a stale object fails with 409), naming
    /// `action` in an error. Returns the object as written, trimmed as the store keeps it.
    async fn merge_status(
        &self,
        nodewright: &NodeWright,
        status: serde_json::Map<String, serde_json::Value>,
        action: &str,
    ) -> Result<NodeWright, WriteFailed> {
        let name = nodewright.name_any();
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": nodewright.metadata.resource_version},
            "status": status,
        });
        let client = self.gate().map_err(super::failed(action))?;
        let mut written = Api::<NodeWright>::all(client.clone())
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|source| WriteFailed::Api {
                action: action.to_owned(),
                source,
            })?;
        nodewright_core::stored::trim_nodewright(&mut written);
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writes::mock::stored_nodewright;
    use nodewright_shared::node_state::NodeState;
    use tokio_util::sync::CancellationToken;

    /// A status write leaves two things per NodeWright (the object written, the stamp of its
    /// records): both go when the NodeWright is forgotten, or is absent from a relist.
    #[tokio::test]
    async fn what_a_status_write_leaves_goes_with_its_nodewright() {
        let (client, server) = crate::writes::mock::status_writes_succeed();
        let writer = Writer::new(client, "nodewright", CancellationToken::new());
        let status = NodeWrightStatus {
            node_state: [("n1".to_owned(), NodeState::default())].into(),
            ..NodeWrightStatus::default()
        };
        for name in ["a", "b", "c"] {
            writer
                .write_status(&stored_nodewright(name), StatusWrite::Whole(&status))
                .await
                .expect("status written");
        }
        let names = |w: &Writer| w.remembered_nodewrights().into_iter().collect::<Vec<_>>();
        assert_eq!(names(&writer), ["a", "b", "c"]);
        // Served from what was written until the store catches up.
        let fresher = writer.fresher(std::sync::Arc::new(stored_nodewright("a")));
        assert_eq!(fresher.metadata.resource_version.as_deref(), Some("2"));

        writer.forget_nodewright("a");
        assert_eq!(names(&writer), ["b", "c"]);
        let after = writer.fresher(std::sync::Arc::new(stored_nodewright("a")));
        assert_eq!(after.metadata.resource_version.as_deref(), Some("1"));
        let mut same = status.clone();
        assert!(
            !writer.status_unchanged("a", &NodeWrightStatus::default(), &mut same),
            "a NodeWright created again under the name is written afresh"
        );

        writer.retain_nodewrights(|name| name == "c");
        assert_eq!(names(&writer), ["c"]);
        drop(writer);
        server.abort();
    }
}
