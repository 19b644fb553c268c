//! The Job/Pod outcome reconciler (DESIGN §4.4): turns what Jobs and their pods did into node state.
//!
//! - Live path (a pod changed, the Job still runs): the first genuine failure writes
//!   `(stage, erroring)` with the attempt count as `restarts`; later attempts update the count.
//! - Terminal path (the Job finished): `Complete` ⇒ `(stage, complete)`; genuine failures ⇒ the
//!   stage timed out, `(stage, erroring)` stays and the Job stays as evidence (first and last failed
//!   attempt kept); only admission rejections ⇒ processed, the Job is deleted and the stage reruns.
//!   Then `nodewright.nvidia.com/state-recorded` and the TTL go on the Job, and only from then on may
//!   anything delete it.
//! - Evidence: a timed-out or stuck Job gets the `last-logs` annotation ([`crate::outcomes::evidence`]).
//! - Disrupted pods are ignored everywhere (the one predicate of [`nodewright_core::jobs::classify`]).
//!
//! Every node write re-reads the node and carries the resourceVersion precondition; a record is only
//! written over the same stage it describes (a late or repeated event can never move a package back).

pub(crate) mod evidence;
pub(crate) mod image_pull;
pub(crate) mod not_created;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use nodewright_core::jobs::PackageAnnotation;
use nodewright_core::jobs::classify::{
    JobOutcome, RecordedEvidence, attempt_limit, attempts, classify_job, counted_pods,
    evidence_to_prune, is_interrupt_job, timeout_cause,
};
use nodewright_core::jobs::read::{Recorded, node_of, package_of};
use nodewright_core::jobs::stored::{CONTROLLER_UID_LABEL, StoredJob, StoredPod};
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::node::record::{Record, apply_record};
use nodewright_core::node::state::parse_state;
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;
use nodewright_shared::node_state::State;
use serde_json::json;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::context::Context;
use crate::error::ReconcileError;
use crate::metrics::nodewright_gauges::Outcome;
use crate::metrics::stage_jobs::StageResult;
use crate::writes::{Unchanged, WriteError};

/// How long a Job may sit at `FailureTarget` before it is looked at again.
pub const STUCK_RECHECK: Duration = Duration::from_secs(30);
/// A Job at `FailureTarget` for longer than this (its pods on an unreachable node cannot finish)
/// surfaces as erroring (DESIGN §4.4).
pub const STUCK_BOUND: Duration = Duration::from_secs(120);

/// How long before `now` the moment `since` was (zero for a moment still to come: clocks differ).
pub(crate) fn age(
    since: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    now: k8s_openapi::jiff::Timestamp,
) -> Duration {
    Duration::try_from(now.duration_since(since.0)).unwrap_or_default()
}

/// How long the Job's condition `type_` has been True.
fn condition_age(job: &StoredJob, type_: &str) -> Option<Duration> {
    let since = job
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")?
        .last_transition_time
        .as_ref()?
        .0;
    let elapsed = k8s_openapi::jiff::Timestamp::now().duration_since(since);
    Duration::try_from(elapsed).ok()
}

/// How long the Job has been at `FailureTarget=True`.
fn stuck_for(job: &StoredJob) -> Option<Duration> {
    condition_age(job, "FailureTarget")
}

/// The pods of the Job with this uid in the pod store (running Jobs: a stale read only delays an
/// `erroring` record until the next pod event).
fn pods_of(store: &kube::runtime::reflector::Store<StoredPod>, uid: &str) -> Vec<StoredPod> {
    store
        .state()
        .iter()
        .filter(|pod| pod.job_uid.as_deref() == Some(uid))
        .map(|pod| StoredPod::clone(pod))
        .collect()
}

/// Reconciles one Job (and, through it, its pods).
pub async fn reconcile(job: Arc<StoredJob>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let span = info_span!("reconcile_job", job = %job.name_any());
    let result = record_outcome(&job, &ctx).instrument(span).await;
    ctx.metrics.count_reconcile(
        "job",
        if result.is_ok() {
            Outcome::Success
        } else {
            Outcome::Error
        },
    );
    result
}

/// Retry policy of the outcome reconciler.
pub fn error_policy(job: Arc<StoredJob>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    if error.is_conflict() {
        return Action::requeue(Duration::from_millis(500));
    }
    if !error.is_term_ended() {
        warn!(job = %job.name_any(), %error, "recording a Job outcome failed");
    }
    Action::requeue(Duration::from_secs(5))
}

