//! Real TLS: the server on 127.0.0.1 with certificate files laid out the way the kubelet mounts a
//! Secret (`tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>/`), rotated by the kubelet's atomic
//! symlink swap while clients hammer it. No request may fail, and clients must see the new
//! certificate without a restart.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use nodewright_shared::defaults::OperatorDefaults;
use nodewright_webhook::cache::StaticView;
use nodewright_webhook::metrics::Metrics;
use nodewright_webhook::routes::{AppState, Readiness, router, router_with};
use nodewright_webhook::server::{Limits, serve_tls};
use nodewright_webhook::shed::{InFlight, InFlightLimits};
use nodewright_webhook::tls::{self, CertStore};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls_pki_types::pem::PemObject;
use tokio::net::TcpListener;
use tokio::sync::watch;

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn ca() -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "test webhook CA");
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed");
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// A leaf for 127.0.0.1 and localhost signed by `ca`; (cert PEM, key PEM, cert DER).
fn leaf(ca: &Ca, cn: &str) -> (String, String, Vec<u8>) {
    let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("params");
    params.distinguished_name.push(DnType::CommonName, cn);
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &ca.issuer).expect("signed");
    (cert.pem(), key.serialize_pem(), cert.der().to_vec())
}

/// Writes a new timestamped directory and swaps `..data` to it atomically, as the kubelet does.
fn kubelet_publish(dir: &Path, generation: usize, cert: &str, key: &str) {
    let versioned = dir.join(format!("..2026_11_29_20_00_{generation:02}"));
    std::fs::create_dir(&versioned).expect("versioned dir");
    std::fs::write(versioned.join("tls.crt"), cert).expect("write cert");
    std::fs::write(versioned.join("tls.key"), key).expect("write key");
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(versioned.file_name().expect("name"), &tmp).expect("tmp link");
    std::fs::rename(&tmp, dir.join("..data")).expect("atomic swap");
    for name in ["tls.crt", "tls.key"] {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link).expect("file link");
        }
    }
}

/// The webhook's state over `certs`, with a static view of the cluster.
fn app_state(certs: &Arc<CertStore>) -> Arc<AppState> {
    Arc::new(AppState {
        defaults: OperatorDefaults::default(),
        restrictions: Default::default(),
        cluster: Arc::new(StaticView {
            policies: vec!["gpu-rollout".into()],
            users: vec![],
            ..StaticView::default()
        }),
        metrics: Metrics::new(),
        ready: Readiness::new(certs.clone()),
    })
}

