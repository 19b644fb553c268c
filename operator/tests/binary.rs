//! The operator binary refuses a bad environment before touching the cluster: exit code 1, every
//! problem on stderr naming its variable, nothing on stdout. Every variable the binary reads is
//! tried with a bad value on its own (in an otherwise empty environment), so none can be wrong
//! without the administrator being told which one.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs the binary in an environment holding only `env` (and PATH, and a HOME without a
/// kubeconfig), killed if it does not exit within a minute.
fn run(env: &[(&str, &OsStr)]) -> Output {
    let home = tempfile::tempdir().expect("home");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodewright-operator"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the operator binary runs");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the operator did not exit with {env:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn binary_exits_1_listing_every_bad_variable() {
    let output = run(&[
        ("JOB_BACKOFF_LIMIT", OsStr::new("many")),
        ("LOG_FORMAT", OsStr::new("xml")),
        ("POD_NAME", OsStr::new("operator-0")),
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("JOB_BACKOFF_LIMIT"), "{stderr}");
    assert!(stderr.contains("LOG_FORMAT"), "{stderr}");
}

/// (variable, bad value, other variables the case needs)
type Case<'a> = (&'a str, &'a [u8], &'a [(&'a str, &'a str)]);

/// Every variable, one bad value at a time: the binary stops and names that variable (and no
/// other), with the value it found.
#[test]
fn each_bad_variable_alone_stops_the_binary_naming_it() {
    let cases: &[Case] = &[
        ("JOB_STAGE_TIMEOUT", b"forever", &[]),
        ("JOB_BACKOFF_LIMIT", b"-1", &[]),
        ("JOB_TTL_SUCCEEDED", b"1s", &[]),
        ("JOB_TTL_FAILED", b"1d", &[]),
        ("NAMESPACE", b"Not_A_Namespace", &[]),
        ("AGENT_IMAGE", b"agent without tag", &[]),
        ("PAUSE_IMAGE", b"registry.k8s.io/pause", &[]),
        ("COPY_DIR_ROOT", b"relative/dir", &[]),
        ("AGENT_LOG_ROOT", b"logs", &[]),
        ("IMAGE_PULL_SECRET", b"Bad_Secret", &[]),
        ("PACKAGE_IMAGE_PULL_POLICY", b"always", &[]),
        ("RUNTIME_REQUIRED_TAINT", b"no-effect", &[]),
        ("DEFAULT_INTERVAL", b"1s", &[]),
        ("REAPPLY_ON_REBOOT", b"yes", &[]),
        ("LEADER_ELECTION", b"maybe", &[]),
        ("LEASE_NAME", b"Bad_Lease", &[]),
        ("LEASE_DURATION", b"1.5s", &[]),
        ("LEASE_RENEW_DEADLINE", b"20s", &[]),
        ("LEASE_RETRY_PERIOD", b"1ms", &[]),
        ("POD_NAME", b"two words", &[]),
        ("METRICS_LISTEN", b"8080", &[]),
        ("PROBE_LISTEN", b"localhost", &[]),
        ("METRICS_AUTH", b"on", &[]),
        ("LOG_FORMAT", b"xml", &[]),
        ("LOG_LEVEL", b"info,[", &[]),
        // Non-UTF-8 bytes are not a valid value of any variable, and are named as such.
        ("NAMESPACE", b"nodewright\xff", &[]),
        ("WEBHOOK_CERTS_MANAGED", b"maybe", &[]),
        ("WEBHOOK_CERTS_MANAGED", b"tru\xffe", &[]),
        (
            "WEBHOOK_CA_SECRET_NAME",
            b"Bad_Secret",
            &[("WEBHOOK_CERTS_MANAGED", "true")],
        ),
        (
            "WEBHOOK_SECRET_NAME",
            b"Bad_Secret",
            &[("WEBHOOK_CERTS_MANAGED", "true")],
        ),
        (
            "WEBHOOK_SERVICE_NAME",
            b"Bad_Service",
            &[("WEBHOOK_CERTS_MANAGED", "true")],
        ),
        (
            "WEBHOOK_CLUSTER_DOMAIN",
            b"cluster_local",
            &[("WEBHOOK_CERTS_MANAGED", "true")],
        ),
        (
            "WEBHOOK_EXTRA_NAMES",
            b"ok.example.com,not a name",
            &[("WEBHOOK_CERTS_MANAGED", "true")],
        ),
        (
            "WEBHOOK_MUTATING_CONFIGURATION",
            b"Bad",
            &[("WEBHOOK_CERTS_MANAGED", "true")],
        ),
        (
            "WEBHOOK_VALIDATING_CONFIGURATION",
            b"Bad",
            &[("WEBHOOK_CERTS_MANAGED", "true")],
        ),
        (
            "WEBHOOK_CA_VALIDITY",
            b"1h",
            &[("WEBHOOK_CERTS_MANAGED", "true")],
        ),
        (
            "WEBHOOK_CERT_VALIDITY",
            b"1m",
            &[("WEBHOOK_CERTS_MANAGED", "true")],
        ),
        (
            "WEBHOOK_CERT_PROPAGATION",
            b"soon",
            &[("WEBHOOK_CERTS_MANAGED", "true")],
        ),
    ];
    let mut failures = Vec::new();
    for (var, value, extra) in cases {
        let mut env: Vec<(&str, &OsStr)> = vec![("POD_NAME", OsStr::new("operator-0"))];
        env.retain(|(k, _)| k != var);
        env.extend(extra.iter().map(|(k, v)| (*k, OsStr::new(v))));
        env.push((var, OsStr::from_bytes(value)));
        let output = run(&env);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let shown = String::from_utf8_lossy(value);
        if output.status.code() != Some(1)
            || !stderr.contains(&format!("{var}="))
            || !output.stdout.is_empty()
        {
            failures.push(format!(
                "{var}={shown:?}: exit {:?}, stderr: {stderr}",
                output.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The identity falls back to HOSTNAME when POD_NAME is unset; a bad HOSTNAME is named as HOSTNAME
/// (the variable the administrator must fix), not as POD_NAME.
#[test]
fn a_bad_hostname_fallback_is_named_as_hostname() {
    let output = run(&[("HOSTNAME", OsStr::new("two words"))]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("HOSTNAME=\"two words\""), "{stderr}");
}

/// A kubeconfig that cannot be read stops the binary with a message naming KUBECONFIG.
#[test]
fn an_unreadable_kubeconfig_is_named() {
    let output = run(&[
        ("POD_NAME", OsStr::new("operator-0")),
        ("KUBECONFIG", OsStr::new("/nonexistent/kubeconfig")),
        ("LOG_FORMAT", OsStr::new("text")),
    ]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(1), "{all}");
    assert!(all.contains("KUBECONFIG"), "{all}");
}

/// `--version` prints the crate version and exits 0 without reading the environment (a bad
/// variable does not stop it); any other argument is refused with exit code 2.
#[test]
fn version_flag_prints_the_version_and_other_arguments_are_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_nodewright-operator"))
        .arg("--version")
        .env("JOB_STAGE_TIMEOUT", "forever")
        .output()
        .expect("the operator binary runs");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("nodewright-operator {}\n", env!("CARGO_PKG_VERSION"))
    );
    let output = Command::new(env!("CARGO_BIN_EXE_nodewright-operator"))
        .arg("--verbose")
        .output()
        .expect("the operator binary runs");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("\"--verbose\""), "{stderr}");
    assert!(output.stdout.is_empty());
}
