//! The rotation policy (DESIGN §6), as a pure function of the time and what is stored and published.
//!
//! Goals, in order: admission never fails because of a certificate change; nothing is replaced that
//! does not need replacing (a restart, a new leader or a resync must not rotate anything); broken or
//! lost material is repaired at once.
//!
//! How a CA rotation stays invisible to the kube-apiserver: the published `caBundle` is a *set* of
//! CAs. A new CA joins the set first; only once it has been published for the propagation time is a
//! serving certificate signed by it; only once that certificate has been in place for the
//! propagation time (every webhook replica has loaded it) does the old CA leave the set. At every
//! moment each certificate a replica may serve chains to a CA in the published set.
//!
//! Decisions (each is a variant below, each has a unit test):
//! - CA: generated when there is no usable one ([`CaReason::Missing`]) or a third or less of its
//!   life remains ([`CaReason::Renew`]); otherwise kept.
//! - Serving certificate: issued when missing or unusable ([`ServingReason::Missing`]), when its
//!   names differ from the wanted ones ([`ServingReason::NamesChanged`]), when a third or less of
//!   its life remains ([`ServingReason::Renew`]), when it chains to no CA the bundle keeps
//!   ([`ServingReason::Untrusted`]), or when it chains to an older CA and the current CA has been
//!   published long enough ([`ServingReason::CaRotated`]); kept while it chains to the current CA;
//!   otherwise it waits for the bundle ([`ServingAction::WaitForBundle`]).
//! - Bundle: the current CA plus every unexpired older CA, until the serving certificate chains to
//!   the current CA and has been in place for the propagation time; then the current CA alone.

use std::collections::BTreeSet;
use std::time::Duration;

use time::OffsetDateTime;

use crate::inspect::{CertFacts, ServingFacts};

/// Validity periods and waits. The defaults suit a cluster; tests shorten them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Life of a new CA. Long, because every CA change is a multi-step overlap.
    pub ca_validity: Duration,
    /// Life of a new serving certificate. Renewed after two thirds of it.
    pub serving_validity: Duration,
    /// How long a change takes to reach every kube-apiserver (webhook configurations) and every
    /// webhook replica (the serving Secret, through a watch or a kubelet-synced volume, which can
    /// take a minute or more).
    pub propagation: Duration,
    /// The longest time between two looks, even when nothing is due (catches clock jumps and
    /// missed events).
    pub resync: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            ca_validity: Duration::from_secs(5 * 365 * 86_400),
            serving_validity: Duration::from_secs(90 * 86_400),
            propagation: Duration::from_secs(3 * 60),
            resync: Duration::from_secs(3600),
        }
    }
}

/// What is stored and published now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// The current CA, if stored and usable (a CA certificate with its key).
    pub ca: Option<CertFacts>,
    /// The stored bundle: every CA the published `caBundle` should hold (may include the current).
    pub bundle: Vec<CertFacts>,
    /// The serving certificate, if stored and usable, with the CA that signed it among the current
    /// CA and the bundle.
    pub serving: Option<ServingFacts>,
    /// The CAs (DER) of each published `caBundle` (one entry per webhook of each configuration).
    pub published: Vec<Vec<Vec<u8>>>,
    /// The subject alternative names the serving certificate must carry, normalised.
    pub names: BTreeSet<String>,
}

/// Why a new CA is generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaReason {
    /// There is no usable CA (first start, deleted or corrupted Secret).
    Missing,
    /// A third or less of its life remains (or it has expired).
    Renew,
}

/// What happens to the CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaAction {
    /// It stays.
    Keep,
    /// A new one is generated and becomes current; the old one (if any) stays in the bundle.
    Generate(CaReason),
}

/// Why a new serving certificate is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingReason {
    /// There is no usable serving certificate.
    Missing,
    /// Its names are not the wanted ones (Service renamed, URL host changed).
    NamesChanged,
    /// A third or less of its life remains.
    Renew,
    /// It chains to no CA the bundle keeps trusting, so the apiserver would refuse it anyway.
    Untrusted,
    /// It chains to an older CA, and the current CA has been published long enough.
    CaRotated,
}

