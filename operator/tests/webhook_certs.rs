//! The operator's webhook certificate controller (operator/src/webhook_certs) against a real
//! kube-apiserver: it creates and fills the Secrets, injects caBundle into every entry of both
//! webhook configurations, writes nothing when everything is current, repairs a wiped caBundle and
//! a deleted Secret at once, and rotates an expiring CA with an overlap.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nodewright_certs::material::{self, Material};
use nodewright_certs::rotation::Policy;
use nodewright_certs::{CertificateAuthority, PemPair, Validity};
use nodewright_e2e::{Cluster, ClusterOptions};
use nodewright_operator::webhook_certs::{self, Settings};
use tokio_util::sync::CancellationToken;

fn configurations(name: &str) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) {
    let hook = |hname: &str, path: &str, resource: &str, ops: &[&str]| {
        serde_json::json!({
            "name": hname,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            // Nothing in this test binary creates NodeWrights; Ignore keeps it that way if one did.
            "failurePolicy": "Ignore",
            "timeoutSeconds": 5,
            "clientConfig": {"url": format!("https://127.0.0.1:1/{path}")},
            "rules": [{"apiGroups": ["nodewright.nvidia.com"], "apiVersions": ["v1alpha1"],
                       "resources": [resource], "operations": ops, "scope": "Cluster"}],
        })
    };
    let mutating = serde_json::from_value(serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            hook("mutate-nodewright.nodewright.nvidia.com", "mutate-nodewright", "nodewrights", &["CREATE", "UPDATE"]),
            hook("mutate-deploymentpolicy.nodewright.nvidia.com", "mutate-deploymentpolicy", "deploymentpolicies", &["CREATE", "UPDATE"]),
        ]
    }))
    .expect("mutating configuration");
    let validating = serde_json::from_value(serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            hook("validate-nodewright.nodewright.nvidia.com", "validate-nodewright", "nodewrights", &["CREATE", "UPDATE"]),
            hook("validate-deploymentpolicy.nodewright.nvidia.com", "validate-deploymentpolicy", "deploymentpolicies", &["CREATE", "UPDATE", "DELETE"]),
        ]
    }))
    .expect("validating configuration");
    (mutating, validating)
}

fn settings(namespace: &str, config: &str, policy: Policy) -> Settings {
    Settings {
        namespace: namespace.to_owned(),
        ca_secret: "nw-webhook-ca".into(),
        tls_secret: "nw-webhook-tls".into(),
        service: "nw-webhook".into(),
        cluster_domain: "cluster.local".into(),
        extra_names: vec!["127.0.0.1".into()],
        mutating_configuration: config.to_owned(),
        validating_configuration: config.to_owned(),
        policy,
    }
}

struct Fixture {
    cluster: &'static Cluster,
    client: kube::Client,
    secrets: Api<Secret>,
    mutating: Api<MutatingWebhookConfiguration>,
    validating: Api<ValidatingWebhookConfiguration>,
    settings: Settings,
}

impl Fixture {
    async fn new(prefix: &str, policy: Policy) -> Fixture {
        let cluster = Cluster::shared(ClusterOptions::default())
            .await
            .expect("cluster");
        let client = cluster.client().await.expect("client");
        let ns = cluster.create_namespace(prefix).await.expect("namespace");
        let config = format!("{ns}.webhook");
        let (m, v) = configurations(&config);
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        mutating
            .create(&PostParams::default(), &m)
            .await
            .expect("create mutating");
        validating
            .create(&PostParams::default(), &v)
            .await
            .expect("create validating");
        Fixture {
            cluster,
            secrets: Api::namespaced(client.clone(), &ns),
            mutating,
            validating,
            settings: settings(&ns, &config, policy),
            client,
        }
    }

    async fn material(&self) -> Material {
        webhook_certs::store::read(
            &self.secrets,
            &self.settings.ca_secret,
            &self.settings.tls_secret,
        )
        .await
        .expect("read secrets")
        .material
    }

    /// Every caBundle of both configurations, as PEM text.
    async fn published(&self) -> Vec<String> {
        let name = &self.settings.mutating_configuration;
        let m = webhook_certs::publish::read_mutating(&self.mutating, name)
            .await
            .expect("read mutating");
        let v = webhook_certs::publish::read_validating(&self.validating, name)
            .await
            .expect("read validating");
        assert!(m.exists && v.exists);
        m.bundles().chain(v.bundles()).collect()
    }

