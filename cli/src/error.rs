//! Every way a command fails, each with the message a user reads and the exit status a script
//! tests: 2 for a command line that cannot work as typed (clap's own usage errors, a missing
//! confirmation), 1 for everything else.

use std::process::ExitCode;

/// A failed command. The message names what was asked, what went wrong and, where there is one,
/// the fix.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line cannot work as typed.
    #[error("{0}")]
    Usage(String),
    /// A write needs a confirmation that cannot be asked for.
    #[error(
        "refusing to {action} without a confirmation: stdin is not a terminal, so there is no one \
         to ask; pass -y (--yes) to confirm. Nothing was written."
    )]
    NeedsConfirmation {
        /// What would have been done.
        action: String,
    },
    /// The user answered no.
    #[error("aborted: nothing was written")]
    Declined,
    /// The kubeconfig cannot be read or used.
    #[error("cannot use the kubeconfig{}: {reason}", path.as_deref().map(|p| format!(" {p}")).unwrap_or_default())]
    Kubeconfig {
        /// The file, when one was given.
        path: Option<String>,
        /// Why.
        reason: String,
    },
    /// The API server did not answer (connection refused, TLS, timeout...).
    #[error(
        "cannot reach the Kubernetes API server at {server} ({what}): {reason}. Check the \
         kubeconfig and context (--kubeconfig, --context) and that the cluster is up; nothing was \
         written."
    )]
    Unreachable {
        /// The server URL.
        server: String,
        /// What was being done.
        what: String,
        /// The transport error, with its causes.
        reason: String,
    },
    /// The API server refused or failed a request.
    #[error("{what}: {message} ({code} {reason})")]
    Api {
        /// What was being done.
        what: String,
        /// The server's message.
        message: String,
        /// HTTP status code.
        code: u16,
        /// The server's reason.
        reason: String,
    },
    /// The named NodeWright does not exist.
    #[error("NodeWright {0:?} not found: list them with `kubectl get nodewrights`")]
    NodeWrightNotFound(String),
    /// Something named on the command line does not exist or matches nothing.
    #[error("{0}")]
    NotFound(String),
    /// Input that cannot be used (a file, a value not valid for the object it applies to).
    #[error("{0}")]
    Invalid(String),
    /// A local file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Writing to stdout or stderr failed (e.g. a closed pipe).
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    /// Some writes failed (the others were made); each failure is listed.
    #[error("{failed} of {total} changes failed:\n{details}")]
    Partial {
        /// Failed writes.
        failed: usize,
        /// Attempted writes.
        total: usize,
        /// One line per failure.
        details: String,
    },
}

impl CliError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Usage(_) | CliError::NeedsConfirmation { .. } => ExitCode::from(2),
            _ => ExitCode::from(1),
        }
    }

    /// The HTTP status of an API error.
    pub fn code(&self) -> Option<u16> {
        match self {
            CliError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// The text of an error and its causes, `a: b: c`.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// Shorthand for results of commands.
pub type Result<T, E = CliError> = std::result::Result<T, E>;
