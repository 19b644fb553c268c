//! Facts about PEM material, for the rotation policy: validity windows, subject alternative names,
//! which CA signed a serving certificate, and whether a private key belongs to its certificate.
//!
//! Everything read here comes from Kubernetes objects anyone with write access could have edited,
//! so nothing is trusted: every parse failure is an [`InspectError`] the caller logs, and the
//! policy then treats that piece as missing (and replaces it) instead of failing forever.

use std::collections::BTreeSet;
use std::net::IpAddr;

use rcgen::{KeyPair, PublicKeyData};
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

use crate::{BACKDATE, PemPair};

/// Why a piece of material is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InspectError {
    /// The text holds no `CERTIFICATE` block.
    #[error("no CERTIFICATE block in {what}")]
    NoCertificate {
        /// Which material.
        what: &'static str,
    },
    /// A block is not a parseable X.509 certificate.
    #[error("{what}: certificate {index} cannot be parsed: {reason}")]
    Parse {
        /// Which material.
        what: &'static str,
        /// Position of the block (0-based).
        index: usize,
        /// The parser's message.
        reason: String,
    },
    /// The CA certificate lacks `basicConstraints CA:TRUE`.
    #[error("the CA certificate is not a CA (no basicConstraints CA:TRUE)")]
    NotCa,
    /// The private key does not parse.
    #[error("{what}: the private key cannot be read: {reason}")]
    Key {
        /// Which material.
        what: &'static str,
        /// The parser's message.
        reason: String,
    },
    /// The private key is not the certificate's.
    #[error("{what}: the private key does not belong to the certificate")]
    KeyMismatch {
        /// Which material.
        what: &'static str,
    },
}

/// What the policy needs to know about one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    /// The certificate (DER): its identity.
    pub der: Vec<u8>,
    /// Its PEM block (normalised to end with a newline), to rebuild bundles without re-encoding.
    pub pem: String,
    /// `notBefore`.
    pub not_before: OffsetDateTime,
    /// `notAfter`.
    pub not_after: OffsetDateTime,
}

impl CertFacts {
    /// When the certificate was most likely made: `notBefore` plus the [`BACKDATE`] this crate
    /// applies. For certificates made elsewhere (no back-dating) this is later than the truth,
    /// which only makes waits that depend on it longer, never shorter.
    pub fn made_at(&self) -> OffsetDateTime {
        let backdate = time::Duration::try_from(BACKDATE).unwrap_or(time::Duration::ZERO);
        self.not_before.saturating_add(backdate)
    }

    /// When a third of the certificate's life remains: the moment it is renewed. Renewing that
    /// early leaves a long margin for a failed renewal to be noticed and retried.
    pub fn renew_at(&self) -> OffsetDateTime {
        let life = self.not_after - self.not_before;
        if life <= time::Duration::ZERO {
            return self.not_before;
        }
        self.not_before.saturating_add(life * 2 / 3)
    }

    /// Whether the certificate is past its `notAfter` at `now`.
    pub fn expired(&self, now: OffsetDateTime) -> bool {
        now >= self.not_after
    }
}

/// What the policy needs to know about the serving certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingFacts {
    /// The certificate.
    pub cert: CertFacts,
    /// Its subject alternative names, normalised by [`normalize_name`].
    pub names: BTreeSet<String>,
    /// DER of the candidate CA whose key signed it, if any of those given did.
    pub issuer: Option<Vec<u8>>,
}

/// A DNS name lower-cased, an IP address in canonical text form, so SAN sets compare equal however
/// they were written.
pub fn normalize_name(name: &str) -> String {
    match name.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => name.trim_end_matches('.').to_ascii_lowercase(),
    }
}

/// The `CERTIFICATE` blocks of a PEM text, each as its own text.
pub fn pem_blocks(text: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let after = &rest[start..];
        let Some(end) = after.find(END) else { break };
        let block = &after[..end + END.len()];
        blocks.push(format!("{}\n", block.trim()));
        rest = &after[end + END.len()..];
    }
    blocks
}

