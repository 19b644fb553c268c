//! The webhook certificate controller (DESIGN §6, chart `certs.mode=self-managed`). Leader only.
//!
//! It owns two Secrets in the operator's namespace, the CA (`ca.crt`, `ca.key`, and `bundle.crt`,
//! every CA the kube-apiserver must trust) and the serving certificate (`tls.crt`, `tls.key`,
//! `ca.crt`), and the `caBundle` of every entry of the two webhook configurations. Each pass reads
//! all of them, asks the pure rotation policy ([`nodewright_certs::rotation::plan`]) what to do, and
//! writes in the one safe order: CA Secret, then caBundle, then serving Secret, so the apiserver
//! always trusts a CA before a replica can serve a certificate it signed.
//!
//! Passes run at start, whenever one of those four objects changes (watches by name: a caBundle
//! wiped by `helm upgrade` is repaired at once), and when the plan says something falls due. A pass
//! that finds everything current writes nothing: restarts and leader changes never rotate anything.
//!
//! Entry point: [`run`], for one leadership term.

pub mod publish;
pub mod settings;
pub mod store;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use nodewright_certs::material;
use nodewright_certs::rotation::{CaAction, ServingAction, plan};
use nodewright_certs::time::OffsetDateTime;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::writes::{WriteError, Writer};

pub use settings::{Settings, SettingsError};

/// Why a pass failed. Passes are retried (with back-off) until the term ends, so these are logged,
/// not fatal.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done.
        action: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Certificate generation failed.
    #[error("generating webhook certificates: {0}")]
    Generate(#[from] nodewright_certs::CertError),
    /// A write was refused: the leadership term ended (the next leader carries on).
    #[error("{action}: the leadership term ended; not written")]
    TermEnded {
        /// What was being done.
        action: String,
    },
    /// A pass kept writing without reaching a steady state (someone else keeps changing the
    /// objects).
    #[error("the webhook certificates did not settle after {0} consecutive writes")]
    Unsettled(usize),
}

/// The most writes in a row one pass makes before giving up (a first install needs 1-2, a rotation
/// step 1-2).
const MAX_ROUNDS: usize = 4;
/// Back-off bounds after a failed pass.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// Events arriving this close together are handled by one pass.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Maps a refused or failed write into the controller's error, naming `action`.
fn write_err(action: String) -> impl FnOnce(WriteError) -> Error {
    move |e| match e {
        WriteError::TermEnded => Error::TermEnded { action },
        WriteError::Api(source) => Error::Kube { action, source },
    }
}

/// The API handles of one controller: reads through `Api`s, every write through the term's writer.
struct Apis {
    secrets: Api<Secret>,
    mutating: Api<MutatingWebhookConfiguration>,
    validating: Api<ValidatingWebhookConfiguration>,
    writer: Writer,
}

impl Apis {
    fn new(client: &kube::Client, settings: &Settings, term: CancellationToken) -> Self {
        Apis {
            writer: Writer::new(client.clone(), &settings.namespace, term),
            secrets: Api::namespaced(client.clone(), &settings.namespace),
            mutating: Api::all(client.clone()),
            validating: Api::all(client.clone()),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassOutcome {
    /// Rounds that wrote something.
    pub writes: usize,
    /// When the next pass is due if nothing changes.
    pub next_check: OffsetDateTime,
}

/// One pass: read, plan, write, until nothing more is to be written.
async fn pass(apis: &Apis, settings: &Settings) -> Result<PassOutcome, Error> {
    let names = settings.names();
    let mut writes = 0;
    loop {
        let stored = store::read(&apis.secrets, &settings.ca_secret, &settings.tls_secret).await?;
        let mutating =
            publish::read_mutating(&apis.mutating, &settings.mutating_configuration).await?;
        let validating =
            publish::read_validating(&apis.validating, &settings.validating_configuration).await?;
        let published: Vec<String> = mutating.bundles().chain(validating.bundles()).collect();
        let (state, problems) = material::observe(&stored.material, &published, &names);
        for p in &problems {
            warn!(problem = %p, "stored webhook certificate material is unusable and will be replaced");
        }
        let now = OffsetDateTime::now_utc();
        let decision = plan(now, &settings.policy, &state);
        let next = material::apply(now, &settings.policy, &decision, &stored.material, &names)?;
        if decision.ca != CaAction::Keep {
            info!(reason = ?decision.ca, "generating a new webhook CA");
        }
        if let ServingAction::Issue(reason) = decision.serving {
            info!(?reason, names = ?names, "issuing a new webhook serving certificate");
        }

        // The safe order: CA (and bundle), then caBundle everywhere, then the serving certificate.
        let mut wrote = store::write_ca(&apis.writer, &settings.ca_secret, &stored, &next).await?;
        wrote |= publish::publish::<MutatingWebhookConfiguration>(
            &apis.writer,
            "MutatingWebhookConfiguration",
            &settings.mutating_configuration,
            &mutating,
            &next.bundle,
        )
        .await?;
        wrote |= publish::publish::<ValidatingWebhookConfiguration>(
            &apis.writer,
            "ValidatingWebhookConfiguration",
            &settings.validating_configuration,
            &validating,
            &next.bundle,
        )
        .await?;
        wrote |= store::write_serving(&apis.writer, &settings.tls_secret, &stored, &next).await?;

        if !wrote {
            debug!(next_check = %decision.next_check, "webhook certificates are current");
            return Ok(PassOutcome {
                writes,
                next_check: decision.next_check,
            });
        }
        writes += 1;
        if writes >= MAX_ROUNDS {
            return Err(Error::Unsettled(writes));
        }
    }
}

/// Runs one pass now (for tests and for a one-shot repair): the same as the controller does on
/// every trigger.
pub async fn reconcile_once(
    client: kube::Client,
    settings: &Settings,
) -> Result<PassOutcome, Error> {
    // Not tied to a leadership term: the caller asked for this one pass.
    pass(
        &Apis::new(&client, settings, CancellationToken::new()),
        settings,
    )
    .await
}

/// Sends a trigger for every event of a watch of the object `name` (by field selector, so RBAC can
/// be limited to that name).
fn watch_by_name<K>(
    tasks: &mut JoinSet<()>,
    api: Api<K>,
    name: String,
    what: &'static str,
    tx: mpsc::Sender<&'static str>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    tasks.spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut events = watcher::watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))
                | Ok(watcher::Event::InitDone) => {
                    // Full channel: a pass is pending anyway.
                    let _ = tx.try_send(what);
                }
                Ok(_) => {}
                Err(e) => warn!(error = %e, object = %what, %name, "watch failed; retrying"),
            }
        }
    });
}

