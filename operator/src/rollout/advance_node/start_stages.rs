//! Starting the planned stages on a node whose record and cordon are already written: drain first
//! for disruptive work, then create each stage's Job (and delete the ones the plan retires).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_core::jobs::{
    InterruptJobInput, PackageJobInput, build_interrupt_job, build_package_job,
};
use nodewright_core::node::cordon;
use nodewright_core::node::drain::DrainOptions;
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::rollout::plan::{Creation, Plan};
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;
use tracing::debug;

use super::super::configmap_sync;
use crate::context::Context;
use crate::error::ReconcileError;

/// Event reason of a stage held back while the Jobs an earlier version left in the operator's
/// namespace are settled (`runtime::legacy_jobs`).
pub const SETTLING_OLD_JOBS: &str = "SettlingOldJobs";

/// When this NodeWright's drain of `node` first found it not drained
/// ([`keys::drain_start_key`]), if it is still draining.
pub(super) fn drain_started(node: &Node, nodewright: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    node.annotations()
        .get(&keys::drain_start_key(nodewright))
        .and_then(|v| v.parse().ok())
}

/// Keeps the drain-start mark under a `drainConfig.timeout`: written when the drain first finds
/// the node not drained (so the bound survives restarts), removed once it drained. A failed write
/// is retried by the next pass (the drain's own requeue).
async fn note_drain_start(
    ctx: &Context,
    node: &Node,
    nodewright: &str,
    drained: bool,
    options: &DrainOptions,
) {
    let key = keys::drain_start_key(nodewright);
    let marked = node.annotations().contains_key(&key);
    let mut edit = NodeEdit::default();
    match (drained, marked) {
        (false, false) if options.timeout.is_some() => {
            edit.annotate(key, ctx.now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        }
        (true, true) => edit.remove_annotation(key),
        _ => return,
    }
    if let Err(e) = ctx.writer.apply_node_edit(node, &edit).await {
        debug!(node = %node.name_any(), error = %e, "the drain-start mark was not written; the next pass retries");
    }
}

/// Drain (for disruptive work), create and delete the plan's Jobs on a node whose cordon is
/// written. Returns whether some work waits for the node to drain.
pub(super) async fn start_stages(
    ctx: &Context,
    nodewright: &NodeWright,
    node: &Node,
    p: &Plan,
    node_order: i64,
    drain_options: &DrainOptions,
) -> Result<bool, ReconcileError> {
    let nw = nodewright.name_any();
    let name = node.name_any();
    if ctx.settling_legacy && !p.create.is_empty() {
        hold_for_old_jobs(ctx, nodewright, &name).await;
        delete_retired(ctx, p).await?;
        return Ok(false);
    }
    if p.create
        .iter()
        .any(|c| matches!(c, Creation::Package { .. }))
    {
        configmap_sync::apply_node_metadata(
            &ctx.writer,
            nodewright,
            node,
            &ctx.config.jobs.agent_image,
        )
        .await?;
        configmap_sync::delete_legacy_node_metadata(ctx, nodewright, node).await?;
    }
    // Drained at most once per pass: the first disruptive stage asks, the others reuse the answer.
    let mut drained: Option<bool> = None;
    for creation in &p.create {
        if disruptive(creation) {
            if !cordon::holds_cordon(node, &nw) {
                continue;
            }
            let ready = match drained {
                Some(d) => d,
                None => {
                    let d = drain_once(ctx, nodewright, node, drain_options).await?;
                    drained = Some(d);
                    d
                }
            };
            if !ready {
                debug!(node = %name, "waiting for the node to drain");
                continue;
            }
        }
        let Some(job) = job_for(ctx, nodewright, &name, node_order, creation)? else {
            continue;
        };
        let job_name = job.name_any();
        super::super::job_lifecycle::create(ctx, job).await?;
        announce_started(ctx, nodewright, &name, creation, &job_name).await;
    }
    delete_retired(ctx, p).await?;
    Ok(drained == Some(false))
}

/// No stage starts until the Jobs of the old layout are settled (`runtime::legacy_jobs`): says so
/// on the NodeWright.
async fn hold_for_old_jobs(ctx: &Context, nodewright: &NodeWright, name: &str) {
    debug!(node = %name, "holding Job creation until the old namespace's Jobs are settled");
    ctx.events
        .on_nodewright(
            nodewright,
            SETTLING_OLD_JOBS,
            format!(
                "Holding new stage Jobs on node [{name}] until the Jobs an earlier version \
                 left in namespace [{}] finish and are recorded",
                ctx.config.jobs.namespace
            ),
            None,
        )
        .await;
}

/// Deletes the Jobs the plan retires.
async fn delete_retired(ctx: &Context, p: &Plan) -> Result<(), ReconcileError> {
    for job in &p.delete {
        ctx.writer.remove_job(job).await?;
    }
    Ok(())
}

/// Whether the stage runs only on a drained node (an interrupt, or a package stage that drains
/// first).
fn disruptive(creation: &Creation) -> bool {
    matches!(
        creation,
        Creation::Interrupt { .. }
            | Creation::Package {
                drain_first: true,
                ..
            }
    )
}

/// Drains the node for this NodeWright (an `Interrupt` Event first) and keeps its drain-start mark;
/// whether it is drained.
async fn drain_once(
    ctx: &Context,
    nodewright: &NodeWright,
    node: &Node,
    drain_options: &DrainOptions,
) -> Result<bool, ReconcileError> {
    let nw = nodewright.name_any();
    let name = node.name_any();
    ctx.events
        .on_node(
            node,
            "Interrupt",
            format!("draining node [{name}] for [nodewright:{nw}]"),
            None,
        )
        .await;
    let drained = super::super::drain::drain(
        &ctx.client,
        &ctx.writer,
        &name,
        &nw,
        nodewright.spec.pod_non_interrupt_labels.as_ref(),
        drain_options,
    )
    .await?;
    note_drain_start(ctx, node, &nw, drained, drain_options).await;
    Ok(drained)
}

/// The Job of one planned stage; `None` when its package left the spec meanwhile.
fn job_for(
    ctx: &Context,
    nodewright: &NodeWright,
    name: &str,
    node_order: i64,
    creation: &Creation,
) -> Result<Option<Job>, ReconcileError> {
    let job = match creation {
        Creation::Package { key, stage, .. } => {
            let Some(package) = nodewright.spec.packages.get(key) else {
                return Ok(None);
            };
            build_package_job(&PackageJobInput {
                nodewright,
                package_key: key,
                package,
                stage: *stage,
                node: name,
                node_order,
                config: &ctx.config.jobs,
            })?
        }
        Creation::Interrupt { merged, stage } => {
            let Some(package) = nodewright.spec.packages.get(&merged.owner) else {
                return Ok(None);
            };
            build_interrupt_job(&InterruptJobInput {
                nodewright,
                owner_key: &merged.owner,
                owner: package,
                interrupt: &merged.interrupt,
                stage: *stage,
                node: name,
                node_order,
                config: &ctx.config.jobs,
            })?
        }
    };
    Ok(Some(job))
}

/// The `Apply`/`Interrupt` Event on the NodeWright naming the stage's Job.
async fn announce_started(
    ctx: &Context,
    nodewright: &NodeWright,
    name: &str,
    creation: &Creation,
    job_name: &str,
) {
    let (package, stage) = match creation {
        Creation::Package { key, stage, .. } => (key.as_str(), *stage),
        Creation::Interrupt { merged, stage } => (merged.owner.as_str(), *stage),
    };
    let version = nodewright
        .spec
        .packages
        .get(package)
        .map(|p| p.version.as_str())
        .unwrap_or_default();
    let reason = if stage.is_interrupt() {
        "Interrupt"
    } else {
        "Apply"
    };
    ctx.events
        .on_nodewright(
            nodewright,
            reason,
            format!("Applying package [{package}:{version}] to node [{name}] stage [{stage}]"),
            Some(crate::writes::job_ref(&ctx.config.jobs.namespace, job_name)),
        )
        .await;
}
