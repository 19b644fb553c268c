//! `plan`: a rollout preview computed by the operator's own planner
//! ([`nodewright_core::preview`]) from the cluster's objects, or with the changed NodeWright
//! (and policies) of a manifest.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use nodewright_core::preview::{Blocker, NodePreview, Preview, Snapshot, preview};
use nodewright_shared::api::{DeploymentPolicy, NodeWright, Sequencing};
use nodewright_shared::keys;
use nodewright_shared::node_state::Stage;

use crate::args::PlanArgs;
use crate::cluster;
use crate::context::Ctx;
use crate::error::{CliError, Result};
use crate::manifest;
use crate::output::{Render, Table, or_dash, print};

/// A preview with what the table needs besides.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    /// The preview.
    #[serde(flatten)]
    pub preview: Preview,
    /// Where the operator settings came from.
    pub operator_settings: String,
    /// The NodeWright came from this file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// A blocker as a sentence, and the command that clears it (when one does).
pub fn explain(b: &Blocker, nodewright: &str, node: &str) -> (String, Option<String>) {
    match b {
        Blocker::Ignored => (
            format!("ignored: the node carries {}=true", keys::IGNORE_LABEL),
            Some(format!("kubectl nodewright node unignore {node}")),
        ),
        Blocker::Taints { taints } => (
            format!(
                "taints not tolerated: {} (add a toleration to spec.additionalTolerations, or remove the taint)",
                taints.join(", ")
            ),
            Some(format!(
                "kubectl taint node {node} {}",
                taints
                    .iter()
                    .map(|t| format!("{t}-"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )),
        ),
        Blocker::MalformedState => (
            format!(
                "its node state ({}) cannot be read; the operator never overwrites it",
                keys::node_state_key(nodewright)
            ),
            Some(format!(
                "kubectl nodewright node reset {node} --nodewright {nodewright}"
            )),
        ),
        Blocker::Paused => (
            format!("NodeWright {nodewright} is paused"),
            Some(format!("kubectl nodewright resume {nodewright}")),
        ),
        Blocker::Disabled => (
            format!("NodeWright {nodewright} is disabled"),
            Some(format!("kubectl nodewright enable {nodewright}")),
        ),
        Blocker::MissingPolicy { policy } => (
            format!(
                "its DeploymentPolicy {policy} does not exist: create it (kubectl apply -f ...)"
            ),
            None,
        ),
        Blocker::Priority {
            nodewright: earlier,
            sequencing,
        } => (
            match sequencing {
                Sequencing::All => format!(
                    "waits for NodeWright {earlier} (earlier priority, sequencing all) to be done on every node"
                ),
                Sequencing::Node => format!(
                    "waits for NodeWright {earlier} (earlier priority) to be done on this node"
                ),
            },
            Some(format!("kubectl nodewright why {earlier} --node {node}")),
        ),
        Blocker::Batch { compartment, batch } => (
            format!(
                "queued for batch {batch} of compartment {compartment}: it starts when the batches before it are done (budget)"
            ),
            None,
        ),
        Blocker::Window { waiting } => (
            format!(
                "{waiting}: its DeploymentPolicy's maintenance windows are closed, no new node starts until one opens"
            ),
            None,
        ),
        Blocker::Soak { compartment, until } => (
            format!(
                "the last batch of compartment {compartment} soaks until {until}: the next batch starts once it is over and the batch passed"
            ),
            None,
        ),
        Blocker::DisruptionCap { limit, disrupted } => (
            format!(
                "the operator's cluster-wide disruption cap is full ({disrupted} of {limit} nodes cordoned by NodeWrights): its disruptive stages start when a node is released, the first NodeWright by priority, then age, first"
            ),
            None,
        ),
        Blocker::DrainTimedOut {
            since,
            timeout_seconds,
        } => (
            format!(
                "its drain ran past drainConfig.timeout ({timeout_seconds}s, draining since {since}): pods on the node hold it; the node is erroring and stays cordoned"
            ),
            Some(format!(
                "kubectl get pods -A --field-selector spec.nodeName={node}"
            )),
        ),
        Blocker::HealthGate {
            gate,
            saw,
            since,
            failed,
        } => {
            let gate = gate.as_deref().unwrap_or("(not observed yet)");
            let saw = saw.as_deref().unwrap_or("nothing yet");
            (
                if *failed {
                    format!(
                        "its packages finished, but health gate {gate} timed out (GateFailed, waiting since {since}): saw {saw}; the node is erroring, a failed node of its batch, and completes if the gate passes later"
                    )
                } else {
                    format!(
                        "its packages finished; it waits for health gate {gate} (since {since}) before it is uncordoned and counted complete: saw {saw}"
                    )
                },
                Some(format!("kubectl describe node {node}")),
            )
        }
        Blocker::Stopped { compartment } => (
            format!(
                "the rollout of compartment {compartment} stopped: its failed batches reached the failure threshold"
            ),
            Some(format!(
                "kubectl nodewright deployment-policy reset {nodewright}"
            )),
        ),
        Blocker::NotReached { compartment } => (
            format!(
                "not reached: an earlier batch of compartment {compartment} does not end (a node there does not finish)"
            ),
            Some(format!("kubectl nodewright why {nodewright}")),
        ),
        Blocker::TimedOut {
            package,
            version,
            stage,
            job,
        } => (
            format!(
                "package {package}:{version} timed out at stage {stage} (Job {job} kept as evidence); nothing reruns it until it is cleared"
            ),
            Some(rerun_command(nodewright, package, node, *stage)),
        ),
        Blocker::Dependency { package, waits_for } => (
            format!(
                "package {package} waits for {} (failing, or not in the spec)",
                waits_for.join(", ")
            ),
            waits_for.first().map(|dep| {
                format!(
                    "kubectl nodewright why {nodewright} --node {node} --package {}",
                    dep.split('|').next().unwrap_or(dep)
                )
            }),
        ),
    }
}

/// The command that runs `package` again on `node` from `stage` (from the start for apply and the
/// stages a rerun cannot start at).
pub fn rerun_command(nodewright: &str, package: &str, node: &str, stage: Stage) -> String {
    let from = match stage {
        Stage::Config | Stage::Interrupt | Stage::PostInterrupt => format!(" --stage {stage}"),
        _ => String::new(),
    };
    format!(
        "kubectl nodewright package rerun {package} --nodewright {nodewright} --node {node}{from}"
    )
}

/// An interrupt type as the API spells it (`reboot`, `service`...).
pub fn interrupt_name(kind: nodewright_shared::api::InterruptType) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The stages of a node, per package: `a: apply, config; b: apply, config, interrupt(reboot)`.
fn stages_cell(n: &NodePreview, wide: bool) -> String {
    let mut per: Vec<(String, Vec<String>)> = Vec::new();
    for s in &n.steps {
        let label = if wide {
            format!("{}:{}", s.package, s.version)
        } else {
            s.package.clone()
        };
        let mut stage = s.stage.to_string();
        if let Some(kind) = s.interrupt {
            stage = format!("{stage}({})", interrupt_name(kind));
        }
        if s.running {
            stage = format!("{stage}*");
        }
        match per.iter_mut().find(|(l, _)| *l == label) {
            Some((_, stages)) => stages.push(stage),
            None => per.push((label, vec![stage])),
        }
    }
    or_dash(
        per.into_iter()
            .map(|(l, s)| format!("{l}: {}", s.join(",")))
            .collect::<Vec<_>>()
            .join("; "),
    )
}

impl Render for PlanReport {
    fn table(&self, wide: bool) -> String {
        let p = &self.preview;
        let mut out = self.header();
        out.push('\n');
        out.push_str(&compartment_table(p).render());
        out.push('\n');
        out.push_str(&node_table(p, wide).render());
        if p.nodes.iter().any(|n| n.steps.iter().any(|s| s.running)) {
            out.push_str("(* runs now)\n");
        }
        out.push_str(&format!("Operator settings: {}.\n", self.operator_settings));
        out
    }
}

impl PlanReport {
    /// What the plan is of, and each thing that holds or bounds the rollout as a whole (pause,
    /// disable, a missing policy, windows, gates, the cluster-wide cap, deletion), a line each.
    fn header(&self) -> String {
        let p = &self.preview;
        let mut out = format!(
            "NodeWright {}{}: {} node(s) selected, {} not selected",
            p.nodewright,
            p.deployment_policy
                .as_deref()
                .map(|d| format!(" (DeploymentPolicy {d})"))
                .unwrap_or_else(|| " (legacy interruptionBudget)".to_owned()),
            p.nodes.len(),
            p.not_selected
        );
        if let Some(f) = &self.file {
            out.push_str(&format!("; as changed in {f}"));
        }
        out.push('\n');
        if p.paused {
            out.push_str(&format!(
            "Paused: nothing starts until `kubectl nodewright resume {}`; the batches below start then.\n",
            p.nodewright
        ));
        }
        if p.disabled {
            out.push_str(&format!(
            "Disabled: nothing starts until `kubectl nodewright enable {}`; the batches below start then.\n",
            p.nodewright
        ));
        }
        if p.missing_policy {
            out.push_str("Its DeploymentPolicy does not exist: no node starts.\n");
        }
        if !p.windows.is_empty() {
            out.push_str(&format!(
                "Maintenance windows (new nodes start only inside one): {}\n",
                p.windows.join("; ")
            ));
        }
        if let Some(waiting) = &p.waiting_for {
            out.push_str(&format!(
                "Closed now, {waiting}: nodes in progress finish, the batches below start then.\n"
            ));
        }
        if !p.health_gates.is_empty() {
            out.push_str(&format!(
            "Health gates (after its packages finish, before a node is uncordoned and counted complete): {}\n",
            p.health_gates.join("; ")
        ));
        }
        if let Some(cap) = &p.disruption_cap {
            out.push_str(&format!(
            "Cluster-wide disruption cap (the operator's MAX_DISRUPTED_NODES): {} ({} here), {} cordoned by NodeWrights now.\n",
            cap.cap, cap.limit, cap.disrupted
        ));
        }
        if p.deleting {
            out.push_str(
                "Being deleted: the uninstalls of its uninstall-enabled packages run first.\n",
            );
        }
        out
    }
}

/// A row per compartment: its strategy (and soak), ceiling, nodes and batches.
fn compartment_table(p: &Preview) -> Table {
    let mut t = Table::new(&["COMPARTMENT", "STRATEGY", "CEILING", "NODES", "BATCHES"]);
    for c in &p.compartments {
        let batches = c
            .batches
            .iter()
            .map(|b| {
                format!(
                    "{}{}: {}",
                    b.number,
                    if b.in_progress { " (now)" } else { "" },
                    b.nodes.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join(" | ");
        let strategy = match (&c.soak, &c.soaking_until) {
            (Some(soak), Some(until)) => {
                format!("{}, soak {soak} (soaking until {until})", c.strategy)
            }
            (Some(soak), None) => format!("{}, soak {soak}", c.strategy),
            _ => c.strategy.to_owned(),
        };
        t.row(vec![
            c.name.clone(),
            strategy,
            c.ceiling.to_string(),
            c.nodes.to_string(),
            format!(
                "{}{}",
                or_dash(batches),
                if c.stopped { " (stopped)" } else { "" }
            ),
        ]);
    }
    t
}

/// A row per selected node: its compartment, batch, status, stages, disruption and what holds it.
fn node_table(p: &Preview, wide: bool) -> Table {
    let mut headers = vec![
        "NODE",
        "COMPARTMENT",
        "BATCH",
        "STATUS",
        "STAGES",
        "DISRUPTION",
        "NOTE",
    ];
    if wide {
        headers.insert(1, "ORDER");
    }
    let mut t = Table::new(&headers);
    for n in &p.nodes {
        let mut disruption = Vec::new();
        if n.drain {
            disruption.push("cordon+drain");
        }
        if n.reboot {
            disruption.push("reboot");
        }
        let note = if n.complete {
            "complete".to_owned()
        } else if let Some(b) = n.blockers.first() {
            let (text, _) = explain(b, &p.nodewright, &n.name);
            if n.blockers.len() > 1 {
                format!("{text} (+{} more)", n.blockers.len() - 1)
            } else {
                text
            }
        } else if n.started {
            "in progress".to_owned()
        } else {
            "-".to_owned()
        };
        let mut row = vec![
            n.name.clone(),
            or_dash(n.compartment.clone().unwrap_or_default()),
            n.batch.map_or_else(|| "-".to_owned(), |b| b.to_string()),
            n.status.as_str().to_owned(),
            stages_cell(n, wide),
            or_dash(disruption.join(",")),
            note,
        ];
        if wide {
            row.insert(
                1,
                n.order
                    .map_or_else(|| "-".to_owned(), |o| (o + 1).to_string()),
            );
        }
        t.row(row);
    }
    t
}

/// The NodeWright and policies of a manifest; `name` picks the NodeWright when it holds several.
fn read_manifest(path: &Path, name: Option<&str>) -> Result<(NodeWright, Vec<DeploymentPolicy>)> {
    let shown = path.display().to_string();
    let expected = format!("{}/{}", keys::GROUP, keys::VERSION);
    let mut nodewrights = Vec::new();
    let mut policies = Vec::new();
    for doc in manifest::read(path)? {
        let schema = |what: &str, e: serde_json::Error| {
            doc.error(format!("does not match the {what} schema: {e}"))
        };
        match (doc.api_version == expected, doc.kind.as_str()) {
            (true, "NodeWright") => nodewrights.push(
                serde_json::from_value::<NodeWright>(doc.value.clone())
                    .map_err(|e| schema("NodeWright", e))?,
            ),
            (true, "DeploymentPolicy") => policies.push(
                serde_json::from_value::<DeploymentPolicy>(doc.value.clone())
                    .map_err(|e| schema("DeploymentPolicy", e))?,
            ),
            _ => {
                return Err(doc.error(format!(
                    "{}/{} is not a NodeWright or a DeploymentPolicy: expected a NodeWright or a \
                     DeploymentPolicy of {expected}",
                    doc.api_version, doc.kind
                )));
            }
        }
    }
    let nodewright = match name {
        Some(n) => nodewrights
            .into_iter()
            .find(|nw| nw.metadata.name.as_deref() == Some(n))
            .ok_or_else(|| CliError::NotFound(format!("{shown} holds no NodeWright named {n}")))?,
        None => {
            let count = nodewrights.len();
            let mut it = nodewrights.into_iter();
            match (it.next(), count) {
                (Some(nw), 1) => nw,
                (None, _) => {
                    return Err(CliError::Invalid(format!("{shown} holds no NodeWright")));
                }
                _ => {
                    return Err(CliError::Usage(format!(
                        "{shown} holds {count} NodeWrights: name the one to preview"
                    )));
                }
            }
        }
    };
    if nodewright
        .metadata
        .name
        .as_deref()
        .is_none_or(str::is_empty)
    {
        return Err(CliError::Invalid(format!(
            "{shown}: the NodeWright has no metadata.name"
        )));
    }
    Ok((nodewright, policies))
}

/// Everything the preview of `nodewright` reads from the cluster; `file_policies` replace the
/// cluster's policies of the same name.
pub async fn snapshot(
    ctx: &Ctx,
    nodewright: NodeWright,
    file_policies: Vec<DeploymentPolicy>,
) -> Result<(Snapshot, String)> {
    let name = nodewright.name_any();
    let settings = cluster::operator_settings(ctx).await?;
    let mut policies: BTreeMap<String, DeploymentPolicy> = cluster::policies(ctx)
        .await?
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    for p in file_policies {
        policies.insert(p.name_any(), p);
    }
    Ok((
        Snapshot {
            nodewright,
            nodewrights: cluster::nodewrights(ctx).await?,
            nodes: cluster::nodes(ctx).await?,
            policies: policies.into_values().collect(),
            jobs: cluster::jobs(ctx, None).await?,
            configmaps: cluster::configmaps(ctx, &name).await?,
            defaults: settings.defaults,
            runtime_taint: settings.runtime_taint,
            max_disrupted: settings.max_disrupted,
            now: Timestamp::now(),
        },
        settings.source,
    ))
}

/// Runs `plan`.
pub async fn run(ctx: &Ctx, args: &PlanArgs) -> Result<()> {
    let (nodewright, file_policies, file) = match &args.file {
        Some(path) => {
            let (mut nw, policies) = read_manifest(path, args.name.as_deref())?;
            // The cluster object's status is what the operator would start from.
            if let Some(current) = cluster::nodewright_opt(ctx, &nw.name_any()).await? {
                nw.status = current.status;
                nw.metadata.uid = current.metadata.uid;
                nw.metadata.generation = current.metadata.generation.map(|g| g + 1);
                nw.metadata.creation_timestamp = current.metadata.creation_timestamp;
            } else {
                nw.status = None;
                nw.metadata.generation = Some(1);
            }
            (nw, policies, Some(path.display().to_string()))
        }
        None => {
            let name = args.name.as_deref().ok_or_else(|| {
                CliError::Usage(
                    "name the NodeWright to preview, or give its manifest with -f".into(),
                )
            })?;
            (cluster::nodewright(ctx, name).await?, Vec::new(), None)
        }
    };
    let (snap, source) = snapshot(ctx, nodewright, file_policies).await?;
    let preview = preview(&snap).map_err(|e| CliError::Invalid(e.to_string()))?;
    print(
        ctx.format(),
        &PlanReport {
            preview,
            operator_settings: source,
            file,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The preview of a NodeWright `nw` with nothing to show.
    fn empty_preview() -> Preview {
        Preview {
            nodewright: "nw".into(),
            deployment_policy: None,
            missing_policy: false,
            paused: false,
            disabled: false,
            deleting: false,
            not_selected: 0,
            compartments: Vec::new(),
            nodes: Vec::new(),
            windows: Vec::new(),
            waiting_for: None,
            disruption_cap: None,
            health_gates: Vec::new(),
        }
    }

    fn report(preview: Preview) -> PlanReport {
        PlanReport {
            preview,
            operator_settings: "defaults".into(),
            file: None,
        }
    }

    #[test]
    fn the_plan_shows_the_windows_and_when_the_next_opens() {
        let waiting = "waiting for window (opens 2026-12-03T22:00+01:00)".to_owned();
        let report = report(Preview {
            deployment_policy: Some("nightly".into()),
            windows: vec!["every day 22:00-04:00 (next day) Europe/Berlin".into()],
            waiting_for: Some(waiting.clone()),
            ..empty_preview()
        });
        let text = report.table(false);
        assert!(
            text.contains(
                "Maintenance windows (new nodes start only inside one): every day 22:00-04:00 (next day) Europe/Berlin\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("Closed now, waiting for window (opens 2026-12-03T22:00+01:00): nodes in progress finish"),
            "{text}"
        );
        let (why, fix) = explain(&Blocker::Window { waiting }, "nw", "n0");
        assert!(
            why.starts_with("waiting for window (opens 2026-12-03T22:00+01:00): its DeploymentPolicy's maintenance windows are closed"),
            "{why}"
        );
        assert_eq!(fix, None);
    }

    #[test]
    fn the_plan_shows_the_disruption_cap_and_why_names_it() {
        let report = report(Preview {
            disruption_cap: Some(nodewright_core::preview::CapPreview {
                cap: "10% of the cluster's nodes".into(),
                limit: 3,
                disrupted: 3,
            }),
            ..empty_preview()
        });
        let text = report.table(false);
        assert!(
            text.contains(
                "Cluster-wide disruption cap (the operator's MAX_DISRUPTED_NODES): 10% of the cluster's nodes (3 here), 3 cordoned by NodeWrights now.\n"
            ),
            "{text}"
        );
        let (why, fix) = explain(
            &Blocker::DisruptionCap {
                limit: 3,
                disrupted: 3,
            },
            "nw",
            "n0",
        );
        assert!(
            why.starts_with("the operator's cluster-wide disruption cap is full (3 of 3 nodes cordoned by NodeWrights)"),
            "{why}"
        );
        assert_eq!(fix, None);
    }

    #[test]
    fn the_plan_lists_the_health_gates_and_why_names_the_gate_a_node_waits_for() {
        let report = report(Preview {
            health_gates: vec!["gpu-healthy: node condition GpuHealthy True, timeout 10m".into()],
            ..empty_preview()
        });
        let text = report.table(false);
        assert!(
            text.contains(
                "Health gates (after its packages finish, before a node is uncordoned and counted complete): gpu-healthy: node condition GpuHealthy True, timeout 10m\n"
            ),
            "{text}"
        );
        let waiting = Blocker::HealthGate {
            gate: Some("gpu-healthy".into()),
            saw: Some("the node has no condition GpuHealthy (True wanted)".into()),
            since: "2026-12-03T12:00:00Z".into(),
            failed: false,
        };
        let (why, fix) = explain(&waiting, "nw", "n0");
        assert_eq!(
            why,
            "its packages finished; it waits for health gate gpu-healthy (since 2026-12-03T12:00:00Z) before it is uncordoned and counted complete: saw the node has no condition GpuHealthy (True wanted)"
        );
        assert_eq!(fix.as_deref(), Some("kubectl describe node n0"));
        let (why, _) = explain(
            &Blocker::HealthGate {
                gate: None,
                saw: None,
                since: "2026-12-03T12:00:00Z".into(),
                failed: true,
            },
            "nw",
            "n0",
        );
        assert!(
            why.starts_with(
                "its packages finished, but health gate (not observed yet) timed out (GateFailed"
            ),
            "{why}"
        );
        assert!(why.contains("saw nothing yet"), "{why}");
    }
}
