//! The automatic rollback carried out (`rollbackOnFailure`; the decisions and why they happen once
//! are in [`nodewright_core::rollout::rollback`]): before a pass plans, a due rollback is written
//! (the revision's packages as the spec, with the operator's own ServiceAccount, through
//! admission like any update), then its outcome is recorded in `status.rollback` (with the batch
//! states cleared when the spec is the rollback's) and announced by an Event.
//!
//! Writes: one JSON Patch of the NodeWright under its resourceVersion (RBAC: `patch` on
//! `nodewrights`, which the operator holds for its finalizer), one merge patch of its status.

use kube::ResourceExt;
use kube::api::Patch;
use nodewright_core::rollout::history::Packages;
use nodewright_core::rollout::rollback::{self, Next};
use nodewright_shared::api::{AutomaticRollback, NodeWright, RollbackPhase};
use tracing::{info, warn};

use crate::context::Context;
use crate::error::ReconcileError;
use crate::writes::{StatusRecords, StatusWrite, WriteError};

/// Carries out the NodeWright's due automatic rollback, if any. Returns whether it wrote (the
/// writes are events: the pass ends and plans again on the object as written).
pub async fn carry_out(ctx: &Context, nodewright: &NodeWright) -> Result<bool, ReconcileError> {
    let now = ctx.now();
    let name = nodewright.name_any();
    match rollback::next(nodewright, now) {
        Next::Nothing => Ok(false),
        Next::Record { outcome, reset } => {
            let (from, to) = known_packages(nodewright, &outcome);
            record(ctx, nodewright, &outcome, reset, from, to).await?;
            Ok(true)
        }
        Next::Write { to } => {
            let Some(due) = nodewright.status.as_ref().and_then(|s| s.rollback.as_ref()) else {
                return Ok(false);
            };
            let what = || {
                format!(
                    "writing revision {} back as the spec of NodeWright {name} (automatic rollback)",
                    to.revision
                )
            };
            let rv = nodewright.resource_version().unwrap_or_default();
            let patch = rollback::packages_patch(&rv, &to.packages).map_err(|source| {
                ReconcileError::Json {
                    what: what(),
                    source,
                }
            })?;
            match ctx
                .writer
                .patch_nodewright(&name, &Patch::Json(patch))
                .await
            {
                Ok(written) => {
                    let generation = written.metadata.generation.unwrap_or_default();
                    info!(nodewright = %name, to = to.revision, generation, "rolled back automatically");
                    let outcome = rollback::written(due, generation, now);
                    let (from, to) = (Some(&nodewright.spec.packages), Some(&to.packages));
                    record(ctx, &written, &outcome, true, from, to).await?;
                    Ok(true)
                }
                Err(e) => match refusal(&e) {
                    Some(message) => {
                        warn!(nodewright = %name, to = to.revision, %message, "the automatic rollback was refused");
                        let outcome = rollback::refused(due, &message, now);
                        record(ctx, nodewright, &outcome, false, None, None).await?;
                        Ok(true)
                    }
                    // A change since the read (409, retried at once on a fresh read), the webhook
                    // unreachable (500), the term ended: the rollback stays due.
                    None => Err(e.context(what()).into()),
                },
            }
        }
    }
}

/// The API's message when it refused the write for good (admission, validation): not a conflict,
/// not a server or transport failure, which a later pass retries.
fn refusal(error: &WriteError) -> Option<String> {
    match error {
        WriteError::Api(kube::Error::Api(status)) if matches!(status.code, 400 | 403 | 422) => {
            Some(status.message.clone())
        }
        _ => None,
    }
}

/// The packages rolled back from and to, as far as the history still has them.
fn known_packages<'a>(
    nodewright: &'a NodeWright,
    outcome: &AutomaticRollback,
) -> (Option<&'a Packages>, Option<&'a Packages>) {
    let revisions = nodewright
        .status
        .as_ref()
        .map(|s| s.revisions.as_slice())
        .unwrap_or_default();
    let find = |n: Option<i64>| {
        n.and_then(|n| revisions.iter().find(|r| r.revision == n))
            .map(|r| &r.packages)
    };
    (find(outcome.from_revision), find(outcome.to_revision))
}

/// Records `outcome` in the status of `nodewright` (clearing every compartment's batch state when
/// `reset`), then announces it.
async fn record(
    ctx: &Context,
    nodewright: &NodeWright,
    outcome: &AutomaticRollback,
    reset: bool,
    from: Option<&Packages>,
    to: Option<&Packages>,
) -> Result<(), ReconcileError> {
    let name = nodewright.name_any();
    let action = format!(
        "recording the automatic rollback ({}) of NodeWright {name}",
        outcome.phase.as_str()
    );
    let value = serde_json::to_value(outcome).map_err(|source| ReconcileError::Json {
        what: action.clone(),
        source,
    })?;
    let mut records = StatusRecords::new(action).value("rollback", value);
    if reset
        && let Some(cleared) = nodewright
            .status
            .as_ref()
            .and_then(rollback::batch_state_reset)
    {
        records = records.fields(cleared);
    }
    let written = ctx
        .writer
        .write_status(nodewright, StatusWrite::Records(records))
        .await?;
    let (reason, message, warning) = rollback::event(outcome, from, to);
    if warning {
        ctx.events
            .warn_on_nodewright(&written, reason, message, None)
            .await;
    } else {
        ctx.events
            .on_nodewright(&written, reason, message, None)
            .await;
    }
    if outcome.phase == RollbackPhase::RolledBack {
        info!(nodewright = %name, "automatic rollback recorded; the batch states start afresh");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> WriteError {
        WriteError::Api(kube::Error::Api(
            kube::core::Status::failure(message, "")
                .with_code(code)
                .boxed(),
        ))
    }

    /// Admission and validation refusals end the rollback (recorded once); a conflict, a server
    /// failure (the webhook unreachable) or an ended term leave it due, to be retried.
    #[test]
    fn only_a_refusal_for_good_is_recorded() {
        for code in [400, 403, 422] {
            assert_eq!(
                refusal(&api(code, "denied the request: downgrade not allowed")).as_deref(),
                Some("denied the request: downgrade not allowed"),
                "{code}"
            );
        }
        for code in [404, 409, 429, 500, 503] {
            assert_eq!(refusal(&api(code, "try again")), None, "{code}");
        }
        assert_eq!(refusal(&WriteError::TermEnded), None);
    }
}
