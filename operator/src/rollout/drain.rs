//! Draining a node before its interrupt: evict (or, with `drainConfig.disableEviction`, delete)
//! what must leave, through the term-gated writer; wait for what may not be interrupted or moved.
//! Which pods those are is decided by [`nodewright_core::node::drain`].

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use nodewright_core::node::cordon::holding_pods;
use nodewright_core::node::drain::{DrainOptions, PodDrain, decide};
use tracing::{debug, info};

use crate::error::ReconcileError;
use crate::writes::Writer;

/// Evicts (or deletes) what must leave `node`; `true` once nothing that must leave is left. Pods
/// being deleted are waited for, not evicted again; an eviction refused by a PodDisruptionBudget
/// (429) is retried on a later pass; a pod the NodeWright's `drainConfig` may not move holds the
/// drain.
///
/// `hold` is the NodeWright's `podNonInterruptLabels`: while a Running or Pending pod on the node
/// matches it, nothing is evicted and the node is not ready (upstream waits for those pods to end
/// on their own, they must not be interrupted).
pub async fn drain(
    client: &kube::Client,
    writer: &Writer,
    node: &str,
    nodewright: &str,
    hold: Option<&LabelSelector>,
    options: &DrainOptions,
) -> Result<bool, ReconcileError> {
    let pods: Api<Pod> = Api::all(client.clone());
    let on_node = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(ReconcileError::api(format!(
            "listing the pods on node {node} to drain it"
        )))?;
    let holding =
        holding_pods(&on_node.items, hold).map_err(|reason| ReconcileError::InvalidSelector {
            nodewright: nodewright.to_owned(),
            field: "podNonInterruptLabels",
            reason,
        })?;
    if !holding.is_empty() {
        debug!(%node, %nodewright, pods = ?holding, "waiting for podNonInterruptLabels pods to finish");
        return Ok(false);
    }
    let mut drained = true;
    for pod in &on_node.items {
        let action = decide(pod, options);
        if action == PodDrain::Ignore {
            continue;
        }
        drained = false;
        let name = pod.name_any();
        let namespace = pod.namespace().unwrap_or_default();
        let shown = format!("{namespace}/{name}");
        let written = match action {
            PodDrain::Ignore => continue,
            PodDrain::Hold(why) => {
                debug!(%node, pod = %shown, reason = why.as_str(), "the pod holds the drain");
                continue;
            }
            PodDrain::Evict => writer
                .evict(&namespace, &name, options.grace_period_seconds)
                .await
                .map(|()| "evicted"),
            PodDrain::Delete => writer
                .delete_drained_pod(&namespace, &name, options.grace_period_seconds)
                .await
                .map(|()| "deleted (drainConfig.disableEviction)"),
        };
        match written {
            Ok(how) => info!(%node, %nodewright, pod = %shown, how, "drained for an interrupt"),
            Err(e) if e.code() == Some(429) => {
                debug!(%node, pod = %shown, "eviction refused by a disruption budget; retrying later")
            }
            Err(e) if e.code() == Some(404) => {}
            Err(e) => {
                return Err(e.context(format!("draining pod {shown} from node {node}")));
            }
        }
    }
    Ok(drained)
}
