//! Reading from the cluster: the objects commands work on, each failure saying what was read,
//! and the operator's Deployment (its version, and the configuration it runs with).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use nodewright_core::jobs::{DEFAULT_RUNTIME_REQUIRED_TAINT, RuntimeTaint};
use nodewright_core::rollout::disruption::MaxDisrupted;
use nodewright_shared::api::{DeploymentPolicy, NodeWright};
use nodewright_shared::defaults::OperatorDefaults;
use nodewright_shared::keys;
use serde::de::DeserializeOwned;

use crate::context::Ctx;
pub use crate::context::Operator;
use crate::error::{CliError, Result};

/// Lists the objects of `api` matching `labels`; `what` names them in an error.
async fn list_in<K>(ctx: &Ctx, api: Api<K>, labels: Option<&str>, what: String) -> Result<Vec<K>>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default();
    if let Some(l) = labels {
        params = params.labels(l);
    }
    Ok(api.list(&params).await.map_err(ctx.api_error(what))?.items)
}

/// Lists the objects of a namespaced kind in `namespace` matching `labels`.
async fn list<K>(ctx: &Ctx, namespace: &str, labels: Option<&str>) -> Result<Vec<K>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(ctx.client().await?.clone(), namespace);
    let what = format!(
        "listing {} in namespace {namespace}",
        K::plural(&K::DynamicType::default())
    );
    list_in(ctx, api, labels, what).await
}

/// Lists a cluster-scoped kind.
async fn list_cluster<K>(ctx: &Ctx) -> Result<Vec<K>>
where
    K: Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(ctx.client().await?.clone());
    let what = format!("listing {}", K::plural(&K::DynamicType::default()));
    list_in(ctx, api, None, what).await
}

/// The NodeWright `name`; a clear error when there is none.
pub async fn nodewright(ctx: &Ctx, name: &str) -> Result<NodeWright> {
    let api: Api<NodeWright> = Api::all(ctx.client().await?.clone());
    api.get_opt(name)
        .await
        .map_err(ctx.api_error(format!("reading NodeWright {name}")))?
        .ok_or_else(|| CliError::NodeWrightNotFound(name.to_owned()))
}

/// The NodeWright `name`, if it exists.
pub async fn nodewright_opt(ctx: &Ctx, name: &str) -> Result<Option<NodeWright>> {
    let api: Api<NodeWright> = Api::all(ctx.client().await?.clone());
    api.get_opt(name)
        .await
        .map_err(ctx.api_error(format!("reading NodeWright {name}")))
}

/// Every NodeWright.
pub async fn nodewrights(ctx: &Ctx) -> Result<Vec<NodeWright>> {
    list_cluster(ctx).await
}

/// Every DeploymentPolicy.
pub async fn policies(ctx: &Ctx) -> Result<Vec<DeploymentPolicy>> {
    list_cluster(ctx).await
}

/// Every node, sorted by name.
pub async fn nodes(ctx: &Ctx) -> Result<Vec<Node>> {
    let mut nodes: Vec<Node> = list_cluster(ctx).await?;
    nodes.sort_by_key(|n| n.name_any());
    Ok(nodes)
}

/// The namespace of the operator's Jobs, their pods and ConfigMaps: `--package-namespace`, else the
/// operator Deployment's `PACKAGE_NAMESPACE` (the chart's package namespace), else the operator's
/// namespace (an operator run without one keeps its Jobs beside it).
pub async fn package_namespace(ctx: &Ctx) -> Result<String> {
    if let Some(given) = &ctx.global.package_namespace {
        return Ok(given.clone());
    }
    Ok(operator(ctx)
        .await?
        .and_then(|o| o.env.get("PACKAGE_NAMESPACE").map(|v| v.trim().to_owned()))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| ctx.namespace().to_owned()))
}

/// The Jobs in the package namespace (of the NodeWright `nodewright` when given).
pub async fn jobs(ctx: &Ctx, nodewright: Option<&str>) -> Result<Vec<Job>> {
    let selector = nodewright.map(|n| format!("{}={n}", keys::NAME_LABEL));
    list(ctx, &package_namespace(ctx).await?, selector.as_deref()).await
}

/// The pods in the package namespace of the NodeWright `nodewright`.
pub async fn pods(ctx: &Ctx, nodewright: &str) -> Result<Vec<Pod>> {
    let selector = format!("{}={nodewright}", keys::NAME_LABEL);
    list(ctx, &package_namespace(ctx).await?, Some(&selector)).await
}

/// The ConfigMaps in the package namespace of the NodeWright `nodewright`.
pub async fn configmaps(ctx: &Ctx, nodewright: &str) -> Result<Vec<ConfigMap>> {
    let selector = format!("{}={nodewright}", keys::NAME_LABEL);
    list(ctx, &package_namespace(ctx).await?, Some(&selector)).await
}

/// Events about the object `name` of `kind`, oldest first (cluster-scoped objects' Events are in
/// `default`, as the operator records them).
pub async fn events(ctx: &Ctx, kind: &str, name: &str) -> Result<Vec<Event>> {
    let api: Api<Event> = Api::all(ctx.client().await?.clone());
    let params = ListParams::default().fields(&format!(
        "involvedObject.kind={kind},involvedObject.name={name}"
    ));
    let mut events = api
        .list(&params)
        .await
        .map_err(ctx.api_error(format!("listing the Events of {kind} {name}")))?
        .items;
    events.sort_by_key(last_seen);
    Ok(events)
}

/// When an Event was last seen.
pub fn last_seen(event: &Event) -> Option<String> {
    event
        .last_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| event.event_time.as_ref().map(|t| t.0.to_string()))
        .or_else(|| {
            event
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
        })
}

