//! `nodewright-certs generate` as an administrator runs it: the private keys are never readable by
//! anyone else, not even for a moment or through a file opened before (issue 22, item 12).

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn generate(dir: &std::path::Path) {
    let output = Command::new(env!("CARGO_BIN_EXE_nodewright-certs"))
        .args(["generate", "--dir"])
        .arg(dir)
        .args(["--name", "webhook.example.svc"])
        .output()
        .expect("nodewright-certs runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn keys_are_created_0600_and_never_reach_a_previously_opened_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A world-readable tls.key left there, opened by someone before the run (an open file keeps
    // its reader whatever chmod happens later), and hard-linked elsewhere.
    let planted = dir.path().join("tls.key");
    std::fs::write(&planted, "").expect("plant");
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut reader = std::fs::File::open(&planted).expect("open before");
    let link = dir.path().join("linked");
    std::fs::hard_link(&planted, &link).expect("hard link");

    generate(dir.path());

    for key in ["ca.key", "tls.key"] {
        let path = dir.path().join(key);
        let mode = std::fs::metadata(&path).expect("key").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{key}: {mode:o}");
        let text = std::fs::read_to_string(&path).expect("read key");
        assert!(text.contains("PRIVATE KEY"), "{key}: {text}");
    }
    for cert in ["ca.crt", "tls.crt"] {
        let text = std::fs::read_to_string(dir.path().join(cert)).expect("cert");
        assert!(text.contains("BEGIN CERTIFICATE"), "{cert}");
    }
    let mut seen = String::new();
    reader
        .read_to_string(&mut seen)
        .expect("read the earlier handle");
    assert_eq!(seen, "", "the key reached a file opened before the run");
    assert_eq!(
        std::fs::read_to_string(&link).expect("link"),
        "",
        "the key reached a hard link of the old file"
    );
    // Nothing else is left in the directory (no temporary files).
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["ca.crt", "ca.key", "linked", "tls.crt", "tls.key"]);
}

#[test]
fn version_flag_prints_the_version() {
    let output = Command::new(env!("CARGO_BIN_EXE_nodewright-certs"))
        .arg("--version")
        .output()
        .expect("nodewright-certs runs");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("nodewright-certs {}\n", env!("CARGO_PKG_VERSION"))
    );
    // Not a prefix of something else: `--version extra` is refused.
    let output = Command::new(env!("CARGO_BIN_EXE_nodewright-certs"))
        .args(["--version", "extra"])
        .output()
        .expect("nodewright-certs runs");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
}
