//! The chart installed with helm into the local control plane, used as an administrator would:
//! every object is created; the ServiceAccounts can do what their service needs and nothing more
//! (`kubectl auth can-i`); the operator binary, running locally with the operator's ServiceAccount
//! token and exactly the env the chart's Deployment renders (self-managed certificates), injects
//! caBundle and rolls a NodeWright out to every node; the webhook binary, running locally with the
//! webhook's token and the chart's env (URL clientConfig mode, 127.0.0.1), admits it (defaulted)
//! and rejects an invalid NodeWright through the chart's webhook configurations; neither is ever
//! forbidden anything; with the chart's metrics authentication both answer `/metrics` to the bound
//! scraper's token and refuse another ServiceAccount's; `helm upgrade` keeps admission working and
//! rotates nothing; deleting the
//! NodeWright while the operator runs cleans it up through its finalizer (as chart/README.md asks
//! before uninstalling), and `helm uninstall` then leaves nothing behind.
//!
//! No container runs in this cluster, so the services are the local binaries; kwok plays the
//! operator's Jobs' pods to success.

mod chart_support;

use std::time::Duration;

use chart_support::services::{
    Listen, bundles, free_port, operator_command, spawn_logged, token_kubeconfig, webhook_command,
};
use chart_support::{chart_dir, container, env_value, find, parse_manifest, repo_dir};
use nodewright_e2e::{Cluster, ClusterOptions};
use serde_json::Value;

const REL: &str = "nw";
/// The bound of every wait on the cluster here: a wait ends when its condition holds, and the bound
/// only says when to give up on a broken one (generous: the suites may share a loaded machine).
const BOUND: Duration = Duration::from_secs(240);

/// `kubectl auth can-i` as a ServiceAccount: true for "yes" (kubectl exits 1 on "no").
async fn can_i(cluster: &Cluster, ns: &str, sa: &str, args: &[&str]) -> bool {
    can_i_as(cluster, &format!("system:serviceaccount:{ns}:{sa}"), args).await
}

/// `kubectl auth can-i` as `user` (impersonated): true for "yes" (kubectl exits 1 on "no").
async fn can_i_as(cluster: &Cluster, user: &str, args: &[&str]) -> bool {
    let kubectl = cluster
        .binary("kubectl")
        .unwrap_or_else(|| "kubectl".into());
    let output = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .args(["auth", "can-i"])
        .args(args)
        .arg(format!("--as={user}"))
        .output()
        .await
        .expect("kubectl runs");
    String::from_utf8_lossy(&output.stdout).trim() == "yes"
}

/// People bound to the built-in roles, for who-may-create-a-NodeWright (issue 22, item 1): one
/// bound to `edit` cluster-wide (a ClusterRoleBinding: the binding that really grants a
/// cluster-scoped kind), one bound to `edit` in the release namespace only (a RoleBinding, what
/// "namespace-level edit" means), one bound to `admin` and one to `view` cluster-wide.
const CLUSTER_EDITOR: &str = "cluster-editor";
const NAMESPACE_EDITOR: &str = "namespace-editor";
const CLUSTER_ADMIN_ROLE: &str = "cluster-admin-role";
const CLUSTER_VIEWER: &str = "cluster-viewer";

async fn bind_people(cluster: &Cluster, ns: &str) {
    for (user, role) in [
        (CLUSTER_EDITOR, "edit"),
        (CLUSTER_ADMIN_ROLE, "admin"),
        (CLUSTER_VIEWER, "view"),
    ] {
        cluster
            .kubectl(&[
                "create",
                "clusterrolebinding",
                &format!("{ns}-{user}"),
                &format!("--clusterrole={role}"),
                &format!("--user={user}"),
            ])
            .await
            .expect("clusterrolebinding");
    }
    cluster
        .kubectl(&[
            "create",
            "rolebinding",
            NAMESPACE_EDITOR,
            "--clusterrole=edit",
            &format!("--user={NAMESPACE_EDITOR}"),
            "-n",
            ns,
        ])
        .await
        .expect("rolebinding");
}

/// `kubectl create --dry-run=server` of `manifest` as `user`: the apiserver's real authorisation
/// of the request (no SubjectAccessReview shortcut), admission included.
async fn create_as(cluster: &Cluster, user: &str, manifest: &str) -> Result<String, String> {
    cluster
        .kubectl(&[
            "create",
            "--dry-run=server",
            "-f",
            manifest,
            &format!("--as={user}"),
        ])
        .await
        .map_err(|e| e.to_string())
}

