//! Moving the package Jobs to their own namespace without losing or repeating a stage.
//!
//! Versions before the package namespace ran every package and interrupt Job in the operator's own
//! namespace (`NAMESPACE`). An operator configured with another `PACKAGE_NAMESPACE` may start while
//! Jobs of the old layout still run there: a Job cannot move between namespaces, and starting the
//! same stage in the new namespace would run it twice on the node at once, while ignoring the old
//! Job would lose its outcome. So the leader first *settles* the old namespace: for as long as one
//! of its Jobs there is running (or being deleted, or finished with its outcome not yet recorded),
//! a term runs the reconcilers on the old namespace with Job creation held back (outcomes are
//! recorded, pauses and drift handled as ever), and ends once nothing is left to settle. The next
//! term runs on the package namespace; the old namespace's leftovers of this operator (recorded
//! Jobs, suspended Jobs of paused NodeWrights, package ConfigMaps) are then deleted.
//!
//! A finished Job whose outcome nobody records (its NodeWright no longer wants it) would hold the
//! move for ever: once nothing runs any more, such Jobs are waited for [`UNRECORDED_PATIENCE`] and
//! then left behind, with a warning naming them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use nodewright_core::jobs::read::{is_finished, is_suspended, recorded};
use nodewright_core::jobs::stored::StoredJob;
use nodewright_shared::keys;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::runtime::config::OperatorConfig;
use crate::writes::Writer;

/// How long finished but unrecorded Jobs of the old namespace are waited for once none runs.
pub const UNRECORDED_PATIENCE: Duration = Duration::from_secs(120);

/// How often a settling term looks at its Job store.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// What one Job of the old namespace still needs before the move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Its pods may still run on the node: a running or pending Job, or one being deleted.
    Running,
    /// Finished, its outcome not recorded yet.
    Unrecorded,
    /// Nothing: recorded, or suspended (a paused NodeWright's, whose pods are gone).
    Done,
}

/// What `job` still needs (see [`Settle`]).
pub fn settle(job: &StoredJob) -> Settle {
    if job.metadata.deletion_timestamp.is_some() {
        Settle::Running
    } else if !is_finished(job) {
        if is_suspended(job) {
            Settle::Done
        } else {
            Settle::Running
        }
    } else if recorded(job).is_none() {
        Settle::Unrecorded
    } else {
        Settle::Done
    }
}

/// The count of Jobs in each unsettled state: (running, unrecorded).
pub fn unsettled<'a>(jobs: impl IntoIterator<Item = &'a StoredJob>) -> (usize, usize) {
    jobs.into_iter()
        .fold((0, 0), |(running, unrecorded), job| match settle(job) {
            Settle::Running => (running + 1, unrecorded),
            Settle::Unrecorded => (running, unrecorded + 1),
            Settle::Done => (running, unrecorded),
        })
}

/// The operator's Jobs in `namespace` (those carrying its NodeWright label).
async fn list(client: &Client, namespace: &str) -> Result<Vec<StoredJob>, kube::Error> {
    let api: Api<StoredJob> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default().labels(keys::NAME_LABEL))
        .await?
        .items)
}

/// Where one leadership term works.
pub struct TermLayout {
    /// The operator's configuration for the term: `jobs.namespace` is the old namespace while it
    /// is settled, the package namespace otherwise.
    pub config: Arc<OperatorConfig>,
    /// The term only settles the old namespace's Jobs (no Job is created; it ends once they are).
    pub settling: bool,
}

/// Decides the term's layout from one LIST of the Jobs in the operator's own namespace, when the
/// package Jobs belong elsewhere: while some are unsettled the term runs there and settles them
/// (an error reading them counts as unsettled: the term's watch then retries, rather than risking
/// a stage twice); otherwise the leftovers there are deleted and the term runs on the package
/// namespace. `stop` gates the deletions as every write of the term.
pub async fn term_layout(
    client: &Client,
    config: &Arc<OperatorConfig>,
    stop: &CancellationToken,
) -> TermLayout {
    let unchanged = || TermLayout {
        config: config.clone(),
        settling: false,
    };
    if config.namespace == config.jobs.namespace {
        return unchanged();
    }
    let legacy = config.namespace.as_str();
    let jobs = match list(client, legacy).await {
        Ok(jobs) => Some(jobs),
        Err(e) => {
            warn!(namespace = %legacy, error = %e, "cannot list the Jobs left in the operator's namespace");
            None
        }
    };
    let (running, unrecorded) = jobs.as_deref().map_or((0, 0), unsettled);
    if jobs.is_none() || running + unrecorded > 0 {
        info!(
            namespace = %legacy, running, unrecorded,
            "package Jobs of an earlier version are still in the operator's namespace: settling \
             them before Jobs start in the package namespace"
        );
        let mut settling = OperatorConfig::clone(config);
        settling.jobs.namespace = legacy.to_owned();
        return TermLayout {
            config: Arc::new(settling),
            settling: true,
        };
    }
    if let Some(jobs) = jobs {
        let writer = Writer::new(client.clone(), legacy, stop.clone());
        clean_up(client, &writer, &jobs).await;
    }
    unchanged()
}

