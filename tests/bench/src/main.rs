//! `nodewright-bench`: the measuring half of `tests/bench/operator-rollout.sh`.
//!
//! - `rollout`: applies a NodeWright and traces the operator's rollout until its status is
//!   `complete` (wall time and the gaps of every node's stage chain, [`trace`]).
//! - `floor`: the same Jobs (the operator's own builders and configuration) with no operator logic:
//!   every node's first Jobs at once, and each next Job of the chain created the moment its
//!   predecessors complete. What a perfect operator could not beat on this cluster.

mod chain;
mod trace;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use nodewright_core::jobs::{PackageJobInput, build_package_job};
use nodewright_operator::runtime::config::OperatorConfig;
use nodewright_shared::api::{NodeWright, Status};
use nodewright_shared::keys;
use tokio::task::JoinSet;

use crate::chain::{Chain, Step};
use crate::trace::Tracer;

#[derive(Parser)]
#[command(about = "Measures a NodeWright rollout against the Job-chain floor")]
struct Args {
    #[command(subcommand)]
    mode: Mode,
    /// The NodeWright manifest (YAML).
    #[arg(long, global = true, default_value = "nw.yaml")]
    manifest: PathBuf,
    /// The operator's namespace (where the Jobs run).
    #[arg(long, global = true, default_value = "nodewright")]
    namespace: String,
    /// Also write the report as JSON to this file.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Mode {
    /// Apply the NodeWright and trace the operator's rollout until it is complete.
    Rollout,
    /// Create the NodeWright's Jobs chain by chain with no operator (none may be running).
    Floor,
}

/// Why a measurement failed.
#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing the NodeWright manifest {path}: {source}")]
    Manifest {
        path: PathBuf,
        source: yaml_serde::Error,
    },
    #[error("{0}")]
    Chain(#[from] chain::ChainError),
    #[error("the floor supports nodeSelectors.matchLabels only")]
    Selector,
    #[error("operator configuration: {0}")]
    Config(String),
    #[error("building a Job: {0}")]
    Build(String),
    #[error("{what}: {source}")]
    Kube { what: String, source: kube::Error },
    #[error("the watches ended before the run did")]
    WatchEnded,
    #[error("writing the report: {0}")]
    Report(String),
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Kube { what, source }
}

/// What one of the run's watches saw.
enum Seen {
    Job(Box<Job>),
    Pod(Box<Pod>),
    Node(Box<Node>),
    NodeWright(Box<NodeWright>),
}

fn applied<K>(event: watcher::Event<K>) -> Option<K> {
    match event {
        watcher::Event::Apply(k) | watcher::Event::InitApply(k) => Some(k),
        _ => None,
    }
}

/// Every watch the trace needs, merged into one stream of objects as they change.
fn observe(
    client: &kube::Client,
    namespace: &str,
) -> impl futures::Stream<Item = Result<Seen, watcher::Error>> + Send + 'static {
    let owned = watcher::Config::default().labels(keys::NAME_LABEL);
    let jobs = watcher(
        Api::<Job>::namespaced(client.clone(), namespace),
        owned.clone(),
    )
    .default_backoff()
    .map_ok(|e| applied(e).map(|j| Seen::Job(Box::new(j))))
    .boxed();
    let pods = watcher(Api::<Pod>::namespaced(client.clone(), namespace), owned)
        .default_backoff()
        .map_ok(|e| applied(e).map(|p| Seen::Pod(Box::new(p))))
        .boxed();
    let nodes = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .map_ok(|e| applied(e).map(|n| Seen::Node(Box::new(n))))
        .boxed();
    let nodewrights = watcher(
        Api::<NodeWright>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .map_ok(|e| applied(e).map(|n| Seen::NodeWright(Box::new(n))))
    .boxed();
    stream::select_all([jobs, pods, nodes, nodewrights]).filter_map(|r| async move {
        match r {
            Ok(Some(seen)) => Some(Ok(seen)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    })
}

fn read_manifest(path: &PathBuf) -> Result<NodeWright, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BenchError::Read {
        path: path.clone(),
        source,
    })?;
    yaml_serde::from_str(&text).map_err(|source| BenchError::Manifest {
        path: path.clone(),
        source,
    })
}

fn operator_config(namespace: &str) -> Result<OperatorConfig, BenchError> {
    let env = std::collections::BTreeMap::from([
        ("NAMESPACE", namespace.to_owned()),
        ("POD_NAME", "nodewright-bench".to_owned()),
        ("LEADER_ELECTION", "false".to_owned()),
    ]);
    OperatorConfig::from_lookup(|var| env.get(var).cloned().or_else(|| std::env::var(var).ok()))
        .map_err(|e| BenchError::Config(e.to_string()))
}

/// The nodes the NodeWright selects (matchLabels only), in the operator's rollout order.
async fn selected_nodes(client: &kube::Client, nw: &NodeWright) -> Result<Vec<Node>, BenchError> {
    let Some(selector) = &nw.spec.node_selectors else {
        return Err(BenchError::Selector);
    };
    if selector
        .match_expressions
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(BenchError::Selector);
    }
    let labels: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let mut nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&labels.join(",")))
        .await
        .map_err(kube_err("listing the selected nodes"))?
        .items;
    nodes.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, &a.metadata.name)
            .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
    });
    Ok(nodes)
}

