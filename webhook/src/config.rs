//! Command-line flags and environment of the webhook, validated before anything starts.
//!
//! Every flag has an environment variable (for the chart) and a default that works in a cluster.
//! Problems are reported together, each naming the flag, its variable, the value and what is accepted.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use nodewright_shared::defaults::{DefaultsError, OperatorDefaults};
use nodewright_shared::duration::GoDuration;

use crate::rules::Restrictions;

/// NodeWright admission webhook: fills defaults into and validates NodeWright and DeploymentPolicy
/// objects for the kube-apiserver, over HTTPS.
#[derive(Debug, Clone, Parser)]
#[command(name = "nodewright-webhook", version)]
pub struct Args {
    /// HTTPS address the kube-apiserver calls.
    #[arg(long, env = "WEBHOOK_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: String,

    /// Plain-HTTP address of /metrics (Prometheus).
    #[arg(long, env = "WEBHOOK_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: String,

    /// Serve /metrics only to a bearer token the apiserver authenticates (TokenReview) and
    /// authorises for `get` on `/metrics` (SubjectAccessReview).
    /// `true` or `false` (also 1/0, t/f, TRUE/FALSE, as the operator's METRICS_AUTH). Read as text
    /// and checked in [`Args::validate`], so a bad value is reported naming the variable.
    #[arg(long, env = "WEBHOOK_METRICS_AUTH", default_value = "false")]
    pub metrics_auth: String,

    /// PEM certificate chain file (with --tls-key-file). Re-read when it changes, including the
    /// kubelet's symlink swap of a mounted Secret.
    #[arg(long, env = "WEBHOOK_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key file (with --tls-cert-file).
    #[arg(long, env = "WEBHOOK_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,

    /// Instead of files: a `kubernetes.io/tls` Secret, as NAMESPACE/NAME, watched through the API.
    #[arg(long, env = "WEBHOOK_TLS_SECRET")]
    pub tls_secret: Option<String>,

    /// How often mounted certificate files are checked for changes (Go duration).
    #[arg(long, env = "WEBHOOK_TLS_RELOAD_INTERVAL", default_value = "2s")]
    pub tls_reload_interval: String,

    /// Largest request body accepted, in bytes (an AdmissionReview carries the object twice on updates).
    /// From 65536 to 67108864 (64 MiB). Read as text and checked in [`Args::validate`].
    #[arg(long, env = "WEBHOOK_MAX_BODY_BYTES", default_value = "8388608")]
    pub max_body_bytes: String,

    /// Connections open at once (from 1 to 65536). At the cap a new connection takes the slot of
    /// the oldest one that never sent a request, else of the one idle longest; it is refused only
    /// when every connection is in a request.
    #[arg(long, env = "WEBHOOK_MAX_CONNECTIONS", default_value = "512")]
    pub max_connections: String,

    /// Admission requests answered at once (from 1 to 65536); more are answered 503 with
    /// `Retry-After: 1` at once instead of waiting.
    #[arg(long, env = "WEBHOOK_MAX_IN_FLIGHT", default_value = "64")]
    pub max_in_flight: String,

    /// Total declared size, in bytes, of the request bodies over 256 KiB (or of unknown length,
    /// counted at the body limit) answered at once; more are answered 503. At least
    /// --max-body-bytes, at most 1073741824 (1 GiB); empty means 33554432 (32 MiB) or
    /// --max-body-bytes if larger.
    #[arg(long, env = "WEBHOOK_MAX_IN_FLIGHT_BYTES", default_value = "")]
    pub max_in_flight_bytes: String,

    /// Time allowed for the TLS handshake, for a request's head (from its first byte) and for
    /// answering it (Go duration). A connection may wait longer for its first or next request
    /// (`server::KEEP_ALIVE_IDLE`).
    #[arg(long, env = "WEBHOOK_REQUEST_TIMEOUT", default_value = "10s")]
    pub request_timeout: String,

    /// How long in-flight requests may take to finish after SIGTERM (Go duration).
    #[arg(long, env = "WEBHOOK_SHUTDOWN_GRACE", default_value = "25s")]
    pub shutdown_grace: String,

