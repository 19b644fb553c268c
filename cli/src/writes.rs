//! Every write a command makes, through one [`Writer`]: it records each change (what, on which
//! object, the exact patch) for the report, and with `--dry-run` sends it as a server-side dry run
//! (`dryRun=All`: the API server validates it, admission included, and stores nothing).
//!
//! Node writes are the operator's own guarded JSON Patches ([`node_patch`]: a `test` of the
//! resourceVersion first), so a command never loses an update the operator (or anyone) made
//! between the read and the write; on a conflict the node is read again and the change recomputed.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nodewright_core::node::edit::{NodeEdit, node_patch};
use nodewright_shared::api::{DeploymentPolicy, NodeWright};
use serde::Serialize;
use serde_json::Value;

use crate::args::Format;
use crate::context::Ctx;
use crate::error::{CliError, Result};
use crate::output::{Render, or_dash, print};

/// Attempts of a node write that keeps meeting concurrent updates.
const NODE_WRITE_ATTEMPTS: usize = 5;
/// The field manager of every write.
pub const FIELD_MANAGER: &str = "kubectl-nodewright";

/// One change made (or, with `--dry-run`, that would be made).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// `Node`, `NodeWright`, `NodeWright/status`, `DeploymentPolicy`.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// What the change does.
    pub action: String,
    /// The patch (or object) sent.
    pub patch: Value,
}

/// What a writing command did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Nothing was stored.
    pub dry_run: bool,
    /// The changes, in the order they were made.
    pub changes: Vec<Change>,
    /// Remarks (objects skipped, nothing to do...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Render for Report {
    fn table(&self, wide: bool) -> String {
        let mut out = String::new();
        for note in &self.notes {
            out.push_str(note);
            out.push('\n');
        }
        if self.changes.is_empty() {
            if self.notes.is_empty() {
                out.push_str("nothing to change\n");
            }
            return out;
        }
        let verb = if self.dry_run { "would " } else { "" };
        for c in &self.changes {
            out.push_str(&format!(
                "{}/{}: {verb}{}\n",
                c.kind.to_lowercase(),
                c.name,
                c.action
            ));
            // A dry run prints exactly what would be written; so does -o wide.
            if self.dry_run || wide {
                let patch = serde_json::to_string(&c.patch).unwrap_or_default();
                out.push_str(&format!("  patch: {}\n", or_dash(patch)));
            }
        }
        if self.dry_run {
            out.push_str("(dry run: validated by the API server, nothing was written)\n");
        }
        out
    }
}

/// Makes writes and records them.
pub struct Writer<'a> {
    ctx: &'a Ctx,
    report: Report,
    failures: Vec<String>,
    attempted: usize,
}

impl<'a> Writer<'a> {
    /// A writer honouring `--dry-run`.
    pub fn new(ctx: &'a Ctx) -> Self {
        Writer {
            ctx,
            report: Report {
                dry_run: ctx.dry_run(),
                ..Report::default()
            },
            failures: Vec::new(),
            attempted: 0,
        }
    }

    fn params(&self) -> PatchParams {
        PatchParams {
            dry_run: self.ctx.dry_run(),
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        }
    }

    /// Adds a remark to the report.
    pub fn note(&mut self, note: impl Into<String>) {
        self.report.notes.push(note.into());
    }

    /// Whether nothing was changed.
    pub fn is_empty(&self) -> bool {
        self.report.changes.is_empty()
    }

    /// Prints the report in `format` (the changes that were made, also when some failed), then
    /// returns an error listing the failed writes, if any.
    pub fn print(self, format: Format) -> Result<()> {
        print(format, &self.report)?;
        if self.failures.is_empty() {
            return Ok(());
        }
        Err(CliError::Partial {
            failed: self.failures.len(),
            total: self.attempted,
            details: self
                .failures
                .iter()
                .map(|f| format!("  {f}"))
                .collect::<Vec<_>>()
                .join("\n"),
        })
    }

