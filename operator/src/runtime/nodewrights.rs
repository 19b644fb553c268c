//! The NodeWright store of the rollout (DESIGN §4.5: caches trimmed, watches scoped).
//!
//! A NodeWright's status carries every selected node's records (`status.nodeState`): on a fleet,
//! a megabyte of JSON that the operator writes but never reads back (each pass derives the records
//! from the nodes themselves). The store keeps the NodeWright without them, and the status write
//! compares them by a stamp of what it last wrote ([`crate::writes::Writer::status_unchanged`]).
//!
//! Triggers: a change of the spec, metadata or the status fields a pass reads as inputs (batch
//! states, config updates, boot IDs) wakes the rollout; the pass's own status write (node counts,
//! conditions, records) does not, so a pass does not wake itself.
//!
//! What the term keeps per NodeWright (metric series, its last status write) goes when the watch
//! reports the NodeWright deleted, or absent from a relist ([`forget_deleted`]): its deletion pass
//! drops it too, but a NodeWright can go without one (its finalizer removed by hand).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use std::sync::Arc;

use futures::{Stream, TryStreamExt};
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{PredicateConfig, WatchStreamExt, reflector::reflector, watcher};
use nodewright_shared::api::NodeWright;

use crate::context::Context;

/// The NodeWright watch of a term (scoped by `options.nodewright_selector` when set): fills the
/// rollout's store with trimmed NodeWrights ([`nodewright_core::stored::trim_nodewright`]), drops
/// the term's state of deleted ones ([`forget_deleted`]), sets `synced` once the store has listed
/// ([`Context::nodewrights_synced`]), and yields the NodeWrights whose change should wake a pass
/// ([`trigger_relevant`]).
pub fn nodewright_feed(
    ctx: Arc<Context>,
    writer: Writer<NodeWright>,
    synced: tokio::sync::watch::Sender<bool>,
) -> impl Stream<Item = Result<NodeWright, watcher::Error>> + Send {
    let mut config = watcher::Config::default();
    if let Some(selector) = &ctx.options.nodewright_selector {
        config = config.labels(selector);
    }
    reflector(
        writer,
        watcher(Api::<NodeWright>::all(ctx.client.clone()), config)
            .default_backoff()
            .modify(nodewright_core::stored::trim_nodewright),
    )
    .inspect_ok(move |event| {
        forget_deleted(&ctx, event);
        // The reflector has applied the event: on InitDone the store holds the list.
        if matches!(event, watcher::Event::InitDone) {
            synced.send_replace(true);
        }
    })
    .applied_objects()
    .predicate_filter(trigger_relevant, PredicateConfig::default())
}

/// Drops the term's state of the NodeWrights a watch event says are gone: the deleted one, or
/// after a relist (the store already holds its result) every one the store no longer has.
pub fn forget_deleted(ctx: &Context, event: &watcher::Event<NodeWright>) {
    match event {
        watcher::Event::Delete(nodewright) => {
            if let Some(name) = &nodewright.metadata.name {
                ctx.forget_nodewright(name);
            }
        }
        watcher::Event::InitDone => ctx.forget_absent_nodewrights(),
        watcher::Event::Apply(_) | watcher::Event::Init | watcher::Event::InitApply(_) => {}
    }
}