    /// How long to keep accepting connections after SIGTERM, not ready, before draining (Go
    /// duration): the time the apiserver needs to drop this pod from the Service's endpoints.
    /// Without it, admissions routed to a pod scaled down are refused (failurePolicy Fail turns
    /// that into a failed create/update).
    #[arg(long, env = "WEBHOOK_SHUTDOWN_DELAY", default_value = "5s")]
    pub shutdown_delay: String,

    /// Admit NodeWrights whose `additionalTolerations` tolerate the control-plane taint (its key,
    /// or a key-less `Exists`), i.e. whose privileged package pods may run on control-plane nodes.
    /// `true` or `false` (as WEBHOOK_METRICS_AUTH); chart value `admission.allowControlPlaneNodes`.
    #[arg(
        long,
        env = "WEBHOOK_ALLOW_CONTROL_PLANE_NODES",
        default_value = "false"
    )]
    pub allow_control_plane_nodes: String,

    /// Image-reference globs (comma-separated; `*` does not cross `/`) a package `image` and
    /// `agentImageOverride` must match; empty allows any image. Chart value `admission.allowedImages`.
    #[arg(long, env = "WEBHOOK_ALLOWED_IMAGES", default_value = "")]
    pub allowed_images: String,

    /// Names of Secrets (comma-separated) no package may read through
    /// `env[].valueFrom.secretKeyRef`: the chart's own, in the namespace package pods run in.
    #[arg(long, env = "WEBHOOK_PROTECTED_SECRETS", default_value = "")]
    pub protected_secrets: String,

    /// Log format: `json` or `text`.
    #[arg(long, env = "LOG_FORMAT", default_value = "json")]
    pub log_format: String,

    /// Log filter, e.g. `info` or `nodewright_webhook=debug,info`.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

/// Smallest accepted `WEBHOOK_MAX_BODY_BYTES`: objects can be large.
pub const MIN_BODY_BYTES: usize = 64 * 1024;
/// Largest accepted `WEBHOOK_MAX_BODY_BYTES`. The kube-apiserver refuses requests over 3 MiB, so an
/// AdmissionReview (an UPDATE carries the object twice) stays well below this; a larger limit would
/// only let a hostile client make each request cost that much memory.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The environment variable of every flag, for the checks clap does not name them in.
pub fn env_vars() -> Vec<String> {
    use clap::CommandFactory;
    Args::command()
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect()
}

