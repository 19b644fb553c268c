//! Settings of the certificate controller, from the environment the chart sets (self-managed mode).
//!
//! Read on their own (not through the operator's main configuration) so the controller can be
//! switched on, tested and reasoned about separately. Every problem is reported at once, in the
//! operator's `VAR="value" is invalid: ...` form.

use std::time::Duration;

use crate::runtime::config::Problems;
use nodewright_certs::rotation::Policy;
use nodewright_core::naming;
use nodewright_shared::defaults::EnvProblem;

/// `true` turns the controller on (the chart sets it in `certs.mode=self-managed`). Default off: a
/// bare operator never writes Secrets or webhook configurations nobody asked for.
pub const ENV_MANAGED: &str = "WEBHOOK_CERTS_MANAGED";
/// Namespace of both Secrets (the operator's namespace).
pub const ENV_NAMESPACE: &str = "NAMESPACE";
/// The CA Secret (`ca.crt`, `ca.key`, `bundle.crt`): read only by the operator.
pub const ENV_CA_SECRET: &str = "WEBHOOK_CA_SECRET_NAME";
/// The serving Secret (`tls.crt`, `tls.key`, `ca.crt`): what the webhook serves.
pub const ENV_TLS_SECRET: &str = "WEBHOOK_SECRET_NAME";
/// The webhook Service, whose DNS names the serving certificate carries.
pub const ENV_SERVICE: &str = "WEBHOOK_SERVICE_NAME";
/// Cluster DNS domain (`<svc>.<ns>.svc.<domain>`).
pub const ENV_CLUSTER_DOMAIN: &str = "WEBHOOK_CLUSTER_DOMAIN";
/// Extra names (comma-separated DNS names or IPs), e.g. the host of a URL clientConfig.
pub const ENV_EXTRA_NAMES: &str = "WEBHOOK_EXTRA_NAMES";
/// The MutatingWebhookConfiguration whose caBundle is kept current.
pub const ENV_MUTATING: &str = "WEBHOOK_MUTATING_CONFIGURATION";
/// The ValidatingWebhookConfiguration whose caBundle is kept current.
pub const ENV_VALIDATING: &str = "WEBHOOK_VALIDATING_CONFIGURATION";
/// Life of a new CA.
pub const ENV_CA_VALIDITY: &str = "WEBHOOK_CA_VALIDITY";
/// Life of a new serving certificate.
pub const ENV_CERT_VALIDITY: &str = "WEBHOOK_CERT_VALIDITY";
/// Time a change needs to reach every apiserver and webhook replica.
pub const ENV_PROPAGATION: &str = "WEBHOOK_CERT_PROPAGATION";

/// What the controller manages and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Namespace of the Secrets.
    pub namespace: String,
    /// CA Secret name.
    pub ca_secret: String,
    /// Serving Secret name.
    pub tls_secret: String,
    /// Webhook Service name.
    pub service: String,
    /// Cluster DNS domain.
    pub cluster_domain: String,
    /// Extra subject alternative names.
    pub extra_names: Vec<String>,
    /// MutatingWebhookConfiguration name.
    pub mutating_configuration: String,
    /// ValidatingWebhookConfiguration name.
    pub validating_configuration: String,
    /// Validity periods and waits.
    pub policy: Policy,
}

/// Everything wrong with the controller's environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid webhook certificate settings:{}", .problems.iter().map(|p| format!("\n  {p}")).collect::<String>())]
pub struct SettingsError {
    /// One entry per bad variable.
    pub problems: Vec<EnvProblem>,
}

impl Settings {
    /// The serving certificate's names: the Service's DNS names, then the extra names.
    pub fn names(&self) -> Vec<String> {
        let mut names =
            nodewright_certs::service_names(&self.service, &self.namespace, &self.cluster_domain);
        for extra in &self.extra_names {
            if !names.contains(extra) {
                names.push(extra.clone());
            }
        }
        names
    }

