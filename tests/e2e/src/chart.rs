//! The product's Helm chart as `helm template` renders it, for suites that run the services the
//! way the chart would (its limits, its webhook configurations) without installing it.

/// The objects of the chart rendered as release `nw` in namespace `nodewright` with its default
/// values and `args` (`--set ...`); helm's or the YAML parser's message on failure.
pub async fn render(
    cluster: &crate::Cluster,
    args: &[&str],
) -> Result<Vec<serde_json::Value>, String> {
    let chart = crate::repo_dir().join("chart");
    let chart = chart.to_string_lossy();
    let mut all = vec!["template", "nw", chart.as_ref(), "-n", "nodewright"];
    all.extend_from_slice(args);
    let rendered = cluster.helm(&all).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(&rendered) {
        let value: serde_json::Value = serde::Deserialize::deserialize(doc)
            .map_err(|e| format!("rendered chart YAML: {e}"))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}
