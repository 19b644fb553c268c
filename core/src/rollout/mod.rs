//! The pure half of the NodeWright rollout (DESIGN §4, upstream-operator.md §2): which nodes a
//! NodeWright selects and admits ([`selection`], [`compartments`], [`budget`], [`batches`],
//! [`priority`]), the maintenance windows ([`windows`]), the cluster-wide disruption cap
//! ([`disruption`]), the stage machine on one node ([`stages`], [`graph`], [`plan`]), the pass that
//! decides over all of them ([`pass`]) and the status it produces ([`status`], [`uninstall`]), with the
//! revision history and the automatic rollback ([`history`], [`spec_diff`], [`rollback`]). The
//! operator's reconciler reads the cluster, calls these and carries out what they decide.

pub mod absorb;
pub mod batches;
pub mod blast;
pub(crate) mod budget;
pub mod compartments;
pub mod config_updates;
pub mod disruption;
pub mod graph;
pub mod history;
pub mod parts;
pub mod pass;
pub mod plan;
pub(crate) mod priority;
pub mod reboots;
pub mod rollback;
pub mod runtime_taint;
pub mod selection;
pub mod spec_diff;
pub mod stages;
pub mod status;
pub mod uninstall;
pub mod wake;
pub mod windows;
