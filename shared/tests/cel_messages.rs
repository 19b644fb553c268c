//! The CRD's CEL `messageExpression`s, evaluated client-side (kube-cel): each rule about one package
//! key or one dependsOn entry names it, and names the same one on every evaluation although maps are
//! iterated in no particular order. A messageExpression that fails to evaluate falls back to the
//! static message silently, so these tests compare whole messages. The end-to-end suite
//! (`tests/e2e/tests/controlplane.rs`) checks the same messages on a real kube-apiserver, which also
//! enforces the cost budget.

use kube::CustomResourceExt;
use kube::core::cel::Validator;
use nodewright_shared::api::NodeWright;
use nodewright_shared::crd::definitions;
use serde_json::{Value, json};

fn nodewright_schema() -> Value {
    let crd = definitions()
        .into_iter()
        .find(|c| c.spec.names.kind == "NodeWright")
        .expect("a NodeWright CRD");
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("schema");
    serde_json::to_value(schema).expect("schema to json")
}

/// The CEL messages for a NodeWright with these packages, sorted.
fn messages(packages: Value) -> Vec<String> {
    let object = json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": "cel"},
        "spec": {"packages": packages}
    });
    let mut out: Vec<String> = match Validator::new().validate(&nodewright_schema(), &object, None)
    {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .as_slice()
            .iter()
            .map(|e| e.message.clone())
            .collect(),
    };
    out.sort();
    out
}

fn pkg(version: &str) -> Value {
    json!({"version": version, "image": "ghcr.io/example/p"})
}

#[test]
fn a_valid_nodewright_has_no_messages() {
    let mut app = pkg("1.0.0");
    app["dependsOn"] = json!({"tools": "1.0.0"});
    app["name"] = json!("app");
    assert_eq!(
        messages(json!({"tools": pkg("1.0.0"), "app": app})),
        Vec::<String>::new()
    );
}

#[test]
fn name_differing_from_its_key_names_the_key_and_the_value() {
    let mut tools = pkg("1.0.0");
    tools["name"] = json!("other");
    let mut zeta = pkg("1.0.0");
    zeta["name"] = json!("omega");
    assert_eq!(
        messages(json!({"zeta": zeta, "tools": tools, "ok": pkg("1.0.0")})),
        [
            "spec.packages.tools.name: name \"other\" differs from the package key \"tools\": leave name unset (it is filled from the key) or set it to \"tools\""
        ]
    );
}

#[test]
fn bad_package_key_is_named() {
    assert_eq!(
        messages(json!({"Bad_Name": pkg("1.0.0"), "z": pkg("1.0.0"), "fine": pkg("1.0.0")})),
        [
            "spec.packages.Bad_Name: package name \"Bad_Name\" is not valid: use 2 to 43 lowercase letters, digits or '-', starting and ending with a letter"
        ]
    );
}

#[test]
fn dependency_on_a_missing_package_names_the_package_and_the_dependency() {
    let mut app = pkg("1.0.0");
    app["dependsOn"] = json!({"tools": "1.0.0", "zeta": "1.0.0", "ghost": "2.0.0"});
    let mut zz = pkg("1.0.0");
    zz["dependsOn"] = json!({"nothing": "1.0.0"});
    assert_eq!(
        messages(json!({"tools": pkg("1.0.0"), "app": app, "zz": zz})),
        [
            "spec.packages.app.dependsOn.ghost: depends on \"ghost|2.0.0\", but there is no package \"ghost\" in this NodeWright: add it to spec.packages or remove this entry"
        ]
    );
}

#[test]
fn dependency_on_another_version_names_both_versions() {
    let mut app = pkg("1.0.0");
    app["dependsOn"] = json!({"tools": "2.0.0"});
    assert_eq!(
        messages(json!({"tools": pkg("1.0.0"), "app": app})),
        [
            "spec.packages.app.dependsOn.tools: depends on \"tools|2.0.0\", which is not in this NodeWright (it has \"tools|1.0.0\"): set the dependency to \"1.0.0\", or change the version of tools"
        ]
    );
}

#[test]
fn dependency_with_an_empty_version_is_named_by_both_rules() {
    let mut app = pkg("1.0.0");
    app["dependsOn"] = json!({"tools": "", "base": ""});
    assert_eq!(
        messages(json!({"tools": pkg("1.0.0"), "base": pkg("3.1.0"), "app": app})),
        [
            // The rule on the package's dependsOn map cannot see the package key (the apiserver puts
            // it in the field path); the rule on spec.packages names both.
            "dependsOn.base: the version of \"base\" is empty: write the exact version of base this package needs",
            "spec.packages.app.dependsOn.base: the version of \"base\" is empty: write the exact version of base this package needs (this NodeWright has base 3.1.0)",
        ]
    );
}

/// The offending key named is the smallest, whatever order the map is iterated in: the same object
/// gets the same message every time, for every rule.
#[test]
fn the_smallest_offending_key_is_named_every_time() {
    let mut packages = serde_json::Map::new();
    for i in (0..40).rev() {
        let mut p = pkg("1.0.0");
        p["name"] = json!(format!("wrong-{i:02}x"));
        p["dependsOn"] = json!({"ghost-b": "1.0.0", format!("ghost-{i:02}a"): "1.0.0"});
        if i == 7 {
            p["dependsOn"]["ghost-c"] = json!("");
        }
        packages.insert(format!("pkg-{i:02}x"), p);
        packages.insert(format!("Bad-{i:02}"), pkg("1.0.0"));
    }
    let packages = Value::Object(packages);
    for _ in 0..5 {
        assert_eq!(
            messages(packages.clone()),
            [
                "dependsOn.ghost-c: the version of \"ghost-c\" is empty: write the exact version of ghost-c this package needs",
                "spec.packages.Bad-00: package name \"Bad-00\" is not valid: use 2 to 43 lowercase letters, digits or '-', starting and ending with a letter",
                "spec.packages.pkg-00x.dependsOn.ghost-00a: depends on \"ghost-00a|1.0.0\", but there is no package \"ghost-00a\" in this NodeWright: add it to spec.packages or remove this entry",
                "spec.packages.pkg-00x.name: name \"wrong-00x\" differs from the package key \"pkg-00x\": leave name unset (it is filled from the key) or set it to \"pkg-00x\"",
            ]
        );
    }
}

/// The static messages stay as the fallback the apiserver uses when a messageExpression cannot
/// produce a message (a key over 5 KiB or with a line break); kube-cel has the same fallback.
#[test]
fn every_message_expression_keeps_a_static_message() {
    let crd = serde_json::to_value(NodeWright::crd()).expect("json");
    let mut rules = Vec::new();
    collect(&crd, &mut rules);
    let with_expression: Vec<_> = rules
        .iter()
        .filter(|r| r.get("messageExpression").is_some())
        .collect();
    assert_eq!(with_expression.len(), 4, "{rules:#?}");
    for r in with_expression {
        assert!(
            r.get("message")
                .and_then(Value::as_str)
                .is_some_and(|m| !m.is_empty()),
            "{r}"
        );
    }
}

fn collect(node: &Value, out: &mut Vec<Value>) {
    match node {
        Value::Object(map) => {
            if map.contains_key("rule") {
                out.push(node.clone());
            }
            map.values().for_each(|v| collect(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        _ => {}
    }
}
