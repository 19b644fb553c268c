//! The chart, rendered with the helm this repository builds: `helm lint` in every certificate
//! mode; what each mode renders; that the rendered env, ports and paths are the ones the binaries
//! and Dockerfiles really use; that the CRDs are the generated ones; hardened pods; release-scoped
//! names; and that bad values are refused by the schema or the template checks, naming the value.

mod chart_support;

use std::collections::{BTreeMap, BTreeSet};

use chart_support::{
    chart_dir, container, env, env_value, find, find_in, of_kind, render, repo_dir, run_helm,
};
use nodewright_shared::defaults::OperatorDefaults;
use serde_json::{Value, json};

const NS: &str = "nw-system";
const REL: &str = "nw";
const FULL: &str = "nw-nodewright";
/// The default package namespace of release REL in NS.
const PKG_NS: &str = "nw-system-nw-nodewright-packages";

fn default_render() -> Vec<Value> {
    render(REL, NS, &[]).expect("default values render")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_dir().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn helm_lint_passes_in_every_mode() {
    let chart = chart_dir();
    let chart = chart.to_string_lossy();
    for extra in [
        vec![],
        vec!["--set", "certs.mode=cert-manager"],
        vec![
            "--set",
            "certs.mode=provided",
            "--set",
            "certs.provided.secretName=my-tls",
            "--set",
            "certs.provided.caBundle=QUJD",
        ],
        vec![
            "--set",
            "webhook.url=https://127.0.0.1:9443",
            "--set",
            "webhook.hpa.enabled=true",
        ],
    ] {
        let mut args = vec!["lint", "--strict", chart.as_ref(), "--namespace", NS];
        args.extend(extra.iter().copied());
        run_helm(&args).unwrap_or_else(|e| panic!("helm lint {extra:?}: {e}"));
    }
}

#[test]
fn default_render_has_every_object_with_release_scoped_names() {
    let docs = default_render();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for d in &docs {
        *kinds
            .entry(d["kind"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    let expected: BTreeMap<String, usize> = [
        ("ClusterRole", 4),
        ("ClusterRoleBinding", 2),
        ("ConfigMap", 1),
        ("CustomResourceDefinition", 2),
        ("Deployment", 2),
        ("Lease", 1),
        ("LimitRange", 1),
        ("MutatingWebhookConfiguration", 1),
        ("Namespace", 1),
        ("PodDisruptionBudget", 2),
        ("Role", 3),
        ("RoleBinding", 3),
        ("Secret", 2),
        ("Service", 2),
        ("ServiceAccount", 3),
        ("ValidatingWebhookConfiguration", 1),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_owned(), n))
    .collect();
    assert_eq!(kinds, expected);

    for d in &docs {
        let kind = d["kind"].as_str().unwrap_or_default();
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        if kind == "CustomResourceDefinition" {
            continue;
        }
        match d["metadata"]["namespace"].as_str() {
            Some(ns) => {
                assert!(ns == NS || ns == PKG_NS, "{kind}/{name} in {ns}");
                assert!(name.starts_with(FULL), "{kind}/{name} is release-scoped");
            }
            None if kind == "Namespace" => assert_eq!(name, PKG_NS),
            None => assert!(
                name.starts_with(&format!("{NS}.{FULL}-")),
                "cluster-scoped {kind}/{name} carries namespace and release"
            ),
        }
        assert_eq!(
            d["metadata"]["labels"]["app.kubernetes.io/instance"], REL,
            "{kind}/{name}"
        );
        assert!(name.len() <= 63 || kind.contains("Cluster") || kind.contains("Webhook"));
    }
    assert_eq!(
        of_kind(&docs, "HorizontalPodAutoscaler").len(),
        0,
        "HPA is opt-in"
    );
    for kind in ["ServiceMonitor", "PrometheusRule", "NetworkPolicy"] {
        assert!(of_kind(&docs, kind).is_empty(), "{kind} is opt-in");
    }
    assert!(
        !docs
            .iter()
            .any(|d| d["kind"] == "ConfigMap"
                && d["metadata"]["name"] == format!("{FULL}-dashboard")),
        "the dashboard is opt-in"
    );
}

#[test]
fn two_releases_never_share_a_name() {
    let a = render("one", "team-a", &[]).expect("a");
    let b = render("one", "team-b", &["--set", "crds.install=false"]).expect("b");
    let c = render("two", "team-a", &["--set", "crds.install=false"]).expect("c");
    let key = |d: &Value| {
        format!(
            "{}/{}/{}",
            d["kind"].as_str().unwrap_or_default(),
            d["metadata"]["namespace"].as_str().unwrap_or("-"),
            d["metadata"]["name"].as_str().unwrap_or_default()
        )
    };
    let mut seen = BTreeSet::new();
    for d in a.iter().chain(&b).chain(&c) {
        assert!(seen.insert(key(d)), "{} rendered by two releases", key(d));
    }
    assert_eq!(of_kind(&b, "CustomResourceDefinition").len(), 0);
}

#[test]
fn deployments_match_the_binaries_env_ports_and_images() {
    let docs = default_render();
    let operator = find(&docs, "Deployment", &format!("{FULL}-operator"));
    let webhook = find(&docs, "Deployment", &format!("{FULL}-webhook"));
    assert_eq!(operator["spec"]["replicas"], 2);
    assert_eq!(webhook["spec"]["replicas"], 2);
    let op = container(operator);
    let wh = container(webhook);

    // Every variable the chart sets is one the binary reads.
    let operator_vars = known_vars(&[
        "operator/src/runtime/config.rs",
        "operator/src/webhook_certs/settings.rs",
        "shared/src/defaults.rs",
    ]);
    let webhook_vars = known_vars(&["webhook/src/config.rs", "shared/src/defaults.rs"]);
    for (name, _) in env(op) {
        assert!(
            operator_vars.contains(&name),
            "operator env {name} is not read by the operator"
        );
    }
    for (name, _) in env(wh) {
        assert!(
            webhook_vars.contains(&name),
            "webhook env {name} is not read by the webhook"
        );
    }
    assert_eq!(env_value(op, "LEADER_ELECTION").as_deref(), Some("true"));
    assert_eq!(
        env_value(op, "METRICS_LISTEN").as_deref(),
        Some("0.0.0.0:8080")
    );
    assert_eq!(
        env_value(op, "PROBE_LISTEN").as_deref(),
        Some("0.0.0.0:8081")
    );
    assert_eq!(
        env_value(op, "WEBHOOK_CERTS_MANAGED").as_deref(),
        Some("true")
    );
    let names: Vec<String> = env(op).into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"POD_NAME".to_owned()) && names.contains(&"NAMESPACE".to_owned()));
    assert_eq!(
        env_value(wh, "WEBHOOK_TLS_SECRET").as_deref(),
        Some(format!("{NS}/{FULL}-webhook-tls").as_str())
    );
    assert_eq!(
        env_value(wh, "WEBHOOK_LISTEN").as_deref(),
        Some("0.0.0.0:9443")
    );
    assert_eq!(
        env_value(wh, "WEBHOOK_METRICS_LISTEN").as_deref(),
        Some("0.0.0.0:9090")
    );
    // The load limits reach the webhook, at the defaults its own flags have.
    for (name, value) in [
        ("WEBHOOK_MAX_CONNECTIONS", "512"),
        ("WEBHOOK_MAX_IN_FLIGHT", "64"),
        ("WEBHOOK_MAX_IN_FLIGHT_BYTES", "33554432"),
    ] {
        assert_eq!(env_value(wh, name).as_deref(), Some(value), "{name}");
    }
    assert_eq!(
        env_value(op, "WEBHOOK_SECRET_NAME").as_deref(),
        Some(format!("{FULL}-webhook-tls").as_str())
    );

    // Both read the one defaults ConfigMap, whose keys the shared parser accepts.
    let defaults_name = format!("{FULL}-defaults");
    for c in [op, wh] {
        assert_eq!(
            c["envFrom"][0]["configMapRef"]["name"],
            defaults_name.as_str()
        );
    }
    let cm = find(&docs, "ConfigMap", &defaults_name);
    let data: BTreeMap<String, String> =
        serde_json::from_value(cm["data"].clone()).expect("string data");
    let parsed = OperatorDefaults::from_lookup(|k| data.get(k).cloned()).expect("defaults parse");
    assert_eq!(
        parsed,
        OperatorDefaults::default(),
        "chart defaults = built-in defaults"
    );
    for key in data.keys() {
        assert!(
            operator_vars.contains(key) && webhook_vars.contains(key),
            "{key}"
        );
    }
    // A change of the defaults rolls both Deployments.
    let changed = render(REL, NS, &["--set", "defaults.jobBackoffLimit=5"]).expect("render");
    for name in ["operator", "webhook"] {
        let before = &find(&docs, "Deployment", &format!("{FULL}-{name}"))["spec"]["template"]["metadata"]
            ["annotations"]["checksum/defaults"];
        let after = &find(&changed, "Deployment", &format!("{FULL}-{name}"))["spec"]["template"]["metadata"]
            ["annotations"]["checksum/defaults"];
        assert_ne!(before, after, "{name}");
    }

    // Ports agree with the Dockerfiles, and the images' entrypoints are the binaries.
    for (c, dockerfile, binary) in [
        (op, "operator/Dockerfile", "nodewright-operator"),
        (wh, "webhook/Dockerfile", "nodewright-webhook"),
    ] {
        let text = read(dockerfile);
        let exposed: BTreeSet<u64> = text
            .lines()
            .filter_map(|l| l.strip_prefix("EXPOSE "))
            .flat_map(|l| l.split_whitespace().filter_map(|p| p.parse().ok()))
            .collect();
        let ports: BTreeSet<u64> = c["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .filter_map(|p| p["containerPort"].as_u64())
            .collect();
        assert_eq!(exposed, ports, "{dockerfile}");
        assert!(
            text.contains(&format!("ENTRYPOINT [\"/usr/local/bin/{binary}\"]")),
            "{dockerfile}"
        );
        assert!(
            c.get("command").is_none(),
            "the chart uses the image entrypoint"
        );
        assert!(
            c["image"].as_str().is_some_and(|i| i.ends_with(":0.1.0")),
            "appVersion tag"
        );
        // Every base image is pinned by digest: a moved tag must not change what is built.
        // `scratch` is no image (an empty filesystem), so there is nothing to pin; the final
        // stage must be it, so the released image carries no base layers at all.
        let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
        assert_eq!(
            froms.last().copied(),
            Some("FROM scratch"),
            "{dockerfile}: the final stage is FROM scratch, like the released image"
        );
        for from in froms.iter().filter(|l| **l != "FROM scratch") {
            let image = from.split_whitespace().nth(1).unwrap_or_default();
            let digest = image.split_once("@sha256:").map(|(_, d)| d);
            assert!(
                digest.is_some_and(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit())),
                "{dockerfile}: {from:?} is not pinned by digest"
            );
        }
    }
    // Probes hit the paths the binaries serve on the ports they listen on.
    assert_eq!(op["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(op["readinessProbe"]["httpGet"]["port"], "probes");
    assert_eq!(wh["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
    assert_eq!(wh["readinessProbe"]["httpGet"]["path"], "/readyz");

    // Topology spread and the webhook PDB.
    let spread = &webhook["spec"]["template"]["spec"]["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        spread["labelSelector"]["matchLabels"],
        webhook["spec"]["selector"]["matchLabels"]
    );
    let pdb = find(&docs, "PodDisruptionBudget", &format!("{FULL}-webhook"));
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        webhook["spec"]["selector"]["matchLabels"]
    );
}

/// Environment variable names a source file reads: `"NAME"` in `const ENV_*: &str = "NAME"` and in
/// clap's `env = "NAME"`.
fn known_vars(files: &[&str]) -> BTreeSet<String> {
    let mut vars = BTreeSet::new();
    for file in files {
        for line in read(file).lines() {
            let l = line.trim();
            let quoted = if l.starts_with("pub const ENV_") && l.contains(": &str = \"") {
                l.split('"').nth(1)
            } else if let Some(rest) = l.split("env = \"").nth(1) {
                rest.split('"').next()
            } else {
                None
            };
            if let Some(v) = quoted {
                vars.insert(v.to_owned());
            }
        }
    }
    vars
}

#[test]
fn pods_are_hardened() {
    let docs = default_render();
    for name in ["operator", "webhook"] {
        let d = find(&docs, "Deployment", &format!("{FULL}-{name}"));
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert_eq!(pod["serviceAccountName"], format!("{FULL}-{name}").as_str());
        let sc = &container(d)["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["runAsNonRoot"], true, "{name}");
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{name}");
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
        assert!(
            container(d)["resources"]["limits"].is_object(),
            "{name} sets its own resources"
        );
    }
}

#[test]
fn webhook_configurations_are_narrow_and_complete() {
    let docs = default_render();
    let name = format!("{NS}.{FULL}-webhook");
    let mutating = find(&docs, "MutatingWebhookConfiguration", &name);
    let validating = find(&docs, "ValidatingWebhookConfiguration", &name);
    let mut seen = BTreeMap::new();
    for hook in mutating["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .chain(validating["webhooks"].as_array().expect("webhooks"))
    {
        let cc = &hook["clientConfig"];
        assert!(
            cc.get("caBundle").is_none(),
            "self-managed: the operator injects caBundle"
        );
        assert_eq!(cc["service"]["name"], format!("{FULL}-webhook").as_str());
        assert_eq!(cc["service"]["namespace"], NS);
        assert_eq!(cc["service"]["port"], 443);
        assert_eq!(hook["failurePolicy"], "Fail");
        assert_eq!(hook["timeoutSeconds"], 10);
        assert_eq!(hook["sideEffects"], "None");
        assert_eq!(hook["admissionReviewVersions"], json!(["v1"]));
        let rules = hook["rules"].as_array().expect("rules");
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0]["apiGroups"], json!(["nodewright.nvidia.com"]));
        assert_eq!(rules[0]["apiVersions"], json!(["v1alpha1"]));
        assert_eq!(rules[0]["scope"], "Cluster");
        seen.insert(
            cc["service"]["path"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            (
                rules[0]["resources"].clone(),
                rules[0]["operations"].clone(),
            ),
        );
    }
    let expected: BTreeMap<String, (Value, Value)> = [
        (
            "/mutate-nodewright",
            "nodewrights",
            json!(["CREATE", "UPDATE"]),
        ),
        (
            "/validate-nodewright",
            "nodewrights",
            json!(["CREATE", "UPDATE"]),
        ),
        (
            "/mutate-deploymentpolicy",
            "deploymentpolicies",
            json!(["CREATE", "UPDATE"]),
        ),
        (
            "/validate-deploymentpolicy",
            "deploymentpolicies",
            json!(["CREATE", "UPDATE", "DELETE"]),
        ),
    ]
    .into_iter()
    .map(|(p, r, o)| (p.to_owned(), (json!([r]), o)))
    .collect();
    assert_eq!(seen, expected);

    // The paths are the webhook's routes.
    let routes = read("webhook/src/admission/mod.rs");
    for path in expected.keys() {
        assert!(
            routes.contains(&format!("\"{}\"", &path[1..])),
            "webhook serves {path}"
        );
    }

    // URL mode: paths appended to the base URL; the host joins the certificate's names.
    let docs = render(REL, NS, &["--set", "webhook.url=https://127.0.0.1:18443/"]).expect("url");
    let m = find(&docs, "MutatingWebhookConfiguration", &name);
    assert_eq!(
        m["webhooks"][0]["clientConfig"],
        json!({"url": "https://127.0.0.1:18443/mutate-nodewright"})
    );
    let op = container(find(&docs, "Deployment", &format!("{FULL}-operator")));
    assert_eq!(
        env_value(op, "WEBHOOK_EXTRA_NAMES").as_deref(),
        Some("127.0.0.1")
    );
    // Ignore and a custom timeout.
    let docs = render(
        REL,
        NS,
        &[
            "--set",
            "webhook.failurePolicy=Ignore",
            "--set",
            "webhook.timeoutSeconds=5",
        ],
    )
    .expect("render");
    let v = find(&docs, "ValidatingWebhookConfiguration", &name);
    assert_eq!(v["webhooks"][1]["failurePolicy"], "Ignore");
    assert_eq!(v["webhooks"][1]["timeoutSeconds"], 5);
}

#[test]
fn crds_are_the_generated_ones() {
    let docs = default_render();
    let mut files: Vec<_> = std::fs::read_dir(repo_dir().join("crds"))
        .expect("crds/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 2);
    for file in &files {
        let name = file.file_name().expect("name");
        let copy = chart_dir().join("files/crds").join(name);
        let original = std::fs::read(file).expect("crd");
        assert_eq!(
            std::fs::read(&copy).unwrap_or_default(),
            original,
            "{} differs from {}: copy crds/*.yaml into chart/files/crds/",
            copy.display(),
            file.display()
        );
        let mut generated: Value = yaml_serde::from_slice(&original).expect("generated CRD parses");
        let crd_name = generated["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned();
        let mut rendered = find(&docs, "CustomResourceDefinition", &crd_name).clone();
        assert_eq!(
            rendered["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "kept on uninstall by default"
        );
        // Equal once the chart's metadata additions are removed.
        let meta = rendered["metadata"].as_object_mut().expect("metadata");
        meta.remove("labels");
        meta.remove("annotations");
        if let Some(m) = generated["metadata"].as_object_mut() {
            m.remove("labels");
            m.remove("annotations");
        }
        assert_eq!(rendered, generated, "{crd_name}");
    }
    let not_kept = render(REL, NS, &["--set", "crds.keep=false"]).expect("render");
    let crds = of_kind(&not_kept, "CustomResourceDefinition");
    assert!(
        !crds.is_empty(),
        "the CRDs are rendered without the keep policy too"
    );
    for crd in crds {
        assert!(crd["metadata"].get("annotations").is_none());
    }
}

#[test]
fn rbac_is_least_privilege() {
    let docs = default_render();
    let cr = find(&docs, "ClusterRole", &format!("{NS}.{FULL}-operator"));
    let rules = cr["rules"].as_array().expect("rules");
    let grants = |rules: &[Value], resource: &str| -> BTreeSet<String> {
        rules
            .iter()
            .filter(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|x| x == resource))
            })
            .flat_map(|r| r["verbs"].as_array().cloned().unwrap_or_default())
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    let set = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(
        grants(rules, "nodewrights"),
        set(&["get", "list", "watch", "update", "patch"])
    );
    assert_eq!(
        grants(rules, "nodewrights/status"),
        set(&["get", "update", "patch"])
    );
    assert_eq!(
        grants(rules, "deploymentpolicies"),
        set(&["list", "watch"]),
        "watched into a store, never fetched one by one"
    );
    assert_eq!(
        grants(rules, "nodes"),
        set(&["get", "list", "watch", "patch"])
    );
    assert_eq!(grants(rules, "nodes/status"), set(&["patch"]));
    assert_eq!(
        grants(rules, "pods"),
        set(&["list"]),
        "cluster-wide only list, for drain"
    );
    assert_eq!(grants(rules, "pods/eviction"), set(&["create"]));
    assert!(
        grants(rules, "secrets").is_empty(),
        "no cluster-wide Secret access"
    );
    for r in rules {
        assert!(
            !r["verbs"]
                .as_array()
                .expect("verbs")
                .iter()
                .any(|v| v == "*")
        );
        assert!(
            !r["resources"]
                .as_array()
                .expect("resources")
                .iter()
                .any(|v| v == "*")
        );
        if r["apiGroups"][0] == "admissionregistration.k8s.io" {
            assert_eq!(r["resourceNames"], json!([format!("{NS}.{FULL}-webhook")]));
        }
    }
    let role = find_in(&docs, "Role", NS, &format!("{FULL}-operator"));
    let package_role = find_in(&docs, "Role", PKG_NS, &format!("{FULL}-operator"));
    let role_rules = role["rules"].as_array().expect("rules");
    let package_rules = package_role["rules"].as_array().expect("rules");
    assert_eq!(
        grants(package_rules, "jobs"),
        set(&[
            "get", "list", "watch", "create", "update", "patch", "delete"
        ]),
        "stages run as Jobs in the package namespace"
    );
    assert_eq!(grants(package_rules, "configmaps").len(), 7);
    assert!(
        !grants(role_rules, "jobs").contains("create"),
        "no Job is created beside the services any more (only an earlier version's are settled)"
    );
    assert!(
        !grants(role_rules, "configmaps").contains("create"),
        "no package ConfigMap is created beside the services"
    );
    assert!(
        grants(package_rules, "secrets").is_empty() && grants(package_rules, "leases").is_empty(),
        "the package namespace holds no Secret or Lease of the operator"
    );
    let secret_rules: Vec<&Value> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| r["resources"] == json!(["secrets"]))
        .collect();
    assert!(
        secret_rules.iter().any(|r| r["verbs"] != json!(["create"])),
        "the operator reads and updates its Secrets: {secret_rules:?}"
    );
    for r in &secret_rules {
        if r["verbs"] != json!(["create"]) {
            assert_eq!(
                r["resourceNames"],
                json!([format!("{FULL}-webhook-ca"), format!("{FULL}-webhook-tls")])
            );
        }
    }
    let webhook_cr = find(&docs, "ClusterRole", &format!("{NS}.{FULL}-webhook"));
    assert_eq!(
        webhook_cr["rules"],
        json!([
            {"apiGroups": ["nodewright.nvidia.com"], "resources": ["nodewrights", "deploymentpolicies"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}
        ])
    );
    let webhook_role = find(&docs, "Role", &format!("{FULL}-webhook"));
    assert_eq!(
        webhook_role["rules"],
        json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [format!("{FULL}-webhook-tls")], "verbs": ["get", "list", "watch"]}])
    );
}

#[test]
fn cert_manager_mode() {
    let docs = render(REL, NS, &["--set", "certs.mode=cert-manager"]).expect("render");
    assert!(
        of_kind(&docs, "Secret").is_empty(),
        "cert-manager writes the Secrets"
    );
    let cert = find(&docs, "Certificate", &format!("{FULL}-webhook-tls"));
    assert_eq!(
        cert["spec"]["secretName"],
        format!("{FULL}-webhook-tls").as_str()
    );
    assert_eq!(
        cert["spec"]["issuerRef"]["name"],
        format!("{FULL}-ca").as_str()
    );
    assert!(
        cert["spec"]["dnsNames"]
            .as_array()
            .expect("dnsNames")
            .iter()
            .any(|n| n == format!("{FULL}-webhook.{NS}.svc").as_str())
    );
    find(&docs, "Issuer", &format!("{FULL}-selfsigned"));
    find(&docs, "Certificate", &format!("{FULL}-webhook-ca"));
    let name = format!("{NS}.{FULL}-webhook");
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let c = find(&docs, kind, &name);
        assert_eq!(
            c["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{NS}/{FULL}-webhook-tls").as_str()
        );
    }
    let op = container(find(&docs, "Deployment", &format!("{FULL}-operator")));
    assert_eq!(
        env_value(op, "WEBHOOK_CERTS_MANAGED").as_deref(),
        Some("false")
    );
    assert!(env_value(op, "WEBHOOK_SECRET_NAME").is_none());
    let cr = find(&docs, "ClusterRole", &format!("{NS}.{FULL}-operator"));
    assert!(
        !cr.to_string().contains("admissionregistration"),
        "no webhook configuration access"
    );
    let role = find(&docs, "Role", &format!("{FULL}-operator"));
    assert!(!role.to_string().contains("secrets"), "no Secret access");

    // A given issuer: no chart-made CA.
    let docs = render(
        REL,
        NS,
        &[
            "--set",
            "certs.mode=cert-manager",
            "--set",
            "certs.certManager.issuerRef.name=corp-ca",
            "--set",
            "certs.certManager.issuerRef.kind=ClusterIssuer",
        ],
    )
    .expect("render");
    assert!(of_kind(&docs, "Issuer").is_empty());
    let cert = find(&docs, "Certificate", &format!("{FULL}-webhook-tls"));
    assert_eq!(
        cert["spec"]["issuerRef"],
        json!({"name": "corp-ca", "kind": "ClusterIssuer"})
    );
}

#[test]
fn provided_mode() {
    let docs = render(
        REL,
        NS,
        &[
            "--set",
            "certs.mode=provided",
            "--set",
            "certs.provided.secretName=corp-tls",
            "--set",
            "certs.provided.caBundle=QUJD",
        ],
    )
    .expect("render");
    assert!(of_kind(&docs, "Secret").is_empty());
    let name = format!("{NS}.{FULL}-webhook");
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        for hook in find(&docs, kind, &name)["webhooks"]
            .as_array()
            .expect("webhooks")
        {
            assert_eq!(hook["clientConfig"]["caBundle"], "QUJD");
        }
    }
    let wh = container(find(&docs, "Deployment", &format!("{FULL}-webhook")));
    assert_eq!(
        env_value(wh, "WEBHOOK_TLS_SECRET").as_deref(),
        Some(format!("{NS}/corp-tls").as_str())
    );
    let role = find(&docs, "Role", &format!("{FULL}-webhook"));
    assert_eq!(role["rules"][0]["resourceNames"], json!(["corp-tls"]));
}

#[test]
fn hpa_and_limit_range_options() {
    let docs = render(
        REL,
        NS,
        &[
            "--set",
            "webhook.hpa.enabled=true",
            "--set",
            "webhook.hpa.minReplicas=3",
            "--set",
            "limitRange.enabled=false",
        ],
    )
    .expect("render");
    let hpa = find(&docs, "HorizontalPodAutoscaler", &format!("{FULL}-webhook"));
    assert_eq!(hpa["spec"]["minReplicas"], 3);
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        format!("{FULL}-webhook").as_str()
    );
    let d = find(&docs, "Deployment", &format!("{FULL}-webhook"));
    assert!(d["spec"].get("replicas").is_none(), "the HPA owns replicas");
    assert!(of_kind(&docs, "LimitRange").is_empty());
    let docs = default_render();
    let lr = find(&docs, "LimitRange", &format!("{FULL}-package-defaults"));
    assert_eq!(
        lr["spec"]["limits"][0]["default"],
        json!({"cpu": "500m", "memory": "512Mi"})
    );
}

