//! The admission load: `clients` concurrent clients, each on its own connection to the
//! kube-apiserver, creating and updating NodeWrights for the whole run. Every create and update
//! passes through both webhooks (mutating, then validating; `failurePolicy: Fail`), so every
//! failed call to a webhook is a failed request here. Each client keeps a few objects of its own:
//! seven of eight operations update one (a merge patch of an annotation: an UPDATE admission), one
//! in eight creates a new one and deletes its oldest, so the store stays small.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nodewright_shared::api::NodeWright;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Objects each client keeps.
const POOL: usize = 4;

/// An admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Create,
    Update,
}

/// One request: when it started, how long it took, how it ended.
#[derive(Debug, Clone)]
pub struct Sample {
    pub start: Instant,
    pub latency: Duration,
    pub op: Op,
    /// The apiserver's message when the request failed.
    pub error: Option<String>,
}

fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}: {}", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}

/// One client: its own `kube::Client` (its own connections), operations until `stop`.
pub async fn client(
    config: kube::Config,
    prefix: String,
    id: usize,
    stop: CancellationToken,
) -> Vec<Sample> {
    let client = kube::Client::try_from(config).expect("client");
    let api: Api<NodeWright> = Api::all(client);
    let mut samples = Vec::new();
    let mut pool: VecDeque<String> = VecDeque::new();
    let mut made = 0usize;
    let mut step = 0usize;
    while !stop.is_cancelled() {
        step += 1;
        let create = pool.len() < POOL || step.is_multiple_of(8);
        let start = Instant::now();
        let (op, result) = if create {
            let name = format!("{prefix}-{id}-{made}");
            made += 1;
            let r = api
                .create(
                    &PostParams::default(),
                    &nodewright_e2e::churn::unmatched_nodewright(&name, "rotation"),
                )
                .await;
            if r.is_ok() {
                pool.push_back(name);
            }
            (Op::Create, r.map(|_| ()))
        } else {
            let name = &pool[step % pool.len()];
            let patch =
                json!({"metadata": {"annotations": {"nodewright-e2e/step": step.to_string()}}});
            let r = api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            (Op::Update, r.map(|_| ()))
        };
        samples.push(Sample {
            start,
            latency: start.elapsed(),
            op,
            error: result.err().map(|e| message(&e)),
        });
        if pool.len() > POOL
            && let Some(oldest) = pool.pop_front()
        {
            // Not an admission (no webhook intercepts DELETE of a NodeWright); the operator's
            // finalizer lets it go.
            let _ = api.delete(&oldest, &DeleteParams::default()).await;
        }
    }
    samples
}
