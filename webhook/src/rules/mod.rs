//! Admission rules: pure functions from objects to a verdict (no I/O).
//!
//! Every rule of the upstream validating webhook (renamed from `skyhook`), plus the ones DESIGN §3
//! adds (stage timeouts, image tags, dependency cycles, name lengths, label-safe versions). Unlike
//! upstream, which stops at the first failure (and picks it from a Go map, so at random), every
//! failure of one object is reported together, sorted by field path, one line each, so a user fixes a
//! manifest in one round trip instead of one per mistake.
//!
//! What the rules need from the cluster (does this policy exist, who uses it) comes through
//! [`ClusterView`], which the server implements over watch-backed caches and tests implement in
//! memory. Nothing here performs I/O, so every rule is unit-testable and cheap to run per request.

mod blast_radius;
pub mod cluster;
pub mod env;
pub mod findings;
mod graph;
mod health_gates;
mod image;
pub mod labels;
mod nodewright;
mod package;
mod policy;
pub mod quantity;
mod resources;
pub mod restrictions;
pub mod selector;
pub mod semver;
mod update;

#[cfg(test)]
mod examples;
#[cfg(test)]
mod testing;

use nodewright_shared::api::{DeploymentPolicy, NodeWright};

pub use restrictions::Restrictions;

use self::cluster::ClusterView;
use self::findings::{Findings, Verdict};

/// Validates a NodeWright on CREATE (`old` is `None`) or UPDATE (`old` is the stored object, which
/// enables the uninstall guards and the cancel warning), warns its blast radius (what runs again,
/// on how many nodes, in how many batches), within the administrator's
/// `restrictions` (control-plane tolerations, allowed images, protected Secrets).
///
/// An UPDATE that leaves the spec unchanged (finalizers, labels, the pause/disable annotations) is
/// admitted without re-checking the spec: nothing these rules guard changed, and refusing it would let
/// an object that reached storage without the webhook (or whose DeploymentPolicy has since gone)
/// block the operator's finalizer handling and the user's pause annotation for good.
pub fn validate_nodewright(
    new: &NodeWright,
    old: Option<&NodeWright>,
    cluster: &dyn ClusterView,
    restrictions: &Restrictions,
) -> Verdict {
    if old.is_some_and(|old| old.spec == new.spec) {
        return Verdict::default();
    }
    let mut findings = Findings::default();
    nodewright::check(new, cluster, &mut findings);
    restrictions::check(new, restrictions, &mut findings);
    if let Some(old) = old {
        update::check(old, new, &mut findings);
    }
    blast_radius::check(new, old, cluster, &mut findings);
    findings.finish()
}

/// The denial of a NodeWright over the CRD's size bounds (more than 100 packages, or a package with
/// more than 100 `dependsOn` entries), for the mutating endpoint: such an object can never be
/// stored, so it gets a clear denial instead of a patch sized by the object. `None` within bounds.
pub fn nodewright_oversized(nw: &NodeWright) -> Option<String> {
    let mut errors = nodewright::size_errors(nw);
    errors.sort();
    (!errors.is_empty()).then(|| {
        Verdict {
            errors,
            warnings: Vec::new(),
        }
        .message()
    })
}

/// Validates a DeploymentPolicy on CREATE or UPDATE.
pub fn validate_deployment_policy(new: &DeploymentPolicy) -> Verdict {
    let mut findings = Findings::default();
    policy::check(new, &mut findings);
    findings.finish()
}

/// Validates the DELETE of a DeploymentPolicy: refused while a NodeWright still names it, since that
/// NodeWright's rollout would stop (blocked) the moment the policy disappears.
pub fn validate_deployment_policy_delete(name: &str, cluster: &dyn ClusterView) -> Verdict {
    let mut findings = Findings::default();
    policy::check_delete(name, cluster, &mut findings);
    findings.finish()
}
