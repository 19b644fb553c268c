//! `nodewright_operator_api_requests_total{verb, resource}`: every request the operator's client
//! sends to the apiserver, counted in a tower layer on the client. It answers "how much load does
//! the operator put on the control plane" from the operator itself (the apiserver's own metrics
//! do not say which client sent a request), and shows a hot loop as a climbing `patch` or `get`.

use std::task::{Context, Poll};

use http::Request;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of one request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: &'static str,
    /// Resource (plural), with the subresource as `jobs/status`, `pods/eviction`.
    pub resource: String,
}

/// The counter family, cheap to clone (shared state).
#[derive(Clone, Debug, Default)]
pub struct ApiMetrics {
    requests: Family<RequestLabels, Counter>,
}

impl ApiMetrics {
    /// Registers the family in `registry` (prefix `nodewright_`).
    pub fn registered(registry: &mut Registry) -> Self {
        let metrics = ApiMetrics::default();
        registry.register(
            "operator_api_requests",
            "Requests the operator sent to the Kubernetes API, by verb and resource",
            metrics.requests.clone(),
        );
        metrics
    }

    /// Counts one request.
    pub fn observe<B>(&self, request: &Request<B>) {
        let (verb, resource) = classify(
            request.method().as_str(),
            request.uri().path(),
            request.uri().query().unwrap_or(""),
        );
        self.requests
            .get_or_create(&RequestLabels { verb, resource })
            .inc();
    }

    /// A tower layer for [`kube::client::ClientBuilder::with_layer`].
    pub fn layer(&self) -> CountLayer {
        CountLayer {
            metrics: self.clone(),
        }
    }
}

/// The Kubernetes verb and resource of a request, from its method and path: `/api/v1/...` or
/// `/apis/<group>/<version>/...`, then `[namespaces/<ns>/]<resource>[/<name>[/<subresource>]]`.
/// A GET without a name is a list, or a watch with `watch=true`.
pub fn classify(method: &str, path: &str, query: &str) -> (&'static str, String) {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        _ => rest,
    };
    let resource = match rest {
        [] => "other".to_owned(),
        [resource] | [resource, _] => (*resource).to_owned(),
        [resource, _, subresource, ..] => format!("{resource}/{subresource}"),
    };
    let named = rest.len() >= 2;
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (method, named) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

/// Layer adding [`Count`] to a client's service stack.
#[derive(Clone, Debug)]
pub struct CountLayer {
    metrics: ApiMetrics,
}

impl<S> tower::Layer<S> for CountLayer {
    type Service = Count<S>;

    fn layer(&self, inner: S) -> Count<S> {
        Count {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// Counts each request, then passes it on unchanged.
#[derive(Clone, Debug)]
pub struct Count<S> {
    inner: S,
    metrics: ApiMetrics,
}

impl<S, B> tower::Service<Request<B>> for Count<S>
where
    S: tower::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.metrics.observe(&request);
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn verbs_and_resources_from_paths() {
        let cases = [
            ("GET", "/api/v1/nodes", "", "list", "nodes"),
            (
                "GET",
                "/api/v1/nodes",
                "watch=true&resourceVersion=5",
                "watch",
                "nodes",
            ),
            ("GET", "/api/v1/nodes/kwok-node-0", "", "get", "nodes"),
            ("PATCH", "/api/v1/nodes/kwok-node-0", "", "patch", "nodes"),
            (
                "GET",
                "/apis/batch/v1/namespaces/nw/jobs",
                "labelSelector=a",
                "list",
                "jobs",
            ),
            (
                "POST",
                "/apis/batch/v1/namespaces/nw/jobs",
                "",
                "create",
                "jobs",
            ),
            (
                "DELETE",
                "/apis/batch/v1/namespaces/nw/jobs/j1",
                "",
                "delete",
                "jobs",
            ),
            (
                "DELETE",
                "/apis/batch/v1/namespaces/nw/jobs",
                "",
                "deletecollection",
                "jobs",
            ),
            (
                "PATCH",
                "/apis/batch/v1/namespaces/nw/jobs/j1/status",
                "",
                "patch",
                "jobs/status",
            ),
            (
                "POST",
                "/api/v1/namespaces/nw/pods/p1/eviction",
                "",
                "create",
                "pods/eviction",
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/nw/leases/op",
                "",
                "update",
                "leases",
            ),
            ("GET", "/api/v1/namespaces/nw", "", "get", "namespaces"),
            ("GET", "/api/v1/namespaces", "", "list", "namespaces"),
            (
                "PATCH",
                "/apis/nodewright.nvidia.com/v1alpha1/nodewrights/gpu/status",
                "",
                "patch",
                "nodewrights/status",
            ),
            ("GET", "/version", "", "list", "other"),
        ];
        for (method, path, query, verb, resource) in cases {
            assert_eq!(
                classify(method, path, query),
                (verb, resource.to_owned()),
                "{method} {path}?{query}"
            );
        }
    }
}
