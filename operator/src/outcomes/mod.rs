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
//! - Disrupted pods are ignored everywhere (the one predicate of [`crate::jobs::outcome`]).
//!
//! Every node write re-reads the node and carries the resourceVersion precondition; a record is only
//! written over the same stage it describes (a late or repeated event can never move a package back).

pub(crate) mod evidence;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use nodewright_shared::keys;
use nodewright_shared::node_state::{NodeState, Stage, State};
use serde_json::json;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::context::Context;
use crate::error::ReconcileError;
use crate::jobs::PackageAnnotation;
use crate::jobs::outcome::{
    JobOutcome, RecordedEvidence, attempt_limit, attempts, classify_job, evidence_to_prune,
    is_interrupt_job, timeout_cause,
};
use crate::jobs::read::{Recorded, node_of, package_of, recorded};
use crate::metrics::state::Outcome;
use crate::node::edit::NodeEdit;
use crate::node::state::parse_state;
use crate::writes::{Unchanged, WriteError, failed};

/// How long a Job may sit at `FailureTarget` before it is looked at again.
pub const STUCK_RECHECK: Duration = Duration::from_secs(30);
/// A Job at `FailureTarget` for longer than this (its pods on an unreachable node cannot finish)
/// surfaces as erroring (DESIGN §4.4).
pub const STUCK_BOUND: Duration = Duration::from_secs(120);

/// How long the Job has been at `FailureTarget=True`.
fn stuck_for(job: &Job) -> Option<Duration> {
    let since = job
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "FailureTarget" && c.status == "True")?
        .last_transition_time
        .as_ref()?
        .0;
    let elapsed = k8s_openapi::jiff::Timestamp::now().duration_since(since);
    Duration::try_from(elapsed).ok()
}

/// What an outcome does to the package's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The stage completed.
    Complete,
    /// A genuine failure: erroring with this many failed attempts.
    Erroring(i32),
}

/// Applies an outcome to the node state; returns whether anything changed. Only the record of the
/// Job's own package, version and stage is touched, and never once it is complete.
pub fn apply_record(
    state: &mut NodeState,
    job: &PackageAnnotation,
    interrupt: bool,
    record: Record,
) -> bool {
    let Some(current) = state.get(&job.name, &job.version).cloned() else {
        return false;
    };
    if current.stage != job.stage || current.state == Some(State::Complete) {
        return false;
    }
    let mut next = current.clone();
    match record {
        Record::Erroring(restarts) => {
            next.state = Some(State::Erroring);
            // The attempt count of one stage run only grows: a later reconcile may count fewer
            // failed pods once the middle attempts were pruned as evidence (or from a lagging
            // view), and must not lower what was recorded.
            next.restarts = if current.state == Some(State::Erroring) {
                restarts.max(current.restarts)
            } else {
                restarts
            };
        }
        Record::Complete => next.state = Some(State::Complete),
    }
    let mut changed = next != current;
    state.upsert(next);
    if record == Record::Complete {
        if interrupt {
            // The packages folded into this merged interrupt complete with it.
            let skipped: Vec<_> = state
                .iter()
                .filter(|r| r.stage == job.stage && r.state == Some(State::Skipped))
                .cloned()
                .collect();
            for mut r in skipped {
                r.state = Some(State::Complete);
                state.upsert(r);
                changed = true;
            }
        }
        if matches!(job.stage, Stage::Upgrade | Stage::Apply) {
            // The new version is installed: an upgrade replaces every other version (upstream), and
            // any install replaces other versions that never completed installing (a stage that
            // timed out at 1.0.0, then the user moved to 1.0.1): left behind, they would show an
            // erroring package to every reader of node state. A completed other version installed
            // by `apply` stays (a downgrade keeps both records, as upstream), and so does an entry
            // in its uninstall cycle (that cycle removes it).
            let old: Vec<_> = state
                .iter()
                .filter(|r| r.name == job.name && r.version != job.version)
                .filter(|r| {
                    job.stage == Stage::Upgrade
                        || (r.state != Some(State::Complete)
                            && !matches!(r.stage, Stage::Uninstall | Stage::UninstallInterrupt))
                })
                .map(|r| r.version.clone())
                .collect();
            for version in old {
                state.remove(&job.name, &version);
                changed = true;
            }
        }
    }
    changed
}

