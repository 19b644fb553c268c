//! A mock API server for unit tests of writes: a real `kube::Client` whose requests are answered in
//! process (the kube-rs controller-rs fixtures pattern).

use kube::client::Body;
use serde_json::{Value, json};

/// A client whose every request is answered by `answer(method, path, body)` with a status code and
/// a JSON body. The task ends when the client is dropped.
pub fn serve(
    answer: impl Fn(&http::Method, &str, Value) -> (u16, Value) + Send + 'static,
) -> (kube::Client, tokio::task::JoinHandle<()>) {
    let (service, mut handle) =
        tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
    let task = tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            let path = request.uri().path().to_owned();
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .expect("request body");
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (status, reply) = answer(&method, &path, body);
            send.send_response(
                http::Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(&reply).expect("reply JSON")))
                    .expect("response"),
            );
        }
    });
    (kube::Client::new(service, "nodewright"), task)
}

/// A NodeWright as a store holds it: named, at resourceVersion 1.
pub fn stored_nodewright(name: &str) -> nodewright_shared::api::NodeWright {
    let mut nw = nodewright_shared::api::NodeWright::new(name, Default::default());
    nw.metadata.resource_version = Some("1".into());
    nw
}

/// The body of a 404.
pub fn not_found() -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "NotFound",
           "code": 404})
}

/// A client whose status writes of NodeWrights succeed: a PUT of `.../nodewrights/<name>/status`
/// is answered with the object it carried, its resourceVersion moved on by one. Any other request
/// is answered 404.
pub fn status_writes_succeed() -> (kube::Client, tokio::task::JoinHandle<()>) {
    serve(|method, path, mut object| {
        if method != http::Method::PUT || !path.ends_with("/status") {
            return (404, not_found());
        }
        let rv = object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        object["metadata"]["resourceVersion"] = (rv + 1).to_string().into();
        (200, object)
    })
}

/// One request the [`cluster`] answered.
#[derive(Debug, Clone)]
pub struct Seen {
    /// HTTP method.
    pub method: http::Method,
    /// URL path.
    pub path: String,
    /// JSON body (`Null` when none).
    pub body: Value,
    /// The status code it was answered with.
    pub status: u16,
}

/// What a [`cluster`] holds and saw.
#[derive(Debug, Default)]
pub struct ClusterState {
    /// Nodes by name, as JSON, with every JSON patch applied.
    pub nodes: std::collections::BTreeMap<String, Value>,
    /// ConfigMaps a list returns (as JSON).
    pub configmaps: Vec<Value>,
    /// Jobs there were before (a merge patch of one is applied to it here).
    pub existing_jobs: Vec<Value>,
    /// Jobs created, in order.
    pub jobs: Vec<Value>,
    /// The last NodeWright status written (the whole object the PUT carried).
    pub nodewright: Option<Value>,
    /// Every request, in order.
    pub seen: Vec<Seen>,
}

/// A shared [`ClusterState`].
pub type Cluster = std::sync::Arc<std::sync::Mutex<ClusterState>>;

fn bump(object: &mut Value) {
    let rv = object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    object["metadata"]["resourceVersion"] = (rv + 1).to_string().into();
}

fn conflict(message: String) -> (u16, Value) {
    (
        409,
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "Conflict",
               "code": 409, "message": message}),
    )
}

/// A stateful mock API for a rollout pass: node JSON patches are applied to `nodes` (a failed
/// `test` op is a 409, as the apiserver answers a stale resourceVersion) and move the
/// resourceVersion on; Job creations are kept; a NodeWright status PUT is kept and answered with
/// its resourceVersion moved on; a merge patch of a Job it created is applied; a pod list is
/// empty (nothing to drain); a ConfigMap list returns [`ClusterState::configmaps`] (none
/// unless the test puts some there); Events, ConfigMap applies and node status patches are answered
/// with what they carried (or the node). Anything else is a 404. Every request is recorded.
pub fn cluster(
    nodes: &[k8s_openapi::api::core::v1::Node],
) -> (kube::Client, tokio::task::JoinHandle<()>, Cluster) {
    let state = Cluster::default();
    {
        let mut s = state.lock().expect("mock cluster state");
        for node in nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            s.nodes
                .insert(name, serde_json::to_value(node).expect("a node encodes"));
        }
    }
    let shared = state.clone();
    let (client, task) = serve(move |method, path, body| {
        let mut s = shared.lock().expect("mock cluster state");
        let (status, reply) = answer_request(&mut s, method, path, body.clone());
        s.seen.push(Seen {
            method: method.clone(),
            path: path.to_owned(),
            body,
            status,
        });
        (status, reply)
    });
    (client, task, state)
}

/// [`cluster`]'s answer to one request.
fn answer_request(
    s: &mut ClusterState,
    method: &http::Method,
    path: &str,
    body: Value,
) -> (u16, Value) {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["api", "v1", "nodes", name]) => match s.nodes.get(*name) {
            Some(node) => (200, node.clone()),
            None => (404, not_found()),
        },
        ("PATCH", ["api", "v1", "nodes", name]) => {
            let Some(node) = s.nodes.get_mut(*name) else {
                return (404, not_found());
            };
            let patch: json_patch::Patch = match serde_json::from_value(body) {
                Ok(p) => p,
                Err(e) => return (422, json!({"kind": "Status", "message": e.to_string()})),
            };
            let mut patched = node.clone();
            if let Err(e) = json_patch::patch(&mut patched, &patch) {
                return conflict(e.to_string());
            }
            bump(&mut patched);
            *node = patched.clone();
            (200, patched)
        }
        ("PATCH", ["api", "v1", "nodes", name, "status"]) => match s.nodes.get(*name) {
            Some(node) => (200, node.clone()),
            None => (404, not_found()),
        },
        ("GET", [.., "configmaps"]) => (
            200,
            json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {},
                   "items": s.configmaps.clone()}),
        ),
        ("POST", [.., "jobs"]) => {
            let mut job = body;
            let name = job["metadata"]["name"].as_str().unwrap_or("job").to_owned();
            job["metadata"]["uid"] = format!("uid-{name}").into();
            job["metadata"]["resourceVersion"] = "1".into();
            s.jobs.push(job.clone());
            (201, job)
        }
        ("PATCH", [.., "jobs", name]) => {
            let Some(job) = s
                .jobs
                .iter_mut()
                .chain(s.existing_jobs.iter_mut())
                .find(|j| j["metadata"]["name"].as_str() == Some(*name))
            else {
                return (404, not_found());
            };
            json_patch::merge(job, &body);
            (200, job.clone())
        }
        ("GET", ["api", "v1", "pods"]) | ("GET", ["api", "v1", "namespaces", _, "pods"]) => (
            200,
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []}),
        ),
        ("PUT", [.., "nodewrights", _, "status"]) => {
            let mut nw = body;
            bump(&mut nw);
            s.nodewright = Some(nw.clone());
            (200, nw)
        }
        ("POST", [.., "events"]) | ("PATCH", [.., "configmaps", _]) => {
            let mut object = body;
            if object["metadata"]["name"].is_null() {
                object["metadata"]["name"] = "generated".into();
            }
            (201, object)
        }
        _ => (404, not_found()),
    }
}