fn validate_body() -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/validate-create-nodewright.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(path).expect("fixture")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotates_under_load_without_a_failed_request() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = ca();
    let dir = tempfile::tempdir().expect("tempdir");
    let leaves: Vec<_> = (0..3).map(|i| leaf(&ca, &format!("webhook-{i}"))).collect();
    kubelet_publish(dir.path(), 0, &leaves[0].0, &leaves[0].1);

    let certs = CertStore::new();
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    tls::load_files(&certs, &cert_path, &key_path)
        .await
        .expect("initial certificate");
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(tls::watch_files(
        certs.clone(),
        cert_path,
        key_path,
        Duration::from_millis(20),
        stop_rx.clone(),
    ));
    let state = app_state(&certs);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(serve_tls(
        listener,
        Arc::new(tls::server_config(certs.clone()).expect("tls config")),
        router(state, 8 << 20, Duration::from_secs(10)),
        Limits {
            read_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(5),
            max_connections: nodewright_webhook::server::DEFAULT_MAX_CONNECTIONS,
        },
        stop_rx,
    ));

    let root = reqwest::Certificate::from_pem(ca.pem.as_bytes()).expect("root");
    let url = format!("https://localhost:{}/validate-nodewright", addr.port());
    let body = Arc::new(validate_body());
    let done = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let seen: Arc<std::sync::Mutex<std::collections::BTreeSet<Vec<u8>>>> = Arc::default();
    let mut clients = Vec::new();
    for i in 0..16 {
        // Half the clients reuse connections (in flight across the swap); the other half make a
        // full handshake for every request (no pooling, no TLS session resumption), so they see
        // each new certificate as soon as it is served.
        let builder = reqwest::Client::builder()
            .resolve("localhost", addr)
            .tls_info(true)
            .timeout(Duration::from_secs(10));
        let builder = if i % 2 == 1 {
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
                roots.add(c.expect("ca pem")).expect("root");
            }
            let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
            tls.resumption = rustls::client::Resumption::disabled();
            tls.alpn_protocols = vec![b"http/1.1".to_vec()];
            builder.use_preconfigured_tls(tls).pool_max_idle_per_host(0)
        } else {
            builder
                .use_rustls_tls()
                .tls_built_in_root_certs(false)
                .add_root_certificate(root.clone())
        };
        let client = builder.build().expect("client");
        let (url, body, done, ok, seen) = (
            url.clone(),
            body.clone(),
            done.clone(),
            ok.clone(),
            seen.clone(),
        );
        clients.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            // Bounded: stops when told, or after 20k requests per client at most.
            for _ in 0..20_000 {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                match client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.to_vec())
                    .send()
                    .await
                {
                    Ok(r) if r.status().is_success() => {
                        let peer = r
                            .extensions()
                            .get::<reqwest::tls::TlsInfo>()
                            .and_then(|i| i.peer_certificate());
                        if let Some(der) = peer {
                            seen.lock().expect("lock").insert(der.to_vec());
                        }
                        match r.json::<serde_json::Value>().await {
                            Ok(v) if v["response"]["allowed"] == true => {
                                ok.fetch_add(1, Ordering::SeqCst);
                            }
                            other => failures.push(format!("unexpected review: {other:?}")),
                        }
                    }
                    Ok(r) => failures.push(format!("HTTP {}", r.status())),
                    Err(e) => failures.push(format!("request failed: {e:?}")),
                }
            }
            failures
        }));
    }

    // Rotate twice while the load runs, waiting for each new certificate to be served.
    for (generation, (cert, key, der)) in leaves.iter().enumerate().skip(1) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        kubelet_publish(dir.path(), generation, cert, key);
        let mut served = false;
        for _ in 0..200 {
            if certs.leaf_der().as_deref() == Some(der.as_slice())
                && seen.lock().expect("lock").contains(der)
            {
                served = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(
            served,
            "certificate generation {generation} was never served to a client (store generation {}, store has it: {}, distinct certificates seen: {}, requests ok: {})",
            certs.generation(),
            certs.leaf_der().as_deref() == Some(der.as_slice()),
            seen.lock().expect("lock").len(),
            ok.load(Ordering::SeqCst)
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    done.store(true, Ordering::SeqCst);
    let mut failures = Vec::new();
    for c in clients {
        failures.extend(c.await.expect("client task"));
    }
    assert!(
        failures.is_empty(),
        "{} failed requests, first: {:?}",
        failures.len(),
        failures.first()
    );
    assert!(
        ok.load(Ordering::SeqCst) > 100,
        "too few requests to mean anything"
    );
    let seen = seen.lock().expect("lock").clone();
    for (i, (_, _, der)) in leaves.iter().enumerate() {
        assert!(seen.contains(der), "clients never saw certificate {i}");
    }
    assert_eq!(certs.generation(), 3);

    // A broken update (key of another certificate) is ignored: the last good certificate keeps serving.
    let stray = leaf(&ca, "stray");
    kubelet_publish(dir.path(), 9, &leaves[0].0, &stray.1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(certs.leaf_der().as_deref(), Some(leaves[2].2.as_slice()));

    // Stop: the listener closes and the server returns after draining.
    let _ = stop_tx.send(true);
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("server stops")
        .expect("server task");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener still open after stop"
    );
}

/// One HTTP/1.1 request on `tls`, the response's status line (empty when the server has closed the
/// connection).
async fn exchange<S>(tls: &mut S, body: &[u8]) -> String
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let head = format!(
        "POST /validate-nodewright HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    if tls.write_all(head.as_bytes()).await.is_err() || tls.write_all(body).await.is_err() {
        return String::new();
    }
    let _ = tls.flush().await;
    read_response(tls)
        .await
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The webhook's TLS server on a free 127.0.0.1 port with a certificate signed by `ca` and
/// `read_timeout` for request heads; it stops when the returned sender sends `true` (the directory
/// holds the certificate files).
async fn serve_signed_by(
    ca: &Ca,
    read_timeout: Duration,
) -> (std::net::SocketAddr, watch::Sender<bool>, tempfile::TempDir) {
    serve_signed_by_with(ca, read_timeout, None).await
}

/// As [`serve_signed_by`], with these in-flight limits instead of the defaults.
async fn serve_signed_by_with(
    ca: &Ca,
    read_timeout: Duration,
    in_flight: Option<InFlight>,
) -> (std::net::SocketAddr, watch::Sender<bool>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key, _) = leaf(ca, "webhook");
    kubelet_publish(dir.path(), 0, &cert, &key);
    let certs = CertStore::new();
    tls::load_files(
        &certs,
        &dir.path().join("tls.crt"),
        &dir.path().join("tls.key"),
    )
    .await
    .expect("certificate");
    let state = app_state(&certs);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(serve_tls(
        listener,
        Arc::new(tls::server_config(certs).expect("tls config")),
        match in_flight {
            Some(in_flight) => router_with(state, 8 << 20, Duration::from_secs(10), in_flight),
            None => router(state, 8 << 20, Duration::from_secs(10)),
        },
        Limits {
            read_timeout,
            shutdown_grace: Duration::from_secs(1),
            max_connections: nodewright_webhook::server::DEFAULT_MAX_CONNECTIONS,
        },
        stop_rx,
    ));
    (addr, stop_tx, dir)
}

/// A TLS connection to `addr` that trusts `ca_pem` and offers the one ALPN protocol `alpn`.
async fn connect_trusting(
    ca_pem: &str,
    addr: std::net::SocketAddr,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("ca pem")).expect("root");
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    connector.connect(name, tcp).await.expect("handshake")
}

