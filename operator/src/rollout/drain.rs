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
                return Err(e
                    .context(format!("draining pod {shown} from node {node}"))
                    .into());
            }
        }
    }
    Ok(drained)
}

#[cfg(test)]
mod tests {
    //! The drain's writes against the mock API server: which pods are evicted or deleted, what a
    //! refusal by a disruption budget or a vanished pod does, and what holds the drain.

    use std::sync::{Arc, Mutex};

    use serde_json::{Value, json};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::writes::mock;

    type Seen = Arc<Mutex<Vec<(String, String)>>>;

    fn pod(namespace: &str, name: &str, owner: Option<&str>, labels: Value) -> Value {
        let owners = owner.map_or_else(
            || json!([]),
            |kind| {
                json!([{"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "u",
                           "controller": true}])
            },
        );
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "labels": labels,
                            "ownerReferences": owners},
               "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
               "status": {"phase": "Running"}})
    }

    /// Drains `n1` whose pods are `pods`; every eviction or deletion is answered `write_status`.
    /// Returns the result and the requests made.
    async fn drain_over(
        pods: Vec<Value>,
        write_status: u16,
        hold: Option<LabelSelector>,
        options: DrainOptions,
    ) -> (Result<bool, ReconcileError>, Vec<(String, String)>) {
        let seen = Seen::default();
        let log = seen.clone();
        let list = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods});
        let (client, server) = mock::serve(move |method, path, _| {
            log.lock()
                .expect("request log")
                .push((method.to_string(), path.to_owned()));
            match (method.as_str(), path) {
                ("GET", "/api/v1/pods") => (200, list.clone()),
                (_, _) if write_status == 404 => (404, mock::not_found()),
                ("POST", p) if p.ends_with("/eviction") => (
                    write_status,
                    json!({"apiVersion": "v1", "kind": "Status", "status":
                           if write_status < 300 { "Success" } else { "Failure" },
                           "code": write_status}),
                ),
                ("DELETE", _) => (
                    write_status,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Success",
                           "code": write_status}),
                ),
                _ => (404, mock::not_found()),
            }
        });
        let writer = Writer::new(client.clone(), "nodewright", CancellationToken::new());
        let result = drain(&client, &writer, "n1", "nw", hold.as_ref(), &options).await;
        server.abort();
        let seen = seen.lock().expect("request log").clone();
        (result, seen)
    }

    /// The single request `method path`, as [`writes`] lists it.
    fn one(method: &str, path: &str) -> Vec<(String, String)> {
        vec![(method.to_owned(), path.to_owned())]
    }

    fn writes(seen: &[(String, String)]) -> Vec<(String, String)> {
        seen.iter()
            .filter(|(method, _)| method != "GET")
            .cloned()
            .collect()
    }

    #[tokio::test]
    async fn evicts_what_must_leave_and_leaves_daemonset_and_system_pods() {
        let (result, seen) = drain_over(
            vec![
                pod("apps", "web", Some("ReplicaSet"), json!({})),
                pod("apps", "agent", Some("DaemonSet"), json!({})),
                pod("kube-system", "dns", Some("ReplicaSet"), json!({})),
            ],
            201,
            None,
            DrainOptions::default(),
        )
        .await;
        assert!(
            !result.expect("drain"),
            "not drained while a pod was still evicted"
        );
        assert_eq!(
            writes(&seen),
            one("POST", "/api/v1/namespaces/apps/pods/web/eviction")
        );
        assert!(
            seen.iter().any(|(m, p)| m == "GET" && p == "/api/v1/pods"),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn a_node_with_nothing_to_move_is_drained_without_a_write() {
        let (result, seen) = drain_over(
            vec![pod("apps", "agent", Some("DaemonSet"), json!({}))],
            201,
            None,
            DrainOptions::default(),
        )
        .await;
        assert!(result.expect("drain"));
        assert!(writes(&seen).is_empty(), "{seen:?}");
    }

    #[tokio::test]
    async fn disable_eviction_deletes_instead() {
        let (result, seen) = drain_over(
            vec![pod("apps", "web", Some("ReplicaSet"), json!({}))],
            200,
            None,
            DrainOptions {
                disable_eviction: true,
                ..DrainOptions::default()
            },
        )
        .await;
        assert!(!result.expect("drain"));
        assert_eq!(
            writes(&seen),
            one("DELETE", "/api/v1/namespaces/apps/pods/web")
        );
    }

    /// A PodDisruptionBudget's refusal (429) and a pod already gone (404) are not errors: the pass
    /// goes on and the node is simply not drained yet.
    #[tokio::test]
    async fn a_budget_refusal_or_a_vanished_pod_is_retried_later_not_an_error() {
        for status in [429, 404] {
            let (result, seen) = drain_over(
                vec![pod("apps", "web", Some("ReplicaSet"), json!({}))],
                status,
                None,
                DrainOptions::default(),
            )
            .await;
            assert!(!result.expect("not an error"), "status {status}");
            if status == 429 {
                assert_eq!(writes(&seen).len(), 1, "{seen:?}");
            }
        }
    }

    #[tokio::test]
    async fn another_refusal_is_an_error_naming_the_pod_and_node() {
        let (result, _) = drain_over(
            vec![pod("apps", "web", Some("ReplicaSet"), json!({}))],
            500,
            None,
            DrainOptions::default(),
        )
        .await;
        let error = result.expect_err("a 500 is an error").to_string();
        assert!(
            error.contains("apps/web") && error.contains("n1"),
            "{error}"
        );
    }

    /// A pod matching `podNonInterruptLabels` holds the whole drain: nothing is evicted.
    #[tokio::test]
    async fn a_non_interrupt_pod_holds_every_eviction() {
        let hold: LabelSelector =
            serde_json::from_value(json!({"matchLabels": {"critical": "yes"}})).expect("selector");
        let (result, seen) = drain_over(
            vec![
                pod("apps", "web", Some("ReplicaSet"), json!({})),
                pod("apps", "training", Some("Job"), json!({"critical": "yes"})),
            ],
            201,
            Some(hold),
            DrainOptions::default(),
        )
        .await;
        assert!(!result.expect("drain"));
        assert!(writes(&seen).is_empty(), "{seen:?}");
    }

    /// An unmanaged pod without `force` holds the drain (it would not come back) and is not
    /// touched; a managed one next to it is still evicted.
    #[tokio::test]
    async fn an_unmanaged_pod_without_force_holds_and_is_not_touched() {
        let (result, seen) = drain_over(
            vec![
                pod("apps", "bare", None, json!({})),
                pod("apps", "web", Some("ReplicaSet"), json!({})),
            ],
            201,
            None,
            DrainOptions {
                force: false,
                ..DrainOptions::default()
            },
        )
        .await;
        assert!(!result.expect("drain"));
        assert_eq!(
            writes(&seen),
            one("POST", "/api/v1/namespaces/apps/pods/web/eviction")
        );
    }

    #[tokio::test]
    async fn an_invalid_non_interrupt_selector_names_the_field() {
        let hold: LabelSelector = serde_json::from_value(
            json!({"matchExpressions": [{"key": "a", "operator": "Bogus", "values": ["x"]}]}),
        )
        .expect("selector");
        let (result, _) = drain_over(
            vec![pod("apps", "web", Some("ReplicaSet"), json!({}))],
            201,
            Some(hold),
            DrainOptions::default(),
        )
        .await;
        let error = result.expect_err("invalid selector").to_string();
        assert!(error.contains("podNonInterruptLabels"), "{error}");
    }

    /// Once the term has ended nothing is written: the drain reports the term's end.
    #[tokio::test]
    async fn nothing_is_evicted_after_the_term_ended() {
        let seen = Seen::default();
        let log = seen.clone();
        let list = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {},
                          "items": [pod("apps", "web", Some("ReplicaSet"), json!({}))]});
        let (client, server) = mock::serve(move |method, path, _| {
            log.lock()
                .expect("request log")
                .push((method.to_string(), path.to_owned()));
            if method == http::Method::GET {
                (200, list.clone())
            } else {
                (201, json!({}))
            }
        });
        let term = CancellationToken::new();
        let writer = Writer::new(client.clone(), "nodewright", term.clone());
        term.cancel();
        let result = drain(&client, &writer, "n1", "nw", None, &DrainOptions::default()).await;
        server.abort();
        assert!(
            matches!(result, Err(ReconcileError::TermEnded)),
            "{result:?}"
        );
        assert!(writes(&seen.lock().expect("log")).is_empty());
    }
}
