//! Why a Job could not be built. Every variant names the NodeWright and package it concerns, because the
//! reconciler turns it into an event and a condition that an administrator must act on.

use nodewright_shared::deadline::StageTimeoutError;
use nodewright_shared::node_state::Stage;

/// A Job could not be built from the spec.
#[derive(Debug, thiserror::Error)]
pub enum JobBuildError {
    /// The NodeWright lacks metadata every object read from the API server has (it owns the Job, and
    /// the agent's copy directory and resource id contain its uid and generation).
    #[error(
        "NodeWright {nodewright:?} has no metadata.{field}: Jobs can only be built for a NodeWright read from the API server"
    )]
    MissingMetadata {
        /// The NodeWright name (empty when that is what is missing).
        nodewright: String,
        /// The missing field.
        field: &'static str,
    },

    /// The package's `stageTimeout` is not a usable duration. (A value too large for
    /// `activeDeadlineSeconds` is not an error: it is clamped, DESIGN §4.3.)
    #[error("NodeWright {nodewright:?} package {package:?}: stageTimeout {value:?}: {source}")]
    StageTimeout {
        /// The NodeWright name.
        nodewright: String,
        /// The package name.
        package: String,
        /// The value as written.
        value: String,
        /// Why it is unusable (boxed: it is large and rare).
        #[source]
        source: Box<StageTimeoutError>,
    },

    /// The package's `gracefulShutdown` is not a usable duration.
    #[error(
        "NodeWright {nodewright:?} package {package:?}: gracefulShutdown {value:?} {reason}: use a Go duration such as \"30s\""
    )]
    GracefulShutdown {
        /// The NodeWright name.
        nodewright: String,
        /// The package name.
        package: String,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A package Job was asked for an interrupt stage; those run as the node's merged interrupt Job.
    #[error(
        "NodeWright {nodewright:?} package {package:?}: stage {stage} runs as the node's merged interrupt Job, not as a package Job"
    )]
    NotAPackageStage {
        /// The NodeWright name.
        nodewright: String,
        /// The package name.
        package: String,
        /// The stage asked for.
        stage: Stage,
    },

    /// An interrupt Job was asked for a stage that is not an interrupt stage.
    #[error(
        "NodeWright {nodewright:?} package {package:?}: stage {stage} is not an interrupt stage (interrupt, uninstall-interrupt)"
    )]
    NotAnInterruptStage {
        /// The NodeWright name.
        nodewright: String,
        /// The package owning the interrupt.
        package: String,
        /// The stage asked for.
        stage: Stage,
    },

    /// Serialising an annotation or an agent argument failed (cannot happen with these types; kept as
    /// an error rather than a panic).
    #[error("NodeWright {nodewright:?} package {package:?}: cannot serialise the {what}: {source}")]
    Serialize {
        /// The NodeWright name.
        nodewright: String,
        /// The package name.
        package: String,
        /// What was being serialised.
        what: &'static str,
        /// The serialiser's error.
        #[source]
        source: serde_json::Error,
    },
}
