//! `node list|status|reset|ignore|unignore`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::rollout::selection::NodeSelection;
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;
use serde::Serialize;

use super::reset::reset_nodes;
use crate::args::{NodeListArgs, NodePatterns as PatternArgs, NodeResetArgs, NodeStatusArgs};
use crate::cluster;
use crate::context::Ctx;
use crate::error::{CliError, Result};
use crate::output::{Render, Table, or_dash, print};
use crate::patterns::NodePatterns;
use crate::prompt::confirm;
use crate::summary::{NodeSummary, has_records, nodewrights_on, status_cell, summarize};
use crate::writes::Writer;

/// `node list`'s result.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeList {
    /// The NodeWright asked for, if one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    nodewright: Option<String>,
    /// One entry per node and NodeWright.
    nodes: Vec<NodeSummary>,
}

impl Render for NodeList {
    fn table(&self, wide: bool) -> String {
        let mut out = String::new();
        if let Some(name) = &self.nodewright {
            let count = |s: &str| self.nodes.iter().filter(|n| n.status == s).count();
            out.push_str(&format!(
                "NodeWright: {name}\n{} nodes ({} complete, {} in progress, {} erroring, {} blocked, {} waiting)\n\n",
                self.nodes.len(),
                count("complete"),
                count("in_progress"),
                count("erroring"),
                count("blocked"),
                count("waiting"),
            ));
        }
        if self.nodes.is_empty() {
            out.push_str("No nodes found.\n");
            return out;
        }
        let mut headers = vec!["NODE", "NODEWRIGHT", "STATUS", "PACKAGES"];
        if wide {
            headers.extend(["RESTARTS", "CORDONED", "IGNORED"]);
        }
        let mut t = Table::new(&headers);
        for n in &self.nodes {
            let mut row = vec![
                n.node_name.clone(),
                n.nodewright.clone(),
                status_cell(&n.status),
                format!("{}/{}", n.packages_complete, n.packages_total),
            ];
            if wide {
                row.extend([
                    n.restarts.to_string(),
                    n.cordoned.to_string(),
                    n.ignored.to_string(),
                ]);
            }
            t.row(row);
        }
        out.push_str(&t.render());
        out
    }
}

/// The NodeWrights by name.
fn by_name(nodewrights: Vec<NodeWright>) -> BTreeMap<String, NodeWright> {
    nodewrights.into_iter().map(|n| (n.name_any(), n)).collect()
}

/// Whether `nw` targets `node` (its selector).
fn selects(nw: &NodeWright, node: &Node) -> bool {
    NodeSelection::of(nw).is_ok_and(|s| s.matches(node.labels()))
}

/// Runs `node list`.
pub async fn list(ctx: &Ctx, args: &NodeListArgs) -> Result<()> {
    let nodes = cluster::nodes(ctx).await?;
    let nodewrights = match &args.nodewright {
        Some(name) => vec![cluster::nodewright(ctx, name).await?],
        None => cluster::nodewrights(ctx).await?,
    };
    let nodewrights = by_name(nodewrights);
    let mut entries = Vec::new();
    for node in &nodes {
        for (name, nw) in &nodewrights {
            if selects(nw, node) || has_records(node, name) {
                entries.push(summarize(node, name, Some(nw)));
            }
        }
    }
    print(
        ctx.format(),
        &NodeList {
            nodewright: args.nodewright.clone(),
            nodes: entries,
        },
    )
}

/// `node status`'s result.
#[derive(Debug, Serialize)]
#[serde(transparent)]
struct NodeStatuses(Vec<NodeSummary>);