async fn record_outcome(job: &StoredJob, ctx: &Context) -> Result<Action, ReconcileError> {
    if !ctx.leading() || job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // A refusal noted while the Job had no pod is history once it has (or had) one: cleared before
    // anything else, since a pod that ran at once may leave the Job recorded (by this path or with
    // the next stage by the rollout) before this reconciler ever sees it running.
    if job.pods_not_created.is_some() && nodewright_core::jobs::read::had_pods(job) {
        not_created::clear(ctx, job).await?;
    }
    // Likewise an image-pull note, once the Job is over (no attempt waits on anything any more).
    if job.image_pull_failing.is_some() && nodewright_core::jobs::read::is_finished(job) {
        image_pull::clear(ctx, job).await?;
    }
    // Recorded, as stored or by this term already (the store may not show the mark yet).
    if ctx.writer.recorded(job).is_some() {
        return Ok(Action::await_change());
    }
    let (Some(annotation), Some(node)) = (package_of(job), node_of(job)) else {
        debug!("not a NodeWright Job (no package annotation or node); ignoring");
        return Ok(Action::await_change());
    };
    let seen = observe(ctx, job, node, annotation).await?;
    match seen.outcome {
        JobOutcome::Running => on_running(ctx, &seen).await,
        JobOutcome::Succeeded => on_succeeded(ctx, &seen).await,
        JobOutcome::TimedOut => on_timed_out(ctx, &seen).await,
        JobOutcome::OnlyRejected => on_only_rejected(ctx, &seen).await,
        JobOutcome::Stuck => on_stuck(ctx, &seen).await,
    }
}

/// One Job as classified: its outcome and the attempts it counts.
struct Seen<'a> {
    job: &'a StoredJob,
    name: String,
    node: &'a str,
    annotation: PackageAnnotation,
    interrupt: bool,
    /// Its pods that count as attempts ([`counted_pods`]).
    pods: Vec<StoredPod>,
    outcome: JobOutcome,
}

impl Seen<'_> {
    /// Writes `record` for the Job's stage on its node.
    async fn record(&self, ctx: &Context, record: Record) -> Result<(), ReconcileError> {
        self::record(ctx, self.node, &self.annotation, self.interrupt, record).await
    }
}

/// Classifies the Job. A running Job's pods come from the watch-fed store (no API call per pod
/// event). A failing decision (Failed, FailureTarget) is taken from a live list instead, once per
/// Job: the store may not have seen the last pod update yet, and an outcome classified from a stale
/// view would be recorded for good. A Complete Job needs no pods (the Job controller's condition is
/// the outcome), so the common case costs no list. The list selects the node's pods by field too:
/// the apiserver's watch cache indexes pods by node, so it scans that node's few pods instead of
/// every retained pod of the namespace (which grows with the square of the fleet).
async fn observe<'a>(
    ctx: &Context,
    job: &'a StoredJob,
    node: &'a str,
    annotation: PackageAnnotation,
) -> Result<Seen<'a>, ReconcileError> {
    let name = job.name_any();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let cached_node = ctx.nodes.get(&ObjectRef::new(node));
    let evidence = cached_node.as_deref().map_or(RecordedEvidence::None, |n| {
        recorded_evidence(n, &annotation)
    });
    let mut pods = pods_of(&ctx.pods, &uid);
    let mut outcome = classify_job(job, &pods, evidence);
    if !matches!(outcome, JobOutcome::Running | JobOutcome::Succeeded) {
        let pods_api: Api<StoredPod> =
            Api::namespaced(ctx.client.clone(), &ctx.config.jobs.namespace);
        pods = pods_api
            .list(
                &ListParams::default()
                    .labels(&format!("{CONTROLLER_UID_LABEL}={uid}"))
                    .fields(&format!("spec.nodeName={node}")),
            )
            .await
            .map_err(ReconcileError::api(format!(
                "listing the pods of Job {name}"
            )))?
            .items;
        outcome = classify_job(job, &pods, evidence);
    }
    // A pod a suspension (pause) killed is no attempt, even once the Job was resumed while it
    // still terminates: it neither counts nor is kept or read as evidence.
    let pods = counted_pods(job, pods);
    if outcome == JobOutcome::OnlyRejected && evidence == RecordedEvidence::None {
        // The rejected path deletes the Job and reruns the stage: believe "no genuine failure" only
        // from a fresh read of the node, since the cache may not show the live path's record yet.
        let fresh = ctx.writer.read_node(node).await?;
        let evidence = fresh.as_ref().map_or(RecordedEvidence::None, |n| {
            recorded_evidence(n, &annotation)
        });
        outcome = classify_job(job, &pods, evidence);
    }
    Ok(Seen {
        interrupt: is_interrupt_job(job),
        job,
        name,
        node,
        annotation,
        pods,
        outcome,
    })
}

