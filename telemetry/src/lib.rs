//! Metrics plumbing the operator and the webhook share (one copy, like `shared/` for parsers):
//!
//! - [`process`]: the standard `process_*` metrics (CPU seconds, resident and virtual memory, open
//!   and maximum file descriptors, start time, threads) read from `/proc/self` at every scrape.
//!   prometheus-client has no process collector; Prometheus' own names are kept so existing
//!   dashboards and alerts (`process_resident_memory_bytes`...) work unchanged.
//! - [`auth`]: optional authentication and authorisation of `/metrics` against the apiserver
//!   (TokenReview, then SubjectAccessReview of `get` on the non-resource URL `/metrics`), as
//!   kube-rbac-proxy does in front of a service, but in-process: no sidecar, no second port.

pub mod auth;
pub mod lru;
pub mod process;

pub use auth::{AuthDecision, MetricsAuth};
pub use process::ProcessCollector;
