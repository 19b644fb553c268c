//! helm and promtool, as this repository builds them (cached outside the repository): helm from
//! tests/controlplane/build.sh, promtool from tests/prometheus/build.sh (building them the first
//! time, printing the build's progress).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Runs `script [args]` (progress to stderr) and returns the directory its last stdout line names.
fn built_dir(script: &str, args: &[&str]) -> Result<PathBuf, String> {
    let path = crate::repo_dir().join(script);
    let output = Command::new(&path)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    if !output.status.success() {
        return Err(format!("{} failed ({})", path.display(), output.status));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .ok_or_else(|| format!("{} printed no directory", path.display()))
}

/// The control plane's bin directory (kubectl, helm, ...).
pub fn controlplane_bin() -> Result<PathBuf, String> {
    static DIR: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| built_dir("tests/controlplane/build.sh", &[]))
        .clone()
}

/// helm.
pub fn helm() -> Result<PathBuf, String> {
    Ok(controlplane_bin()?.join("helm"))
}

/// promtool (and, with `with_prometheus`, the directory also holds prometheus).
pub fn prometheus_bin(with_prometheus: bool) -> Result<PathBuf, String> {
    let args: &[&str] = if with_prometheus {
        &["--with-prometheus"]
    } else {
        &[]
    };
    built_dir("tests/prometheus/build.sh", args)
}

/// `helm template <release> chart -n <namespace> <args>`: the rendered objects as JSON.
pub fn render_chart(
    release: &str,
    namespace: &str,
    args: &[&str],
) -> Result<Vec<serde_json::Value>, String> {
    let chart = crate::repo_dir().join("chart");
    let output = Command::new(helm()?)
        .arg("template")
        .arg(release)
        .arg(&chart)
        .args(["--namespace", namespace])
        .args(args)
        .output()
        .map_err(|e| format!("cannot run helm: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let mut docs = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(&text) {
        let v: serde_json::Value =
            serde::Deserialize::deserialize(doc).map_err(|e| format!("rendered YAML: {e}"))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// The rule groups of the chart's PrometheusRule as rendered with `args`.
pub fn rendered_rules(args: &[&str]) -> Result<serde_json::Value, String> {
    let mut all = vec!["--set", "metrics.prometheusRule.enabled=true"];
    all.extend_from_slice(args);
    let docs = render_chart("nw", "nodewright", &all)?;
    docs.into_iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .map(|d| serde_json::json!({"groups": d["spec"]["groups"]}))
        .ok_or_else(|| "no PrometheusRule rendered".to_owned())
}

/// Runs promtool (built by tests/prometheus/build.sh) with each of `runs` in `dir`; the first
/// failure is returned with promtool's output.
pub fn promtool_in(dir: &Path, runs: &[&[&str]]) -> Result<(), String> {
    let promtool = prometheus_bin(false)?.join("promtool");
    for args in runs {
        let out = Command::new(&promtool)
            .args(*args)
            .current_dir(dir)
            .output()
            .map_err(|e| format!("running {}: {e}", promtool.display()))?;
        if !out.status.success() {
            return Err(format!(
                "promtool {}:\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(())
}