fn until(next: OffsetDateTime) -> Duration {
    let wait = next - OffsetDateTime::now_utc();
    Duration::try_from(wait).unwrap_or(Duration::ZERO)
}

/// Runs the controller for one leadership term: until `term` is cancelled. Failed passes are
/// logged and retried with back-off (a transient apiserver error must not end the term); the
/// function returns `Ok(())` when the term ends.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    term: CancellationToken,
) -> Result<(), Error> {
    let span =
        info_span!("webhook_certs", namespace = %settings.namespace, secret = %settings.tls_secret);
    async move {
        let apis = Apis::new(&client, &settings, term.clone());
        let (tx, mut rx) = mpsc::channel(16);
        // Dropped (and so aborted) when this function returns.
        let mut watches = JoinSet::new();
        watch_by_name(
            &mut watches,
            apis.secrets.clone(),
            settings.ca_secret.clone(),
            "CA Secret",
            tx.clone(),
        );
        watch_by_name(
            &mut watches,
            apis.secrets.clone(),
            settings.tls_secret.clone(),
            "serving Secret",
            tx.clone(),
        );
        watch_by_name(
            &mut watches,
            apis.mutating.clone(),
            settings.mutating_configuration.clone(),
            "MutatingWebhookConfiguration",
            tx.clone(),
        );
        watch_by_name(
            &mut watches,
            apis.validating.clone(),
            settings.validating_configuration.clone(),
            "ValidatingWebhookConfiguration",
            tx,
        );
        info!("webhook certificate controller started");

        let mut retry = RETRY_MIN;
        loop {
            let wait = match pass(&apis, &settings).await {
                Ok(outcome) => {
                    retry = RETRY_MIN;
                    until(outcome.next_check)
                }
                Err(e) => {
                    warn!(error = %e, retry_in = ?retry, "webhook certificate pass failed");
                    let wait = retry;
                    retry = (retry * 2).min(RETRY_MAX);
                    wait
                }
            };
            tokio::select! {
                () = term.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                Some(why) = rx.recv() => {
                    tokio::time::sleep(DEBOUNCE).await;
                    while rx.try_recv().is_ok() {}
                    debug!(trigger = why, "webhook certificate objects changed");
                }
            }
        }
        info!("webhook certificate controller stopped (leadership term ended)");
        Ok(())
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::publish::{Published, patch_body};

    #[test]
    fn the_patch_touches_only_the_named_entries_ca_bundle() {
        let body = patch_body(&["a.example".into()], "PEM");
        assert_eq!(
            body,
            serde_json::json!({"webhooks": [{"name": "a.example", "clientConfig": {"caBundle": "UEVN"}}]})
        );
    }

    #[test]
    fn only_entries_with_another_bundle_are_stale() {
        let ca = nodewright_certs::CertificateAuthority::generate(
            "t",
            std::time::Duration::from_secs(3600),
        )
        .expect("ca");
        let pem = ca.pem().cert_pem.clone();
        let published = Published {
            exists: true,
            entries: vec![("a".into(), pem.clone()), ("b".into(), String::new())],
        };
        assert_eq!(published.stale(&pem), vec!["b".to_owned()]);
    }
}
