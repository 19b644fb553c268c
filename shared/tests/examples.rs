//! The manifests in `examples/` against the generated CRD schemas, with the CRDs' CEL rules evaluated
//! client-side (kube-cel). The end-to-end suite applies the same files to a real kube-apiserver; this
//! test keeps the examples and the CEL rules honest without one.

use std::path::{Path, PathBuf};

use kube::core::cel::Validator;
use nodewright_shared::api::{DeploymentPolicy, NodeWright};
use nodewright_shared::crd::definitions;
use serde_json::Value;

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// The header every invalid example carries.
struct Expectation {
    rule: String,
    enforced_by: String,
    expect_error: String,
}

fn header(text: &str, path: &Path) -> Expectation {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("# {name}: ")))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("{} has no `# {name}:` header line", path.display()))
    };
    Expectation {
        rule: field("rule"),
        enforced_by: field("enforced-by"),
        expect_error: field("expect-error"),
    }
}

fn schema_for(kind: &str) -> Value {
    let crd = definitions()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for kind {kind}"));
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("schema");
    serde_json::to_value(schema).expect("schema to json")
}

fn load(path: &Path) -> (String, Value) {
    let text = std::fs::read_to_string(path).expect("readable example");
    let value: Value = yaml_serde::from_str(&text).expect("example is YAML");
    (text, value)
}

fn cel_errors(object: &Value) -> Vec<String> {
    let kind = object["kind"].as_str().expect("example has a kind");
    match Validator::new().validate(&schema_for(kind), object, None) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn valid_examples_decode_and_pass_every_cel_rule() {
    for name in ["nodewright.yaml", "deploymentpolicy.yaml"] {
        let path = examples_dir().join(name);
        let (_, object) = load(&path);
        assert_eq!(cel_errors(&object), Vec::<String>::new(), "{name}");
        match object["kind"].as_str() {
            Some("NodeWright") => {
                let nw: NodeWright = serde_json::from_value(object).expect("typed NodeWright");
                assert_eq!(nw.spec.packages.len(), 3);
                assert!(nw.spec.packages.values().any(|p| !p.depends_on.is_empty()));
                assert!(nw.spec.packages.values().any(|p| p.interrupt.is_some()));
                assert!(
                    nw.spec
                        .packages
                        .values()
                        .any(|p| !p.config_interrupts.is_empty())
                );
                assert!(nw.spec.packages.values().any(|p| p.resources.is_some()));
                assert!(nw.spec.packages.values().any(|p| p.stage_timeout.is_some()));
            }
            Some("DeploymentPolicy") => {
                let _: DeploymentPolicy =
                    serde_json::from_value(object).expect("typed DeploymentPolicy");
            }
            other => panic!("unexpected kind {other:?}"),
        }
    }
}

#[test]
fn invalid_examples_break_the_rule_they_name() {
    let mut entries: Vec<_> = std::fs::read_dir(examples_dir().join("invalid"))
        .expect("examples/invalid exists")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    assert!(
        entries.len() >= 30,
        "expected one invalid example per rule, found {}",
        entries.len()
    );
    let mut rules = std::collections::BTreeSet::new();
    let mut cel_rejected = 0;
    for path in entries {
        let (text, object) = load(&path);
        let want = header(&text, &path);
        rules.insert(want.rule.clone());
        let errors = cel_errors(&object);
        match want.enforced_by.as_str() {
            "crd" if !errors.is_empty() => {
                cel_rejected += 1;
                assert!(
                    errors.iter().any(|e| e.contains(&want.expect_error)),
                    "{}: CEL errors {errors:?} do not mention {:?}",
                    path.display(),
                    want.expect_error
                );
            }
            "crd" => {
                // Not a CEL rule: must be one the apiserver's OpenAPI validation enforces, which the
                // end-to-end suite checks against a real kube-apiserver.
                let openapi = [
                    "in body should be",
                    "Required value",
                    "Unsupported value",
                    "Duplicate value",
                ];
                assert!(
                    openapi.iter().any(|m| want.expect_error.contains(m)),
                    "{}: enforced-by crd but no CEL rule rejects it and {:?} is not an OpenAPI message",
                    path.display(),
                    want.expect_error
                );
            }
            "webhook" => assert!(
                errors.is_empty(),
                "{}: a webhook-only example must pass the CRD's CEL rules, got {errors:?}",
                path.display()
            ),
            other => panic!("{}: unknown enforced-by {other:?}", path.display()),
        }
    }
    assert!(
        cel_rejected >= 12,
        "only {cel_rejected} examples exercised CEL rules"
    );
    assert!(rules.len() >= 30, "rules covered: {rules:?}");
}
