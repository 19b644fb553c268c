//! `migrate-from-skyhook`: upstream `skyhook.nvidia.com/v1alpha1` Skyhook and DeploymentPolicy
//! objects become `nodewright.nvidia.com/v1alpha1` NodeWright and DeploymentPolicy objects, and
//! every node's upstream records are copied to the `nodewright.nvidia.com/` keys, so that what is
//! installed stays installed: the operator finds each package `complete` and runs nothing for it.
//!
//! Order of writes, so the operator never sees a NodeWright without its history: the policies (a
//! NodeWright naming one is refused without it), then the node records, then the NodeWrights, then
//! their status (batch progress, node order, boot IDs). Everything is converted and checked before
//! the first write; a problem anywhere writes nothing. Upstream objects and keys stay (a rollback
//! to upstream keeps working); keys already present under `nodewright.nvidia.com/` are kept.

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use nodewright_core::jobs::RuntimeTaint;
use nodewright_core::naming::auto_taint_annotation;
use nodewright_core::node::edit::NodeEdit;
use nodewright_shared::api::{DeploymentPolicy, NodeWright, NodeWrightStatus};
use nodewright_shared::keys;
use nodewright_shared::node_state::NodeState;
use serde_json::{Map, Value, json};

use crate::args::MigrateArgs;
use crate::cluster;
use crate::context::Ctx;
use crate::error::{CliError, Result};
use crate::manifest;
use crate::prompt::confirm;
use crate::writes::Writer;

/// Upstream's API group and version.
pub const UPSTREAM_GROUP: &str = "skyhook.nvidia.com";
const UPSTREAM_VERSION: &str = "v1alpha1";
/// Upstream's key prefix.
const UPSTREAM_PREFIX: &str = "skyhook.nvidia.com/";
/// The node-key words copied per Skyhook (`<prefix><word>_<name>`), annotations.
const NODE_WORDS: [&str; 4] = ["nodeState", "status", "cordon", "version"];

/// The upstream objects to migrate.
#[derive(Debug, Default)]
struct Upstream {
    skyhooks: Vec<Value>,
    policies: Vec<Value>,
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(UPSTREAM_GROUP, UPSTREAM_VERSION, kind),
        plural,
    )
}

/// Lists an upstream kind; an absent CRD (404) is no objects.
async fn list_upstream(ctx: &Ctx, kind: &str, plural: &str) -> Result<Vec<Value>> {
    let ar = resource(kind, plural);
    let api: Api<DynamicObject> = Api::all_with(ctx.client().await?.clone(), &ar);
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list
            .items
            .into_iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .collect()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(ctx.api_error(format!("listing {plural}.{UPSTREAM_GROUP}"))(
            e,
        )),
    }
}

/// Reads upstream objects from files (YAML or JSON, several documents, `List`s flattened).
fn read_files(files: &[PathBuf]) -> Result<Upstream> {
    let mut up = Upstream::default();
    let expected = format!("{UPSTREAM_GROUP}/{UPSTREAM_VERSION}");
    for path in files {
        for doc in manifest::read(path)? {
            match (doc.api_version == expected, doc.kind.as_str()) {
                (true, "Skyhook") => up.skyhooks.push(doc.value),
                (true, "DeploymentPolicy") => up.policies.push(doc.value),
                _ => {
                    return Err(doc.error(format!(
                        "{}/{} is not a Skyhook or a DeploymentPolicy of {expected}",
                        doc.api_version, doc.kind
                    )));
                }
            }
        }
    }
    Ok(up)
}

/// Renames an upstream metadata key (`skyhook.nvidia.com/x` → `nodewright.nvidia.com/x`); drops
/// the keys only the upstream operator writes.
fn rename_key(key: &str) -> Option<String> {
    match key.strip_prefix(UPSTREAM_PREFIX) {
        Some("version") => None,
        Some(rest) => Some(format!("{}{rest}", keys::PREFIX)),
        None if key == "kubectl.kubernetes.io/last-applied-configuration" => None,
        None => Some(key.to_owned()),
    }
}

