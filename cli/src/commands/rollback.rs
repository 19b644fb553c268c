//! `rollback NAME [--to-revision N]`: writes an earlier revision's packages back as the
//! NodeWright's spec.packages (the rest of the spec stays), after showing what changes and asking;
//! then resets the batch state (unless `--keep-batch-state`), so a rollout the failure threshold
//! stopped does not hold the rollback. The operator brings the nodes back through the normal
//! upgrade and downgrade stages under the rollout's budget and batches.

use kube::ResourceExt;
use nodewright_core::rollout::history;
use nodewright_core::rollout::rollback::{batch_state_reset, refusal_hint, uninstall_guarded};
use nodewright_core::rollout::spec_diff;
use serde_json::{Value, json};

use crate::args::RollbackArgs;
use crate::cluster;
use crate::context::Ctx;
use crate::error::{CliError, Result};
use crate::prompt::confirm;
use crate::writes::Writer;

/// Runs `rollback`.
pub async fn run(ctx: &Ctx, args: &RollbackArgs) -> Result<()> {
    let nw = cluster::nodewright(ctx, &args.name).await?;
    let name = nw.name_any();
    let revisions = nw
        .status
        .as_ref()
        .map(|s| s.revisions.clone())
        .unwrap_or_default();
    let current = &nw.spec.packages;
    let to = history::target(&revisions, current, args.to_revision)
        .map_err(|e| CliError::Invalid(format!("cannot roll back NodeWright {name}: {e}")))?;
    let changes = spec_diff::diff(current, &to.packages);
    let mut writer = Writer::new(ctx);
    writer.note(format!(
        "NodeWright {name}: back to revision {} (recorded {}, generation {}): {}",
        to.revision,
        to.recorded.0.strftime("%Y-%m-%dT%H:%M:%SZ"),
        to.generation,
        history::package_list(&to.packages)
    ));
    for change in &changes {
        writer.note(format!("  {change}"));
    }
    let guarded = uninstall_guarded(current, &to.packages);
    if !guarded.is_empty() {
        writer.note(format!(
            "note: uninstall.enabled on {}: the webhook refuses lowering the version of, or \
             removing, such a package while it is installed on a node (uninstall it first)",
            guarded.join(", ")
        ));
    }
    if !ctx.dry_run() {
        confirm(
            args.confirm.yes,
            &format!("roll back NodeWright {name}"),
            &format!(
                "Roll NodeWright {name} back to revision {}? Its nodes follow through the \
                 rollout's budget and batches.",
                to.revision
            ),
        )?;
    }
    let action = format!("write revision {}'s packages as spec.packages", to.revision);
    let packages = serde_json::to_value(&to.packages)
        .map_err(|e| CliError::Invalid(format!("cannot encode revision {}: {e}", to.revision)))?;
    let patch = json!({"spec": {"packages": packages}});
    if let Err(e) = writer
        .write_nodewright_packages(&nw, &to.packages, &action, patch)
        .await
    {
        // What the rollback would have changed, then why it did not.
        writer.print(ctx.format())?;
        return Err(match e {
            CliError::Api {
                what,
                message,
                code,
                reason,
            } => {
                let hint = refusal_hint(&message);
                CliError::Api {
                    what,
                    message: format!(
                        "{}.{hint} Nothing was written",
                        message.trim_end_matches('.')
                    ),
                    code,
                    reason,
                }
            }
            other => other,
        });
    }
    if !args.keep_batch_state
        && let Some(cleared) = nw.status.as_ref().and_then(batch_state_reset)
    {
        let patch = json!({"status": Value::Object(cleared)});
        writer
            .patch_nodewright_status(
                &name,
                "reset the batch state (the rollback starts at batch 1)",
                patch,
            )
            .await?;
    }
    writer.print(ctx.format())
}
