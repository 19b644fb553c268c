//! The dashboard fed by real metrics: a demo run on the example cluster (a rollout through a
//! DeploymentPolicy, a stage that times out, denied and admitted manifests), a Prometheus built from
//! its Go module (tests/prometheus/build.sh --with-prometheus) scraping the operator and the
//! webhook, and every panel's query evaluated against it: each must return data.
//!
//! Grafana itself cannot be built here (its module is AGPL, not used), so this is the rendered
//! check instead of a screenshot. Not part of `cargo test` by default (building Prometheus and the
//! scrape windows take minutes): `tests/docs/panels.sh` runs it.

use std::time::Duration;

use nodewright_docs::{dashboard, harness::Env, promql};

const DEMO: &str = r#"
apiVersion: nodewright.nvidia.com/v1alpha1
kind: DeploymentPolicy
metadata: {name: panels-demo}
spec:
  default:
    budget: {count: 2}
    strategy: {exponential: {initialBatch: 1}}
---
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata: {name: panels-demo}
spec:
  nodeSelectors: {matchLabels: {type: kwok}}
  deploymentPolicy: panels-demo
  packages:
    tuned: {version: 1.0.0, image: ghcr.io/example/tuned}
    flaky: {version: 1.0.0, image: ghcr.io/example/flaky, stageTimeout: 5m}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "builds Prometheus and runs for minutes: tests/docs/panels.sh"]
async fn every_panel_returns_data_from_a_demo_run() {
    let bin = nodewright_docs::tools::prometheus_bin(true).unwrap_or_else(|e| panic!("{e}"));
    let env = Env::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = env.dir();

    // Prometheus scrapes both services every 2s (jobs named as the chart's ServiceMonitors would).
    let target = |url: &str| url.trim_start_matches("http://").to_owned();
    let config = format!(
        "global: {{scrape_interval: 2s, evaluation_interval: 2s}}\nscrape_configs:\n  - job_name: nodewright-operator\n    static_configs: [{{targets: ['{}']}}]\n  - job_name: nodewright-webhook\n    static_configs: [{{targets: ['{}']}}]\n",
        target(&env.operator_metrics),
        target(&env.webhook_metrics)
    );
    std::fs::write(dir.join("prometheus.yml"), config).expect("config");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    let mut prometheus = tokio::process::Command::new(bin.join("prometheus"))
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus starts");

    // The demo: the flaky package fails every attempt (a timed-out stage on each node), the rest
    // completes through the policy's batches; one manifest is denied, the others admitted.
    env.set_fate("flaky", "fail", &[("exit-code", "3")]);
    let demo = dir.join("demo.yaml");
    std::fs::write(&demo, DEMO).expect("demo");
    let script = format!(
        "kubectl apply -f {}\n\
         kubectl apply -f examples/invalid/depends-on-cycle.yaml 2>&1 || true\n\
         for _ in $(seq 1 150); do\n\
           n=$(kubectl -n nodewright get jobs -l nodewright.nvidia.com/name=panels-demo \
             -o jsonpath='{{range .items[*]}}{{.metadata.annotations.nodewright\\.nvidia\\.com/state-recorded}}{{\"\\n\"}}{{end}}' | grep -c timed-out || true)\n\
           [ \"$n\" -ge 4 ] && break\n\
           sleep 2\n\
         done\n\
         [ \"$n\" -ge 4 ]\n\
         sleep 30\n",
        demo.display()
    );
    let (ok, out) = env.shell(&script).await;
    assert!(ok, "demo run failed:\n{out}");

    let text = std::fs::read_to_string(nodewright_docs::repo_dir().join(dashboard::PATH))
        .expect("dashboard");
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let client = reqwest::Client::new();
    let mut empty = Vec::new();
    let mut report = Vec::new();
    for (title, expr) in dashboard::queries(&json) {
        let query = promql::substitute(&expr);
        let url = format!("http://127.0.0.1:{port}/api/v1/query");
        let body: serde_json::Value = client
            .get(&url)
            .query(&[("query", query.as_str())])
            .send()
            .await
            .expect("query")
            .json()
            .await
            .expect("JSON answer");
        let results = body["data"]["result"].as_array().map_or(0, Vec::len);
        report.push(format!("{results:>3} series  {title}: {query}"));
        if body["status"] != "success" || results == 0 {
            empty.push(format!("{title}: {query} -> {body}"));
        }
    }
    eprintln!("{}", report.join("\n"));
    prometheus.kill().await.ok();
    env.stop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        empty.is_empty(),
        "panels without data:\n{}",
        empty.join("\n")
    );
}
