//! The serving certificate: loaded, swapped atomically on change, never dropped on a bad update.
//!
//! A webhook outage is a cluster outage for our resources (failurePolicy Fail), and certificate
//! rotation is the classic cause. So:
//! - the certificate lives in a [`CertStore`] that rustls consults on every handshake; a reload swaps
//!   it atomically, so new connections get the new certificate and in-flight requests are untouched;
//! - mounted files are *polled* by content, which follows the kubelet's `..data` symlink swap that
//!   naive file watches miss, and a cert/key pair caught mid-swap (key not matching the certificate)
//!   is ignored until both halves agree;
//! - a Secret can be watched through the API instead (no kubelet propagation delay);
//! - a bad update is logged and the last good certificate keeps serving.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::{WatchStreamExt, watcher};
use prometheus_client::metrics::gauge::Gauge;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;
use tracing::{info, warn};

/// Why a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// No certificate in the PEM data.
    #[error("no CERTIFICATE block in the certificate PEM")]
    NoCertificate,
    /// No private key in the PEM data.
    #[error("no private key block in the key PEM (PKCS#8, PKCS#1 or SEC1 expected)")]
    NoKey,
    /// The PEM data is malformed.
    #[error("malformed PEM: {0}")]
    Pem(#[source] pem::Error),
    /// The key is unusable or does not belong to the certificate.
    #[error("certificate and key do not form a usable pair: {0}")]
    Pair(#[source] rustls::Error),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The Secret lacks `tls.crt` or `tls.key`.
    #[error("secret {0} has no tls.crt and tls.key")]
    SecretIncomplete(String),
}

/// Parses a PEM certificate chain and private key into a pair rustls can serve, checking that the key
/// belongs to the leaf certificate.
pub fn load_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(TlsError::Pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = match PrivateKeyDer::from_pem_slice(key_pem) {
        Ok(key) => key,
        Err(pem::Error::NoItemsFound) => return Err(TlsError::NoKey),
        Err(e) => return Err(TlsError::Pem(e)),
    };
    CertifiedKey::from_der(certs, key, &rustls::crypto::ring::default_provider())
        .map_err(TlsError::Pair)
}

/// The current serving certificate, shared by every connection.
#[derive(Debug, Default)]
pub struct CertStore {
    current: ArcSwapOption<CertifiedKey>,
    /// Bumped on every successful load; lets tests and metrics see reloads.
    generation: AtomicU64,
    /// Mirrors `generation` into a metric when set.
    loads: Option<Gauge>,
    /// The current leaf certificate's notAfter (seconds since the epoch) when set.
    expiry: Option<Gauge>,
}

impl CertStore {
    /// An empty store: handshakes fail until a certificate is loaded (and /readyz says so).
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// As [`CertStore::new`], counting loads in `gauge`.
    pub fn with_metric(gauge: Gauge) -> Arc<Self> {
        Arc::new(Self {
            loads: Some(gauge),
            ..Self::default()
        })
    }

    /// As [`CertStore::with_metric`], and the served certificate's expiry time in `expiry`.
    pub fn with_metrics(loads: Gauge, expiry: Gauge) -> Arc<Self> {
        Arc::new(Self {
            loads: Some(loads),
            expiry: Some(expiry),
            ..Self::default()
        })
    }

    /// Installs a new certificate for every later handshake.
    pub fn set(&self, key: CertifiedKey) {
        let not_after = key.cert.first().and_then(|c| not_after(c.as_ref()));
        self.current.store(Some(Arc::new(key)));
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(g) = &self.loads {
            g.set(i64::try_from(generation).unwrap_or(i64::MAX));
        }
        if let (Some(g), Some(t)) = (&self.expiry, not_after) {
            g.set(t);
        }
    }

    /// True once a certificate is loaded.
    pub fn is_loaded(&self) -> bool {
        self.current.load().is_some()
    }

    /// How many certificates have been loaded so far.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The DER of the current leaf certificate, if any.
    pub fn leaf_der(&self) -> Option<Vec<u8>> {
        self.current
            .load()
            .as_ref()
            .and_then(|k| k.cert.first().map(|c| c.as_ref().to_vec()))
    }
}

/// The notAfter of a DER certificate, in seconds since the epoch (what the expiry alert compares
/// with `time()`).
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.load_full()
    }
}

/// A rustls server configuration (TLS 1.2 and 1.3, ring, h2 and HTTP/1.1) serving from `store`.
pub fn server_config(store: Arc<CertStore>) -> Result<rustls::ServerConfig, rustls::Error> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_cert_resolver(store);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Reads both files; the pair as bytes.
async fn read_pair(cert: &PathBuf, key: &PathBuf) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |path: &PathBuf| {
        let path = path.clone();
        async move {
            tokio::fs::read(&path)
                .await
                .map_err(|source| TlsError::Read { path, source })
        }
    };
    Ok((read(cert).await?, read(key).await?))
}

/// Loads the files once (startup: an error here is fatal, so a misconfigured pod never turns ready).
pub async fn load_files(store: &CertStore, cert: &PathBuf, key: &PathBuf) -> Result<(), TlsError> {
    let (c, k) = read_pair(cert, key).await?;
    store.set(load_pem(&c, &k)?);
    Ok(())
}

/// Polls the files every `interval` and reloads when their content changes, until `stop` fires.
pub async fn watch_files(
    store: Arc<CertStore>,
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut last: Option<(Vec<u8>, Vec<u8>)> = read_pair(&cert, &key).await.ok();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => return,
        }
        let pair = match read_pair(&cert, &key).await {
            Ok(pair) => pair,
            Err(e) => {
                warn!(error = %e, "cannot read certificate files; keeping the current certificate");
                continue;
            }
        };
        if last.as_ref() == Some(&pair) {
            continue;
        }
        match load_pem(&pair.0, &pair.1) {
            Ok(k) => {
                store.set(k);
                info!(cert = %cert.display(), generation = store.generation(), "serving certificate reloaded from files");
                last = Some(pair);
            }
            // Typically a kubelet swap caught between the two reads: try again next tick.
            Err(e) => {
                warn!(error = %e, "certificate files changed but are not a usable pair yet; keeping the current certificate")
            }
        }
    }
}

/// Loads a certificate from a `kubernetes.io/tls` Secret's data.
pub fn load_secret(secret: &Secret) -> Result<CertifiedKey, TlsError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let data = secret.data.as_ref();
    let get = |k: &str| data.and_then(|d| d.get(k)).map(|b| b.0.clone());
    match (get("tls.crt"), get("tls.key")) {
        (Some(c), Some(k)) => load_pem(&c, &k),
        _ => Err(TlsError::SecretIncomplete(name)),
    }
}

/// Watches one Secret (by name, so RBAC can be limited to it) and loads every valid version of it.
pub async fn watch_secret(
    store: Arc<CertStore>,
    client: kube::Client,
    namespace: String,
    name: String,
) {
    let api: kube::Api<Secret> = kube::Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let secret = match event {
            Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => s,
            Ok(_) => continue,
            Err(e) => {
                warn!(error = %e, secret = %name, "watching the TLS secret failed; retrying");
                continue;
            }
        };
        match load_secret(&secret) {
            Ok(k) => {
                store.set(k);
                info!(secret = %format!("{namespace}/{name}"), generation = store.generation(), "serving certificate loaded from secret");
            }
            Err(e) => {
                warn!(error = %e, "TLS secret changed but is not usable; keeping the current certificate")
            }
        }
    }
}