/// Live path: the attempts that failed so far, an image that cannot be pulled, pods the Job
/// controller cannot create.
async fn on_running(ctx: &Context, seen: &Seen<'_>) -> Result<Action, ReconcileError> {
    let job = seen.job;
    // A suspended (paused) Job's pods are killed by the suspension, not by the package.
    let failed = if nodewright_core::jobs::read::is_suspended(job) {
        0
    } else {
        attempts(&seen.pods)
    };
    if failed > 0 {
        seen.record(ctx, Record::Erroring(failed)).await?;
    }
    let image_pull_again =
        image_pull::sync(ctx, job, seen.node, &seen.annotation, &seen.pods).await?;
    if let Some(message) = not_created::refusal(&ctx.failed_creates, job) {
        not_created::surface(
            ctx,
            job,
            seen.node,
            &seen.annotation,
            seen.interrupt,
            &message,
        )
        .await?;
        // Past its bound the stage ends (timed out, its cordon released); before it, it is
        // looked at again while the Job controller keeps trying (a pod event or a newer
        // FailedCreate Event also wakes it).
        let mut again = STUCK_RECHECK;
        if let Some(bound) = ctx.config.pods_not_created_timeout {
            match not_created::end_deadline(job, bound, k8s_openapi::jiff::Timestamp::now()) {
                Some(Ok(deadline)) => not_created::end(ctx, job, deadline).await?,
                Some(Err(left)) => again = again.min(left + Duration::from_millis(100)),
                None => {}
            }
        }
        return Ok(Action::requeue(again));
    }
    // An attempt waiting on its image, not for long enough yet: looked at again then.
    Ok(image_pull_again.map_or_else(Action::await_change, |left| {
        Action::requeue(left + Duration::from_millis(100))
    }))
}

/// Terminal path, Complete: the rollout of the Job's NodeWright owns the outcome (it records it
/// with the node's next stage, or on its own when no pass can: [`nodewright_core::rollout::absorb::unabsorbable`]); the Job's
/// completion is an event of that NodeWright, which runs the pass. Recorded here only when no
/// NodeWright this operator reconciles owns it (its pass will never run).
async fn on_succeeded(ctx: &Context, seen: &Seen<'_>) -> Result<Action, ReconcileError> {
    let owner = ObjectRef::<NodeWright>::new(&seen.annotation.nodewright);
    if ctx.nodewrights.get(&owner).is_some() {
        return Ok(Action::await_change());
    }
    record_completion(ctx, seen.job).await?;
    Ok(Action::await_change())
}

/// Records a Complete Job's outcome on its node (a no-op write when the record moved on: a pass
/// recorded it and stopped before the mark) and marks it recorded.
pub(crate) async fn record_completion(
    ctx: &Context,
    job: &StoredJob,
) -> Result<(), ReconcileError> {
    let (Some(annotation), Some(node)) = (package_of(job), node_of(job)) else {
        return Ok(());
    };
    record(
        ctx,
        node,
        &annotation,
        is_interrupt_job(job),
        Record::Complete,
    )
    .await?;
    ctx.writer
        .mark_job_recorded(
            &job.name_any(),
            job.metadata.uid.as_deref(),
            Recorded::Complete,
            ctx.config.jobs.defaults.ttl_succeeded_seconds(),
        )
        .await?;
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let pods = counted_pods(job, pods_of(&ctx.pods, &uid));
    ctx.metrics
        .stages()
        .finished(job, &pods, StageResult::Complete);
    Ok(())
}

