//! The built `kubectl-nodewright` binary, run without a cluster: what a user sees before any
//! kubeconfig exists. The end-to-end suite against a cluster lives in the harness crate
//! (`tests/e2e/tests/e2e_cli.rs`).
//!
//! Being an integration test of this package, this file also makes `cargo test --workspace`
//! build the binary itself (`target/debug/kubectl-nodewright`), with the test build's features:
//! the e2e suites and the docs' examples run that file (`NODEWRIGHT_CLI_BIN`, tests/run-all.sh).

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str], home: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-nodewright"))
        .args(args)
        // No kubeconfig anywhere: not the developer's, not the test cluster's.
        .env_remove("KUBECONFIG")
        .env("HOME", home)
        .output()
        .expect("kubectl-nodewright runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn version_and_help_need_no_cluster() {
    let home = tempfile::tempdir().expect("temp HOME");
    let home = home.path();
    let version = run(&["--version"], home);
    assert!(version.status.success(), "{version:?}");
    assert_eq!(
        text(&version.stdout).trim(),
        format!("kubectl-nodewright {}", env!("CARGO_PKG_VERSION"))
    );
    let help = run(&["--help"], home);
    assert!(help.status.success(), "{help:?}");
    let help = text(&help.stdout);
    for command in [
        "plan",
        "why",
        "migrate-from-skyhook",
        "rollback",
        "completion",
    ] {
        assert!(help.contains(command), "help lists {command}: {help}");
    }
    let completion = run(&["completion", "bash"], home);
    assert!(completion.status.success(), "{completion:?}");
    assert!(text(&completion.stdout).contains("_kubectl__nodewright()"));
}

#[test]
fn usage_errors_exit_2_and_a_missing_kubeconfig_exits_1_naming_the_file() {
    let home = tempfile::tempdir().expect("temp HOME");
    let home = home.path();
    let bogus = run(&["bogus"], home);
    assert_eq!(bogus.status.code(), Some(2), "{bogus:?}");
    assert!(text(&bogus.stderr).contains("unrecognized subcommand 'bogus'"));

    let plan = run(&["plan"], home);
    assert_eq!(plan.status.code(), Some(2), "{plan:?}");
    assert!(
        text(&plan.stderr).contains("name the NodeWright to preview, or give its manifest with -f"),
        "{plan:?}"
    );

    let list = run(&["node", "list"], home);
    assert_eq!(list.status.code(), Some(1), "{list:?}");
    let stderr = text(&list.stderr);
    assert!(
        stderr.contains("cannot use the kubeconfig") && stderr.contains(".kube/config"),
        "{stderr}"
    );
    assert!(
        list.stdout.is_empty(),
        "nothing printed as a result: {list:?}"
    );
}
