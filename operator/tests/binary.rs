//! The operator binary refuses a bad environment before touching the cluster: exit code 1, every
//! problem on stderr naming its variable, nothing on stdout.

use std::process::Command;

#[test]
fn binary_exits_1_listing_every_bad_variable() {
    let output = Command::new(env!("CARGO_BIN_EXE_nodewright-operator"))
        .env("JOB_BACKOFF_LIMIT", "many")
        .env("LOG_FORMAT", "xml")
        .env_remove("KUBECONFIG")
        .output()
        .expect("the operator binary runs");
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("JOB_BACKOFF_LIMIT"), "{stderr}");
    assert!(stderr.contains("LOG_FORMAT"), "{stderr}");
}
