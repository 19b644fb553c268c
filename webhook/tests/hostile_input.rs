//! Hostile input against the real webhook binary over real TLS (DESIGN §3 "Hostile input"):
//! oversized AdmissionReviews (just under and over the kube-apiserver's 3 MiB request limit, over
//! the webhook's own body limit, sent with a length and chunked without one), deeply nested JSON,
//! duplicate keys, non-UTF-8 bytes, lone surrogates, wrong kinds and versions, and objects of
//! 10,000 packages. Each must get a clear denial (200 with `allowed: false` and a message naming
//! the problem) or a 4xx, never a panic or a hang, and the process must stay alive with its memory
//! bounded.
//!
//! Then abuse at once: 1,000 idle TLS connections held open, 32 concurrent bodies of 8 MiB built
//! to be expensive (4 Mi JSON elements; 10,000 packages padded to the limit; a large object that
//! takes the tree-building decode), and valid reviews sent while all of that is in flight, which
//! must every one be admitted. Each hostile body must be refused with a clear answer or shed
//! (503, or its connection closed unread); none may be admitted or hang.
//!
//! The webhook is the binary as deployed: the chart's environment, inside a cgroup with the
//! chart's resource limits (`nodewright_e2e::limits`, as the kubelet would confine it), its caches
//! synced against a real kube-apiserver (local control plane), so `/readyz` is true before the
//! first hostile request. Its cgroup's peak memory must stay under the chart's memory limit with
//! no OOM kill; the figures (admitted, shed, peak against the limit) are printed for the README.

mod support;

use std::sync::Arc;
use std::time::Duration;

use nodewright_e2e::limits::Cgroup;
use nodewright_e2e::{Cluster, ClusterOptions};
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use support::{chart_env, https_client, start_webhook_confined, wait_ready, write_certs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// kube-apiserver's default `--max-request-bytes` (3 MiB): no single object larger than this reaches
/// a webhook from a real apiserver, but an UPDATE carries two of them.
const APISERVER_LIMIT: usize = 3 * 1024 * 1024;
/// The webhook's default `WEBHOOK_MAX_BODY_BYTES`.
const WEBHOOK_LIMIT: usize = 8 * 1024 * 1024;
/// Idle TLS connections held open during the abuse.
const IDLE_CONNECTIONS: usize = 1_000;
/// Hostile bodies of just under [`WEBHOOK_LIMIT`] sent at once.
const HOSTILE_BODIES: usize = 32;

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

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A TLS connection (HTTP/1.1 by ALPN) to the webhook on `port`, trusting only `ca_pem`.
async fn tls_connect(port: u16, ca_pem: &str) -> Result<Tls, std::io::Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("ca cert")).expect("root");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocols")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    connector.connect(name, tcp).await
}

