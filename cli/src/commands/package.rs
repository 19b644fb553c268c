//! `package status`, `package rerun` and `package reset`.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::node::state::parse_state;
use nodewright_shared::api::{NodeWright, Package};
use nodewright_shared::keys;
use nodewright_shared::node_state::{PackageStatus, Stage, State};
use serde::Serialize;

use crate::args::{PackageRerunArgs, PackageResetArgs, PackageStatusArgs, RerunStage};
use crate::cluster;
use crate::context::Ctx;
use crate::error::{CliError, Result};
use crate::output::{Render, Table, or_dash, print};
use crate::patterns::NodePatterns;
use crate::prompt::confirm;
use crate::summary::status_cell;
use crate::writes::Writer;

/// The package `name` of `nw`; an error listing its packages when there is none.
pub fn spec_package<'a>(nw: &'a NodeWright, name: &str) -> Result<&'a Package> {
    nw.spec.packages.get(name).ok_or_else(|| {
        CliError::NotFound(format!(
            "NodeWright {} has no package {name:?} (its packages: {})",
            nw.name_any(),
            or_dash(
                nw.spec
                    .packages
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        ))
    })
}

/// One record of the package on one node.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    node_name: String,
    #[serde(flatten)]
    record: PackageStatus,
}

/// `package status`'s result.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PackageStatuses {
    nodewright: String,
    /// `name:version` of every package of the NodeWright.
    packages: Vec<String>,
    nodes: Vec<Row>,
}

impl Render for PackageStatuses {
    fn table(&self, wide: bool) -> String {
        let mut out = format!(
            "NodeWright: {}\nPackages: {}\n\n",
            self.nodewright,
            self.packages.join(", ")
        );
        if self.nodes.is_empty() {
            out.push_str("No node has a record of this package yet.\n");
            return out;
        }
        let mut headers = vec!["NODE", "PACKAGE", "VERSION", "STAGE", "STATE"];
        if wide {
            headers.extend(["RESTARTS", "IMAGE"]);
        }
        let mut t = Table::new(&headers);
        for r in &self.nodes {
            let mut row = vec![
                r.node_name.clone(),
                r.record.name.clone(),
                r.record.version.clone(),
                r.record.stage.to_string(),
                status_cell(r.record.state.map_or("-", |s| s.as_str())),
            ];
            if wide {
                row.extend([r.record.restarts.to_string(), r.record.image.clone()]);
            }
            t.row(row);
        }
        out.push_str(&t.render());
        out
    }
}

/// Runs `package status`.
pub async fn status(ctx: &Ctx, args: &PackageStatusArgs) -> Result<()> {
    let nw = cluster::nodewright(ctx, &args.nodewright).await?;
    let patterns = NodePatterns::parse(&args.nodes)?;
    let all = cluster::nodes(ctx).await?;
    let nodes = patterns.select(&all)?;
    let mut rows = Vec::new();
    for node in nodes {
        let Some(state) = parse_state(node, &args.nodewright) else {
            continue;
        };
        for record in state.iter().filter(|r| r.name == args.package) {
            rows.push(Row {
                node_name: node.name_any(),
                record: record.clone(),
            });
        }
    }
    if rows.is_empty() && !nw.spec.packages.contains_key(&args.package) {
        spec_package(&nw, &args.package)?;
    }
    let mut packages: Vec<String> = nw
        .spec
        .packages
        .iter()
        .map(|(k, p)| format!("{k}:{}", p.version))
        .collect();
    packages.sort();
    print(
        ctx.format(),
        &PackageStatuses {
            nodewright: args.nodewright.clone(),
            packages,
            nodes: rows,
        },
    )
}

/// The node stage of a rerun stage.
fn stage_of(stage: RerunStage) -> Stage {
    match stage {
        RerunStage::Apply => Stage::Apply,
        RerunStage::Config => Stage::Config,
        RerunStage::Interrupt => Stage::Interrupt,
        RerunStage::PostInterrupt => Stage::PostInterrupt,
    }
}

/// Whether the package goes through `stage`: every package has apply and config; only a package
/// with an interrupt (or config interrupts) has interrupt and post-interrupt.
pub fn valid_stage(package: &Package, stage: Stage) -> bool {
    match stage {
        Stage::Interrupt | Stage::PostInterrupt => {
            package.interrupt.is_some() || !package.config_interrupts.is_empty()
        }
        _ => true,
    }
}

