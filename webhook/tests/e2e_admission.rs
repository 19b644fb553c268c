//! The webhook as a user meets it: the real binary on 127.0.0.1 with a test CA, registered with a
//! real kube-apiserver (local control plane) through a Mutating- and a ValidatingWebhookConfiguration
//! with `clientConfig.url`; then `kubectl apply` of every example, and of NodeWrights the
//! administrator's restrictions (`admission.*` chart values, as the webhook's environment) refuse
//! or warn about, and of changes whose blast radius (what runs again, on how many nodes, in how
//! many batches) the webhook warns about.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use nodewright_e2e::{Cluster, ClusterOptions};
use nodewright_shared::keys;
use serde_json::Value;
use support::{start_webhook, wait_ready, write_certs};

fn webhook_configurations(port: u16, ca_pem: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let hook = |name: &str, path: &str, resource: &str, ops: &str| {
        format!(
            r#"  - name: {name}
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 10
    clientConfig:
      url: https://127.0.0.1:{port}/{path}
      caBundle: {ca}
    rules:
      - apiGroups: ["nodewright.nvidia.com"]
        apiVersions: ["v1alpha1"]
        resources: ["{resource}"]
        operations: [{ops}]
        scope: Cluster
"#
        )
    };
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: nodewright-e2e\nwebhooks:\n{}{}---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: nodewright-e2e\nwebhooks:\n{}{}",
        hook(
            "mutate-nodewright.nodewright.nvidia.com",
            "mutate-nodewright",
            "nodewrights",
            "CREATE, UPDATE"
        ),
        hook(
            "mutate-deploymentpolicy.nodewright.nvidia.com",
            "mutate-deploymentpolicy",
            "deploymentpolicies",
            "CREATE, UPDATE"
        ),
        hook(
            "validate-nodewright.nodewright.nvidia.com",
            "validate-nodewright",
            "nodewrights",
            "CREATE, UPDATE"
        ),
        hook(
            "validate-deploymentpolicy.nodewright.nvidia.com",
            "validate-deploymentpolicy",
            "deploymentpolicies",
            "CREATE, UPDATE, DELETE"
        ),
    )
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn header<'a>(text: &'a str, name: &str) -> &'a str {
    header_opt(text, name).unwrap_or_else(|| panic!("example without `# {name}:`"))
}

fn header_opt<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("# {name}: ")))
}

