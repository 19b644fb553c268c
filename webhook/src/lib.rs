//! The NodeWright admission webhook (DESIGN §3): defaults and validates NodeWright and
//! DeploymentPolicy objects for the kube-apiserver, over TLS with hot-reloaded certificates.
//!
//! Layout: [`config`] (flags), [`tls`] (certificate store and reload), [`server`] (HTTPS serving and
//! drain), [`connections`] (connection cap and read deadlines), [`routes`] (endpoints and probes),
//! [`shed`] (in-flight limits), [`admission`] (AdmissionReview handling), [`rules`]
//! (the validation rules, pure), [`cache`] (watch-backed cluster view), [`second_look`] (a policy the cache
//! has not seen yet, read at the source before a denial), [`metrics`].

pub mod admission;
pub mod cache;
pub mod config;
pub mod connections;
mod listed;
pub mod metrics;
pub mod process;
pub mod routes;
pub mod rules;
pub mod second_look;
pub mod server;
pub mod shed;
pub mod tls;
