//! The two Secrets as [`Material`]: read them, and write back only what changed.
//!
//! Writes are `replace` with the read `resourceVersion` (or `create` when the Secret is absent), so
//! a concurrent writer (a second leader during a hand-over, a person) makes this pass fail with a
//! conflict and the next pass start from what is really stored, instead of one overwriting the other.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use nodewright_certs::PemPair;
use nodewright_certs::material::Material;

use super::{Error, write_err};
use crate::writes::Writer;

/// CA Secret key: the current CA certificate.
pub const CA_CERT: &str = "ca.crt";
/// CA Secret key: the current CA private key.
pub const CA_KEY: &str = "ca.key";
/// CA Secret key: every CA the published caBundle holds.
pub const BUNDLE: &str = "bundle.crt";
/// Serving Secret key: the certificate.
pub const TLS_CERT: &str = "tls.crt";
/// Serving Secret key: the private key.
pub const TLS_KEY: &str = "tls.key";

/// What was read: the material and the Secrets it came from (for their resourceVersions).
#[derive(Debug, Clone, Default)]
pub struct Stored {
    /// The material.
    pub material: Material,
    /// The CA Secret, if it exists.
    pub ca_secret: Option<Secret>,
    /// The serving Secret, if it exists.
    pub tls_secret: Option<Secret>,
}

fn text(secret: Option<&Secret>, key: &str) -> Option<String> {
    let bytes = secret?.data.as_ref()?.get(key)?;
    // Non-UTF-8 data cannot be PEM: treated as absent, so it is replaced.
    String::from_utf8(bytes.0.clone()).ok()
}

fn pair(secret: Option<&Secret>, cert: &str, key: &str) -> Option<PemPair> {
    Some(PemPair {
        cert_pem: text(secret, cert)?,
        key_pem: text(secret, key)?,
    })
}

/// Reads both Secrets.
pub async fn read(api: &Api<Secret>, ca_name: &str, tls_name: &str) -> Result<Stored, Error> {
    let get = |name: &str| {
        let name = name.to_owned();
        async move {
            api.get_opt(&name).await.map_err(|source| Error::Kube {
                action: format!("reading Secret {name}"),
                source,
            })
        }
    };
    let ca_secret = get(ca_name).await?;
    let tls_secret = get(tls_name).await?;
    let material = Material {
        ca: pair(ca_secret.as_ref(), CA_CERT, CA_KEY),
        bundle: text(ca_secret.as_ref(), BUNDLE).unwrap_or_default(),
        serving: pair(tls_secret.as_ref(), TLS_CERT, TLS_KEY),
    };
    Ok(Stored {
        material,
        ca_secret,
        tls_secret,
    })
}

fn data(entries: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
        .collect()
}

/// Sets `entries` as the Secret's data (other keys are kept), creating it if absent. Returns
/// whether anything was written.
async fn write(
    writer: &Writer,
    name: &str,
    existing: Option<&Secret>,
    entries: &[(&str, &str)],
) -> Result<bool, Error> {
    let wanted = data(entries);
    match existing {
        Some(secret) => {
            let mut updated = secret.clone();
            let current = updated.data.get_or_insert_with(BTreeMap::new);
            if wanted.iter().all(|(k, v)| current.get(k) == Some(v)) {
                return Ok(false);
            }
            current.extend(wanted);
            writer
                .replace_secret(name, &updated)
                .await
                .map_err(write_err(format!("updating Secret {name}")))?;
        }
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_owned(),
                        "nodewright-operator".to_owned(),
                    )])),
                    ..ObjectMeta::default()
                },
                type_: Some("Opaque".to_owned()),
                data: Some(wanted),
                ..Secret::default()
            };
            writer
                .create_secret(&secret)
                .await
                .map_err(write_err(format!("creating Secret {name}")))?;
        }
    }
    Ok(true)
}

/// Writes the CA Secret if its content differs from `material`.
pub async fn write_ca(
    writer: &Writer,
    name: &str,
    stored: &Stored,
    material: &Material,
) -> Result<bool, Error> {
    let Some(ca) = &material.ca else {
        return Ok(false);
    };
    write(
        writer,
        name,
        stored.ca_secret.as_ref(),
        &[
            (CA_CERT, &ca.cert_pem),
            (CA_KEY, &ca.key_pem),
            (BUNDLE, &material.bundle),
        ],
    )
    .await
}

/// Writes the serving Secret if its content differs from `material`; `ca.crt` is the bundle, for
/// clients that want to verify the webhook themselves.
pub async fn write_serving(
    writer: &Writer,
    name: &str,
    stored: &Stored,
    material: &Material,
) -> Result<bool, Error> {
    let Some(serving) = &material.serving else {
        return Ok(false);
    };
    write(
        writer,
        name,
        stored.tls_secret.as_ref(),
        &[
            (TLS_CERT, &serving.cert_pem),
            (TLS_KEY, &serving.key_pem),
            (CA_CERT, &material.bundle),
        ],
    )
    .await
}
