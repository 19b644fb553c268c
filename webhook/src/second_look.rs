//! Answers an admission request from the cache, and looks again at the source before refusing a
//! NodeWright for a DeploymentPolicy the cache has not seen.
//!
//! The cache follows its writes a little behind: `kubectl apply -f` of one file holding a policy and
//! a NodeWright that names it sends the NodeWright before the watch delivers the policy, and a
//! denial then would be wrong (a CI run of the docs' examples once hit exactly that). Only that
//! miss costs a read of the API (one GET of one policy, bounded by a timeout); every other request,
//! the emergency pause among them, is answered from memory as before.

use std::sync::Mutex;

use k8s_openapi::api::core::v1::Node;
use nodewright_core::rollout::selection::NodeSelection;
use nodewright_shared::api::DeploymentPolicy;
use nodewright_shared::defaults::OperatorDefaults;

use crate::admission::{self, Answer, Webhook};
use crate::rules::Restrictions;
use crate::rules::cluster::{ClusterView, PolicyAtSource, PolicyLookup};
use crate::rules::env::EnvNames;

/// Reviews `body` against `cluster`; when the answer rests on a DeploymentPolicy `cluster` has not
/// seen and the source has it, reviews again with that policy known.
pub async fn review(
    webhook: Webhook,
    body: &[u8],
    defaults: &OperatorDefaults,
    restrictions: &Restrictions,
    cluster: &dyn ClusterView,
) -> Answer {
    let recording = Recording {
        inner: cluster,
        missed: Mutex::new(Vec::new()),
    };
    let answer = admission::review_restricted(webhook, body, defaults, restrictions, &recording);
    let missed = recording.into_missed();
    if missed.is_empty() {
        return answer;
    }
    let mut found = Vec::new();
    for name in missed {
        let Some(lookup) = cluster.look_up_policy(&name) else {
            continue;
        };
        if let PolicyAtSource::Exists(policy) = lookup.await {
            tracing::info!(policy = %name, "a DeploymentPolicy the cache had not seen yet exists; admission counts it");
            found.push((name, policy.map(|p| *p)));
        }
    }
    if found.is_empty() {
        return answer;
    }
    let known = Known {
        inner: cluster,
        found,
    };
    admission::review_restricted(webhook, body, defaults, restrictions, &known)
}

/// `inner`, noting every policy name it answered "does not exist" for.
struct Recording<'a> {
    inner: &'a dyn ClusterView,
    missed: Mutex<Vec<String>>,
}

impl Recording<'_> {
    fn into_missed(self) -> Vec<String> {
        let mut missed = self.missed.into_inner().unwrap_or_else(|e| e.into_inner());
        missed.sort();
        missed.dedup();
        missed
    }
}

impl ClusterView for Recording<'_> {
    fn policy_exists(&self, name: &str) -> bool {
        let exists = self.inner.policy_exists(name);
        if !exists {
            self.missed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(name.to_owned());
        }
        exists
    }
    fn nodewrights_using_policy(&self, policy: &str) -> Vec<String> {
        self.inner.nodewrights_using_policy(policy)
    }
    fn policy(&self, name: &str) -> Option<DeploymentPolicy> {
        self.inner.policy(name)
    }
    fn selected_nodes(&self, selection: &NodeSelection) -> Option<Vec<Node>> {
        self.inner.selected_nodes(selection)
    }
    fn env_names(&self) -> EnvNames {
        self.inner.env_names()
    }
}

/// `inner` plus the policies read at the source (with their specs when they decode).
struct Known<'a> {
    inner: &'a dyn ClusterView,
    found: Vec<(String, Option<DeploymentPolicy>)>,
}

