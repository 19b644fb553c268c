//! Hostile node state, end to end on the local control plane: a node's
//! `nodewright.nvidia.com/nodeState_<nw>` annotation truncated, from a future version (a stage or
//! state this version does not know), hand-edited (unknown state, a key that does not match its
//! record, the wrong JSON shape, a number out of range), and one edited by hand on a node the
//! operator had already completed. For each: the NodeWright reports `NodeStateMalformed`
//! (reason `ParseError`) naming the node, the node runs nothing, the operator writes nothing over the
//! annotation (checked from an independent watch of every node version the apiserver served), the
//! other nodes complete; once repaired (annotation removed, or corrected by hand) the condition
//! clears and the rollout completes from what the repaired record says.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use nodewright_shared::api::Status;
use nodewright_shared::keys;
use nodewright_shared::node_state::{Stage, State};
use serde_json::json;

mod support;
use support::{
    SuiteOperator, assert_malformed, assert_ready_and_well_formed, condition, create_fake_node,
    create_labelled_nodewright, node_state, package, patch_node, scenario, spec_on,
    wait_nodewright, wait_status,
};

const SUITE_LABEL: &str = "nodewright.test/node-state";
/// Labels this test's nodes, so its watch sees only them.
const NODE_LABEL: &str = "node-state.test/of";

/// One node version the watch saw (node, annotation value), or `None`: the repair starts here.
type Seen = Option<(String, Option<String>)>;