/// The variables of [`env_vars`] (and the shared operator defaults) whose value is not UTF-8: clap
/// would refuse them without saying which, so they are reported first, by name.
pub fn non_utf8_env() -> Vec<String> {
    let mut vars = env_vars();
    vars.extend(
        [
            nodewright_shared::defaults::ENV_JOB_STAGE_TIMEOUT,
            nodewright_shared::defaults::ENV_JOB_BACKOFF_LIMIT,
            nodewright_shared::defaults::ENV_JOB_TTL_SUCCEEDED,
            nodewright_shared::defaults::ENV_JOB_TTL_FAILED,
        ]
        .map(str::to_owned),
    );
    vars.into_iter()
        .filter_map(|var| {
            let value = std::env::var_os(&var)?;
            value.to_str().is_none().then(|| {
                format!(
                    "{var}={:?} is not valid UTF-8: set it to text",
                    value.to_string_lossy()
                )
            })
        })
        .collect()
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// Mounted PEM files, polled for changes.
    Files {
        /// Certificate chain.
        cert: PathBuf,
        /// Private key.
        key: PathBuf,
    },
    /// A `kubernetes.io/tls` Secret watched through the API.
    Secret {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (default; what log pipelines want).
    Json,
    /// Human-readable.
    Text,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// HTTPS listen address.
    pub listen: SocketAddr,
    /// Metrics listen address.
    pub metrics_listen: SocketAddr,
    /// Whether /metrics needs an authorised bearer token.
    pub metrics_auth: bool,
    /// Certificate source.
    pub cert_source: CertSource,
    /// File poll interval.
    pub tls_reload_interval: Duration,
    /// Body limit.
    pub max_body_bytes: usize,
    /// Connection cap.
    pub max_connections: usize,
    /// Admission requests answered at once.
    pub max_in_flight: usize,
    /// Declared bytes of large bodies answered at once.
    pub max_in_flight_bytes: usize,
    /// Header-read and request timeout.
    pub request_timeout: Duration,
    /// Drain time after SIGTERM.
    pub shutdown_grace: Duration,
    /// Time after SIGTERM during which connections are still accepted (readiness failing).
    pub shutdown_delay: Duration,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter.
    pub log_level: String,
    /// Operator defaults (shared with the operator), used for stageTimeout defaulting.
    pub defaults: OperatorDefaults,
    /// The administrator's admission restrictions.
    pub restrictions: Restrictions,
}

/// Everything wrong with the configuration.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  {}", .problems.join("\n  "))]
pub struct ConfigError {
    /// One line per problem.
    pub problems: Vec<String>,
}

impl Args {
    /// Validates the flags and reads the shared operator defaults from the environment.
    pub fn validate(self) -> Result<Config, ConfigError> {
        self.validate_with(OperatorDefaults::from_env())
    }

    /// As [`Args::validate`], with the defaults given (for tests). Every problem is collected, in
    /// flag order, before any is reported.
    pub fn validate_with(
        self,
        defaults: Result<OperatorDefaults, DefaultsError>,
    ) -> Result<Config, ConfigError> {
        let mut p = Problems::default();
        let listen = p.addr("listen", "WEBHOOK_LISTEN", &self.listen);
        let metrics_listen = p.addr(
            "metrics-listen",
            "WEBHOOK_METRICS_LISTEN",
            &self.metrics_listen,
        );
        let cert_source = self.cert_source(&mut p);
        let tls_reload_interval = p.duration(
            "tls-reload-interval",
            "WEBHOOK_TLS_RELOAD_INTERVAL",
            &self.tls_reload_interval,
            Duration::from_millis(100),
        );
        let request_timeout = p.duration(
            "request-timeout",
            "WEBHOOK_REQUEST_TIMEOUT",
            &self.request_timeout,
            Duration::from_millis(100),
        );
        let shutdown_grace = p.duration(
            "shutdown-grace",
            "WEBHOOK_SHUTDOWN_GRACE",
            &self.shutdown_grace,
            Duration::ZERO,
        );
        let shutdown_delay = p.duration(
            "shutdown-delay",
            "WEBHOOK_SHUTDOWN_DELAY",
            &self.shutdown_delay,
            Duration::ZERO,
        );

        let (max_body_bytes, max_connections, max_in_flight, max_in_flight_bytes) =
            self.load_limits(&mut p);
        let metrics_auth = p.boolean("metrics-auth", "WEBHOOK_METRICS_AUTH", &self.metrics_auth);
        let allow_control_plane_nodes = p.boolean(
            "allow-control-plane-nodes",
            "WEBHOOK_ALLOW_CONTROL_PLANE_NODES",
            &self.allow_control_plane_nodes,
        );
        let (allowed_images, protected_secrets) = self.restriction_lists(&mut p);
        let log_format = match self.log_format.as_str() {
            "json" => Some(LogFormat::Json),
            "text" => Some(LogFormat::Text),
            other => {
                p.0.push(format!(
                    "--log-format (LOG_FORMAT)={other:?} must be json or text"
                ));
                None
            }
        };
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log_level) {
            p.0.push(format!(
                "--log-level (LOG_LEVEL)={:?} is not a log filter ({e}): use e.g. info, debug or nodewright_webhook=debug",
                self.log_level
            ));
        }
        let defaults = match defaults {
            Ok(d) => Some(d),
            Err(e) => {
                p.0.extend(e.problems.iter().map(ToString::to_string));
                None
            }
        };

        match (
            listen,
            metrics_listen,
            cert_source,
            tls_reload_interval,
            request_timeout,
            shutdown_grace,
            shutdown_delay,
            log_format,
            defaults,
            max_body_bytes,
            metrics_auth,
            allow_control_plane_nodes,
        ) {
            (
                Some(listen),
                Some(metrics_listen),
                Some(cert_source),
                Some(tls_reload_interval),
                Some(request_timeout),
                Some(shutdown_grace),
                Some(shutdown_delay),
                Some(log_format),
                Some(defaults),
                Some(max_body_bytes),
                Some(metrics_auth),
                Some(allow_control_plane_nodes),
            ) if p.0.is_empty() => Ok(Config {
                listen,
                metrics_listen,
                metrics_auth,
                cert_source,
                tls_reload_interval,
                max_body_bytes,
                max_connections,
                max_in_flight,
                max_in_flight_bytes,
                request_timeout,
                shutdown_grace,
                shutdown_delay,
                log_format,
                log_level: self.log_level,
                defaults,
                restrictions: Restrictions {
                    allow_control_plane_nodes,
                    allowed_images,
                    protected_secrets,
                },
            }),
            _ => Err(ConfigError { problems: p.0 }),
        }
    }
}

