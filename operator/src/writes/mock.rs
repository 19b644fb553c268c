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
