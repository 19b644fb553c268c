//! Shared by the chart suites: finding helm, rendering the chart, and reading rendered objects.

#![allow(dead_code)]

pub mod services;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The repository root.
pub fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The chart directory.
pub fn chart_dir() -> PathBuf {
    repo_dir().join("chart")
}

/// The helm binary: `$NODEWRIGHT_HELM`, else the one tests/controlplane/build.sh built (building
/// it first if needed, as the cluster fixture does), else `helm` from PATH when an external cluster
/// is used.
pub fn helm() -> PathBuf {
    static HELM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HELM.get_or_init(find_helm).clone()
}

fn find_helm() -> PathBuf {
    if let Some(path) = std::env::var_os("NODEWRIGHT_HELM") {
        return PathBuf::from(path);
    }
    if std::env::var_os(nodewright_e2e::ENV_EXTERNAL_KUBECONFIG).is_some() {
        return PathBuf::from("helm");
    }
    let build = repo_dir().join("tests/controlplane/build.sh");
    let printed = Command::new(&build)
        .arg("--print-dir")
        .output()
        .ok()
        .filter(|o| o.status.success());
    let output = match printed {
        Some(o) => o,
        None => Command::new(&build)
            .stderr(std::process::Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", build.display())),
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let dir = text
        .lines()
        .last()
        .unwrap_or_else(|| panic!("{} printed no directory", build.display()));
    PathBuf::from(dir.trim()).join("helm")
}

/// Runs helm; stdout, or stderr as the error.
pub fn run_helm(args: &[&str]) -> Result<String, String> {
    let output = Command::new(helm())
        .args(args)
        .output()
        .map_err(|e| format!("cannot run helm: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// Parses a multi-document manifest into JSON values (empty documents dropped).
pub fn parse_manifest(text: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .filter_map(|doc| {
            let v: Value = serde::Deserialize::deserialize(doc).expect("rendered YAML parses");
            (!v.is_null()).then_some(v)
        })
        .collect()
}

/// `helm template <release> chart -n <ns> <args>`: the rendered objects, or helm's error.
pub fn render(release: &str, namespace: &str, args: &[&str]) -> Result<Vec<Value>, String> {
    let chart = chart_dir();
    let chart = chart.to_string_lossy();
    let mut all = vec![
        "template",
        release,
        chart.as_ref(),
        "--namespace",
        namespace,
    ];
    all.extend_from_slice(args);
    run_helm(&all).map(|text| parse_manifest(&text))
}

/// The object of `kind` named `name`.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| {
            panic!(
                "no {kind} {name} among: {:?}",
                docs.iter()
                    .map(|d| format!("{}/{}", d["kind"], d["metadata"]["name"]))
                    .collect::<Vec<_>>()
            )
        })
}

/// The object of `kind` named `name` in `namespace`.
pub fn find_in<'a>(docs: &'a [Value], kind: &str, namespace: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| {
            d["kind"] == kind
                && d["metadata"]["name"] == name
                && d["metadata"]["namespace"] == namespace
        })
        .unwrap_or_else(|| panic!("no {kind} {namespace}/{name}"))
}

/// All objects of `kind`.
pub fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The first container of a Deployment.
pub fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

/// A container's env as (name, literal value or `None` for valueFrom).
pub fn env(container: &Value) -> Vec<(String, Option<String>)> {
    container["env"]
        .as_array()
        .map(|vars| {
            vars.iter()
                .map(|v| {
                    (
                        v["name"].as_str().unwrap_or_default().to_owned(),
                        v["value"].as_str().map(str::to_owned),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The literal value of env var `name`.
pub fn env_value(container: &Value, name: &str) -> Option<String> {
    env(container)
        .into_iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v)
}