/// Package and interrupt pods run upstream's agent release pinned by digest (the operator's own
/// default, so a run without the chart runs the same agent) as a ServiceAccount bound to nothing
/// (issue 22, items 5 and 6); another tag runs unpinned only when the digest is cleared too.
#[test]
fn package_pods_get_a_pinned_agent_and_a_rightless_account() {
    let docs = default_render();
    let op = container(find(&docs, "Deployment", &format!("{FULL}-operator")));
    assert_eq!(
        env_value(op, "AGENT_IMAGE").as_deref(),
        Some(nodewright_core::jobs::DEFAULT_AGENT_IMAGE)
    );
    assert!(
        nodewright_core::jobs::DEFAULT_AGENT_IMAGE.contains("@sha256:"),
        "pinned by digest"
    );
    let account = format!("{FULL}-packages");
    assert_eq!(
        env_value(op, "PACKAGE_SERVICE_ACCOUNT").as_deref(),
        Some(account.as_str())
    );
    let sa = find(&docs, "ServiceAccount", &account);
    assert_eq!(sa["automountServiceAccountToken"], false);
    for kind in ["RoleBinding", "ClusterRoleBinding"] {
        for binding in of_kind(&docs, kind) {
            let subjects = binding["subjects"].as_array().cloned().unwrap_or_default();
            assert!(
                !subjects.iter().any(|s| s["name"] == account.as_str()),
                "{kind} {} binds the package pods' account: it must hold no rights",
                binding["metadata"]["name"]
            );
        }
    }

    let render_with = |args: &[&str]| render(REL, NS, args).expect("renders");
    let agent = |docs: &[Value]| {
        env_value(
            container(find(docs, "Deployment", &format!("{FULL}-operator"))),
            "AGENT_IMAGE",
        )
    };
    assert_eq!(
        agent(&render_with(&[
            "--set",
            "operator.agent.image.tag=v7",
            "--set",
            "operator.agent.image.digest="
        ]))
        .as_deref(),
        Some("nvcr.io/nvidia/skyhook/agent:v7")
    );
    assert_eq!(
        agent(&render_with(&[
            "--set",
            "operator.agent.image.repository=mirror.example/agent",
            "--set",
            "operator.agent.image.tag=",
            "--set",
            &format!("operator.agent.image.digest=sha256:{}", "a".repeat(64))
        ]))
        .as_deref(),
        Some(format!("mirror.example/agent@sha256:{}", "a".repeat(64)).as_str())
    );
    assert_eq!(
        agent(&render_with(&[
            "--set",
            "operator.agentImage=mirror.example/agent:dev"
        ]))
        .as_deref(),
        Some("mirror.example/agent:dev"),
        "a full reference replaces operator.agent.image"
    );

    // Not created: an existing account by name, or none (the namespace's default).
    let docs = render_with(&[
        "--set",
        "operator.packageServiceAccount.create=false",
        "--set",
        "operator.packageServiceAccount.name=team-packages",
    ]);
    let op = container(find(&docs, "Deployment", &format!("{FULL}-operator")));
    assert_eq!(
        env_value(op, "PACKAGE_SERVICE_ACCOUNT").as_deref(),
        Some("team-packages")
    );
    assert!(
        !of_kind(&docs, "ServiceAccount")
            .iter()
            .any(|s| s["metadata"]["name"] == account.as_str())
    );
    let docs = render_with(&["--set", "operator.packageServiceAccount.create=false"]);
    let op = container(find(&docs, "Deployment", &format!("{FULL}-operator")));
    assert_eq!(env_value(op, "PACKAGE_SERVICE_ACCOUNT"), None);
}

