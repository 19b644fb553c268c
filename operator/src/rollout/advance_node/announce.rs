//! What a node's pass tells the administrator beyond its status: the Events and log lines of
//! health gates, of a drain past its bound and of a timed-out stage that runs again. Each is said
//! once per change, from the marks the node carries, so a requeue does not repeat it.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_core::node::drain::DrainOptions;
use nodewright_core::node::health_gates::{self, GateMark, Verdict};
use nodewright_core::rollout::plan::{Creation, Plan};
use nodewright_shared::api::NodeWright;
use nodewright_shared::node_state::{NodeState, Stage, State};
use tracing::info;

use crate::context::Context;

/// Event reason of a drain that ran past `drainConfig.timeout`.
pub const DRAIN_TIMEOUT: &str = "DrainTimeout";

/// Announces a node's gates once per change: a Warning `GateFailed` Event (on the NodeWright and
/// the node) when a gate's timeout passes and the node turns erroring; a log line when a wait
/// begins and when the gates pass.
pub(super) async fn announce_gates(
    ctx: &Context,
    nodewright: &NodeWright,
    node: &Node,
    before: Option<&GateMark>,
    uncordons: bool,
    verdict: &Verdict,
) {
    let name = node.name_any();
    let nw = nodewright.name_any();
    match verdict {
        Verdict::Failed { gate, saw } if !before.is_some_and(|m| m.failed) => {
            let note = format!(
                "Node [{name}] did not pass health gate {gate} within its timeout: {saw}; it is erroring ({}), a failed node of its batch, and completes if the gate passes later",
                if uncordons {
                    "uncordoned: onFailure Uncordon"
                } else {
                    "it stays cordoned"
                }
            );
            ctx.events
                .warn_on_nodewright(nodewright, health_gates::GATE_FAILED, note.clone(), None)
                .await;
            ctx.events
                .warn_on_node(node, health_gates::GATE_FAILED, note, None)
                .await;
        }
        Verdict::Passed if before.is_some() => {
            info!(node = %name, nodewright = %nw, "health gates passed; the node is uncordoned and complete");
        }
        Verdict::Waiting { gate, saw, .. } if before.is_none() => {
            info!(node = %name, nodewright = %nw, %gate, %saw, "packages finished; waiting at the health gates");
        }
        _ => {}
    }
}

/// The stages this pass starts again over an `erroring` record of the same stage: a timed-out stage
/// whose Job went away (failed-Job TTL, a package change, a user deleting the evidence) runs again.
/// Each gets a Normal Event on the NodeWright and the node, the counterpart of the outcome path's
/// `StageTimedOut` Warning.
pub(super) fn cleared_timeouts<'a>(
    nodewright: &'a NodeWright,
    previous: &NodeState,
    p: &'a Plan,
) -> Vec<(&'a str, &'a str, Stage)> {
    p.create
        .iter()
        .map(|c| match c {
            Creation::Package { key, stage, .. } => (key.as_str(), *stage),
            Creation::Interrupt { merged, stage } => (merged.owner.as_str(), *stage),
        })
        .filter_map(|(key, stage)| {
            let version = nodewright.spec.packages.get(key)?.version.as_str();
            previous
                .get(key, version)
                .filter(|r| r.stage == stage && r.state == Some(State::Erroring))
                .map(|_| (key, version, stage))
        })
        .collect()
}

/// The Job names of the stages in `cleared`.
pub(super) fn timed_out_jobs(
    nodewright: &str,
    node: &str,
    cleared: &[(&str, &str, Stage)],
) -> Vec<String> {
    cleared
        .iter()
        .map(|(package, version, stage)| {
            if stage.is_interrupt() {
                nodewright_core::naming::interrupt_job_name(nodewright, node)
            } else {
                nodewright_core::naming::package_job_name(
                    nodewright, package, version, *stage, node,
                )
            }
        })
        .collect()
}

pub(super) async fn announce_cleared(
    ctx: &Context,
    nodewright: &NodeWright,
    node: &Node,
    cleared: &[(&str, &str, Stage)],
) {
    let name = node.name_any();
    let jobs = timed_out_jobs(&nodewright.name_any(), &name, cleared);
    for ((package, version, stage), job) in cleared.iter().zip(jobs) {
        let note = format!(
            "Package [{package}:{version}] stage [{stage}] on node [{name}] is no longer timed out: the stage runs again"
        );
        let related = crate::writes::job_ref(&ctx.config.jobs.namespace, &job);
        ctx.events
            .on_nodewright(
                nodewright,
                STAGE_TIMEOUT_CLEARED,
                note.clone(),
                Some(related.clone()),
            )
            .await;
        ctx.events
            .on_node(node, STAGE_TIMEOUT_CLEARED, note, Some(related))
            .await;
    }
}

/// A Warning Event on the NodeWright and the node: the drain ran past its bound.
pub(super) async fn announce_drain_timeout(
    ctx: &Context,
    nodewright: &NodeWright,
    node: &Node,
    options: &DrainOptions,
) {
    let name = node.name_any();
    let bound = options
        .timeout
        .map(|t| format!("{}s", t.as_secs()))
        .unwrap_or_default();
    let note = format!(
        "Node [{name}] did not drain within drainConfig.timeout ({bound}): it stays cordoned and erroring; the pods still on it hold the drain (kubectl get pods -A --field-selector spec.nodeName={name})"
    );
    ctx.events
        .warn_on_nodewright(nodewright, DRAIN_TIMEOUT, note.clone(), None)
        .await;
    ctx.events
        .warn_on_node(node, DRAIN_TIMEOUT, note, None)
        .await;
}

/// Event reason of a timed-out stage that runs again.
pub const STAGE_TIMEOUT_CLEARED: &str = "StageTimeoutCleared";
