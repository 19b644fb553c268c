//! The shipped examples against the rules: every valid example is admitted, every example whose header
//! says `enforced-by: webhook` is denied with its `expect-error` text, and every CRD-enforced example
//! that still decodes is denied too (the webhook is the layer that reports everything), with its
//! `expect-webhook-error` text when it has one (the CRD's own message is `expect-error`, which
//! `tests/e2e/tests/crds.rs` checks on a real apiserver without the webhook).

use std::fs;
use std::path::{Path, PathBuf};

use nodewright_shared::api::{DeploymentPolicy, NodeWright};

use super::findings::Verdict;
use super::testing::Cluster;
use super::{Restrictions, validate_deployment_policy, validate_nodewright};

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// The cluster of the examples: exactly one policy, the one examples/deploymentpolicy.yaml creates.
fn cluster() -> Cluster {
    Cluster::with_policies(&["gpu-rollout"])
}

/// The value of a `# key: value` header line, with trailing spaces kept (`expect-error` values may
/// end with one).
fn header<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let prefix = format!("# {key}:");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|v| v.strip_prefix(' ').unwrap_or(v))
}

enum Decoded {
    NodeWright(Box<NodeWright>),
    Policy(Box<DeploymentPolicy>),
}

fn decode(text: &str) -> Result<Decoded, String> {
    let value: yaml_serde::Value = yaml_serde::from_str(text).map_err(|e| e.to_string())?;
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default()
        .to_owned();
    match kind.as_str() {
        "NodeWright" => yaml_serde::from_value(value)
            .map(|o| Decoded::NodeWright(Box::new(o)))
            .map_err(|e| e.to_string()),
        "DeploymentPolicy" => yaml_serde::from_value(value)
            .map(|o| Decoded::Policy(Box::new(o)))
            .map_err(|e| e.to_string()),
        other => Err(format!("unknown kind {other:?}")),
    }
}

fn validate(decoded: &Decoded) -> Verdict {
    match decoded {
        Decoded::NodeWright(nw) => {
            validate_nodewright(nw, None, &cluster(), &Restrictions::default())
        }
        Decoded::Policy(p) => validate_deployment_policy(p),
    }
}

fn read(path: &Path) -> String {
    match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

#[test]
fn valid_examples_are_admitted() {
    for name in ["nodewright.yaml", "deploymentpolicy.yaml"] {
        let text = read(&examples_dir().join(name));
        let decoded = match decode(&text) {
            Ok(d) => d,
            Err(e) => panic!("{name}: {e}"),
        };
        let v = validate(&decoded);
        assert!(v.is_allowed(), "{name} denied:\n{}", v.message());
        // The only warnings: packages pulled by tag (no containerSHA), one per such package.
        let unpinned: Vec<String> = match &decoded {
            Decoded::NodeWright(nw) => nw
                .spec
                .packages
                .iter()
                .filter(|(_, p)| p.container_sha.is_none())
                .map(|(k, _)| format!("spec.packages.{k}: no containerSHA"))
                .collect(),
            Decoded::Policy(_) => Vec::new(),
        };
        assert_eq!(v.warnings.len(), unpinned.len(), "{name}: {:?}", v.warnings);
        for (warning, prefix) in v.warnings.iter().zip(&unpinned) {
            assert!(warning.starts_with(prefix), "{name}: {warning}");
        }
    }
}

#[test]
fn invalid_examples_are_denied_with_their_expected_error() {
    let dir = examples_dir().join("invalid");
    let mut files: Vec<PathBuf> = match fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect(),
        Err(e) => panic!("{}: {e}", dir.display()),
    };
    files.sort();
    let mut webhook_checked = 0;
    let mut failures = Vec::new();
    for path in &files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = read(path);
        let enforced_by = header(&text, "enforced-by").map(str::trim);
        let expect = header(&text, "expect-error");
        match enforced_by {
            Some("webhook") => {
                webhook_checked += 1;
                let Some(expect) = expect else {
                    failures.push(format!("{name}: no expect-error header"));
                    continue;
                };
                let decoded = match decode(&text) {
                    Ok(d) => d,
                    Err(e) => {
                        failures.push(format!("{name}: does not decode: {e}"));
                        continue;
                    }
                };
                let v = validate(&decoded);
                if !v.errors.iter().any(|e| e.to_string().contains(expect)) {
                    failures.push(format!(
                        "{name}: no error contains {expect:?}; got:\n{}",
                        v.message()
                    ));
                }
            }
            Some("crd") => {
                // Some CRD-enforced examples cannot even be decoded into the typed structs (unknown
                // enum values, missing required fields): the apiserver rejects those before us.
                let expect_webhook = header(&text, "expect-webhook-error");
                match decode(&text) {
                    Ok(decoded) => {
                        let v = validate(&decoded);
                        if v.is_allowed() {
                            failures.push(format!(
                                "{name}: CRD-enforced, decodes, but the webhook admits it"
                            ));
                        } else if let Some(expect) = expect_webhook
                            && !v.errors.iter().any(|e| e.to_string().contains(expect))
                        {
                            failures.push(format!(
                                "{name}: no error contains {expect:?}; got:\n{}",
                                v.message()
                            ));
                        }
                    }
                    Err(e) if expect_webhook.is_some() => failures.push(format!(
                        "{name}: has an expect-webhook-error but does not decode: {e}"
                    )),
                    Err(_) => {}
                }
            }
            other => failures.push(format!("{name}: unexpected enforced-by {other:?}")),
        }
    }
    assert!(
        webhook_checked > 0,
        "no webhook-enforced examples in {}",
        dir.display()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