impl Args {
    /// Where the serving certificate comes from: files or a Secret, exactly one of them.
    fn cert_source(&self, p: &mut Problems) -> Option<CertSource> {
        match (&self.tls_cert_file, &self.tls_key_file, &self.tls_secret) {
            (Some(cert), Some(key), None) => Some(CertSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None, Some(secret)) => match secret.split_once('/') {
                Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                    Some(CertSource::Secret {
                        namespace: ns.to_owned(),
                        name: name.to_owned(),
                    })
                }
                _ => {
                    p.0.push(format!(
                        "--tls-secret (WEBHOOK_TLS_SECRET)={secret:?} must be NAMESPACE/NAME, e.g. nodewright/webhook-tls"
                    ));
                    None
                }
            },
            (None, None, None) => {
                p.0.push(
                    "no certificate source: set --tls-cert-file (WEBHOOK_TLS_CERT_FILE) and --tls-key-file (WEBHOOK_TLS_KEY_FILE), or --tls-secret (WEBHOOK_TLS_SECRET) NAMESPACE/NAME"
                        .to_owned(),
                );
                None
            }
            (Some(_), None, None) | (None, Some(_), None) => {
                p.0.push(
                    "--tls-cert-file (WEBHOOK_TLS_CERT_FILE) and --tls-key-file (WEBHOOK_TLS_KEY_FILE) must be given together"
                        .to_owned(),
                );
                None
            }
            _ => {
                p.0.push(
                    "use either certificate files (--tls-cert-file/WEBHOOK_TLS_CERT_FILE and --tls-key-file/WEBHOOK_TLS_KEY_FILE) or --tls-secret (WEBHOOK_TLS_SECRET), not both"
                        .to_owned(),
                );
                None
            }
        }
    }

    /// `max_body_bytes` (`None` when bad), `max_connections`, `max_in_flight` and
    /// `max_in_flight_bytes` (their defaults when bad), and that a body at the limit fits in flight.
    fn load_limits(&self, p: &mut Problems) -> (Option<usize>, usize, usize, usize) {
        let max_body_bytes = match self.max_body_bytes.trim().parse::<usize>() {
            Ok(n) if (MIN_BODY_BYTES..=MAX_BODY_BYTES).contains(&n) => Some(n),
            _ => {
                p.0.push(format!(
                    "--max-body-bytes (WEBHOOK_MAX_BODY_BYTES)={:?} must be a whole number of bytes from {MIN_BODY_BYTES} (objects can be large) to {MAX_BODY_BYTES} (the apiserver sends at most 3 MiB per object), e.g. 8388608 (default)",
                    self.max_body_bytes
                ));
                None
            }
        };
        let max_connections = p.count(
            "max-connections",
            "WEBHOOK_MAX_CONNECTIONS",
            &self.max_connections,
            1..=65_536,
            crate::server::DEFAULT_MAX_CONNECTIONS,
        );
        let max_in_flight = p.count(
            "max-in-flight",
            "WEBHOOK_MAX_IN_FLIGHT",
            &self.max_in_flight,
            1..=65_536,
            crate::routes::DEFAULT_MAX_IN_FLIGHT,
        );
        let max_in_flight_bytes = if self.max_in_flight_bytes.trim().is_empty() {
            crate::routes::DEFAULT_MAX_IN_FLIGHT_BYTES.max(max_body_bytes.unwrap_or(0))
        } else {
            p.count(
                "max-in-flight-bytes",
                "WEBHOOK_MAX_IN_FLIGHT_BYTES",
                &self.max_in_flight_bytes,
                MIN_BODY_BYTES..=1 << 30,
                crate::routes::DEFAULT_MAX_IN_FLIGHT_BYTES,
            )
        };
        if let Some(body) = max_body_bytes
            && max_in_flight_bytes < body
        {
            p.0.push(format!(
                "--max-in-flight-bytes (WEBHOOK_MAX_IN_FLIGHT_BYTES)={max_in_flight_bytes} is below --max-body-bytes (WEBHOOK_MAX_BODY_BYTES)={body}: a body at the limit would always be refused; raise it to at least {body}"
            ));
        }
        (
            max_body_bytes,
            max_connections,
            max_in_flight,
            max_in_flight_bytes,
        )
    }

    /// The admission restrictions' lists: image globs that must parse and hold no whitespace, and
    /// Secret names.
    fn restriction_lists(&self, p: &mut Problems) -> (Vec<String>, Vec<String>) {
        let allowed_images = list(&self.allowed_images);
        for pattern in &allowed_images {
            if let Err(e) = nodewright_shared::glob::check(pattern) {
                p.0.push(format!(
                    "--allowed-images (WEBHOOK_ALLOWED_IMAGES) pattern {pattern:?} is malformed ({e}): write image-reference globs such as ghcr.io/acme/* ('*' and '?' within one path component, [a-z] classes), separated by commas"
                ));
            }
            if pattern.chars().any(char::is_whitespace) {
                p.0.push(format!(
                    "--allowed-images (WEBHOOK_ALLOWED_IMAGES) pattern {pattern:?} contains whitespace: image references have none"
                ));
            }
        }
        let protected_secrets = list(&self.protected_secrets);
        for name in &protected_secrets {
            if !is_dns_subdomain(name) {
                p.0.push(format!(
                    "--protected-secrets (WEBHOOK_PROTECTED_SECRETS) name {name:?} is not a Secret name: use lowercase letters, digits, '-' and '.', separated by commas"
                ));
            }
        }
        (allowed_images, protected_secrets)
    }
}

