//! The rollout's writes to Jobs: create (idempotent by name), delete a recorded Job so its stage can
//! rerun, suspend/resume on pause, and drift (an unfinished Job whose package changed is replaced).
//! Rule kept everywhere: a finished Job is deleted only once its outcome is recorded (DESIGN §4.4).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use nodewright_core::jobs::PackageAnnotation;
use nodewright_core::jobs::drift;
use nodewright_core::jobs::read::{
    JobIndex, Recorded, is_finished, is_suspended, node_of, package_of, recorded,
};
use nodewright_core::jobs::stored::StoredJob;
use nodewright_core::node::edit::NodeEdit;
use nodewright_core::node::state::parse_state;
use nodewright_shared::api::NodeWright;
use nodewright_shared::keys;
use nodewright_shared::node_state::State;
use serde_json::json;
use tracing::info;

use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::{Unchanged, failed};

fn api(ctx: &Context) -> Api<StoredJob> {
    Api::namespaced(ctx.client.clone(), &ctx.config.jobs.namespace)
}

/// What to do with a Job found under the name of a Job being created (AlreadyExists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// An earlier run of the same stage, finished and recorded as complete or only rejected: delete
    /// it so the next pass creates the new run.
    Replace,
    /// Anything else stays: a running Job is the run itself, an unrecorded one waits for its outcome,
    /// and a timed-out one is the evidence of its stage (only a package change, a rerun or reset, a
    /// config update or the failure TTL clear it, never a create that raced the Job store).
    Keep,
}

/// The decision for an existing Job of the same name (DESIGN §4.4).
pub fn on_existing(existing: &StoredJob) -> Existing {
    if is_finished(existing)
        && matches!(
            recorded(existing),
            Some(Recorded::Complete | Recorded::Rejected)
        )
    {
        Existing::Replace
    } else {
        Existing::Keep
    }
}