/// Terminal path, genuine failures: the stage timed out. Recorded erroring, the evidence pruned
/// to the first and last attempt with their logs, announced, and the Job kept.
async fn on_timed_out(ctx: &Context, seen: &Seen<'_>) -> Result<Action, ReconcileError> {
    let (job, pods, name) = (seen.job, &seen.pods, &seen.name);
    seen.record(ctx, Record::Erroring(attempts(pods).max(1)))
        .await?;
    for pod in evidence_to_prune(pods) {
        match ctx.writer.delete_pod(&pod).await {
            Ok(()) => {}
            // Gone already, or refused: pruning is best effort, the evidence stays.
            Err(WriteError::Api(kube::Error::Api(_))) => {}
            Err(e) => {
                return Err(e
                    .context(format!("pruning failed attempt {pod} of Job {name}"))
                    .into());
            }
        }
    }
    // Before the mark: once recorded, the Job is not reconciled again.
    crate::outcomes::evidence::write_last_logs(ctx, job, pods, false).await?;
    announce_timeout(ctx, job, pods, seen.node, &seen.annotation).await;
    ctx.writer
        .mark_job_recorded(
            name,
            job.metadata.uid.as_deref(),
            Recorded::TimedOut,
            ctx.config.jobs.defaults.ttl_failed_seconds(),
        )
        .await?;
    ctx.metrics
        .stages()
        .finished(job, pods, StageResult::TimedOut);
    info!(node = seen.node, package = %seen.annotation.name, stage = %seen.annotation.stage, "stage timed out; Job kept as evidence");
    Ok(Action::await_change())
}

/// Terminal path, only admission rejections: nothing genuinely failed; the Job goes and the stage
/// runs again.
async fn on_only_rejected(ctx: &Context, seen: &Seen<'_>) -> Result<Action, ReconcileError> {
    ctx.writer
        .mark_job_recorded(
            &seen.name,
            seen.job.metadata.uid.as_deref(),
            Recorded::Rejected,
            ctx.config.jobs.defaults.ttl_failed_seconds(),
        )
        .await?;
    ctx.writer.remove_job(&seen.name).await?;
    info!(node = seen.node, package = %seen.annotation.name, stage = %seen.annotation.stage, "attempts only rejected at admission; the stage runs again");
    Ok(Action::await_change())
}

/// A Job at `FailureTarget` (its pods cannot finish): its logs kept, erroring past [`STUCK_BOUND`].
async fn on_stuck(ctx: &Context, seen: &Seen<'_>) -> Result<Action, ReconcileError> {
    crate::outcomes::evidence::write_last_logs(ctx, seen.job, &seen.pods, true).await?;
    if stuck_for(seen.job).is_some_and(|d| d > STUCK_BOUND) {
        let failed = attempts(&seen.pods).max(1);
        seen.record(ctx, Record::Erroring(failed)).await?;
    }
    Ok(Action::requeue(STUCK_RECHECK))
}

/// Whether the node's entry for the Job's package, version and stage is `erroring`: the live path saw
/// a genuine failure of this stage run (DESIGN §4.4), whether or not its pods still exist.
fn recorded_evidence(node: &Node, job: &PackageAnnotation) -> RecordedEvidence {
    parse_state(node, &job.nodewright)
        .and_then(|s| s.get(&job.name, &job.version).cloned())
        .filter(|r| r.stage == job.stage && r.state == Some(State::Erroring))
        .map_or(RecordedEvidence::None, |_| RecordedEvidence::Erroring)
}

/// The Warning Events of a timed-out stage, on the NodeWright and on the node, so that
/// `kubectl get events` and `kubectl describe` show it: package, version, stage, node, attempts used
/// of the limit, and the cause. Emitted once per Job (a recorded Job is not reconciled again); a
/// repeat after a failed mark is folded into the same Event series by the recorder.
async fn announce_timeout(
    ctx: &Context,
    job: &StoredJob,
    pods: &[StoredPod],
    node: &str,
    annotation: &PackageAnnotation,
) {
    let used = attempts(pods).max(1);
    let attempts_text = match attempt_limit(job) {
        Some(limit) => format!("{used} of {limit} attempts"),
        None => format!("{used} attempt(s)"),
    };
    let note = format!(
        "Package [{}:{}] stage [{}] timed out on node [{node}] after {attempts_text}: {}; Job {}/{} kept as evidence",
        annotation.name,
        annotation.version,
        annotation.stage,
        timeout_cause(job, pods),
        ctx.config.jobs.namespace,
        job.name_any(),
    );
    warn_about_job(
        ctx,
        job,
        &annotation.nodewright,
        node,
        STAGE_TIMED_OUT,
        note,
    )
    .await;
}