async fn rollout(args: &Args, client: kube::Client) -> Result<(), BenchError> {
    let nw = read_manifest(&args.manifest)?;
    let name = nw.metadata.name.clone().unwrap_or_default();
    let chain = Chain::of(&nw)?;
    let mut events = pin!(observe(&client, &args.namespace));
    let start = Instant::now();
    Api::<NodeWright>::all(client.clone())
        .create(&PostParams::default(), &nw)
        .await
        .map_err(kube_err(format!("creating NodeWright {name}")))?;
    let mut tracer = Tracer::new(&name, chain, start);
    while let Some(seen) = events.next().await {
        let now = Instant::now();
        match seen {
            Ok(Seen::Job(job)) => {
                tracer.job(&job, now);
            }
            Ok(Seen::Pod(pod)) => tracer.pod(&pod, now),
            Ok(Seen::Node(node)) => tracer.node(&node, now),
            Ok(Seen::NodeWright(n)) => {
                let complete = n.metadata.name.as_deref() == Some(&name)
                    && n.status.as_ref().and_then(|s| s.status) == Some(Status::Complete);
                if complete {
                    return finish(args, &tracer.report(now, true), "operator");
                }
            }
            Err(e) => eprintln!("watch error (retrying): {e}"),
        }
    }
    Err(BenchError::WatchEnded)
}

async fn floor(args: &Args, client: kube::Client) -> Result<(), BenchError> {
    let mut nw = read_manifest(&args.manifest)?;
    let name = nw.metadata.name.clone().unwrap_or_default();
    let config = operator_config(&args.namespace)?;
    nodewright_shared::defaults::default_nodewright(&mut nw.spec, &config.jobs.defaults);
    let chain = Chain::of(&nw)?;
    let nodes = selected_nodes(&client, &nw).await?;
    // The Jobs are owned by the NodeWright (the garbage collector deletes Jobs of a missing owner);
    // no operator runs, so nothing else acts on it.
    let created = Api::<NodeWright>::all(client.clone())
        .create(&PostParams::default(), &nw)
        .await
        .map_err(kube_err(format!("creating NodeWright {name}")))?;
    nw.metadata = created.metadata;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &args.namespace);
    let shared = Arc::new((nw, config));
    let order: std::collections::BTreeMap<String, i64> = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| Some((n.metadata.name.clone()?, i64::try_from(i).ok()?)))
        .collect();
    let mut events = pin!(observe(&client, &args.namespace));
    let mut creates = JoinSet::new();
    let spawn_create = |creates: &mut JoinSet<Result<(), BenchError>>, node: &str, step: &Step| {
        let (shared, jobs, node, step) =
            (shared.clone(), jobs.clone(), node.to_owned(), step.clone());
        let node_order = order.get(&node).copied().unwrap_or_default();
        creates.spawn(async move {
            let (nw, config) = &*shared;
            let Some(package) = nw.spec.packages.get(&step.0) else {
                return Ok(());
            };
            let job = build_package_job(&PackageJobInput {
                nodewright: nw,
                package_key: &step.0,
                package,
                stage: step.1,
                node: &node,
                node_order,
                config: &config.jobs,
            })
            .map_err(|e| BenchError::Build(e.to_string()))?;
            match jobs.create(&PostParams::default(), &job).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(kube_err(format!("creating a Job for {node}"))(e)),
            }
        });
    };
    let start = Instant::now();
    for node in order.keys() {
        for step in chain.roots() {
            spawn_create(&mut creates, node, &step);
        }
    }
    let mut tracer = Tracer::new(&name, chain.clone(), start);
    let mut done: BTreeSet<(String, Step)> = BTreeSet::new();
    loop {
        tokio::select! {
            Some(result) = creates.join_next() => {
                if let Ok(Err(e)) = result {
                    return Err(e);
                }
            }
            seen = events.next() => {
                let now = Instant::now();
                match seen {
                    Some(Ok(Seen::Job(job))) => {
                        if let Some((node, step)) = tracer.job(&job, now) {
                            done.insert((node.clone(), step.clone()));
                            for next in chain.successors(&step) {
                                let ready = chain
                                    .predecessors(&next)
                                    .into_iter()
                                    .all(|p| done.contains(&(node.clone(), p)));
                                if ready {
                                    spawn_create(&mut creates, &node, &next);
                                }
                            }
                            if tracer.all_complete(order.len()) {
                                return finish(args, &tracer.report(now, false), "floor");
                            }
                        }
                    }
                    Some(Ok(Seen::Pod(pod))) => tracer.pod(&pod, now),
                    Some(Ok(Seen::Node(_) | Seen::NodeWright(_))) => {}
                    Some(Err(e)) => eprintln!("watch error (retrying): {e}"),
                    None => return Err(BenchError::WatchEnded),
                }
            }
        }
    }
}

fn finish(args: &Args, report: &trace::Report, label: &str) -> Result<(), BenchError> {
    report.print(label);
    if let Some(path) = &args.json {
        let text =
            serde_json::to_string_pretty(report).map_err(|e| BenchError::Report(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| BenchError::Report(e.to_string()))?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let result = async {
        let client = kube::Client::try_default()
            .await
            .map_err(kube_err("connecting to the cluster (KUBECONFIG)"))?;
        match args.mode {
            Mode::Rollout => rollout(&args, client).await,
            Mode::Floor => floor(&args, client).await,
        }
    }
    .await;
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nodewright-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
