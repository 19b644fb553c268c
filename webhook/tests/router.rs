//! The router end to end in process (no TLS, no cluster): AdmissionReview JSON recorded from a real
//! kube-apiserver (tests/fixtures/recorded, see record_reviews.rs) and hand-built in the exact shape the
//! kube-apiserver sends (tests/fixtures) through the real axum router, asserting the reviews that come
//! back, and what hostile input gets.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use nodewright_shared::defaults::OperatorDefaults;
use nodewright_webhook::cache::StaticView;
use nodewright_webhook::metrics::Metrics;
use nodewright_webhook::routes::{AppState, Readiness, router};
use nodewright_webhook::tls::CertStore;
use serde_json::Value;
use tower::ServiceExt;

const MAX_BODY: usize = 1024 * 1024;

fn build(view: StaticView) -> (axum::Router, Arc<Metrics>, Arc<Readiness>) {
    let metrics = Metrics::new();
    let ready = Readiness::new(CertStore::new());
    let state = Arc::new(AppState {
        defaults: OperatorDefaults::default(),
        restrictions: Default::default(),
        cluster: Arc::new(view),
        metrics: metrics.clone(),
        ready: ready.clone(),
    });
    (
        router(state, MAX_BODY, Duration::from_secs(5)),
        metrics,
        ready,
    )
}

