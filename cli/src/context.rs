//! What every command works with: the global flags and, built on first use (`completion` and
//! `version --client-only` never contact a cluster), the API client.

use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use nodewright_shared::duration::GoDuration;
use tokio::sync::OnceCell;

use crate::args::{Format, Global};
use crate::error::{CliError, Result, chain};

/// The longest wait for a TCP/TLS connection, whatever `--request-timeout` says.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The operator's Deployment as found in its namespace (by `cluster::operator`). Defined here, with
/// the context that caches it, so the context does not depend on the cluster reads that use it.
#[derive(Debug, Clone)]
pub struct Operator {
    /// `namespace/name`.
    pub deployment: String,
    /// Its image.
    pub image: Option<String>,
    /// Its version: the `app.kubernetes.io/version` label, else the image tag.
    pub version: Option<String>,
    /// The operator container's environment (values and its ConfigMaps).
    pub env: std::collections::BTreeMap<String, String>,
}

/// A command's context.
pub struct Ctx {
    /// The global flags.
    pub global: Global,
    timeout: Duration,
    client: OnceCell<(kube::Client, String)>,
    /// The operator's Deployment as found (once: a preview and the Job lookups both need it).
    pub(crate) operator: OnceCell<Option<Operator>>,
}

impl Ctx {
    /// Checks the global flags (a bad `--request-timeout` is a usage error).
    pub fn new(global: Global) -> Result<Self> {
        let timeout = GoDuration::parse(&global.request_timeout)
            .ok()
            .and_then(GoDuration::to_std)
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "--request-timeout {:?}: expected a positive Go duration such as 30s or 1m",
                    global.request_timeout
                ))
            })?;
        Ok(Ctx {
            global,
            timeout,
            client: OnceCell::new(),
            operator: OnceCell::new(),
        })
    }

    /// The output format.
    pub fn format(&self) -> Format {
        self.global.output
    }

    /// `--dry-run`.
    pub fn dry_run(&self) -> bool {
        self.global.dry_run
    }

    /// The operator's namespace.
    pub fn namespace(&self) -> &str {
        &self.global.namespace
    }

    /// The API client (built once).
    pub async fn client(&self) -> Result<&kube::Client> {
        let (client, _) = self
            .client
            .get_or_try_init(|| async { self.build().await })
            .await?;
        Ok(client)
    }

    /// The API server's URL ("" before the client is built).
    pub fn server(&self) -> &str {
        self.client.get().map_or("", |(_, s)| s.as_str())
    }

    async fn build(&self) -> Result<(kube::Client, String)> {
        let options = KubeConfigOptions {
            context: self.global.context.clone(),
            cluster: self.global.cluster.clone(),
            user: self.global.user.clone(),
        };
        let path = self
            .global
            .kubeconfig
            .as_ref()
            .map(|p| p.display().to_string());
        let kubeconfig_error = |e: &dyn std::error::Error| CliError::Kubeconfig {
            path: path.clone(),
            reason: chain(e),
        };
        crate::connection::check(&self.global)?;
        let loaded = match &self.global.kubeconfig {
            Some(file) => match Kubeconfig::read_from(file) {
                Ok(kubeconfig) => kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| kubeconfig_error(&e)),
                Err(e) => Err(kubeconfig_error(&e)),
            },
            None => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| kubeconfig_error(&e)),
        };
        // `--server` works without a kubeconfig, as kubectl's does.
        let mut config = match loaded {
            Ok(config) => config,
            Err(e) => crate::connection::bare(&self.global)?.ok_or(e)?,
        };
        crate::connection::apply(&self.global, &mut config)?;
        config.connect_timeout = Some(self.timeout.min(MAX_CONNECT_TIMEOUT));
        config.read_timeout = Some(self.timeout);
        config.write_timeout = Some(self.timeout);
        let server = config.cluster_url.to_string();
        tracing::debug!(%server, context = ?self.global.context, timeout = ?self.timeout, "using the API server");
        let client = kube::Client::try_from(config).map_err(|e| CliError::Kubeconfig {
            path: path.clone(),
            reason: chain(&e),
        })?;
        Ok((client, server.trim_end_matches('/').to_owned()))
    }

    /// Turns an API error into a [`CliError`] saying what was being done.
    pub fn api_error(&self, what: impl Into<String>) -> impl FnOnce(kube::Error) -> CliError + '_ {
        let what = what.into();
        move |error| match error {
            kube::Error::Api(status) => CliError::Api {
                what,
                message: status.message.clone(),
                code: status.code,
                reason: status.reason.clone(),
            },
            other => CliError::Unreachable {
                server: self.server().to_owned(),
                what,
                reason: chain(&other),
            },
        }
    }
}