/// Lines of a service log that report an authorisation failure.
fn forbidden_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("forbidden") || (l.contains("cannot ") && l.contains("serviceaccount"))
        })
        .collect()
}

/// The NodeWright-related metadata the operator may write on a node: annotations and labels under
/// `nodewright.nvidia.com/`, taints, and `spec.unschedulable`.
async fn node_marks(cluster: &Cluster) -> Vec<String> {
    let nodes: Value = serde_json::from_str(
        &cluster
            .kubectl(&["get", "nodes", "-o", "json"])
            .await
            .expect("get nodes"),
    )
    .expect("nodes json");
    let mut marks = Vec::new();
    for node in nodes["items"].as_array().expect("items") {
        let name = node["metadata"]["name"].as_str().unwrap_or_default();
        for field in ["annotations", "labels"] {
            if let Some(map) = node["metadata"][field].as_object() {
                for (k, v) in map {
                    if k.starts_with("nodewright.nvidia.com/") {
                        marks.push(format!("{name} {field} {k}={v}"));
                    }
                }
            }
        }
        if let Some(taints) = node["spec"]["taints"].as_array() {
            for t in taints {
                marks.push(format!("{name} taint {t}"));
            }
        }
        if node["spec"]["unschedulable"].as_bool() == Some(true) {
            marks.push(format!("{name} unschedulable"));
        }
    }
    marks
}

