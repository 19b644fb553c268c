//! The operator process, minus `main`'s process concerns: the node cache (always on), the leader
//! election, and, during each leadership term, the reconcilers. [`run`] is also what tests call to
//! run an operator in-process against a real apiserver.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, watcher};
use nodewright_core::jobs::stored::{StoredJob, StoredPod};
use nodewright_core::rollout::wake::concerned;
use nodewright_shared::api::{DeploymentPolicy, NodeWright};
use nodewright_shared::keys;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::context::{Context, RunOptions};
use crate::metrics::LeaderMetrics;
use crate::metrics::nodewright_gauges::StateMetrics;
use crate::runtime::config::OperatorConfig;
use crate::runtime::job_feed::job_feed;
use crate::runtime::leader::{Elector, LeaderError, LeaderHandle};
use crate::runtime::nodes;
use crate::{outcomes, rollout};

/// Why the operator could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The leader election could not be set up.
    #[error("leader election: {0}")]
    Leader(#[from] LeaderError),
    /// A background task panicked.
    #[error("operator task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Runs the operator until `shutdown` is cancelled: reconcilers stop first (no write after their
/// term ends), then the Lease is released so a standby takes over at once. The NodeWright gauges go
/// to handles nobody scrapes; see [`run_instrumented`].
///
/// `client` is the operator's, as [`crate::runtime::client::build`] makes it: with kube's default
/// retry instead, an eviction a PodDisruptionBudget refuses holds its pass (and that NodeWright's
/// status) for minutes.
pub async fn run(
    config: OperatorConfig,
    client: kube::Client,
    options: RunOptions,
    leader_metrics: Option<LeaderMetrics>,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    run_instrumented(
        config,
        client,
        options,
        leader_metrics,
        StateMetrics::default(),
        shutdown,
    )
    .await
}

/// [`run`], reporting the NodeWright gauges and reconcile counters to `state_metrics` (handles from
/// the registry `/metrics` serves, [`crate::metrics::Metrics::state`]).
pub async fn run_instrumented(
    config: OperatorConfig,
    client: kube::Client,
    options: RunOptions,
    leader_metrics: Option<LeaderMetrics>,
    state_metrics: StateMetrics,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let config = Arc::new(config);
    let (node_store, writer) = reflector::store::<Node>();
    let (node_tx, _) = broadcast::channel::<Node>(256);
    let cache_stop = CancellationToken::new();
    let cache = tokio::spawn(nodes::run(
        client.clone(),
        writer,
        node_tx.clone(),
        cache_stop.clone(),
    ));
    let synced = synced_flag(node_store.clone(), {
        let readiness = options.readiness.clone();
        move || {
            if let Some(readiness) = readiness {
                readiness.mark_synced("nodes");
            }
        }
    });

    let election_stop = CancellationToken::new();
    let (mut handle, election) =
        start_election(&client, &config, leader_metrics, &election_stop, &shutdown)?;

    loop {
        let term = tokio::select! {
            term = handle.acquired() => term,
            () = shutdown.cancelled() => None,
        };
        let Some(term) = term else { break };
        // One token for "stop writing": the term ended or the process is stopping.
        let stop = CancellationToken::new();
        {
            let (stop, term, shutdown) = (stop.clone(), term.clone(), shutdown.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = term.cancelled() => {}
                    () = shutdown.cancelled() => {}
                    () = stop.cancelled() => {}
                }
                stop.cancel();
            });
        }
        if synced.clone().wait_for(|synced| *synced).await.is_err() {
            warn!("the node cache stopped before it synced");
            break;
        }
        // Package Jobs an earlier version left in the operator's own namespace are settled there
        // first (runtime::legacy_jobs); once they are, the old namespace's leftovers go.
        let crate::runtime::legacy_jobs::TermLayout {
            config,
            settling: settling_legacy,
        } = crate::runtime::legacy_jobs::term_layout(&client, &config, &stop).await;
        info!(namespace = %config.jobs.namespace, settling_legacy, "leading: starting the reconcilers");
        let (ctx, writers) = term_context(
            &client,
            config,
            node_store.clone(),
            &stop,
            &options,
            &state_metrics,
            settling_legacy,
        );
        // The certificate controller is leader-only like the reconcilers, and ends with the term.
        let certs = options.webhook_certs.clone().map(|settings| {
            tokio::spawn(crate::webhook_certs::run(
                client.clone(),
                settings,
                stop.clone(),
            ))
        });
        run_term(ctx, node_tx.subscribe(), writers).await;
        stop.cancel();
        // A replica that no longer leads reports no NodeWright gauges (the new leader does).
        state_metrics.forget_gauges();
        if let Some(certs) = certs {
            match certs.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => warn!(error = %e, "webhook certificate controller stopped"),
                Err(e) => warn!(error = %e, "webhook certificate controller panicked"),
            }
        }
        info!("reconcilers stopped");
        if shutdown.is_cancelled() {
            break;
        }
    }

    election_stop.cancel();
    if let Some(election) = election {
        election.await?;
    }
    cache_stop.cancel();
    cache.await?;
    Ok(())
}

