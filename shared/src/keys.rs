//! Every label, annotation, finalizer, condition and taint key the product owns (DESIGN §2).
//!
//! They all live under one prefix so users can find (and tools can strip) everything NodeWright wrote.
//! Keys derived from a NodeWright name (`nodeState_<name>` and friends) must stay valid label and
//! annotation names, which is why [`MAX_NODEWRIGHT_NAME_LEN`] exists.

/// The API group, also the prefix of every key.
pub const GROUP: &str = "nodewright.nvidia.com";
/// The only API version.
pub const VERSION: &str = "v1alpha1";
/// Prefix of every label and annotation key, with the slash.
pub const PREFIX: &str = "nodewright.nvidia.com/";

/// Finalizer on every NodeWright.
pub const FINALIZER: &str = "nodewright.nvidia.com/nodewright";
/// User annotation on a NodeWright: `"true"` pauses it and every later-priority NodeWright on its nodes.
pub const PAUSE_ANNOTATION: &str = "nodewright.nvidia.com/pause";
/// User annotation on a NodeWright: `"true"` skips it; later NodeWrights proceed without it.
pub const DISABLE_ANNOTATION: &str = "nodewright.nvidia.com/disable";
/// Operator annotation: the operator version that last wrote an object.
pub const VERSION_ANNOTATION: &str = "nodewright.nvidia.com/version";
/// User label on a node: `"true"` makes every NodeWright skip the node (it shows as blocked).
pub const IGNORE_LABEL: &str = "nodewright.nvidia.com/ignore";

/// Job/Pod label: the NodeWright name.
pub const NAME_LABEL: &str = "nodewright.nvidia.com/name";
/// Job/Pod label: `<package>-<version>`.
pub const PACKAGE_LABEL: &str = "nodewright.nvidia.com/package";
/// Job/Pod label: the stage.
pub const STAGE_LABEL: &str = "nodewright.nvidia.com/stage";
/// Job/Pod label: the node the Job is pinned to.
pub const NODE_LABEL: &str = "nodewright.nvidia.com/node";
/// Interrupt Job/Pod label.
pub const INTERRUPT_LABEL: &str = "nodewright.nvidia.com/interrupt";
/// Job/Pod annotation: JSON describing the package and stage (upstream's pod annotation).
pub const PACKAGE_ANNOTATION: &str = "nodewright.nvidia.com/package";
/// Job annotation: the hash of what a package Job's pods run (its images, env, resources and package
/// ConfigMap), set by the builder; an unfinished Job whose hash differs from the spec's is stale
/// (DESIGN §4.4).
pub const TEMPLATE_HASH_ANNOTATION: &str = "nodewright.nvidia.com/template-hash";
/// Job annotation: the outcome of this finished Job is recorded in node state; only now may it be
/// deleted (DESIGN §4.4).
pub const STATE_RECORDED_ANNOTATION: &str = "nodewright.nvidia.com/state-recorded";
/// Job annotation: tail of the stuck container's log, kept as evidence.
pub const LAST_LOGS_ANNOTATION: &str = "nodewright.nvidia.com/last-logs";
/// Job annotation: the apiserver's message refusing the Job's pod (its `FailedCreate` Event), while
/// the Job has never had a pod; removed once it has one.
pub const PODS_NOT_CREATED_ANNOTATION: &str = "nodewright.nvidia.com/pods-not-created";
/// Job annotation: an attempt of the Job waits on an image the kubelet cannot pull (the container,
/// the image and the kubelet's message); removed once no attempt waits so.
pub const IMAGE_PULL_FAILING_ANNOTATION: &str = "nodewright.nvidia.com/image-pull-failing";

/// The longest NodeWright name: node keys are `nodewright.nvidia.com/<word>_<name>`, and the name
/// part of a qualified key (`nodeState_<name>`, the longest word) must be at most 63 characters.
pub const MAX_NODEWRIGHT_NAME_LEN: usize = 63 - "nodeState_".len();

/// Node annotation holding the JSON node state of one NodeWright.
pub fn node_state_key(nodewright: &str) -> String {
    format!("{PREFIX}nodeState_{nodewright}")
}

/// Node annotation and label holding the node's status for one NodeWright.
pub fn node_status_key(nodewright: &str) -> String {
    format!("{PREFIX}status_{nodewright}")
}

/// Node annotation, `"true"` while this NodeWright holds a cordon on the node.
pub fn cordon_key(nodewright: &str) -> String {
    format!("{PREFIX}cordon_{nodewright}")
}

/// Node annotation: when this NodeWright's drain of the node first found it not drained (RFC 3339),
/// written only under a `drainConfig.timeout`, so the bound survives operator restarts; removed
/// once the node drained or the cordon was released.
pub fn drain_start_key(nodewright: &str) -> String {
    format!("{PREFIX}drainStart_{nodewright}")
}

/// Node annotation: the node's health-gate wait for this NodeWright (JSON: since when, which gate
/// it waits for and what the operator saw, whether the gate timed out). Written in the pass that
/// finds the node's packages finished; removed in the write that counts the node complete (its
/// gates passed) or when its packages have work again.
pub fn gates_key(nodewright: &str) -> String {
    format!("{PREFIX}gates_{nodewright}")
}

/// Node annotation, `"true"` when the node was already unschedulable (cordoned by an administrator or
/// another tool) when the first NodeWright took a cordon claim on it ([`cordon_key`]): releasing the
/// last claim then leaves the node cordoned, so an administrator's cordon is never undone. Absent:
/// the node was schedulable before (or its claims predate this annotation), and releasing the last
/// claim uncordons it. It sits beside the claims rather than in their value, so operators and CLIs
/// that only know `cordon_<name>: "true"` still read the claims as before.
pub const CORDONED_BEFORE_ANNOTATION: &str = "nodewright.nvidia.com/cordonedBefore";
/// Node annotation, `"true"` while the node holds the persistent cordon of `runtimeRequiredCordonAfter`:
/// set with `spec.unschedulable=true` in the write that removes the runtime-required taint. Node-scoped
/// (no NodeWright name), as upstream's: it belongs to no NodeWright, so deleting or resetting one
/// keeps it, and no NodeWright's cordon release uncordons the node while it is there. Only an
/// external actor (a validator) releases it, removing it and uncordoning in one patch.
pub const RUNTIME_REQUIRED_CORDON_ANNOTATION: &str = "nodewright.nvidia.com/runtimeRequiredCordon";
/// NodeWright annotation: `{package: stageTimeout}` the webhook filled from the operator default;
/// such a package follows the operator's current default while its value is unchanged
/// ([`crate::defaulted`]).
pub const DEFAULTED_STAGE_TIMEOUTS_ANNOTATION: &str =
    "nodewright.nvidia.com/defaulted-stage-timeouts";

/// Node annotation: the operator version that last migrated the node for this NodeWright.
pub fn node_version_key(nodewright: &str) -> String {
    format!("{PREFIX}version_{nodewright}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_name_still_makes_valid_keys() {
        assert_eq!(MAX_NODEWRIGHT_NAME_LEN, 53);
        let name = "a".repeat(MAX_NODEWRIGHT_NAME_LEN);
        for key in [
            node_state_key(&name),
            node_status_key(&name),
            cordon_key(&name),
            node_version_key(&name),
        ] {
            let (prefix, local) = key.split_once('/').unwrap_or_default();
            assert_eq!(prefix, GROUP);
            assert!(
                local.len() <= 63,
                "{key} has a name part over 63 characters"
            );
        }
    }
}
