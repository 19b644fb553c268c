//! What every reconcile of one leadership term shares: the client, the validated configuration, the
//! node cache and the term's token (no write may start once it is cancelled).

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{ObjectRef, Store};
use nodewright_shared::api::{DeploymentPolicy, NodeWright};
use tokio_util::sync::CancellationToken;

use crate::runtime::config::OperatorConfig;
use nodewright_core::jobs::stored::{StoredJob, StoredPod};

/// A last edit applied to every Job just before it is created. For tests on the local control plane,
/// where a pod's fate (succeed, fail, hang...) is chosen by a label on its template; the operator
/// binary never sets one.
pub type JobHook = Arc<dyn Fn(&mut Job) + Send + Sync>;

/// The clock a rollout pass decides with (maintenance windows, admission times). The binary uses
/// the system clock; a test gives one set ahead so a maintenance window opens within seconds,
/// without waiting for the wall clock to reach it.
pub type Clock = Arc<dyn Fn() -> k8s_openapi::jiff::Timestamp + Send + Sync>;

/// How an in-process operator is run, beyond its [`OperatorConfig`].
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Only NodeWrights matching this label selector are reconciled (several operators, e.g. one per
    /// test, can then share a cluster). `None`: every NodeWright.
    pub nodewright_selector: Option<String>,
    /// See [`JobHook`].
    pub job_hook: Option<JobHook>,
    /// Marked synced once the node cache has listed (the admin server's `/readyz`).
    pub readiness: Option<crate::runtime::admin::Readiness>,
    /// The webhook certificate controller's settings (`WEBHOOK_CERTS_MANAGED=true`); `None`: the
    /// chart's cert-manager or provided-Secret mode, the controller does not run.
    pub webhook_certs: Option<crate::webhook_certs::Settings>,
    /// See [`Clock`]; `None`: the system clock.
    pub clock: Option<Clock>,
}

impl fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunOptions")
            .field("nodewright_selector", &self.nodewright_selector)
            .field("job_hook", &self.job_hook.as_ref().map(|_| "<hook>"))
            .field("webhook_certs", &self.webhook_certs.is_some())
            .field("clock", &self.clock.as_ref().map(|_| "<clock>"))
            .finish()
    }
}

