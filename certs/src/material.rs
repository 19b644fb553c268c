//! The stored material (what the CA Secret and the serving Secret hold), how it is read into the
//! policy's [`State`], and how a [`Plan`] is carried out on it. No I/O: the operator's controller
//! loads and stores the Secrets and the webhook configurations around these functions, and the
//! rotation tests drive them directly.

use std::collections::BTreeSet;

use time::OffsetDateTime;

use crate::inspect::{self, CertFacts, InspectError};
use crate::rotation::{CaAction, Plan, Policy, ServingAction, State};
use crate::{CertError, CertificateAuthority, PemPair, Validity};

/// Common name of the CAs this crate generates for the webhook.
pub const CA_COMMON_NAME: &str = "nodewright-webhook-ca";

/// Everything stored: the CA (CA Secret), the bundle to publish (CA Secret, and `ca.crt` of the
/// serving Secret), and the serving certificate (serving Secret).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Material {
    /// The current CA's certificate and key.
    pub ca: Option<PemPair>,
    /// PEM of every CA the published `caBundle` holds.
    pub bundle: String,
    /// The serving certificate and key.
    pub serving: Option<PemPair>,
}

/// Reads the material into the policy's state. Unusable pieces count as missing (so they are
/// replaced); why each was unusable is returned for the log.
pub fn observe(
    material: &Material,
    published: &[String],
    names: &[String],
) -> (State, Vec<InspectError>) {
    let mut problems = Vec::new();
    let ca = material
        .ca
        .as_ref()
        .and_then(|pair| inspect::ca(pair).map_err(|e| problems.push(e)).ok());
    let bundle = if material.bundle.trim().is_empty() {
        Vec::new()
    } else {
        match inspect::certificates("CA bundle", &material.bundle) {
            Ok(b) => b,
            Err(e) => {
                problems.push(e);
                Vec::new()
            }
        }
    };
    let candidates: Vec<&[u8]> = ca
        .iter()
        .chain(bundle.iter())
        .map(|c| c.der.as_slice())
        .collect();
    let serving = material.serving.as_ref().and_then(|pair| {
        inspect::serving(pair, &candidates)
            .map_err(|e| problems.push(e))
            .ok()
    });
    let published = published
        .iter()
        .map(|text| {
            // An unparseable published bundle is as good as an empty one: it gets repaired.
            inspect::certificates("published caBundle", text)
                .map(|certs| certs.into_iter().map(|c| c.der).collect())
                .unwrap_or_default()
        })
        .collect();
    let names: BTreeSet<String> = names.iter().map(|n| inspect::normalize_name(n)).collect();
    (
        State {
            ca,
            bundle,
            serving,
            published,
            names,
        },
        problems,
    )
}

/// Carries out `plan`: generates what it asks for and rebuilds the bundle (current CA first).
pub fn apply(
    now: OffsetDateTime,
    policy: &Policy,
    plan: &Plan,
    material: &Material,
    names: &[String],
) -> Result<Material, CertError> {
    let ca = match (plan.ca, &material.ca) {
        (CaAction::Keep, Some(pair)) => CertificateAuthority::from_pem(pair)?,
        _ => CertificateAuthority::generate_with(
            CA_COMMON_NAME,
            Validity::starting_at(now, policy.ca_validity)?,
        )?,
    };
    let serving = match (plan.serving, &material.serving) {
        (ServingAction::Keep | ServingAction::WaitForBundle, Some(pair)) => pair.clone(),
        _ => ca.issue_serving_with(names, Validity::starting_at(now, policy.serving_validity)?)?,
    };
    let mut bundle = ca.pem().cert_pem.trim().to_owned();
    bundle.push('\n');
    for old in &plan.keep {
        bundle.push_str(&old.pem);
    }
    Ok(Material {
        ca: Some(ca.pem().clone()),
        bundle,
        serving: Some(serving),
    })
}

/// The CAs (DER) of a PEM bundle; unparseable text gives none.
pub fn bundle_ders(bundle: &str) -> Vec<Vec<u8>> {
    inspect::certificates("CA bundle", bundle)
        .map(|certs| certs.into_iter().map(|c: CertFacts| c.der).collect())
        .unwrap_or_default()
}

