//! The placeholder binary refuses to run (exit code 2) until the reconcilers are wired, saying so on
//! stderr, so a deployment of it fails loudly instead of idling.

use std::process::Command;

#[test]
fn binary_exits_2_with_a_usage_line() {
    let output = Command::new(env!("CARGO_BIN_EXE_nodewright-operator"))
        .output()
        .expect("the operator binary runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not wired"), "{stderr}");
}