/// The leader election (a task electing on the Lease until `stop`) and the handle a term is
/// acquired from; without leader election, a handle that leads until `shutdown`.
fn start_election(
    client: &kube::Client,
    config: &OperatorConfig,
    leader_metrics: Option<LeaderMetrics>,
    stop: &CancellationToken,
    shutdown: &CancellationToken,
) -> Result<(LeaderHandle, Option<tokio::task::JoinHandle<()>>), RunError> {
    if !config.leader_election {
        return Ok((LeaderHandle::unconditional(shutdown), None));
    }
    let (elector, handle) = Elector::new(client.clone(), config.lease.clone())?;
    let elector = match leader_metrics {
        Some(m) => elector.with_metrics(m),
        None => elector,
    };
    Ok((handle, Some(tokio::spawn(elector.run(stop.clone())))))
}

/// One term's context (its own stores, writers and events, all ending with `stop`) over the
/// process-wide node store, and the store writers its watches fill.
fn term_context(
    client: &kube::Client,
    config: Arc<OperatorConfig>,
    node_store: reflector::Store<Node>,
    stop: &CancellationToken,
    options: &RunOptions,
    state_metrics: &StateMetrics,
    settling_legacy: bool,
) -> (Arc<Context>, Writers) {
    let (pod_store, pod_writer) = reflector::store::<StoredPod>();
    let (nodewright_store, nodewright_writer) = reflector::store::<NodeWright>();
    let (job_store, job_writer) = reflector::store::<StoredJob>();
    let (failed_create_store, failed_create_writer) =
        reflector::store::<k8s_openapi::api::core::v1::Event>();
    let (jobs_synced_tx, jobs_synced) = watch::channel(false);
    let (nodewrights_synced_tx, nodewrights_synced) = watch::channel(false);
    let (policy_store, policy_writer) = reflector::store::<DeploymentPolicy>();
    let policies_synced = synced_flag(policy_store.clone(), || {});
    let ctx = Arc::new(Context {
        client: client.clone(),
        config: config.clone(),
        nodes: node_store.clone(),
        pods: pod_store,
        nodewrights: nodewright_store,
        nodewrights_synced,
        jobs: job_store,
        failed_creates: failed_create_store,
        jobs_synced,
        policies: policy_store,
        policies_synced,
        term: stop.clone(),
        options: options.clone(),
        events: crate::writes::Events::new(client.clone(), &config.lease.identity, stop.clone()),
        writer: crate::writes::Writer::new(client.clone(), &config.jobs.namespace, stop.clone()),
        metrics: state_metrics.clone(),
        settling_legacy,
        disruption: crate::rollout::disruption_cap::DisruptionCap::new(config.max_disrupted_nodes),
    });
    let writers = Writers {
        nodewrights: nodewright_writer,
        nodewrights_synced: nodewrights_synced_tx,
        pods: pod_writer,
        jobs: job_writer,
        failed_creates: failed_create_writer,
        jobs_synced: jobs_synced_tx,
        policies: policy_writer,
    };
    (ctx, writers)
}