async fn get_json(cluster: &Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = cluster.kubectl(&all).await.expect("kubectl get");
    serde_json::from_str(&out).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_is_defaulted_and_validated_by_the_webhook() {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        ..ClusterOptions::default()
    })
    .await
    .expect("local control plane starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = write_certs(dir.path());
    let webhook = start_webhook(cluster.kubeconfig_path(), dir.path(), &[]);
    wait_ready(&webhook, &ca).await;
    let configs = dir.path().join("webhooks.yaml");
    std::fs::write(&configs, webhook_configurations(webhook.port, &ca)).expect("write configs");
    cluster
        .kubectl(&["apply", "-f", &configs.to_string_lossy()])
        .await
        .expect("register webhooks");
    let log = || webhook.log();

    // The valid policy is admitted and comes back with its strategy defaults filled in.
    let policy = examples().join("deploymentpolicy.yaml");
    let mut admitted = Err(String::new());
    // The apiserver may need a moment before it calls a just-registered webhook.
    for _ in 0..50 {
        admitted = cluster
            .kubectl(&["apply", "-f", &policy.to_string_lossy()])
            .await
            .map_err(|e| e.to_string());
        if admitted.is_ok() && log().contains("mutate-deploymentpolicy") {
            break;
        }
        let _ = cluster
            .kubectl(&[
                "delete",
                "-f",
                &policy.to_string_lossy(),
                "--ignore-not-found",
            ])
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    admitted.unwrap_or_else(|e| panic!("valid policy rejected: {e}\nwebhook log:\n{}", log()));
    let stored = get_json(&cluster, &["get", "nwdp", "gpu-rollout"]).await;
    let strategy = &stored["spec"]["default"]["strategy"]["exponential"];
    assert_eq!(strategy["initialBatch"], 2, "user value kept: {stored}");
    assert_eq!(strategy["growthFactor"], 2, "default filled: {stored}");
    assert_eq!(strategy["batchThreshold"], 100);
    assert_eq!(strategy["safetyLimit"], 50);
    assert_eq!(
        stored["spec"]["compartments"][1]["strategy"]["linear"]["delta"],
        2
    );
    assert!(strategy.get("failureThreshold").is_none());

    // The valid NodeWright is admitted with names and stageTimeouts filled in.
    let nw = examples().join("nodewright.yaml");
    cluster
        .kubectl(&["apply", "-f", &nw.to_string_lossy()])
        .await
        .expect("valid NodeWright admitted");
    let stored = get_json(&cluster, &["get", "nw", "gpu-host-setup"]).await;
    let packages = &stored["spec"]["packages"];
    for key in ["kernel-params", "driver-tools", "tuned"] {
        assert_eq!(packages[key]["name"], key, "{stored}");
    }
    assert_eq!(packages["kernel-params"]["stageTimeout"], "15m");
    assert_eq!(packages["tuned"]["stageTimeout"], "1h");
    assert_eq!(
        packages["driver-tools"]["image"],
        "registry.example.com:5000/driver-tools"
    );
    // The filled one is recorded, so that a later JOB_STAGE_TIMEOUT reaches it; applying the same
    // manifest again keeps the record, and a value the user sets ends it.
    let record = |stored: &Value| {
        stored["metadata"]["annotations"][keys::DEFAULTED_STAGE_TIMEOUTS_ANNOTATION].clone()
    };
    assert_eq!(record(&stored), r#"{"tuned":"1h"}"#, "{stored}");
    cluster
        .kubectl(&["apply", "-f", &nw.to_string_lossy()])
        .await
        .expect("applied again");
    let stored = get_json(&cluster, &["get", "nw", "gpu-host-setup"]).await;
    assert_eq!(record(&stored), r#"{"tuned":"1h"}"#, "{stored}");
    cluster
        .kubectl(&[
            "patch",
            "nw",
            "gpu-host-setup",
            "--type=merge",
            "-p",
            r#"{"spec":{"packages":{"tuned":{"stageTimeout":"20m"}}}}"#,
        ])
        .await
        .expect("tuned's own stageTimeout");
    let stored = get_json(&cluster, &["get", "nw", "gpu-host-setup"]).await;
    assert_eq!(stored["spec"]["packages"]["tuned"]["stageTimeout"], "20m");
    assert_eq!(record(&stored), "{}", "{stored}");

    // Every invalid example is refused with the message it names.
    let mut paths: Vec<_> = std::fs::read_dir(examples().join("invalid"))
        .expect("examples/invalid")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    let mut failures = Vec::new();
    for path in &paths {
        let text = std::fs::read_to_string(path).expect("example");
        // The webhook answers first (its mutating endpoint refuses what it would refuse): its
        // message where the example names one, else the CRD's (an object the webhook cannot even
        // decode is left to the apiserver's schema).
        let expected = header_opt(&text, "expect-webhook-error")
            .unwrap_or_else(|| header(&text, "expect-error"));
        match cluster
            .kubectl(&["apply", "-f", &path.to_string_lossy()])
            .await
        {
            Ok(out) => failures.push(format!("{} was admitted: {out}", path.display())),
            Err(e) if e.to_string().contains(expected) => {}
            Err(e) => failures.push(format!("{}: expected {expected:?} in: {e}", path.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\nwebhook log:\n{}",
        failures.join("\n"),
        log()
    );

    // Two missing dependencies are both named: the mutating webhook refuses with the full list
    // before the CRD's CEL rule, which names one offender, is evaluated.
    let two_missing = "apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata:
  name: two-missing
spec:
  packages:
    app:
      version: 1.0.0
      image: ghcr.io/example/app
      dependsOn:
        alpha: 1.0.0
        zeta: 2.0.0
";
    let (admitted, out) = apply(&cluster, two_missing).await;
    assert!(
        !admitted
            && out.contains("spec.packages.app.dependsOn.alpha")
            && out.contains("spec.packages.app.dependsOn.zeta"),
        "both missing dependencies named: {out}\nwebhook log:\n{}",
        log()
    );

    // A policy still in use cannot be deleted; once unused it can.
    let err = cluster
        .kubectl(&["delete", "nwdp", "gpu-rollout"])
        .await
        .expect_err("deleting a policy in use is refused");
    assert!(err.to_string().contains("gpu-host-setup"), "{err}");
    cluster
        .kubectl(&["delete", "nw", "gpu-host-setup"])
        .await
        .expect("delete NodeWright");
    let mut deleted = Err(String::new());
    // The webhook's cache sees the NodeWright go through its watch.
    for _ in 0..50 {
        deleted = cluster
            .kubectl(&["delete", "nwdp", "gpu-rollout"])
            .await
            .map_err(|e| e.to_string());
        if deleted.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    deleted.expect("an unused policy can be deleted");
}

/// `kubectl apply -f -` of `manifest`: (success, stdout and stderr), so warnings are seen too.
async fn apply(cluster: &Cluster, manifest: &str) -> (bool, String) {
    apply_args(cluster, manifest, &[]).await
}

/// A NodeWright `name` with one package `tool` of `image` (and `extra` lines under the package),
/// and `spec_extra` lines under spec.
fn nodewright(name: &str, image: &str, extra: &str, spec_extra: &str) -> String {
    format!(
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: {name}\nspec:\n  nodeSelectors:\n    matchLabels:\n      type: kwok\n{spec_extra}  packages:\n    tool:\n      version: 1.0.0\n      image: {image}\n{extra}"
    )
}

/// A webhook started with `env` against `cluster`, ready and registered with its apiserver, and
/// its directory (certificates, configurations), which the caller keeps alive as long as the
/// webhook runs.
async fn registered_webhook(
    cluster: &Cluster,
    env: &[(&str, &str)],
) -> (tempfile::TempDir, support::Webhook) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = write_certs(dir.path());
    let webhook = start_webhook(cluster.kubeconfig_path(), dir.path(), env);
    wait_ready(&webhook, &ca).await;
    register(cluster, &webhook, &ca, dir.path()).await;
    (dir, webhook)
}

/// Registers `webhook` with the cluster and waits until the apiserver calls it.
async fn register(cluster: &Cluster, webhook: &support::Webhook, ca: &str, dir: &std::path::Path) {
    let configs = dir.join("webhooks.yaml");
    std::fs::write(&configs, webhook_configurations(webhook.port, ca)).expect("write configs");
    cluster
        .kubectl(&["apply", "-f", &configs.to_string_lossy()])
        .await
        .expect("register webhooks");
    // The apiserver may need a moment before it calls a just-registered webhook: a probe object
    // that only this webhook's restrictions refuse tells when it does.
    let probe = nodewright(
        "probe",
        "ghcr.io/acme/probe",
        "",
        "  additionalTolerations:\n    - operator: Exists\n",
    );
    for _ in 0..100 {
        let (ok, out) = apply(cluster, &probe).await;
        let _ = cluster
            .kubectl(&["delete", "nw", "probe", "--ignore-not-found"])
            .await;
        // Answered by this webhook: refused by its restrictions, or admitted and logged by it.
        let log = webhook.log();
        let called = log.contains("validate-nodewright") || log.contains("mutate-nodewright");
        if called && (ok || out.contains("admission.allowControlPlaneNodes")) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "the apiserver never called the webhook; its log:\n{}",
        webhook.log()
    );
}

/// Issue 22, items 2 and 3: with the chart's defaults, a NodeWright whose tolerations reach
/// control-plane nodes is refused naming the toleration and `admission.allowControlPlaneNodes`;
/// with `admission.allowedImages` set, a package image or agentImageOverride outside it is refused
/// naming the package and the list; a package pulled by tag is admitted with a warning kubectl
/// prints; and with `admission.allowControlPlaneNodes=true` the toleration is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_meets_the_administrators_restrictions() {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        ..ClusterOptions::default()
    })
    .await
    .expect("local control plane starts");
    // As the chart renders the values admission.allowedImages=[ghcr.io/acme/*, docker.io/library/*]
    // and (default) admission.allowControlPlaneNodes=false.
    let (_certs, webhook) = registered_webhook(
        &cluster,
        &[
            (
                "WEBHOOK_ALLOWED_IMAGES",
                "ghcr.io/acme/*,docker.io/library/*",
            ),
            ("WEBHOOK_ALLOW_CONTROL_PLANE_NODES", "false"),
        ],
    )
    .await;
    let log = || webhook.log();

    let mut failures = Vec::new();
    let mut refused = |what: &str, manifest: String, needles: &[&str], outcome: (bool, String)| {
        let (ok, out) = outcome;
        if ok || !needles.iter().all(|n| out.contains(n)) {
            failures.push(format!(
                "{what}: expected a denial with {needles:?}, got: {out}\n{manifest}"
            ));
        }
    };
    for (what, tolerations, needles) in [
        (
            "key-less Exists",
            "  additionalTolerations:\n    - operator: Exists\n",
            vec![
                "spec.additionalTolerations[0]: toleration {key: \"\", operator: Exists} tolerates every taint, so also the control-plane taint node-role.kubernetes.io/control-plane",
                "admission.allowControlPlaneNodes is false",
            ],
        ),
        (
            "the control-plane key",
            "  additionalTolerations:\n    - key: nvidia.com/gpu\n      operator: Exists\n    - key: node-role.kubernetes.io/control-plane\n      operator: Exists\n      effect: NoSchedule\n",
            vec![
                "spec.additionalTolerations[1]: toleration {key: \"node-role.kubernetes.io/control-plane\", operator: Exists, effect: NoSchedule} tolerates the control-plane taint",
                "admission.allowControlPlaneNodes=true",
            ],
        ),
    ] {
        let manifest = nodewright(
            "control-plane",
            "ghcr.io/acme/tool",
            "      containerSHA: sha256:0123\n",
            tolerations,
        );
        let outcome = apply(&cluster, &manifest).await;
        refused(what, manifest, &needles, outcome);
    }
    let manifest = nodewright("foreign-image", "quay.io/evil/tool", "", "");
    let outcome = apply(&cluster, &manifest).await;
    refused(
        "an image outside the list",
        manifest,
        &[
            "spec.packages.tool.image: image \"quay.io/evil/tool:1.0.0\" of package \"tool\" is not allowed in this cluster: the chart value admission.allowedImages allows only ghcr.io/acme/*, docker.io/library/*",
        ],
        outcome,
    );
    let manifest = nodewright(
        "foreign-agent",
        "ghcr.io/acme/tool",
        "      agentImageOverride: docker.io/evil/agent:1\n",
        "",
    );
    let outcome = apply(&cluster, &manifest).await;
    refused(
        "an agent image outside the list",
        manifest,
        &[
            "spec.packages.tool.agentImageOverride: agentImageOverride \"docker.io/evil/agent:1\" of package \"tool\" is not allowed",
        ],
        outcome,
    );
    assert!(
        failures.is_empty(),
        "{}\n\nwebhook log:\n{}",
        failures.join("\n\n"),
        log()
    );

    // Within the list and by tag: admitted, with the warning kubectl prints.
    let (ok, out) = apply(&cluster, &nodewright("by-tag", "ghcr.io/acme/tool", "", "")).await;
    assert!(ok, "{out}\nwebhook log:\n{}", log());
    assert!(
        out.contains("Warning: spec.packages.tool: no containerSHA: ghcr.io/acme/tool:1.0.0 is pulled by a tag, which can be moved (nodes would run other code as root); pin it with containerSHA: sha256:<digest>"),
        "{out}"
    );
    // Pinned by digest, from Docker Hub's library written short: admitted without a warning.
    let (ok, out) = apply(
        &cluster,
        &nodewright(
            "by-digest",
            "busybox",
            "      containerSHA: sha256:dedf73c19455444e2663671368eaf3fcd657ea1417f0d8738c6133ed738b9c52\n",
            "",
        ),
    )
    .await;
    // No tag warning: the only warning a new NodeWright may get here is its blast radius on the
    // cluster's one node (once the webhook's node watch has listed).
    assert!(
        ok && !out.contains("no containerSHA")
            && out
                .lines()
                .filter(|l| l.starts_with("Warning:"))
                .all(|l| l == "Warning: this change runs package stages on 1 node (package tool 1.0.0 installed), 1 batch of at most 1 node at once under its interruptionBudget"),
        "{out}\nwebhook log:\n{}",
        log()
    );

    // The administrator allows control-plane nodes (admission.allowControlPlaneNodes=true): the
    // same toleration is admitted by a webhook so configured.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let ca2 = write_certs(dir2.path());
    let open = start_webhook(
        cluster.kubeconfig_path(),
        dir2.path(),
        &[("WEBHOOK_ALLOW_CONTROL_PLANE_NODES", "true")],
    );
    wait_ready(&open, &ca2).await;
    register(&cluster, &open, &ca2, dir2.path()).await;
    let (ok, out) = apply(
        &cluster,
        &nodewright(
            "control-plane",
            "ghcr.io/acme/tool",
            "      containerSHA: sha256:0123\n",
            "  additionalTolerations:\n    - operator: Exists\n",
        ),
    )
    .await;
    assert!(ok, "{out}\nwebhook log:\n{}", open.log());
}

/// Issue 24 §6: creating and editing a NodeWright through the real apiserver, kubectl prints the
/// webhook's blast-radius warnings: how many of the nodes it selects now (from the webhook's
/// metadata-only node watch) reboot, for which package change, in how many batches of its
/// DeploymentPolicy; an edit that reruns nothing says nothing. Never a denial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_warns_what_a_change_will_do_to_the_fleet() {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 6,
        ..ClusterOptions::default()
    })
    .await
    .expect("local control plane starts");
    for n in 0..4 {
        cluster
            .kubectl(&[
                "label",
                "node",
                &format!("kwok-node-{n}"),
                "blast.test/gpu=yes",
            ])
            .await
            .expect("label node");
    }
    let (_certs, webhook) = registered_webhook(&cluster, &[]).await;
    let (ok, out) = apply(
        &cluster,
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: DeploymentPolicy\nmetadata:\n  name: gpu-rollout\nspec:\n  default:\n    budget: {count: 2}\n    strategy: {fixed: {initialBatch: 2}}\n",
    )
    .await;
    assert!(ok, "{out}");
    let driver = |version: &str| {
        format!(
            "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: driver\nspec:\n  nodeSelectors:\n    matchLabels:\n      blast.test/gpu: \"yes\"\n  deploymentPolicy: gpu-rollout\n  packages:\n    driver:\n      version: {version}\n      image: ghcr.io/acme/driver\n      containerSHA: sha256:dedf73c19455444e2663671368eaf3fcd657ea1417f0d8738c6133ed738b9c52\n      interrupt: {{type: reboot}}\n"
        )
    };
    let created = "Warning: this change reboots 4 nodes (package driver 1.4.0 installed), 2 batches of at most 2 nodes at once under DeploymentPolicy gpu-rollout";
    // The webhook's caches follow the labels and the policy by watch: a server-side dry run
    // (admission runs, nothing is stored) tells when they have.
    let mut last = String::new();
    for _ in 0..150 {
        let (_, out) = apply_args(&cluster, &driver("1.4.0"), &["--dry-run=server"]).await;
        if out.contains(created) {
            break;
        }
        last = out;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (ok, out) = apply(&cluster, &driver("1.4.0")).await;
    assert!(
        ok && out.contains(created),
        "{out}\n(last dry run: {last})\nwebhook log:\n{}",
        webhook.log()
    );
    let (ok, out) = apply(&cluster, &driver("1.5.0")).await;
    assert!(
        ok && out.contains("Warning: this change reboots 4 nodes (package driver 1.4.0 → 1.5.0), 2 batches of at most 2 nodes at once under DeploymentPolicy gpu-rollout"),
        "{out}"
    );
    // A label on the object (an update the webhook admits) reruns nothing: no warning.
    let labelled = driver("1.5.0").replace(
        "  name: driver\n",
        "  name: driver\n  labels: {team: gpu}\n",
    );
    let (ok, out) = apply(&cluster, &labelled).await;
    assert!(
        ok && out.contains("configured") && !out.contains("this change"),
        "{out}"
    );
}

/// `kubectl apply -f - ARGS` of `manifest`: (success, stdout and stderr).
async fn apply_args(cluster: &Cluster, manifest: &str, args: &[&str]) -> (bool, String) {
    use tokio::io::AsyncWriteExt;
    let kubectl = cluster
        .binary("kubectl")
        .unwrap_or_else(|| "kubectl".into());
    let mut child = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .args(["apply", "-f", "-"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(manifest.as_bytes())
        .await
        .expect("write manifest");
    drop(stdin);
    let out = child.wait_with_output().await.expect("kubectl output");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `kubectl apply --dry-run=server` of a Job whose container has one environment variable `name`:
/// whether this cluster's kube-apiserver accepts the name in a pod (the rule changed in 1.32).
async fn apiserver_accepts_env_name(cluster: &Cluster, name: &str) -> (bool, String) {
    let job = format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: env-probe\n  namespace: default\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: c\n          image: ghcr.io/acme/tool:1.0.0\n          env:\n            - name: {name:?}\n              value: \"1\"\n"
    );
    apply_args(cluster, &job, &["--dry-run=server"]).await
}

/// Issue 25: a package's environment variable names are admitted exactly when the cluster's
/// kube-apiserver would accept them in the package's pods (Kubernetes 1.31 accepts letters, digits,
/// `_`, `-` and `.`, not starting with a digit; 1.32 and newer any printable ASCII but `=`). The
/// apiserver itself is asked first (a server-side dry run of a Job carrying the name); a name it
/// refuses is refused by the webhook naming `spec.packages.tool.env[0].name`, instead of being
/// stored and failing every Job the operator creates. The minor's own expectation is checked too,
/// so the test cannot pass by both refusing everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_env_names_are_checked_as_this_apiserver_checks_them() {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        ..ClusterOptions::default()
    })
    .await
    .expect("local control plane starts");
    let (_certs, webhook) = registered_webhook(&cluster, &[]).await;

    let version = get_json(&cluster, &["version", "-o", "json"]).await;
    let minor: u32 = version["serverVersion"]["minor"]
        .as_str()
        .expect("serverVersion.minor")
        .trim_end_matches('+')
        .parse()
        .expect("a numeric minor");
    for (i, name) in ["MY_VAR", "my.env-name", "MY VAR", "1ABC", "a:b", "A=B"]
        .into_iter()
        .enumerate()
    {
        let (accepted, job_out) = apiserver_accepts_env_name(&cluster, name).await;
        let expected = match name {
            "MY_VAR" | "my.env-name" => true,
            "A=B" => false,
            _ => minor >= 32,
        };
        assert_eq!(
            accepted,
            expected,
            "Kubernetes 1.{minor} {} the environment variable name {name:?} in a Job: {job_out}",
            if accepted { "accepts" } else { "refuses" }
        );
        let nw_name = format!("env-{i}");
        let nw = nodewright(
            &nw_name,
            "ghcr.io/acme/tool",
            &format!("      env:\n        - name: {name:?}\n          value: \"1\"\n"),
            "",
        );
        let (admitted, out) = apply(&cluster, &nw).await;
        let _ = cluster
            .kubectl(&["delete", "nw", &nw_name, "--ignore-not-found"])
            .await;
        assert_eq!(
            admitted,
            accepted,
            "the webhook must {} {name:?} as Kubernetes 1.{minor} does: {out}\nwebhook log:\n{}",
            if accepted { "admit" } else { "refuse" },
            webhook.log()
        );
        if !admitted {
            assert!(
                out.contains("spec.packages.tool.env[0].name") && out.contains("rename it"),
                "the denial names the field and the fix: {out}"
            );
        }
    }
}

