//! Hostile input against the real webhook binary over real TLS (DESIGN §3 "Hostile input"):
//! oversized AdmissionReviews (just under and over the kube-apiserver's 3 MiB request limit, over
//! the webhook's own body limit, sent with a length and chunked without one), deeply nested JSON,
//! duplicate keys, non-UTF-8 bytes, lone surrogates, wrong kinds and versions, and objects of
//! 10,000 packages. Each must get a clear denial (200 with `allowed: false` and a message naming
//! the problem) or a 4xx, never a panic or a hang, and the process must stay alive with its memory
//! bounded: its peak RSS (`VmHWM`) is printed as a figure and checked against a generous bound.
//!
//! The webhook is the binary as deployed: its caches synced against a real kube-apiserver (local
//! control plane), so `/readyz` is true before the first hostile request.

mod support;

use std::sync::Arc;
use std::time::Duration;

use nodewright_e2e::{Cluster, ClusterOptions};
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use support::{https_client, start_webhook, wait_ready, write_certs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// kube-apiserver's default `--max-request-bytes` (3 MiB): no single object larger than this reaches
/// a webhook from a real apiserver, but an UPDATE carries two of them.
const APISERVER_LIMIT: usize = 3 * 1024 * 1024;
/// The webhook's default `WEBHOOK_MAX_BODY_BYTES`.
const WEBHOOK_LIMIT: usize = 8 * 1024 * 1024;
/// Peak RSS the webhook may reach over the whole suite. The largest body it accepts is 8 MiB and
/// each request is decoded once; this bound is eight times what was measured (64 MiB), so it only
/// catches a webhook that buffers or copies without bound.
const RSS_BOUND_KIB: u64 = 512 * 1024;

/// What a hostile request must get back.
enum Expect {
    /// A 4xx status with this code.
    Status(u16),
    /// `200`, `allowed: false`, the request's uid, and a message containing each needle.
    Denied(&'static [&'static str]),
    /// `200`, `allowed: true`: only for the control case that shows how duplicates resolve.
    Allowed,
}

fn package(i: usize) -> (String, Value) {
    (
        format!("pkg-{i:05}x"),
        json!({"version": "1.0.0", "image": format!("ghcr.io/example/pkg-{i:05}")}),
    )
}

/// A NodeWright of `packages` packages, padded with an annotation of `pad` bytes.
fn nodewright(packages: usize, pad: usize) -> Value {
    let packages: serde_json::Map<String, Value> = (0..packages).map(package).collect();
    json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": "hostile", "annotations": {"pad": "x".repeat(pad)}},
        "spec": {"packages": packages},
    })
}

fn review_of(uid: &str, kind: &str, operation: &str, object: Value, old: Value) -> Value {
    let (group, resource) = match kind {
        "NodeWright" => ("nodewright.nvidia.com", "nodewrights"),
        "DeploymentPolicy" => ("nodewright.nvidia.com", "deploymentpolicies"),
        _ => ("", "pods"),
    };
    let version = if group.is_empty() { "v1" } else { "v1alpha1" };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "name": "hostile",
            "operation": operation,
            "userInfo": {"username": "hostile"},
            "object": object,
            "oldObject": old,
        }
    })
}

fn review(uid: &str, object: Value) -> Value {
    review_of(uid, "NodeWright", "CREATE", object, Value::Null)
}

/// A review of 10,000 packages whose total size is `target` bytes (± a few), padded.
fn review_of_size(uid: &str, target: usize) -> Vec<u8> {
    let base = text(&review(uid, nodewright(10_000, 0)));
    let body = text(&review(
        uid,
        nodewright(10_000, target.saturating_sub(base.len())),
    ));
    assert!(
        body.len().abs_diff(target) < 16,
        "{} for {target}",
        body.len()
    );
    body
}

fn text(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("json")
}

