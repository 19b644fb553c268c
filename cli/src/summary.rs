//! A NodeWright's standing on one node, read with the operator's own node-state code: its records
//! (`nodeState_<name>`, parsed by `nodewright-shared`), the status the operator wrote
//! (`status_<name>`), and its packages done by the operator's stage machine's rule.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nodewright_core::node::cordon::{holds_cordon, is_unschedulable};
use nodewright_core::node::runtime_cordon;
use nodewright_core::node::state::parse_state;
use nodewright_core::rollout::stages::package_done;
use nodewright_shared::api::{NodeWright, Status};
use nodewright_shared::keys;
use nodewright_shared::node_state::{NodeState, PackageStatus, State};
use serde::Serialize;

/// One node for one NodeWright.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    /// Node.
    pub node_name: String,
    /// NodeWright.
    pub nodewright: String,
    /// The node's status as the operator recorded it (`malformed` when its state is unreadable).
    pub status: String,
    /// Packages done on the node.
    pub packages_complete: usize,
    /// Packages of the NodeWright (recorded packages when the NodeWright is gone).
    pub packages_total: usize,
    /// Failed attempts of the current stages, summed.
    pub restarts: i64,
    /// This NodeWright holds a cordon on the node.
    pub cordoned: bool,
    /// The node is cordoned (`spec.unschedulable`), whoever cordoned it: `node status`'s `CORDONED`.
    pub node_cordoned: bool,
    /// The node holds the persistent cordon of `runtimeRequiredCordonAfter`
    /// (`nodewright.nvidia.com/runtimeRequiredCordon`), which only its validator releases.
    pub runtime_required_cordon: bool,
    /// The node carries the ignore label.
    pub ignored: bool,
    /// The records, one per package version.
    pub packages: Vec<PackageStatus>,
}

/// Whether the node has any record of `nodewright` (state, status).
pub fn has_records(node: &Node, nodewright: &str) -> bool {
    let a = node.annotations();
    a.contains_key(&keys::node_state_key(nodewright))
        || a.contains_key(&keys::node_status_key(nodewright))
}

/// The NodeWright names the node has state for.
pub fn nodewrights_on(node: &Node) -> Vec<String> {
    let prefix = keys::node_state_key("");
    node.annotations()
        .keys()
        .filter_map(|k| k.strip_prefix(&prefix).map(str::to_owned))
        .collect()
}

/// The node's status for `nodewright`: what the operator recorded on the node, else in the
/// NodeWright's status, else unknown.
fn recorded_status(node: &Node, name: &str, nw: Option<&NodeWright>) -> Status {
    node.annotations()
        .get(&keys::node_status_key(name))
        .map(|s| Status::parse_lenient(s))
        .or_else(|| {
            nw.and_then(|nw| nw.status.as_ref())
                .and_then(|s| s.node_status.get(&node.name_any()).copied())
        })
        .unwrap_or(Status::Unknown)
}

/// Summarises `node` for the NodeWright `name` (`nw`: the object, when it exists).
pub fn summarize(node: &Node, name: &str, nw: Option<&NodeWright>) -> NodeSummary {
    let state = parse_state(node, name);
    let status = match &state {
        None => "malformed".to_owned(),
        Some(_) => recorded_status(node, name, nw).as_str().to_owned(),
    };
    let state = state.unwrap_or_default();
    let (complete, total) = match nw {
        Some(nw) => (
            nw.spec
                .packages
                .iter()
                .filter(|(key, p)| package_done(p, state.get(key, &p.version)))
                .count(),
            nw.spec.packages.len(),
        ),
        None => (
            state
                .iter()
                .filter(|r| r.state == Some(State::Complete))
                .count(),
            state.iter().count(),
        ),
    };
    NodeSummary {
        node_name: node.name_any(),
        nodewright: name.to_owned(),
        status,
        packages_complete: complete,
        packages_total: total,
        restarts: state.iter().map(|r| i64::from(r.restarts)).sum(),
        cordoned: holds_cordon(node, name),
        node_cordoned: is_unschedulable(node),
        runtime_required_cordon: runtime_cordon::is_marked(node),
        ignored: node
            .labels()
            .get(keys::IGNORE_LABEL)
            .is_some_and(|v| v == "true"),
        packages: records(&state),
    }
}

/// The records, sorted by package then version.
pub fn records(state: &NodeState) -> Vec<PackageStatus> {
    let mut r: Vec<PackageStatus> = state.iter().cloned().collect();
    r.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
    r
}

/// The status column: upper case for erroring, as upstream's plugin shows it.
pub fn status_cell(status: &str) -> String {
    if status == Status::Erroring.as_str() {
        status.to_uppercase()
    } else {
        status.to_owned()
    }
}