impl Render for NodeStatuses {
    fn table(&self, wide: bool) -> String {
        if self.0.is_empty() {
            return "No NodeWright records on the matching nodes.\n".to_owned();
        }
        if !wide {
            let mut t = Table::new(&[
                "NODE",
                "NODEWRIGHT",
                "STATUS",
                "PACKAGES",
                CORDON_HEADERS[0],
                CORDON_HEADERS[1],
            ]);
            for n in &self.0 {
                let mut row = vec![
                    n.node_name.clone(),
                    n.nodewright.clone(),
                    status_cell(&n.status),
                    format!("{}/{}", n.packages_complete, n.packages_total),
                ];
                row.extend(cordon_cells(n));
                t.row(row);
            }
            return t.render();
        }
        let mut t = Table::new(&[
            "NODE",
            "NODEWRIGHT",
            "PACKAGE",
            "VERSION",
            "STAGE",
            "STATE",
            "RESTARTS",
            "IMAGE",
            CORDON_HEADERS[0],
            CORDON_HEADERS[1],
        ]);
        for n in &self.0 {
            if n.packages.is_empty() {
                let mut row = vec![
                    n.node_name.clone(),
                    n.nodewright.clone(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    status_cell(&n.status),
                    "-".into(),
                    "-".into(),
                ];
                row.extend(cordon_cells(n));
                t.row(row);
            }
            for p in &n.packages {
                let mut row = vec![
                    n.node_name.clone(),
                    n.nodewright.clone(),
                    p.name.clone(),
                    p.version.clone(),
                    p.stage.to_string(),
                    status_cell(p.state.map_or("-", |s| s.as_str())),
                    p.restarts.to_string(),
                    or_dash(p.image.clone()),
                ];
                row.extend(cordon_cells(n));
                t.row(row);
            }
        }
        t.render()
    }
}

/// `node status`'s last columns: whether the node is cordoned (by whoever), and whether it holds
/// the persistent runtime-required cordon (`runtimeRequiredCordonAfter`), the one a validator must
/// release: an administrator sees why a complete node takes no workloads.
const CORDON_HEADERS: [&str; 2] = ["CORDONED", "RUNTIME-REQUIRED-CORDON"];

/// The cells under [`CORDON_HEADERS`] (the `nodeCordoned` and `runtimeRequiredCordon` of `-o json`).
fn cordon_cells(n: &NodeSummary) -> [String; 2] {
    [
        n.node_cordoned.to_string(),
        n.runtime_required_cordon.to_string(),
    ]
}

/// Runs `node status`.
pub async fn status(ctx: &Ctx, args: &NodeStatusArgs) -> Result<()> {
    let patterns = NodePatterns::parse(&args.patterns)?;
    let nodes = cluster::nodes(ctx).await?;
    let matched = patterns.select(&nodes)?;
    let nodewrights = by_name(match &args.nodewright {
        Some(name) => vec![cluster::nodewright(ctx, name).await?],
        None => cluster::nodewrights(ctx).await?,
    });
    let mut out = Vec::new();
    for node in matched {
        let mut names: Vec<String> = nodewrights_on(node);
        names.extend(
            nodewrights
                .values()
                .filter(|nw| selects(nw, node))
                .map(ResourceExt::name_any),
        );
        names.sort();
        names.dedup();
        for name in names {
            if args.nodewright.as_ref().is_some_and(|n| *n != name) {
                continue;
            }
            out.push(summarize(node, &name, nodewrights.get(&name)));
        }
    }
    print(ctx.format(), &NodeStatuses(out))
}

/// Runs `node reset`.
pub async fn reset(ctx: &Ctx, args: &NodeResetArgs) -> Result<()> {
    let patterns = NodePatterns::parse(&args.patterns)?;
    let name = &args.nodewright;
    let nodes = cluster::nodes(ctx).await?;
    let matched = patterns.select(&nodes)?;
    if cluster::nodewright_opt(ctx, name).await?.is_none()
        && !nodes.iter().any(|n| has_records(n, name))
    {
        return Err(CliError::NodeWrightNotFound(name.clone()));
    }
    let targets: Vec<&Node> = matched
        .into_iter()
        .filter(|n| has_records(n, name))
        .collect();
    let mut writer = Writer::new(ctx);
    if targets.is_empty() {
        writer.note(format!(
            "none of the matching nodes has state for NodeWright {name}: nothing to reset"
        ));
        return writer.print(ctx.format());
    }
    if !ctx.dry_run() {
        let names: Vec<String> = targets.iter().map(|n| n.name_any()).collect();
        confirm(
            args.confirm.yes,
            &format!("reset NodeWright {name} on {}", names.join(", ")),
            &format!(
                "Reset NodeWright {name} on {} ({} node(s))? Its packages run again there.",
                names.join(", "),
                names.len()
            ),
        )?;
    }
    reset_nodes(&mut writer, &targets, name).await?;
    writer.print(ctx.format())
}

/// Runs `node ignore` (`on`) or `node unignore`.
pub async fn ignore(ctx: &Ctx, args: &PatternArgs, on: bool) -> Result<()> {
    let patterns = NodePatterns::parse(&args.patterns)?;
    let nodes = cluster::nodes(ctx).await?;
    let matched = patterns.select(&nodes)?;
    let mut writer = Writer::new(ctx);
    for node in matched {
        let node_name = node.name_any();
        let ignored = node
            .labels()
            .get(keys::IGNORE_LABEL)
            .is_some_and(|v| v == "true");
        if ignored == on {
            writer.note(format!(
                "node {node_name} is already {}ignored: skipped",
                if on { "" } else { "not " }
            ));
            continue;
        }
        let action = if on {
            format!("ignore (label {}=true)", keys::IGNORE_LABEL)
        } else {
            format!("unignore (label {} removed)", keys::IGNORE_LABEL)
        };
        writer
            .edit_node(&node_name, &action, |_| {
                let mut edit = NodeEdit::default();
                if on {
                    edit.label(keys::IGNORE_LABEL, "true");
                } else {
                    edit.remove_label(keys::IGNORE_LABEL);
                }
                Some(edit)
            })
            .await?;
    }
    writer.print(ctx.format())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::summarize;
    use nodewright_core::testing::node_with;

    /// The lines of `table`, split in cells.
    fn cells(table: &str) -> Vec<Vec<String>> {
        table
            .lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    }

    #[test]
    fn node_status_shows_the_cordon_and_the_runtime_required_cordon() {
        let mark = keys::RUNTIME_REQUIRED_CORDON_ANNOTATION;
        let state = keys::node_state_key("nw");
        let pinned = node_with(true, &[(mark, "true"), (&state, "{}")]);
        let free = node_with(false, &[(&state, "{}")]);
        for wide in [false, true] {
            let table = NodeStatuses(vec![summarize(&pinned, "nw", None)]).table(wide);
            let rows = cells(&table);
            let header = &rows[0];
            assert_eq!(
                header[header.len() - 2..],
                ["CORDONED", "RUNTIME-REQUIRED-CORDON"],
                "{table}"
            );
            assert_eq!(rows[1][rows[1].len() - 2..], ["true", "true"], "{table}");
            let table = NodeStatuses(vec![summarize(&free, "nw", None)]).table(wide);
            let rows = cells(&table);
            assert_eq!(rows[1][rows[1].len() - 2..], ["false", "false"], "{table}");
        }
        // The same facts in -o json.
        let json =
            serde_json::to_value(NodeStatuses(vec![summarize(&pinned, "nw", None)])).expect("json");
        assert_eq!(json[0]["nodeCordoned"], true);
        assert_eq!(json[0]["runtimeRequiredCordon"], true);
        // Cordoned by hand, no mark.
        let cordoned = node_with(true, &[(&state, "{}")]);
        let json = serde_json::to_value(NodeStatuses(vec![summarize(&cordoned, "nw", None)]))
            .expect("json");
        assert_eq!(json[0]["nodeCordoned"], true);
        assert_eq!(json[0]["runtimeRequiredCordon"], false);
    }
}
