//! The CRDs as users meet them, on a real kube-apiserver with the real kubectl: every name a user
//! types for either kind (singular, plural, short name, fully qualified) works with get, describe,
//! patch and delete, the shared category lists both kinds, and the CEL rules about one package key or
//! one dependsOn entry say which one in their rejection (their `messageExpression`s compile, fit
//! the apiserver's cost budget, and evaluate to the message).
//!
//! No webhook runs here: what a user sees for these objects is the schema's verdict, which the
//! apiserver gives before any validating webhook is called.

use std::collections::BTreeMap;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use nodewright_e2e::{Cluster, ClusterOptions};
use serde_json::{Value, json};

const GROUP: &str = "nodewright.nvidia.com";

async fn cluster() -> &'static Cluster {
    let cluster = Cluster::shared(ClusterOptions {
        nodes: 1,
        install_crds: false,
        ..Default::default()
    })
    .await
    .expect("start the shared test cluster");
    // Installed by the tests (idempotent server-side apply), so a CRD the apiserver refuses, e.g.
    // for a CEL rule over the cost budget, fails here with the apiserver's reason.
    cluster
        .install_crds()
        .await
        .unwrap_or_else(|e| panic!("the CRDs in crds/ must install on a real apiserver: {e}"));
    cluster
}

/// Runs the real kubectl with its own discovery cache, so a cache left by an earlier cluster on the
/// same address (with other names or categories) cannot decide how names resolve.
struct Kubectl<'a> {
    cluster: &'a Cluster,
    cache: tempfile::TempDir,
}

impl<'a> Kubectl<'a> {
    fn new(cluster: &'a Cluster) -> Self {
        let cache = tempfile::tempdir().expect("kubectl cache dir");
        Kubectl { cluster, cache }
    }

    async fn run(&self, args: &[&str]) -> Result<String, String> {
        let cache = self.cache.path().to_string_lossy().into_owned();
        let mut all = vec!["--cache-dir", cache.as_str()];
        all.extend_from_slice(args);
        self.cluster.kubectl(&all).await.map_err(|e| e.to_string())
    }

    async fn ok(&self, args: &[&str]) -> String {
        self.run(args)
            .await
            .unwrap_or_else(|e| panic!("`kubectl {}` failed: {e}", args.join(" ")))
    }
}

fn api(client: kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, "v1alpha1", kind);
    Api::all_with(client, &ApiResource::from_gvk_with_plural(&gvk, plural))
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a well-formed object")
}

fn nodewright(name: &str, packages: Value) -> DynamicObject {
    object(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"),
        "kind": "NodeWright",
        "metadata": {"name": name},
        "spec": {"packages": packages}
    }))
}

fn policy(name: &str) -> DynamicObject {
    object(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"),
        "kind": "DeploymentPolicy",
        "metadata": {"name": name},
        "spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}}}
    }))
}

fn pkg(version: &str) -> Value {
    json!({"version": version, "image": "ghcr.io/example/pkg"})
}

/// Every name form of one kind: for each, a fresh object is read, described, annotated and deleted
/// through kubectl with that form alone.
async fn every_form_works(
    kubectl: &Kubectl<'_>,
    api: &Api<DynamicObject>,
    forms: &[&str],
    make: impl Fn(&str) -> DynamicObject,
    prefix: &str,
) {
    for (i, form) in forms.iter().enumerate() {
        let name = format!("{prefix}-{i}-{}", std::process::id());
        api.create(&PostParams::default(), &make(&name))
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));

        let got = kubectl
            .ok(&["get", form, &name, "-o", "jsonpath={.metadata.name}"])
            .await;
        assert_eq!(got, name, "kubectl get {form} {name}");

        let described = kubectl.ok(&["describe", form, &name]).await;
        assert!(
            described
                .lines()
                .any(|l| l.starts_with("Name:") && l.split_whitespace().nth(1) == Some(&name)),
            "kubectl describe {form} {name}:\n{described}"
        );

        let patch = json!({"metadata": {"annotations": {"e2e.nodewright.test/form": form}}});
        kubectl
            .ok(&[
                "patch",
                form,
                &name,
                "--type=merge",
                "-p",
                &patch.to_string(),
            ])
            .await;
        let stored = api
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("read {name}: {e}"));
        assert_eq!(
            stored
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("e2e.nodewright.test/form"))
                .map(String::as_str),
            Some(*form),
            "kubectl patch {form} {name} reached the object"
        );

        kubectl.ok(&["delete", form, &name, "--wait=true"]).await;
        assert!(
            api.get_opt(&name)
                .await
                .unwrap_or_else(|e| panic!("read {name}: {e}"))
                .is_none(),
            "kubectl delete {form} {name} deleted it"
        );
    }
}

