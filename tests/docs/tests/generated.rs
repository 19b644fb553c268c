//! The generated files are current: docs/reference/metrics.md from the services' metric registries,
//! and the Grafana dashboard from tests/docs/src/dashboard.rs (as crdgen's check keeps crds/).

#[test]
fn generated_files_are_up_to_date() {
    let files = nodewright_docs::generated().unwrap_or_else(|e| panic!("{e}"));
    let root = nodewright_docs::repo_dir();
    let mut stale = Vec::new();
    for (path, text) in files {
        let on_disk = std::fs::read_to_string(root.join(path)).unwrap_or_default();
        if on_disk != text {
            stale.push(path);
        }
    }
    assert!(
        stale.is_empty(),
        "stale: {} (run `cargo run -p nodewright-docs --bin docgen` and commit the result)",
        stale.join(", ")
    );
}

#[test]
fn the_reference_documents_every_exported_series() {
    let families = nodewright_docs::catalogue::families().unwrap_or_else(|e| panic!("{e}"));
    let page = nodewright_docs::metrics_doc::render(&families);
    for f in &families {
        assert!(
            page.contains(&format!("`{}", f.name)),
            "{} undocumented",
            f.name
        );
    }
    // What the issue asks the services to export is there.
    let names = nodewright_docs::catalogue::series_names(&families);
    for name in [
        "nodewright_stage_duration_seconds_bucket",
        "nodewright_stage_attempts_count",
        "nodewright_stage_timeouts_total",
        "nodewright_rollout_current_batch",
        "nodewright_rollout_batch_completed_nodes",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "nodewright_webhook_certificate_expiry_timestamp_seconds",
    ] {
        assert!(names.contains(name), "{name} is not exported: {names:?}");
    }
}