/// Hash of what should wake a pass; equal hashes are not forwarded as triggers.
pub fn trigger_relevant(nodewright: &NodeWright) -> Option<u64> {
    let mut h = DefaultHasher::new();
    let m = &nodewright.metadata;
    (
        &m.name,
        &m.uid,
        m.generation,
        &m.labels,
        &m.annotations,
        &m.finalizers,
        m.deletion_timestamp.is_some(),
    )
        .hash(&mut h);
    if let Some(status) = &nodewright.status {
        status.node_boot_ids.hash(&mut h);
        status.config_updates.hash(&mut h);
        crate::writes::memo::stamp_json(
            &status
                .compartment_statuses
                .iter()
                .map(|(name, c)| (name, &c.batch_state))
                .collect::<Vec<_>>(),
        )
        .hash(&mut h);
    }
    Some(h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writes::mock::stored_nodewright;
    use nodewright_shared::api::{NodeWrightSpec, NodeWrightStatus, Status};
    use nodewright_shared::node_state::NodeState;

    /// Metric series and the last status write are kept per NodeWright: a NodeWright the watch
    /// reports deleted, or that a relist no longer shows (a deletion missed while the watch was
    /// down), leaves neither behind; the others keep theirs.
    #[tokio::test]
    async fn a_deleted_nodewright_leaves_no_series_and_no_remembered_write() {
        let (client, server) = crate::writes::mock::status_writes_succeed();
        let (store, mut feed) = kube::runtime::reflector::store::<NodeWright>();
        let mut ctx = Context::over(client);
        ctx.nodewrights = store;
        let status = NodeWrightStatus {
            status: Some(Status::Complete),
            ..NodeWrightStatus::default()
        };
        for name in ["a", "b", "c"] {
            let nw = stored_nodewright(name);
            feed.apply_watcher_event(&watcher::Event::Apply(nw.clone()));
            let samples =
                crate::metrics::nodewright_gauges::samples(&nw, &status, &Default::default());
            ctx.metrics.report(name, samples);
            ctx.writer
                .write_status(&nw, crate::writes::StatusWrite::Whole(&status))
                .await
                .expect("status written");
        }
        let kept = |ctx: &Context| {
            let metrics = ctx.metrics.nodewrights();
            let written = ctx.writer.remembered_nodewrights();
            let names = |set: std::collections::BTreeSet<String>| set.into_iter().collect();
            (names(metrics), names(written))
        };
        let all: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
        assert_eq!(kept(&ctx), (all.clone(), all));

        let deleted = watcher::Event::Delete(stored_nodewright("a"));
        feed.apply_watcher_event(&deleted);
        forget_deleted(&ctx, &deleted);
        let rest: Vec<String> = vec!["b".into(), "c".into()];
        assert_eq!(kept(&ctx), (rest.clone(), rest));

        // A relist that no longer shows b: no Delete event for it.
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(stored_nodewright("c")),
            watcher::Event::InitDone,
        ] {
            feed.apply_watcher_event(&event);
            forget_deleted(&ctx, &event);
        }
        let last: Vec<String> = vec!["c".into()];
        assert_eq!(kept(&ctx), (last.clone(), last));
        drop(ctx);
        server.abort();
    }

    #[test]
    fn the_records_are_not_kept_and_the_pass_outputs_do_not_trigger() {
        let mut nw = NodeWright::new("nw", NodeWrightSpec::default());
        nw.status = Some(NodeWrightStatus {
            node_state: [("n1".to_owned(), NodeState::default())].into(),
            ..NodeWrightStatus::default()
        });
        let before = trigger_relevant(&nw);
        nodewright_core::stored::trim_nodewright(&mut nw);
        assert!(nw.status.as_ref().is_some_and(|s| s.node_state.is_empty()));
        // The pass's own outputs: no trigger.
        if let Some(s) = nw.status.as_mut() {
            s.status = Some(Status::InProgress);
            s.node_status.insert("n1".into(), Status::InProgress);
            s.complete_nodes = "0/1".into();
        }
        assert_eq!(trigger_relevant(&nw), before);
        // An input of the next pass (a batch state reset, a pause): a trigger.
        let mut reset = nw.clone();
        if let Some(s) = reset.status.as_mut() {
            s.compartment_statuses
                .entry("__default__".into())
                .or_default()
                .batch_state = Some(Default::default());
        }
        assert_ne!(trigger_relevant(&reset), before);
        let mut paused = nw.clone();
        paused.metadata.annotations =
            Some([("nodewright.nvidia.com/pause".to_owned(), "true".to_owned())].into());
        assert_ne!(trigger_relevant(&paused), before);
    }
}