#[tokio::test]
async fn kubectl_accepts_every_name_of_both_kinds_and_the_category_lists_both() {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let kubectl = Kubectl::new(cluster);
    let nodewrights = api(client.clone(), "NodeWright", "nodewrights");
    let policies = api(client, "DeploymentPolicy", "deploymentpolicies");

    every_form_works(
        &kubectl,
        &nodewrights,
        &[
            "nodewright",
            "nodewrights",
            "nw",
            "nodewrights.nodewright.nvidia.com",
            "nodewright.nodewright.nvidia.com",
        ],
        |name| nodewright(name, json!({"tools": pkg("1.0.0")})),
        "e2e-form-nw",
    )
    .await;
    every_form_works(
        &kubectl,
        &policies,
        &[
            "deploymentpolicy",
            "deploymentpolicies",
            "nwdp",
            "deploymentpolicies.nodewright.nvidia.com",
            "deploymentpolicy.nodewright.nvidia.com",
        ],
        policy,
        "e2e-form-nwdp",
    )
    .await;

    // The category still lists both kinds.
    let nw = format!("e2e-category-{}", std::process::id());
    nodewrights
        .create(
            &PostParams::default(),
            &nodewright(&nw, json!({"tools": pkg("1.0.0")})),
        )
        .await
        .expect("create NodeWright");
    policies
        .create(&PostParams::default(), &policy(&nw))
        .await
        .expect("create DeploymentPolicy");
    let listed = kubectl.ok(&["get", "nodewright-all", "-o", "name"]).await;
    for want in [
        format!("nodewright.{GROUP}/{nw}"),
        format!("deploymentpolicy.{GROUP}/{nw}"),
    ] {
        assert!(
            listed.lines().any(|l| l == want),
            "`kubectl get nodewright-all` lists {want}:\n{listed}"
        );
    }
    kubectl.ok(&["delete", "nw", &nw]).await;
    kubectl.ok(&["delete", "nwdp", &nw]).await;
}

/// Creates a NodeWright that must be refused as Invalid; returns the apiserver's message.
async fn rejection(api: &Api<DynamicObject>, what: &str, packages: Value) -> String {
    let name = format!("e2e-cel-{}", std::process::id());
    match api
        .create(&PostParams::default(), &nodewright(&name, packages))
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{what}: rejected as Invalid: {status:?}");
            // Older apiservers (1.31 in the matrix) print an object's value as `"object"` between the field
            // path and the rule's message (`Invalid value: "object": ...`); later ones print
            // nothing there. The field path and the message, what a user reads, are the same.
            status
                .message
                .replace("Invalid value: \"object\": ", "Invalid value: ")
        }
        other => panic!("{what}: must be rejected, got {other:?}"),
    }
}

fn assert_names(message: &str, what: &str, wants: &[&str]) {
    for want in wants {
        assert!(
            message.contains(want),
            "{what}: the rejection must contain {want:?}, got: {message}"
        );
    }
}

