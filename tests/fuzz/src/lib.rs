//! The fuzz properties of NodeWright as plain functions of the fuzzer's bytes, so the same checks
//! run under libFuzzer (`fuzz/`, nightly, coverage-guided) and over the committed corpus in
//! `cargo test` (stable, `tests/replay.rs`). Each function panics exactly when a property fails.
//!
//! - [`admission`]: the webhook's whole request path (decode, dispatch, defaulting, every rule,
//!   response encoding) never panics, every answer encodes, a mutating answer's patch applies to its
//!   object and the patched object is not patched again (idempotent defaults).
//! - [`node_plan`]: node-state parsing never panics and what parses round-trips; the stage machine
//!   (`plan` for one node) never panics on an arbitrary node state and NodeWright, never creates a Job
//!   for a stage the state records as complete, nor for a package the state says is done, and the
//!   records it would write round-trip through the annotation.

mod admission;
mod node_plan;

pub use admission::admission;
pub use node_plan::node_plan;

/// A property: panics exactly when the input breaks it.
pub type Property = fn(&[u8]);

/// The targets by name (the corpus directories under `fuzz/corpus/`).
pub const TARGETS: [(&str, Property); 2] = [("admission", admission), ("node_plan", node_plan)];
