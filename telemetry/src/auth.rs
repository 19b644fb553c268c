//! Optional authentication of `/metrics` against the kube-apiserver, in-process (what
//! kube-rbac-proxy does as a sidecar): the scraper sends `Authorization: Bearer <token>` (a
//! Prometheus ServiceAccount token); a TokenReview tells who that is, and a SubjectAccessReview
//! whether that identity may `get` the non-resource URL `/metrics`. RBAC grants it with a
//! ClusterRole rule `nonResourceURLs: ["/metrics"], verbs: ["get"]` (the chart's
//! `<namespace>.<release>-metrics-reader`).
//!
//! Answers: 401 without a token or with one the apiserver does not accept, 403 when the identity
//! may not read metrics, 503 when the apiserver cannot be asked (nothing is served unverified).
//! Decisions are cached for [`CACHE_TTL`] per token (by its SHA-256 digest, never the token
//! itself), so a scrape every 15 s costs two small API calls at most; the cache holds at most
//! [`CACHE_SIZE`] tokens and evicts the least recently used ([`crate::lru`]), so a client cycling
//! through tokens cannot flush the scrapers' decisions.
//!
//! The service's own ServiceAccount needs `create` on `tokenreviews` and `subjectaccessreviews`
//! (the chart grants it when the option is on).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use crate::lru::Lru;

/// How long a decision (allowed or not) is reused for the same token: as long as the apiserver's
/// own delegated authenticator and authorizer cache theirs by default.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// Most tokens remembered; past it, the least recently used is dropped.
pub const CACHE_SIZE: usize = 256;

/// What the apiserver said about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthDecision {
    /// The identity may read `/metrics`.
    Allowed {
        /// Who it is.
        user: String,
    },
    /// No token, or one the apiserver does not accept (401).
    Unauthenticated(String),
    /// A valid identity without permission (403).
    Forbidden {
        /// Who it is.
        user: String,
        /// The authorizer's reason, if it gave one.
        reason: String,
    },
}

/// The apiserver could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// A review call failed (network, apiserver down, this service not allowed to create reviews).
    #[error("cannot {what}: {source}")]
    Api {
        /// Which review.
        what: &'static str,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

/// Decisions by token digest, with the time they were made.
type Decisions = Lru<[u8; 32], (Instant, AuthDecision)>;

/// Checks bearer tokens against the apiserver, with a short cache. Cheap to clone.
#[derive(Clone)]
pub struct MetricsAuth {
    client: kube::Client,
    path: String,
    cache: Arc<Mutex<Decisions>>,
}

impl std::fmt::Debug for MetricsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsAuth")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The bearer token of a request, if it has one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl MetricsAuth {
    /// Reviews with `client` (the service's own identity) the permission to `get` `path`.
    pub fn new(client: kube::Client, path: impl Into<String>) -> Self {
        MetricsAuth {
            client,
            path: path.into(),
            cache: Arc::new(Mutex::new(Lru::new(CACHE_SIZE))),
        }
    }

    fn cached(&self, key: &[u8; 32]) -> Option<AuthDecision> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(key)
            .filter(|(at, _)| at.elapsed() < CACHE_TTL)
            .map(|(_, d)| d.clone())
    }

    fn remember(&self, key: [u8; 32], decision: &AuthDecision) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.insert(key, (Instant::now(), decision.clone()));
    }

    /// The decision for a request carrying `token` (`None`: no bearer token).
    pub async fn decide(&self, token: Option<&str>) -> Result<AuthDecision, AuthError> {
        let Some(token) = token else {
            return Ok(AuthDecision::Unauthenticated(
                "no bearer token (Authorization: Bearer <ServiceAccount token>)".to_owned(),
            ));
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(d) = self.cached(&key) {
            return Ok(d);
        }
        let decision = self.review(token).await?;
        self.remember(key, &decision);
        Ok(decision)
    }

    async fn review(&self, token: &str) -> Result<AuthDecision, AuthError> {
        let tokens: Api<TokenReview> = Api::all(self.client.clone());
        let reviewed = tokens
            .create(
                &PostParams::default(),
                &TokenReview {
                    spec: TokenReviewSpec {
                        token: Some(token.to_owned()),
                        audiences: None,
                    },
                    ..TokenReview::default()
                },
            )
            .await
            .map_err(|source| AuthError::Api {
                what: "review the token (TokenReview)",
                source,
            })?;
        let status = reviewed.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                return Ok(AuthDecision::Unauthenticated(
                    status
                        .error
                        .unwrap_or_else(|| "the token is not valid".to_owned()),
                ));
            }
        };
        let name = user.username.clone().unwrap_or_default();
        let access: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let reviewed = access
            .create(
                &PostParams::default(),
                &SubjectAccessReview {
                    spec: SubjectAccessReviewSpec {
                        user: user.username,
                        uid: user.uid,
                        groups: user.groups,
                        extra: user.extra,
                        non_resource_attributes: Some(NonResourceAttributes {
                            path: Some(self.path.clone()),
                            verb: Some("get".to_owned()),
                        }),
                        resource_attributes: None,
                    },
                    ..SubjectAccessReview::default()
                },
            )
            .await
            .map_err(|source| AuthError::Api {
                what: "review the access (SubjectAccessReview)",
                source,
            })?;
        let status = reviewed.status.unwrap_or_default();
        Ok(if status.allowed {
            AuthDecision::Allowed { user: name }
        } else {
            AuthDecision::Forbidden {
                user: name,
                reason: status
                    .reason
                    .or(status.evaluation_error)
                    .unwrap_or_default(),
            }
        })
    }
}