/// A Warning Event `reason` about a stage's Job on its NodeWright and on its node (each read from
/// the API when its store does not hold it yet), the Job as the related object.
async fn warn_about_job(
    ctx: &Context,
    job: &StoredJob,
    nodewright: &str,
    node: &str,
    reason: &str,
    note: String,
) {
    let related = crate::writes::job_ref(&ctx.config.jobs.namespace, &job.name_any());
    if let Some(nodewright) = stored_or_read(ctx, &ctx.nodewrights, nodewright).await {
        ctx.events
            .warn_on_nodewright(&nodewright, reason, note.clone(), Some(related.clone()))
            .await;
    }
    if let Some(node) = stored_or_read(ctx, &ctx.nodes, node).await {
        ctx.events
            .warn_on_node(&node, reason, note, Some(related))
            .await;
    }
}

/// Writes the note `key` on the Job (an annotation a user reads: `why`, `kubectl describe`), or
/// removes it with `None`; `what` names the note in an error.
async fn job_note(
    ctx: &Context,
    job: &StoredJob,
    key: &str,
    value: Option<&str>,
    what: &str,
) -> Result<(), ReconcileError> {
    let name = job.name_any();
    ctx.writer
        .patch_job(&name, json!({"metadata": {"annotations": {key: value}}}))
        .await
        .map_err(ReconcileError::write(format!(
            "{} the {what} note of Job {name}",
            if value.is_some() {
                "writing"
            } else {
                "clearing"
            }
        )))?;
    Ok(())
}

/// The cluster-scoped object `name` from its store, else read from the API. Right after a start
/// (a new leader) the Job store can fill before the NodeWright and node stores do; a timeout is
/// announced once (the recorded Job is not reconciled again), so skipping an object missing from a
/// store still filling lost its Event for good (seen under load in e2e_timeouts).
async fn stored_or_read<K>(
    ctx: &Context,
    store: &kube::runtime::reflector::Store<K>,
    name: &str,
) -> Option<Arc<K>>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    if let Some(object) = store.get(&ObjectRef::new(name)) {
        return Some(object);
    }
    match Api::<K>::all(ctx.client.clone()).get_opt(name).await {
        Ok(object) => object.map(Arc::new),
        Err(error) => {
            warn!(%error, name, "cannot read the object of a timeout Event; the Event is not published");
            None
        }
    }
}

/// Event reason of a timed-out stage.
pub const STAGE_TIMED_OUT: &str = "StageTimedOut";

