//! Every API write of the operator goes through one [`Writer`], which refuses to send anything once
//! this replica's leadership term has ended (DESIGN §4.5; model: linkerd2 policy-controller's status
//! writer, which checks the lease claim on every patch). A replica that lost the lease mid-pass can
//! then no longer cordon, evict, create Jobs or write ConfigMaps, status or Events until its pass
//! ends: the gate is checked immediately before each request, not once per pass.
//!
//! The Lease itself ([`LeaseWriter`], used by [`crate::runtime::leader`]) is what decides the term,
//! and so is not gated by it.

mod certs;
mod configmaps;
mod event_filter;
mod events;
mod jobs;
mod lease;
pub(crate) mod memo;
#[cfg(test)]
pub(crate) mod mock;
mod nodes;
mod nodewrights;
mod pods;

pub use events::{Events, job_ref};
pub use lease::LeaseWriter;
pub use nodes::{NodeWriteError, Unchanged};
pub use nodewrights::{StatusRecords, StatusWrite};

use tokio_util::sync::CancellationToken;

/// Why a write was not done.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The leadership term ended: the request was not sent.
    #[error("the leadership term ended; the write was not sent")]
    TermEnded,
    /// The apiserver refused or failed the request.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

impl WriteError {
    /// The HTTP status code of an API error, if the apiserver answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            WriteError::Api(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }

    /// Names what was being written.
    pub fn context(self, action: impl Into<String>) -> WriteFailed {
        let action = action.into();
        match self {
            WriteError::TermEnded => WriteFailed::TermEnded { action },
            WriteError::Api(source) => WriteFailed::Api { action, source },
        }
    }
}

/// A write that failed, naming what was being written: what the writer's composite methods
/// return. The writes layer owns it; the reconcilers' error converts from it, so this layer does
/// not depend on the layers above.
#[derive(Debug, thiserror::Error)]
pub enum WriteFailed {
    /// The leadership term ended: the request was not sent.
    #[error("the leadership term ended; not {action}")]
    TermEnded {
        /// What would have been written.
        action: String,
    },
    /// The apiserver refused or failed the request.
    #[error("{action}: {source}")]
    Api {
        /// What was being written, naming the object.
        action: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// The body could not be serialised.
    #[error("{action}: {source}")]
    Json {
        /// What was being written.
        action: String,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
    /// A node write failed.
    #[error(transparent)]
    Node(#[from] NodeWriteError),
}

/// Names `action` in a [`WriteError`] (for `map_err`).
pub fn failed(action: impl Into<String>) -> impl FnOnce(WriteError) -> WriteFailed {
    let action = action.into();
    move |e| e.context(action)
}

/// The one writer of a leadership term.
#[derive(Clone)]
pub struct Writer {
    client: kube::Client,
    /// The operator's namespace: Jobs, their pods, package ConfigMaps, the webhook's Secrets.
    namespace: String,
    term: CancellationToken,
    /// What this term wrote already (shared by the writer's clones).
    memo: std::sync::Arc<memo::WriteMemo>,
    /// Per NodeWright, the resourceVersion its last status write replaced and the object it
    /// returned ([`Writer::fresher`]).
    written: std::sync::Arc<std::sync::Mutex<NodeWrights>>,
}

/// NodeWright name → (the resourceVersion replaced, the object written).
type NodeWrights =
    std::collections::HashMap<String, (String, std::sync::Arc<nodewright_shared::api::NodeWright>)>;

impl Writer {
    /// A writer for the term `term` (cancelled when leadership is lost).
    pub fn new(client: kube::Client, namespace: &str, term: CancellationToken) -> Self {
        Writer {
            client,
            namespace: namespace.to_owned(),
            term,
            memo: std::sync::Arc::default(),
            written: std::sync::Arc::default(),
        }
    }

    /// What this term wrote already ([`memo`]).
    pub fn memo(&self) -> &memo::WriteMemo {
        &self.memo
    }

    /// Whether the term still leads (a write would be sent).
    pub fn leading(&self) -> bool {
        !self.term.is_cancelled()
    }

    /// The operator's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Checked immediately before every request.
    fn gate(&self) -> Result<&kube::Client, WriteError> {
        if self.leading() {
            Ok(&self.client)
        } else {
            Err(WriteError::TermEnded)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn nothing_is_sent_once_the_term_ended() {
        // A client whose every request would fail loudly: the gate must answer before it is used.
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        let term = CancellationToken::new();
        let writer = Writer::new(client, "ns", term.clone());
        assert!(writer.leading());
        term.cancel();
        assert!(!writer.leading());
        let results = [
            writer.delete_job("j").await.err(),
            writer.delete_pod("p").await.err(),
            writer.evict("ns", "p", None).await.err(),
            writer.delete_configmap("c").await.err(),
            writer
                .patch_job("j", serde_json::json!({"spec": {"suspend": true}}))
                .await
                .err(),
        ];
        for result in results {
            assert!(matches!(result, Some(WriteError::TermEnded)), "{result:?}");
        }
        assert!(matches!(
            writer.patch_node("n", json_patch::Patch(vec![])).await,
            Err(WriteError::TermEnded)
        ));
        assert!(matches!(
            WriteError::TermEnded.context("x"),
            WriteFailed::TermEnded { .. }
        ));
    }
}