#[tokio::test]
async fn cel_rejections_name_the_offending_package_key_and_dependency() {
    let cluster = cluster().await;
    let api = api(
        cluster.client().await.expect("client"),
        "NodeWright",
        "nodewrights",
    );
    let with = |version: &str, extra: Value| {
        let mut p = pkg(version);
        if let (Some(p), Some(extra)) = (p.as_object_mut(), extra.as_object()) {
            p.extend(extra.clone());
        }
        p
    };

    let what = "name differing from its key";
    let message = rejection(
        &api,
        what,
        json!({"tools": with("1.0.0", json!({"name": "other"})), "ok": pkg("1.0.0")}),
    )
    .await;
    assert_names(
        &message,
        what,
        &[
            "spec.packages: Invalid value",
            "spec.packages.tools.name: name \"other\" differs from the package key \"tools\": leave name unset (it is filled from the key) or set it to \"tools\"",
        ],
    );

    let what = "package key breaking the name pattern";
    let message = rejection(
        &api,
        what,
        json!({"Bad_Name": pkg("1.0.0"), "ok": pkg("1.0.0")}),
    )
    .await;
    assert_names(
        &message,
        what,
        &[
            "spec.packages.Bad_Name: package name \"Bad_Name\" is not valid: use 2 to 43 lowercase letters, digits or '-', starting and ending with a letter",
        ],
    );

    let what = "dependency on a package that does not exist";
    let message = rejection(
        &api,
        what,
        json!({"tools": pkg("1.0.0"), "app": with("1.0.0", json!({"dependsOn": {"tools": "1.0.0", "ghost": "2.0.0"}}))}),
    )
    .await;
    assert_names(
        &message,
        what,
        &[
            "spec.packages.app.dependsOn.ghost: depends on \"ghost|2.0.0\", but there is no package \"ghost\" in this NodeWright: add it to spec.packages or remove this entry",
        ],
    );

    let what = "dependency on another version";
    let message = rejection(
        &api,
        what,
        json!({"tools": pkg("1.0.0"), "app": with("1.0.0", json!({"dependsOn": {"tools": "2.0.0"}}))}),
    )
    .await;
    assert_names(
        &message,
        what,
        &[
            "spec.packages.app.dependsOn.tools: depends on \"tools|2.0.0\", which is not in this NodeWright (it has \"tools|1.0.0\"): set the dependency to \"1.0.0\", or change the version of tools",
        ],
    );

    // Both rules fire: the one on the package's dependsOn map (the apiserver's field path names the
    // package) and the one on spec.packages (its message names both).
    let what = "dependency with an empty version";
    let message = rejection(
        &api,
        what,
        json!({"tools": pkg("1.0.0"), "app": with("1.0.0", json!({"dependsOn": {"tools": ""}}))}),
    )
    .await;
    assert_names(
        &message,
        what,
        &[
            "spec.packages[app].dependsOn: Invalid value: dependsOn.tools: the version of \"tools\" is empty: write the exact version of tools this package needs",
            "spec.packages.app.dependsOn.tools: the version of \"tools\" is empty: write the exact version of tools this package needs (this NodeWright has tools 1.0.0)",
        ],
    );

    // Several offenders of every rule: the smallest key is named, the same one every time, although
    // the apiserver iterates maps in no fixed order.
    let what = "several offenders of every rule";
    let mut many = serde_json::Map::new();
    for i in 0..20 {
        many.insert(
            format!("pkg-{i:02}x"),
            with(
                "1.0.0",
                json!({"name": format!("wrong-{i:02}x"), "dependsOn": {"ghost-b": "1.0.0", format!("ghost-{i:02}a"): "1.0.0"}}),
            ),
        );
        many.insert(format!("Bad-{i:02}"), pkg("1.0.0"));
    }
    for _ in 0..3 {
        let message = rejection(&api, what, Value::Object(many.clone())).await;
        assert_names(
            &message,
            what,
            &[
                "spec.packages.pkg-00x.name: name \"wrong-00x\" differs from the package key \"pkg-00x\"",
                "spec.packages.Bad-00: package name \"Bad-00\" is not valid",
                "spec.packages.pkg-00x.dependsOn.ghost-00a: depends on \"ghost-00a|1.0.0\", but there is no package \"ghost-00a\"",
            ],
        );
        for other in ["pkg-01x", "Bad-01", "ghost-b"] {
            assert!(!message.contains(other), "{what}: names {other}: {message}");
        }
    }

    // A message longer than the apiserver allows (5 KiB) falls back to the static message.
    let what = "a key too long to be quoted in a message";
    let long = format!("a{}", "b".repeat(6000));
    let mut packages = serde_json::Map::new();
    packages.insert(long, pkg("1.0.0"));
    let message = rejection(&api, what, Value::Object(packages)).await;
    assert_names(
        &message,
        what,
        &["package names (the keys of spec.packages) must be 2 to 43 lowercase letters"],
    );

    // The largest NodeWright the CRD admits: 100 packages with the longest names (43 characters),
    // 100 dependsOn entries each, the longest versions (63 characters), every entry wrong. The
    // rules and their messages stay within the apiserver's runtime cost limits (over them, the
    // apiserver says "call cost exceeds limit" instead of the message).
    let what = "100 packages with 100 wrong dependencies each";
    let keys: Vec<String> = (0..100)
        .map(|i| format!("p{i:02}{}z", "x".repeat(40)))
        .collect();
    let version = format!("1.{}", "0".repeat(61));
    let wrong = format!("9.{}", "9".repeat(61));
    let deps: BTreeMap<&str, &str> = keys.iter().map(|k| (k.as_str(), wrong.as_str())).collect();
    let largest: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| (k.clone(), with(&version, json!({"dependsOn": deps}))))
        .collect();
    let message = rejection(&api, what, Value::Object(largest)).await;
    let first = &keys[0];
    assert_names(
        &message,
        what,
        &[&format!(
            "spec.packages.{first}.dependsOn.{first}: depends on \"{first}|{wrong}\", which is not in this NodeWright (it has \"{first}|{version}\")"
        )],
    );
    assert!(
        !message.contains("cost"),
        "{what}: no cost-limit error expected: {message}"
    );
}

