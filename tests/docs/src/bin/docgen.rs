//! `docgen [--check]`: writes the generated docs/reference/metrics.md and the Grafana dashboard
//! (chart/files/dashboards/nodewright.json); with `--check`, only says which are stale (exit 1).

use std::process::ExitCode;

fn main() -> ExitCode {
    let check = std::env::args().any(|a| a == "--check");
    let files = match nodewright_docs::generated() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let root = nodewright_docs::repo_dir();
    let mut stale = Vec::new();
    for (path, text) in files {
        let full = root.join(path);
        if std::fs::read_to_string(&full).ok().as_deref() == Some(text.as_str()) {
            continue;
        }
        if check {
            stale.push(path);
            continue;
        }
        if let Some(dir) = full.parent()
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            eprintln!("cannot create {}: {e}", dir.display());
            return ExitCode::from(1);
        }
        if let Err(e) = std::fs::write(&full, text) {
            eprintln!("cannot write {}: {e}", full.display());
            return ExitCode::from(1);
        }
        println!("wrote {path}");
    }
    if stale.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "stale: {} (run `cargo run -p nodewright-docs --bin docgen`)",
            stale.join(", ")
        );
        ExitCode::from(1)
    }
}
