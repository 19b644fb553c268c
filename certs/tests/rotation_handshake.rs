//! A rotation as the kube-apiserver sees it: at every step, a rustls client that trusts the
//! published `caBundle` completes a real TLS handshake (over 127.0.0.1) with a server presenting
//! the serving certificate, whichever of the bundles before and after the step it still uses and
//! whichever of the certificates before and after the step a webhook replica still serves.

use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use nodewright_certs::PemPair;
use nodewright_certs::material::{self, Material};
use nodewright_certs::rotation::{
    CaAction, CaReason, Plan, Policy, ServingAction, ServingReason, plan,
};
use rustls_pki_types::pem::PemObject;
use time::OffsetDateTime;

const DAY: Duration = Duration::from_secs(86_400);

fn names() -> Vec<String> {
    vec!["webhook.nodewright.svc".into(), "127.0.0.1".into()]
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// One handshake: a server on 127.0.0.1 presenting `serving`, a client trusting `bundle` and
/// expecting `name`. Ok when the client accepted the certificate.
fn handshake(bundle: &str, serving: &PemPair, name: &str) -> Result<(), String> {
    let chain: Vec<_> =
        rustls_pki_types::CertificateDer::pem_slice_iter(serving.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("serving pem: {e}"))?;
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes())
        .map_err(|e| format!("key pem: {e}"))?;
    let server = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| e.to_string())?,
    );
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots
            .add(c.map_err(|e| format!("bundle pem: {e}"))?)
            .map_err(|e| format!("bundle root: {e}"))?;
    }
    let client = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );

    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server_side = std::thread::spawn(move || -> Result<(), String> {
        let (mut sock, _) = listener.accept().map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let mut conn = rustls::ServerConnection::new(server).map_err(|e| e.to_string())?;
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    let mut sock = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let server_name =
        rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|e| e.to_string())?;
    let mut conn = rustls::ClientConnection::new(client, server_name).map_err(|e| e.to_string())?;
    let result = loop {
        if !conn.is_handshaking() {
            break Ok(());
        }
        if let Err(e) = conn.complete_io(&mut sock) {
            break Err(if e.kind() == ErrorKind::InvalidData {
                format!("certificate refused: {e}")
            } else {
                e.to_string()
            });
        }
    };
    drop(sock);
    let _ = server_side.join();
    result
}

/// Every client bundle × every served certificate succeeds, for every name.
fn assert_trusted(step: &str, bundles: &[&str], servings: &[&PemPair]) {
    for (bi, bundle) in bundles.iter().enumerate() {
        for (si, serving) in servings.iter().enumerate() {
            for name in names() {
                handshake(bundle, serving, &name).unwrap_or_else(|e| {
                    panic!(
                        "{step}: client with bundle #{bi} refused serving cert #{si} as {name}: {e}"
                    )
                });
            }
        }
    }
}

/// One pass of the controller, in its order: the plan, then the CA Secret and the bundle are
/// published, then the serving Secret is written.
fn pass(
    now: OffsetDateTime,
    policy: &Policy,
    stored: &Material,
    published: &str,
) -> (Plan, Material) {
    let (state, problems) = material::observe(stored, &[published.to_owned()], &names());
    assert!(problems.is_empty(), "{problems:?}");
    let p = plan(now, policy, &state);
    let next = material::apply(now, policy, &p, stored, &names()).expect("apply");
    (p, next)
}

fn serving(m: &Material) -> &PemPair {
    m.serving.as_ref().expect("serving certificate stored")
}