impl ClusterView for Known<'_> {
    fn policy_exists(&self, name: &str) -> bool {
        self.found.iter().any(|(n, _)| n == name) || self.inner.policy_exists(name)
    }
    fn nodewrights_using_policy(&self, policy: &str) -> Vec<String> {
        self.inner.nodewrights_using_policy(policy)
    }
    fn policy(&self, name: &str) -> Option<DeploymentPolicy> {
        match self.found.iter().find(|(n, _)| n == name) {
            Some((_, policy)) => policy.clone(),
            None => self.inner.policy(name),
        }
    }
    fn selected_nodes(&self, selection: &NodeSelection) -> Option<Vec<Node>> {
        self.inner.selected_nodes(selection)
    }
    fn env_names(&self) -> EnvNames {
        self.inner.env_names()
    }
    fn look_up_policy(&self, name: &str) -> Option<PolicyLookup<'_>> {
        self.inner.look_up_policy(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::StaticView;
    use crate::rules::cluster::find_policy;

    /// An in-memory cache that lags its source: `source` holds policies the cache has not seen.
    struct Lagging {
        cache: StaticView,
        source: Vec<DeploymentPolicy>,
        looked_up: Mutex<Vec<String>>,
    }

    impl ClusterView for Lagging {
        fn policy_exists(&self, name: &str) -> bool {
            self.cache.policy_exists(name)
        }
        fn nodewrights_using_policy(&self, policy: &str) -> Vec<String> {
            self.cache.nodewrights_using_policy(policy)
        }
        fn policy(&self, name: &str) -> Option<DeploymentPolicy> {
            self.cache.policy(name)
        }
        fn selected_nodes(&self, selection: &NodeSelection) -> Option<Vec<Node>> {
            self.cache.selected_nodes(selection)
        }
        fn look_up_policy(&self, name: &str) -> Option<PolicyLookup<'_>> {
            self.looked_up
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(name.to_owned());
            let at_source = match find_policy(&self.source, name) {
                Some(p) => PolicyAtSource::Exists(Some(Box::new(p))),
                None => PolicyAtSource::Missing,
            };
            Some(Box::pin(async move { at_source }))
        }
    }

    fn create_naming(policy: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "kind": "NodeWright"},
                "resource": {"group": "nodewright.nvidia.com", "version": "v1alpha1", "resource": "nodewrights"},
                "operation": "CREATE",
                "name": "nw",
                "userInfo": {"username": "test"},
                "object": {
                    "apiVersion": "nodewright.nvidia.com/v1alpha1",
                    "kind": "NodeWright",
                    "metadata": {"name": "nw"},
                    "spec": {
                        "deploymentPolicy": policy,
                        "packages": {"tool": {"version": "1.0.0", "image": "registry.example/tool"}}
                    }
                }
            }
        }))
        .expect("a literal encodes")
    }

    async fn answer(view: &Lagging, policy: &str) -> (bool, String) {
        let answer = review(
            Webhook::ValidateNodeWright,
            &create_naming(policy),
            &OperatorDefaults::default(),
            &Restrictions::default(),
            view,
        )
        .await;
        let response = answer.review.response.expect("a response");
        (response.allowed, response.result.message)
    }

    fn lagging(source: &[&str]) -> Lagging {
        Lagging {
            cache: StaticView::default(),
            source: source
                .iter()
                .map(|n| DeploymentPolicy::new(n, Default::default()))
                .collect(),
            looked_up: Mutex::new(Vec::new()),
        }
    }

    #[tokio::test]
    async fn a_policy_the_cache_has_not_seen_but_the_source_has_is_admitted() {
        let view = lagging(&["fresh"]);
        let (allowed, message) = answer(&view, "fresh").await;
        assert!(allowed, "{message}");
        assert_eq!(*view.looked_up.lock().expect("lookup log"), ["fresh"]);
    }

    #[tokio::test]
    async fn a_policy_missing_at_the_source_too_is_refused_naming_the_field() {
        let view = lagging(&["other"]);
        let (allowed, message) = answer(&view, "absent").await;
        assert!(!allowed);
        assert!(
            message.contains("spec.deploymentPolicy") && message.contains("\"absent\" not found"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_policy_in_the_cache_costs_no_lookup() {
        let mut view = lagging(&[]);
        view.cache.policies = vec!["cached".into()];
        let (allowed, message) = answer(&view, "cached").await;
        assert!(allowed, "{message}");
        assert!(view.looked_up.lock().expect("lookup log").is_empty());
    }
}