fn decode_block(block: &str) -> Option<Vec<u8>> {
    let pem = x509_parser::pem::Pem::iter_from_buffer(block.as_bytes())
        .next()?
        .ok()?;
    Some(pem.contents)
}

fn to_time(t: &x509_parser::time::ASN1Time) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(t.timestamp()).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn facts_of(what: &'static str, index: usize, block: String) -> Result<CertFacts, InspectError> {
    let parse_err = |reason: String| InspectError::Parse {
        what,
        index,
        reason,
    };
    let der = decode_block(&block).ok_or_else(|| parse_err("not valid PEM".into()))?;
    let (_, cert) = X509Certificate::from_der(&der).map_err(|e| parse_err(e.to_string()))?;
    Ok(CertFacts {
        not_before: to_time(&cert.validity().not_before),
        not_after: to_time(&cert.validity().not_after),
        pem: block,
        der,
    })
}

/// Every certificate of a PEM text (a CA bundle).
pub fn certificates(what: &'static str, text: &str) -> Result<Vec<CertFacts>, InspectError> {
    let blocks = pem_blocks(text);
    if blocks.is_empty() {
        return Err(InspectError::NoCertificate { what });
    }
    blocks
        .into_iter()
        .enumerate()
        .map(|(i, b)| facts_of(what, i, b))
        .collect()
}

fn first(what: &'static str, text: &str) -> Result<CertFacts, InspectError> {
    let block = pem_blocks(text)
        .into_iter()
        .next()
        .ok_or(InspectError::NoCertificate { what })?;
    facts_of(what, 0, block)
}

fn check_key(what: &'static str, cert_der: &[u8], key_pem: &str) -> Result<(), InspectError> {
    let key = KeyPair::from_pem(key_pem).map_err(|e| InspectError::Key {
        what,
        reason: e.to_string(),
    })?;
    let (_, cert) = X509Certificate::from_der(cert_der).map_err(|e| InspectError::Parse {
        what,
        index: 0,
        reason: e.to_string(),
    })?;
    if cert.public_key().raw == key.subject_public_key_info().as_slice() {
        Ok(())
    } else {
        Err(InspectError::KeyMismatch { what })
    }
}

/// Facts about a CA pair: a CA certificate whose key is the one given.
pub fn ca(pair: &PemPair) -> Result<CertFacts, InspectError> {
    let facts = first("CA", &pair.cert_pem)?;
    let (_, cert) = X509Certificate::from_der(&facts.der).map_err(|e| InspectError::Parse {
        what: "CA",
        index: 0,
        reason: e.to_string(),
    })?;
    if !cert.is_ca() {
        return Err(InspectError::NotCa);
    }
    check_key("CA", &facts.der, &pair.key_pem)?;
    Ok(facts)
}

/// Facts about a serving pair; `candidates` are the DERs of the CAs that might have signed it.
pub fn serving(pair: &PemPair, candidates: &[&[u8]]) -> Result<ServingFacts, InspectError> {
    const WHAT: &str = "serving certificate";
    let facts = first(WHAT, &pair.cert_pem)?;
    check_key(WHAT, &facts.der, &pair.key_pem)?;
    let (_, cert) = X509Certificate::from_der(&facts.der).map_err(|e| InspectError::Parse {
        what: WHAT,
        index: 0,
        reason: e.to_string(),
    })?;
    let mut names = BTreeSet::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => {
                    names.insert(normalize_name(d));
                }
                GeneralName::IPAddress(bytes) => {
                    let ip = match bytes.len() {
                        4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
                        16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
                        _ => None,
                    };
                    if let Some(ip) = ip {
                        names.insert(ip.to_string());
                    }
                }
                _ => {}
            }
        }
    }
    let issuer = candidates.iter().find_map(|ca_der| {
        let (_, ca) = X509Certificate::from_der(ca_der).ok()?;
        cert.verify_signature(Some(ca.public_key()))
            .ok()
            .map(|()| ca_der.to_vec())
    });
    Ok(ServingFacts {
        cert: facts,
        names,
        issuer,
    })
}
