//! The process around the reconcilers: its configuration, leader election, the admin server
//! (health, readiness, metrics), telemetry, and the caches every replica keeps warm.

pub mod admin;
pub mod client;
pub mod config;
pub(crate) mod failed_create_feed;
pub(crate) mod job_feed;
pub mod leader;
pub(crate) mod leftover_cordons;
pub(crate) mod legacy_jobs;
pub(crate) mod nodes;
pub(crate) mod nodewrights;
pub(crate) mod pod_feed;
pub(crate) mod policies;
pub mod telemetry;
