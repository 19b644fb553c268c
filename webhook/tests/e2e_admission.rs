//! The webhook as a user meets it: the real binary on 127.0.0.1 with a test CA, registered with a
//! real kube-apiserver (local control plane) through a Mutating- and a ValidatingWebhookConfiguration
//! with `clientConfig.url`; then `kubectl apply` of every example.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use nodewright_e2e::{Cluster, ClusterOptions};
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
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("# {name}: ")))
        .unwrap_or_else(|| panic!("example without `# {name}:`"))
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

    // Every invalid example is refused with the message it names.
    let mut paths: Vec<_> = std::fs::read_dir(examples().join("invalid"))
        .expect("examples/invalid")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    let mut failures = Vec::new();
    for path in &paths {
        let text = std::fs::read_to_string(path).expect("example");
        let expected = header(&text, "expect-error");
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
