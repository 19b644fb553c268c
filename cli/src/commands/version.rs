//! `version`: the plugin's version and the operator's, read from its Deployment (the chart's
//! `app.kubernetes.io/version` label, else its image tag).

use serde::Serialize;

use crate::args::VersionArgs;
use crate::cluster;
use crate::context::Ctx;
use crate::error::Result;
use crate::output::{Render, print};

/// The versions.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Versions {
    /// This plugin.
    client: String,
    /// The operator (absent with --client-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    operator: Option<OperatorVersion>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct OperatorVersion {
    /// Its version, when its Deployment says.
    version: Option<String>,
    /// `namespace/name` of its Deployment (absent: none found).
    deployment: Option<String>,
    /// Its image.
    image: Option<String>,
    /// Why there is no version.
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

impl Render for Versions {
    fn table(&self, wide: bool) -> String {
        let mut out = format!("kubectl-nodewright: {}\n", self.client);
        if let Some(o) = &self.operator {
            let version = o.version.as_deref().unwrap_or("unknown");
            out.push_str(&format!("NodeWright operator: {version}"));
            match (&o.deployment, &o.note) {
                (Some(d), _) if wide => out.push_str(&format!(
                    " (Deployment {d}, image {})",
                    o.image.as_deref().unwrap_or("-")
                )),
                (_, Some(note)) => out.push_str(&format!(" ({note})")),
                _ => {}
            }
            out.push('\n');
        }
        out
    }
}

/// Runs `version`.
pub async fn run(ctx: &Ctx, args: &VersionArgs) -> Result<()> {
    let mut versions = Versions {
        client: env!("CARGO_PKG_VERSION").to_owned(),
        operator: None,
    };
    if !args.client_only {
        versions.operator = Some(match cluster::operator(ctx).await? {
            Some(o) => OperatorVersion {
                note: o
                    .version
                    .is_none()
                    .then(|| format!("Deployment {} names no version", o.deployment)),
                version: o.version,
                deployment: Some(o.deployment),
                image: o.image,
            },
            None => OperatorVersion {
                version: None,
                deployment: None,
                image: None,
                note: Some(format!(
                    "no operator Deployment in namespace {}; name its namespace with -n",
                    ctx.namespace()
                )),
            },
        });
    }
    print(ctx.format(), &versions)
}
