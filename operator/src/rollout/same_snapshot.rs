//! The rollout pass and the preview (`kubectl nodewright plan`) decide alike: one snapshot of the
//! cluster is fed to the operator's pass (over a mock API holding it) and to
//! [`nodewright_core::preview::preview`], and what the pass does is what the preview says it does
//! now: the nodes it starts and the stage each starts with, the nodes it holds back and each node's
//! status (issue 21 §2).

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use nodewright_core::preview::{Blocker, Preview, Snapshot, preview};
use nodewright_shared::api::NodeWrightStatus;
use nodewright_shared::keys;
use serde_json::{Value, json};

use super::pass_fixtures::{NODES, after, created, node, nodewright, pass_over, snapshot};
use crate::writes::mock;

/// (node, package, stage) of every node the preview says starts a stage now: nothing blocks it,
/// it is not complete, and its first stage has no Job running yet.
fn starts_now(preview: &Preview) -> BTreeSet<(String, String, String)> {
    preview
        .nodes
        .iter()
        .filter(|n| n.blockers.is_empty() && !n.complete)
        .filter_map(|n| {
            let step = n.steps.first().filter(|s| !s.running)?;
            let stage = serde_json::to_value(step.stage).ok()?.as_str()?.to_owned();
            // The Job's package label is `<package>-<version>`.
            let package = format!("{}-{}", step.package, step.version);
            Some((n.name.clone(), package, stage))
        })
        .collect()
}

/// Each node's status as the pass wrote it (or as the snapshot had it, when the pass wrote none).
fn written_statuses(state: &mock::ClusterState, snapshot: &Snapshot) -> BTreeMap<String, Value> {
    let status: NodeWrightStatus = state
        .nodewright
        .as_ref()
        .and_then(|nw| serde_json::from_value(nw["status"].clone()).ok())
        .or_else(|| snapshot.nodewright.status.clone())
        .unwrap_or_default();
    status
        .node_status
        .iter()
        .map(|(n, s)| (n.clone(), json!(s)))
        .collect()
}

fn previewed_statuses(preview: &Preview) -> BTreeMap<String, Value> {
    preview
        .nodes
        .iter()
        .map(|n| (n.name.clone(), json!(n.status)))
        .collect()
}

/// Asserts the pass over `snapshot` did what the preview of it says happens now; returns what the
/// pass wrote.
async fn decide_alike(what: &str, snapshot: &Snapshot) -> mock::ClusterState {
    let previewed = preview(snapshot).expect("the snapshot previews");
    let state = pass_over(snapshot).await;
    assert_eq!(
        created(&state),
        starts_now(&previewed),
        "{what}: the Jobs the pass created are the stages the preview starts now\npreview: {previewed:#?}"
    );
    assert_eq!(
        written_statuses(&state, snapshot),
        previewed_statuses(&previewed),
        "{what}: each node's status"
    );
    let waiting = state
        .nodewright
        .as_ref()
        .and_then(|nw| nw["status"]["waitingFor"].as_str().map(str::to_owned))
        .or_else(|| {
            snapshot
                .nodewright
                .status
                .as_ref()
                .and_then(|s| s.waiting_for.clone())
        });
    assert_eq!(waiting, previewed.waiting_for, "{what}: status.waitingFor");
    state
}

#[tokio::test]
async fn a_fresh_rollout_starts_the_first_batch_the_preview_names() {
    let first = snapshot(nodewright(), (0..NODES).map(node).collect(), vec![]);
    let state = decide_alike("fresh", &first).await;
    let started = created(&state);
    assert_eq!(started.len(), 2, "the policy's batch of two: {started:?}");
    assert!(
        started
            .iter()
            .all(|(_, package, _)| package == "tools-1.0.0"),
        "driver waits for tools: {started:?}"
    );
    let previewed = preview(&first).expect("the snapshot previews");
    let held: Vec<&str> = previewed
        .nodes
        .iter()
        .filter(|n| {
            n.blockers
                .iter()
                .any(|b| matches!(b, Blocker::Batch { .. }))
        })
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(
        held.len(),
        NODES - 2,
        "the rest wait for later batches: {previewed:#?}"
    );

    // The snapshot that pass left (its Jobs running): the next pass starts nothing new, as the
    // preview of it says.
    let second = after(&first, &state, false);
    let state = decide_alike("in flight", &second).await;
    assert!(created(&state).is_empty(), "{:?}", created(&state));
}

#[tokio::test]
async fn a_paused_nodewright_starts_nothing_and_says_so_in_both() {
    let mut nw = nodewright();
    nw.annotations_mut()
        .insert(keys::PAUSE_ANNOTATION.to_owned(), "true".to_owned());
    let paused = snapshot(nw, (0..NODES).map(node).collect(), vec![]);
    let state = decide_alike("paused", &paused).await;
    assert!(created(&state).is_empty());
    let previewed = preview(&paused).expect("the snapshot previews");
    assert!(
        previewed
            .nodes
            .iter()
            .all(|n| n.blockers.contains(&Blocker::Paused)),
        "{previewed:#?}"
    );
}

#[tokio::test]
async fn a_missing_policy_starts_nothing_in_both() {
    let mut missing = snapshot(nodewright(), (0..NODES).map(node).collect(), vec![]);
    missing.policies.clear();
    let state = decide_alike("missing policy", &missing).await;
    assert!(created(&state).is_empty());
}
