//! Webhook TLS material: a CA and serving certificates it signs (DESIGN §6).
//!
//! The kube-apiserver trusts the webhook through the CA in the webhook configurations' `caBundle`,
//! so the CA is long-lived and the serving certificate, which names the webhook Service's DNS names
//! (or `127.0.0.1` for a webhook served outside the cluster), is the part that rotates.
//! ECDSA P-256 keys: small, fast to generate and to handshake, accepted by every Kubernetes client.
//!
//! Rotation (when to make a new CA or serving certificate, and which CAs the published `caBundle`
//! holds meanwhile) is decided by pure functions in [`rotation`], over facts [`inspect`] reads from
//! the PEM material, and carried out by [`material::apply`]. The operator's certificate controller
//! only reads and writes Kubernetes objects around them.

pub mod inspect;
pub mod material;
pub mod rotation;

/// The `time` crate of this API (`OffsetDateTime` in [`rotation::plan`]), so callers need not
/// depend on a matching version themselves.
pub use time;

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::OffsetDateTime;

/// Why material could not be generated or read.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen refused the parameters or the key.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// A requested validity does not fit a certificate's date range.
    #[error("validity of {0:?} is out of range")]
    Validity(Duration),
    /// No subject alternative names were given.
    #[error("a serving certificate needs at least one DNS name or IP address")]
    NoNames,
}

/// PEM text of a certificate and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemPair {
    /// The certificate (`CERTIFICATE` block).
    pub cert_pem: String,
    /// Its private key (`PRIVATE KEY`, PKCS#8).
    pub key_pem: String,
}

/// A certificate authority able to sign serving certificates.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    pem: PemPair,
}

/// How far `notBefore` is set before the moment a certificate is made: clocks of the apiserver and
/// the webhook host are never exactly equal. [`inspect`] adds it back to tell when a certificate was
/// made.
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// A certificate's validity window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// `notBefore`.
    pub not_before: OffsetDateTime,
    /// `notAfter`.
    pub not_after: OffsetDateTime,
}

impl Validity {
    /// Valid from [`BACKDATE`] before `now` until `now + validity`.
    pub fn starting_at(now: OffsetDateTime, validity: Duration) -> Result<Self, CertError> {
        let span = time::Duration::try_from(validity).map_err(|_| CertError::Validity(validity))?;
        let backdate =
            time::Duration::try_from(BACKDATE).map_err(|_| CertError::Validity(validity))?;
        Ok(Validity {
            not_before: now
                .checked_sub(backdate)
                .ok_or(CertError::Validity(validity))?,
            not_after: now.checked_add(span).ok_or(CertError::Validity(validity))?,
        })
    }

    /// Valid from (a little before) now for `validity`.
    pub fn from_now(validity: Duration) -> Result<Self, CertError> {
        Self::starting_at(OffsetDateTime::now_utc(), validity)
    }
}

fn validity_window(params: &mut CertificateParams, validity: Validity) {
    params.not_before = validity.not_before;
    params.not_after = validity.not_after;
}

impl CertificateAuthority {
    /// A new self-signed CA named `common_name`, valid for `validity`.
    pub fn generate(common_name: &str, validity: Duration) -> Result<Self, CertError> {
        Self::generate_with(common_name, Validity::from_now(validity)?)
    }

    /// A new self-signed CA named `common_name` with the given validity window (tests use windows in
    /// the past to exercise renewal).
    pub fn generate_with(common_name: &str, validity: Validity) -> Result<Self, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "NodeWright");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity_window(&mut params, validity);
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let pem = PemPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        Ok(CertificateAuthority {
            issuer: Issuer::new(params, key),
            pem,
        })
    }

    /// Loads a CA from its PEM certificate and key.
    pub fn from_pem(pair: &PemPair) -> Result<Self, CertError> {
        let key = KeyPair::from_pem(&pair.key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&pair.cert_pem, key)?;
        Ok(CertificateAuthority {
            issuer,
            pem: pair.clone(),
        })
    }

    /// The CA's certificate and key.
    pub fn pem(&self) -> &PemPair {
        &self.pem
    }

    /// A serving certificate for `names` (DNS names; entries that parse as IP addresses become IP
    /// SANs), valid for `validity`.
    pub fn issue_serving(
        &self,
        names: &[String],
        validity: Duration,
    ) -> Result<PemPair, CertError> {
        self.issue_serving_with(names, Validity::from_now(validity)?)
    }

    /// As [`CertificateAuthority::issue_serving`], with the given validity window.
    pub fn issue_serving_with(
        &self,
        names: &[String],
        validity: Validity,
    ) -> Result<PemPair, CertError> {
        let first = names.first().ok_or(CertError::NoNames)?;
        let mut params = CertificateParams::new(names.to_vec())?;
        params
            .distinguished_name
            .push(DnType::CommonName, first.as_str());
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity_window(&mut params, validity);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(PemPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The DNS names of a webhook Service: `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`, and
/// `<svc>.<ns>.svc.<cluster domain>`.
pub fn service_names(service: &str, namespace: &str, cluster_domain: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.{cluster_domain}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls_pki_types::pem::PemObject;
    use std::sync::Arc;

    const DAY: Duration = Duration::from_secs(86_400);

    /// A client trusting the CA accepts the serving certificate for each of its names.
    fn verify(ca: &PemPair, leaf: &PemPair, name: &str) -> Result<(), rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca.cert_pem.as_bytes()) {
            roots.add(c.expect("ca pem")).expect("root");
        }
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("verifier");
        let chain: Vec<_> =
            rustls_pki_types::CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
                .map(|c| c.expect("pem"))
                .collect();
        let server_name = rustls::pki_types::ServerName::try_from(name.to_owned()).expect("name");
        verifier
            .verify_server_cert(
                &chain[0],
                &chain[1..],
                &server_name,
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .map(|_| ())
    }

    #[test]
    fn serving_certificate_chains_to_its_ca_for_every_name() {
        let ca = CertificateAuthority::generate("test CA", 365 * DAY).expect("ca");
        let mut names = service_names("nw-webhook", "nodewright", "cluster.local");
        names.push("127.0.0.1".into());
        let leaf = ca.issue_serving(&names, 30 * DAY).expect("leaf");
        for name in &names {
            verify(ca.pem(), &leaf, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert!(
            verify(ca.pem(), &leaf, "other.example.com").is_err(),
            "a name not in the SANs is refused"
        );
        let other_ca = CertificateAuthority::generate("other CA", DAY).expect("ca");
        assert!(
            verify(other_ca.pem(), &leaf, &names[0]).is_err(),
            "another CA does not vouch for it"
        );
    }

    #[test]
    fn a_reloaded_ca_signs_certificates_the_old_bundle_trusts() {
        let ca = CertificateAuthority::generate("test CA", DAY).expect("ca");
        let reloaded = CertificateAuthority::from_pem(ca.pem()).expect("reload");
        let leaf = reloaded
            .issue_serving(&["svc.ns.svc".into()], DAY)
            .expect("leaf");
        verify(ca.pem(), &leaf, "svc.ns.svc").expect("trusted");
    }

    #[test]
    fn bad_requests_are_errors() {
        let ca = CertificateAuthority::generate("test CA", DAY).expect("ca");
        assert!(matches!(
            ca.issue_serving(&[], DAY),
            Err(CertError::NoNames)
        ));
        assert!(CertificateAuthority::generate("x", Duration::MAX).is_err());
        let bad = PemPair {
            cert_pem: "nope".into(),
            key_pem: "nope".into(),
        };
        assert!(CertificateAuthority::from_pem(&bad).is_err());
    }
}
