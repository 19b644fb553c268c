//! Load shedding of admission requests: a request over the in-flight limits is answered 503 with
//! `Retry-After: 1` instead of waiting in a queue (an ordinary review's body is read and dropped
//! first, so the connection stays open: see [`shed`]'s answer).
//!
//! A queue would hold a caller's memory and its slot of the apiserver's timeout while it waits;
//! an immediate 503 with `Retry-After` is what client-go's REST client retries after the delay.
//! Two limits, checked before the body is read (so a refused body is never buffered):
//! - at most `max_requests` requests at once, bounding CPU and the memory of ordinary reviews
//!   (each at most [`LARGE_BODY`]);
//! - the declared sizes of the large bodies in flight (over [`LARGE_BODY`], or of unknown length,
//!   counted as the body limit) at most `max_large_bytes`: what a few 8 MiB bodies cost in memory
//!   (the body, its copy into one buffer, the decode) is the webhook's largest, so their number
//!   in flight is what keeps it under its memory limit. Ordinary reviews (kilobytes) never wait
//!   on this budget, so large hostile bodies cannot crowd them out.

use std::sync::Arc;

use axum::body::HttpBody;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::Semaphore;
use tracing::debug;

/// Bodies larger than this count against the large-body budget. An AdmissionReview of an
/// ordinary NodeWright is a few kilobytes.
pub const LARGE_BODY: usize = 256 * 1024;

/// The in-flight limits of the admission routes.
#[derive(Debug, Clone)]
pub struct InFlight {
    requests: Arc<Semaphore>,
    max_requests: usize,
    /// In KiB.
    large: Arc<Semaphore>,
    max_large_kib: usize,
    max_body_bytes: usize,
    shed: prometheus_client::metrics::counter::Counter,
}

/// The limits, as configured.
#[derive(Debug, Clone, Copy)]
pub struct InFlightLimits {
    /// Requests answered at once.
    pub max_requests: usize,
    /// Total declared size of large bodies in flight, in bytes.
    pub max_large_bytes: usize,
    /// The body limit (what a body of unknown length may reach).
    pub max_body_bytes: usize,
}

impl InFlight {
    /// Limits counting every shed request in `shed`.
    pub fn new(limits: InFlightLimits, shed: prometheus_client::metrics::counter::Counter) -> Self {
        InFlight {
            requests: Arc::new(Semaphore::new(limits.max_requests.max(1))),
            max_requests: limits.max_requests.max(1),
            large: Arc::new(Semaphore::new(kib(limits.max_large_bytes))),
            max_large_kib: kib(limits.max_large_bytes),
            max_body_bytes: limits.max_body_bytes,
            shed,
        }
    }
}

impl InFlight {
    /// How many admission requests are being answered now (the request budget taken).
    pub fn in_flight(&self) -> usize {
        self.max_requests
            .saturating_sub(self.requests.available_permits())
    }

    /// The large-body budget taken now, in bytes (rounded up to KiB per request).
    pub fn large_bytes_in_flight(&self) -> usize {
        self.max_large_kib
            .saturating_sub(self.large.available_permits())
            .saturating_mul(1024)
    }
}

fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024).min(Semaphore::MAX_PERMITS)
}

fn overloaded(what: &str) -> Response {
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("webhook overloaded: {what}; retry"),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// The 503 for a shed request, answered once its body has been read to the end when the body is
/// an ordinary review (declared, at most [`LARGE_BODY`]; read chunk by chunk and dropped, never
/// buffered).
///
/// Why read what will be thrown away: hyper keeps an HTTP/1.1 connection only once the request's
/// body is read, so a 503 answered over an unread body closes the connection, and the kernel
/// resets a socket closed with unread data. The kube-apiserver writes a review's head and body
/// separately; still writing the body, it gets "write: broken pipe" and fails the admission
/// (`failurePolicy: Fail`) instead of reading the 503 and retrying after `Retry-After`. Large or unframed
/// bodies are not read (refusing them unread is what the large-body budget is for); their answer
/// says `Connection: close`. The request timeout bounds the read.
async fn shed_answer(request: Request, declared: Option<usize>, what: &str) -> Response {
    if declared.is_some_and(|n| n <= LARGE_BODY) {
        let mut chunks = request.into_body().into_data_stream();
        while let Some(chunk) = chunks.next().await {
            if chunk.is_err() {
                return closing(overloaded(what));
            }
        }
        return overloaded(what);
    }
    closing(overloaded(what))
}

/// `response`, asking the client not to reuse the connection.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The middleware: takes the request's share of both limits or answers 503.
pub async fn shed(State(limits): State<InFlight>, request: Request, next: Next) -> Response {
    // The declared length, or the body's own exact size (hyper knows it from the framing).
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok())
        .or_else(|| {
            HttpBody::size_hint(request.body())
                .exact()
                .and_then(|n| usize::try_from(n).ok())
        });
    let Ok(_request) = limits.requests.clone().try_acquire_owned() else {
        limits.shed.inc();
        debug!("shed a request: too many in flight");
        return shed_answer(request, declared, "too many requests in flight").await;
    };
    let size = declared.map_or(limits.max_body_bytes, |n| n.min(limits.max_body_bytes));
    let _large = if declared.is_none_or(|n| n > LARGE_BODY) {
        let Ok(permit) = limits
            .large
            .clone()
            .try_acquire_many_owned(u32::try_from(kib(size)).unwrap_or(u32::MAX))
        else {
            limits.shed.inc();
            debug!(size, "shed a request: too many large bodies in flight");
            return shed_answer(request, declared, "too many large request bodies in flight").await;
        };
        Some(permit)
    } else {
        None
    };
    next.run(request).await
}