/// Shared by the reconcilers of one leadership term.
pub struct Context {
    /// API client.
    pub client: kube::Client,
    /// The operator's configuration.
    pub config: Arc<OperatorConfig>,
    /// Every node, trimmed of what the operator never reads.
    pub nodes: Store<Node>,
    /// The genuinely failed attempts among the operator's pods (its namespace, labelled with a
    /// NodeWright name), fed by the outcome controller's pod watch ([`crate::runtime::pod_feed`]):
    /// what the live path counts for a running Job, at no API call per pod event. A finished Job's
    /// pods are listed live once, because its outcome must not be classified from a store that
    /// may not have seen the last pod update yet.
    pub pods: Store<StoredPod>,
    /// The NodeWrights this operator reconciles: the rollout controller's store (it delays every
    /// reconcile until the store has listed). Read for the ordering between NodeWrights and the
    /// runtime-required taint, instead of a LIST on every pass.
    pub nodewrights: Store<NodeWright>,
    /// True once the NodeWright store has listed, set by its feed
    /// ([`crate::runtime::nodewrights::nodewright_feed`]). For every reader but the rollout
    /// controller: kube's `Store::wait_until_ready` wakes only the last of several concurrent
    /// waiters, and the controller already waits on that store, so a second waiter could sleep for
    /// the whole term.
    pub nodewrights_synced: tokio::sync::watch::Receiver<bool>,
    /// The operator's own Jobs, fed by the rollout controller's Job watch (so an event that triggers
    /// a rollout pass is already in the store that pass reads) and trimmed of managed fields. It
    /// replaces a LIST of a NodeWright's Jobs on every pass; see [`Context::jobs_synced`].
    pub jobs: Store<StoredJob>,
    /// The Job controller's `FailedCreate` Events about the operator's Jobs, trimmed
    /// ([`crate::runtime::failed_create_feed`]): a Job that never had a pod and has one is a stage
    /// whose pods cannot be created ([`crate::outcomes::not_created`]).
    pub failed_creates: Store<k8s_openapi::api::core::v1::Event>,
    /// True once the Job store has listed: before that an empty store would read as "no Job yet",
    /// and a pass would start stages that already ran.
    pub jobs_synced: tokio::sync::watch::Receiver<bool>,
    /// Every DeploymentPolicy, fed by the rollout controller's policy watch, whose events also wake
    /// the NodeWrights naming the policy: an edit (or a deletion) applies within seconds instead of
    /// at the next resync, and a pass costs no GET. See [`Context::deployment_policy`].
    pub policies: Store<DeploymentPolicy>,
    /// True once the policy store has listed: before that an absent policy would read as "policy
    /// missing" and block a rollout for nothing.
    pub policies_synced: tokio::sync::watch::Receiver<bool>,
    /// Cancelled when this replica stops leading: checked before every write.
    pub term: CancellationToken,
    /// Test hooks and scoping.
    pub options: RunOptions,
    /// Kubernetes Events (not sent once the term ended).
    pub events: crate::writes::Events,
    /// Every other write of this term goes through it (refused once the term ended).
    pub writer: crate::writes::Writer,
    /// NodeWright gauges and reconcile counters (unregistered handles when nobody scrapes them).
    pub metrics: crate::metrics::nodewright_gauges::StateMetrics,
    /// True in a term that settles the package Jobs an earlier version left in the operator's own
    /// namespace ([`crate::runtime::legacy_jobs`]): its Jobs are read and recorded there, and no Job
    /// is created until they are settled.
    pub settling_legacy: bool,
    /// The cluster-wide disruption cap's slots (`MAX_DISRUPTED_NODES`), shared by every pass.
    pub disruption: crate::rollout::disruption_cap::DisruptionCap,
}

impl Context {
    /// The rollout's clock ([`RunOptions::clock`]).
    pub fn now(&self) -> k8s_openapi::jiff::Timestamp {
        self.options
            .clock
            .as_ref()
            .map_or_else(k8s_openapi::jiff::Timestamp::now, |clock| clock())
    }

    /// Whether this term still leads: a reconcile that starts after it ended does nothing (each
    /// write is gated again by [`crate::writes::Writer`]).
    pub fn leading(&self) -> bool {
        self.writer.leading()
    }

    /// Whether the Job store has completed its first list.
    pub fn jobs_synced(&self) -> bool {
        *self.jobs_synced.borrow()
    }

    /// Drops everything this term keeps about the NodeWright `name` (its metric series, its last
    /// status write, its write memo): it is gone. Kept, that state would grow with every NodeWright
    /// ever deleted.
    pub fn forget_nodewright(&self, name: &str) {
        self.metrics.forget(name);
        self.writer.forget_nodewright(name);
        self.disruption.forget(name);
    }

    /// [`Context::forget_nodewright`] for every NodeWright the store no longer has: after a relist,
    /// which reports no deletions.
    pub fn forget_absent_nodewrights(&self) {
        let live: std::collections::HashSet<String> = self
            .nodewrights
            .state()
            .iter()
            .filter_map(|nw| nw.metadata.name.clone())
            .collect();
        self.metrics.retain(|name| live.contains(name));
        self.writer.retain_nodewrights(|name| live.contains(name));
        self.disruption.retain(|name| live.contains(name));
    }

    /// The DeploymentPolicy `name` as the policy store has it (as stored: the caller applies the
    /// defaults).
    pub fn deployment_policy(&self, name: &str) -> PolicyLookup {
        if !*self.policies_synced.borrow() {
            return PolicyLookup::NotSynced;
        }
        match self.policies.get(&ObjectRef::new(name)) {
            Some(policy) => PolicyLookup::Found(policy),
            None => PolicyLookup::Missing,
        }
    }
}