/// The edit that reruns `package` at `version` on `node` (from `stage`, or from the start); `None`
/// when the node has no record of it.
fn rerun_edit(
    node: &Node,
    nodewright: &str,
    package: &str,
    version: &str,
    stage: Option<Stage>,
) -> Option<NodeEdit> {
    let mut state = parse_state(node, nodewright)?;
    let mut record = state.get(package, version)?.clone();
    match stage {
        None => {
            state.remove(package, version);
        }
        Some(stage) => {
            record.stage = stage;
            record.state = Some(State::InProgress);
            record.restarts = 0;
            state.upsert(record);
        }
    }
    let mut edit = NodeEdit::default();
    let key = keys::node_state_key(nodewright);
    if state.is_empty() {
        edit.remove_annotation(key);
    } else {
        edit.annotate(key, state.to_annotation());
    }
    Some(edit)
}

/// Runs `package rerun`.
pub async fn rerun(ctx: &Ctx, args: &PackageRerunArgs) -> Result<()> {
    rerun_on(
        ctx,
        Rerun {
            nodewright: &args.nodewright,
            package: &args.package,
            nodes: &args.nodes,
            stage: args.stage.map(stage_of),
            yes: args.confirm.yes,
        },
    )
    .await
}

/// Runs `package reset`: `package rerun` from the start, on every node with a record of the
/// package when no `--node` is given.
pub async fn reset(ctx: &Ctx, args: &PackageResetArgs) -> Result<()> {
    let every = [".*".to_owned()];
    rerun_on(
        ctx,
        Rerun {
            nodewright: &args.nodewright,
            package: &args.package,
            nodes: if args.nodes.is_empty() {
                &every
            } else {
                &args.nodes
            },
            stage: None,
            yes: args.confirm.yes,
        },
    )
    .await
}

/// What to run again, and where.
struct Rerun<'a> {
    nodewright: &'a str,
    package: &'a str,
    nodes: &'a [String],
    /// `None`: from the start (the record is removed).
    stage: Option<Stage>,
    yes: bool,
}

async fn rerun_on(ctx: &Ctx, args: Rerun<'_>) -> Result<()> {
    let name = args.nodewright;
    let nw = cluster::nodewright(ctx, name).await?;
    let package = spec_package(&nw, args.package)?;
    let version = package.version.clone();
    let stage = args.stage;
    if let Some(stage) = stage
        && !valid_stage(package, stage)
    {
        return Err(CliError::Invalid(format!(
            "--stage {stage}: package {} of NodeWright {name} has no interrupt, so it never runs \
             the {stage} stage; rerun it from apply or config (or without --stage); nothing was \
             written",
            args.package
        )));
    }
    let patterns = NodePatterns::parse(args.nodes)?;
    let all = cluster::nodes(ctx).await?;
    let matched = patterns.select(&all)?;
    let mut writer = Writer::new(ctx);
    let (targets, skipped): (Vec<&Node>, Vec<&Node>) = matched.into_iter().partition(|n| {
        parse_state(n, name).is_some_and(|s| s.get(args.package, &version).is_some())
    });
    for n in &skipped {
        writer.note(format!(
            "node {} has no record of {}|{version}: skipped (it runs there anyway when the node is reached)",
            n.name_any(),
            args.package
        ));
    }
    if targets.is_empty() {
        return Err(CliError::NotFound(format!(
            "no matching node has a record of package {}|{version} of NodeWright {name}: nothing to rerun",
            args.package
        )));
    }
    let from = stage.map_or_else(|| "the start".to_owned(), |s| format!("stage {s}"));
    if !ctx.dry_run() {
        let names: Vec<String> = targets.iter().map(|n| n.name_any()).collect();
        confirm(
            args.yes,
            &format!("rerun package {} on {}", args.package, names.join(", ")),
            &format!(
                "Rerun package {} of NodeWright {name} from {from} on {}?",
                args.package,
                names.join(", ")
            ),
        )?;
    }
    for node in targets {
        writer
            .edit_node(
                &node.name_any(),
                &format!("rerun {}|{version} from {from}", args.package),
                |n| rerun_edit(n, name, args.package, &version, stage),
            )
            .await?;
    }
    writer.print(ctx.format())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{Interrupt, InterruptType};

    #[test]
    fn interrupt_stages_need_an_interrupt() {
        let mut p = Package::default();
        assert!(valid_stage(&p, Stage::Apply) && valid_stage(&p, Stage::Config));
        assert!(!valid_stage(&p, Stage::Interrupt) && !valid_stage(&p, Stage::PostInterrupt));
        p.interrupt = Some(Interrupt {
            kind: InterruptType::Reboot,
            services: vec![],
        });
        assert!(valid_stage(&p, Stage::Interrupt) && valid_stage(&p, Stage::PostInterrupt));
    }
}