/// Whether a published `caBundle` (PEM) must be rewritten to hold exactly `bundle`.
pub fn needs_publish(bundle: &str, published: &str) -> bool {
    let planned = bundle_ders(bundle);
    let seen = inspect::certificates("published caBundle", published)
        .map(|certs| certs.into_iter().map(|c| c.der).collect::<Vec<_>>())
        .unwrap_or_default();
    !crate::rotation::bundle_matches(&planned, &seen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rotation::{CaReason, ServingReason, plan};

    fn names() -> Vec<String> {
        vec!["svc.ns.svc".into(), "127.0.0.1".into()]
    }

    #[test]
    fn first_pass_makes_everything_and_the_second_changes_nothing() {
        let now = OffsetDateTime::now_utc();
        let policy = Policy::default();
        let (state, problems) = observe(&Material::default(), &[], &names());
        assert!(problems.is_empty());
        let p = plan(now, &policy, &state);
        let m = apply(now, &policy, &p, &Material::default(), &names()).expect("apply");
        assert_eq!(bundle_ders(&m.bundle).len(), 1);

        let (state, problems) = observe(&m, std::slice::from_ref(&m.bundle), &names());
        assert!(problems.is_empty(), "{problems:?}");
        assert!(state.serving.as_ref().is_some_and(|s| s.issuer.is_some()));
        let p2 = plan(now, &policy, &state);
        assert!(p2.is_steady(&state), "{p2:?}");
        let m2 = apply(now, &policy, &p2, &m, &names()).expect("apply");
        assert_eq!(m2, m, "a steady plan reproduces the material byte for byte");
        assert!(!needs_publish(&m.bundle, &m.bundle));
        assert!(needs_publish(&m.bundle, ""));
    }

    #[test]
    fn corrupted_pieces_are_reported_and_replaced() {
        let now = OffsetDateTime::now_utc();
        let policy = Policy::default();
        let (state, _) = observe(&Material::default(), &[], &names());
        let good = apply(
            now,
            &policy,
            &plan(now, &policy, &state),
            &Material::default(),
            &names(),
        )
        .expect("apply");

        // The serving key swapped for another: unusable, reissued, CA kept.
        let other =
            CertificateAuthority::generate("x", std::time::Duration::from_secs(3600)).expect("ca");
        let mut bad = good.clone();
        if let Some(s) = bad.serving.as_mut() {
            s.key_pem = other.pem().key_pem.clone();
        }
        let (state, problems) = observe(&bad, &[], &names());
        assert!(
            matches!(problems[..], [InspectError::KeyMismatch { .. }]),
            "{problems:?}"
        );
        let p = plan(now, &policy, &state);
        assert_eq!(p.ca, CaAction::Keep);
        assert_eq!(p.serving, ServingAction::Issue(ServingReason::Missing));

        // A serving certificate in the CA slot: not a CA, regenerated.
        let mut bad = good.clone();
        bad.ca = good.serving.clone();
        let (state, problems) = observe(&bad, &[], &names());
        assert!(problems.contains(&InspectError::NotCa), "{problems:?}");
        assert_eq!(
            plan(now, &policy, &state).ca,
            CaAction::Generate(CaReason::Missing)
        );

        // Garbage everywhere.
        let garbage = Material {
            ca: Some(PemPair {
                cert_pem: "x".into(),
                key_pem: "y".into(),
            }),
            bundle: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
            serving: Some(PemPair {
                cert_pem: String::new(),
                key_pem: String::new(),
            }),
        };
        let (state, problems) = observe(&garbage, &["junk".into()], &names());
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert_eq!(state.published, vec![Vec::<Vec<u8>>::new()]);
        let p = plan(now, &policy, &state);
        assert_eq!(p.ca, CaAction::Generate(CaReason::Missing));
        assert_eq!(p.serving, ServingAction::Issue(ServingReason::Missing));
    }
}
