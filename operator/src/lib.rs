//! The NodeWright operator's pure building blocks (DESIGN §4): everything the reconcilers decide or
//! build that needs no API call, so it can be tested exhaustively without a cluster.
//!
//! - [`naming`]: deterministic, DNS-valid names of Jobs, ConfigMaps and containers, and safe label
//!   values;
//! - [`jobs`]: the package-stage Job (§4.1) and the merged, node-wide interrupt Job (§4.2), built from
//!   a NodeWright, a package and the operator configuration;
//! - [`outcome`]: the one genuine-failure predicate over a Pod and the classification of a finished
//!   Job (§4.4), plus which failed attempts to keep as evidence;
//! - [`drift`]: the hash of what makes an unfinished package Job stale (§4.4, Drift).

pub mod drift;
pub mod jobs;
pub mod naming;
pub mod outcome;