/// A flag that turns true once `store` has listed (and `on_synced` ran). One waiter on the store's
/// first sync, fanned out through a watch channel: the store's ready signal wakes only one of
/// several concurrent waiters.
fn synced_flag<K>(
    store: reflector::Store<K>,
    on_synced: impl FnOnce() + Send + 'static,
) -> watch::Receiver<bool>
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        if store.wait_until_ready().await.is_ok() {
            on_synced();
            let _ = tx.send(true);
        }
    });
    rx
}

/// The node changes as watch events for the rollout's mapper; a receiver that fell behind replays
/// every cached node, so no change is lost to the lag (at worst every NodeWright is woken).
fn node_events(
    changes: broadcast::Receiver<Node>,
    nodes: reflector::Store<Node>,
) -> impl futures::Stream<Item = Result<Node, watcher::Error>> + Send + 'static {
    nodes::changes(changes).flat_map(move |change| {
        let batch: Vec<Node> = match change {
            nodes::NodeChange::Changed(node) => vec![*node],
            nodes::NodeChange::Missed => nodes.state().iter().map(|n| Node::clone(n)).collect(),
        };
        futures::stream::iter(batch.into_iter().map(Ok))
    })
}

/// The writers of the stores in [`Context`] that one term's watches feed.
struct Writers {
    nodewrights: reflector::store::Writer<NodeWright>,
    nodewrights_synced: watch::Sender<bool>,
    pods: reflector::store::Writer<StoredPod>,
    jobs: reflector::store::Writer<StoredJob>,
    failed_creates: reflector::store::Writer<k8s_openapi::api::core::v1::Event>,
    /// Turned true by the Job watch once the Job store has listed.
    jobs_synced: watch::Sender<bool>,
    policies: reflector::store::Writer<DeploymentPolicy>,
}

/// The NodeWrights whose `spec.deploymentPolicy` names `policy`: those a change of that policy
/// (an edit, its creation or its deletion) must wake.
fn naming_policy(nodewrights: &[Arc<NodeWright>], policy: &str) -> Vec<ObjectRef<NodeWright>> {
    nodewrights
        .iter()
        .filter(|nw| nw.spec.deployment_policy.as_deref() == Some(policy))
        .map(|nw| ObjectRef::from_obj(nw.as_ref()))
        .collect()
}