/// What happens to the serving certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingAction {
    /// It stays.
    Keep,
    /// A new one is signed by the current CA.
    Issue(ServingReason),
    /// It stays for now: it should move to the current CA, which is not yet published (or not for
    /// long enough) for the apiserver to trust a certificate it signed.
    WaitForBundle,
}

/// The decision for one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The CA.
    pub ca: CaAction,
    /// The serving certificate.
    pub serving: ServingAction,
    /// CAs other than the current one that the bundle keeps (oldest first).
    pub keep: Vec<CertFacts>,
    /// When to look again if nothing happens before.
    pub next_check: OffsetDateTime,
}

impl Plan {
    /// True when the pass writes nothing: both certificates stay and the bundle keeps what is
    /// stored. (Publishing a bundle the configurations lack is decided separately.)
    pub fn is_steady(&self, state: &State) -> bool {
        let stored_others: Vec<&[u8]> = state
            .bundle
            .iter()
            .filter(|c| state.ca.as_ref().is_none_or(|ca| ca.der != c.der))
            .map(|c| c.der.as_slice())
            .collect();
        let keep: Vec<&[u8]> = self.keep.iter().map(|c| c.der.as_slice()).collect();
        let current_stored = state
            .ca
            .as_ref()
            .is_some_and(|ca| state.bundle.iter().any(|c| c.der == ca.der));
        self.ca == CaAction::Keep
            && matches!(
                self.serving,
                ServingAction::Keep | ServingAction::WaitForBundle
            )
            && keep == stored_others
            && current_stored
    }
}

