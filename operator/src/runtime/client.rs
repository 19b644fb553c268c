//! The operator's Kubernetes client, built in one place for the binary and for every embedding
//! (the suites' in-process operators, the docs harness), so that what the tests run is what ships.
//! Every request is counted by [`crate::metrics::api`].
//!
//! kube's default client retries every 429, 503 and 504 answer itself: up to 15 times, the backoff
//! doubling from 5 ms (164 s at least in all, several minutes with its jitter), or after the
//! answer's `Retry-After`. Right for an overloaded apiserver; wrong for an eviction. The Eviction API
//! answers 429 when a PodDisruptionBudget refuses it: an answer ("not now"), not overload. Retried in
//! the client, one refused eviction held the pass draining the node for minutes, and that pass's
//! status write with it: through a blocked drain the NodeWright showed no status at all. So this
//! client retries as kube's does, except evictions, which are sent once: the drain's next pass is
//! their retry (a couple of seconds later), and every pass writes the status.

use http::{Request, Response};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use tower::BoxError;
use tower::buffer::BufferLayer;
use tower::retry::{Policy, RetryLayer};

use crate::metrics::api::{ApiMetrics, classify};

/// Requests queued for the stack below the retry (kube's own client buffer has the same bound).
const BUFFER: usize = 1024;

/// The operator's client for `config`, its requests counted in `api`. Call it inside a Tokio
/// runtime (the buffer below the retry runs as a task).
pub fn build(mut config: kube::Config, api: &ApiMetrics) -> Result<kube::Client, kube::Error> {
    // Its place is taken by the same policy without evictions, above the whole stack.
    config.default_retry = false;
    Ok(ClientBuilder::try_from(config)?
        // A retry sends again through a clone of what is below it; kube's stack is one boxed
        // service, which does not clone: the buffer in front of it does.
        .with_layer(&BufferLayer::new(BUFFER))
        .with_layer(&RetryLayer::new(RetryUnlessEviction::default()))
        // Above the retry: a request is counted once, as the caller made it (as with kube's retry).
        .with_layer(&api.layer())
        .build())
}

/// kube's retry policy ([`RetryPolicy::server_retry`]) for every request but an eviction, which is
/// sent once and answered as the apiserver answered it.
#[derive(Clone)]
pub struct RetryUnlessEviction(RetryPolicy);

impl Default for RetryUnlessEviction {
    fn default() -> Self {
        RetryUnlessEviction(RetryPolicy::server_retry())
    }
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for RetryUnlessEviction {
    type Future = <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::Future;

    fn retry(
        &mut self,
        request: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        if is_eviction(request) {
            return None;
        }
        self.0.retry(request, result)
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        // No copy kept for a retry that never comes.
        if is_eviction(request) {
            return None;
        }
        <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::clone_request(
            &mut self.0,
            request,
        )
    }
}

/// Whether `request` creates an eviction (`POST .../pods/<name>/eviction`).
pub fn is_eviction<B>(request: &Request<B>) -> bool {
    let (verb, resource) = classify(
        request.method().as_str(),
        request.uri().path(),
        request.uri().query().unwrap_or(""),
    );
    verb == "create" && resource == "pods/eviction"
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, EvictParams};
    use tower::ServiceBuilder;

    use super::*;

    /// A client over a fake apiserver that answers 429 to the first `refusals` requests, then 200
    /// with a pod; and the number of requests it received.
    fn refusing(refusals: usize) -> (kube::Client, Arc<AtomicUsize>) {
        let received = Arc::new(AtomicUsize::new(0));
        let count = received.clone();
        let apiserver = tower::service_fn(move |_request: Request<Body>| {
            let n = count.fetch_add(1, Ordering::SeqCst);
            async move {
                let (code, body) = if n < refusals {
                    (
                        429,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1",
                            "status": "Failure", "reason": "TooManyRequests", "code": 429,
                            "message": "Cannot evict pod as it would violate the pod's disruption budget."}),
                    )
                } else {
                    (
                        200,
                        serde_json::json!({"kind": "Pod", "apiVersion": "v1",
                            "metadata": {"name": "p", "namespace": "ns"}}),
                    )
                };
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&body)?))
                    .map_err(BoxError::from)
            }
        });
        let service = ServiceBuilder::new()
            .layer(RetryLayer::new(RetryUnlessEviction::default()))
            .service(apiserver);
        (kube::Client::new(service, "ns"), received)
    }

    // Paused time: were the refusal retried, the backoff would elapse at once and show here.
    #[tokio::test(start_paused = true)]
    async fn a_refused_eviction_is_answered_at_once_not_retried() {
        let (client, received) = refusing(usize::MAX);
        let refused = Api::<Pod>::namespaced(client, "ns")
            .evict("p", &EvictParams::default())
            .await;
        assert!(
            matches!(&refused, Err(kube::Error::Api(s)) if s.code == 429),
            "{refused:?}"
        );
        assert_eq!(received.load(Ordering::SeqCst), 1, "sent once");
    }

    #[tokio::test(start_paused = true)]
    async fn other_requests_answered_429_are_retried_as_kube_does() {
        let (client, received) = refusing(2);
        let pod = Api::<Pod>::namespaced(client, "ns")
            .get("p")
            .await
            .expect("served after two refusals");
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        assert_eq!(received.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn only_creating_an_eviction_is_an_eviction() {
        let request = |method: &str, uri: &str| {
            Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .expect("request")
        };
        assert!(is_eviction(&request(
            "POST",
            "/api/v1/namespaces/ns/pods/db-0/eviction?"
        )));
        for (method, uri) in [
            ("GET", "/api/v1/namespaces/ns/pods/db-0"),
            ("POST", "/api/v1/namespaces/ns/pods"),
            ("DELETE", "/api/v1/namespaces/ns/pods/db-0"),
            ("PATCH", "/api/v1/nodes/eviction"),
            (
                "PUT",
                "/apis/nodewright.nvidia.com/v1alpha1/nodewrights/eviction/status",
            ),
        ] {
            assert!(!is_eviction(&request(method, uri)), "{method} {uri}");
        }
    }
}
