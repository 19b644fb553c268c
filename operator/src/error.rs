//! The reconcilers' error type: every variant names what was being done and to which object, so a
//! log line is enough to find the problem.

use nodewright_core::jobs::JobBuildError;
use nodewright_core::jobs::configmaps::ConfigMapError;
use nodewright_core::rollout::selection::SelectorError;

use crate::writes::{NodeWriteError, WriteError, WriteFailed};

/// Why a reconcile failed (it is retried with back-off).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was being done, naming the object.
        action: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// A node write failed (a conflict is retried at once by the next reconcile).
    #[error(transparent)]
    Node(#[from] NodeWriteError),
    /// A Job could not be built from the spec.
    #[error(transparent)]
    Build(#[from] JobBuildError),
    /// The node selector of a NodeWright is invalid.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// Another label selector of a NodeWright's spec (e.g. podNonInterruptLabels) is invalid.
    #[error("spec.{field} of NodeWright {nodewright} is not a valid label selector: {reason}")]
    InvalidSelector {
        /// The NodeWright.
        nodewright: String,
        /// The spec field.
        field: &'static str,
        /// The parse error.
        reason: String,
    },
    /// A package or node-metadata ConfigMap could not be built.
    #[error(transparent)]
    ConfigMap(#[from] ConfigMapError),
    /// `spec.drainConfig` holds a duration admission would have refused.
    #[error("NodeWright {nodewright}: {source}")]
    DrainConfig {
        /// The NodeWright.
        nodewright: String,
        /// What is wrong.
        source: nodewright_core::node::drain::DrainConfigError,
    },
    /// JSON (de)serialisation of an operator-owned value failed.
    #[error("{what}: {source}")]
    Json {
        /// What was being (de)serialised.
        what: String,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
    /// The leadership term ended: the reconcile stopped before writing.
    #[error("the leadership term ended; not writing")]
    TermEnded,
}

impl From<WriteFailed> for ReconcileError {
    fn from(failed: WriteFailed) -> Self {
        match failed {
            WriteFailed::TermEnded { .. } => ReconcileError::TermEnded,
            WriteFailed::Api { action, source } => ReconcileError::Api { action, source },
            WriteFailed::Json { action, source } => ReconcileError::Json {
                what: action,
                source,
            },
            WriteFailed::Node(e) => ReconcileError::Node(e),
        }
    }
}

impl ReconcileError {
    /// Maps a [`WriteError`] into the reconcilers' error naming `action` (for `map_err`).
    pub fn write(action: impl Into<String>) -> impl FnOnce(WriteError) -> ReconcileError {
        let action = action.into();
        move |e| e.context(action).into()
    }

    /// Wraps an API error with what was being done.
    pub fn api(action: impl Into<String>) -> impl FnOnce(kube::Error) -> ReconcileError {
        let action = action.into();
        move |source| ReconcileError::Api { action, source }
    }

    /// Whether the leadership term ended (nothing to report: the next leader carries on).
    pub fn is_term_ended(&self) -> bool {
        matches!(
            self,
            ReconcileError::TermEnded | ReconcileError::Node(NodeWriteError::TermEnded { .. })
        )
    }

    /// Whether the error is a lost race that the next attempt resolves by re-reading.
    pub fn is_conflict(&self) -> bool {
        matches!(self, ReconcileError::Node(NodeWriteError::Conflict { .. }))
            || matches!(self, ReconcileError::Api { source: kube::Error::Api(s), .. } if s.code == 409 || s.code == 422)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write refused because the term ended stays recognisable as such after naming it, so a
    /// reconcile that lost leadership ends quietly instead of reporting an error.
    #[test]
    fn a_refused_write_is_a_term_end_and_a_lost_race_a_conflict() {
        assert!(ReconcileError::write("cordoning node a")(WriteError::TermEnded).is_term_ended());
        let conflict = kube::Error::Api(
            kube::core::Status::failure("changed", "Conflict")
                .with_code(409)
                .boxed(),
        );
        let error = ReconcileError::write("cordoning node a")(WriteError::Api(conflict));
        assert!(error.is_conflict() && !error.is_term_ended());
        assert!(
            error.to_string().starts_with("cordoning node a: "),
            "{error}"
        );
    }
}