/// Ends a settling term (cancels `stop`) once `jobs` (its synced store of the old namespace) has
/// nothing left to settle; returns when `stop` is cancelled either way.
pub async fn end_when_settled(
    jobs: Store<StoredJob>,
    mut synced: tokio::sync::watch::Receiver<bool>,
    stop: CancellationToken,
) {
    if synced.wait_for(|s| *s).await.is_err() {
        return;
    }
    let mut idle_since: Option<Instant> = None;
    loop {
        let state = jobs.state();
        let (running, unrecorded) = unsettled(state.iter().map(AsRef::as_ref));
        if running > 0 {
            idle_since = None;
        } else if unrecorded == 0 {
            info!("the operator's namespace has no package Job left to settle");
            stop.cancel();
            return;
        } else {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= UNRECORDED_PATIENCE {
                let names: Vec<String> = state
                    .iter()
                    .filter(|j| settle(j) == Settle::Unrecorded)
                    .map(|j| j.name_any())
                    .collect();
                warn!(
                    jobs = ?names,
                    "leaving finished Jobs whose outcome no NodeWright recorded in the operator's namespace"
                );
                stop.cancel();
                return;
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(CHECK_EVERY) => {}
        }
    }
}

/// Deletes, through the term's `writer`, what this operator left in the old namespace (the
/// writer's) once it is settled: its Jobs
/// among `jobs` (recorded ones, and the suspended Jobs of paused NodeWrights, which run again in
/// the package namespace when resumed) and its NodeWrights' package and node-metadata ConfigMaps.
/// Unsettled Jobs (see [`end_when_settled`]) are kept. Errors are logged, never fatal: the
/// leftovers are inert, and the next term tries again.
async fn clean_up(client: &Client, writer: &Writer, jobs: &[StoredJob]) {
    let legacy = writer.namespace();
    for job in jobs.iter().filter(|j| settle(j) == Settle::Done) {
        let name = job.name_any();
        match writer.remove_job(&name).await {
            Ok(()) => info!(namespace = %legacy, job = %name, "deleted a Job of the old layout"),
            Err(e) => {
                warn!(namespace = %legacy, job = %name, error = %e, "cannot delete a Job of the old layout")
            }
        }
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), legacy);
    let found = match cms
        .list_metadata(&ListParams::default().labels(keys::NAME_LABEL))
        .await
    {
        Ok(found) => found.items,
        Err(e) => {
            warn!(namespace = %legacy, error = %e, "cannot list the ConfigMaps left in the operator's namespace");
            return;
        }
    };
    for cm in found
        .iter()
        .filter(|cm| cm.owner_references().iter().any(|o| o.kind == "NodeWright"))
    {
        let name = cm.name_any();
        match writer.delete_configmap(&name).await {
            Ok(()) => {
                info!(namespace = %legacy, configmap = %name, "deleted a ConfigMap of the old layout")
            }
            Err(e) if e.code() == Some(404) => {}
            Err(e) => {
                warn!(namespace = %legacy, configmap = %name, error = %e, "cannot delete a ConfigMap of the old layout")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(
        spec: serde_json::Value,
        status: serde_json::Value,
        meta: serde_json::Value,
    ) -> StoredJob {
        let mut metadata =
            json!({"name": "j", "namespace": "nodewright", "labels": {keys::NAME_LABEL: "nw"}});
        if let (Some(m), Some(extra)) = (metadata.as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": metadata, "spec": spec, "status": status,
        }))
        .expect("a Job")
    }

    fn finished() -> serde_json::Value {
        json!({"conditions": [{"type": "Complete", "status": "True"}]})
    }

    #[test]
    fn what_each_job_of_the_old_namespace_still_needs() {
        let running = job(json!({}), json!({"active": 1}), json!({}));
        assert_eq!(settle(&running), Settle::Running);
        let suspended = job(json!({"suspend": true}), json!({}), json!({}));
        assert_eq!(settle(&suspended), Settle::Done, "a paused Job has no pod");
        let deleting = job(
            json!({"suspend": true}),
            finished(),
            json!({"deletionTimestamp": "2026-12-03T00:00:00Z"}),
        );
        assert_eq!(settle(&deleting), Settle::Running, "its pods may still run");
        let unrecorded = job(json!({}), finished(), json!({}));
        assert_eq!(settle(&unrecorded), Settle::Unrecorded);
        let recorded = job(
            json!({}),
            finished(),
            json!({"annotations": {keys::STATE_RECORDED_ANNOTATION: "complete"}}),
        );
        assert_eq!(settle(&recorded), Settle::Done);
        assert_eq!(
            unsettled([&running, &suspended, &deleting, &unrecorded, &recorded]),
            (2, 1)
        );
    }
}
