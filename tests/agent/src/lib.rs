//! `nodewright-test-agent`: a small agent honouring the upstream (Skyhook) agent contract, built
//! into the `nodewright.test/agent:dev` image by `tests/images/build.sh` so the operator can be
//! tested on a real node with a real kubelet. See [`agent`] for where it deliberately deviates.

pub mod agent;
pub mod cli;
pub mod clock;
pub mod config;
pub mod env;
pub mod exec;
pub mod interrupt;

pub use agent::main_with;
