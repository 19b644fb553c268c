//! Records the AdmissionReview requests a real kube-apiserver sends, into
//! `tests/fixtures/recorded/`, for the router tests to replay (`router.rs`,
//! `recorded_reviews_from_a_real_apiserver`). Not part of the suite (ignored): run it again when the
//! apiserver version or the webhook configurations change:
//!
//! ```sh
//! cargo test -p nodewright-webhook --test record_reviews -- --ignored
//! ```
//!
//! A TLS server on 127.0.0.1 is registered with the local control plane for all four endpoints (as in
//! `e2e_admission.rs`); it stores every request body and answers it with the real admission code,
//! so the apiserver's flow (mutation, then validation, then storage) proceeds as in production.
//! `kubectl` then creates, updates and deletes the examples. Each file is named
//! `<seq>-<endpoint>-<operation>-<expected>.json`, where `expected` (`allowed` or `denied`) comes
//! from what the recorder applied (a valid or an invalid example), never from the webhook's answer.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::routing::post;
use nodewright_e2e::{Cluster, ClusterOptions};
use nodewright_shared::defaults::OperatorDefaults;
use nodewright_webhook::admission::{Webhook, review};
use nodewright_webhook::cache::StaticView;
use nodewright_webhook::server::{Limits, serve_tls};
use nodewright_webhook::tls::{CertStore, load_pem, server_config};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use serde_json::Value;

type Recorded = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

async fn endpoint(
    State(recorded): State<Recorded>,
    UrlPath(path): UrlPath<String>,
    body: Bytes,
) -> Vec<u8> {
    let Some(webhook) = Webhook::ALL.into_iter().find(|w| w.name() == path) else {
        return Vec::new();
    };
    if let Ok(mut r) = recorded.lock() {
        r.push((path, body.to_vec()));
    }
    let view = StaticView {
        policies: vec!["gpu-rollout".into()],
        users: vec![("gpu-host-setup".into(), "gpu-rollout".into())],
        ..StaticView::default()
    };
    review(webhook, &body, &OperatorDefaults::default(), &view)
        .to_json()
        .unwrap_or_default()
}

fn certificates() -> (String, String, String) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("key");
    let ca = ca_params.self_signed(&ca_key).expect("CA");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("leaf");
    (ca.pem(), leaf.pem(), key.serialize_pem())
}