/// The problems found so far, in flag order; each reader records one and returns `None` (or the
/// default) on a bad value, so every bad flag is reported at once.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    /// A socket address (`HOST:PORT`).
    fn addr(&mut self, flag: &str, env: &str, value: &str) -> Option<SocketAddr> {
        match value.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.0.push(format!(
                    "--{flag} ({env})={value:?} is not a socket address: use HOST:PORT, e.g. 0.0.0.0:9443"
                ));
                None
            }
        }
    }

    /// A Go duration of at least `min`.
    fn duration(&mut self, flag: &str, env: &str, value: &str, min: Duration) -> Option<Duration> {
        match GoDuration::parse(value).ok().and_then(GoDuration::to_std) {
            Some(d) if d >= min => Some(d),
            _ => {
                self.0.push(format!(
                    "--{flag} ({env})={value:?} must be a Go duration of at least {}",
                    GoDuration::from_nanos(min.as_nanos() as i64)
                ));
                None
            }
        }
    }

    /// A whole number in `range`; `default` (and a problem) when it is not.
    fn count(
        &mut self,
        flag: &str,
        env: &str,
        value: &str,
        range: std::ops::RangeInclusive<usize>,
        default: usize,
    ) -> usize {
        match value.trim().parse::<usize>() {
            Ok(n) if range.contains(&n) => n,
            _ => {
                self.0.push(format!(
                        "--{flag} ({env})={value:?} must be a whole number from {} to {} (default {default})",
                        range.start(),
                        range.end()
                    ));
                default
            }
        }
    }

    /// A boolean as Go's `strconv.ParseBool` reads it.
    fn boolean(&mut self, flag: &str, env: &str, value: &str) -> Option<bool> {
        match parse_bool(value) {
            Some(b) => Some(b),
            None => {
                self.0.push(format!(
                    "--{flag} ({env})={:?} must be true or false (also 1/0, t/f, TRUE/FALSE; default false)",
                    value.trim()
                ));
                None
            }
        }
    }
}

