//! What the test sees of the rotation, independently of the operator: the stored material (CA
//! Secret, serving Secret), the `caBundle` published in the webhook configurations, and the
//! certificate each webhook replica actually serves in a TLS handshake. Polled every 250 ms; every
//! change is kept with its time, so the report can tell which admissions ran during a rotation and
//! the assertions can check its steps.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use nodewright_certs::material;
use tokio_util::sync::CancellationToken;

use crate::chart_support::services::bundles;

/// A change seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The current CA (`ca.crt` of the CA Secret) is now the CA numbered so (first seen = 0).
    Ca(usize),
    /// The serving certificate (`tls.crt`) is now the one numbered so (first seen = 0).
    Serving { serial: usize },
    /// Every published caBundle now holds these CAs (by number; `None` for a CA never stored).
    Published(Vec<Option<usize>>),
    /// Replica `replica` now serves certificate `serial` (`None`: not the stored one).
    Served {
        replica: String,
        serial: Option<usize>,
    },
}

/// Every change, with when it was seen.
#[derive(Debug, Default)]
pub struct Timeline {
    pub changes: Vec<(Instant, Change)>,
    cas: Vec<Vec<u8>>,
    servings: Vec<Vec<u8>>,
}

impl Timeline {
    fn number(list: &mut Vec<Vec<u8>>, der: &[u8]) -> usize {
        match list.iter().position(|d| d == der) {
            Some(i) => i,
            None => {
                list.push(der.to_vec());
                list.len() - 1
            }
        }
    }

    fn record(&mut self, change: Change) {
        let same_kind_last = self.changes.iter().rev().find(|(_, c)| {
            std::mem::discriminant(c) == std::mem::discriminant(&change)
                && match (c, &change) {
                    (Change::Served { replica: a, .. }, Change::Served { replica: b, .. }) => {
                        a == b
                    }
                    _ => true,
                }
        });
        if same_kind_last.is_none_or(|(_, c)| *c != change) {
            self.changes.push((Instant::now(), change));
        }
    }

    /// The CA numbers in the order they became current.
    pub fn cas(&self) -> Vec<usize> {
        self.changes
            .iter()
            .filter_map(|(_, c)| match c {
                Change::Ca(n) => Some(*n),
                _ => None,
            })
            .collect()
    }

    /// The serving certificate numbers in the order they were stored.
    pub fn servings(&self) -> Vec<usize> {
        self.changes
            .iter()
            .filter_map(|(_, c)| match c {
                Change::Serving { serial } => Some(*serial),
                _ => None,
            })
            .collect()
    }

    /// The published bundles in the order they appeared.
    pub fn published(&self) -> Vec<Vec<Option<usize>>> {
        self.changes
            .iter()
            .filter_map(|(_, c)| match c {
                Change::Published(b) => Some(b.clone()),
                _ => None,
            })
            .collect()
    }

    /// What replica `replica` served, in order.
    pub fn served(&self, replica: &str) -> Vec<Option<usize>> {
        self.changes
            .iter()
            .filter_map(|(_, c)| match c {
                Change::Served { replica: r, serial } if r == replica => Some(*serial),
                _ => None,
            })
            .collect()
    }

    /// Times of the changes to what is stored or published (the moments a rotation step happens).
    pub fn rotation_steps(&self) -> Vec<Instant> {
        self.changes
            .iter()
            .filter(|(_, c)| !matches!(c, Change::Served { .. }))
            .map(|(t, _)| *t)
            .collect()
    }
}

/// Where to look.
pub struct Sources {
    pub client: kube::Client,
    pub secrets: Api<Secret>,
    pub ca_secret: String,
    pub tls_secret: String,
    pub configuration: String,
    /// Replica name and its `host:port`.
    pub replicas: Vec<(String, String)>,
}

fn secret_text(secret: &Secret, key: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

/// The leaf certificate (DER) a TLS handshake with `addr` presents, or `None` if none completes.
async fn served_leaf(client: &reqwest::Client, addr: &str) -> Option<Vec<u8>> {
    let response = client
        .get(format!("https://{addr}/readyz"))
        .send()
        .await
        .ok()?;
    response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .map(<[u8]>::to_vec)
}

/// Polls `sources` into `timeline` until `stop`.
pub async fn watch(sources: Sources, timeline: Arc<Mutex<Timeline>>, stop: CancellationToken) {
    // A fresh connection per look (no pooling): each look is a new handshake, as a new apiserver
    // connection would be.
    let probe = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(2))
        .build()
        .expect("probe client");
    while !stop.is_cancelled() {
        let ca = sources.secrets.get_opt(&sources.ca_secret).await;
        let tls = sources.secrets.get_opt(&sources.tls_secret).await;
        // A look whose configurations could not be read is no look (nothing is recorded).
        if let Some(published) = bundles(&sources.client, &sources.configuration).await {
            let mut served = BTreeMap::new();
            for (name, addr) in &sources.replicas {
                served.insert(name.clone(), served_leaf(&probe, addr).await);
            }
            if !record(&timeline, ca, tls, &published, served) {
                return;
            }
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
}

/// The first certificate (DER) under `key` of a Secret that could be read.
fn first_der(secret: &Result<Option<Secret>, kube::Error>, key: &str) -> Option<Vec<u8>> {
    let Ok(Some(secret)) = secret else {
        return None;
    };
    material::bundle_ders(&secret_text(secret, key))
        .into_iter()
        .next()
}

/// Records one look; false once the timeline is unusable (a panic elsewhere poisoned it).
fn record(
    timeline: &Mutex<Timeline>,
    ca: Result<Option<Secret>, kube::Error>,
    tls: Result<Option<Secret>, kube::Error>,
    published: &[String],
    served: BTreeMap<String, Option<Vec<u8>>>,
) -> bool {
    let Ok(mut t) = timeline.lock() else {
        return false;
    };
    if let Some(der) = first_der(&ca, "ca.crt") {
        let n = Timeline::number(&mut t.cas, &der);
        t.record(Change::Ca(n));
    }
    if let Some(der) = first_der(&tls, "tls.crt") {
        let serial = Timeline::number(&mut t.servings, &der);
        t.record(Change::Serving { serial });
    }
    // The bundle every configuration entry agrees on; entries that differ are mid-update.
    let sets: Vec<Vec<Option<usize>>> = published
        .iter()
        .map(|pem| {
            let mut cas: Vec<Option<usize>> = material::bundle_ders(pem)
                .iter()
                .map(|der| t.cas.iter().position(|d| d == der))
                .collect();
            cas.sort();
            cas
        })
        .collect();
    if let Some(first) = sets.first()
        && !first.is_empty()
        && sets.iter().all(|s| s == first)
    {
        t.record(Change::Published(first.clone()));
    }
    for (replica, leaf) in served {
        if let Some(leaf) = leaf {
            let serial = t.servings.iter().position(|d| *d == leaf);
            t.record(Change::Served { replica, serial });
        }
    }
    true
}