/// A valid record of `pkg` 1.0.0 at `stage`/`state`.
fn record(stage: &str, state: &str) -> String {
    json!({"pkg|1.0.0": {"name": "pkg", "version": "1.0.0", "image": "ghcr.io/nvidia/skyhook/agentless", "stage": stage, "state": state}}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_node_state_is_reported_left_alone_and_recovers_when_repaired() {
    let (cluster, client, ns) = scenario("nodestate").await;
    let key = keys::node_state_key(&ns);
    let valid = record("apply", "complete");
    // (node suffix, annotation value, how it is repaired: None = annotation removed)
    let bad: Vec<(&str, String, Option<String>)> = vec![
        (
            "truncated",
            valid[..valid.len() / 2].to_owned(),
            Some(record("apply", "complete")),
        ),
        ("future-stage", record("pre-flight", "complete"), None),
        ("future-state", record("apply", "paused"), None),
        (
            "hand-edited",
            record("apply", "done"),
            Some(record("config", "complete")),
        ),
        (
            "key-mismatch",
            valid.replace("pkg|1.0.0", "pkg|2.0.0"),
            None,
        ),
        (
            "wrong-shape",
            r#"{"pkg|1.0.0":"complete"}"#.to_owned(),
            None,
        ),
        (
            "restarts-overflow",
            valid.replace(
                r#""state":"complete""#,
                r#""state":"erroring","restarts":99999999999"#,
            ),
            None,
        ),
        ("not-json", "\u{1}\u{fffd} nodeState".to_owned(), None),
    ];
    let mut names = vec![format!("{ns}-good")];
    names.extend(bad.iter().map(|(s, _, _)| format!("{ns}-{s}")));
    for name in &names {
        create_fake_node(&client, name, &[(NODE_LABEL, &ns)], json!([])).await;
    }
    for ((_, value, _), name) in bad.iter().zip(&names[1..]) {
        patch_node(
            &client,
            name,
            json!({"metadata": {"annotations": {key.clone(): value}}}),
        )
        .await;
    }

    // The independent record: every value of the node-state annotation the apiserver served, per
    // node, in order, with a marker where the test starts repairing.
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let watch = {
        let seen = seen.clone();
        let key = key.clone();
        let nodes: Api<Node> = Api::all(client.clone());
        let config = watcher::Config::default().labels(&format!("{NODE_LABEL}={ns}"));
        tokio::spawn(async move {
            let mut stream = watcher(nodes, config).applied_objects().boxed();
            while let Some(Ok(node)) = stream.next().await {
                let value = node.annotations().get(&key).cloned();
                if let Ok(mut seen) = seen.lock() {
                    seen.push(Some((node.name_any(), value)));
                }
            }
        })
    };

    let _operator = SuiteOperator::new(&client, &ns, SUITE_LABEL, &ns).start();
    create_labelled_nodewright(
        &client,
        SUITE_LABEL,
        &ns,
        spec_on(&names, [("pkg", package("1.0.0", &[]))]),
    )
    .await;
    let good = names[0].clone();
    let nw = wait_nodewright(
        cluster,
        &client,
        &ns,
        "NodeStateMalformed for every bad node, the good node complete",
        |nw| {
            condition(nw, "NodeStateMalformed").is_some_and(|c| {
                c.status == "True" && names[1..].iter().all(|n| c.message.contains(n.as_str()))
            }) && nw
                .status
                .as_ref()
                .is_some_and(|s| s.node_status.get(&good) == Some(&Status::Complete))
        },
    )
    .await;
    let on_every_bad_node = format!("on {} node(s)", bad.len());
    assert_malformed(&nw, &good, |m| m.contains(&on_every_bad_node));
    let status = nw.status.clone().expect("status");
    for name in &names[1..] {
        assert_eq!(
            status.node_status.get(name),
            Some(&Status::Blocked),
            "{name}"
        );
    }
    assert!(condition(&nw, "Ready").is_some_and(|c| c.status == "False"));

    // Hand-edited after completion: an unknown state on the node the operator had completed.
    let complete_record = node_state(&client, &good, &ns)
        .await
        .expect("good node state")
        .to_annotation();
    let edited = complete_record.replace(r#""state":"complete""#, r#""state":"finished""#);
    assert_ne!(edited, complete_record);
    patch_node(
        &client,
        &good,
        json!({"metadata": {"annotations": {key.clone(): edited.clone()}}}),
    )
    .await;
    wait_nodewright(
        cluster,
        &client,
        &ns,
        "the hand-edited complete node reported malformed too",
        |nw| {
            condition(nw, "NodeStateMalformed")
                .is_some_and(|c| c.message.contains(&format!("on {} node(s)", bad.len() + 1)))
        },
    )
    .await;

    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    for name in &names[1..] {
        let on_node = jobs
            .list(&ListParams::default().labels(&format!("{}={name}", keys::NODE_LABEL)))
            .await
            .expect("jobs")
            .items;
        assert!(on_node.is_empty(), "a Job ran on the malformed node {name}");
    }

    // Repair: removed or corrected by hand.
    if let Ok(mut seen) = seen.lock() {
        seen.push(None);
    }
    let repairs = bad
        .iter()
        .map(|(_, _, repair)| repair.clone())
        .chain([Some(complete_record.clone())]);
    for (name, repair) in names[1..].iter().chain([&good]).zip(repairs) {
        patch_node(
            &client,
            name,
            json!({"metadata": {"annotations": {key.clone(): repair}}}),
        )
        .await;
    }
    let nw = wait_status(cluster, &client, &ns, Status::Complete).await;
    assert_ready_and_well_formed(&nw);
    for name in &names {
        let state = node_state(&client, name, &ns).await.expect("node state");
        let r = state.get("pkg", "1.0.0").expect("record");
        assert_eq!(
            (r.stage, r.state),
            (Stage::Config, Some(State::Complete)),
            "{name}"
        );
    }
    // The node repaired to "config complete" resumed from its record: no Job ran there.
    let hand_repaired = format!("{ns}-hand-edited");
    let ran = jobs
        .list(&ListParams::default().labels(&format!("{}={hand_repaired}", keys::NODE_LABEL)))
        .await
        .expect("jobs")
        .items;
    assert!(
        ran.is_empty(),
        "{} Job(s) ran on {hand_repaired}",
        ran.len()
    );

    // Nothing but the test wrote the malformed annotations: before the repair, every value the
    // watch saw on a bad node is the one the test put there (the good node: its own records, then
    // the hand edit).
    watch.abort();
    let seen = seen.lock().expect("seen").clone();
    let before_repair = seen.iter().take_while(|e| e.is_some()).flatten();
    let injected: BTreeMap<&str, &str> = names[1..]
        .iter()
        .map(String::as_str)
        .zip(bad.iter().map(|(_, v, _)| v.as_str()))
        .collect();
    let mut after_edit = false;
    for (node, value) in before_repair {
        if let Some(want) = injected.get(node.as_str()) {
            // Before the test's own patch, the annotation may not be there yet.
            assert!(
                value.is_none() || value.as_deref() == Some(*want),
                "{node}: the operator wrote {value:?} over {want:?}"
            );
        } else if *node == good {
            if value.as_deref() == Some(edited.as_str()) {
                after_edit = true;
            } else {
                assert!(
                    !after_edit,
                    "{node}: the operator wrote {value:?} over the hand edit"
                );
            }
        }
    }
    assert!(after_edit, "the watch saw the hand edit");
    let nodes: Api<Node> = Api::all(client.clone());
    for name in &names {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
}
