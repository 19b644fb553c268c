//! `promtool check rules` and `promtool test rules` on the chart's PrometheusRule as helm renders
//! it with the default values (promtool built from the Prometheus Go module by
//! tests/prometheus/build.sh): every alert fires when it should and stays quiet when it should not.

use std::process::Command;

#[test]
fn the_chart_alerts_pass_their_promtool_unit_tests() {
    let rules = nodewright_docs::tools::rendered_rules(&[]).unwrap_or_else(|e| panic!("{e}"));
    let bin = nodewright_docs::tools::prometheus_bin(false).unwrap_or_else(|e| panic!("{e}"));
    let promtool = bin.join("promtool");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("rules.yaml"),
        yaml_serde::to_string(&rules).expect("YAML"),
    )
    .expect("write rules");
    let tests = nodewright_docs::repo_dir().join("tests/docs/alerts/nodewright.test.yaml");
    std::fs::copy(&tests, dir.path().join("nodewright.test.yaml")).expect("copy tests");
    for args in [
        vec!["check", "rules", "rules.yaml"],
        vec!["test", "rules", "nodewright.test.yaml"],
    ] {
        let out = Command::new(&promtool)
            .args(&args)
            .current_dir(dir.path())
            .output()
            .expect("promtool runs");
        assert!(
            out.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
