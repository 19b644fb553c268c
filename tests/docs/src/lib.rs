//! The administrator documentation (`docs/`) kept honest by tests:
//!
//! - [`catalogue`]: every metric family the operator and the webhook export, from their registries;
//! - [`metrics_doc`]: docs/reference/metrics.md, generated from it (stale: a test fails);
//! - [`dashboard`]: the Grafana dashboard, generated, and its queries;
//! - [`promql`]: the metric names a query selects (the dashboard and alert lints);
//! - [`tools`]: helm and promtool as the repository builds them;
//! - [`pages`]: the tested blocks of a page, which `tests/doc_examples.rs` runs on the local
//!   control plane with an operator and a webhook ([`harness`]).

pub mod catalogue;
pub mod dashboard;
pub mod harness;
pub mod metrics_doc;
pub mod pages;
pub mod promql;
pub mod tools;

use std::path::{Path, PathBuf};

/// The repository root.
pub fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every generated file: (path from the repository root, its current text).
pub fn generated() -> Result<Vec<(&'static str, String)>, catalogue::CatalogueError> {
    let families = catalogue::families()?;
    Ok(vec![
        (metrics_doc::PATH, metrics_doc::render(&families)),
        (dashboard::PATH, dashboard::render()),
    ])
}