fn span(d: Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

/// Whether `ca` is in every published bundle (vacuously true when nothing is published: no
/// apiserver calls a webhook that has no configuration).
fn published_everywhere(state: &State, ca: &CertFacts) -> bool {
    state
        .published
        .iter()
        .all(|bundle| bundle.contains(&ca.der))
}

/// Decides one pass. See the module documentation for the rules.
pub fn plan(now: OffsetDateTime, policy: &Policy, state: &State) -> Plan {
    let propagation = span(policy.propagation);

    // The CA.
    let ca_action = match &state.ca {
        None => CaAction::Generate(CaReason::Missing),
        Some(ca) if now >= ca.renew_at() => CaAction::Generate(CaReason::Renew),
        Some(_) => CaAction::Keep,
    };
    let current = match ca_action {
        CaAction::Keep => state.ca.as_ref(),
        CaAction::Generate(_) => None,
    };

    // The older CAs the bundle may keep: the stored ones and, when a new CA is made, the old
    // current one; never an expired one, never the current one, never twice.
    let mut candidates: Vec<CertFacts> = Vec::new();
    let olds = state.bundle.iter().chain(match ca_action {
        CaAction::Generate(_) => state.ca.as_ref(),
        CaAction::Keep => None,
    });
    for c in olds {
        let is_current = current.is_some_and(|cur| cur.der == c.der);
        if !is_current && !c.expired(now) && !candidates.iter().any(|k| k.der == c.der) {
            candidates.push(c.clone());
        }
    }
    candidates.sort_by_key(|c| c.not_before);

    // The serving certificate.
    let issuer_is = |s: &ServingFacts, ca: Option<&CertFacts>| {
        ca.is_some_and(|ca| s.issuer.as_deref() == Some(ca.der.as_slice()))
    };
    let serving_action = match &state.serving {
        None => ServingAction::Issue(ServingReason::Missing),
        Some(s) if s.names != state.names => ServingAction::Issue(ServingReason::NamesChanged),
        Some(s) if now >= s.cert.renew_at() => ServingAction::Issue(ServingReason::Renew),
        Some(s) if issuer_is(s, current) => ServingAction::Keep,
        Some(s) if candidates.iter().any(|c| issuer_is(s, Some(c))) => match current {
            Some(cur)
                if published_everywhere(state, cur)
                    && now >= cur.made_at().saturating_add(propagation) =>
            {
                ServingAction::Issue(ServingReason::CaRotated)
            }
            _ => ServingAction::WaitForBundle,
        },
        Some(_) => ServingAction::Issue(ServingReason::Untrusted),
    };

    // The bundle drops the older CAs once the serving certificate chains to the current CA and has
    // been in place long enough for every replica to serve it.
    let settled = serving_action == ServingAction::Keep
        && state
            .serving
            .as_ref()
            .is_some_and(|s| now >= s.cert.made_at().saturating_add(propagation));
    let keep = if settled { Vec::new() } else { candidates };

    // When to look again.
    let mut next = now.saturating_add(span(policy.resync));
    let mut consider = |t: OffsetDateTime| {
        if t < next {
            next = t;
        }
    };
    if let Some(cur) = current {
        consider(cur.renew_at());
    }
    match (&state.serving, serving_action) {
        (Some(s), ServingAction::Keep) => {
            consider(s.cert.renew_at());
            if !keep.is_empty() {
                consider(s.cert.made_at().saturating_add(propagation));
            }
        }
        (Some(s), ServingAction::WaitForBundle) => {
            consider(s.cert.renew_at());
            if let Some(cur) = current {
                consider(cur.made_at().saturating_add(propagation));
            }
        }
        // A new certificate: the old CAs can go once it has propagated.
        (_, ServingAction::Issue(_)) if !keep.is_empty() => {
            consider(now.saturating_add(propagation))
        }
        _ => {}
    }
    for c in &keep {
        consider(c.not_after);
    }
    let floor = now.saturating_add(time::Duration::seconds(1));
    Plan {
        ca: ca_action,
        serving: serving_action,
        keep,
        next_check: next.max(floor),
    }
}

/// Whether a published bundle holds exactly the CAs (DER) of the planned one, in any order.
pub fn bundle_matches(planned: &[Vec<u8>], published: &[Vec<u8>]) -> bool {
    let a: BTreeSet<&[u8]> = planned.iter().map(Vec::as_slice).collect();
    let b: BTreeSet<&[u8]> = published.iter().map(Vec::as_slice).collect();
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60;
    const DAY: i64 = 86_400;

    fn t0() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_900_000_000).expect("time")
    }

    fn at(secs: i64) -> OffsetDateTime {
        t0() + time::Duration::seconds(secs)
    }

    /// A certificate made at `made` (seconds after t0) living `life` seconds.
    fn cert(id: u8, made: i64, life: i64) -> CertFacts {
        let backdate = BACKDATE_SECS;
        CertFacts {
            der: vec![id],
            pem: format!("cert {id}\n"),
            not_before: at(made - backdate),
            not_after: at(made + life),
        }
    }

    const BACKDATE_SECS: i64 = 300;

    fn serving(id: u8, issuer: &CertFacts, made: i64, life: i64) -> ServingFacts {
        ServingFacts {
            cert: cert(id, made, life),
            names: names(),
            issuer: Some(issuer.der.clone()),
        }
    }

    fn names() -> BTreeSet<String> {
        ["svc.ns.svc".to_owned(), "127.0.0.1".to_owned()]
            .into_iter()
            .collect()
    }

    fn policy() -> Policy {
        Policy {
            ca_validity: Duration::from_secs(900 * DAY as u64),
            serving_validity: Duration::from_secs(90 * DAY as u64),
            propagation: Duration::from_secs(3 * MIN as u64),
            resync: Duration::from_secs(3600),
        }
    }

    /// Steady state: CA `ca` current and alone in the bundle and the published bundles, serving
    /// certificate signed by it.
    fn steady(ca: &CertFacts, srv: ServingFacts) -> State {
        State {
            ca: Some(ca.clone()),
            bundle: vec![ca.clone()],
            serving: Some(srv),
            published: vec![vec![ca.der.clone()], vec![ca.der.clone()]],
            names: names(),
        }
    }

    #[test]
    fn nothing_at_all_generates_a_ca_and_issues() {
        let state = State {
            names: names(),
            ..State::default()
        };
        let p = plan(t0(), &policy(), &state);
        assert_eq!(p.ca, CaAction::Generate(CaReason::Missing));
        assert_eq!(p.serving, ServingAction::Issue(ServingReason::Missing));
        assert!(p.keep.is_empty());
        assert!(!p.is_steady(&state));
    }

    #[test]
    fn a_healthy_state_changes_nothing_and_sleeps_until_something_is_due() {
        let ca = cert(1, 0, 900 * DAY);
        let state = steady(&ca, serving(2, &ca, 0, 90 * DAY));
        let p = plan(at(DAY), &policy(), &state);
        assert_eq!(p.ca, CaAction::Keep);
        assert_eq!(p.serving, ServingAction::Keep);
        assert!(p.keep.is_empty());
        assert!(p.is_steady(&state));
        assert_eq!(p.next_check, at(DAY + 3600), "resync bound");
        // Close to the serving renewal the next look is at the renewal.
        let srv = &state.serving.as_ref().expect("serving").cert;
        let p = plan(
            srv.renew_at() - time::Duration::seconds(10),
            &policy(),
            &state,
        );
        assert_eq!(p.next_check, srv.renew_at());
    }

    #[test]
    fn the_ca_is_renewed_when_a_third_of_its_life_remains_not_before() {
        let ca = cert(1, 0, 900 * DAY);
        let srv = serving(2, &ca, 590 * DAY, 90 * DAY);
        let state = steady(&ca, srv);
        let just_before = ca.renew_at() - time::Duration::seconds(1);
        assert_eq!(plan(just_before, &policy(), &state).ca, CaAction::Keep);
        let p = plan(ca.renew_at(), &policy(), &state);
        assert_eq!(p.ca, CaAction::Generate(CaReason::Renew));
        // The serving certificate still chains to the old CA, which stays in the bundle: it waits
        // for the new CA to be published.
        assert_eq!(p.serving, ServingAction::WaitForBundle);
        assert_eq!(p.keep, vec![ca.clone()]);
    }

    #[test]
    fn an_expired_ca_is_renewed() {
        let ca = cert(1, 0, DAY);
        let state = steady(&ca, serving(2, &ca, 0, DAY / 2));
        let p = plan(at(2 * DAY), &policy(), &state);
        assert_eq!(p.ca, CaAction::Generate(CaReason::Renew));
        // Both certificates are past their renewal; the expired CA is not kept.
        assert_eq!(p.serving, ServingAction::Issue(ServingReason::Renew));
        assert!(p.keep.is_empty());
    }

    #[test]
    fn the_serving_certificate_is_renewed_when_a_third_of_its_life_remains() {
        let ca = cert(1, 0, 900 * DAY);
        let srv = serving(2, &ca, 0, 90 * DAY);
        let renew = srv.cert.renew_at();
        let state = steady(&ca, srv);
        let before = plan(renew - time::Duration::seconds(1), &policy(), &state);
        assert_eq!(before.serving, ServingAction::Keep);
        let p = plan(renew, &policy(), &state);
        assert_eq!(p.serving, ServingAction::Issue(ServingReason::Renew));
        assert_eq!(
            p.ca,
            CaAction::Keep,
            "a serving renewal does not touch the CA"
        );
    }

    #[test]
    fn changed_names_reissue() {
        let ca = cert(1, 0, 900 * DAY);
        let mut state = steady(&ca, serving(2, &ca, 0, 90 * DAY));
        state.names.insert("other.ns.svc".into());
        let p = plan(at(DAY), &policy(), &state);
        assert_eq!(p.serving, ServingAction::Issue(ServingReason::NamesChanged));
        state.names = ["svc.ns.svc".to_owned()].into_iter().collect();
        let p = plan(at(DAY), &policy(), &state);
        assert_eq!(
            p.serving,
            ServingAction::Issue(ServingReason::NamesChanged),
            "fewer names too"
        );
    }

    #[test]
    fn a_serving_certificate_from_an_unknown_ca_is_replaced() {
        let ca = cert(1, 0, 900 * DAY);
        let stranger = cert(9, 0, 900 * DAY);
        let state = steady(&ca, serving(2, &stranger, 0, 90 * DAY));
        let p = plan(at(DAY), &policy(), &state);
        assert_eq!(p.serving, ServingAction::Issue(ServingReason::Untrusted));
        let mut unsigned = state.clone();
        if let Some(s) = unsigned.serving.as_mut() {
            s.issuer = None;
        }
        assert_eq!(
            plan(at(DAY), &policy(), &unsigned).serving,
            ServingAction::Issue(ServingReason::Untrusted)
        );
    }

    #[test]
    fn a_lost_ca_is_regenerated_and_the_serving_certificate_replaced() {
        let ca = cert(1, 0, 900 * DAY);
        let mut state = steady(&ca, serving(2, &ca, 0, 90 * DAY));
        state.ca = None;
        state.bundle.clear();
        let p = plan(at(DAY), &policy(), &state);
        assert_eq!(p.ca, CaAction::Generate(CaReason::Missing));
        assert_eq!(p.serving, ServingAction::Issue(ServingReason::Untrusted));
    }

    #[test]
    fn a_lost_ca_key_keeps_the_old_ca_trusted_while_its_certificate_serves() {
        // The CA Secret lost its key but kept the bundle: the old CA stays published while the
        // serving certificate it signed is still in use.
        let ca = cert(1, 0, 900 * DAY);
        let mut state = steady(&ca, serving(2, &ca, 0, 90 * DAY));
        state.ca = None;
        let p = plan(at(DAY), &policy(), &state);
        assert_eq!(p.ca, CaAction::Generate(CaReason::Missing));
        assert_eq!(p.serving, ServingAction::WaitForBundle);
        assert_eq!(p.keep, vec![ca]);
    }

    /// The whole overlap, step by step: new CA joins the bundle; serving certificate waits until
    /// the new CA is published and has propagated; then moves; then the old CA leaves once the new
    /// serving certificate has propagated.
    #[test]
    fn ca_rotation_overlaps() {
        let pol = policy();
        let old = cert(1, 0, 900 * DAY);
        let srv_old = serving(2, &old, 590 * DAY, 90 * DAY);
        let now = old.renew_at();
        let state = steady(&old, srv_old.clone());

        // 1. New CA; old kept; serving waits.
        let p1 = plan(now, &pol, &state);
        assert_eq!(p1.ca, CaAction::Generate(CaReason::Renew));
        assert_eq!(p1.serving, ServingAction::WaitForBundle);
        assert_eq!(p1.keep, vec![old.clone()]);

        // 2. New CA stored and in the bundle, but not yet published: still waiting.
        let new_made = (now - t0()).whole_seconds();
        let new = cert(3, new_made, 900 * DAY);
        let mut s2 = state.clone();
        s2.ca = Some(new.clone());
        s2.bundle = vec![new.clone(), old.clone()];
        let p2 = plan(now, &pol, &s2);
        assert_eq!(p2.ca, CaAction::Keep);
        assert_eq!(p2.serving, ServingAction::WaitForBundle);
        assert_eq!(p2.keep, vec![old.clone()]);
        assert!(p2.is_steady(&s2), "nothing to write while waiting");

        // 3. Published everywhere, but not for long enough: waiting, and the next look is when
        //    the propagation time has passed.
        let mut s3 = s2.clone();
        s3.published = vec![vec![new.der.clone(), old.der.clone()]; 2];
        let p3 = plan(now + time::Duration::seconds(MIN), &pol, &s3);
        assert_eq!(p3.serving, ServingAction::WaitForBundle);
        assert_eq!(
            p3.next_check,
            new.made_at() + time::Duration::seconds(3 * MIN)
        );
        // Published in only one configuration: still waiting, however long.
        let mut partial = s3.clone();
        partial.published[1] = vec![old.der.clone()];
        assert_eq!(
            plan(now + time::Duration::seconds(DAY), &pol, &partial).serving,
            ServingAction::WaitForBundle
        );

        // 4. Propagated: the serving certificate moves to the new CA; old CA still kept.
        let t4 = new.made_at() + time::Duration::seconds(3 * MIN);
        let p4 = plan(t4, &pol, &s3);
        assert_eq!(p4.serving, ServingAction::Issue(ServingReason::CaRotated));
        assert_eq!(p4.keep, vec![old.clone()]);

        // 5. New serving certificate stored, too young: the old CA stays.
        let srv_new_made = (t4 - t0()).whole_seconds();
        let mut s5 = s3.clone();
        s5.serving = Some(serving(4, &new, srv_new_made, 90 * DAY));
        let p5 = plan(t4 + time::Duration::seconds(MIN), &pol, &s5);
        assert_eq!(p5.serving, ServingAction::Keep);
        assert_eq!(p5.keep, vec![old.clone()]);
        assert_eq!(p5.next_check, t4 + time::Duration::seconds(3 * MIN));

        // 6. It has propagated: the old CA leaves the bundle.
        let p6 = plan(t4 + time::Duration::seconds(3 * MIN), &pol, &s5);
        assert_eq!(p6.serving, ServingAction::Keep);
        assert!(p6.keep.is_empty());
        assert!(!p6.is_steady(&s5), "the bundle shrinks: a write");

        // 7. Stored and published: steady.
        let mut s7 = s5.clone();
        s7.bundle = vec![new.clone()];
        s7.published = vec![vec![new.der.clone()]; 2];
        let p7 = plan(t4 + time::Duration::seconds(4 * MIN), &pol, &s7);
        assert!(p7.is_steady(&s7));
        assert_eq!(p7.ca, CaAction::Keep);
    }

    #[test]
    fn expired_old_cas_leave_the_bundle_and_the_next_look_is_at_their_expiry() {
        let old = cert(1, 0, 10 * DAY);
        let cur = cert(3, 5 * DAY, 900 * DAY);
        let mut state = steady(&cur, serving(4, &cur, 5 * DAY, 90 * DAY));
        state.bundle = vec![cur.clone(), old.clone()];
        // The serving certificate is young: old CA kept, next look no later than its expiry.
        let p = plan(at(5 * DAY + MIN), &policy(), &state);
        assert_eq!(p.keep, vec![old.clone()]);
        let later = plan(at(10 * DAY + 1), &policy(), &state);
        assert!(later.keep.is_empty(), "expired: dropped");
    }

    #[test]
    fn nothing_published_does_not_block_a_rotation() {
        let old = cert(1, 0, 900 * DAY);
        let new = cert(3, 600 * DAY, 900 * DAY);
        let mut state = steady(&new, serving(2, &old, 590 * DAY, 90 * DAY));
        state.bundle = vec![new.clone(), old.clone()];
        state.published.clear();
        let p = plan(at(600 * DAY + 10 * MIN), &policy(), &state);
        assert_eq!(p.serving, ServingAction::Issue(ServingReason::CaRotated));
    }

    #[test]
    fn a_wiped_published_bundle_does_not_change_the_plan() {
        // Repairing the configurations is the controller's job (bundle_matches); the plan itself
        // must not rotate anything because a configuration lost its caBundle.
        let ca = cert(1, 0, 900 * DAY);
        let mut state = steady(&ca, serving(2, &ca, 0, 90 * DAY));
        state.published = vec![vec![], vec![]];
        let p = plan(at(DAY), &policy(), &state);
        assert_eq!((p.ca, p.serving), (CaAction::Keep, ServingAction::Keep));
        assert!(p.is_steady(&state));
    }

    #[test]
    fn a_current_ca_missing_from_the_stored_bundle_is_a_write() {
        let ca = cert(1, 0, 900 * DAY);
        let mut state = steady(&ca, serving(2, &ca, 0, 90 * DAY));
        state.bundle.clear();
        assert!(!plan(at(DAY), &policy(), &state).is_steady(&state));
    }

    #[test]
    fn the_next_check_is_never_in_the_past() {
        let ca = cert(1, 0, 900 * DAY);
        let state = steady(&ca, serving(2, &ca, 0, 90 * DAY));
        let far = at(10_000 * DAY);
        let p = plan(far, &policy(), &state);
        assert!(p.next_check > far);
    }

    #[test]
    fn bundles_compare_as_sets() {
        let a = vec![vec![1], vec![2]];
        assert!(bundle_matches(&a, &[vec![2], vec![1]]));
        assert!(!bundle_matches(&a, &[vec![1]]));
        assert!(!bundle_matches(&a, &[]));
    }
}