/// Kubernetes objects of a manifest as (kind, namespace, name).
fn objects(docs: &[Value]) -> Vec<(String, Option<String>, String)> {
    docs.iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_owned(),
                d["metadata"]["namespace"].as_str().map(str::to_owned),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

async fn exists(cluster: &Cluster, kind: &str, ns: Option<&str>, name: &str) -> bool {
    let target = format!("{}/{name}", kind.to_lowercase());
    let mut args = vec!["get", target.as_str(), "-o", "name", "--ignore-not-found"];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    !cluster
        .kubectl(&args)
        .await
        .expect("kubectl get")
        .trim()
        .is_empty()
}

/// Two packages, `tool` depending on `base`, on the kwok nodes.
const VALID: &str = r#"apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata:
  name: chart-valid
spec:
  nodeSelectors:
    matchLabels:
      type: kwok
  packages:
    base:
      version: 1.0.0
      image: ghcr.io/example/base
    tool:
      version: 1.0.0
      image: ghcr.io/example/tool
      dependsOn:
        base: 1.0.0
"#;

#[tokio::test]
async fn install_admit_upgrade_uninstall() {
    let cluster = Cluster::start(ClusterOptions {
        install_crds: false,
        ..ClusterOptions::default()
    })
    .await
    .expect("cluster");
    let admin = cluster.client().await.expect("client");
    // The services' namespace at Pod Security's `restricted` level: the privileged package pods
    // must run elsewhere (the chart's package namespace), or the Job controller cannot create them
    // and the rollout below never completes.
    let ns = cluster
        .create_restricted_namespace("chart")
        .await
        .expect("namespace");
    let pkg_ns = format!("{ns}-nw-nodewright-packages");
    let work = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let chart = chart_dir();
    let chart = chart.to_string_lossy();
    let url = format!("--set=webhook.url=https://127.0.0.1:{port}");

    // Install.
    cluster
        .helm(&[
            "install",
            REL,
            &chart,
            "-n",
            &ns,
            &url,
            "--set=crds.keep=false",
            // Both services' /metrics behind TokenReview + SubjectAccessReview, the scraper
            // ServiceAccount bound to the metrics-reader ClusterRole.
            "--set=metrics.authentication.enabled=true",
            "--set=metrics.readerSubjects[0].kind=ServiceAccount",
            "--set=metrics.readerSubjects[0].name=scraper",
            &format!("--set=metrics.readerSubjects[0].namespace={ns}"),
        ])
        .await
        .expect("helm install");
    let manifest = parse_manifest(
        &cluster
            .helm(&["get", "manifest", REL, "-n", &ns])
            .await
            .expect("manifest"),
    );
    let objs = objects(&manifest);
    // 29 objects (the package namespace, the operator's Role and RoleBinding there and the package
    // pods' ServiceAccount among them), the viewer and editor ClusterRoles, and with metrics
    // authentication two ClusterRoles and two ClusterRoleBindings.
    assert_eq!(objs.len(), 35, "{objs:?}");
    let labels = cluster
        .kubectl(&[
            "get",
            "namespace",
            &pkg_ns,
            "-o",
            "jsonpath={.metadata.labels}",
        ])
        .await
        .expect("the package namespace");
    assert!(
        labels.contains(r#""pod-security.kubernetes.io/enforce":"privileged""#),
        "the package namespace admits privileged pods: {labels}"
    );
    for (kind, obj_ns, name) in &objs {
        assert!(
            exists(&cluster, kind, obj_ns.as_deref(), name).await,
            "{kind} {name} was not created ({})",
            cluster.describe()
        );
    }
    for crd in [
        "nodewrights.nodewright.nvidia.com",
        "deploymentpolicies.nodewright.nvidia.com",
    ] {
        cluster
            .kubectl(&[
                "wait",
                "--for=condition=Established",
                &format!("crd/{crd}"),
                "--timeout=60s",
            ])
            .await
            .expect("CRD established");
    }

    // A second release of the same name in another namespace installs alongside (CRDs belong to
    // the first) and goes away without touching the first.
    let ns2 = cluster
        .create_namespace("chart-second")
        .await
        .expect("namespace");
    cluster
        .helm(&[
            "install",
            REL,
            &chart,
            "-n",
            &ns2,
            "--set=crds.install=false",
        ])
        .await
        .expect("a second release installs alongside the first");
    let cluster_scoped = || async {
        cluster
            .kubectl(&[
                "get",
                "clusterrole,clusterrolebinding,mutatingwebhookconfiguration,validatingwebhookconfiguration",
                "-l",
                &format!("app.kubernetes.io/instance={REL}"),
                "-o",
                "name",
            ])
            .await
            .expect("list")
    };
    let both = cluster_scoped().await;
    assert_eq!(
        both.lines().count(),
        20,
        "eight cluster-scoped objects per release, four more with metrics authentication:\n{both}"
    );
    cluster
        .helm(&["uninstall", REL, "-n", &ns2, "--wait", "--timeout=120s"])
        .await
        .expect("uninstall the second release");
    let first_only = cluster_scoped().await;
    assert_eq!(first_only.lines().count(), 12, "{first_only}");
    assert!(
        first_only.lines().all(|l| l.contains(&format!("/{ns}."))),
        "{first_only}"
    );

    // Least privilege, as the apiserver authorises it.
    let op_sa = "nw-nodewright-operator";
    let wh_sa = "nw-nodewright-webhook";
    let config_name = format!("{ns}.nw-nodewright-webhook");
    let mut checks: Vec<(&str, Vec<String>, bool)> = vec![
        (op_sa, vec!["patch".into(), "nodes".into()], true),
        (
            op_sa,
            vec![
                "update".into(),
                "nodewrights.nodewright.nvidia.com".into(),
                "--subresource=status".into(),
            ],
            true,
        ),
        (
            op_sa,
            vec!["delete".into(), "nodewrights.nodewright.nvidia.com".into()],
            false,
        ),
        (
            op_sa,
            vec![
                "list".into(),
                "deploymentpolicies.nodewright.nvidia.com".into(),
            ],
            true,
        ),
        (
            op_sa,
            vec![
                "update".into(),
                "deploymentpolicies.nodewright.nvidia.com".into(),
            ],
            false,
        ),
        (
            op_sa,
            vec![
                "create".into(),
                "pods".into(),
                "--subresource=eviction".into(),
                "-n".into(),
                "kube-system".into(),
            ],
            true,
        ),
        (op_sa, vec!["list".into(), "pods".into(), "-A".into()], true),
        // The last-logs evidence of a timed-out stage (found missing on the real node).
        (
            op_sa,
            vec![
                "get".into(),
                "pods".into(),
                "--subresource=log".into(),
                "-n".into(),
                pkg_ns.clone(),
            ],
            true,
        ),
        (
            op_sa,
            vec![
                "get".into(),
                "pods".into(),
                "--subresource=log".into(),
                "-n".into(),
                "kube-system".into(),
            ],
            false,
        ),
        (
            op_sa,
            vec!["delete".into(), "pods".into(), "-n".into(), pkg_ns.clone()],
            true,
        ),
        (
            op_sa,
            vec![
                "delete".into(),
                "pods".into(),
                "-n".into(),
                "kube-system".into(),
            ],
            false,
        ),
        (
            op_sa,
            vec![
                "create".into(),
                "jobs.batch".into(),
                "-n".into(),
                pkg_ns.clone(),
            ],
            true,
        ),
        // Nothing new runs beside the services (an earlier version's Jobs there are only settled).
        (
            op_sa,
            vec![
                "create".into(),
                "jobs.batch".into(),
                "-n".into(),
                ns.clone(),
            ],
            false,
        ),
        (
            op_sa,
            vec![
                "create".into(),
                "configmaps".into(),
                "-n".into(),
                ns.clone(),
            ],
            false,
        ),
        (
            op_sa,
            vec![
                "create".into(),
                "jobs.batch".into(),
                "-n".into(),
                "default".into(),
            ],
            false,
        ),
        (
            op_sa,
            vec![
                "update".into(),
                "leases.coordination.k8s.io".into(),
                "-n".into(),
                ns.clone(),
            ],
            true,
        ),
        (
            op_sa,
            vec![
                "get".into(),
                "secrets/nw-nodewright-webhook-ca".into(),
                "-n".into(),
                ns.clone(),
            ],
            true,
        ),
        (
            op_sa,
            vec![
                "get".into(),
                "secrets/someone-elses".into(),
                "-n".into(),
                ns.clone(),
            ],
            false,
        ),
        (
            op_sa,
            vec!["list".into(), "secrets".into(), "-n".into(), ns.clone()],
            false,
        ),
        (
            op_sa,
            vec![
                "patch".into(),
                format!("mutatingwebhookconfigurations/{config_name}"),
            ],
            true,
        ),
        (
            op_sa,
            vec![
                "patch".into(),
                "validatingwebhookconfigurations/another".into(),
            ],
            false,
        ),
        (
            op_sa,
            vec![
                "create".into(),
                "events".into(),
                "-n".into(),
                "default".into(),
            ],
            true,
        ),
        // The Job controller's FailedCreate Events about its Jobs, in their namespace only.
        (
            op_sa,
            vec!["watch".into(), "events".into(), "-n".into(), pkg_ns.clone()],
            true,
        ),
        (
            op_sa,
            vec![
                "watch".into(),
                "events".into(),
                "-n".into(),
                "default".into(),
            ],
            false,
        ),
        (
            wh_sa,
            vec!["watch".into(), "nodewrights.nodewright.nvidia.com".into()],
            true,
        ),
        (
            wh_sa,
            vec![
                "list".into(),
                "deploymentpolicies.nodewright.nvidia.com".into(),
            ],
            true,
        ),
        (
            wh_sa,
            vec!["create".into(), "nodewrights.nodewright.nvidia.com".into()],
            false,
        ),
        (
            wh_sa,
            vec![
                "get".into(),
                "secrets/nw-nodewright-webhook-tls".into(),
                "-n".into(),
                ns.clone(),
            ],
            true,
        ),
        (
            wh_sa,
            vec![
                "get".into(),
                "secrets/nw-nodewright-webhook-ca".into(),
                "-n".into(),
                ns.clone(),
            ],
            false,
        ),
        (
            wh_sa,
            vec!["list".into(), "pods".into(), "-n".into(), ns.clone()],
            false,
        ),
    ];
    // The package pods' ServiceAccount: it exists and holds no right at all.
    let pkg_sa = "nw-nodewright-packages";
    assert!(
        exists(&cluster, "serviceaccount", Some(&pkg_ns), pkg_sa).await,
        "the chart creates the package pods' ServiceAccount"
    );
    for args in [
        vec!["get", "pods"],
        vec!["get", "configmaps"],
        vec!["get", "secrets"],
        vec!["create", "jobs.batch"],
        vec!["get", "nodes"],
        vec!["patch", "nodes"],
        vec!["get", "nodewrights.nodewright.nvidia.com"],
        vec!["create", "tokenreviews.authentication.k8s.io"],
    ] {
        let mut args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        args.extend(["-n".to_owned(), pkg_ns.clone()]);
        checks.push((pkg_sa, args, false));
    }
    let mut wrong = Vec::new();
    for (sa, args, expected) in &checks {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let sa_ns = if *sa == pkg_sa { &pkg_ns } else { &ns };
        if can_i(&cluster, sa_ns, sa, &args).await != *expected {
            wrong.push(format!("{sa} can-i {args:?}: expected {expected}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // Who may create a NodeWright, i.e. run a privileged image as root on every node it selects
    // (issue 22, item 1). By default nobody through the built-in roles: the editor is not
    // aggregated into `edit`/`admin`. The viewer is aggregated into `view` (and `edit`, `admin`):
    // waiting until `view` grants `get` also waits for the clusterrole-aggregation controller, so
    // the `no`s below are its settled answer, not its lag.
    bind_people(&cluster, &ns).await;
    let nw = "nodewrights.nodewright.nvidia.com";
    for user in [CLUSTER_VIEWER, CLUSTER_EDITOR, CLUSTER_ADMIN_ROLE] {
        cluster
            .wait_for(
                &format!("the viewer aggregated into {user}'s role"),
                BOUND,
                || async { Ok(can_i_as(&cluster, user, &["get", nw]).await.then_some(())) },
            )
            .await
            .expect("the viewer is aggregated into view, edit and admin");
    }
    let mut wrong = Vec::new();
    for (user, extra) in [
        (CLUSTER_EDITOR, vec![]),
        (CLUSTER_ADMIN_ROLE, vec![]),
        (CLUSTER_VIEWER, vec![]),
        // kubectl sends the namespace even for a cluster-scoped kind, so this is what an
        // administrator asking about the namespace's editor sees.
        (NAMESPACE_EDITOR, vec!["-n", ns.as_str()]),
    ] {
        for verb in ["create", "update", "delete"] {
            let mut args = vec![verb, nw];
            args.extend(extra.iter().copied());
            if can_i_as(&cluster, user, &args).await {
                wrong.push(format!("{user} can-i {args:?}: expected no"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let people_manifest = work.path().join("people.yaml");
    std::fs::write(
        &people_manifest,
        VALID.replace("chart-valid", "chart-people"),
    )
    .expect("write");
    let people_manifest = people_manifest.to_string_lossy().into_owned();
    for user in [CLUSTER_EDITOR, CLUSTER_ADMIN_ROLE, NAMESPACE_EDITOR] {
        let refused = create_as(&cluster, user, &people_manifest)
            .await
            .expect_err("a holder of the built-in edit/admin creates no NodeWright by default");
        assert!(
            refused.contains(&format!(
                "User \"{user}\" cannot create resource \"nodewrights\""
            )),
            "{user}: {refused}"
        );
    }

    // The operator binary with the operator's token and exactly the chart's env (the defaults
    // ConfigMap through envFrom, then the container's env); only what the kubelet would fill in
    // (fieldRefs) and the listen addresses (free local ports) are supplied here.
    let nodes_before = node_marks(&cluster).await;
    let op_kubeconfig = token_kubeconfig(&cluster, &ns, op_sa, work.path()).await;
    let op_container = container(find(&manifest, "Deployment", "nw-nodewright-operator")).clone();
    assert_eq!(
        env_value(&op_container, "WEBHOOK_CERTS_MANAGED").as_deref(),
        Some("true"),
        "self-managed mode turns the certificate controller on"
    );
    assert!(
        env_value(&op_container, "WEBHOOK_EXTRA_NAMES")
            .is_some_and(|n| n.split(',').any(|n| n == "127.0.0.1")),
        "URL host in the names"
    );
    let op_listen = Listen::local();
    let command = operator_command(
        &manifest,
        REL,
        &ns,
        &op_kubeconfig,
        "nw-nodewright-operator-0",
        &op_listen,
        None,
    );
    let op_log = work.path().join("operator.log");
    let mut operator = spawn_logged(command, &op_log);
    let operator_log = || std::fs::read_to_string(&op_log).unwrap_or_default();
    let injected = cluster
        .wait_for("caBundle injected", BOUND, || async {
            let Some(b) = bundles(&admin, &config_name).await else {
                return Ok(None);
            };
            Ok(
                (b.len() == 4 && b.iter().all(|x| !x.is_empty()) && b.iter().all(|x| *x == b[0]))
                    .then(|| b[0].clone()),
            )
        })
        .await;
    let injected = match injected {
        Ok(b) => b,
        Err(e) => panic!(
            "{e}\noperator log:\n{}\n{}",
            operator_log(),
            cluster
                .kubectl(&[
                    "get",
                    "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                    "-o",
                    "yaml"
                ])
                .await
                .unwrap_or_default()
        ),
    };

    // The webhook binary with the webhook's token and the chart's env.
    let wh_kubeconfig = token_kubeconfig(&cluster, &ns, wh_sa, work.path()).await;
    let log = work.path().join("webhook.log");
    let wh_listen = Listen {
        serve: format!("127.0.0.1:{port}"),
        metrics: format!("127.0.0.1:{}", free_port()),
    };
    let command = webhook_command(&manifest, REL, &wh_kubeconfig, &wh_listen, None);
    let webhook = spawn_logged(command, &log);
    let webhook_log = || std::fs::read_to_string(&log).unwrap_or_default();

    let valid = work.path().join("valid.yaml");
    std::fs::write(&valid, VALID).expect("write");
    let valid = valid.to_string_lossy().into_owned();
    let invalid = repo_dir().join("examples/invalid/depends-on-cycle.yaml");
    let invalid = invalid.to_string_lossy().into_owned();
    cluster
        .wait_for(
            "a valid NodeWright admitted through the chart's webhook configurations",
            BOUND,
            || async { Ok(cluster.kubectl(&["apply", "-f", &valid]).await.ok()) },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\nwebhook log:\n{}", webhook_log()));
    let defaulted = cluster
        .kubectl(&[
            "get",
            "nw",
            "chart-valid",
            "-o",
            "jsonpath={.spec.packages.tool.stageTimeout}",
        ])
        .await
        .expect("get");
    assert_eq!(
        defaulted, "1h",
        "the mutating webhook filled the chart's default"
    );

    // The operator rolls it out to every node: base, then tool, as Jobs kwok plays to success.
    let nodes = cluster.node_names().len();
    let complete = cluster
        .wait_for(
            "NodeWright complete on every node",
            Duration::from_secs(240),
            || async {
                let status = cluster
                    .kubectl(&[
                        "get",
                        "nw",
                        "chart-valid",
                        "-o",
                        "jsonpath={.status.status} {.status.completeNodes}",
                    ])
                    .await
                    .unwrap_or_default();
                Ok((status == format!("complete {nodes}/{nodes}")).then_some(()))
            },
        )
        .await;
    if let Err(e) = complete {
        panic!(
            "{e}\n{}\noperator log:\n{}",
            cluster
                .kubectl(&["get", "nw", "chart-valid", "-o", "yaml"])
                .await
                .unwrap_or_default(),
            operator_log()
        );
    }
    let states = cluster
        .kubectl(&[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.annotations.nodewright\\.nvidia\\.com/nodeState_chart-valid}{\"\\n\"}{end}",
        ])
        .await
        .expect("node states");
    let states: Vec<&str> = states.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(states.len(), nodes, "a node state per node: {states:?}");
    for text in &states {
        let state = nodewright_shared::node_state::NodeState::parse(text).expect("node state");
        for package in ["base", "tool"] {
            let record = state.get(package, "1.0.0");
            assert!(
                record.is_some_and(
                    |r| r.state == Some(nodewright_shared::node_state::State::Complete)
                ),
                "{package} 1.0.0 complete on the node: {text}"
            );
        }
    }
    // Every package pod ran as the chart's rightless ServiceAccount, with no token mounted (the
    // ServiceAccount admission plugin refuses a pod naming an account that does not exist, so the
    // rollout above completing is the account existing too).
    let accounts = cluster
        .kubectl(&[
            "get",
            "pods",
            "-n",
            &pkg_ns,
            "-l",
            "nodewright.nvidia.com/name=chart-valid",
            "-o",
            "jsonpath={range .items[*]}{.spec.serviceAccountName} {.spec.automountServiceAccountToken}{\"\\n\"}{end}",
        ])
        .await
        .expect("package pods");
    let accounts: Vec<&str> = accounts.lines().filter(|l| !l.is_empty()).collect();
    assert!(!accounts.is_empty(), "the rollout left its package pods");
    for account in &accounts {
        assert_eq!(
            *account, "nw-nodewright-packages false",
            "every package pod runs as the rightless account without a token: {accounts:?}"
        );
    }
    // Metrics authentication, as the chart configures both services (METRICS_AUTH and
    // WEBHOOK_METRICS_AUTH from its env, the review permissions from its RBAC, on their own
    // ServiceAccount tokens): the bound scraper reads, another ServiceAccount is refused.
    cluster
        .kubectl(&["create", "serviceaccount", "scraper", "-n", &ns])
        .await
        .expect("scraper");
    cluster
        .kubectl(&["create", "serviceaccount", "stranger", "-n", &ns])
        .await
        .expect("stranger");
    let scraper = cluster
        .kubectl(&["create", "token", "scraper", "-n", &ns])
        .await
        .expect("token");
    let stranger = cluster
        .kubectl(&["create", "token", "stranger", "-n", &ns])
        .await
        .expect("token");
    for (service, addr) in [
        ("operator", &op_listen.metrics),
        ("webhook", &wh_listen.metrics),
    ] {
        let scrape = |token: String| async move {
            let url = format!("http://{addr}/metrics");
            let response = reqwest::Client::new()
                .get(&url)
                .bearer_auth(token.trim())
                .send()
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            (
                response.status().as_u16(),
                response.text().await.unwrap_or_default(),
            )
        };
        let (code, body) = scrape(scraper.clone()).await;
        assert_eq!(code, 200, "{service}: {body}");
        assert!(
            body.contains("process_resident_memory_bytes"),
            "{service}: {body}"
        );
        let (code, body) = scrape(stranger.clone()).await;
        assert_eq!(code, 403, "{service}: {body}");
    }
    cluster
        .kubectl(&["delete", "serviceaccount", "scraper", "stranger", "-n", &ns])
        .await
        .expect("delete the scrapers");

    let rejected = |what: &'static str| {
        let invalid = invalid.clone();
        let cluster = &cluster;
        async move {
            match cluster.kubectl(&["apply", "-f", &invalid]).await {
                Ok(out) => panic!("{what}: invalid NodeWright admitted: {out}"),
                Err(e) => e.to_string(),
            }
        }
    };
    let err = rejected("after install").await;
    assert!(
        err.contains("denied the request") && err.contains("dependency cycle"),
        "{err}\nwebhook log:\n{}",
        webhook_log()
    );

    // Upgrade: changed values; admission keeps working and nothing rotates. The administrator
    // opts in to aggregating the editor into `edit` and `admin`.
    cluster
        .helm(&[
            "upgrade",
            REL,
            &chart,
            "-n",
            &ns,
            "--reuse-values",
            "--set=webhook.timeoutSeconds=15",
            "--set=rbac.userRoles.aggregateEditor=true",
        ])
        .await
        .expect("helm upgrade");
    let err = rejected("right after upgrade").await;
    assert!(
        err.contains("dependency cycle"),
        "admission after upgrade: {err}"
    );
    let after = cluster
        .wait_for("caBundle present after upgrade", BOUND, || async {
            let Some(b) = bundles(&admin, &config_name).await else {
                return Ok(None);
            };
            Ok((b.len() == 4 && b.iter().all(|x| *x == injected)).then_some(()))
        })
        .await;
    assert!(after.is_ok(), "caBundle changed or vanished after upgrade");
    let timeout = cluster
        .kubectl(&[
            "get",
            "validatingwebhookconfiguration",
            &config_name,
            "-o",
            "jsonpath={.webhooks[0].timeoutSeconds}",
        ])
        .await
        .expect("get");
    assert_eq!(timeout, "15", "the upgrade applied");
    cluster
        .kubectl(&["apply", "-f", &valid])
        .await
        .expect("valid still admitted");
    // Opted in: the built-in `edit` and `admin` now create NodeWrights (through admission), `view`
    // still only reads, and a namespaced RoleBinding to `edit` still creates nothing for real.
    for user in [CLUSTER_EDITOR, CLUSTER_ADMIN_ROLE] {
        cluster
            .wait_for(
                &format!("the editor aggregated into {user}'s role"),
                BOUND,
                || async {
                    Ok(can_i_as(
                        &cluster,
                        user,
                        &["create", "nodewrights.nodewright.nvidia.com"],
                    )
                    .await
                    .then_some(()))
                },
            )
            .await
            .expect("aggregateEditor=true aggregates the editor into edit and admin");
        create_as(&cluster, user, &people_manifest)
            .await
            .unwrap_or_else(|e| panic!("{user} creates a NodeWright once opted in: {e}"));
    }
    assert!(
        !can_i_as(
            &cluster,
            CLUSTER_VIEWER,
            &["create", "nodewrights.nodewright.nvidia.com"]
        )
        .await
    );
    assert!(
        can_i_as(
            &cluster,
            CLUSTER_VIEWER,
            &["get", "nodewrights.nodewright.nvidia.com"]
        )
        .await
    );
    let refused = create_as(&cluster, NAMESPACE_EDITOR, &people_manifest)
        .await
        .expect_err("a namespaced RoleBinding grants nothing on a cluster-scoped kind");
    assert!(refused.contains("cannot create resource"), "{refused}");
    for user in [CLUSTER_EDITOR, CLUSTER_ADMIN_ROLE, CLUSTER_VIEWER] {
        cluster
            .kubectl(&["delete", "clusterrolebinding", &format!("{ns}-{user}")])
            .await
            .expect("delete binding");
    }
    cluster
        .kubectl(&["delete", "rolebinding", NAMESPACE_EDITOR, "-n", &ns])
        .await
        .expect("delete binding");

    // Uninstall as chart/README.md says: NodeWrights first, in the foreground and while the
    // operator still runs, so its finalizer cleans their nodes and the garbage collector deletes
    // their Jobs and ConfigMaps (owner references) before they are gone; then the services stop
    // (as their pods would, SIGTERM) and `helm uninstall`.
    cluster
        .kubectl(&[
            "delete",
            "nw",
            "chart-valid",
            "--cascade=foreground",
            "--wait=true",
            "--timeout=120s",
        ])
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the operator removes its finalizer: {e}\noperator log:\n{}",
                operator_log()
            )
        });
    let mut owned = String::new();
    for namespace in [&ns, &pkg_ns] {
        owned += &cluster
            .kubectl(&["get", "jobs,configmaps", "-n", namespace, "-o", "name"])
            .await
            .expect("list");
    }
    let owned: Vec<&str> = owned
        .lines()
        .filter(|l| *l != "configmap/kube-root-ca.crt" && !l.contains("nw-nodewright"))
        .collect();
    assert!(
        owned.is_empty(),
        "the NodeWright's Jobs and ConfigMaps went with it: {owned:?}"
    );
    let pid = operator.id().expect("operator pid");
    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await
        .expect("kill runs");
    assert!(killed.success());
    let stopped = tokio::time::timeout(BOUND, operator.wait())
        .await
        .expect("the operator stops after SIGTERM")
        .expect("exit status");
    assert_eq!(stopped.code(), Some(0), "graceful stop\n{}", operator_log());
    drop(webhook);
    assert!(
        operator_log().contains("removed finalizer"),
        "the operator logged its work (so the RBAC check below reads a real log):\n{}",
        operator_log()
    );
    let forbidden: Vec<String> = forbidden_lines(&operator_log())
        .into_iter()
        .chain(forbidden_lines(&webhook_log()))
        .map(str::to_owned)
        .collect();
    assert!(
        forbidden.is_empty(),
        "the chart's RBAC refused the services something:\n{}",
        forbidden.join("\n")
    );
    cluster
        .helm(&["uninstall", REL, "-n", &ns, "--wait", "--timeout=120s"])
        .await
        .expect("helm uninstall");
    for (kind, obj_ns, name) in &objs {
        let gone = cluster
            .wait_for(&format!("{kind} {name} deleted"), BOUND, || async {
                Ok((!exists(&cluster, kind, obj_ns.as_deref(), name).await).then_some(()))
            })
            .await;
        assert!(gone.is_ok(), "{kind} {name} left behind");
    }
    // Nothing in the release namespace but what Kubernetes itself puts in every namespace: neither
    // the chart's objects nor what the operator created (Jobs, their pods, ConfigMaps, the Lease).
    let leftovers = cluster
        .wait_for("the release namespace emptied", BOUND, || async {
            let names = cluster
                .kubectl(&[
                    "get",
                    "deploy,rs,pod,svc,sa,cm,secret,role,rolebinding,pdb,limitrange,hpa,lease,job",
                    "-n",
                    &ns,
                    "-o",
                    "name",
                ])
                .await
                .expect("list");
            let left: Vec<String> = names
                .lines()
                .filter(|l| !matches!(*l, "serviceaccount/default" | "configmap/kube-root-ca.crt"))
                .map(str::to_owned)
                .collect();
            Ok(left.is_empty().then_some(()))
        })
        .await;
    assert!(
        leftovers.is_ok(),
        "left behind in {ns}: {}",
        cluster
            .kubectl(&["get", "all,cm,secret,lease,role,rolebinding,sa", "-n", &ns])
            .await
            .unwrap_or_default()
    );
    // The nodes carry what they carried before the operator ran, but for the node state record
    // the finalizer keeps by design (what is installed there; chart/README.md).
    let record = "annotations nodewright.nvidia.com/nodeState_chart-valid=";
    let nodes_after = node_marks(&cluster).await;
    let (records, rest): (Vec<String>, Vec<String>) =
        nodes_after.into_iter().partition(|m| m.contains(record));
    assert_eq!(rest, nodes_before, "the operator's marks left on nodes");
    assert_eq!(records.len(), nodes, "{records:?}");
    let cluster_wide = cluster
        .kubectl(&[
            "get",
            "clusterrole,clusterrolebinding,mutatingwebhookconfiguration,validatingwebhookconfiguration,crd",
            "-l",
            &format!("app.kubernetes.io/instance={REL}"),
            "-o",
            "name",
        ])
        .await
        .expect("list");
    assert!(
        cluster_wide.trim().is_empty(),
        "left behind: {cluster_wide}"
    );
}