fn cluster() -> StaticView {
    StaticView {
        policies: vec!["gpu-rollout".into()],
        users: vec![
            ("gpu-host-setup".into(), "gpu-rollout".into()),
            ("other".into(), "gpu-rollout".into()),
        ],
        ..StaticView::default()
    }
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

async fn post(app: &axum::Router, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let response = app
        .clone()
        .oneshot(
            Request::post(path)
                .header("content-type", "application/json")
                .body(Body::from(body))
                .expect("request"),
        )
        .await
        .expect("router answers");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}

fn decoded_patch(review: &Value) -> Vec<Value> {
    use base64::Engine;
    let b64 = review["response"]["patch"].as_str().expect("a patch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64 patch");
    serde_json::from_slice(&bytes).expect("JSON Patch")
}

#[tokio::test]
async fn mutating_nodewright_fills_names_and_stage_timeouts_only() {
    let (app, metrics, _) = build(cluster());
    let (status, review) = post(
        &app,
        "/mutate-nodewright",
        fixture("mutate-create-nodewright.json"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    assert_eq!(
        review["response"]["uid"],
        "b7e1f0a2-0001-4a5e-8c1d-2f0e9a7b6c01"
    );
    assert_eq!(review["response"]["allowed"], true);
    assert_eq!(review["response"]["patchType"], "JSONPatch");
    let ops = decoded_patch(&review);
    let paths: Vec<&str> = ops.iter().filter_map(|o| o["path"].as_str()).collect();
    // Three packages get their name; only tuned lacks a stageTimeout (the others set 15m and 45m),
    // and the record of the filled one follows (docs/timeouts.md, "Changing the default").
    assert_eq!(
        paths,
        [
            "/spec/packages/driver-tools/name",
            "/spec/packages/kernel-params/name",
            "/spec/packages/tuned/name",
            "/spec/packages/tuned/stageTimeout",
            "/metadata/annotations/nodewright.nvidia.com~1defaulted-stage-timeouts",
        ]
    );
    assert!(
        ops.iter().all(|o| o["op"] == "add"),
        "never replace or remove: {ops:?}"
    );
    assert_eq!(ops[3]["value"], "1h");

    // Applying the patch to the object yields the defaulted object, with the user's values intact.
    let mut object: Value = serde_json::from_slice::<Value>(&fixture(
        "mutate-create-nodewright.json",
    ))
    .expect("json")["request"]["object"]
        .clone();
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).expect("patch type");
    json_patch::patch(&mut object, &patch).expect("patch applies");
    assert_eq!(
        object["spec"]["packages"]["kernel-params"]["stageTimeout"],
        "15m"
    );
    assert_eq!(object["spec"]["packages"]["tuned"]["stageTimeout"], "1h");
    assert_eq!(
        object["metadata"]["annotations"]["nodewright.nvidia.com/defaulted-stage-timeouts"],
        r#"{"tuned":"1h"}"#
    );
    assert_eq!(
        object["spec"]["packages"]["driver-tools"]["image"],
        "registry.example.com:5000/driver-tools"
    );

    let text = metrics.encode();
    assert!(
        text.contains(r#"nodewright_webhook_requests_total{webhook="mutate-nodewright",operation="CREATE",result="patched"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn mutating_policy_fills_strategy_defaults() {
    let (app, _, _) = build(cluster());
    let (status, review) = post(
        &app,
        "/mutate-deploymentpolicy",
        fixture("mutate-create-policy.json"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let ops = decoded_patch(&review);
    let pairs: Vec<(String, Value)> = ops
        .iter()
        .map(|o| {
            (
                o["path"].as_str().unwrap_or_default().to_owned(),
                o["value"].clone(),
            )
        })
        .collect();
    assert!(pairs.contains(&(
        "/spec/default/strategy/exponential/growthFactor".into(),
        2.into()
    )));
    assert!(pairs.contains(&(
        "/spec/default/strategy/exponential/batchThreshold".into(),
        100.into()
    )));
    assert!(pairs.contains(&(
        "/spec/compartments/0/strategy/fixed/safetyLimit".into(),
        50.into()
    )));
    assert!(pairs.contains(&(
        "/spec/compartments/1/strategy/linear/initialBatch".into(),
        1.into()
    )));
    // initialBatch 2 and delta 2 were set by the user and are not touched.
    assert!(
        !pairs
            .iter()
            .any(|(p, _)| p == "/spec/default/strategy/exponential/initialBatch")
    );
    assert!(
        !pairs
            .iter()
            .any(|(p, _)| p == "/spec/compartments/1/strategy/linear/delta")
    );
    assert!(!pairs.iter().any(|(p, _)| p.ends_with("failureThreshold")));
}

#[tokio::test]
async fn valid_nodewright_is_admitted() {
    let (app, _, _) = build(cluster());
    let (status, review) = post(
        &app,
        "/validate-nodewright",
        fixture("validate-create-nodewright.json"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["allowed"], true, "{review}");
}

#[tokio::test]
async fn all_errors_of_an_object_come_back_together_sorted_with_paths() {
    let (app, metrics, _) = build(cluster());
    let (status, review) = post(
        &app,
        "/validate-nodewright",
        fixture("validate-create-nodewright-many-errors.json"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["allowed"], false);
    assert_eq!(review["response"]["status"]["code"], 403);
    let message = review["response"]["status"]["message"]
        .as_str()
        .expect("message");
    let lines: Vec<&str> = message.lines().collect();
    assert!(lines.len() >= 3, "{message}");
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted, "errors are sorted");
    assert!(
        message.contains("spec.packages.kernel-params.stageTimeout"),
        "{message}"
    );
    assert!(message.contains("596523h14m7s"), "{message}");
    assert!(message.contains("spec.packages.tuned.image"), "{message}");
    assert!(message.contains("dependency cycle"), "{message}");
    assert!(metrics.encode().contains(r#"result="denied"} 1"#));
}

#[tokio::test]
async fn removing_an_installed_uninstall_enabled_package_is_refused() {
    let (app, _, _) = build(cluster());
    let (_, review) = post(
        &app,
        "/validate-nodewright",
        fixture("validate-update-remove-installed-package.json"),
    )
    .await;
    assert_eq!(review["response"]["allowed"], false, "{review}");
    let message = review["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("driver-tools") && message.contains("uninstall.apply"),
        "{message}"
    );
}

#[tokio::test]
async fn a_policy_in_use_cannot_be_deleted_and_an_unused_one_can() {
    let (app, _, _) = build(cluster());
    let (_, review) = post(
        &app,
        "/validate-deploymentpolicy",
        fixture("validate-delete-policy.json"),
    )
    .await;
    assert_eq!(review["response"]["allowed"], false);
    let message = review["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("gpu-host-setup") && message.contains("other"),
        "{message}"
    );

    let (app, _, _) = build(StaticView::default());
    let (_, review) = post(
        &app,
        "/validate-deploymentpolicy",
        fixture("validate-delete-policy.json"),
    )
    .await;
    assert_eq!(review["response"]["allowed"], true, "{review}");
}

#[tokio::test]
async fn hostile_or_misdirected_input_gets_a_clear_answer() {
    let (app, metrics, _) = build(cluster());
    for (file, want_status, needle) in [
        ("malformed.json", StatusCode::BAD_REQUEST, "not JSON"),
        (
            "missing-request.json",
            StatusCode::BAD_REQUEST,
            "no request",
        ),
        (
            "wrong-version-v1beta1.json",
            StatusCode::BAD_REQUEST,
            "admission.k8s.io/v1",
        ),
        ("wrong-kind-pod.json", StatusCode::OK, "received Pod"),
        ("missing-object.json", StatusCode::OK, "carries no object"),
    ] {
        let (status, review) = post(&app, "/validate-nodewright", fixture(file)).await;
        assert_eq!(status, want_status, "{file}: {review}");
        assert_eq!(review["response"]["allowed"], false, "{file}");
        let message = review["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(message.contains(needle), "{file}: {message}");
    }
    assert!(
        metrics
            .encode()
            .contains(r#"operation="unknown",result="error"} 3"#)
    );

    // Not JSON at all, and a body over the limit.
    let (status, _) = post(&app, "/validate-nodewright", b"\x00\xff garbage".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = post(&app, "/validate-nodewright", vec![b' '; MAX_BODY + 1]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn readiness_waits_for_certificate_and_caches() {
    let (app, _, ready) = build(cluster());
    let get = |path: &'static str| {
        let app = app.clone();
        async move {
            let r = app
                .oneshot(Request::get(path).body(Body::empty()).expect("request"))
                .await
                .expect("answer");
            r.status()
        }
    };
    assert_eq!(get("/healthz").await, StatusCode::OK);
    assert_eq!(get("/readyz").await, StatusCode::SERVICE_UNAVAILABLE);
    ready
        .caches_synced
        .store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        get("/readyz").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "still no certificate"
    );
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
    ready.certs.set(
        nodewright_webhook::tls::load_pem(
            cert.cert.pem().as_bytes(),
            cert.signing_key.serialize_pem().as_bytes(),
        )
        .expect("pair"),
    );
    assert_eq!(get("/readyz").await, StatusCode::OK);
    ready
        .draining
        .store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(get("/readyz").await, StatusCode::SERVICE_UNAVAILABLE);
}

/// Every AdmissionReview recorded from a real kube-apiserver (`record_reviews.rs`) replayed through
/// the router: the answer echoes the request's uid, admits or refuses as the recorded step expects
/// (from what was applied, a valid or an invalid example), and a refusal carries a message.
#[tokio::test]
async fn recorded_reviews_from_a_real_apiserver() {
    let dir = format!("{}/tests/fixtures/recorded", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    assert!(names.len() >= 8, "recorded fixtures missing in {dir}");
    let (app, _, _) = build(cluster());
    let mut operations = std::collections::BTreeSet::new();
    for name in &names {
        // <seq>-<endpoint>-<operation>-<expected>.json
        let stem = name.trim_end_matches(".json");
        let (rest, expected) = stem.rsplit_once('-').expect("expected in name");
        let (rest, operation) = rest.rsplit_once('-').expect("operation in name");
        let endpoint = rest.split_once('-').expect("sequence in name").1;
        operations.insert(format!("{endpoint} {operation}"));
        let body = fixture(&format!("recorded/{name}"));
        let request: Value = serde_json::from_slice(&body).expect("recorded JSON");
        let (status, review) = post(&app, &format!("/{endpoint}"), body).await;
        assert_eq!(status, StatusCode::OK, "{name}: {review}");
        assert_eq!(review["kind"], "AdmissionReview", "{name}");
        assert_eq!(
            review["response"]["uid"], request["request"]["uid"],
            "{name}"
        );
        let allowed = review["response"]["allowed"].as_bool();
        match expected {
            "allowed" => assert_eq!(allowed, Some(true), "{name}: {review}"),
            "denied" => {
                assert_eq!(allowed, Some(false), "{name}: {review}");
                let message = review["response"]["status"]["message"]
                    .as_str()
                    .unwrap_or("");
                assert!(!message.is_empty(), "{name}: a refusal without a message");
            }
            other => panic!("{name}: unknown expectation {other}"),
        }
        // The apiserver sends objects without the defaults: an admitted mutating CREATE of a
        // NodeWright fills package names and stage timeouts (an invalid one is refused there).
        if endpoint == "mutate-nodewright" && operation == "create" && expected == "allowed" {
            let patch = decoded_patch(&review);
            assert!(
                patch.iter().any(|op| op["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/stageTimeout"))),
                "{name}: no stageTimeout default in {patch:?}"
            );
        }
    }
    for needed in [
        "mutate-nodewright create",
        "validate-nodewright create",
        "validate-nodewright update",
        "mutate-deploymentpolicy create",
        "validate-deploymentpolicy create",
        "validate-deploymentpolicy delete",
    ] {
        assert!(operations.contains(needed), "no recorded {needed}");
    }
}

/// A request with a body that arrives only when `release` is sent on (or dropped), declaring
/// `declared` bytes: it stays in flight, holding its share of the limits, until then.
fn held_request(
    declared: usize,
) -> (
    Request<Body>,
    futures::channel::mpsc::UnboundedSender<Result<axum::body::Bytes, std::io::Error>>,
) {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let request = Request::post("/validate-nodewright")
        .header("content-type", "application/json")
        .header("content-length", declared.to_string())
        .body(Body::from_stream(rx))
        .expect("request");
    (request, tx)
}

/// Waits until `n` requests and `large` bytes of large bodies hold their share of the limits: a
/// held request spawned but not yet counted would otherwise race the probe that expects to be
/// shed, and be shed itself.
async fn until_in_flight(in_flight: &nodewright_webhook::shed::InFlight, n: usize, large: usize) {
    for _ in 0..600_000 {
        if in_flight.in_flight() >= n && in_flight.large_bytes_in_flight() >= large {
            return;
        }
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    panic!("{n} held requests never were in flight together");
}

/// Posts `declared` bytes of spaces (their length known from the body) until the answer is 503 (the held requests have taken their
/// share of the limits): the answer's `Retry-After`.
async fn until_shed(app: &axum::Router, declared: usize) -> String {
    for _ in 0..10_000 {
        let response = app
            .clone()
            .oneshot(
                Request::post("/validate-nodewright")
                    .header("content-type", "application/json")
                    .body(Body::from(vec![b' '; declared]))
                    .expect("request"),
            )
            .await
            .expect("router answers");
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            return response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
        }
        tokio::task::yield_now().await;
    }
    panic!("a request of {declared} bytes was never shed");
}

/// Load shedding: over the in-flight limits a request is answered 503 with `Retry-After: 1` at
/// once (not queued); large bodies in flight never crowd out an ordinary review; the limits come
/// back when the requests finish; probes are never shed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_in_flight_limits_requests_are_shed_and_ordinary_reviews_are_not_crowded_out() {
    use nodewright_webhook::routes::router_with;
    use nodewright_webhook::shed::{InFlight, InFlightLimits};
    let metrics = Metrics::new();
    let ready = Readiness::new(CertStore::new());
    let state = Arc::new(AppState {
        defaults: OperatorDefaults::default(),
        restrictions: Default::default(),
        cluster: Arc::new(cluster()),
        metrics: metrics.clone(),
        ready,
    });
    let in_flight = InFlight::new(
        InFlightLimits {
            max_requests: 3,
            max_large_bytes: MAX_BODY,
            max_body_bytes: MAX_BODY,
        },
        metrics.shed_requests(),
    );
    let app = router_with(state, MAX_BODY, Duration::from_secs(60), in_flight.clone());
    let valid = fixture("validate-create-nodewright.json");

    // One body at the limit in flight takes the whole large-body budget: another large one is
    // shed, an ordinary review is admitted.
    let (large, large_body) = held_request(MAX_BODY);
    let large = tokio::spawn(app.clone().oneshot(large));
    until_in_flight(&in_flight, 1, MAX_BODY).await;
    assert_eq!(until_shed(&app, MAX_BODY).await, "1");
    let (status, review) = post(&app, "/validate-nodewright", valid.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        review["response"]["allowed"], true,
        "an ordinary review waits on no large body: {review}"
    );

    // Two more small requests in flight fill the request limit: now any request is shed, the
    // probes are not.
    let (small_a, small_a_body) = held_request(64);
    let small_a = tokio::spawn(app.clone().oneshot(small_a));
    let (small_b, small_b_body) = held_request(64);
    let small_b = tokio::spawn(app.clone().oneshot(small_b));
    until_in_flight(&in_flight, 3, MAX_BODY).await;
    assert_eq!(until_shed(&app, 64).await, "1");
    let probe = app
        .clone()
        .oneshot(Request::get("/healthz").body(Body::empty()).expect("probe"))
        .await
        .expect("router answers");
    assert_eq!(probe.status(), StatusCode::OK, "a probe is never shed");

    // Once they finish, everything is admitted again.
    drop((large_body, small_a_body, small_b_body));
    for held in [large, small_a, small_b] {
        let answer = held.await.expect("task").expect("router answers");
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "an empty body");
    }
    let (status, review) = post(&app, "/validate-nodewright", valid).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["allowed"], true, "{review}");
    let exposition = metrics.encode();
    assert!(
        exposition.lines().any(|l| l
            .starts_with(r#"nodewright_webhook_shed_total{what="request"} "#)
            && !l.ends_with(" 0")),
        "{exposition}"
    );
}