/// The reconcilers of one term, until its token is cancelled.
async fn run_term(ctx: Arc<Context>, node_changes: broadcast::Receiver<Node>, writers: Writers) {
    let namespace = ctx.config.jobs.namespace.clone();
    let client = ctx.client.clone();
    let owned = watcher::Config::default().labels(keys::NAME_LABEL);
    let jobs: Api<StoredJob> = Api::namespaced(client.clone(), &namespace);

    // One Job watch for both controllers: it feeds the store their passes read (events reach the
    // store before they trigger a pass) and triggers both.
    let feed = job_feed(
        jobs,
        owned.clone(),
        writers.jobs,
        ctx.jobs.clone(),
        writers.jobs_synced,
    );
    // Stored without the per-node records of their status (never read back), and a pass is woken
    // by what it reads, not by its own status write (runtime::nodewrights).
    let nodewright_events = crate::runtime::nodewrights::nodewright_feed(
        ctx.clone(),
        writers.nodewrights,
        writers.nodewrights_synced,
    );
    // Policies wake the NodeWrights that name them (runtime::policies).
    let policy_events = crate::runtime::policies::policy_feed(client.clone(), writers.policies);
    let nodewright_store = ctx.nodewrights.clone();
    // Cordon claims of NodeWrights that are gone, released as nodes change (and once a minute).
    let leftover_cordons =
        crate::runtime::leftover_cordons::run(ctx.clone(), node_changes.resubscribe());
    // Jobs map to their NodeWright by owner reference. (Controller::owns would key the cluster-scoped
    // owner with the Job's namespace and never find it.)
    let rollout = Controller::for_stream(nodewright_events, ctx.nodewrights.clone())
        .with_config(
            kube::runtime::controller::Config::default().concurrency(rollout::PASS_CONCURRENCY),
        )
        .watches_stream(feed.rollout, |job: StoredJob| {
            job.owner.map(|owner| ObjectRef::<NodeWright>::new(&owner))
        })
        .watches_stream(policy_events, move |policy: DeploymentPolicy| {
            naming_policy(&nodewright_store.state(), &policy.name_any())
        })
        .watches_stream(node_events(node_changes, ctx.nodes.clone()), {
            let nodewrights = ctx.nodewrights.clone();
            move |node: Node| {
                let all = nodewrights.state();
                concerned(all.iter().map(AsRef::as_ref), &node)
                    .into_iter()
                    .map(ObjectRef::from_obj)
                    .collect::<Vec<_>>()
            }
        })
        .graceful_shutdown_on(ctx.term.clone().cancelled_owned())
        .run(rollout::reconcile, rollout::error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "rollout controller event");
            }
        });

    // The pod watch feeds both the outcome controller (pod events map to their Job) and the store of
    // genuinely failed attempts the reconciler reads for running Jobs.
    let pods = crate::runtime::pod_feed::pod_feed(
        Api::<StoredPod>::namespaced(client.clone(), &namespace),
        owned.clone(),
        writers.pods,
    );
    // A Job whose pods cannot be created shows only in the Job controller's FailedCreate Events.
    let failed_creates = crate::runtime::failed_create_feed::failed_create_feed(
        Api::namespaced(client, &namespace),
        writers.failed_creates,
    );
    // A pod maps to its Job by its controller owner reference (kept as `StoredPod::job`).
    let outcomes = Controller::for_shared_stream(feed.outcomes, ctx.jobs.clone())
        .watches_stream(pods, move |pod: StoredPod| {
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            pod.job
                .map(|job| ObjectRef::<StoredJob>::new(&job).within(&namespace))
        })
        .watches_stream(failed_creates, {
            let namespace = namespace.clone();
            move |event: k8s_openapi::api::core::v1::Event| {
                event
                    .involved_object
                    .name
                    .map(|job| ObjectRef::<StoredJob>::new(&job).within(&namespace))
            }
        })
        .graceful_shutdown_on(ctx.term.clone().cancelled_owned())
        .run(outcomes::reconcile, outcomes::error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "outcome controller event");
            }
        });

    // A term that settles the old namespace's Jobs ends once they are settled; the next one runs
    // on the package namespace.
    let settled = async {
        if ctx.settling_legacy {
            crate::runtime::legacy_jobs::end_when_settled(
                ctx.jobs.clone(),
                ctx.jobs_synced.clone(),
                ctx.term.clone(),
            )
            .await;
        }
    };
    let all = async {
        tokio::join!(rollout, outcomes, leftover_cordons, settled);
    };
    // Once the term ends the controllers finish their in-flight reconciles, but an API call can
    // hang (the client has no read timeout; a paused etcd or a dead connection holds it): waiting
    // for it would keep this replica from leading again, and the fleet without a leader, for as
    // long. Past the grace the reconciles are abandoned, as a crash would abandon them (every
    // write is guarded, and an outcome is recorded once whoever records it).
    let abandoned = async {
        ctx.term.cancelled().await;
        tokio::time::sleep(TERM_STOP_GRACE).await;
    };
    tokio::select! {
        () = all => {}
        () = abandoned => {
            warn!(grace = ?TERM_STOP_GRACE, "the term ended but a reconcile is still in flight (an API call hangs): abandoning it");
        }
    }
}

/// How long the reconcilers of an ended term may take to finish their in-flight reconciles.
const TERM_STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::NodeWrightSpec;

    fn nodewright(name: &str, policy: Option<&str>) -> Arc<NodeWright> {
        Arc::new(NodeWright::new(
            name,
            NodeWrightSpec {
                deployment_policy: policy.map(str::to_owned),
                ..NodeWrightSpec::default()
            },
        ))
    }

    #[test]
    fn a_policy_change_wakes_exactly_the_nodewrights_naming_it() {
        let all = [
            nodewright("a", Some("fast")),
            nodewright("b", Some("slow")),
            nodewright("c", None),
            nodewright("d", Some("fast")),
            nodewright("e", Some("")),
        ];
        let names = |policy: &str| -> Vec<String> {
            naming_policy(&all, policy)
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        assert_eq!(names("fast"), ["a", "d"]);
        assert_eq!(names("slow"), ["b"]);
        assert!(names("other").is_empty());
    }
}
