//! `promtool check rules` and `promtool test rules` on the chart's PrometheusRule as helm renders
//! it with the default values (promtool built from the Prometheus Go module by
//! tests/prometheus/build.sh): every alert fires when it should and stays quiet when it should not.

#[test]
fn the_chart_alerts_pass_their_promtool_unit_tests() {
    let rules = nodewright_docs::tools::rendered_rules(&[]).unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("rules.yaml"),
        yaml_serde::to_string(&rules).expect("YAML"),
    )
    .expect("write rules");
    let tests = nodewright_docs::repo_dir().join("tests/docs/alerts/nodewright.test.yaml");
    std::fs::copy(&tests, dir.path().join("nodewright.test.yaml")).expect("copy tests");
    nodewright_docs::tools::promtool_in(
        dir.path(),
        &[
            &["check", "rules", "rules.yaml"],
            &["test", "rules", "nodewright.test.yaml"],
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}