/// Peak and current RSS of `pid` in KiB (`VmHWM`, `VmRSS`).
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Writes one HTTP/1.1 request over TLS with a chunked body of `total` bytes (no length given up
/// front) and returns the status line of the answer, or what ended the exchange.
async fn chunked_post(port: u16, ca_pem: &str, path: &str, total: usize) -> String {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("ca cert")).expect("root");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocols")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = connector.connect(name, tcp).await.expect("handshake");
    let head = format!(
        "POST /{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).await.expect("head");
    let chunk = vec![b' '; 64 * 1024];
    let mut sent = 0;
    // The server may answer and close before the whole body is sent: a write error then is expected.
    while sent < total {
        let frame = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
        if tls.write_all(&frame).await.is_err() {
            break;
        }
        sent += chunk.len();
    }
    let _ = tls.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        let mut buf = [0u8; 4096];
        while let Ok(n) = tls.read(&mut buf).await {
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
            if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer to a chunked body of {total} bytes");
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or("connection closed without an answer")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_reviews_get_a_clear_answer_and_memory_stays_bounded() {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 0,
        ..ClusterOptions::default()
    })
    .await
    .expect("local control plane starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = write_certs(dir.path());
    let mut webhook = start_webhook(cluster.kubeconfig_path(), dir.path(), &[]);
    wait_ready(&webhook, &ca).await;
    let pid = webhook.pid();
    let (idle_hwm, _) = rss_kib(pid);
    let client = https_client(&ca);

    let nested = |depth: usize| {
        let mut object = String::from(
            r#"{"apiVersion":"nodewright.nvidia.com/v1alpha1","kind":"NodeWright","metadata":{"name":"hostile"},"spec":{"packages":{},"x":"#,
        );
        object.push_str(&"[".repeat(depth));
        object.push_str(&"]".repeat(depth));
        object.push_str("}}");
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"nested","kind":{{"group":"nodewright.nvidia.com","version":"v1alpha1","kind":"NodeWright"}},"resource":{{"group":"nodewright.nvidia.com","version":"v1alpha1","resource":"nodewrights"}},"operation":"CREATE","userInfo":{{}},"object":{object}}}}}"#
        )
        .into_bytes()
    };
    let valid = text(&review("valid", nodewright(1, 0)));
    // The body of `valid` (keys sorted, as serde_json writes them) with `needle` replaced.
    let with_byte = |needle: &str, replacement: &[u8]| {
        let body = String::from_utf8(valid.clone()).expect("utf-8");
        let at = body.find(needle).expect("needle");
        [&valid[..at], replacement, &valid[at + needle.len()..]].concat()
    };
    let ten_thousand = nodewright(10_000, 0);
    let huge_update = review_of(
        "huge-update",
        "NodeWright",
        "UPDATE",
        nodewright(10_000, APISERVER_LIMIT / 2),
        nodewright(9_999, APISERVER_LIMIT / 2),
    );

    let too_many: &[&str] = &["spec.packages", "10000 packages", "at most 100"];
    let cases: Vec<(&str, &str, Vec<u8>, Expect)> = vec![
        // The control: the review every mangled case below starts from is admitted.
        (
            "the valid review the others are made from",
            "validate-nodewright",
            valid.clone(),
            Expect::Allowed,
        ),
        (
            "10,000 packages (validate)",
            "validate-nodewright",
            text(&review("ten-thousand", ten_thousand.clone())),
            Expect::Denied(too_many),
        ),
        (
            "10,000 packages (mutate)",
            "mutate-nodewright",
            text(&review("ten-thousand", ten_thousand.clone())),
            Expect::Denied(too_many),
        ),
        (
            "an UPDATE of two 10,000-package objects of 1.5 MiB each",
            "validate-nodewright",
            text(&huge_update),
            Expect::Denied(too_many),
        ),
        (
            "just under the apiserver's limit",
            "validate-nodewright",
            review_of_size("under", APISERVER_LIMIT - 4096),
            Expect::Denied(too_many),
        ),
        (
            "over the apiserver's limit",
            "validate-nodewright",
            review_of_size("over", APISERVER_LIMIT + 64 * 1024),
            Expect::Denied(too_many),
        ),
        (
            "over the webhook's body limit",
            "validate-nodewright",
            review_of_size("way-over", WEBHOOK_LIMIT + 1),
            Expect::Status(413),
        ),
        (
            "nested 100,000 deep",
            "validate-nodewright",
            nested(100_000),
            Expect::Status(400),
        ),
        (
            "nested 200 deep inside the object",
            "validate-nodewright",
            nested(200),
            Expect::Status(400),
        ),
        (
            "duplicate keys in the envelope",
            "validate-nodewright",
            with_byte(
                r#""kind":"AdmissionReview""#,
                br#""kind":"AdmissionReview","kind":"Pod""#,
            ),
            Expect::Status(400),
        ),
        // Duplicate keys resolve as the apiserver's own decoder resolves them (the last one wins),
        // so the webhook judges what would be stored; either order is answered, never confused.
        (
            "duplicate package keys, the last one bad",
            "validate-nodewright",
            with_byte(
                r#""pkg-00000x":{"image":"ghcr.io/example/pkg-00000","version":"1.0.0"}"#,
                br#""pkg-00000x":{"image":"ghcr.io/example/pkg-00000","version":"1.0.0"},"pkg-00000x":{"image":"evil:latest","version":"1.0.0"}"#,
            ),
            Expect::Denied(&["spec.packages.pkg-00000x.image", "carries the tag"]),
        ),
        (
            "duplicate package keys, the last one good",
            "validate-nodewright",
            with_byte(
                r#""pkg-00000x":{"image":"ghcr.io/example/pkg-00000","version":"1.0.0"}"#,
                br#""pkg-00000x":{"image":"evil:latest","version":"1.0.0"},"pkg-00000x":{"image":"ghcr.io/example/pkg-00000","version":"1.0.0"}"#,
            ),
            Expect::Allowed,
        ),
        (
            "non-UTF-8 bytes in a string",
            "validate-nodewright",
            with_byte("ghcr.io", b"ghcr.\xff\xfe"),
            Expect::Status(400),
        ),
        (
            "a lone surrogate escape",
            "validate-nodewright",
            with_byte("ghcr.io", br"ghcr.\ud800"),
            Expect::Status(400),
        ),
        (
            "not JSON at all",
            "validate-nodewright",
            b"\x00\x01\x02\xff garbage".to_vec(),
            Expect::Status(400),
        ),
        (
            "an empty body",
            "validate-nodewright",
            Vec::new(),
            Expect::Status(400),
        ),
        (
            "AdmissionReview v1beta1",
            "validate-nodewright",
            with_byte("admission.k8s.io/v1", b"admission.k8s.io/v1beta1"),
            Expect::Status(400),
        ),
        (
            "a Pod sent to the NodeWright webhook",
            "validate-nodewright",
            text(&review_of(
                "pod",
                "Pod",
                "CREATE",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
                Value::Null,
            )),
            Expect::Denied(&["received Pod"]),
        ),
        (
            "a NodeWright sent to the DeploymentPolicy webhook",
            "validate-deploymentpolicy",
            valid.clone(),
            Expect::Denied(&["admits DeploymentPolicy", "received NodeWright"]),
        ),
        (
            "a package that is an array",
            "validate-nodewright",
            with_byte(
                r#"{"image":"ghcr.io/example/pkg-00000","version":"1.0.0"}"#,
                b"[1,2,3]",
            ),
            Expect::Denied(&["does not match its schema"]),
        ),
        (
            "a number too large for any field",
            "validate-nodewright",
            with_byte(r#""packages":{"#, br#""priority":1e400,"packages":{"#),
            Expect::Status(400),
        ),
    ];

    let mut failures = Vec::new();
    for (what, path, body, expect) in &cases {
        let url = format!("https://127.0.0.1:{}/{path}", webhook.port);
        let sent = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .timeout(Duration::from_secs(60))
            .send()
            .await;
        let (status, answer) = match sent {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) => {
                failures.push(format!("{what}: no answer: {e}"));
                continue;
            }
        };
        let short: String = answer.chars().take(400).collect();
        match expect {
            Expect::Status(code) => {
                if status != *code {
                    failures.push(format!("{what}: status {status}, expected {code}: {short}"));
                }
            }
            Expect::Allowed => {
                let review: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
                if status != 200 || review["response"]["allowed"] != true {
                    failures.push(format!(
                        "{what}: status {status}, expected allowed: {short}"
                    ));
                }
            }
            Expect::Denied(needles) => {
                let review: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
                let response = &review["response"];
                let message = response["status"]["message"].as_str().unwrap_or_default();
                if status != 200
                    || response["allowed"] != false
                    || response["uid"].as_str().is_none_or(str::is_empty)
                    || !needles.iter().all(|n| message.contains(n))
                {
                    failures.push(format!(
                        "{what}: status {status}, expected a denial naming {needles:?}: {short}"
                    ));
                }
            }
        }
        if let Ok(Some(exit)) = webhook.child.try_wait() {
            panic!("the webhook died on {what}: {exit}\n{}", webhook.log());
        }
        let (hwm, rss) = rss_kib(pid);
        eprintln!(
            "{what}: {} bytes -> {status}; webhook RSS {} MiB (peak {} MiB)",
            body.len(),
            rss / 1024,
            hwm / 1024
        );
    }

    // A chunked body with no length, far over the limit: refused once the limit is reached, without
    // reading (or keeping) the rest.
    let status = chunked_post(webhook.port, &ca, "validate-nodewright", 64 * 1024 * 1024).await;
    if !status.contains(" 413") {
        failures.push(format!("chunked 64 MiB body: {status}"));
    }

    // Many large requests at once: each is decoded once and dropped, so the peak stays bounded.
    let body = text(&review("ten-thousand", ten_thousand));
    let concurrent: Vec<_> = (0..16)
        .map(|_| {
            let client = client.clone();
            let body = body.clone();
            let url = format!("https://127.0.0.1:{}/validate-nodewright", webhook.port);
            tokio::spawn(async move {
                client
                    .post(url)
                    .body(body)
                    .timeout(Duration::from_secs(120))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    for task in concurrent {
        match task.await.expect("task") {
            Ok(200) => {}
            other => failures.push(format!("concurrent 10,000-package review: {other:?}")),
        }
    }

    assert!(
        webhook.child.try_wait().expect("wait").is_none(),
        "the webhook died\n{}",
        webhook.log()
    );
    let healthy = client
        .get(format!("https://127.0.0.1:{}/readyz", webhook.port))
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(
        healthy.ok(),
        Some(200),
        "still ready after the hostile input"
    );
    let log = webhook.log();
    assert!(!log.contains("panicked"), "a handler panicked:\n{log}");
    let (hwm, rss) = rss_kib(pid);
    eprintln!(
        "FIGURE webhook peak RSS under hostile input: {} MiB (idle before: {} MiB, now {} MiB)",
        hwm / 1024,
        idle_hwm / 1024,
        rss / 1024
    );
    assert!(
        failures.is_empty(),
        "{} hostile case(s) answered wrongly:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        hwm < RSS_BOUND_KIB,
        "peak RSS {} MiB is over the bound {} MiB",
        hwm / 1024,
        RSS_BOUND_KIB / 1024
    );
}