/// The metadata of a converted object: name, labels and annotations renamed.
fn metadata(upstream: &Value) -> Value {
    let m = upstream.get("metadata").cloned().unwrap_or_default();
    let renamed = |field: &str| -> Map<String, Value> {
        m.get(field)
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .filter_map(|(k, v)| rename_key(k).map(|k| (k, v.clone())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = Map::new();
    out.insert("name".into(), m.get("name").cloned().unwrap_or_default());
    let labels = renamed("labels");
    if !labels.is_empty() {
        out.insert("labels".into(), Value::Object(labels));
    }
    let annotations = renamed("annotations");
    if !annotations.is_empty() {
        out.insert("annotations".into(), Value::Object(annotations));
    }
    Value::Object(out)
}

/// An image without the tag upstream stripped at decode (`img:1.0` → `img`; a registry port is no
/// tag). Upstream stored images without tags; an object written around its webhook may carry one.
fn untagged(image: &str) -> &str {
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].find([':', '@']) {
        Some(i) => &image[..last_slash + i],
        None => image,
    }
}

/// The fields of `original` that `converted` does not keep (dotted paths), so nothing is lost
/// silently.
fn dropped(original: &Value, converted: &Value, path: &str, out: &mut Vec<String>) {
    if let (Some(o), Some(c)) = (original.as_object(), converted.as_object()) {
        for (k, v) in o {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            match c.get(k) {
                None if !v.is_null() => out.push(p),
                Some(cv) => dropped(v, cv, &p, out),
                None => {}
            }
        }
    }
}

/// A converted Skyhook: the NodeWright, the status to carry over, and remarks.
struct Converted {
    nodewright: NodeWright,
    status: Option<Value>,
    notes: Vec<String>,
}

/// Converts one Skyhook.
fn convert_skyhook(upstream: &Value) -> Result<Converted> {
    let name = upstream
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if name.is_empty() || name.len() > keys::MAX_NODEWRIGHT_NAME_LEN {
        return Err(CliError::Invalid(format!(
            "Skyhook {name:?}: a NodeWright name has 1 to {} characters (its node keys must stay \
             valid); nothing was written",
            keys::MAX_NODEWRIGHT_NAME_LEN
        )));
    }
    let mut notes = Vec::new();
    let mut spec = upstream.get("spec").cloned().unwrap_or_else(|| json!({}));
    if let Some(packages) = spec.get_mut("packages").and_then(Value::as_object_mut) {
        for (key, p) in packages.iter_mut() {
            if let Some(image) = p.get("image").and_then(Value::as_str) {
                let bare = untagged(image).to_owned();
                if bare != image {
                    notes.push(format!(
                        "Skyhook {name}: package {key}: image {image} → {bare} (the tag is the version, the digest containerSHA)"
                    ));
                    p["image"] = Value::String(bare);
                }
            }
        }
    }
    let object = json!({
        "apiVersion": format!("{}/{}", keys::GROUP, keys::VERSION),
        "kind": "NodeWright",
        "metadata": metadata(upstream),
        "spec": spec,
    });
    let nodewright: NodeWright = serde_json::from_value(object.clone()).map_err(|e| {
        CliError::Invalid(format!(
            "Skyhook {name}: its spec does not convert to a NodeWright: {e}; nothing was written"
        ))
    })?;
    let mut lost = Vec::new();
    let converted = serde_json::to_value(&nodewright.spec).unwrap_or_default();
    dropped(
        upstream.get("spec").unwrap_or(&Value::Null),
        &converted,
        "spec",
        &mut lost,
    );
    if !lost.is_empty() {
        notes.push(format!(
            "Skyhook {name}: fields NodeWright does not have were left out: {}",
            lost.join(", ")
        ));
    }
    // The rollout's progress carries over; the mirrors and conditions are recomputed.
    let status = upstream.get("status").map(|s| {
        let mut kept = Map::new();
        for field in [
            "nodeBootIds",
            "nodePriority",
            "nodeOrderOffset",
            "compartmentStatuses",
        ] {
            if let Some(v) = s.get(field).filter(|v| !v.is_null()) {
                kept.insert(field.to_owned(), v.clone());
            }
        }
        Value::Object(kept)
    });
    let status = status.filter(|s| s.as_object().is_some_and(|o| !o.is_empty()));
    if let Some(s) = &status {
        serde_json::from_value::<NodeWrightStatus>(s.clone()).map_err(|e| {
            CliError::Invalid(format!(
                "Skyhook {name}: its status does not convert: {e}; nothing was written"
            ))
        })?;
    }
    Ok(Converted {
        nodewright,
        status,
        notes,
    })
}

/// Converts one upstream DeploymentPolicy.
fn convert_policy(upstream: &Value) -> Result<DeploymentPolicy> {
    let name = upstream
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let object = json!({
        "apiVersion": format!("{}/{}", keys::GROUP, keys::VERSION),
        "kind": "DeploymentPolicy",
        "metadata": metadata(upstream),
        "spec": upstream.get("spec").cloned().unwrap_or_default(),
    });
    serde_json::from_value(object).map_err(|e| {
        CliError::Invalid(format!(
            "DeploymentPolicy {name}: does not convert: {e}; nothing was written"
        ))
    })
}

/// The records of `node` to copy for the Skyhooks `names`, the ignore label, and the upstream
/// runtime-required taint swapped for ours; `None` when there is nothing to copy. Keys already
/// under `nodewright.nvidia.com/` win (noted).
fn node_edit(
    node: &Node,
    names: &[String],
    upstream_taint: &RuntimeTaint,
    our_taint: &RuntimeTaint,
    notes: &mut Vec<String>,
) -> Result<Option<(NodeEdit, Vec<String>)>> {
    let node_name = node.name_any();
    let annotations = node.annotations();
    let labels = node.labels();
    let mut edit = NodeEdit::default();
    let mut what = Vec::new();
    let mut copy =
        |edit: &mut NodeEdit, is_label: bool, from: String, to: String, value: String| {
            let current = if is_label {
                labels.get(&to)
            } else {
                annotations.get(&to)
            };
            match current {
                Some(v) if *v == value => {}
                Some(_) => notes.push(format!(
                    "node {node_name}: {to} is already set (kept; {from} not copied)"
                )),
                None => {
                    if is_label {
                        edit.label(to.clone(), value);
                    } else {
                        edit.annotate(to.clone(), value);
                    }
                    what.push(format!("{from} → {to}"));
                }
            }
        };
    for name in names {
        for word in NODE_WORDS {
            let from = format!("{UPSTREAM_PREFIX}{word}_{name}");
            let Some(value) = annotations.get(&from) else {
                continue;
            };
            let value = if word == "nodeState" {
                NodeState::parse(value)
                    .map_err(|e| {
                        CliError::Invalid(format!(
                            "node {node_name}: {from} cannot be read ({e}); fix or remove it, then \
                             migrate again; nothing was written"
                        ))
                    })?
                    .to_annotation()
            } else {
                value.clone()
            };
            copy(
                &mut edit,
                false,
                from,
                format!("{}{word}_{name}", keys::PREFIX),
                value,
            );
        }
        let from = format!("{UPSTREAM_PREFIX}status_{name}");
        if let Some(value) = labels.get(&from) {
            copy(
                &mut edit,
                true,
                from,
                keys::node_status_key(name),
                value.clone(),
            );
        }
    }
    let from = format!("{UPSTREAM_PREFIX}ignore");
    if let Some(value) = labels.get(&from) {
        copy(
            &mut edit,
            true,
            from,
            keys::IGNORE_LABEL.to_owned(),
            value.clone(),
        );
    }
    let taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if taints.iter().any(|t| upstream_taint.matches(t)) {
        let mut next: Vec<Taint> = taints
            .iter()
            .filter(|t| !upstream_taint.matches(t))
            .cloned()
            .collect();
        if !next.iter().any(|t| our_taint.matches(t)) {
            next.push(Taint {
                key: our_taint.key.clone(),
                value: our_taint.value.clone(),
                effect: our_taint.effect.clone(),
                time_added: None,
            });
        }
        edit.taints = Some(next);
        what.push(format!("taint {upstream_taint} → {our_taint}"));
        let from = format!("{UPSTREAM_PREFIX}autoTaint_{}", upstream_taint.key);
        if let Some(value) = annotations.get(&from) {
            edit.annotate(auto_taint_annotation(&our_taint.key), value.clone());
            what.push(format!(
                "{from} → {}",
                auto_taint_annotation(&our_taint.key)
            ));
        }
    }
    Ok((!what.is_empty()).then_some((edit, what)))
}

/// Runs `migrate-from-skyhook`.
/// Migrates: what to migrate ([`upstream_objects`]), everything converted and checked
/// ([`Migration::plan`]) before the first write, then the writes in order ([`Migration::write`]).
pub async fn run(ctx: &Ctx, args: &MigrateArgs) -> Result<()> {
    let upstream_taint = RuntimeTaint::parse(&args.skyhook_runtime_taint)
        .map_err(|e| CliError::Usage(format!("--skyhook-runtime-taint: {e}")))?;
    let up = upstream_objects(ctx, args).await?;
    let mut writer = Writer::new(ctx);
    let migration = Migration::plan(ctx, &up, &upstream_taint, &mut writer).await?;
    if migration.is_empty() {
        writer.note("everything is migrated already: nothing to change");
        return writer.print(ctx.format());
    }
    if !ctx.dry_run() {
        confirm(
            args.confirm.yes,
            "migrate from Skyhook",
            &format!(
                "Create {} NodeWright(s) and {} DeploymentPolicy(ies), and copy the Skyhook records of {} node(s)?",
                migration.nodewrights.len(),
                migration.policies.len(),
                migration.node_edits.len()
            ),
        )?;
    }
    migration.write(ctx, &mut writer).await?;
    writer.print(ctx.format())
}

fn name_of(v: &Value) -> String {
    v.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The upstream objects to migrate: from the files, else from the cluster; only the Skyhooks
/// named (and the policies they use) when some are. Nothing found, or a named Skyhook missing, is
/// an error (nothing was written).
async fn upstream_objects(ctx: &Ctx, args: &MigrateArgs) -> Result<Upstream> {
    let mut up = if args.files.is_empty() {
        Upstream {
            skyhooks: list_upstream(ctx, "Skyhook", "skyhooks").await?,
            policies: list_upstream(ctx, "DeploymentPolicy", "deploymentpolicies").await?,
        }
    } else {
        read_files(&args.files)?
    };
    if !args.skyhooks.is_empty() {
        let found: BTreeSet<String> = up.skyhooks.iter().map(name_of).collect();
        let missing: Vec<&String> = args
            .skyhooks
            .iter()
            .filter(|s| !found.contains(*s))
            .collect();
        if !missing.is_empty() {
            return Err(CliError::NotFound(format!(
                "no Skyhook named {}; nothing was written",
                missing
                    .iter()
                    .map(|m| format!("{m:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        up.skyhooks.retain(|s| args.skyhooks.contains(&name_of(s)));
        // Only the policies those Skyhooks use.
        let used: BTreeSet<String> = up
            .skyhooks
            .iter()
            .filter_map(|s| s.pointer("/spec/deploymentPolicy").and_then(Value::as_str))
            .map(str::to_owned)
            .collect();
        up.policies.retain(|p| used.contains(&name_of(p)));
    }
    if up.skyhooks.is_empty() && up.policies.is_empty() {
        return Err(CliError::NotFound(format!(
            "no {UPSTREAM_GROUP}/{UPSTREAM_VERSION} Skyhook or DeploymentPolicy found{}: nothing to migrate",
            if args.files.is_empty() {
                " in the cluster"
            } else {
                " in the files"
            }
        )));
    }
    Ok(up)
}

/// Everything a migration writes, converted and checked: the policies and NodeWrights that do not
/// exist yet, and the node records to copy (node name, edit, what it copies).
struct Migration {
    policies: Vec<DeploymentPolicy>,
    nodewrights: Vec<Converted>,
    node_edits: Vec<(String, NodeEdit, Vec<String>)>,
}

impl Migration {
    /// Converts `up` and reads what the cluster has; the conversion's notes and what is kept as it
    /// is go to `writer`'s report.
    async fn plan(
        ctx: &Ctx,
        up: &Upstream,
        upstream_taint: &RuntimeTaint,
        writer: &mut Writer<'_>,
    ) -> Result<Migration> {
        let mut notes = Vec::new();
        let mut converted = Vec::new();
        for s in &up.skyhooks {
            let c = convert_skyhook(s)?;
            notes.extend(c.notes.iter().cloned());
            converted.push(c);
        }
        let policies: Vec<DeploymentPolicy> = up
            .policies
            .iter()
            .map(convert_policy)
            .collect::<Result<_>>()?;
        let existing_nw: BTreeSet<String> = cluster::nodewrights(ctx)
            .await?
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        let existing_dp: BTreeSet<String> = cluster::policies(ctx)
            .await?
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        let our_taint = cluster::operator_settings(ctx).await?.runtime_taint;
        let names: Vec<String> = converted.iter().map(|c| c.nodewright.name_any()).collect();
        let mut node_edits = Vec::new();
        for node in &cluster::nodes(ctx).await? {
            if let Some((edit, what)) =
                node_edit(node, &names, upstream_taint, &our_taint, &mut notes)?
            {
                node_edits.push((node.name_any(), edit, what));
            }
        }
        for n in notes {
            writer.note(n);
        }
        let policies = policies
            .into_iter()
            .filter(|p| {
                let exists = existing_dp.contains(&p.name_any());
                if exists {
                    writer.note(format!(
                        "DeploymentPolicy {} already exists: kept, not converted again",
                        p.name_any()
                    ));
                }
                !exists
            })
            .collect();
        let nodewrights = converted
            .into_iter()
            .filter(|c| {
                let name = c.nodewright.name_any();
                let exists = existing_nw.contains(&name);
                if exists {
                    writer.note(format!(
                        "NodeWright {name} already exists: kept, not converted again"
                    ));
                }
                !exists
            })
            .collect();
        Ok(Migration {
            policies,
            nodewrights,
            node_edits,
        })
    }

    /// Nothing to write.
    fn is_empty(&self) -> bool {
        self.policies.is_empty() && self.nodewrights.is_empty() && self.node_edits.is_empty()
    }

    /// The writes, in the module's order: policies, node records, NodeWrights, their status. A
    /// dry run sends what the API server can check and records the rest (a NodeWright whose new
    /// policy a dry run did not create, every status patch) as unsent.
    async fn write(&self, ctx: &Ctx, writer: &mut Writer<'_>) -> Result<()> {
        let created_policies: BTreeSet<String> =
            self.policies.iter().map(|p| p.name_any()).collect();
        for p in &self.policies {
            writer.create_policy(p).await?;
        }
        for (node, edit, what) in &self.node_edits {
            let edit = edit.clone();
            writer
                .edit_node(node, &format!("copy {}", what.join(", ")), move |_| {
                    Some(edit.clone())
                })
                .await?;
        }
        for c in &self.nodewrights {
            let name = c.nodewright.name_any();
            let depends_on_new_policy = c
                .nodewright
                .spec
                .deployment_policy
                .as_ref()
                .is_some_and(|p| created_policies.contains(p));
            if ctx.dry_run() && depends_on_new_policy {
                writer.record_unsent(
                    "NodeWright",
                    &name,
                    "create",
                    serde_json::to_value(&c.nodewright).unwrap_or_default(),
                );
            } else {
                writer.create_nodewright(&c.nodewright).await?;
            }
        }
        for c in &self.nodewrights {
            let Some(status) = &c.status else { continue };
            let name = c.nodewright.name_any();
            let action = "carry over the rollout's progress (batch state, node order, boot IDs)";
            let patch = json!({"status": status});
            if ctx.dry_run() {
                writer.record_unsent("NodeWright/status", &name, action, patch);
            } else {
                writer.patch_nodewright_status(&name, action, patch).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_stripped_but_registry_ports_are_kept() {
        assert_eq!(untagged("ghcr.io/x/pkg:1.2.0"), "ghcr.io/x/pkg");
        assert_eq!(untagged("registry:5000/x/pkg"), "registry:5000/x/pkg");
        assert_eq!(untagged("registry:5000/x/pkg:1"), "registry:5000/x/pkg");
        assert_eq!(untagged("x/pkg@sha256:abc"), "x/pkg");
        assert_eq!(untagged("pkg"), "pkg");
    }

    #[test]
    fn a_skyhook_converts_with_its_keys_renamed_and_its_progress_kept() {
        let up = json!({
            "apiVersion": "skyhook.nvidia.com/v1alpha1",
            "kind": "Skyhook",
            "metadata": {
                "name": "gpu",
                "labels": {"team": "infra"},
                "annotations": {
                    "skyhook.nvidia.com/pause": "true",
                    "skyhook.nvidia.com/version": "v0.15.0"
                }
            },
            "spec": {
                "priority": 10,
                "packages": {"driver": {"version": "1.0.0", "image": "ghcr.io/x/driver:1.0.0"}},
                "futureField": 1
            },
            "status": {"status": "in_progress", "nodeOrderOffset": 2, "conditions": []}
        });
        let c = convert_skyhook(&up).expect("converts");
        let nw = &c.nodewright;
        assert_eq!(nw.spec.priority, 10);
        assert_eq!(nw.spec.packages["driver"].image, "ghcr.io/x/driver");
        let annotations = nw.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.get(keys::PAUSE_ANNOTATION).map(String::as_str),
            Some("true")
        );
        assert!(!annotations.keys().any(|k| k.contains("version")));
        assert_eq!(c.status, Some(json!({"nodeOrderOffset": 2})));
        assert!(
            c.notes.iter().any(|n| n.contains("spec.futureField")),
            "{:?}",
            c.notes
        );
    }
}
