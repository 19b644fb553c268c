//! The HTTP surface: admission endpoints and probes on the TLS port, /metrics on the plain port.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use nodewright_shared::defaults::OperatorDefaults;
use tower_http::timeout::TimeoutLayer;
use tracing::{Instrument, info, info_span};

use crate::admission::Webhook;
use crate::cache::SharedView;
use crate::metrics::{Metrics, RequestLabels, WebhookLabel};
use crate::rules::Restrictions;
use crate::second_look;
use crate::shed::{self, InFlight, InFlightLimits};
use crate::tls::CertStore;

/// What /readyz checks: a certificate is loaded, the caches have synced, and we are not draining.
#[derive(Debug)]
pub struct Readiness {
    /// The serving certificate.
    pub certs: Arc<CertStore>,
    /// Set once both reflectors listed.
    pub caches_synced: AtomicBool,
    /// Set on SIGTERM, so the endpoint leaves the Service before the listener closes.
    pub draining: AtomicBool,
}

impl Readiness {
    /// Not ready until the certificate loads and the caches sync.
    pub fn new(certs: Arc<CertStore>) -> Arc<Self> {
        Arc::new(Readiness {
            certs,
            caches_synced: AtomicBool::new(false),
            draining: AtomicBool::new(false),
        })
    }

    /// Why the webhook is not ready, or `None` when it is.
    pub fn blocker(&self) -> Option<&'static str> {
        if self.draining.load(Ordering::SeqCst) {
            Some("shutting down")
        } else if !self.certs.is_loaded() {
            Some("no serving certificate loaded yet")
        } else if !self.caches_synced.load(Ordering::SeqCst) {
            Some("DeploymentPolicy/NodeWright caches have not synced yet")
        } else {
            None
        }
    }
}

/// Shared state of the handlers.
pub struct AppState {
    /// Operator defaults for defaulting.
    pub defaults: OperatorDefaults,
    /// Cluster view for the rules.
    pub cluster: SharedView,
    /// The administrator's admission restrictions (chart values `admission.*`).
    pub restrictions: Restrictions,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Readiness.
    pub ready: Arc<Readiness>,
}

async fn admit(webhook: Webhook, state: Arc<AppState>, body: Bytes) -> Response {
    let started = Instant::now();
    let span = info_span!(
        "admission",
        webhook = webhook.name(),
        uid = tracing::field::Empty
    );
    async move {
        let answer = second_look::review(
            webhook,
            &body,
            &state.defaults,
            &state.restrictions,
            state.cluster.as_ref(),
        )
        .await;
        let uid = answer
            .review
            .response
            .as_ref()
            .map(|r| r.uid.clone())
            .unwrap_or_default();
        tracing::Span::current().record("uid", uid.as_str());
        let elapsed = started.elapsed();
        state
            .metrics
            .requests
            .get_or_create(&RequestLabels {
                webhook: webhook.name(),
                operation: answer.operation,
                result: answer.outcome.as_str(),
            })
            .inc();
        state
            .metrics
            .latency
            .get_or_create(&WebhookLabel {
                webhook: webhook.name(),
            })
            .observe(elapsed.as_secs_f64());
        let message = answer
            .review
            .response
            .as_ref()
            .map(|r| r.result.message.as_str())
            .unwrap_or("");
        info!(
            operation = answer.operation,
            result = answer.outcome.as_str(),
            elapsed_us = elapsed.as_micros() as u64,
            message,
            "admission reviewed"
        );
        let status = StatusCode::from_u16(answer.http_status).unwrap_or(StatusCode::OK);
        match answer.to_json() {
            Ok(bytes) => {
                (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
            }
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode the response: {e}"),
            )
                .into_response(),
        }
    }
    .instrument(span)
    .await
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.ready.blocker() {
        None => (StatusCode::OK, "ok").into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    }
}

/// The TLS-side router, with the default in-flight limits (tests and tools).
pub fn router(state: Arc<AppState>, max_body_bytes: usize, request_timeout: Duration) -> Router {
    let in_flight = InFlight::new(
        InFlightLimits {
            max_requests: DEFAULT_MAX_IN_FLIGHT,
            max_large_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES.max(max_body_bytes),
            max_body_bytes,
        },
        state.metrics.shed_requests(),
    );
    router_with(state, max_body_bytes, request_timeout, in_flight)
}

/// Default `WEBHOOK_MAX_IN_FLIGHT`: admission requests answered at once. An answer takes well
/// under a millisecond of CPU; more than this at once is a flood, not the apiserver.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;
/// Default `WEBHOOK_MAX_IN_FLIGHT_BYTES`: declared sizes of the large bodies (over
/// [`crate::shed::LARGE_BODY`]) answered at once, four bodies at the default body limit. Each
/// costs about three times its size while it is read and decoded, so together they stay far
/// below the chart's 256 Mi memory limit.
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: usize = 32 * 1024 * 1024;

/// The TLS-side router: the admission routes behind `in_flight` (load shedding), the probes not
/// (a shed probe would take a busy replica out of the Service).
pub fn router_with(
    state: Arc<AppState>,
    max_body_bytes: usize,
    request_timeout: Duration,
    in_flight: InFlight,
) -> Router {
    let mut router = Router::new();
    for webhook in Webhook::ALL {
        router = router.route(
            &format!("/{}", webhook.name()),
            post(move |State(state): State<Arc<AppState>>, body: Bytes| {
                admit(webhook, state, body)
            }),
        );
    }
    let router = router
        .route_layer(axum::middleware::from_fn_with_state(in_flight, shed::shed))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz));
    limited(router, max_body_bytes, request_timeout).with_state(state)
}

/// The layers of every TLS-side route: the body limit and the request timeout. Public so that the
/// load run's baseline server (`examples/baseline.rs`) serves its empty handler behind exactly
/// these.
pub fn limited<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    max_body_bytes: usize,
    request_timeout: Duration,
) -> Router<S> {
    router
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            request_timeout,
        ))
}

/// The plain-HTTP metrics router, open.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    metrics_router_with_auth(metrics, None)
}

/// The plain-HTTP metrics router, `/metrics` behind `auth` when given (`WEBHOOK_METRICS_AUTH`).
pub fn metrics_router_with_auth(
    metrics: Arc<Metrics>,
    auth: Option<nodewright_telemetry::MetricsAuth>,
) -> Router {
    let mut route = get(move || {
        let metrics = metrics.clone();
        async move {
            (
                [(
                    header::CONTENT_TYPE,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )],
                metrics.encode(),
            )
        }
    });
    if let Some(auth) = auth {
        route = route.layer(axum::middleware::from_fn_with_state(
            auth,
            nodewright_telemetry::auth::require,
        ));
    }
    Router::new().route("/metrics", route)
}