/// A boolean as Go's `strconv.ParseBool` reads it (the operator's flags use the same).
fn parse_bool(value: &str) -> Option<bool> {
    match value.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// A comma-separated list, items trimmed, empty items dropped (so `""` is the empty list).
fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Whether `name` is a DNS subdomain (RFC 1123), what a Secret's name must be.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec!["nodewright-webhook"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).expect("flags parse")
    }

    #[test]
    fn file_source_with_defaults_is_valid() {
        let cfg = args(&["--tls-cert-file", "/c", "--tls-key-file", "/k"])
            .validate_with(Ok(OperatorDefaults::default()))
            .expect("valid");
        assert_eq!(
            cfg.cert_source,
            CertSource::Files {
                cert: "/c".into(),
                key: "/k".into()
            }
        );
        assert_eq!(cfg.listen, "0.0.0.0:9443".parse().expect("addr"));
        assert_eq!(cfg.request_timeout, Duration::from_secs(10));
    }

    #[test]
    fn secret_source_is_namespace_slash_name() {
        let cfg = args(&["--tls-secret", "nodewright/webhook-tls"])
            .validate_with(Ok(OperatorDefaults::default()))
            .expect("valid");
        assert_eq!(
            cfg.cert_source,
            CertSource::Secret {
                namespace: "nodewright".into(),
                name: "webhook-tls".into()
            }
        );
        let err = args(&["--tls-secret", "webhook-tls"])
            .validate_with(Ok(OperatorDefaults::default()))
            .expect_err("no namespace");
        assert!(err.to_string().contains("NAMESPACE/NAME"), "{err}");
    }

    #[test]
    fn every_problem_is_reported_with_flag_and_value() {
        let err = args(&[
            "--listen",
            "nowhere",
            "--tls-cert-file",
            "/c",
            "--request-timeout",
            "soon",
            "--log-format",
            "xml",
            "--max-body-bytes",
            "10",
        ])
        .validate_with(OperatorDefaults::from_lookup(|k| {
            (k == "JOB_BACKOFF_LIMIT").then(|| "-2".to_owned())
        }))
        .expect_err("invalid");
        let text = err.to_string();
        for needle in [
            "--listen (WEBHOOK_LISTEN)=\"nowhere\"",
            "--tls-cert-file (WEBHOOK_TLS_CERT_FILE) and --tls-key-file (WEBHOOK_TLS_KEY_FILE) must be given together",
            "--request-timeout (WEBHOOK_REQUEST_TIMEOUT)=\"soon\"",
            "--log-format (LOG_FORMAT)=\"xml\"",
            "--max-body-bytes",
            "JOB_BACKOFF_LIMIT=\"-2\"",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
        assert_eq!(err.problems.len(), 6, "{text}");
    }

    #[test]
    fn a_certificate_source_is_required() {
        let err = args(&[])
            .validate_with(Ok(OperatorDefaults::default()))
            .expect_err("no certs");
        assert!(err.to_string().contains("no certificate source"), "{err}");
    }

    #[test]
    fn body_limit_and_metrics_auth_are_checked_naming_their_variables() {
        let base = ["--tls-cert-file", "/c", "--tls-key-file", "/k"];
        let check = |extra: &[&str]| {
            let mut all = base.to_vec();
            all.extend_from_slice(extra);
            args(&all).validate_with(Ok(OperatorDefaults::default()))
        };
        for bad in ["8MiB", "65535", "67108865", "1099511627776"] {
            let err = check(&["--max-body-bytes", bad]).expect_err(bad);
            assert!(
                err.to_string().contains(&format!(
                    "--max-body-bytes (WEBHOOK_MAX_BODY_BYTES)={bad:?}"
                )),
                "{err}"
            );
        }
        for good in ["65536", "67108864"] {
            let cfg = check(&["--max-body-bytes", good]).expect(good);
            assert_eq!(cfg.max_body_bytes.to_string(), good);
        }
        let err = check(&["--metrics-auth", "maybe"]).expect_err("maybe");
        assert!(
            err.to_string()
                .contains("--metrics-auth (WEBHOOK_METRICS_AUTH)=\"maybe\""),
            "{err}"
        );
        assert!(
            check(&["--metrics-auth", "true"])
                .expect("true")
                .metrics_auth
        );
        assert!(!check(&[]).expect("default").metrics_auth);
    }

    #[test]
    fn admission_restrictions_are_read_and_checked_naming_their_variables() {
        let base = ["--tls-cert-file", "/c", "--tls-key-file", "/k"];
        let check = |extra: &[&str]| {
            let mut all = base.to_vec();
            all.extend_from_slice(extra);
            args(&all).validate_with(Ok(OperatorDefaults::default()))
        };
        assert_eq!(
            check(&[]).expect("defaults").restrictions,
            Restrictions::default()
        );
        let cfg = check(&[
            "--allow-control-plane-nodes",
            "true",
            "--allowed-images",
            " ghcr.io/acme/*, registry.example.com:5000/* ,",
            "--protected-secrets",
            "nw-nodewright-webhook-ca,nw-nodewright-webhook-tls",
        ])
        .expect("valid");
        assert_eq!(
            cfg.restrictions,
            Restrictions {
                allow_control_plane_nodes: true,
                allowed_images: vec![
                    "ghcr.io/acme/*".to_owned(),
                    "registry.example.com:5000/*".to_owned()
                ],
                protected_secrets: vec![
                    "nw-nodewright-webhook-ca".to_owned(),
                    "nw-nodewright-webhook-tls".to_owned()
                ],
            }
        );
        for (flag, value, needle) in [
            (
                "--allow-control-plane-nodes",
                "yes",
                "--allow-control-plane-nodes (WEBHOOK_ALLOW_CONTROL_PLANE_NODES)=\"yes\"",
            ),
            (
                "--allowed-images",
                "ghcr.io/acme/*,ghcr.io/[",
                "--allowed-images (WEBHOOK_ALLOWED_IMAGES) pattern \"ghcr.io/[\" is malformed",
            ),
            (
                "--protected-secrets",
                "Not_A_Name",
                "--protected-secrets (WEBHOOK_PROTECTED_SECRETS) name \"Not_A_Name\"",
            ),
        ] {
            let err = check(&[flag, value]).expect_err(value);
            assert!(err.to_string().contains(needle), "{err}");
        }
    }

    #[test]
    fn load_limits_are_read_and_checked_naming_their_variables() {
        let base = ["--tls-cert-file", "/c", "--tls-key-file", "/k"];
        let check = |extra: &[&str]| {
            let mut all = base.to_vec();
            all.extend_from_slice(extra);
            args(&all).validate_with(Ok(OperatorDefaults::default()))
        };
        let cfg = check(&[]).expect("defaults");
        assert_eq!(
            (
                cfg.max_connections,
                cfg.max_in_flight,
                cfg.max_in_flight_bytes
            ),
            (512, 64, 32 << 20)
        );
        let cfg = check(&["--max-body-bytes", "67108864"]).expect("large body limit");
        assert_eq!(cfg.max_in_flight_bytes, 64 << 20, "raised to one body");
        let cfg = check(&[
            "--max-connections",
            "8",
            "--max-in-flight",
            "2",
            "--max-in-flight-bytes",
            "16777216",
        ])
        .expect("set");
        assert_eq!(
            (
                cfg.max_connections,
                cfg.max_in_flight,
                cfg.max_in_flight_bytes
            ),
            (8, 2, 16 << 20)
        );
        for (flag, value, needle) in [
            (
                "--max-connections",
                "0",
                "--max-connections (WEBHOOK_MAX_CONNECTIONS)=\"0\" must be a whole number from 1",
            ),
            (
                "--max-in-flight",
                "many",
                "--max-in-flight (WEBHOOK_MAX_IN_FLIGHT)=\"many\"",
            ),
            (
                "--max-in-flight-bytes",
                "1048576",
                "--max-in-flight-bytes (WEBHOOK_MAX_IN_FLIGHT_BYTES)=1048576 is below --max-body-bytes (WEBHOOK_MAX_BODY_BYTES)=8388608",
            ),
        ] {
            let err = check(&[flag, value]).expect_err(value);
            assert!(err.to_string().contains(needle), "{err}");
        }
    }

    #[test]
    fn every_flag_has_its_variable() {
        let vars = env_vars();
        assert_eq!(vars.len(), 19, "{vars:?}");
        assert!(
            vars.iter()
                .all(|v| v.starts_with("WEBHOOK_") || v.starts_with("LOG_"))
        );
    }
}