/// The kube-apiserver talks to webhooks over HTTP/1.1 and keeps idle connections for 90 s; an idle
/// keep-alive connection must outlive the (short) header-read timeout, or the apiserver's next
/// request on it races the server's close and fails. So must a new connection that has not sent a
/// request yet: Go's Transport keeps a connection it dialed for a request another connection
/// served first in its idle pool, unused, and sends a later request on it (closed after the read
/// timeout, such connections failed two admissions of a rotation_load run in CI with
/// "write: broken pipe").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_outlives_the_header_read_timeout() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = ca();
    let read_timeout = Duration::from_millis(500);
    let (addr, stop_tx, _dir) = serve_signed_by(&ca, read_timeout).await;
    let mut tls = connect_trusting(&ca.pem, addr, b"http/1.1").await;
    let mut unused = connect_trusting(&ca.pem, addr, b"http/1.1").await;
    let body = validate_body();
    assert_eq!(exchange(&mut tls, &body).await, "http/1.1 200 ok");
    // Idle for four header-read timeouts, as between two admissions on a quiet cluster.
    tokio::time::sleep(read_timeout * 4).await;
    assert_eq!(
        exchange(&mut tls, &body).await,
        "http/1.1 200 ok",
        "the idle connection was closed by the server"
    );
    assert_eq!(
        exchange(&mut unused, &body).await,
        "http/1.1 200 ok",
        "the connection that had not sent a request yet was closed by the server"
    );
    let _ = stop_tx.send(true);
}