fn configurations(port: u16, ca_pem: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let hook = |path: &str, resource: &str, ops: &str| {
        format!(
            "  - name: {path}.nodewright.nvidia.com\n    admissionReviewVersions: [\"v1\"]\n    sideEffects: None\n    failurePolicy: Fail\n    timeoutSeconds: 10\n    clientConfig:\n      url: https://127.0.0.1:{port}/{path}\n      caBundle: {ca}\n    rules:\n      - apiGroups: [\"nodewright.nvidia.com\"]\n        apiVersions: [\"v1alpha1\"]\n        resources: [\"{resource}\"]\n        operations: [{ops}]\n        scope: Cluster\n"
        )
    };
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: nodewright-record\nwebhooks:\n{}{}---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: nodewright-record\nwebhooks:\n{}{}",
        hook("mutate-nodewright", "nodewrights", "CREATE, UPDATE"),
        hook(
            "mutate-deploymentpolicy",
            "deploymentpolicies",
            "CREATE, UPDATE"
        ),
        hook("validate-nodewright", "nodewrights", "CREATE, UPDATE"),
        hook(
            "validate-deploymentpolicy",
            "deploymentpolicies",
            "CREATE, UPDATE, DELETE"
        ),
    )
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `kubectl args`, checks that it succeeded (`true`) or was refused (`false`), and moves the
/// requests recorded meanwhile into `out` under that expectation.
async fn step(
    cluster: &Cluster,
    recorded: &Recorded,
    out: &mut Vec<(String, Vec<u8>, &'static str)>,
    args: &[&str],
    admitted: bool,
) {
    let result = cluster.kubectl(args).await;
    assert_eq!(
        result.is_ok(),
        admitted,
        "kubectl {args:?}: expected admitted={admitted}, got {result:?}"
    );
    let taken = std::mem::take(&mut *recorded.lock().expect("lock"));
    assert!(!taken.is_empty(), "kubectl {args:?} reached no webhook");
    // Every request of a step was allowed but, in a refused step, the last: the one that refused
    // (the mutating endpoint refuses what the validating one would, so the validating one is then
    // never called).
    let last = taken.len() - 1;
    out.extend(taken.into_iter().enumerate().map(|(i, (p, b))| {
        let expected = if !admitted && i == last {
            "denied"
        } else {
            "allowed"
        };
        (p, b, expected)
    }));
}

#[tokio::test]
#[ignore = "writes tests/fixtures/recorded; run by hand"]
async fn record_reviews_from_a_real_apiserver() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = Cluster::start(ClusterOptions::default())
        .await
        .expect("cluster");
    let (ca, cert, key) = certificates();
    let store = CertStore::new();
    store.set(load_pem(cert.as_bytes(), key.as_bytes()).expect("certificate"));
    let tls = Arc::new(server_config(store).expect("tls config"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let recorded: Recorded = Arc::default();
    let app = Router::new()
        .route("/{path}", post(endpoint))
        .with_state(recorded.clone());
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let limits = Limits {
        read_timeout: Duration::from_secs(10),
        shutdown_grace: Duration::from_secs(1),
        max_connections: nodewright_webhook::server::DEFAULT_MAX_CONNECTIONS,
    };
    tokio::spawn(serve_tls(listener, tls, app, limits, stop));

    let dir = tempfile::tempdir().expect("tempdir");
    let configs = dir.path().join("webhooks.yaml");
    std::fs::write(&configs, configurations(port, &ca)).expect("write");
    cluster
        .kubectl(&["apply", "-f", &configs.to_string_lossy()])
        .await
        .expect("register");
    // The apiserver picks new webhook configurations up asynchronously.
    let policy = repo().join("examples/deploymentpolicy.yaml");
    let policy = policy.to_string_lossy();
    let mut registered = false;
    for _ in 0..150 {
        let _ = cluster
            .kubectl(&["apply", "--dry-run=server", "-f", &policy])
            .await;
        if !recorded.lock().expect("lock").is_empty() {
            registered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(registered, "the apiserver never called the recorder");
    recorded.lock().expect("lock").clear();

    let nodewright = repo().join("examples/nodewright.yaml");
    let nodewright = nodewright.to_string_lossy();
    let cycle = repo().join("examples/invalid/depends-on-cycle.yaml");
    let bad_policy = repo().join("examples/invalid/compartment-identical-selector.yaml");
    let (cycle, bad_policy) = (cycle.to_string_lossy(), bad_policy.to_string_lossy());
    // Each kubectl command, and whether the apiserver admits it.
    let steps: [(&[&str], bool); 6] = [
        (&["apply", "-f", &policy], true),
        (&["apply", "-f", &nodewright], true),
        (&["apply", "-f", &cycle], false),
        (&["apply", "-f", &bad_policy], false),
        (
            &[
                "annotate",
                "nw",
                "gpu-host-setup",
                "example.com/touched=yes",
            ],
            true,
        ),
        (&["delete", "nwdp", "gpu-rollout"], false),
    ];
    let mut out = Vec::new();
    for (args, admitted) in steps {
        step(&cluster, &recorded, &mut out, args, admitted).await;
    }

    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recorded");
    let _ = std::fs::remove_dir_all(&target);
    std::fs::create_dir_all(&target).expect("mkdir");
    for (i, (path, body, expected)) in out.iter().enumerate() {
        let value: Value = serde_json::from_slice(body).expect("the apiserver sent JSON");
        let op = value["request"]["operation"]
            .as_str()
            .unwrap_or("unknown")
            .to_lowercase();
        let name = format!("{i:02}-{path}-{op}-{expected}.json");
        let pretty = serde_json::to_vec_pretty(&value).expect("encode");
        std::fs::write(target.join(name), pretty).expect("write fixture");
    }
    let _ = cluster.stop();
}