/// Whether any of the named Jobs exists, read live (not from the store, which may lag).
pub async fn any_exists(ctx: &Context, names: &[String]) -> Result<bool, ReconcileError> {
    for name in names {
        let found = api(ctx)
            .get_metadata_opt(name)
            .await
            .map_err(ReconcileError::api(format!("reading Job {name}")))?;
        if found.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Creates `job` (after the test hook, if any). AlreadyExists is fine: the deterministic name makes
/// creation idempotent; the existing Job is replaced or kept by [`on_existing`], and either way the
/// next pass re-plans from the store.
pub async fn create(ctx: &Context, mut job: Job) -> Result<(), ReconcileError> {
    if let Some(hook) = &ctx.options.job_hook {
        hook(&mut job);
    }
    let name = job.name_any();
    match ctx.writer.create_job(&job).await {
        Ok(_) => {
            ctx.metrics.stages().created(&job);
            info!(job = %name, "created Job");
            Ok(())
        }
        Err(e) if e.code() == Some(409) => {
            let existing = api(ctx)
                .get_opt(&name)
                .await
                .map_err(ReconcileError::api(format!("reading existing Job {name}")))?;
            if let Some(existing) = existing
                && on_existing(&existing) == Existing::Replace
            {
                ctx.writer.remove_job(&name).await?;
            }
            Ok(())
        }
        Err(e) => Err(e
            .context(format!("creating Job {}/{name}", ctx.config.jobs.namespace))
            .into()),
    }
}

/// Pause: suspends every unfinished Job; resume: unsuspends them (DESIGN §4.4).
pub async fn set_suspended(
    ctx: &Context,
    jobs: &JobIndex,
    suspend: bool,
) -> Result<(), ReconcileError> {
    for job in jobs
        .iter()
        .filter(|j| !is_finished(j) && is_suspended(j) != suspend)
    {
        let name = job.name_any();
        ctx.writer
            .patch_job(&name, json!({"spec": {"suspend": suspend}}))
            .await
            .map_err(failed(format!("setting suspend={suspend} on Job {name}")))?;
        info!(job = %name, suspend, "changed Job suspension");
    }
    Ok(())
}

/// Drift (DESIGN §4.4): an unfinished package Job whose package no longer matches (its template hash,
/// or the package or its version is gone from the spec) is deleted, and so is a timed-out one whose
/// package changed (so the stage runs again with the new spec) or whose version is gone (an
/// upgrade clears the old version's timed-out stage). A timed-out interrupt Job whose owner package
/// changed is deleted too, so the interrupt runs again (a running interrupt never is: it may be
/// rebooting the node). Returns how many were deleted.
pub async fn replace_drifted(
    ctx: &Context,
    nodewright: &NodeWright,
    jobs: &JobIndex,
) -> Result<usize, ReconcileError> {
    let nw = nodewright.name_any();
    let mut deleted = 0;
    // One hash per package (a serialisation and two digests), not one per Job: a package has a Job
    // per stage per node.
    let mut hashes: BTreeMap<String, String> = BTreeMap::new();
    let mut interrupt_hashes: BTreeMap<String, String> = BTreeMap::new();
    for job in jobs.iter() {
        // Being deleted already (foreground propagation keeps it until its pods are gone):
        // deleting it again would only requeue the pass until then.
        if job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let interrupt = nodewright_core::jobs::classify::is_interrupt_job(job);
        let finished = is_finished(job);
        let timed_out = recorded(job) == Some(Recorded::TimedOut);
        if (finished || interrupt) && !timed_out {
            continue;
        }
        let Some(annotation) = package_of(job) else {
            continue;
        };
        let stale = match nodewright
            .spec
            .packages
            .get(&annotation.name)
            .filter(|p| p.version == annotation.version)
        {
            // The owner left the spec: the plan removes a finished interrupt Job by itself (and an
            // uninstall-interrupt runs for a package already gone, so its evidence stays).
            None if interrupt => false,
            // The package or this version left the spec: a running Job is stopped, and a
            // timed-out one (recorded, so its outcome is safe) goes with the version it was the
            // evidence of, so nothing keeps showing a package the user moved on from.
            None => !finished || timed_out,
            Some(package) if interrupt => {
                let hash = match interrupt_hashes.get(&annotation.name) {
                    Some(hash) => hash,
                    None => {
                        let hash = drift::interrupt_template_hash(
                            &nw,
                            &annotation.name,
                            package,
                            &ctx.config.jobs,
                        )?;
                        interrupt_hashes
                            .entry(annotation.name.clone())
                            .or_insert(hash)
                    }
                };
                // An interrupt Job built before interrupt Jobs carried the hash cannot be shown to
                // differ: it stays (its failed-Job TTL still clears it).
                job.template_hash.as_deref().is_some_and(|h| h != hash)
            }
            Some(package) => {
                let hash = match hashes.get(&annotation.name) {
                    Some(hash) => hash,
                    None => {
                        let hash = drift::package_template_hash(
                            &nw,
                            &annotation.name,
                            package,
                            &ctx.config.jobs,
                        )?;
                        hashes.entry(annotation.name.clone()).or_insert(hash)
                    }
                };
                drift::is_stale(job, hash)
            }
        };
        if stale {
            info!(job = %job.name_any(), package = %annotation.name, stage = %annotation.stage, "package changed: replacing its Job");
            ctx.writer.remove_job(&job.name_any()).await?;
            if !finished {
                reset_live_erroring(ctx, job, &annotation).await?;
            }
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// After drift replaced a running Job, its stage's `erroring` record (the live path counted failed
/// attempts of the replaced run) goes back to `in_progress`: the replaced run did not time out, so
/// the next pass must not announce a cleared timeout (`StageTimeoutCleared`) when it starts the
/// stage again, and the new run has not failed. After the DELETE, so the replaced Job's pods (it is
/// no longer reconciled once deleted) cannot write `erroring` again behind it.
async fn reset_live_erroring(
    ctx: &Context,
    job: &StoredJob,
    annotation: &PackageAnnotation,
) -> Result<(), ReconcileError> {
    let Some(node) = node_of(job) else {
        return Ok(());
    };
    let start = match ctx.nodes.get(&ObjectRef::new(node)) {
        Some(cached) => Node::clone(&cached),
        None => match ctx.writer.read_node(node).await? {
            Some(read) => read,
            None => return Ok(()),
        },
    };
    let key = keys::node_state_key(&annotation.nodewright);
    // `Believe`: a cache that does not show the record erroring yet costs at most a spurious Event.
    ctx.writer
        .write_node(&start, Unchanged::Believe, |current| {
            let mut state = parse_state(current, &annotation.nodewright)?;
            let mut entry = state.get(&annotation.name, &annotation.version)?.clone();
            if entry.stage != annotation.stage || entry.state != Some(State::Erroring) {
                return None;
            }
            entry.state = Some(State::InProgress);
            entry.restarts = 0;
            state.upsert(entry);
            let mut edit = NodeEdit::default();
            edit.annotate(key.clone(), state.to_annotation());
            Some(edit)
        })
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(conditions: serde_json::Value, recorded: Option<&str>) -> StoredJob {
        let annotations = recorded.map_or_else(
            || json!({}),
            |r| json!({"nodewright.nvidia.com/state-recorded": r}),
        );
        serde_json::from_value(json!({
            "metadata": {"name": "j", "annotations": annotations},
            "status": {"conditions": conditions}
        }))
        .expect("valid Job JSON")
    }

    /// Requests seen by the mock API server: method and path.
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

    /// A client whose every Job DELETE succeeds (and is logged); anything else is answered 404.
    fn deletes_succeed() -> (Seen, kube::Client, tokio::task::JoinHandle<()>) {
        let seen = Seen::default();
        let log = seen.clone();
        let (client, server) = crate::writes::mock::serve(move |method, path, _| {
            log.lock()
                .expect("request log")
                .push((method.to_string(), path.to_owned()));
            if method == http::Method::DELETE && path.contains("/jobs/") {
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Success"}),
                )
            } else {
                (404, crate::writes::mock::not_found())
            }
        });
        (seen, client, server)
    }

    fn reboot_package(agent: &str) -> nodewright_shared::api::Package {
        nodewright_shared::api::Package {
            version: "1.0.0".into(),
            image: "example.com/pkg".into(),
            agent_image_override: Some(agent.into()),
            interrupt: Some(nodewright_shared::api::Interrupt {
                kind: nodewright_shared::api::InterruptType::Reboot,
                services: vec![],
            }),
            ..Default::default()
        }
    }

    use super::super::pass_fixtures::with_package;

    /// The interrupt Job of `nw`'s package `a` on `n1`, finished and recorded `recorded` (running
    /// when `None`).
    fn interrupt_job(ctx: &Context, nw: &NodeWright, recorded: Option<&str>) -> StoredJob {
        let owner = nw.spec.packages.get("a").expect("package a");
        let mut job =
            nodewright_core::jobs::build_interrupt_job(&nodewright_core::jobs::InterruptJobInput {
                nodewright: nw,
                owner_key: "a",
                owner,
                interrupt: owner.interrupt.as_ref().expect("an interrupt"),
                stage: nodewright_shared::node_state::Stage::Interrupt,
                node: "n1",
                node_order: 0,
                config: &ctx.config.jobs,
            })
            .expect("interrupt Job builds");
        if let Some(r) = recorded {
            job.metadata
                .annotations
                .get_or_insert_default()
                .insert(STATE_RECORDED.to_owned(), r.to_owned());
            job.status = Some(k8s_openapi::api::batch::v1::JobStatus {
                conditions: Some(vec![k8s_openapi::api::batch::v1::JobCondition {
                    type_: "Failed".into(),
                    status: "True".into(),
                    reason: Some("DeadlineExceeded".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
        StoredJob::of(&job)
    }

    const STATE_RECORDED: &str = nodewright_shared::keys::STATE_RECORDED_ANNOTATION;

    /// D4: a timed-out interrupt (here: a broken `agentImageOverride`) is fixed by editing its
    /// package at the same version: drift deletes the timed-out interrupt Job so it runs again, as
    /// it does a package Job's (docs/timeouts.md). A running interrupt is never replaced.
    #[tokio::test]
    async fn drift_replaces_a_timed_out_interrupt_job_whose_package_changed() {
        let (seen, client, server) = deletes_succeed();
        let ctx = Context::over(client);
        let broken = with_package(reboot_package("example.com/agent:broken"));
        let fixed = with_package(reboot_package("example.com/agent:fixed"));
        let timed_out = interrupt_job(&ctx, &broken, Some("timed-out"));
        let name = timed_out.name_any();

        // Unchanged package: the evidence stays.
        let jobs = JobIndex::with_fleet([std::sync::Arc::new(timed_out.clone())], &[]);
        assert_eq!(
            replace_drifted(&ctx, &broken, &jobs).await.expect("drift"),
            0
        );
        // Changed: replaced.
        assert_eq!(
            replace_drifted(&ctx, &fixed, &jobs).await.expect("drift"),
            1
        );
        // Already being deleted (foreground): not deleted again, the pass is not requeued for it.
        let mut deleting = timed_out.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let jobs = JobIndex::with_fleet([std::sync::Arc::new(deleting)], &[]);
        assert_eq!(
            replace_drifted(&ctx, &fixed, &jobs).await.expect("drift"),
            0
        );
        // A running interrupt Job of the old package is left alone (it may be rebooting the node).
        let running = JobIndex::with_fleet(
            [std::sync::Arc::new(interrupt_job(&ctx, &broken, None))],
            &[],
        );
        assert_eq!(
            replace_drifted(&ctx, &fixed, &running)
                .await
                .expect("drift"),
            0
        );
        drop(ctx);
        server.abort();
        let seen = seen.lock().expect("request log").clone();
        assert_eq!(
            seen,
            vec![(
                "DELETE".to_owned(),
                format!("/apis/batch/v1/namespaces/nodewright/jobs/{name}")
            )]
        );
    }

    /// A running package Job whose live attempts failed (`(apply, erroring)`) is replaced by drift:
    /// its record goes back to `in_progress`, so the next pass, which starts the stage again, sees
    /// no cleared timeout (`StageTimeoutCleared` is only for a recorded timeout).
    #[tokio::test]
    async fn drift_resets_the_erroring_record_of_a_replaced_live_job() {
        use super::super::pass_fixtures::{erroring_apply, n1_with_state};
        use nodewright_shared::node_state::Stage;
        let node = n1_with_state(&erroring_apply(2));
        let seen: std::sync::Arc<std::sync::Mutex<Vec<(String, String, serde_json::Value)>>> =
            Default::default();
        let log = seen.clone();
        let (client, server) = crate::writes::mock::serve(move |method, path, body| {
            log.lock()
                .expect("request log")
                .push((method.to_string(), path.to_owned(), body));
            match (method.as_str(), path) {
                ("DELETE", p) if p.contains("/jobs/") => (
                    200,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Success"}),
                ),
                ("GET" | "PATCH", "/api/v1/nodes/n1") => (200, node.clone()),
                _ => (404, crate::writes::mock::not_found()),
            }
        });
        let ctx = Context::over(client);
        let mut old = reboot_package("example.com/agent:1");
        old.interrupt = None;
        let nw = with_package(old.clone());
        let job =
            nodewright_core::jobs::build_package_job(&nodewright_core::jobs::PackageJobInput {
                nodewright: &nw,
                package_key: "a",
                package: &old,
                stage: Stage::Apply,
                node: "n1",
                node_order: 0,
                config: &ctx.config.jobs,
            })
            .expect("package Job builds");
        let changed = with_package(nodewright_shared::api::Package {
            image: "example.com/fixed".into(),
            ..old
        });
        let jobs = JobIndex::with_fleet([std::sync::Arc::new(StoredJob::of(&job))], &[]);
        assert_eq!(
            replace_drifted(&ctx, &changed, &jobs).await.expect("drift"),
            1
        );
        drop(ctx);
        server.abort();
        let seen = seen.lock().expect("request log").clone();
        let methods: Vec<&str> = seen.iter().map(|(m, _, _)| m.as_str()).collect();
        assert_eq!(methods, ["DELETE", "GET", "PATCH"], "{seen:#?}");
        let patch = seen[2].2.to_string();
        assert!(
            patch.contains(r#"\"state\":\"in_progress\""#) && !patch.contains("erroring"),
            "{patch}"
        );
    }

    /// The create-409 branch: a create that meets a Job of the same name reads it and deletes it
    /// only when it is a finished, recorded complete or rejected run; a timed-out one (evidence) and
    /// an unrecorded one stay. Either way the create itself succeeds (the next pass re-plans).
    #[tokio::test]
    async fn a_create_that_meets_an_existing_job_replaces_only_a_processed_one() {
        let cases = [
            (Some("complete"), "Complete", true),
            (Some("rejected"), "Failed", true),
            (Some("timed-out"), "Failed", false),
            (None, "Failed", false),
        ];
        for (recorded, condition, replaced) in cases {
            let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
            let log = seen.clone();
            let existing = json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "j", "namespace": "nodewright",
                    "annotations": recorded.map_or_else(|| json!({}),
                        |r| json!({STATE_RECORDED: r}))},
                "status": {"conditions": [{"type": condition, "status": "True"}]}});
            let (client, server) = crate::writes::mock::serve(move |method, path, _| {
                log.lock()
                    .expect("request log")
                    .push(format!("{method} {path}"));
                match method.as_str() {
                    "POST" => (
                        409,
                        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                               "reason": "AlreadyExists", "code": 409}),
                    ),
                    "GET" => (200, existing.clone()),
                    "DELETE" => (
                        200,
                        json!({"apiVersion": "v1", "kind": "Status", "status": "Success"}),
                    ),
                    _ => (404, crate::writes::mock::not_found()),
                }
            });
            let ctx = Context::over(client);
            let mut job = Job::default();
            job.metadata.name = Some("j".into());
            create(&ctx, job)
                .await
                .expect("a create that meets an existing Job is fine");
            drop(ctx);
            server.abort();
            let seen = seen.lock().expect("request log").clone();
            let jobs = "/apis/batch/v1/namespaces/nodewright/jobs";
            let mut want = vec![format!("POST {jobs}"), format!("GET {jobs}/j")];
            if replaced {
                want.push(format!("DELETE {jobs}/j"));
            }
            assert_eq!(seen, want, "{recorded:?} {condition}");
        }
    }

    #[test]
    fn a_create_that_meets_a_timed_out_job_keeps_the_evidence() {
        let failed =
            json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]);
        let complete = json!([{"type": "Complete", "status": "True"}]);
        assert_eq!(
            on_existing(&job(failed.clone(), Some("timed-out"))),
            Existing::Keep
        );
        assert_eq!(
            on_existing(&job(failed.clone(), Some("rejected"))),
            Existing::Replace
        );
        assert_eq!(
            on_existing(&job(complete.clone(), Some("complete"))),
            Existing::Replace
        );
        // Not recorded yet: its outcome must be recorded before anything deletes it.
        assert_eq!(on_existing(&job(failed, None)), Existing::Keep);
        assert_eq!(on_existing(&job(complete, None)), Existing::Keep);
        // Running.
        assert_eq!(on_existing(&job(json!([]), None)), Existing::Keep);
    }
}
