//! The admin router in process (tower `oneshot`, no socket), and once over a real socket to check
//! binding, serving and graceful shutdown.

use std::sync::Arc;

#[path = "support/admin_http.rs"]
#[allow(dead_code)] // the HTTP helpers of the binary suites; this suite uses one
mod admin_http;

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use nodewright_operator::metrics::Metrics;
use nodewright_operator::runtime::admin::{Readiness, bind, bind_split, router, serve, serve_each};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use admin_http::http11_get;

async fn get(app: &axum::Router, path: &str) -> (StatusCode, Option<String>, String) {
    let response = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).expect("request"))
        .await
        .expect("the router answers");
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = to_bytes(response.into_body(), 1 << 20).await.expect("body");
    (
        status,
        content_type,
        String::from_utf8(body.to_vec()).expect("utf-8"),
    )
}

#[tokio::test]
async fn probes_and_metrics() {
    let mut metrics = Metrics::new();
    let reconciles = prometheus_client::metrics::counter::Counter::<u64>::default();
    metrics
        .registry_mut()
        .register("reconciles", "Reconciles run", reconciles.clone());
    let leader = metrics.leader();
    let readiness = Readiness::waiting_for(["nodes", "jobs"]);
    let app = router(Arc::new(metrics), readiness.clone());

    assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);

    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, "waiting for caches to sync: jobs, nodes");
    readiness.mark_synced("jobs");
    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.ends_with(": nodes"), "{body}");
    readiness.mark_synced("nodes");
    assert_eq!(
        get(&app, "/readyz").await,
        (
            StatusCode::OK,
            Some("text/plain; charset=utf-8".into()),
            "ok".into()
        )
    );
    assert_eq!(get(&app, "/healthz").await.2, "ok");

    leader.is_leader.set(1);
    leader.transitions.inc();
    reconciles.inc_by(3);
    let (status, content_type, body) = get(&app, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        content_type.is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "content type"
    );
    for line in [
        "# TYPE nodewright_operator_is_leader gauge",
        "nodewright_operator_is_leader 1",
        "# TYPE nodewright_operator_leader_transitions counter",
        "nodewright_operator_leader_transitions_total 1",
        "nodewright_reconciles_total 3",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing {line:?} in:\n{body}"
        );
    }

    assert_eq!(get(&app, "/nope").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn no_caches_means_ready() {
    let app = router(Arc::new(Metrics::new()), Readiness::default());
    assert_eq!(get(&app, "/readyz").await.0, StatusCode::OK);
}

#[tokio::test]
async fn serves_on_a_socket_until_shutdown() {
    let addr = "127.0.0.1:0".parse().expect("addr");
    // Equal addresses are bound once (METRICS_LISTEN == PROBE_LISTEN).
    let listeners = bind(&[addr, addr]).await.expect("binds");
    assert_eq!(listeners.len(), 1);
    let local = listeners[0].local_addr().expect("local addr");
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve(
        listeners,
        router(Arc::new(Metrics::new()), Readiness::default()),
        shutdown.clone(),
    ));

    let response = http11_get(local, "/healthz").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.ends_with("ok"), "{response}");

    // A taken port is reported with the address.
    let err = bind(&[local]).await.expect_err("in use");
    assert!(err.to_string().contains(&local.to_string()), "{err}");

    stop(shutdown, server).await;
}

/// Stops the server `server` serves under `shutdown`: it must stop, without a panic or an error.
async fn stop(
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<Result<(), impl std::fmt::Debug>>,
) {
    shutdown.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(10), server)
        .await
        .expect("stops on shutdown")
        .expect("no panic")
        .expect("no error");
}

/// `GET path` over a fresh HTTP/1.1 connection to `port`: the status code.
async fn status_on(port: u16, path: &str) -> u16 {
    let response = http11_get(std::net::SocketAddr::from(([127, 0, 0, 1], port)), path).await;
    response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {response}"))
}

/// Issue 22, item 11: the probe port (which the NetworkPolicy leaves open for the kubelet) serves
/// the probes and not `/metrics`; the metrics port serves `/metrics` and not the probes; one
/// address for both serves everything.
#[tokio::test]
async fn metrics_only_on_the_metrics_port_probes_only_on_the_probe_port() {
    let metrics_port = nodewright_e2e::process::free_port();
    let probe_port = loop {
        let port = nodewright_e2e::process::free_port();
        if port != metrics_port {
            break port;
        }
    };
    let (listeners, shutdown, server) = serve_split(metrics_port, probe_port).await;
    assert_eq!(listeners, 2);
    assert_eq!(status_on(probe_port, "/metrics").await, 404);
    assert_eq!(status_on(probe_port, "/healthz").await, 200);
    assert_eq!(status_on(probe_port, "/readyz").await, 200);
    assert_eq!(status_on(metrics_port, "/metrics").await, 200);
    assert_eq!(status_on(metrics_port, "/healthz").await, 404);
    assert_eq!(status_on(metrics_port, "/readyz").await, 404);
    stop(shutdown, server).await;

    // METRICS_LISTEN == PROBE_LISTEN: one listener, everything on it.
    let shared = nodewright_e2e::process::free_port();
    let (listeners, shutdown, server) = serve_split(shared, shared).await;
    assert_eq!(listeners, 1);
    for path in ["/metrics", "/healthz", "/readyz"] {
        assert_eq!(status_on(shared, path).await, 200, "{path}");
    }
    stop(shutdown, server).await;
}

/// The admin server with `/metrics` on `metrics_port` and the probes on `probe_port` (the same
/// port: one listener for both), serving: how many listeners it bound, and what stops it.
async fn serve_split(
    metrics_port: u16,
    probe_port: u16,
) -> (
    usize,
    CancellationToken,
    tokio::task::JoinHandle<Result<(), impl std::fmt::Debug>>,
) {
    let addr = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let served = bind_split(
        addr(metrics_port),
        addr(probe_port),
        Arc::new(Metrics::new()),
        Readiness::default(),
        None,
    )
    .await
    .expect("binds");
    let listeners = served.len();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve_each(served, shutdown.clone()));
    (listeners, shutdown, server)
}
