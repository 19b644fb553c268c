//! The NodeWright admission webhook (DESIGN §3): defaults and validates NodeWright and
//! DeploymentPolicy objects for the kube-apiserver, over TLS with hot-reloaded certificates.
//!
//! Layout: [`config`] (flags), [`tls`] (certificate store and reload), [`server`] (HTTPS serving and
//! drain), [`routes`] (endpoints and probes), [`admission`] (AdmissionReview handling), [`rules`]
//! (the validation rules, pure), [`cache`] (watch-backed cluster view), [`metrics`].

pub mod admission;
pub mod cache;
pub mod config;
pub mod metrics;
pub mod routes;
pub mod rules;
pub mod server;
pub mod tls;