/// A client that stops talking in the middle of a request is closed once the read timeout of the
/// request's first byte passes, not after the 120 s an idle connection gets: a request head left
/// half-sent on a new connection or after an earlier request, and an h2 connection that sent its
/// preface and no request. Before, these were held open for 120 s (h2 forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_is_closed_after_the_read_timeout_not_the_idle_one() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = ca();
    let read_timeout = Duration::from_millis(300);
    let (addr, stop_tx, _dir) = serve_signed_by(&ca, read_timeout).await;
    let connect = |alpn: &'static [u8]| connect_trusting(&ca.pem, addr, alpn);
    // Reads until the server closes; false if it is still open after a bound far below the idle
    // timeout (a bound on a hang, not a measurement: the deadline is 300 ms).
    async fn closed_by_server<S: tokio::io::AsyncRead + Unpin>(tls: &mut S) -> bool {
        let mut buf = [0u8; 1024];
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                match tls.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        .is_ok()
    }
    const HALF_A_HEAD: &[u8] = b"POST /validate-nodewright HTTP/1.1\r\nhost: loc";

    let mut fresh_half = connect(b"http/1.1").await;
    fresh_half
        .write_all(HALF_A_HEAD)
        .await
        .expect("half a head");
    fresh_half.flush().await.expect("flush");
    assert!(
        closed_by_server(&mut fresh_half).await,
        "a half-sent first head kept its connection open"
    );

    let mut preface_only = connect(b"h2").await;
    assert_eq!(preface_only.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // The client preface and an empty SETTINGS frame (length 0, type 4, no flags, stream 0).
    preface_only
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("preface");
    preface_only.flush().await.expect("flush");
    assert!(
        closed_by_server(&mut preface_only).await,
        "an h2 connection with no request stayed open"
    );

    let mut half = connect(b"http/1.1").await;
    assert_eq!(
        exchange(&mut half, &validate_body()).await,
        "http/1.1 200 ok"
    );
    half.write_all(HALF_A_HEAD).await.expect("half a head");
    half.flush().await.expect("flush");
    assert!(
        closed_by_server(&mut half).await,
        "a half-sent head after a request kept its connection open"
    );
    let _ = stop_tx.send(true);
}

/// A shed request leaves its keep-alive connection open. The kube-apiserver writes an
/// AdmissionReview's head and body in separate writes; a 503 answered before the body was read
/// made hyper close the connection over the unread body, the kernel reset it, and the apiserver,
/// still writing the body, would fail the admission with "write: broken pipe" instead of retrying
/// after `Retry-After`. The server now reads an ordinary body to its end before it answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shed_request_leaves_its_keep_alive_connection_open() {
    use tokio::io::AsyncWriteExt;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = ca();
    let in_flight = InFlight::new(
        InFlightLimits {
            max_requests: 1,
            max_large_bytes: 8 << 20,
            max_body_bytes: 8 << 20,
        },
        prometheus_client::metrics::counter::Counter::default(),
    );
    let (addr, stop_tx, _dir) =
        serve_signed_by_with(&ca, Duration::from_secs(10), Some(in_flight.clone())).await;
    let body = validate_body();
    let head = format!(
        "POST /validate-nodewright HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );

    // The one in-flight slot, held by a request whose body has not come yet.
    let mut holder = connect_trusting(&ca.pem, addr, b"http/1.1").await;
    holder
        .write_all(head.as_bytes())
        .await
        .expect("holder head");
    holder.flush().await.expect("flush");
    let held = tokio::time::timeout(Duration::from_secs(60), async {
        while in_flight.in_flight() < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(held.is_ok(), "the holder's request never took the slot");

    // Over the limit: the head, a pause (an early answer and its close would come in it), the body.
    let mut shed = connect_trusting(&ca.pem, addr, b"http/1.1").await;
    shed.write_all(head.as_bytes()).await.expect("shed head");
    shed.flush().await.expect("flush");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = shed.write_all(&body).await.is_ok() && shed.flush().await.is_ok();
    assert!(sent, "the connection was closed before the body was sent");
    let answer = read_response(&mut shed).await;
    assert!(
        answer.starts_with("http/1.1 503") && answer.contains("retry-after: 1"),
        "shed with 503 and Retry-After: {answer:?}"
    );

    // The holder finishes; the shed connection is still open and now admitted.
    holder.write_all(&body).await.expect("holder body");
    holder.flush().await.expect("flush");
    assert!(read_response(&mut holder).await.starts_with("http/1.1 200"));
    assert_eq!(
        exchange(&mut shed, &body).await,
        "http/1.1 200 ok",
        "the shed request's connection was closed"
    );
    let _ = stop_tx.send(true);
}

/// The head (lower-cased) of the next response on `tls`, its body read; empty when the server
/// closed the connection first.
async fn read_response<S>(tls: &mut S) -> String
where
    S: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                match tls.read(&mut chunk).await {
                    Ok(0) | Err(_) => return String::new(),
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            return head;
        }
        match tls.read(&mut chunk).await {
            Ok(0) | Err(_) => return String::new(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