/// The pods of the Job with this uid in the pod store (running Jobs: a stale read only delays an
/// `erroring` record until the next pod event).
fn pods_of(store: &kube::runtime::reflector::Store<Pod>, uid: &str) -> Vec<Pod> {
    store
        .state()
        .iter()
        .filter(|pod| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("batch.kubernetes.io/controller-uid"))
                .is_some_and(|v| v == uid)
        })
        .map(|pod| Pod::clone(pod))
        .collect()
}

/// Reconciles one Job (and, through it, its pods).
pub async fn reconcile(job: Arc<Job>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
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
pub fn error_policy(job: Arc<Job>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    if error.is_conflict() {
        return Action::requeue(Duration::from_millis(500));
    }
    if !error.is_term_ended() {
        warn!(job = %job.name_any(), %error, "recording a Job outcome failed");
    }
    Action::requeue(Duration::from_secs(5))
}

async fn record_outcome(job: &Job, ctx: &Context) -> Result<Action, ReconcileError> {
    if !ctx.leading() || recorded(job).is_some() || job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (Some(annotation), Some(node)) = (package_of(job), node_of(job)) else {
        debug!("not a NodeWright Job (no package annotation or node); ignoring");
        return Ok(Action::await_change());
    };
    let name = job.name_any();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.config.jobs.namespace);
    // A running Job's pods come from the watch-fed store (no API call per pod event). A failing
    // decision (Failed, FailureTarget) is taken from a live list instead, once per Job: the store
    // may not have seen the last pod update yet, and an outcome classified from a stale view would
    // be recorded for good. A Complete Job needs no pods (the Job controller's condition is the
    // outcome), so the common case costs no list: a label-selected LIST scans every retained pod
    // of the namespace, and one per finished Job grows with the square of the fleet.
    let cached_node = ctx.nodes.get(&ObjectRef::new(node));
    let evidence = cached_node.as_deref().map_or(RecordedEvidence::None, |n| {
        recorded_evidence(n, &annotation)
    });
    let mut pods = pods_of(&ctx.pods, &uid);
    let mut outcome = classify_job(job, &pods, evidence);
    if !matches!(outcome, JobOutcome::Running | JobOutcome::Succeeded) {
        pods = pods_api
            .list(
                &ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}")),
            )
            .await
            .map_err(ReconcileError::api(format!(
                "listing the pods of Job {name}"
            )))?
            .items;
        outcome = classify_job(job, &pods, evidence);
    }
    if outcome == JobOutcome::OnlyRejected && evidence == RecordedEvidence::None {
        // The rejected path deletes the Job and reruns the stage: believe "no genuine failure" only
        // from a fresh read of the node, since the cache may not show the live path's record yet.
        let fresh = ctx.writer.read_node(node).await?;
        let evidence = fresh.as_ref().map_or(RecordedEvidence::None, |n| {
            recorded_evidence(n, &annotation)
        });
        outcome = classify_job(job, &pods, evidence);
    }
    let interrupt = is_interrupt_job(job);
    match outcome {
        JobOutcome::Running => {
            // A suspended (paused) Job's pods are killed by the suspension, not by the package.
            let failed = if crate::jobs::read::is_suspended(job) {
                0
            } else {
                attempts(&pods)
            };
            if failed > 0 {
                record(ctx, node, &annotation, interrupt, Record::Erroring(failed)).await?;
            }
            Ok(Action::await_change())
        }
        JobOutcome::Succeeded => {
            record(ctx, node, &annotation, interrupt, Record::Complete).await?;
            mark(
                ctx,
                &name,
                Recorded::Complete,
                ctx.config.jobs.defaults.ttl_succeeded_seconds(),
            )
            .await?;
            Ok(Action::await_change())
        }
        JobOutcome::TimedOut => {
            record(
                ctx,
                node,
                &annotation,
                interrupt,
                Record::Erroring(attempts(&pods).max(1)),
            )
            .await?;
            for pod in evidence_to_prune(&pods) {
                match ctx.writer.delete_pod(&pod).await {
                    Ok(()) => {}
                    // Gone already, or refused: pruning is best effort, the evidence stays.
                    Err(WriteError::Api(kube::Error::Api(_))) => {}
                    Err(e) => {
                        return Err(
                            e.context(format!("pruning failed attempt {pod} of Job {name}"))
                        );
                    }
                }
            }
            // Before the mark: once recorded, the Job is not reconciled again.
            crate::outcomes::evidence::write_last_logs(ctx, job, &pods, false).await?;
            announce_timeout(ctx, job, &pods, node, &annotation).await;
            mark(
                ctx,
                &name,
                Recorded::TimedOut,
                ctx.config.jobs.defaults.ttl_failed_seconds(),
            )
            .await?;
            info!(node, package = %annotation.name, stage = %annotation.stage, "stage timed out; Job kept as evidence");
            Ok(Action::await_change())
        }
        JobOutcome::OnlyRejected => {
            mark(
                ctx,
                &name,
                Recorded::Rejected,
                ctx.config.jobs.defaults.ttl_failed_seconds(),
            )
            .await?;
            ctx.writer.remove_job(&name).await?;
            info!(node, package = %annotation.name, stage = %annotation.stage, "attempts only rejected at admission; the stage runs again");
            Ok(Action::await_change())
        }
        JobOutcome::Stuck => {
            crate::outcomes::evidence::write_last_logs(ctx, job, &pods, true).await?;
            if stuck_for(job).is_some_and(|d| d > STUCK_BOUND) {
                let failed = attempts(&pods).max(1);
                record(ctx, node, &annotation, interrupt, Record::Erroring(failed)).await?;
            }
            Ok(Action::requeue(STUCK_RECHECK))
        }
    }
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
    job: &Job,
    pods: &[Pod],
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
    let related = crate::writes::job_ref(&ctx.config.jobs.namespace, &job.name_any());
    if let Some(nodewright) = ctx.nodewrights.get(&ObjectRef::new(&annotation.nodewright)) {
        ctx.events
            .warn_on_nodewright(
                &nodewright,
                STAGE_TIMED_OUT,
                note.clone(),
                Some(related.clone()),
            )
            .await;
    }
    if let Some(node) = ctx.nodes.get(&ObjectRef::new(node)) {
        ctx.events
            .warn_on_node(&node, STAGE_TIMED_OUT, note, Some(related))
            .await;
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

/// Marks the Job's outcome as recorded and starts its TTL.
async fn mark(
    ctx: &Context,
    job: &str,
    outcome: Recorded,
    ttl_seconds: i32,
) -> Result<(), ReconcileError> {
    let patch = json!({
        "metadata": {"annotations": {keys::STATE_RECORDED_ANNOTATION: outcome.as_str()}},
        "spec": {"ttlSecondsAfterFinished": ttl_seconds},
    });
    ctx.writer
        .patch_job(job, patch)
        .await
        .map_err(failed(format!("marking Job {job} as recorded")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::node_state::PackageStatus;

    fn entry(name: &str, version: &str, stage: Stage, state: State) -> PackageStatus {
        PackageStatus {
            name: name.into(),
            version: version.into(),
            image: "img".into(),
            container_sha: String::new(),
            stage,
            state: Some(state),
            restarts: 0,
        }
    }

    fn job(name: &str, version: &str, stage: Stage) -> PackageAnnotation {
        PackageAnnotation {
            name: name.into(),
            version: version.into(),
            nodewright: "nw".into(),
            stage,
            image: "img".into(),
            container_sha: None,
        }
    }

    #[test]
    fn outcomes_only_touch_their_own_stage_and_never_undo_completion() {
        let mut s = NodeState::default();
        s.upsert(entry("a", "1", Stage::Config, State::InProgress));
        // A late event of the finished apply Job changes nothing.
        assert!(!apply_record(
            &mut s,
            &job("a", "1", Stage::Apply),
            false,
            Record::Erroring(2)
        ));
        assert!(apply_record(
            &mut s,
            &job("a", "1", Stage::Config),
            false,
            Record::Erroring(1)
        ));
        assert_eq!(
            s.get("a", "1").map(|r| (r.state, r.restarts)),
            Some((Some(State::Erroring), 1))
        );
        assert!(apply_record(
            &mut s,
            &job("a", "1", Stage::Config),
            false,
            Record::Complete
        ));
        assert!(!apply_record(
            &mut s,
            &job("a", "1", Stage::Config),
            false,
            Record::Erroring(3)
        ));
        assert_eq!(s.get("a", "1").and_then(|r| r.state), Some(State::Complete));
    }

    #[test]
    fn the_recorded_attempt_count_never_goes_down() {
        let mut s = NodeState::default();
        s.upsert(entry("a", "1", Stage::Apply, State::InProgress));
        let apply = job("a", "1", Stage::Apply);
        assert!(apply_record(&mut s, &apply, false, Record::Erroring(3)));
        // A later pass after the middle attempt was pruned counts 2 failed pods.
        assert!(!apply_record(&mut s, &apply, false, Record::Erroring(2)));
        assert_eq!(s.get("a", "1").map(|r| r.restarts), Some(3));
        // A new run of the stage starts from a fresh in-progress record.
        s.upsert(entry("a", "1", Stage::Apply, State::InProgress));
        assert!(apply_record(&mut s, &apply, false, Record::Erroring(1)));
        assert_eq!(s.get("a", "1").map(|r| r.restarts), Some(1));
    }

    #[test]
    fn an_interrupt_completes_the_packages_folded_into_it() {
        let mut s = NodeState::default();
        s.upsert(entry("a", "1", Stage::Interrupt, State::Skipped));
        s.upsert(entry("b", "1", Stage::Interrupt, State::InProgress));
        assert!(apply_record(
            &mut s,
            &job("b", "1", Stage::Interrupt),
            true,
            Record::Complete
        ));
        assert!(s.iter().all(|r| r.state == Some(State::Complete)));
    }

    #[test]
    fn a_completed_install_drops_other_versions_that_never_installed() {
        let mut s = NodeState::default();
        // 1.0.0 timed out at apply; the user moved to 1.0.1.
        s.upsert(entry("a", "1.0.0", Stage::Apply, State::Erroring));
        // An older version that did install (a downgrade keeps it, as upstream), and one being
        // uninstalled (its cycle removes it).
        s.upsert(entry("a", "0.9.0", Stage::Config, State::Complete));
        s.upsert(entry("a", "0.8.0", Stage::Uninstall, State::InProgress));
        s.upsert(entry("b", "1.0.0", Stage::Apply, State::Erroring));
        s.upsert(entry("a", "1.0.1", Stage::Apply, State::InProgress));
        // While 1.0.1 only runs, the old record stays (nothing installed yet).
        assert!(apply_record(
            &mut s,
            &job("a", "1.0.1", Stage::Apply),
            false,
            Record::Erroring(1)
        ));
        assert!(s.get("a", "1.0.0").is_some());
        s.upsert(entry("a", "1.0.1", Stage::Apply, State::InProgress));
        assert!(apply_record(
            &mut s,
            &job("a", "1.0.1", Stage::Apply),
            false,
            Record::Complete
        ));
        assert!(s.get("a", "1.0.0").is_none(), "the timed-out version goes");
        assert!(s.get("a", "0.9.0").is_some());
        assert!(s.get("a", "0.8.0").is_some());
        assert!(
            s.get("b", "1.0.0").is_some(),
            "other packages are untouched"
        );
    }

    #[test]
    fn a_completed_upgrade_drops_the_old_version() {
        let mut s = NodeState::default();
        s.upsert(entry("a", "1.0.0", Stage::Config, State::Complete));
        s.upsert(entry("a", "2.0.0", Stage::Upgrade, State::InProgress));
        assert!(apply_record(
            &mut s,
            &job("a", "2.0.0", Stage::Upgrade),
            false,
            Record::Complete
        ));
        assert!(s.get("a", "1.0.0").is_none());
        assert!(s.get("a", "2.0.0").is_some());
    }

    /// One request the mock API server received: method, path and query, JSON body (`Null` if none).
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<(http::Method, String, serde_json::Value)>>>;

    /// Answers like an API server holding `job`, whose only `pods` were rejected at admission, and a
    /// node with no record of the stage; records every request in the order received.
    fn rejected_path_api_server(
        mut handle: tower_test::mock::Handle<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >,
        job: Job,
        pods: Vec<Pod>,
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
                        (200, serde_json::to_value(&job).expect("job JSON"))
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

    /// A Context whose every request goes to `client`; stores empty (nothing cached, as after a
    /// restart), leading.
    fn context_over(client: kube::Client) -> Context {
        let env = std::collections::BTreeMap::from([
            ("NAMESPACE", "nodewright"),
            ("POD_NAME", "operator-0"),
            ("LEADER_ELECTION", "false"),
        ]);
        let config = crate::runtime::config::OperatorConfig::from_lookup(|var| {
            env.get(var).map(|v| (*v).to_owned())
        })
        .expect("operator configuration");
        let term = tokio_util::sync::CancellationToken::new();
        let synced = || tokio::sync::watch::channel(true).1;
        Context {
            client: client.clone(),
            nodes: kube::runtime::reflector::store().0,
            pods: kube::runtime::reflector::store().0,
            nodewrights: kube::runtime::reflector::store().0,
            jobs: kube::runtime::reflector::store().0,
            jobs_synced: synced(),
            policies: kube::runtime::reflector::store().0,
            policies_synced: synced(),
            term: term.clone(),
            options: crate::context::RunOptions::default(),
            events: crate::writes::Events::new(
                client.clone(),
                &config.lease.identity,
                term.clone(),
            ),
            writer: crate::writes::Writer::new(client, &config.jobs.namespace, term),
            metrics: crate::metrics::state::StateMetrics::default(),
            config: Arc::new(config),
        }
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
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": "nodewright", "uid": "u1",
                "annotations": {keys::PACKAGE_ANNOTATION: annotation.to_json().expect("annotation")}},
            "spec": {"template": {"spec": {"nodeName": "node-a", "containers": []}}},
            "status": {"conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
        }))
        .expect("job");
        // Every attempt was refused by kubelet admission: Failed, no container ever ran.
        let rejected = |name: &str| {
            json!({"metadata": {"name": name, "namespace": "nodewright",
                       "labels": {"batch.kubernetes.io/controller-uid": "u1"}},
                   "status": {"phase": "Failed", "reason": "OutOfcpu"}})
        };
        let pods: Vec<Pod> = [rejected("j-a"), rejected("j-b")]
            .into_iter()
            .map(|p| serde_json::from_value(p).expect("pod"))
            .collect();
        assert_eq!(
            classify_job(&job, &pods, RecordedEvidence::None),
            JobOutcome::OnlyRejected
        );

        let (service, handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let (seen, server) = rejected_path_api_server(handle, job.clone(), pods);
        let ctx = Arc::new(context_over(kube::Client::new(service, "nodewright")));
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