#[test]
fn bad_values_are_refused_naming_the_value() {
    let cases: &[(&[&str], &str)] = &[
        (&["certs.mode=vault"], "certs.mode"),
        (&["webhook.failurePolicy=Maybe"], "failurePolicy"),
        (&["webhook.timeoutSeconds=60"], "timeoutSeconds"),
        (&["defaults.jobStageTimeout=soon"], "jobStageTimeout"),
        (&["defaults.jobBackoffLimit=-1"], "jobBackoffLimit"),
        (&["operator.replicas=0"], "replicas"),
        (&["webhook.url=http://insecure.example.com"], "url"),
        (&["operator.replica=3"], "replica"),
        (&["operator.image.digest=sha256:nope"], "digest"),
        (&["operator.agent.image.digest=sha256:nope"], "digest"),
        // Another agent tag under the built-in digest would pin nothing that exists.
        (
            &["operator.agent.image.tag=v7"],
            "operator.agent.image.digest",
        ),
        (
            &["operator.agent.image.tag=", "operator.agent.image.digest="],
            "operator.agent.image",
        ),
        (&["operator.packageServiceAccount.name=Bad_Name"], "name"),
        (&["webhook.maxBodyBytes=10"], "maxBodyBytes"),
        (&["webhook.maxConnections=0"], "maxConnections"),
        (&["webhook.maxInFlight=0"], "maxInFlight"),
        (
            &["webhook.maxInFlightBytes=1048576"],
            "webhook.maxInFlightBytes (1048576) must be at least webhook.maxBodyBytes",
        ),
        (&["operator.copyDirRoot=relative/path"], "copyDirRoot"),
        (
            &["operator.runtimeRequiredTaint=k=v:Never"],
            "runtimeRequiredTaint",
        ),
        (&["operator.logFormat=xml"], "logFormat"),
        (
            &["webhook.topologySpread.whenUnsatisfiable=Sometimes"],
            "whenUnsatisfiable",
        ),
        // Template checks (combinations).
        (
            &["operator.pdb.minAvailable=2"],
            "operator.pdb.minAvailable",
        ),
        (
            &["operator.leaderElection.enabled=false"],
            "operator.leaderElection.enabled",
        ),
        (&["webhook.replicas=1"], "webhook.pdb.minAvailable"),
        (
            &[
                "webhook.hpa.enabled=true",
                "webhook.hpa.minReplicas=5",
                "webhook.hpa.maxReplicas=3",
            ],
            "webhook.hpa.minReplicas",
        ),
        (&["certs.mode=provided"], "certs.provided.secretName"),
        (
            &["certs.mode=provided", "certs.provided.secretName=x"],
            "certs.provided.caBundle",
        ),
        (&["certs.provided.secretName=x"], "certs.mode"),
    ];
    let mut failures = Vec::new();
    for (sets, needle) in cases {
        let mut args = Vec::new();
        for s in sets.iter() {
            args.push("--set");
            args.push(*s);
        }
        match render(REL, NS, &args) {
            Ok(_) => failures.push(format!("{sets:?} rendered")),
            // The schema names values by JSON pointer (`/certs/mode`), the template checks by path.
            Err(e)
                if e.contains(needle) || e.contains(&format!("/{}", needle.replace('.', "/"))) => {}
            Err(e) => failures.push(format!("{sets:?}: expected {needle:?} in: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Fine variations still render.
    for ok in [
        vec![
            "--set",
            "operator.replicas=1",
            "--set",
            "operator.pdb.enabled=false",
            "--set",
            "operator.leaderElection.enabled=false",
        ],
        vec![
            "--set",
            "webhook.replicas=1",
            "--set",
            "webhook.pdb.enabled=false",
        ],
        vec![
            "--set",
            "operator.image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ],
        vec![
            "--set",
            "defaults.jobStageTimeout=0",
            "--set",
            "defaults.jobTtlFailed=1h30m",
        ],
    ] {
        render(REL, NS, &ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
    }
    let pinned = render(REL, NS, &["--set", "operator.image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"]).expect("render");
    assert_eq!(
        container(find(&pinned, "Deployment", &format!("{FULL}-operator")))["image"],
        "ghcr.io/nodewright/nodewright-operator@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
}

#[test]
fn every_value_is_documented_and_in_the_schema() {
    let values: Value = yaml_serde::from_str(
        &std::fs::read_to_string(chart_dir().join("values.yaml")).expect("values"),
    )
    .expect("values parse");
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("values.schema.json")).expect("schema"),
    )
    .expect("schema parses");
    let readme = std::fs::read_to_string(chart_dir().join("README.md")).expect("README");
    let mut leaves = Vec::new();
    fn walk(prefix: &str, v: &Value, schema: &Value, out: &mut Vec<(String, bool)>) {
        match (v, schema["properties"].as_object()) {
            // Objects the schema describes key by key are walked; free-form ones are leaves.
            (Value::Object(map), Some(props)) if !map.is_empty() => {
                for (k, child) in map {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    let child_schema = props.get(k).cloned().unwrap_or(Value::Null);
                    if child_schema.is_null() {
                        out.push((path, false));
                    } else {
                        walk(&path, child, &child_schema, out);
                    }
                }
            }
            _ => out.push((prefix.to_owned(), true)),
        }
    }
    walk("", &values, &schema, &mut leaves);
    let mut problems = Vec::new();
    for (path, in_schema) in &leaves {
        if !in_schema {
            problems.push(format!("{path} is not in values.schema.json"));
        }
        if !readme.contains(&format!("| `{path}` |")) {
            problems.push(format!("{path} is not documented in chart/README.md"));
        }
    }
    assert!(leaves.len() > 80, "{}", leaves.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn monitoring_objects_are_optional_and_consistent() {
    let docs = render(
        REL,
        NS,
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.serviceMonitor.labels.release=prom",
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.prometheusRule.rolloutStalledMinutes=45",
            "--set",
            "metrics.dashboard.enabled=true",
            "--set",
            "metrics.dashboard.namespace=grafana",
        ],
    )
    .expect("render");
    // One ServiceMonitor per service, selecting exactly that service's Service by its labels and
    // scraping the port the Service names `metrics`.
    let services = of_kind(&docs, "Service");
    for component in ["operator", "webhook"] {
        let sm = find(&docs, "ServiceMonitor", &format!("{FULL}-{component}"));
        assert_eq!(sm["metadata"]["labels"]["release"], "prom");
        assert_eq!(sm["spec"]["namespaceSelector"]["matchNames"], json!([NS]));
        let selector = sm["spec"]["selector"]["matchLabels"]
            .as_object()
            .expect("matchLabels");
        let matching: Vec<&&Value> = services
            .iter()
            .filter(|svc| {
                selector
                    .iter()
                    .all(|(k, v)| svc["metadata"]["labels"][k] == *v)
            })
            .collect();
        assert_eq!(matching.len(), 1, "{component}: {matching:?}");
        let ports = matching[0]["spec"]["ports"].as_array().expect("ports");
        assert!(ports.iter().any(|p| p["name"] == "metrics"), "{component}");
        assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
        assert!(sm["spec"]["endpoints"][0].get("bearerTokenFile").is_none());
    }
    // The alerts the issue asks for, with the stall threshold from values.
    let rule = find(&docs, "PrometheusRule", FULL);
    let rules = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules");
    let alerts: BTreeSet<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    assert_eq!(
        alerts,
        [
            "NodeWrightErroring",
            "NodeWrightNoOperatorLeader",
            "NodeWrightRolloutStalled",
            "NodeWrightStageTimedOut",
            "NodeWrightWebhookCertificateExpiring",
            "NodeWrightWebhookDenialsSpike",
        ]
        .into_iter()
        .collect()
    );
    let stalled = rules
        .iter()
        .find(|r| r["alert"] == "NodeWrightRolloutStalled")
        .expect("stalled");
    assert_eq!(stalled["for"], "45m");
    assert!(stalled["expr"].as_str().expect("expr").contains("[45m]"));
    for r in rules {
        let summary = r["annotations"]["summary"].as_str().unwrap_or_default();
        assert!(!summary.is_empty(), "{r}");
        assert!(r["labels"]["severity"].is_string(), "{r}");
    }
    // The dashboard ConfigMap carries the sidecar label and the generated JSON, byte for byte.
    let cm = find(&docs, "ConfigMap", &format!("{FULL}-dashboard"));
    assert_eq!(cm["metadata"]["namespace"], "grafana");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let json_text = cm["data"]["nodewright.json"].as_str().expect("dashboard");
    assert_eq!(
        json_text.trim_end(),
        read("chart/files/dashboards/nodewright.json").trim_end()
    );
    let dashboard: Value = serde_json::from_str(json_text).expect("dashboard JSON");
    assert!(dashboard["panels"].as_array().is_some_and(|p| p.len() > 10));

    // With authentication, Prometheus sends its token.
    let docs = render(
        REL,
        NS,
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.authentication.enabled=true",
        ],
    )
    .expect("render");
    let sm = find(&docs, "ServiceMonitor", &format!("{FULL}-operator"));
    assert_eq!(
        sm["spec"]["endpoints"][0]["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
}

#[test]
fn metrics_authentication_turns_on_in_both_services_with_its_rbac() {
    let auth_env = |docs: &[Value], expected: &str| {
        for (name, var) in [
            ("operator", "METRICS_AUTH"),
            ("webhook", "WEBHOOK_METRICS_AUTH"),
        ] {
            let c = container(find(docs, "Deployment", &format!("{FULL}-{name}")));
            assert_eq!(env_value(c, var).as_deref(), Some(expected), "{name}");
        }
    };
    let docs = default_render();
    auth_env(&docs, "false");
    assert!(
        !docs
            .iter()
            .any(|d| d["metadata"]["name"] == format!("{NS}.{FULL}-metrics-auth")),
        "no review permissions without the option"
    );
    let docs = render(
        REL,
        NS,
        &[
            "--set",
            "metrics.authentication.enabled=true",
            "--set",
            "metrics.readerSubjects[0].kind=ServiceAccount",
            "--set",
            "metrics.readerSubjects[0].name=prometheus",
            "--set",
            "metrics.readerSubjects[0].namespace=monitoring",
        ],
    )
    .expect("render");
    auth_env(&docs, "true");
    let reviews = find(&docs, "ClusterRole", &format!("{NS}.{FULL}-metrics-auth"));
    assert_eq!(
        reviews["rules"],
        json!([
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}
        ])
    );
    let binding = find(
        &docs,
        "ClusterRoleBinding",
        &format!("{NS}.{FULL}-metrics-auth"),
    );
    let subjects: BTreeSet<&str> = binding["subjects"]
        .as_array()
        .expect("subjects")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(
        subjects,
        [
            format!("{FULL}-operator").as_str(),
            format!("{FULL}-webhook").as_str()
        ]
        .into_iter()
        .collect()
    );
    let reader = find(&docs, "ClusterRole", &format!("{NS}.{FULL}-metrics-reader"));
    assert_eq!(
        reader["rules"],
        json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    let bound = find(
        &docs,
        "ClusterRoleBinding",
        &format!("{NS}.{FULL}-metrics-reader"),
    );
    assert_eq!(
        bound["subjects"],
        json!([{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}])
    );
}

/// The `rbac.authorization.k8s.io/aggregate-to-*` labels of a ClusterRole, as `view`, `edit`...
fn aggregated_into(role: &Value) -> BTreeSet<String> {
    role["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .filter(|(_, v)| *v == "true")
                .filter_map(|(k, _)| k.strip_prefix("rbac.authorization.k8s.io/aggregate-to-"))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Creating a NodeWright is root on every node it selects (issue 22, item 1): by default the
/// editor is aggregated into nothing, so holding the built-in `edit` or `admin` does not grant
/// it; the viewer (read-only) is. `rbac.userRoles.aggregateEditor` opts in, and NOTES.txt then
/// says what that grants. (chart_install asks the apiserver the same with `kubectl auth can-i`.)
#[test]
fn user_roles_aggregate_the_viewer_and_the_editor_only_on_request() {
    let docs = default_render();
    let viewer = find(&docs, "ClusterRole", &format!("{NS}.{FULL}-viewer"));
    let editor = find(&docs, "ClusterRole", &format!("{NS}.{FULL}-editor"));
    assert_eq!(
        aggregated_into(viewer),
        ["admin", "edit", "view"].map(str::to_owned).into()
    );
    assert_eq!(
        aggregated_into(editor),
        BTreeSet::new(),
        "the editor must not be aggregated into edit/admin by default: {editor}"
    );
    let opted = render(REL, NS, &["--set", "rbac.userRoles.aggregateEditor=true"]).expect("render");
    assert_eq!(
        aggregated_into(find(&opted, "ClusterRole", &format!("{NS}.{FULL}-editor"))),
        ["admin", "edit"].map(str::to_owned).into()
    );
    let notes = |args: &[&str]| {
        let chart = chart_dir();
        let mut all = vec![
            "install",
            REL,
            chart.to_str().expect("utf-8 path"),
            "--namespace",
            NS,
            "--dry-run=client",
        ];
        all.extend_from_slice(args);
        let out = run_helm(&all).expect("dry-run install");
        out.split_once("NOTES:")
            .map(|(_, n)| n.to_owned())
            .unwrap_or_else(|| panic!("no NOTES in:\n{out}"))
    };
    let default_notes = notes(&[]);
    assert!(
        default_notes.contains(&format!(
            "Only subjects you bind to ClusterRole {NS}.{FULL}-editor"
        )) && default_notes.contains("not aggregated into `edit`/`admin`"),
        "{default_notes}"
    );
    let opted_notes = notes(&["--set", "rbac.userRoles.aggregateEditor=true"]);
    assert!(
        opted_notes.contains("EVERYONE bound to `edit` or `admin`")
            && opted_notes.contains("root on the nodes"),
        "{opted_notes}"
    );
    let bad = render(REL, NS, &["--set", "rbac.userRoles.aggregateEditor=yes"])
        .expect_err("a non-boolean aggregateEditor is refused");
    assert!(bad.contains("aggregateEditor"), "{bad}");
    let verbs = |r: &Value| -> BTreeSet<String> {
        r["rules"][0]["verbs"]
            .as_array()
            .expect("verbs")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(
        verbs(viewer),
        ["get", "list", "watch"]
            .map(str::to_owned)
            .into_iter()
            .collect()
    );
    assert!(verbs(editor).contains("delete") && verbs(editor).contains("create"));
    for r in [viewer, editor] {
        assert_eq!(
            r["rules"][0]["resources"],
            json!(["nodewrights", "deploymentpolicies"])
        );
        // Status stays the operator's.
        assert_eq!(r["rules"][1]["verbs"], json!(["get"]));
    }
    let off = render(REL, NS, &["--set", "rbac.userRoles.enabled=false"]).expect("render");
    assert_eq!(of_kind(&off, "ClusterRole").len(), 2);
    let unaggregated =
        render(REL, NS, &["--set", "rbac.userRoles.aggregate=false"]).expect("render");
    let viewer = find(&unaggregated, "ClusterRole", &format!("{NS}.{FULL}-viewer"));
    assert!(
        !viewer["metadata"]["labels"]
            .to_string()
            .contains("aggregate")
    );
}

/// Issue 22, items 2 to 4: the `admission.*` values reach the webhook as the variables it reads
/// (its own tests check what it does with them), the chart's own Secrets always protected.
#[test]
fn admission_values_reach_the_webhook() {
    let webhook_env = |docs: &[Value], name: &str| {
        env_value(
            container(find(docs, "Deployment", &format!("{FULL}-webhook"))),
            name,
        )
    };
    let docs = default_render();
    assert_eq!(
        webhook_env(&docs, "WEBHOOK_ALLOW_CONTROL_PLANE_NODES").as_deref(),
        Some("false")
    );
    assert_eq!(
        webhook_env(&docs, "WEBHOOK_ALLOWED_IMAGES").as_deref(),
        Some("")
    );
    assert_eq!(
        webhook_env(&docs, "WEBHOOK_PROTECTED_SECRETS").as_deref(),
        Some(format!("{FULL}-webhook-ca,{FULL}-webhook-tls").as_str())
    );
    let set = render(
        REL,
        NS,
        &[
            "--set",
            "admission.allowControlPlaneNodes=true",
            "--set",
            "admission.allowedImages={ghcr.io/acme/*,registry.example.com:5000/tools/*}",
            "--set",
            "admission.protectedSecrets={team-credentials}",
            "--set",
            "operator.packageImagePullSecret=registry-pull",
            "--set",
            "imagePullSecrets={services-pull}",
            "--set",
            "certs.mode=provided",
            "--set",
            "certs.provided.secretName=my-tls",
            "--set",
            "certs.provided.caBundle=Y2E=",
        ],
    )
    .expect("render");
    assert_eq!(
        webhook_env(&set, "WEBHOOK_ALLOW_CONTROL_PLANE_NODES").as_deref(),
        Some("true")
    );
    assert_eq!(
        webhook_env(&set, "WEBHOOK_ALLOWED_IMAGES").as_deref(),
        Some("ghcr.io/acme/*,registry.example.com:5000/tools/*")
    );
    assert_eq!(
        webhook_env(&set, "WEBHOOK_PROTECTED_SECRETS").as_deref(),
        Some(
            format!("{FULL}-webhook-ca,my-tls,registry-pull,services-pull,team-credentials")
                .as_str()
        )
    );
    for (value, name) in [
        ("admission.allowedImages={ghcr.io/a b}", "allowedImages"),
        (
            "admission.protectedSecrets={Not_A_Name}",
            "protectedSecrets",
        ),
        (
            "admission.allowControlPlaneNodes=yes",
            "allowControlPlaneNodes",
        ),
    ] {
        let err = render(REL, NS, &["--set", value]).expect_err(value);
        assert!(err.contains(name), "{value}: {err}");
    }
}

#[test]
fn network_policies_allow_only_what_the_services_serve_and_call() {
    let docs = render(
        REL,
        NS,
        &[
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "networkPolicy.apiServerCIDRs[0]=10.0.0.1/32",
            "--set-json",
            r#"networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]"#,
        ],
    )
    .expect("render");
    for component in ["operator", "webhook"] {
        let np = find(&docs, "NetworkPolicy", &format!("{FULL}-{component}"));
        let deployment = find(&docs, "Deployment", &format!("{FULL}-{component}"));
        assert_eq!(
            np["spec"]["podSelector"]["matchLabels"], deployment["spec"]["selector"]["matchLabels"],
            "{component}"
        );
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        // Every ingress port is a port the container declares.
        let declared: BTreeSet<String> = container(deployment)["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect();
        let ingress = np["spec"]["ingress"].as_array().expect("ingress");
        for rule in ingress {
            for port in rule["ports"].as_array().expect("ports") {
                let name = port["port"].as_str().expect("named port");
                assert!(declared.contains(name), "{component}: {name} not declared");
            }
        }
        let metrics = ingress
            .iter()
            .find(|r| r["ports"][0]["port"] == "metrics")
            .expect("metrics rule");
        assert_eq!(
            metrics["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "monitoring"
        );
        let egress = np["spec"]["egress"].as_array().expect("egress");
        assert_eq!(
            egress[0]["ports"][0],
            json!({"port": 53, "protocol": "UDP"})
        );
        assert_eq!(
            egress[1]["to"],
            json!([{"ipBlock": {"cidr": "10.0.0.1/32"}}])
        );
        assert_eq!(
            egress[1]["ports"],
            json!([{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}])
        );
    }
}

/// The webhook's HTTPS port: only the kube-apiserver by default where its addresses are known
/// (`apiServerCIDRs`; the EndpointSlice lookup needs a cluster, `helm template` has none), the
/// peers of `webhookFrom` when given, any peer when neither or when asked for.
#[test]
fn the_webhook_port_admits_only_the_apiserver_where_its_addresses_are_known() {
    let https_from = |args: &[&str]| {
        let mut all = vec!["--set", "networkPolicy.enabled=true"];
        all.extend_from_slice(args);
        let docs = render(REL, NS, &all).expect("render");
        let np = find(&docs, "NetworkPolicy", &format!("{FULL}-webhook"));
        np["spec"]["ingress"]
            .as_array()
            .expect("ingress")
            .iter()
            .find(|r| r["ports"][0]["port"] == "https")
            .expect("https rule")["from"]
            .clone()
    };
    assert_eq!(
        https_from(&[
            "--set",
            "networkPolicy.apiServerCIDRs={10.0.0.1/32,fd00::1/128}"
        ]),
        json!([{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "fd00::1/128"}}])
    );
    // Unknown addresses (no cluster to look them up in): open, rather than an outage.
    assert_eq!(https_from(&[]), Value::Null);
    assert_eq!(
        https_from(&[
            "--set",
            "networkPolicy.apiServerCIDRs[0]=10.0.0.1/32",
            "--set",
            "networkPolicy.webhookFromAPIServer=false"
        ]),
        Value::Null
    );
    let peers = json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}]);
    assert_eq!(
        https_from(&[
            "--set",
            "networkPolicy.apiServerCIDRs[0]=10.0.0.1/32",
            "--set-json",
            &format!("networkPolicy.webhookFrom={peers}")
        ]),
        peers
    );
}

#[test]
fn operator_resources_follow_the_sizing_formula_unless_given() {
    let resources = |args: &[&str]| {
        let docs = render(REL, NS, args).expect("render");
        container(find(&docs, "Deployment", &format!("{FULL}-operator")))["resources"].clone()
    };
    // The defaults (100 nodes, 3 packages): 48 + 100*3*32/1024 = 57.4 -> 58Mi, x4 = 232Mi;
    // 50 + 100*0.5 = 100m, x4 = 400m -> the 1000m floor.
    assert_eq!(
        resources(&[]),
        json!({"requests": {"cpu": "100m", "memory": "58Mi"}, "limits": {"cpu": "1000m", "memory": "232Mi"}})
    );
    // 1000 nodes with 5 packages: 48 + 1000*5*32/1024 = 204.3 -> 205Mi, x4 = 820Mi;
    // 50 + 1000*0.5 = 550m, x4 = 2200m.
    assert_eq!(
        resources(&[
            "--set",
            "sizing.expectedNodes=1000",
            "--set",
            "sizing.expectedPackages=5"
        ]),
        json!({"requests": {"cpu": "550m", "memory": "205Mi"}, "limits": {"cpu": "2200m", "memory": "820Mi"}})
    );
    // Given resources win, verbatim.
    assert_eq!(
        resources(&[
            "--set",
            "operator.resources.requests.cpu=2",
            "--set",
            "sizing.expectedNodes=5000"
        ]),
        json!({"requests": {"cpu": 2}})
    );
    for (set, needle) in [
        ("sizing.expectedNodes=0", "expectedNodes"),
        ("sizing.memoryLimitFactor=0.5", "memoryLimitFactor"),
    ] {
        match render(REL, NS, &["--set", set]) {
            Ok(_) => panic!("{set} rendered"),
            Err(e) => assert!(e.contains(needle), "{set}: {e}"),
        }
    }
}

/// The cluster-wide disruption cap reaches the operator only when set, as a count or a percent; a
/// value the operator would refuse is refused at render time.
#[test]
fn the_disruption_cap_reaches_the_operator_only_when_set() {
    let cap = |args: &[&str]| {
        let docs = render(REL, NS, args).expect("render");
        env_value(
            container(find(&docs, "Deployment", &format!("{FULL}-operator"))),
            "MAX_DISRUPTED_NODES",
        )
    };
    assert_eq!(cap(&[]), None, "no cap by default");
    assert_eq!(
        cap(&["--set", "operator.maxDisruptedNodes=12"]).as_deref(),
        Some("12")
    );
    assert_eq!(
        cap(&["--set-string", "operator.maxDisruptedNodes=10%"]).as_deref(),
        Some("10%")
    );
    for bad in ["0", "0%", "150%", "ten", "-2"] {
        match render(
            REL,
            NS,
            &["--set-string", &format!("operator.maxDisruptedNodes={bad}")],
        ) {
            Ok(_) => panic!("maxDisruptedNodes={bad} rendered"),
            Err(e) => assert!(e.contains("maxDisruptedNodes"), "{bad}: {e}"),
        }
    }
}

/// Package pods (privileged, host PID, the host's `/`) run in a namespace of their own that Pod
/// Security admits them in, never beside the services and their Secrets (issue 22 item 7).
#[test]
fn package_pods_get_a_privileged_namespace_of_their_own() {
    let docs = default_render();
    let namespace = find(&docs, "Namespace", PKG_NS);
    let labels = &namespace["metadata"]["labels"];
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(
            labels[format!("pod-security.kubernetes.io/{mode}")],
            "privileged",
            "{mode}: {labels}"
        );
    }
    let operator = find(&docs, "Deployment", &format!("{FULL}-operator"));
    assert!(
        env(container(operator))
            .contains(&("PACKAGE_NAMESPACE".to_owned(), Some(PKG_NS.to_owned()))),
        "the operator runs its Jobs there"
    );
    find_in(
        &docs,
        "LimitRange",
        PKG_NS,
        &format!("{FULL}-package-defaults"),
    );
    find_in(&docs, "ServiceAccount", PKG_NS, &format!("{FULL}-packages"));
    find_in(&docs, "RoleBinding", PKG_NS, &format!("{FULL}-operator"));
    // Only the operator's rights, the package pods' account and their defaults live there.
    assert!(docs.iter().all(|d| {
        d["metadata"]["namespace"] != PKG_NS
            || ["Role", "RoleBinding", "ServiceAccount", "LimitRange"]
                .contains(&d["kind"].as_str().unwrap_or_default())
    }));

    // `helm install nodewright -n nodewright` gets `nodewright-packages`.
    let plain = render("nodewright", "nodewright", &[]).expect("render");
    find(&plain, "Namespace", "nodewright-packages");

    // A namespace of the administrator's: named, not created, still used.
    let own = render(
        REL,
        NS,
        &[
            "--set",
            "packageNamespace.name=host-packages",
            "--set",
            "packageNamespace.create=false",
        ],
    )
    .expect("render");
    assert!(of_kind(&own, "Namespace").is_empty());
    let operator = find(&own, "Deployment", &format!("{FULL}-operator"));
    assert!(env(container(operator)).contains(&(
        "PACKAGE_NAMESPACE".to_owned(),
        Some("host-packages".to_owned())
    )));
    find_in(&own, "Role", "host-packages", &format!("{FULL}-operator"));

    // The release namespace itself is refused, with the value to change.
    let err = render(REL, NS, &["--set", &format!("packageNamespace.name={NS}")])
        .expect_err("the release namespace");
    assert!(
        err.contains("packageNamespace.name") && err.contains("must differ"),
        "{err}"
    );
    // A default that would exceed 63 characters is refused, naming the value to set.
    let long_ns = "n".repeat(50);
    let err = render(REL, &long_ns, &[]).expect_err("too long");
    assert!(err.contains("packageNamespace.name"), "{err}");
}