    /// Reads the process environment; `Ok(None)` when the controller is off. A value that is not
    /// UTF-8 is read lossily (so it fails validation naming its variable) rather than taken for
    /// unset, which would silently switch the controller off.
    pub fn from_env() -> Result<Option<Settings>, SettingsError> {
        Self::from_lookup(|var| std::env::var_os(var).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Reads the settings through `lookup` (unset ⇒ `None`; empty counts as unset).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Settings>, SettingsError> {
        let get = |var: &str| {
            lookup(var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut problems = Problems::default();
        match problems.boolean(ENV_MANAGED, get(ENV_MANAGED), false) {
            Some(false) => return Ok(None),
            Some(true) => {}
            None => {
                return Err(SettingsError {
                    problems: problems.0,
                });
            }
        }
        let mut name = |var: &'static str, default: &str, max: usize| {
            let value = get(var).unwrap_or_else(|| default.to_owned());
            if value.len() > max || !naming::is_dns_subdomain(&value) {
                problems.push(
                    var,
                    value.clone(),
                    format!(
                        "a DNS-1123 name of at most {max} characters (a-z, 0-9, '-', '.'), e.g. {default:?}"
                    ),
                );
            }
            value
        };
        let namespace = name(ENV_NAMESPACE, "nodewright", 63);
        let ca_secret = name(ENV_CA_SECRET, "nodewright-webhook-ca", 253);
        let tls_secret = name(ENV_TLS_SECRET, "nodewright-webhook-tls", 253);
        let service = name(ENV_SERVICE, "nodewright-webhook", 63);
        let cluster_domain = name(ENV_CLUSTER_DOMAIN, "cluster.local", 253);
        let mutating_configuration = name(ENV_MUTATING, "nodewright-webhook", 253);
        let validating_configuration = name(ENV_VALIDATING, "nodewright-webhook", 253);
        let extra_text = get(ENV_EXTRA_NAMES).unwrap_or_default();
        let extra_names: Vec<String> = extra_text
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        if extra_names
            .iter()
            .any(|n| n.parse::<std::net::IpAddr>().is_err() && !naming::is_dns_subdomain(n))
        {
            problems.push(
                ENV_EXTRA_NAMES,
                extra_text,
                "comma-separated DNS names or IP addresses, e.g. \"127.0.0.1,webhook.example.com\""
                    .to_owned(),
            );
        }
        let mut duration = |var: &'static str, default: &str, min: Duration| {
            let text = get(var).unwrap_or_else(|| default.to_owned());
            let accepted = format!(
                "a Go duration of at least {}s, e.g. {default:?}",
                min.as_secs()
            );
            problems
                .duration(var, text, &accepted, |d| d >= min)
                .unwrap_or(Duration::ZERO)
        };
        let ca_validity = duration(ENV_CA_VALIDITY, "43800h", Duration::from_secs(86_400));
        let serving_validity = duration(ENV_CERT_VALIDITY, "2160h", Duration::from_secs(3600));
        let propagation = duration(ENV_PROPAGATION, "3m", Duration::ZERO);
        let defaults = Policy::default();
        if problems.0.is_empty() && serving_validity > ca_validity {
            problems.push(
                ENV_CERT_VALIDITY,
                get(ENV_CERT_VALIDITY).unwrap_or_default(),
                "at most WEBHOOK_CA_VALIDITY: a serving certificate cannot outlive its CA"
                    .to_owned(),
            );
        }
        if !problems.0.is_empty() {
            return Err(SettingsError {
                problems: problems.0,
            });
        }
        Ok(Some(Settings {
            namespace,
            ca_secret,
            tls_secret,
            service,
            cluster_domain,
            extra_names,
            mutating_configuration,
            validating_configuration,
            policy: Policy {
                ca_validity,
                serving_validity,
                propagation,
                resync: defaults.resync,
            },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Option<Settings>, SettingsError> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::from_lookup(move |var| {
            owned.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn off_unless_asked() {
        assert_eq!(env(&[]), Ok(None));
        assert_eq!(env(&[(ENV_MANAGED, "false")]), Ok(None));
        let err = env(&[(ENV_MANAGED, "yes")]).expect_err("not a boolean");
        assert_eq!(err.problems[0].var, ENV_MANAGED);
    }

    #[test]
    fn defaults_and_names() {
        let s = env(&[(ENV_MANAGED, "true"), (ENV_NAMESPACE, "nw")])
            .expect("valid")
            .expect("on");
        assert_eq!(s.tls_secret, "nodewright-webhook-tls");
        assert_eq!(s.policy.propagation, Duration::from_secs(180));
        assert_eq!(
            s.names(),
            [
                "nodewright-webhook",
                "nodewright-webhook.nw",
                "nodewright-webhook.nw.svc",
                "nodewright-webhook.nw.svc.cluster.local"
            ]
        );
        let s = env(&[
            (ENV_MANAGED, "true"),
            (ENV_EXTRA_NAMES, "127.0.0.1, a.example.com"),
        ])
        .expect("valid")
        .expect("on");
        assert_eq!(&s.names()[4..], ["127.0.0.1", "a.example.com"]);
    }

    #[test]
    fn every_problem_at_once() {
        let err = env(&[
            (ENV_MANAGED, "true"),
            (ENV_TLS_SECRET, "Bad_Name"),
            (ENV_EXTRA_NAMES, "ok.example.com,not a name"),
            (ENV_CA_VALIDITY, "forever"),
            (ENV_PROPAGATION, "-1s"),
        ])
        .expect_err("invalid");
        let vars: Vec<&str> = err.problems.iter().map(|p| p.var).collect();
        assert_eq!(
            vars,
            [
                ENV_TLS_SECRET,
                ENV_EXTRA_NAMES,
                ENV_CA_VALIDITY,
                ENV_PROPAGATION
            ]
        );
        assert!(
            err.to_string().contains("WEBHOOK_SECRET_NAME=\"Bad_Name\""),
            "{err}"
        );
        let err = env(&[
            (ENV_MANAGED, "true"),
            (ENV_CA_VALIDITY, "48h"),
            (ENV_CERT_VALIDITY, "72h"),
        ])
        .expect_err("serving outlives CA");
        assert_eq!(err.problems[0].var, ENV_CERT_VALIDITY);
    }
}