#[test]
fn every_step_of_a_rotation_keeps_handshakes_working() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let real_now = OffsetDateTime::now_utc();
    let policy = Policy {
        ca_validity: 30 * DAY,
        serving_validity: 60 * DAY,
        propagation: Duration::from_secs(60),
        resync: Duration::from_secs(3600),
    };
    let minute = time::Duration::minutes(1);

    // Install: everything made 21 days ago (so the CA, 30 days long, is now due for renewal),
    // then published.
    let installed_at = real_now - time::Duration::days(21);
    let (p0, m0) = pass(installed_at, &policy, &Material::default(), "");
    assert_eq!(p0.ca, CaAction::Generate(CaReason::Missing));
    let published0 = m0.bundle.clone();
    assert_trusted("install", &[&published0], &[serving(&m0)]);

    // Nothing is due a day after install: no change at all.
    let (p, m) = pass(
        installed_at + time::Duration::days(1),
        &policy,
        &m0,
        &published0,
    );
    assert!(
        p.is_steady(&material::observe(&m0, std::slice::from_ref(&published0), &names()).0),
        "{p:?}"
    );
    assert_eq!(m, m0, "nothing rotated needlessly");

    // Step 1 (now): the CA is due. A new CA joins the bundle; the serving certificate stays.
    let (p1, m1) = pass(real_now, &policy, &m0, &published0);
    assert_eq!(p1.ca, CaAction::Generate(CaReason::Renew));
    assert_eq!(p1.serving, ServingAction::WaitForBundle);
    assert_eq!(material::bundle_ders(&m1.bundle).len(), 2);
    assert_eq!(serving(&m1), serving(&m0));
    let published1 = m1.bundle.clone();
    assert_trusted("new CA", &[&published0, &published1], &[serving(&m0)]);

    // Step 2: before the propagation time, nothing moves.
    let (p2, m2) = pass(
        real_now + time::Duration::seconds(30),
        &policy,
        &m1,
        &published1,
    );
    assert_eq!(p2.serving, ServingAction::WaitForBundle);
    assert_eq!(m2, m1);

    // Step 3: propagated: the serving certificate moves to the new CA; both CAs stay published.
    let (p3, m3) = pass(real_now + minute, &policy, &m2, &published1);
    assert_eq!(p3.serving, ServingAction::Issue(ServingReason::CaRotated));
    assert_ne!(serving(&m3), serving(&m2));
    assert!(!material::needs_publish(&m3.bundle, &published1));
    let published3 = m3.bundle.clone();
    assert_trusted(
        "serving certificate from the new CA",
        &[&published1, &published3],
        &[serving(&m2), serving(&m3)],
    );

    // Step 4: the new serving certificate has propagated: the old CA leaves the bundle.
    let (p4, m4) = pass(real_now + 2 * minute, &policy, &m3, &published3);
    assert_eq!(p4.serving, ServingAction::Keep);
    assert!(p4.keep.is_empty());
    assert_eq!(material::bundle_ders(&m4.bundle).len(), 1);
    let published4 = m4.bundle.clone();
    assert_trusted(
        "old CA dropped",
        &[&published3, &published4],
        &[serving(&m4)],
    );

    // The certificate signed by the old CA is refused by the final bundle: the overlap mattered.
    assert!(handshake(&published4, serving(&m0), "127.0.0.1").is_err());

    // Step 5: steady again.
    let (p5, m5) = pass(real_now + 3 * minute, &policy, &m4, &published4);
    assert!(p5.is_steady(&material::observe(&m4, std::slice::from_ref(&published4), &names()).0));
    assert_eq!(m5, m4);
}

#[test]
fn a_serving_renewal_keeps_handshakes_working() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let real_now = OffsetDateTime::now_utc();
    let policy = Policy {
        ca_validity: 365 * DAY,
        serving_validity: 30 * DAY,
        propagation: Duration::from_secs(60),
        resync: Duration::from_secs(3600),
    };
    // Installed 21 days ago: the serving certificate (30 days) is due, the CA is not.
    let (_, m0) = pass(
        real_now - time::Duration::days(21),
        &policy,
        &Material::default(),
        "",
    );
    let published = m0.bundle.clone();
    let (p1, m1) = pass(real_now, &policy, &m0, &published);
    assert_eq!(p1.ca, CaAction::Keep);
    assert_eq!(p1.serving, ServingAction::Issue(ServingReason::Renew));
    assert_eq!(m1.bundle, m0.bundle, "the bundle does not change");
    assert_trusted(
        "serving renewal",
        &[&published],
        &[serving(&m0), serving(&m1)],
    );
}

#[test]
fn changed_names_are_reissued_and_served() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let now = OffsetDateTime::now_utc();
    let policy = Policy::default();
    let old_names = vec!["old.nodewright.svc".to_owned()];
    let (state, _) = material::observe(&Material::default(), &[], &old_names);
    let p = plan(now, &policy, &state);
    let m0 = material::apply(now, &policy, &p, &Material::default(), &old_names).expect("apply");
    let (p1, m1) = pass(now, &policy, &m0, &m0.bundle.clone());
    assert_eq!(
        p1.serving,
        ServingAction::Issue(ServingReason::NamesChanged)
    );
    assert_trusted("renamed", &[&m1.bundle], &[serving(&m1)]);
    assert!(
        handshake(&m0.bundle, serving(&m0), "127.0.0.1").is_err(),
        "old names only"
    );
}