/// What the policy store knows about one DeploymentPolicy.
#[derive(Debug, Clone)]
pub enum PolicyLookup {
    /// The store has not listed yet: nothing can be concluded (try again shortly).
    NotSynced,
    /// No such policy.
    Missing,
    /// The policy.
    Found(Arc<DeploymentPolicy>),
}

#[cfg(test)]
impl Context {
    /// A Context whose every request goes to `client`; stores empty (nothing cached, as after a
    /// restart), synced, leading. For unit tests that drive a reconciler over a mock API server.
    pub(crate) fn over(client: kube::Client) -> Context {
        let config = Context::test_config();
        let term = CancellationToken::new();
        let synced = || tokio::sync::watch::channel(true).1;
        Context {
            client: client.clone(),
            nodes: kube::runtime::reflector::store().0,
            pods: kube::runtime::reflector::store().0,
            nodewrights: kube::runtime::reflector::store().0,
            nodewrights_synced: synced(),
            jobs: kube::runtime::reflector::store().0,
            failed_creates: kube::runtime::reflector::store().0,
            jobs_synced: synced(),
            policies: kube::runtime::reflector::store().0,
            policies_synced: synced(),
            term: term.clone(),
            options: RunOptions::default(),
            events: crate::writes::Events::new(
                client.clone(),
                &config.lease.identity,
                term.clone(),
            ),
            writer: crate::writes::Writer::new(client, &config.jobs.namespace, term),
            metrics: crate::metrics::nodewright_gauges::StateMetrics::default(),
            settling_legacy: false,
            disruption: crate::rollout::disruption_cap::DisruptionCap::new(
                config.max_disrupted_nodes,
            ),
            config: Arc::new(config),
        }
    }

    /// The configuration of [`Context::over`]: the operator's defaults in namespace `nodewright`.
    pub(crate) fn test_config() -> OperatorConfig {
        let env = std::collections::BTreeMap::from([
            ("NAMESPACE", "nodewright"),
            ("POD_NAME", "operator-0"),
            ("LEADER_ELECTION", "false"),
        ]);
        OperatorConfig::from_lookup(|var| env.get(var).map(|v| (*v).to_owned()))
            .expect("operator configuration")
    }

    /// [`Context::over`] with stores holding `snapshot`'s nodes, NodeWrights, policies and Jobs,
    /// its disruption cap, and a clock reading `snapshot.now`: a rollout pass then reads exactly what a preview of the
    /// snapshot reads (the same-snapshot test, `rollout::same_snapshot`).
    pub(crate) fn over_snapshot(
        client: kube::Client,
        snapshot: &nodewright_core::preview::Snapshot,
    ) -> Context {
        let mut ctx = Context::over(client);
        // The snapshot's cap is the operator's (`MAX_DISRUPTED_NODES`).
        let mut config = Context::test_config();
        config.max_disrupted_nodes = snapshot.max_disrupted;
        ctx.disruption = crate::rollout::disruption_cap::DisruptionCap::new(snapshot.max_disrupted);
        ctx.config = Arc::new(config);
        ctx.nodes = store_of(snapshot.nodes.iter().cloned());
        ctx.nodewrights = store_of(snapshot.nodewrights.iter().cloned());
        ctx.policies = store_of(snapshot.policies.iter().cloned());
        ctx.jobs = store_of(snapshot.jobs.iter().map(StoredJob::of));
        let now = snapshot.now;
        ctx.options.clock = Some(Arc::new(move || now));
        ctx
    }
}

/// A reflector store holding `objects`, as after a list.
#[cfg(test)]
fn store_of<K>(objects: impl IntoIterator<Item = K>) -> Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, mut writer) = kube::runtime::reflector::store();
    for object in objects {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(object));
    }
    reader
}