/// Writes `record` into the node's state for the Job's NodeWright (precondition, retry).
///
/// The first attempt works from the node cache, which is almost always current (the Job ran for a
/// while since the node's last write), so recording an outcome usually costs one PATCH and no GET.
/// The resourceVersion precondition makes a stale cache harmless for a write (it fails, and the next
/// attempt reads the node). A stale cache could however show the outcome as already recorded (a
/// rerun reset the record since), so "nothing to write" is only believed from a fresh read.
async fn record(
    ctx: &Context,
    node: &str,
    job: &PackageAnnotation,
    interrupt: bool,
    outcome: Record,
) -> Result<(), ReconcileError> {
    let start = match ctx.nodes.get(&ObjectRef::new(node)) {
        Some(cached) => Node::clone(&cached),
        None => match ctx.writer.read_node(node).await? {
            Some(read) => read,
            None => return Ok(()),
        },
    };
    let key = keys::node_state_key(&job.nodewright);
    let written = ctx
        .writer
        .write_node(&start, Unchanged::Confirm, |current| {
            let Some(mut state) = parse_state(current, &job.nodewright) else {
                warn!(node, nodewright = %job.nodewright, "node state is malformed; outcome not recorded");
                return None;
            };
            apply_record(&mut state, job, interrupt, outcome).then(|| {
                let mut edit = NodeEdit::default();
                edit.annotate(key.clone(), state.to_annotation());
                edit
            })
        })
        .await?;
    if written.is_some() {
        info!(node, package = %job.name, stage = %job.stage, ?outcome, "recorded outcome");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::node_state::Stage;
    use serde_json::json;

    /// One request the mock API server received: method, path and query, JSON body (`Null` if none).
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<(http::Method, String, serde_json::Value)>>>;

    /// Answers like an API server holding `job`, whose only `pods` were rejected at admission, and a
    /// node with no record of the stage; records every request in the order received.
    fn rejected_path_api_server(
        mut handle: tower_test::mock::Handle<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >,
        job: serde_json::Value,
        pods: Vec<serde_json::Value>,
    ) -> (Seen, tokio::task::JoinHandle<()>) {
        let seen = Seen::default();
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (method, uri) = (request.method().clone(), request.uri().to_string());
                let bytes = request
                    .into_body()
                    .collect_bytes()
                    .await
                    .expect("request body");
                let body = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                log.lock()
                    .expect("request log")
                    .push((method.clone(), uri.clone(), body));
                let path = uri.split('?').next().unwrap_or_default();
                let (status, reply) = match (method.as_str(), path) {
                    ("GET", "/api/v1/namespaces/nodewright/pods") => (
                        200,
                        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods}),
                    ),
                    ("GET", "/api/v1/nodes/node-a") => (
                        200,
                        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}),
                    ),
                    ("PATCH" | "DELETE", "/apis/batch/v1/namespaces/nodewright/jobs/j") => {
                        (200, job.clone())
                    }
                    _ => (
                        404,
                        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                               "reason": "NotFound", "code": 404, "message": format!("{method} {uri}")}),
                    ),
                };
                send.send_response(
                    http::Response::builder()
                        .status(status)
                        .body(kube::client::Body::from(
                            serde_json::to_vec(&reply).expect("reply JSON"),
                        ))
                        .expect("response"),
                );
            }
        });
        (seen, task)
    }

    /// The rejected path deletes the Job so the stage reruns; the Job must first be marked
    /// (`state-recorded` + TTL), so a crash between the two writes never loses the outcome: once
    /// deleted, nothing could record it any more. Drives [`reconcile`] against a mock API server and
    /// checks the order of the writes it receives.
    #[tokio::test]
    async fn the_rejected_path_marks_the_job_before_deleting_it() {
        let annotation = PackageAnnotation {
            name: "dax".into(),
            version: "1.0.0".into(),
            nodewright: "nw".into(),
            stage: Stage::Apply,
            image: "img".into(),
            container_sha: None,
        };
        let job_json = json!({
            "metadata": {"name": "j", "namespace": "nodewright", "uid": "u1",
                "annotations": {keys::PACKAGE_ANNOTATION: annotation.to_json().expect("annotation")}},
            "spec": {"template": {"spec": {"nodeName": "node-a", "containers": []}}},
            "status": {"conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
        });
        let job: StoredJob = serde_json::from_value(job_json.clone()).expect("job");
        // Every attempt was refused by kubelet admission: Failed, no container ever ran.
        let rejected = |name: &str| {
            json!({"metadata": {"name": name, "namespace": "nodewright",
                       "labels": {"batch.kubernetes.io/controller-uid": "u1"}},
                   "status": {"phase": "Failed", "reason": "OutOfcpu"}})
        };
        let pods_json = vec![rejected("j-a"), rejected("j-b")];
        let pods: Vec<StoredPod> = pods_json
            .iter()
            .map(|p| serde_json::from_value(p.clone()).expect("pod"))
            .collect();
        assert_eq!(
            classify_job(&job, &pods, RecordedEvidence::None),
            JobOutcome::OnlyRejected
        );

        let (service, handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let (seen, server) = rejected_path_api_server(handle, job_json, pods_json);
        let ctx = Arc::new(Context::over(kube::Client::new(service, "nodewright")));
        let ttl = ctx.config.jobs.defaults.ttl_failed_seconds();
        reconcile(Arc::new(job), ctx)
            .await
            .expect("the rejected Job is recorded and deleted");
        server.abort();

        let seen = seen.lock().expect("request log").clone();
        let job_writes: Vec<(String, serde_json::Value)> = seen
            .iter()
            .filter(|(_, uri, _)| uri.starts_with("/apis/batch/v1/namespaces/nodewright/jobs/j"))
            .map(|(method, _, body)| (method.to_string(), body.clone()))
            .collect();
        let methods: Vec<&str> = job_writes.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(
            methods,
            ["PATCH", "DELETE"],
            "the Job is marked, then deleted; all requests: {seen:#?}"
        );
        let mark = &job_writes[0].1;
        assert_eq!(
            mark["metadata"]["annotations"][keys::STATE_RECORDED_ANNOTATION],
            "rejected",
            "{mark}"
        );
        assert_eq!(mark["spec"]["ttlSecondsAfterFinished"], ttl, "{mark}");
    }
}
