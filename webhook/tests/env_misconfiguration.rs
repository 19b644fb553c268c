//! The webhook binary with each environment variable it reads set to a bad value on its own (in an
//! otherwise valid, env-only configuration): it must stop with a non-zero exit and a message that
//! names the variable, before serving anything. Run as the process the chart starts (no flags).

mod support;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{free_port, write_certs};

/// A kubeconfig the client builds from without connecting (nothing listens on port 1); the
/// variables under test fail before any request, the file-loading ones right after.
fn kubeconfig(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    token: t\ncurrent-context: c\n",
    )
    .expect("kubeconfig");
    path
}

/// Runs the binary with exactly `env` (plus PATH); `None` (after killing it) if it is still running
/// after 20 seconds: it accepted the configuration.
fn run(env: &[(String, Vec<u8>)]) -> Option<Output> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodewright-webhook"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, OsStr::from_bytes(v))))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the webhook binary runs");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child.wait_with_output().expect("output"))
}

/// (variable, bad value, variables to unset for the case, variables the message must name)
type Case<'a> = (&'a str, &'a [u8], &'a [&'a str], &'a [&'a str]);

#[test]
fn each_bad_variable_alone_stops_the_binary_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_certs(dir.path());
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    let base: Vec<(&str, String)> = vec![
        ("KUBECONFIG", kubeconfig(dir.path()).display().to_string()),
        ("WEBHOOK_LISTEN", format!("127.0.0.1:{}", free_port())),
        (
            "WEBHOOK_METRICS_LISTEN",
            format!("127.0.0.1:{}", free_port()),
        ),
        ("WEBHOOK_TLS_CERT_FILE", cert.display().to_string()),
        ("WEBHOOK_TLS_KEY_FILE", key.display().to_string()),
        ("LOG_FORMAT", "text".to_owned()),
    ];
    let missing = dir.path().join("missing.pem").display().to_string();
    let key_as_cert = key.display().to_string();
    let cases: Vec<Case> = vec![
        ("WEBHOOK_LISTEN", b"9443", &[], &["WEBHOOK_LISTEN"]),
        (
            "WEBHOOK_LISTEN",
            b"127.0.0.1:\xff",
            &[],
            &["WEBHOOK_LISTEN"],
        ),
        (
            "WEBHOOK_METRICS_LISTEN",
            b"localhost",
            &[],
            &["WEBHOOK_METRICS_LISTEN"],
        ),
        (
            "WEBHOOK_METRICS_AUTH",
            b"maybe",
            &[],
            &["WEBHOOK_METRICS_AUTH"],
        ),
        (
            "WEBHOOK_TLS_CERT_FILE",
            missing.as_bytes(),
            &[],
            &["WEBHOOK_TLS_CERT_FILE"],
        ),
        (
            "WEBHOOK_TLS_CERT_FILE",
            key_as_cert.as_bytes(),
            &[],
            &["WEBHOOK_TLS_CERT_FILE"],
        ),
        (
            "WEBHOOK_TLS_KEY_FILE",
            missing.as_bytes(),
            &[],
            &["WEBHOOK_TLS_KEY_FILE"],
        ),
        (
            "WEBHOOK_TLS_KEY_FILE",
            b"",
            &["WEBHOOK_TLS_KEY_FILE"],
            &["WEBHOOK_TLS_CERT_FILE", "WEBHOOK_TLS_KEY_FILE"],
        ),
        (
            "WEBHOOK_TLS_SECRET",
            b"no-namespace",
            &["WEBHOOK_TLS_CERT_FILE", "WEBHOOK_TLS_KEY_FILE"],
            &["WEBHOOK_TLS_SECRET"],
        ),
        (
            "WEBHOOK_TLS_SECRET",
            b"nodewright/webhook-tls",
            &[],
            &[
                "WEBHOOK_TLS_SECRET",
                "WEBHOOK_TLS_CERT_FILE",
                "WEBHOOK_TLS_KEY_FILE",
            ],
        ),
        (
            "WEBHOOK_TLS_CERT_FILE",
            b"",
            &["WEBHOOK_TLS_CERT_FILE", "WEBHOOK_TLS_KEY_FILE"],
            &[
                "WEBHOOK_TLS_CERT_FILE",
                "WEBHOOK_TLS_KEY_FILE",
                "WEBHOOK_TLS_SECRET",
            ],
        ),
        (
            "WEBHOOK_TLS_RELOAD_INTERVAL",
            b"1ms",
            &[],
            &["WEBHOOK_TLS_RELOAD_INTERVAL"],
        ),
        (
            "WEBHOOK_MAX_BODY_BYTES",
            b"8MiB",
            &[],
            &["WEBHOOK_MAX_BODY_BYTES"],
        ),
        (
            "WEBHOOK_MAX_BODY_BYTES",
            b"1024",
            &[],
            &["WEBHOOK_MAX_BODY_BYTES"],
        ),
        (
            "WEBHOOK_MAX_BODY_BYTES",
            b"1099511627776",
            &[],
            &["WEBHOOK_MAX_BODY_BYTES"],
        ),
        (
            "WEBHOOK_MAX_CONNECTIONS",
            b"0",
            &[],
            &["WEBHOOK_MAX_CONNECTIONS"],
        ),
        (
            "WEBHOOK_MAX_IN_FLIGHT",
            b"lots",
            &[],
            &["WEBHOOK_MAX_IN_FLIGHT"],
        ),
        (
            "WEBHOOK_MAX_IN_FLIGHT_BYTES",
            b"65536",
            &[],
            &["WEBHOOK_MAX_IN_FLIGHT_BYTES", "WEBHOOK_MAX_BODY_BYTES"],
        ),
        (
            "WEBHOOK_MAX_IN_FLIGHT_BYTES",
            b"2GiB",
            &[],
            &["WEBHOOK_MAX_IN_FLIGHT_BYTES"],
        ),
        (
            "WEBHOOK_REQUEST_TIMEOUT",
            b"0",
            &[],
            &["WEBHOOK_REQUEST_TIMEOUT"],
        ),
        (
            "WEBHOOK_SHUTDOWN_GRACE",
            b"-1s",
            &[],
            &["WEBHOOK_SHUTDOWN_GRACE"],
        ),
        (
            "WEBHOOK_SHUTDOWN_DELAY",
            b"soon",
            &[],
            &["WEBHOOK_SHUTDOWN_DELAY"],
        ),
        (
            "WEBHOOK_ALLOW_CONTROL_PLANE_NODES",
            b"yes",
            &[],
            &["WEBHOOK_ALLOW_CONTROL_PLANE_NODES"],
        ),
        (
            "WEBHOOK_ALLOWED_IMAGES",
            b"ghcr.io/acme/*,ghcr.io/[",
            &[],
            &["WEBHOOK_ALLOWED_IMAGES", "ghcr.io/["],
        ),
        (
            "WEBHOOK_PROTECTED_SECRETS",
            b"Webhook_CA",
            &[],
            &["WEBHOOK_PROTECTED_SECRETS", "Webhook_CA"],
        ),
        ("LOG_FORMAT", b"xml", &[], &["LOG_FORMAT"]),
        ("LOG_LEVEL", b"info,[", &[], &["LOG_LEVEL"]),
        ("JOB_STAGE_TIMEOUT", b"forever", &[], &["JOB_STAGE_TIMEOUT"]),
        ("JOB_BACKOFF_LIMIT", b"-1", &[], &["JOB_BACKOFF_LIMIT"]),
        ("JOB_TTL_SUCCEEDED", b"1s", &[], &["JOB_TTL_SUCCEEDED"]),
        ("JOB_TTL_FAILED", b"\xff", &[], &["JOB_TTL_FAILED"]),
        ("KUBECONFIG", missing.as_bytes(), &[], &["KUBECONFIG"]),
    ];
    let mut failures = Vec::new();
    for (var, value, unset, named) in &cases {
        let mut env: Vec<(String, Vec<u8>)> = base
            .iter()
            .filter(|(k, _)| k != var && !unset.contains(k))
            .map(|(k, v)| ((*k).to_owned(), v.clone().into_bytes()))
            .collect();
        if !value.is_empty() {
            env.push(((*var).to_owned(), value.to_vec()));
        }
        let shown = String::from_utf8_lossy(value);
        let Some(output) = run(&env) else {
            failures.push(format!(
                "{var}={shown:?}: accepted, the webhook kept running"
            ));
            continue;
        };
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if output.status.success() || !named.iter().all(|n| all.contains(n)) {
            failures.push(format!(
                "{var}={shown:?}: exit {:?}, expected a message naming {named:?}: {all}",
                output.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
