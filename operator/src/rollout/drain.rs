//! Draining a node before its interrupt: evict what must leave (through the term-gated writer),
//! wait for what may not be interrupted. Which pods those are is decided by [`nodewright_core::node::cordon`].

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use nodewright_core::node::cordon::{holding_pods, should_evict};
use tracing::{debug, info};

use crate::error::ReconcileError;
use crate::writes::Writer;

/// Evicts what must leave `node`; `true` once nothing that must leave is left. Pods being deleted
/// are waited for, not evicted again; an eviction refused by a PodDisruptionBudget (429) is retried
/// on a later pass.
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
    for pod in on_node.items.iter().filter(|p| should_evict(p)) {
        drained = false;
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.name_any();
        let namespace = pod.namespace().unwrap_or_default();
        match writer.evict(&namespace, &name).await {
            Ok(()) => {
                info!(%node, %nodewright, pod = %format!("{namespace}/{name}"), "evicted for an interrupt")
            }
            Err(e) if e.code() == Some(429) => {
                debug!(%node, pod = %format!("{namespace}/{name}"), "eviction refused by a disruption budget; retrying later")
            }
            Err(e) if e.code() == Some(404) => {}
            Err(e) => {
                return Err(e.context(format!("evicting pod {namespace}/{name} from node {node}")));
            }
        }
    }
    Ok(drained)
}