/// Writes one HTTP/1.1 request over TLS with a chunked body of `total` bytes (no length given up
/// front) and returns the status line of the answer, or what ended the exchange.
async fn chunked_post(port: u16, ca_pem: &str, path: &str, total: usize) -> String {
    let mut tls = tls_connect(port, ca_pem).await.expect("handshake");
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

/// What became of one hostile body.
#[derive(Debug)]
enum Fate {
    /// Refused with this status (a 4xx, or 200 with `allowed: false`).
    Refused(u16),
    /// Shed: 503, or the connection closed with the body unread.
    Shed(String),
}

/// The raw answer to a request sent with `Connection: close`: read to the end of the connection.
async fn read_answer(tls: &mut Tls) -> Vec<u8> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    // A bound on a hang, not a measurement: the webhook answers or closes within its timeouts.
    let _ = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(n) = tls.read(&mut buf).await {
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    answer
}

/// Classifies a raw answer to a hostile body; `Err` when it is neither a refusal nor shedding.
fn fate(answer: &[u8], write_failed: bool) -> Result<Fate, String> {
    let text = String::from_utf8_lossy(answer);
    let status = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse::<u16>().ok());
    match status {
        Some(503) => Ok(Fate::Shed("503".into())),
        Some(code @ (400 | 408 | 413)) => Ok(Fate::Refused(code)),
        Some(200) if text.contains(r#""allowed":false"#) => Ok(Fate::Refused(200)),
        None if answer.is_empty() && write_failed => {
            Ok(Fate::Shed("closed with the body unread".into()))
        }
        _ => Err(format!(
            "neither refused nor shed: {}",
            text.chars().take(300).collect::<String>()
        )),
    }
}

/// Sends `body` to `path` with its length, all but the last byte, then waits at `sent` (so that
/// every hostile body is in flight at once), and at `go` before sending the last byte and reading
/// the answer. Passes both barriers whatever happens, so the others never wait forever.
async fn held_post(
    port: u16,
    ca_pem: String,
    path: &'static str,
    body: Arc<Vec<u8>>,
    sent: Arc<tokio::sync::Barrier>,
    go: Arc<tokio::sync::Barrier>,
) -> Result<Fate, String> {
    let started: Result<(Tls, bool), String> = async {
        let mut tls = tls_connect(port, &ca_pem)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let head = format!(
            "POST /{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let mut failed = tls.write_all(head.as_bytes()).await.is_err();
        for chunk in body[..body.len() - 1].chunks(64 * 1024) {
            if failed {
                break;
            }
            failed = tls.write_all(chunk).await.is_err();
        }
        Ok((tls, failed))
    }
    .await;
    sent.wait().await;
    go.wait().await;
    let (mut tls, mut failed) = started?;
    if !failed {
        failed =
            tls.write_all(&body[body.len() - 1..]).await.is_err() || tls.flush().await.is_err();
    }
    fate(&read_answer(&mut tls).await, failed)
}

/// A review of `size` bytes (± a few) holding ~`size / 2` JSON elements: `[0,0,...]` inside the
/// object. Parsed into a tree, 8 MiB of it costs ~128 MiB.
fn element_bomb(uid: &str, size: usize) -> Vec<u8> {
    let head = text(&review(uid, nodewright(1, 0)));
    let head = String::from_utf8(head).expect("utf-8");
    let (before, after) = head.split_at(head.find(r#""spec":{"#).expect("spec") + 8);
    let fill = size.saturating_sub(head.len() + 16) / 2;
    format!(r#"{before}"x":[{}0],{after}"#, "0,".repeat(fill)).into_bytes()
}

/// A review of `size` bytes (± a few) whose one package is an array: it takes the decode that
/// builds a tree, and is padded to `size` with one annotation.
fn exact_path_bomb(uid: &str, size: usize) -> Vec<u8> {
    let mut object = nodewright(1, 0);
    object["spec"]["packages"]["pkg-00000x"] = json!([1, 2, 3]);
    let base = text(&review(uid, object.clone())).len();
    object["metadata"]["annotations"]["pad"] = json!("x".repeat(size.saturating_sub(base)));
    text(&review(uid, object))
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
    let objects = nodewright_e2e::chart::render(&cluster, &[])
        .await
        .expect("the chart renders");
    let limits = nodewright_e2e::limits::chart_defaults(&cluster, "webhook")
        .await
        .expect("the chart's webhook limits");
    let Some(memory_limit) = limits.memory_bytes else {
        panic!("the chart sets no memory limit for the webhook");
    };
    let cgroup = match Cgroup::create(&format!("hostile-{}-webhook", std::process::id()), limits) {
        Ok(c) => c,
        Err(e) => {
            if nodewright_e2e::skip::skip(
                "hostile_reviews_get_a_clear_answer_and_memory_stays_bounded",
                &format!("the webhook cannot run under the chart's limits here: {e}"),
            ) {
                return;
            }
            unreachable!("skip panics unless skipping was asked for");
        }
    };
    let mut webhook = start_webhook_confined(
        cluster.kubeconfig_path(),
        dir.path(),
        &chart_env(&objects),
        &cgroup,
    );
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

    // Abuse, all at once: idle connections held, hostile bodies in flight, valid reviews admitted.
    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    let mut idle_refused = 0;
    for batch in 0..IDLE_CONNECTIONS.div_ceil(50) {
        let opened = futures::future::join_all(
            (batch * 50..((batch + 1) * 50).min(IDLE_CONNECTIONS))
                .map(|_| tls_connect(webhook.port, &ca)),
        )
        .await;
        for c in opened {
            match c {
                Ok(tls) => idle.push(tls),
                Err(_) => idle_refused += 1,
            }
        }
    }
    let bodies = [
        Arc::new(element_bomb("bomb", WEBHOOK_LIMIT - 1024)),
        Arc::new(review_of_size("padded", WEBHOOK_LIMIT - 1024)),
        Arc::new(exact_path_bomb("exact", WEBHOOK_LIMIT - 1024)),
    ];
    for b in &bodies {
        assert!(
            b.len() < WEBHOOK_LIMIT && b.len() > WEBHOOK_LIMIT - 64 * 1024,
            "{}",
            b.len()
        );
    }
    let sent = Arc::new(tokio::sync::Barrier::new(HOSTILE_BODIES + 1));
    let go = Arc::new(tokio::sync::Barrier::new(HOSTILE_BODIES + 1));
    let hostile: Vec<_> = (0..HOSTILE_BODIES)
        .map(|i| {
            tokio::spawn(held_post(
                webhook.port,
                ca.clone(),
                "validate-nodewright",
                bodies[i % bodies.len()].clone(),
                sent.clone(),
                go.clone(),
            ))
        })
        .collect();
    sent.wait().await;
    // Every hostile body is in flight or shed, the idle connections are held: valid reviews, on
    // a kept-alive connection and on new ones, must be admitted.
    let mut valid_admitted = 0;
    for i in 0..10 {
        let fresh = https_client(&ca);
        let using = if i % 2 == 0 { &client } else { &fresh };
        let answer = using
            .post(format!(
                "https://127.0.0.1:{}/validate-nodewright",
                webhook.port
            ))
            .header("content-type", "application/json")
            .body(valid.clone())
            .timeout(Duration::from_secs(60))
            .send()
            .await;
        match answer {
            Ok(r) => {
                let status = r.status().as_u16();
                let review: Value = r.json().await.unwrap_or(Value::Null);
                if status == 200 && review["response"]["allowed"] == true {
                    valid_admitted += 1;
                } else {
                    failures.push(format!("valid review {i} under abuse: {status} {review}"));
                }
            }
            Err(e) => failures.push(format!("valid review {i} under abuse: no answer: {e}")),
        }
    }
    go.wait().await;
    let (mut refused, mut shed) = (0, 0);
    let mut fates = std::collections::BTreeMap::<String, usize>::new();
    for task in hostile {
        match task.await.expect("hostile task") {
            Ok(Fate::Refused(code)) => {
                refused += 1;
                *fates.entry(format!("refused {code}")).or_default() += 1;
            }
            Ok(Fate::Shed(how)) => {
                shed += 1;
                *fates.entry(format!("shed ({how})")).or_default() += 1;
            }
            Err(e) => failures.push(format!("hostile 8 MiB body: {e}")),
        }
    }
    // Which idle connections the webhook closed (evicted at the cap, or past their deadline): a
    // read of a closed one ends at once; an open one is still silent after the wait (a figure for
    // the report, not an assertion).
    let idle_closed = futures::future::join_all(idle.iter_mut().map(|tls| async move {
        let mut buf = [0u8; 64];
        let r = tokio::time::timeout(Duration::from_millis(500), tls.read(&mut buf)).await;
        matches!(r, Ok(Ok(0) | Err(_)))
    }))
    .await
    .into_iter()
    .filter(|closed| *closed)
    .count();
    drop(idle);
    eprintln!(
        "FIGURE webhook under abuse: {valid_admitted}/10 valid reviews admitted; {HOSTILE_BODIES} hostile 8 MiB bodies: {refused} refused, {shed} shed {fates:?}; {IDLE_CONNECTIONS} idle TLS connections: {} opened ({idle_closed} closed by the webhook by the end), {idle_refused} refused",
        IDLE_CONNECTIONS - idle_refused
    );

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
    let usage = cgroup.usage();
    eprintln!(
        "FIGURE webhook peak RSS under hostile input: {} MiB (idle before: {} MiB, now {} MiB); {} against the chart's {}",
        hwm / 1024,
        idle_hwm / 1024,
        rss / 1024,
        limits.peak(usage.peak_bytes),
        limits.describe()
    );
    assert!(
        failures.is_empty(),
        "{} hostile case(s) answered wrongly:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        usage.oom_kills,
        0,
        "the webhook was OOM-killed\n{}",
        webhook.log()
    );
    assert!(
        usage.peak_bytes > 0 && usage.peak_bytes < memory_limit,
        "{} is not under the chart's memory limit of {} MiB",
        limits.peak(usage.peak_bytes),
        memory_limit >> 20
    );
    assert!(
        hwm * 1024 < memory_limit,
        "peak RSS {} MiB is over the chart's memory limit",
        hwm / 1024
    );
    // Gone before its cgroup is removed (a cgroup with a process in it cannot be).
    let _ = webhook.child.kill().await;
    drop(cgroup);
}

/// The chart's NetworkPolicy lets only the kube-apiserver reach the webhook's HTTPS port when it
/// is rendered against the cluster (install, upgrade, `--dry-run=server`): the addresses of the
/// `kubernetes` Service's EndpointSlice, each a single-address block. No client authenticates to
/// an admission webhook, so this is what keeps pods from reaching it at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_apiserver_may_reach_the_webhook_port_when_the_chart_is_installed() {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 0,
        ..ClusterOptions::default()
    })
    .await
    .expect("local control plane starts");
    let slice = cluster
        .kubectl(&[
            "get",
            "endpointslice",
            "-n",
            "default",
            "kubernetes",
            "-o",
            "json",
        ])
        .await
        .expect("the kubernetes EndpointSlice");
    let slice: Value = serde_json::from_str(&slice).expect("json");
    let expected: Vec<Value> = slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .map(|a| {
            let bits = if a.contains(':') { 128 } else { 32 };
            json!({"ipBlock": {"cidr": format!("{a}/{bits}")}})
        })
        .collect();
    assert!(
        !expected.is_empty(),
        "the apiserver has no endpoints: {slice}"
    );
    let objects = nodewright_e2e::chart::render(
        &cluster,
        &[
            "--dry-run=server",
            "--set",
            "networkPolicy.enabled=true",
            // The harness installed the CRDs already; a server-side dry run would refuse to adopt them.
            "--set",
            "crds.install=false",
        ],
    )
    .await
    .expect("the chart renders against the cluster");
    let policy = objects
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy" && o["metadata"]["name"] == "nw-nodewright-webhook")
        .expect("the webhook's NetworkPolicy");
    let https = policy["spec"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["ports"][0]["port"] == "https")
        .expect("the HTTPS rule");
    assert_eq!(https["from"], Value::Array(expected), "{policy}");
}