/// Whether a Deployment is NodeWright's operator: the chart's labels (part-of nodewright, component
/// operator), or, for other installations, an image naming the operator.
fn is_operator(d: &Deployment) -> bool {
    let labels = d.labels();
    if labels.get("app.kubernetes.io/part-of").map(String::as_str) == Some("nodewright") {
        return labels
            .get("app.kubernetes.io/component")
            .map(String::as_str)
            == Some("operator");
    }
    operator_container(d)
        .and_then(|c| c.image.as_deref())
        .is_some_and(|i| i.contains("nodewright-operator") || i.contains("nodewright/operator"))
}

fn operator_container(d: &Deployment) -> Option<&k8s_openapi::api::core::v1::Container> {
    let containers = &d.spec.as_ref()?.template.spec.as_ref()?.containers;
    containers
        .iter()
        .find(|c| c.name == "operator")
        .or_else(|| containers.first())
}

/// The tag of an image reference (`latest` and digests are no version).
fn image_tag(image: &str) -> Option<String> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.rsplit_once(':')
        .map(|(_, tag)| tag.to_owned())
        .filter(|t| t != "latest")
}

/// Finds the operator's Deployment in the operator's namespace (`None`: not there), once per
/// command.
pub async fn operator(ctx: &Ctx) -> Result<Option<Operator>> {
    Ok(ctx
        .operator
        .get_or_try_init(|| find_operator(ctx))
        .await?
        .clone())
}

async fn find_operator(ctx: &Ctx) -> Result<Option<Operator>> {
    let deployments: Vec<Deployment> = list(ctx, ctx.namespace(), None).await?;
    let Some(d) = deployments.iter().find(|d| is_operator(d)) else {
        return Ok(None);
    };
    let container = operator_container(d);
    let image = container.and_then(|c| c.image.clone());
    let version = d
        .labels()
        .get("app.kubernetes.io/version")
        .cloned()
        .or_else(|| image.as_deref().and_then(image_tag));
    let mut env = BTreeMap::new();
    if let Some(c) = container {
        for source in c.env_from.iter().flatten() {
            if let Some(name) = source.config_map_ref.as_ref().map(|r| r.name.clone()) {
                let api: Api<ConfigMap> =
                    Api::namespaced(ctx.client().await?.clone(), ctx.namespace());
                if let Some(cm) = api
                    .get_opt(&name)
                    .await
                    .map_err(ctx.api_error(format!("reading ConfigMap {name}")))?
                {
                    let prefix = source.prefix.clone().unwrap_or_default();
                    for (k, v) in cm.data.unwrap_or_default() {
                        env.insert(format!("{prefix}{k}"), v);
                    }
                }
            }
        }
        for var in c.env.iter().flatten() {
            if let Some(value) = &var.value {
                env.insert(var.name.clone(), value.clone());
            }
        }
    }
    Ok(Some(Operator {
        deployment: format!("{}/{}", ctx.namespace(), d.name_any()),
        image,
        version,
        env,
    }))
}

/// The operator settings a preview needs.
pub struct OperatorSettings {
    /// The defaults it fills into NodeWrights.
    pub defaults: OperatorDefaults,
    /// Its runtime-required taint.
    pub runtime_taint: RuntimeTaint,
    /// Its cluster-wide disruption cap (`MAX_DISRUPTED_NODES`), if it has one.
    pub max_disrupted: Option<MaxDisrupted>,
    /// Where they came from.
    pub source: String,
}

/// The operator settings a preview needs, from its Deployment's environment when it is found
/// (else the defaults), and where they came from.
pub async fn operator_settings(ctx: &Ctx) -> Result<OperatorSettings> {
    let found = operator(ctx).await?;
    let env = found.as_ref().map(|o| o.env.clone()).unwrap_or_default();
    let defaults = OperatorDefaults::from_lookup(|var| env.get(var).cloned()).map_err(|e| {
        CliError::Invalid(format!("the operator's configuration is not valid: {e}"))
    })?;
    let taint_text = env
        .get("RUNTIME_REQUIRED_TAINT")
        .cloned()
        .unwrap_or_else(|| DEFAULT_RUNTIME_REQUIRED_TAINT.to_owned());
    let taint = RuntimeTaint::parse(&taint_text).map_err(|e| {
        CliError::Invalid(format!(
            "the operator's RUNTIME_REQUIRED_TAINT is not valid: {e}"
        ))
    })?;
    let max_disrupted = match &ctx.global.max_disrupted_nodes {
        Some(given) => Some(*given),
        None => env
            .get("MAX_DISRUPTED_NODES")
            .filter(|v| !v.trim().is_empty())
            .map(|v| MaxDisrupted::parse(v))
            .transpose()
            .map_err(|e| {
                CliError::Invalid(format!(
                    "the operator's MAX_DISRUPTED_NODES is not valid: {e}"
                ))
            })?,
    };
    let source = found.map_or_else(
        || {
            format!(
                "operator defaults (no operator Deployment found in namespace {})",
                ctx.namespace()
            )
        },
        |o| format!("the configuration of {}", o.deployment),
    );
    Ok(OperatorSettings {
        defaults,
        runtime_taint: taint,
        max_disrupted,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags_ignore_registry_ports_digests_and_latest() {
        assert_eq!(image_tag("ghcr.io/x/op:0.2.0").as_deref(), Some("0.2.0"));
        assert_eq!(image_tag("registry:5000/x/op").as_deref(), None);
        assert_eq!(image_tag("registry:5000/x/op:1.0").as_deref(), Some("1.0"));
        assert_eq!(image_tag("x/op:latest"), None);
        assert_eq!(image_tag("x/op@sha256:abc"), None);
    }
}
