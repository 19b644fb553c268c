//! Test helpers: an in-memory [`ClusterView`] and small object builders.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use nodewright_core::rollout::selection::NodeSelection;
use nodewright_shared::api::{DeploymentPolicy, NodeWright, NodeWrightSpec, Package};

use super::cluster::ClusterView;

/// Policies by name, and which NodeWrights use each.
#[derive(Debug, Default)]
pub struct Cluster {
    /// policy name → NodeWrights referencing it.
    pub policies: BTreeMap<String, Vec<String>>,
    /// Policies with their specs.
    pub policy_specs: Vec<DeploymentPolicy>,
    /// Nodes (`None`: unknown, no blast-radius warnings).
    pub nodes: Option<Vec<Node>>,
}

impl Cluster {
    /// A cluster with these policies, unused.
    pub fn with_policies(names: &[&str]) -> Self {
        Cluster {
            policies: names
                .iter()
                .map(|n| ((*n).to_owned(), Vec::new()))
                .collect(),
            ..Cluster::default()
        }
    }
}

impl ClusterView for Cluster {
    fn policy_exists(&self, name: &str) -> bool {
        self.policies.contains_key(name)
    }

    fn nodewrights_using_policy(&self, policy: &str) -> Vec<String> {
        let mut users = self.policies.get(policy).cloned().unwrap_or_default();
        users.sort();
        users
    }

    fn policy(&self, name: &str) -> Option<DeploymentPolicy> {
        super::cluster::find_policy(&self.policy_specs, name)
    }

    fn selected_nodes(&self, selection: &NodeSelection) -> Option<Vec<Node>> {
        self.nodes
            .as_ref()
            .map(|nodes| super::cluster::select(nodes, selection))
    }
}

/// A valid package at `version`, pinned by digest (so it draws no mutable-tag warning).
pub fn package(version: &str) -> Package {
    Package {
        version: version.to_owned(),
        image: "ghcr.io/example/pkg".to_owned(),
        container_sha: Some(DIGEST.to_owned()),
        ..Package::default()
    }
}

/// A well-formed image digest.
pub const DIGEST: &str = "sha256:dedf73c19455444e2663671368eaf3fcd657ea1417f0d8738c6133ed738b9c52";

/// A NodeWright named `name` with these packages and defaults otherwise.
pub fn nodewright<const N: usize>(name: &str, packages: [(&str, Package); N]) -> NodeWright {
    let spec = NodeWrightSpec {
        priority: nodewright_shared::api::DEFAULT_PRIORITY,
        packages: packages
            .into_iter()
            .map(|(k, p)| (k.to_owned(), p))
            .collect(),
        ..NodeWrightSpec::default()
    };
    NodeWright::new(name, spec)
}
