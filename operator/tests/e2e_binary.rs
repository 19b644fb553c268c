//! The operator binary, as deployed, against the local control plane: configured only through the
//! environment, it elects itself leader, serves `/readyz` and `/metrics`, rolls a NodeWright out to
//! every node, and on SIGTERM stops gracefully (exit 0). Waits are bounded only so a broken build
//! fails instead of hanging; nothing asserts on speed.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use kube::api::{Api, PostParams};
use nodewright_operator::metrics::Metrics;
use nodewright_operator::runtime::admin::{Readiness, bind, router_with_auth, serve};
use nodewright_shared::api::{NodeWright, NodeWrightSpec, Package, Status};
use tokio::process::Command;

mod support;

use nodewright_e2e::process::free_port;
use support::admin_http::{get, get_with_token, wait_leading};

const BOUND: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_leads_rolls_out_and_stops_on_sigterm() {
    let cluster = support::cluster().await;
    let client = cluster.client().await.expect("client");
    let ns = cluster.create_namespace("binary").await.expect("namespace");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodewright-operator"))
        .env("KUBECONFIG", cluster.kubeconfig_path())
        .env("NAMESPACE", &ns)
        .env("LEADER_ELECTION", "true")
        .env("POD_NAME", "operator-binary-test")
        .env("METRICS_LISTEN", format!("127.0.0.1:{port}"))
        .env("PROBE_LISTEN", format!("127.0.0.1:{port}"))
        .env("LOG_FORMAT", "text")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("operator binary starts");

    cluster
        .wait_for("/readyz", BOUND, || async {
            Ok(get(port, "/readyz").await.filter(|(c, _)| *c == 200))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_leading(cluster, port, BOUND).await;

    let nw = NodeWright::new(
        &ns,
        NodeWrightSpec {
            packages: BTreeMap::from([(
                "hello".to_owned(),
                Package {
                    version: "1.0.0".into(),
                    image: "ghcr.io/nvidia/skyhook/agentless".into(),
                    ..Package::default()
                },
            )]),
            // NodeWrightSpec::default() has priority 0, which the CRD rejects.
            priority: nodewright_shared::api::DEFAULT_PRIORITY,
            ..NodeWrightSpec::default()
        },
    );
    let api: Api<NodeWright> = Api::all(client.clone());
    api.create(&PostParams::default(), &nw)
        .await
        .expect("NodeWright created");
    let done = support::wait_pick(
        cluster,
        api,
        &ns,
        "NodeWright complete",
        |nw: &NodeWright| {
            nw.status
                .as_ref()
                .filter(|s| s.status == Some(Status::Complete))
                .map(|s| s.complete_nodes.clone())
        },
    )
    .await;
    assert_eq!(done, format!("{n}/{n}", n = cluster.node_names().len()));

    let pid = child.id().expect("pid");
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await
        .expect("kill runs");
    assert!(killed.success());
    let status = tokio::time::timeout(BOUND, child.wait())
        .await
        .expect("the operator stops after SIGTERM")
        .expect("exit status");
    assert_eq!(status.code(), Some(0), "graceful stop");
}

/// `/metrics` behind the authentication of `METRICS_AUTH=true`, against the real apiserver: a ServiceAccount bound to a ClusterRole with
/// `get` on the non-resource URL `/metrics` scrapes; another ServiceAccount's valid token is
/// refused (403), a forged token and no token are unauthenticated (401); the probes stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_authentication_admits_the_bound_token_only() {
    let cluster = support::cluster().await;
    let ns = cluster
        .create_namespace("metrics-auth")
        .await
        .expect("namespace");
    let reader = format!("{ns}-metrics-reader");
    let rbac = format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: scraper, namespace: {ns}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: stranger, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {reader}}}
rules: [{{nonResourceURLs: ["/metrics"], verbs: ["get"]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {reader}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {reader}}}
subjects: [{{kind: ServiceAccount, name: scraper, namespace: {ns}}}]
"#
    );
    let manifest = std::env::temp_dir().join(format!("{ns}-rbac.yaml"));
    std::fs::write(&manifest, rbac).expect("write");
    cluster
        .kubectl(&["apply", "-f", &manifest.to_string_lossy()])
        .await
        .expect("RBAC applied");
    std::fs::remove_file(&manifest).ok();
    let token = |sa: &'static str| {
        let cluster = &cluster;
        let ns = ns.clone();
        async move {
            cluster
                .kubectl(&["create", "token", sa, "-n", &ns, "--duration", "10m"])
                .await
                .expect("token")
                .trim()
                .to_owned()
        }
    };
    let (allowed, denied) = (token("scraper").await, token("stranger").await);

    // The admin server the binary serves with METRICS_AUTH=true (main.rs), in-process: an operator
    // binary here would also reconcile the other tests' NodeWrights. The chart install suite runs
    // both binaries with the option from the chart's env.
    let client = cluster.client().await.expect("client");
    let auth = nodewright_telemetry::MetricsAuth::new(client, "/metrics");
    let port = free_port();
    let listeners = bind(&[std::net::SocketAddr::from(([127, 0, 0, 1], port))])
        .await
        .expect("bind");
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(serve(
        listeners,
        router_with_auth(
            std::sync::Arc::new(Metrics::new()),
            Readiness::default(),
            Some(auth),
        ),
        stop.clone(),
    ));
    let (code, _) = get(port, "/readyz").await.expect("answer");
    assert_eq!(code, 200, "the probes need no token");

    let (code, body) = get_with_token(port, "/metrics", Some(&allowed))
        .await
        .expect("answer");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("nodewright_operator_is_leader"), "{body}");
    assert!(body.contains("\nprocess_resident_memory_bytes "), "{body}");
    let (code, body) = get_with_token(port, "/metrics", Some(&denied))
        .await
        .expect("answer");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:stranger")),
        "the refusal names who was refused: {body}"
    );
    let (code, body) = get_with_token(port, "/metrics", Some("forged.token.value"))
        .await
        .expect("answer");
    assert_eq!(code, 401, "{body}");
    let (code, _) = get_with_token(port, "/metrics", None)
        .await
        .expect("answer");
    assert_eq!(code, 401);
    // Cached or not, the answers stay the same.
    let (code, _) = get_with_token(port, "/metrics", Some(&allowed))
        .await
        .expect("answer");
    assert_eq!(code, 200);
    let (code, _) = get_with_token(port, "/metrics", Some(&denied))
        .await
        .expect("answer");
    assert_eq!(code, 403);
    stop.cancel();
    server.await.expect("server task").expect("server stops");
    cluster
        .kubectl(&["delete", "clusterrolebinding,clusterrole", &reader])
        .await
        .expect("cleanup");
}
