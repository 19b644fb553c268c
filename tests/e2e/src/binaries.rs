//! The workspace's own service binaries, for suites of another package (a test can only name the
//! binaries of its own package through `CARGO_BIN_EXE_*`).

use std::path::{Path, PathBuf};

/// `$override_var` when set (it must name an existing file), else `cargo build -p <name> --bin <name>` into the running test's
/// target directory (a no-op when it is current), once per test process.
pub fn workspace_binary(override_var: &str, name: &str) -> PathBuf {
    workspace_binary_of(override_var, name, name)
}

/// [`workspace_binary`] for the binary `name` of the package `package` (e.g. the CLI's
/// `kubectl-nodewright` of `nodewright-cli`).
pub fn workspace_binary_of(override_var: &str, package: &str, name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    if let Some(path) = std::env::var_os(override_var) {
        let path = PathBuf::from(path);
        // A path that is not there would fail every test that runs it with a bare "No such file
        // or directory": say which variable points where, and how to get the file.
        assert!(
            path.is_file(),
            "{override_var}={} is not a file: build it (cargo build -p {package} --bin {name}, or \
             cargo test --workspace --no-run, which builds it for {package}'s integration tests) \
             or unset {override_var} to have the suite build it",
            path.display()
        );
        return path;
    }
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, path)) = built.iter().find(|(n, _)| n == name) {
        return path.clone();
    }
    let exe = std::env::current_exe().expect("test executable");
    // <target>/debug/deps/<test> -> <target>/debug
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir")
        .to_path_buf();
    let target_dir = profile_dir.parent().expect("target dir").to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args(["build", "-p", package, "--bin", name])
        .env("CARGO_TARGET_DIR", &target_dir)
        .current_dir(crate::repo_dir())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building {name} failed");
    let path = profile_dir.join(name);
    built.push((name.to_owned(), path.clone()));
    path
}