/// A DeploymentPolicy and a NodeWright naming it in one `kubectl apply`: the NodeWright reaches
/// the webhook before the webhook's watch has delivered the policy, and must not be refused for it
/// (a CI run of the docs' examples once was). The webhook reads a policy its cache has not seen at
/// the source before it refuses; one that exists nowhere is still refused, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_and_a_nodewright_naming_it_apply_together() {
    let cluster = Cluster::start(ClusterOptions::default())
        .await
        .expect("local control plane starts");
    let (_certs, webhook) = registered_webhook(&cluster, &[]).await;
    for round in 0..10 {
        let manifest = format!(
            "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: DeploymentPolicy\nmetadata:\n  name: together-{round}\nspec:\n  default:\n    budget: {{count: 1}}\n    strategy: {{fixed: {{initialBatch: 1}}}}\n---\n{}",
            nodewright(
                &format!("together-{round}"),
                "ghcr.io/acme/tool",
                "",
                &format!("  deploymentPolicy: together-{round}\n"),
            )
        );
        let (ok, out) = apply(&cluster, &manifest).await;
        assert!(
            ok && out.contains(&format!(
                "nodewright.nodewright.nvidia.com/together-{round} created"
            )),
            "round {round}: {out}\nwebhook log:\n{}",
            webhook.log()
        );
    }
    let (ok, out) = apply(
        &cluster,
        &nodewright(
            "orphan",
            "ghcr.io/acme/tool",
            "",
            "  deploymentPolicy: nowhere\n",
        ),
    )
    .await;
    assert!(
        !ok && out.contains("spec.deploymentPolicy: deploymentPolicy \"nowhere\" not found"),
        "{out}"
    );

    // The read itself, on the webhook's own cache type against this apiserver: a policy created a
    // moment ago is found with its spec, a missing one is missing.
    use nodewright_webhook::rules::cluster::{ClusterView, PolicyAtSource};
    let cache =
        nodewright_webhook::cache::ClusterCache::start(cluster.client().await.expect("client"));
    let (ok, out) = apply(
        &cluster,
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: DeploymentPolicy\nmetadata:\n  name: read-at-source\nspec:\n  default:\n    budget: {count: 3}\n    strategy: {fixed: {initialBatch: 3}}\n",
    )
    .await;
    assert!(ok, "{out}");
    let lookup = cache
        .look_up_policy("read-at-source")
        .expect("the cache has a source");
    match lookup.await {
        PolicyAtSource::Exists(Some(policy)) => {
            assert_eq!(policy.spec.default.budget.count, Some(3), "{policy:?}")
        }
        other => panic!("read-at-source: {other:?}"),
    }
    let lookup = cache
        .look_up_policy("nowhere")
        .expect("the cache has a source");
    assert!(matches!(lookup.await, PolicyAtSource::Missing));
}