    /// Waits until the whole material is stored (CA, bundle and serving certificate: the CA
    /// Secret is written before the serving Secret, so a bundle alone is not yet the material a
    /// later step may compare against) and every published caBundle holds exactly the stored
    /// bundle.
    async fn wait_published(&self, what: &str) -> Material {
        self.cluster
            .wait_for(what, Duration::from_secs(30), || async {
                let m = self.material().await;
                let published = self.published().await;
                let current = !m.bundle.is_empty()
                    && m.serving.is_some()
                    && published.len() == 4
                    && published
                        .iter()
                        .all(|p| !material::needs_publish(&m.bundle, p));
                Ok(current.then_some(m))
            })
            .await
            .expect(what)
    }

    async fn resource_versions(&self) -> Vec<Option<String>> {
        let mut out = Vec::new();
        for name in [&self.settings.ca_secret, &self.settings.tls_secret] {
            out.push(
                self.secrets
                    .get(name)
                    .await
                    .expect("secret")
                    .metadata
                    .resource_version,
            );
        }
        let name = &self.settings.mutating_configuration;
        out.push(
            self.mutating
                .get(name)
                .await
                .expect("m")
                .metadata
                .resource_version,
        );
        out.push(
            self.validating
                .get(name)
                .await
                .expect("v")
                .metadata
                .resource_version,
        );
        out
    }
}

/// The serving certificate names the Service and 127.0.0.1 and chains to the stored bundle.
fn assert_consistent(m: &Material, settings: &Settings) {
    let (state, problems) =
        material::observe(m, std::slice::from_ref(&m.bundle), &settings.names());
    assert!(problems.is_empty(), "{problems:?}");
    let serving = state.serving.expect("serving certificate");
    assert!(
        serving.issuer.is_some(),
        "serving certificate chains to the bundle"
    );
    assert_eq!(serving.names, state.names);
}

#[tokio::test]
async fn creates_injects_and_then_leaves_everything_alone() {
    let f = Fixture::new("certs-steady", Policy::default()).await;
    let first = webhook_certs::reconcile_once(f.client.clone(), &f.settings)
        .await
        .expect("first pass");
    assert!(first.writes >= 1, "{first:?}");
    let m = f
        .wait_published("caBundle injected into all four entries")
        .await;
    assert_consistent(&m, &f.settings);
    assert_eq!(material::bundle_ders(&m.bundle).len(), 1);

    // A second pass (a restart, a new leader) writes nothing at all.
    let before = f.resource_versions().await;
    let again = webhook_certs::reconcile_once(f.client.clone(), &f.settings)
        .await
        .expect("second pass");
    assert_eq!(again.writes, 0, "{again:?}");
    assert_eq!(f.resource_versions().await, before, "nothing rewritten");
    assert_eq!(f.material().await, m, "nothing rotated");
}

#[tokio::test]
async fn repairs_a_wiped_ca_bundle_and_a_deleted_secret_at_once() {
    let f = Fixture::new("certs-repair", Policy::default()).await;
    let term = CancellationToken::new();
    let controller = tokio::spawn(webhook_certs::run(
        f.client.clone(),
        f.settings.clone(),
        term.clone(),
    ));
    let m = f.wait_published("first injection").await;

    // What `helm upgrade` of an older chart does: the configuration re-applied without caBundle.
    let (fresh_m, fresh_v) = configurations(&f.settings.mutating_configuration);
    let mut wiped_m = f
        .mutating
        .get(&f.settings.mutating_configuration)
        .await
        .expect("get");
    wiped_m.webhooks = fresh_m.webhooks;
    f.mutating
        .replace(
            &f.settings.mutating_configuration,
            &PostParams::default(),
            &wiped_m,
        )
        .await
        .expect("wipe mutating");
    let mut wiped_v = f
        .validating
        .get(&f.settings.validating_configuration)
        .await
        .expect("get");
    wiped_v.webhooks = fresh_v.webhooks;
    f.validating
        .replace(
            &f.settings.validating_configuration,
            &PostParams::default(),
            &wiped_v,
        )
        .await
        .expect("wipe validating");
    // The controller's resync is an hour away: a repair within the wait's bound came through its
    // watch of the configurations, not from a resync (no wall-clock assertion needed).
    assert!(f.settings.policy.resync >= Duration::from_secs(3600));
    let repaired = f.wait_published("caBundle repaired after a wipe").await;
    assert_eq!(repaired, m, "a repair re-publishes, it does not rotate");

    // The serving Secret deleted: recreated from the same CA.
    f.secrets
        .delete(&f.settings.tls_secret, &DeleteParams::default())
        .await
        .expect("delete serving secret");
    let recreated = f
        .cluster
        .wait_for(
            "serving Secret recreated",
            Duration::from_secs(30),
            || async {
                let m = f.material().await;
                Ok(m.serving.is_some().then_some(m))
            },
        )
        .await
        .expect("recreated");
    assert_eq!(recreated.ca, m.ca, "the CA stays");
    assert_eq!(recreated.bundle, m.bundle);
    assert_consistent(&recreated, &f.settings);

    term.cancel();
    tokio::time::timeout(Duration::from_secs(10), controller)
        .await
        .expect("stops when the term ends")
        .expect("task")
        .expect("run returns Ok");
}