    /// Applies `edit_of(node)` to the node `name` (read fresh; `None`: nothing to do), re-reading
    /// and recomputing on a concurrent update. Returns whether it changed anything. A failure is
    /// kept for [`Writer::finish`] and the other writes go on, unless `stop_on_error`.
    pub async fn edit_node(
        &mut self,
        name: &str,
        action: &str,
        edit_of: impl Fn(&Node) -> Option<NodeEdit>,
    ) -> Result<bool> {
        self.attempted += 1;
        match self.try_edit_node(name, action, &edit_of).await {
            Ok(changed) => Ok(changed),
            Err(e) => {
                self.failures.push(format!("node/{name}: {action}: {e}"));
                Ok(false)
            }
        }
    }

    async fn try_edit_node(
        &mut self,
        name: &str,
        action: &str,
        edit_of: &impl Fn(&Node) -> Option<NodeEdit>,
    ) -> Result<bool> {
        let api: Api<Node> = Api::all(self.ctx.client().await?.clone());
        for attempt in 1..=NODE_WRITE_ATTEMPTS {
            let node = api
                .get(name)
                .await
                .map_err(self.ctx.api_error(format!("reading node {name}")))?;
            let Some(patch) = edit_of(&node).and_then(|edit| node_patch(&node, &edit)) else {
                return Ok(false);
            };
            let value = serde_json::to_value(&patch).unwrap_or(Value::Null);
            tracing::debug!(node = name, attempt, dry_run = self.ctx.dry_run(), patch = %value, "patching the node");
            match api
                .patch(name, &self.params(), &Patch::<()>::Json(patch))
                .await
                .map_err(self.ctx.api_error(format!("patching node {name}")))
            {
                Ok(_) => {
                    self.report.changes.push(Change {
                        kind: "Node".into(),
                        name: name.to_owned(),
                        action: action.to_owned(),
                        patch: value,
                    });
                    return Ok(true);
                }
                // 422: the resourceVersion test failed; 409: a concurrent update won.
                Err(e) if matches!(e.code(), Some(409 | 422)) && attempt < NODE_WRITE_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// Merge-patches the NodeWright `name` (metadata or spec).
    pub async fn patch_nodewright(&mut self, name: &str, action: &str, patch: Value) -> Result<()> {
        let api: Api<NodeWright> = Api::all(self.ctx.client().await?.clone());
        api.patch(name, &self.params(), &Patch::Merge(&patch))
            .await
            .map_err(self.ctx.api_error(format!("patching NodeWright {name}")))?;
        self.report.changes.push(Change {
            kind: "NodeWright".into(),
            name: name.to_owned(),
            action: action.to_owned(),
            patch,
        });
        Ok(())
    }

    /// Merge-patches the status of the NodeWright `name`.
    pub async fn patch_nodewright_status(
        &mut self,
        name: &str,
        action: &str,
        patch: Value,
    ) -> Result<()> {
        let api: Api<NodeWright> = Api::all(self.ctx.client().await?.clone());
        api.patch_status(name, &self.params(), &Patch::Merge(&patch))
            .await
            .map_err(
                self.ctx
                    .api_error(format!("patching the status of NodeWright {name}")),
            )?;
        self.report.changes.push(Change {
            kind: "NodeWright/status".into(),
            name: name.to_owned(),
            action: action.to_owned(),
            patch,
        });
        Ok(())
    }

    /// Writes `packages` as the spec.packages of the NodeWright read as `nw`, under its
    /// resourceVersion ([`nodewright_core::rollout::rollback::packages_patch`]). A conflict caused
    /// by a write that left the spec alone (the operator's status) is retried on a fresh read; a
    /// changed spec (a new generation) is refused, so a change the user did not see is never
    /// overwritten. `shown` is what the report prints as the change.
    pub async fn write_nodewright_packages(
        &mut self,
        nw: &NodeWright,
        packages: &std::collections::BTreeMap<String, nodewright_shared::api::Package>,
        action: &str,
        shown: Value,
    ) -> Result<()> {
        let api: Api<NodeWright> = Api::all(self.ctx.client().await?.clone());
        let name = nw.metadata.name.clone().unwrap_or_default();
        let mut rv = nw.metadata.resource_version.clone().unwrap_or_default();
        for attempt in 1..=NODE_WRITE_ATTEMPTS {
            let patch = nodewright_core::rollout::rollback::packages_patch(&rv, packages)
                .map_err(|e| CliError::Invalid(format!("cannot encode the packages: {e}")))?;
            match api
                .patch(&name, &self.params(), &Patch::<()>::Json(patch))
                .await
            {
                Ok(_) => {
                    self.report.changes.push(Change {
                        kind: "NodeWright".into(),
                        name,
                        action: action.to_owned(),
                        patch: shown,
                    });
                    return Ok(());
                }
                Err(kube::Error::Api(status))
                    if status.code == 409 && attempt < NODE_WRITE_ATTEMPTS =>
                {
                    let fresh = api
                        .get(&name)
                        .await
                        .map_err(self.ctx.api_error(format!("reading NodeWright {name}")))?;
                    if fresh.metadata.generation != nw.metadata.generation {
                        return Err(CliError::Invalid(format!(
                            "NodeWright {name} changed since it was read (generation {} is now \
                             {}); nothing was written: run the command again",
                            nw.metadata.generation.unwrap_or_default(),
                            fresh.metadata.generation.unwrap_or_default()
                        )));
                    }
                    rv = fresh.metadata.resource_version.unwrap_or_default();
                }
                Err(e) => {
                    return Err(self.ctx.api_error(format!("writing NodeWright {name}"))(e));
                }
            }
        }
        Ok(())
    }

    /// Creates a NodeWright (its status, if any, is written after the object exists).
    pub async fn create_nodewright(&mut self, nw: &NodeWright) -> Result<()> {
        let api: Api<NodeWright> = Api::all(self.ctx.client().await?.clone());
        let name = nw.metadata.name.clone().unwrap_or_default();
        let mut object = nw.clone();
        object.status = None;
        api.create(&self.post_params(), &object)
            .await
            .map_err(self.ctx.api_error(format!("creating NodeWright {name}")))?;
        self.report.changes.push(Change {
            kind: "NodeWright".into(),
            name,
            action: "create".into(),
            patch: serde_json::to_value(&object).unwrap_or(Value::Null),
        });
        Ok(())
    }

    /// Creates a DeploymentPolicy.
    pub async fn create_policy(&mut self, policy: &DeploymentPolicy) -> Result<()> {
        let api: Api<DeploymentPolicy> = Api::all(self.ctx.client().await?.clone());
        let name = policy.metadata.name.clone().unwrap_or_default();
        api.create(&self.post_params(), policy).await.map_err(
            self.ctx
                .api_error(format!("creating DeploymentPolicy {name}")),
        )?;
        self.report.changes.push(Change {
            kind: "DeploymentPolicy".into(),
            name,
            action: "create".into(),
            patch: serde_json::to_value(policy).unwrap_or(Value::Null),
        });
        Ok(())
    }

    /// Records a change that is not sent: a dry run of a write that depends on an earlier write of
    /// the same run (which a dry run did not store), e.g. a status of an object it creates.
    pub fn record_unsent(&mut self, kind: &str, name: &str, action: &str, patch: Value) {
        self.report.changes.push(Change {
            kind: kind.to_owned(),
            name: name.to_owned(),
            action: format!(
                "{action} (not validated: depends on an earlier change of this dry run)"
            ),
            patch,
        });
    }

    fn post_params(&self) -> PostParams {
        PostParams {
            dry_run: self.ctx.dry_run(),
            field_manager: Some(FIELD_MANAGER.to_owned()),
        }
    }
}