/// A package version is part of host paths and label values: the CRD refuses an odd one itself
/// (issue 22 item 6), so a webhook that is down under `failurePolicy: Ignore` lets none through.
#[tokio::test]
async fn the_crd_refuses_a_version_the_webhook_would_refuse() {
    let cluster = cluster().await;
    let api = api(
        cluster.client().await.expect("client"),
        "NodeWright",
        "nodewrights",
    );
    for bad in [
        "1.0 .0",
        "1.0.0/..",
        "../../etc",
        "1..0",
        "1.0.0+build",
        "1.0.0-",
    ] {
        let what = format!("version {bad:?}");
        let message = rejection(&api, &what, json!({"tools": pkg(bad)})).await;
        assert_names(
            &message,
            &what,
            &[
                "spec.packages[tools].version",
                "version must be a semantic version such as 1.2.3",
            ],
        );
    }
    // The shapes the webhook accepts are accepted here too.
    for (i, good) in ["1", "v1.2", "1.2.3-rc.1"].into_iter().enumerate() {
        let name = format!("e2e-version-{i}-{}", std::process::id());
        api.create(
            &PostParams::default(),
            &nodewright(&name, json!({"tools": pkg(good)})),
        )
        .await
        .unwrap_or_else(|e| panic!("version {good:?} must be accepted: {e}"));
        api.delete(&name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("delete {name}: {e}"));
    }
}

/// The CRD is the safety net when the webhook is not asked (down, under `failurePolicy: Ignore`):
/// every example of `examples/invalid` whose rule the CRD enforces is refused by the apiserver alone
/// with the message its `expect-error` header names (with the webhook, its mutating endpoint answers
/// first with the full list; `webhook/tests/e2e_admission.rs`).
#[tokio::test]
async fn every_crd_enforced_example_is_refused_without_the_webhook() {
    let cluster = cluster().await;
    let kubectl = Kubectl::new(cluster);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/invalid");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    let header = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("# {name}: ")))
            .map(str::to_owned)
    };
    let mut checked = 0;
    let mut failures = Vec::new();
    for path in &paths {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if header(&text, "enforced-by").as_deref() != Some("crd") {
            continue;
        }
        let Some(expected) = header(&text, "expect-error") else {
            failures.push(format!("{}: no expect-error", path.display()));
            continue;
        };
        checked += 1;
        match kubectl.run(&["apply", "-f", &path.to_string_lossy()]).await {
            Ok(out) => failures.push(format!("{} was admitted: {out}", path.display())),
            Err(e) if e.contains(&expected) => {}
            Err(e) => failures.push(format!("{}: expected {expected:?} in: {e}", path.display())),
        }
    }
    assert!(checked >= 12, "only {checked} CRD-enforced examples");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
