//! A mock API server for unit tests of writes: a real `kube::Client` whose requests are answered in
//! process (the kube-rs controller-rs fixtures pattern).

use kube::client::Body;

/// A client whose status writes of NodeWrights succeed: a PUT of `.../nodewrights/<name>/status`
/// is answered with the object it carried, its resourceVersion moved on by one. Any other request
/// is answered 404. The task ends when the client is dropped.
pub fn status_writes_succeed() -> (kube::Client, tokio::task::JoinHandle<()>) {
    let (service, mut handle) =
        tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
    let task = tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let put_status =
                request.method() == http::Method::PUT && request.uri().path().ends_with("/status");
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .expect("request body");
            let mut object: serde_json::Value =
                serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
            let (status, reply) = if put_status {
                let rv = object["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                object["metadata"]["resourceVersion"] = (rv + 1).to_string().into();
                (200, object)
            } else {
                (
                    404,
                    serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                        "reason": "NotFound", "code": 404}),
                )
            };
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
