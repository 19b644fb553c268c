//! Writes the generated CRDs (`crds/*.yaml`) from the Rust API types.
//!
//! Usage: `crdgen [--check] [DIR...]` (default DIR: the workspace's `crds/`). With `--check` nothing is
//! written and the exit code is 1 when any file differs, naming it, so CI and hooks can catch a stale copy.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut check = false;
    let mut dirs = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                println!("usage: crdgen [--check] [DIR...]  (default DIR: <workspace>/crds)");
                return ExitCode::SUCCESS;
            }
            other if other.starts_with('-') => {
                eprintln!("crdgen: unknown option {other:?}; usage: crdgen [--check] [DIR...]");
                return ExitCode::from(2);
            }
            dir => dirs.push(PathBuf::from(dir)),
        }
    }
    if dirs.is_empty() {
        dirs.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds"));
    }
    let files = match nodewright_shared::crd::render() {
        Ok(files) => files,
        Err(e) => {
            eprintln!("crdgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stale = false;
    for dir in &dirs {
        for file in &files {
            let path = dir.join(&file.file_name);
            let current = std::fs::read_to_string(&path).ok();
            if current.as_deref() == Some(file.yaml.as_str()) {
                continue;
            }
            if check {
                eprintln!("crdgen: {} is out of date", path.display());
                stale = true;
                continue;
            }
            if let Err(e) =
                std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &file.yaml))
            {
                eprintln!("crdgen: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            println!("wrote {}", path.display());
        }
    }
    if stale {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