#[tokio::test]
async fn rotates_an_expiring_ca_with_an_overlap() {
    let policy = Policy {
        ca_validity: Duration::from_secs(30 * 86_400),
        serving_validity: Duration::from_secs(20 * 86_400),
        propagation: Duration::from_secs(2),
        resync: Duration::from_secs(3600),
    };
    let f = Fixture::new("certs-rotate", policy).await;

    // Stored material made 25 days ago by a CA that lives 30: a sixth of its life remains.
    let past = nodewright_certs::time::OffsetDateTime::now_utc()
        - nodewright_certs::time::Duration::days(25);
    let old_ca = CertificateAuthority::generate_with(
        "old",
        Validity::starting_at(past, policy.ca_validity).expect("validity"),
    )
    .expect("old CA");
    let serving = old_ca
        .issue_serving_with(
            &f.settings.names(),
            Validity::starting_at(
                nodewright_certs::time::OffsetDateTime::now_utc(),
                policy.serving_validity,
            )
            .expect("validity"),
        )
        .expect("serving");
    let put = |name: &str, data: Vec<(&str, String)>| {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name},
            "stringData": data.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        }))
        .expect("secret");
        let secrets = f.secrets.clone();
        let name = name.to_owned();
        async move {
            secrets
                .patch(
                    &name,
                    &PatchParams::apply("test").force(),
                    &Patch::Apply(&secret),
                )
                .await
                .expect("store secret");
        }
    };
    let PemPair { cert_pem, key_pem } = old_ca.pem().clone();
    put(
        &f.settings.ca_secret,
        vec![
            ("ca.crt", cert_pem.clone()),
            ("ca.key", key_pem),
            ("bundle.crt", cert_pem.clone()),
        ],
    )
    .await;
    put(
        &f.settings.tls_secret,
        vec![
            ("tls.crt", serving.cert_pem.clone()),
            ("tls.key", serving.key_pem.clone()),
            ("ca.crt", cert_pem.clone()),
        ],
    )
    .await;
    let old_der = material::bundle_ders(&cert_pem);

    // Watch every published bundle while the controller rotates: each serving certificate ever
    // stored must chain to every bundle published at the time it is stored.
    let term = CancellationToken::new();
    let controller = tokio::spawn(webhook_certs::run(
        f.client.clone(),
        f.settings.clone(),
        term.clone(),
    ));
    let saw_overlap = std::sync::atomic::AtomicBool::new(false);
    let finished = f
        .cluster
        .wait_for(
            "the CA rotation to finish",
            Duration::from_secs(60),
            || async {
                let m = f.material().await;
                let published = f.published().await;
                // Invariant: the stored serving certificate chains to every published bundle.
                if let Some(srv) = &m.serving {
                    for bundle in &published {
                        let (state, _) = material::observe(
                            &Material {
                                ca: None,
                                bundle: bundle.clone(),
                                serving: Some(srv.clone()),
                            },
                            &[],
                            &f.settings.names(),
                        );
                        assert!(
                            bundle.is_empty()
                                || state.serving.as_ref().is_some_and(|s| s.issuer.is_some()),
                            "a served certificate did not chain to a published bundle"
                        );
                    }
                }
                let ders = material::bundle_ders(&m.bundle);
                if ders.len() == 2 {
                    saw_overlap.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                let done = ders.len() == 1
                    && ders != old_der
                    && published
                        .iter()
                        .all(|p| !material::needs_publish(&m.bundle, p));
                Ok(done.then_some(m))
            },
        )
        .await
        .expect("rotation");
    assert!(
        saw_overlap.load(std::sync::atomic::Ordering::SeqCst),
        "the old and new CA were published together"
    );
    assert_ne!(
        finished.serving.as_ref(),
        Some(&serving),
        "serving certificate moved"
    );
    assert_consistent(&finished, &f.settings);
    term.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), controller).await;
}