/// axum middleware: lets the request through only when [`MetricsAuth::decide`] allows it. Use with
/// `axum::middleware::from_fn_with_state(auth, require)` on the `/metrics` route.
pub async fn require(State(auth): State<MetricsAuth>, request: Request, next: Next) -> Response {
    let token = bearer(request.headers()).map(str::to_owned);
    match auth.decide(token.as_deref()).await {
        Ok(AuthDecision::Allowed { user }) => {
            debug!(%user, "metrics scrape authorised");
            next.run(request).await
        }
        Ok(AuthDecision::Unauthenticated(why)) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            format!("Unauthorized: {why}\n"),
        )
            .into_response(),
        Ok(AuthDecision::Forbidden { user, reason }) => (
            StatusCode::FORBIDDEN,
            format!(
                "Forbidden: {user} may not get {} (grant a ClusterRole with nonResourceURLs [\"{}\"], verbs [\"get\"]){}{reason}\n",
                auth.path,
                auth.path,
                if reason.is_empty() { "" } else { ": " }
            ),
        )
            .into_response(),
        Err(e) => {
            warn!(error = %e, "cannot verify a metrics scrape");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot verify the request: {e}\n"),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    /// Issue 22, item 11: a client cycling through tokens used to fill the cache, which was then
    /// cleared wholesale (every scraper's decision with it); now only the least recently used
    /// decision goes.
    #[tokio::test]
    async fn many_new_tokens_do_not_flush_a_scrapers_decision() {
        let config = kube::Config::new("https://127.0.0.1:1".parse().expect("url"));
        let auth = MetricsAuth::new(kube::Client::try_from(config).expect("client"), "/metrics");
        let scraper = [0xff; 32];
        let allowed = AuthDecision::Allowed {
            user: "system:serviceaccount:monitoring:prometheus".to_owned(),
        };
        auth.remember(scraper, &allowed);
        for i in 0..(4 * CACHE_SIZE as u32) {
            let mut key = [0; 32];
            key[..4].copy_from_slice(&i.to_be_bytes());
            auth.remember(key, &AuthDecision::Unauthenticated("bad".to_owned()));
            assert_eq!(
                auth.cached(&scraper).as_ref(),
                Some(&allowed),
                "after {i} other tokens"
            );
        }
        let len = auth.cache.lock().map(|c| c.len()).unwrap_or_default();
        assert_eq!(len, CACHE_SIZE);
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc.def"),
        );
        assert_eq!(bearer(&h), Some("abc.def"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  xyz "),
        );
        assert_eq!(bearer(&h), Some("xyz"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic dXNlcg=="),
        );
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&h), None);
    }
}
