//! `node update-state`: one package's record on one node, written as the administrator says.

use k8s_openapi::api::core::v1::Node;
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::node::state::parse_state;
use nodewright_shared::api::Package;
use nodewright_shared::keys;
use nodewright_shared::node_state::{NodeState, PackageStatus, Stage, State};

use super::package::{spec_package, valid_stage};
use crate::args::{NodeUpdateStateArgs, RecordState};
use crate::cluster;
use crate::context::Ctx;
use crate::error::{CliError, Result};
use crate::prompt::confirm;
use crate::writes::Writer;

fn state_of(state: RecordState) -> State {
    match state {
        RecordState::Complete => State::Complete,
        RecordState::InProgress => State::InProgress,
        RecordState::Erroring => State::Erroring,
        RecordState::Skipped => State::Skipped,
        RecordState::Unknown => State::Unknown,
    }
}

/// The edit that records `package` (its spec version) at `stage`/`state` on `node`, attempts at 0;
/// `None` when the node's state for the NodeWright cannot be read (it is never overwritten) or
/// already says so.
fn record_edit(
    node: &Node,
    nodewright: &str,
    name: &str,
    package: &Package,
    stage: Stage,
    state: State,
) -> Option<NodeEdit> {
    let key = keys::node_state_key(nodewright);
    let mut states = match node.metadata.annotations.as_ref().and_then(|a| a.get(&key)) {
        None => NodeState::default(),
        Some(_) => parse_state(node, nodewright)?,
    };
    // An existing record keeps the image it ran with; a new one takes the spec's.
    let existing = states.get(name, &package.version);
    let record = PackageStatus {
        name: name.to_owned(),
        version: package.version.clone(),
        image: existing.map_or_else(|| package.image.clone(), |r| r.image.clone()),
        container_sha: existing
            .map(|r| r.container_sha.clone())
            .unwrap_or_default(),
        stage,
        state: Some(state),
        restarts: 0,
    };
    if existing == Some(&record) {
        return None;
    }
    states.upsert(record);
    let mut edit = NodeEdit::default();
    edit.annotate(key, states.to_annotation());
    Some(edit)
}

/// Runs `node update-state`.
pub async fn update_state(ctx: &Ctx, args: &NodeUpdateStateArgs) -> Result<()> {
    let name = &args.nodewright;
    let nw = cluster::nodewright(ctx, name).await?;
    let package = spec_package(&nw, &args.package)?.clone();
    let (stage, state) = (args.stage.stage(), state_of(args.state));
    if !valid_stage(&package, stage) {
        return Err(CliError::Invalid(format!(
            "--stage {stage}: package {} of NodeWright {name} has no interrupt, so it never runs \
             the {stage} stage; record apply, config, upgrade or uninstall; nothing was written",
            args.package
        )));
    }
    let node = &args.node;
    let nodes = cluster::nodes(ctx).await?;
    let Some(found) = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))
    else {
        return Err(CliError::NotFound(format!(
            "node {node} does not exist: nothing was written"
        )));
    };
    if found
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(&keys::node_state_key(name)))
        && parse_state(found, name).is_none()
    {
        return Err(CliError::Invalid(format!(
            "node {node}'s state for NodeWright {name} ({}) cannot be read: repair or remove it \
             (kubectl nodewright node reset {node} --nodewright {name}); nothing was written",
            keys::node_state_key(name)
        )));
    }
    let what = format!(
        "record {}|{} at {stage} {} on node {node}",
        args.package,
        package.version,
        state.as_str()
    );
    if !ctx.dry_run() {
        confirm(
            args.confirm.yes,
            &what,
            &format!("For NodeWright {name}, {what}?"),
        )?;
    }
    let mut writer = Writer::new(ctx);
    let changed = writer
        .edit_node(node, &what, |n| {
            record_edit(n, name, &args.package, &package, stage, state)
        })
        .await?;
    if !changed {
        writer.note(format!(
            "node {node} already records that: nothing to write"
        ));
    }
    writer.print(ctx.format())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn node(annotation: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                resource_version: Some("1".into()),
                annotations: annotation
                    .map(|a| BTreeMap::from([(keys::node_state_key("nw"), a.to_owned())])),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn package() -> Package {
        Package {
            version: "1.2.0".into(),
            image: "ghcr.io/example/driver".into(),
            ..Package::default()
        }
    }

    /// The edit recording package `driver` of `package()` for NodeWright `nw` on `n`.
    fn edit_of(n: &Node, stage: Stage, state: State) -> Option<NodeEdit> {
        record_edit(n, "nw", "driver", &package(), stage, state)
    }

    fn written(n: &Node, edit: &NodeEdit) -> NodeState {
        let patched = nodewright_core::node::edit::node_patch(n, edit).expect("a patch");
        let mut value = serde_json::to_value(n).expect("node");
        json_patch::patch(&mut value, &patched).expect("applies");
        let after: Node = serde_json::from_value(value).expect("node");
        parse_state(&after, "nw").expect("readable")
    }

    #[test]
    fn a_record_is_created_or_rewritten_with_attempts_at_zero() {
        let edit = edit_of(&node(None), Stage::Config, State::Complete).expect("an edit");
        let state = written(&node(None), &edit);
        let r = state.get("driver", "1.2.0").expect("recorded");
        assert_eq!(
            (r.stage, r.state, r.restarts),
            (Stage::Config, Some(State::Complete), 0)
        );
        assert_eq!(r.image, "ghcr.io/example/driver");
        // Rewriting an erroring record: the image it ran with stays, the attempts go to 0.
        let mut before = NodeState::default();
        before.upsert(PackageStatus {
            name: "driver".into(),
            version: "1.2.0".into(),
            image: "registry.local/driver".into(),
            container_sha: "sha".into(),
            stage: Stage::Apply,
            state: Some(State::Erroring),
            restarts: 4,
        });
        let n = node(Some(&before.to_annotation()));
        let edit = edit_of(&n, Stage::Apply, State::InProgress).expect("an edit");
        let after = written(&n, &edit);
        let r = after.get("driver", "1.2.0").expect("recorded");
        assert_eq!(
            (r.state, r.restarts, r.image.as_str()),
            (Some(State::InProgress), 0, "registry.local/driver")
        );
    }

    #[test]
    fn an_unreadable_state_is_never_overwritten_and_an_equal_record_is_no_edit() {
        assert!(edit_of(&node(Some("{")), Stage::Config, State::Complete).is_none());
        let mut same = NodeState::default();
        same.upsert(PackageStatus {
            name: "driver".into(),
            version: "1.2.0".into(),
            image: "ghcr.io/example/driver".into(),
            container_sha: String::new(),
            stage: Stage::Config,
            state: Some(State::Complete),
            restarts: 0,
        });
        let n = node(Some(&same.to_annotation()));
        assert!(edit_of(&n, Stage::Config, State::Complete).is_none());
    }
}
