//! One watch of the operator's Jobs for both controllers (DESIGN §4.5: every input from a store,
//! caches trimmed). The watch feeds the one Job store that the rollout and the outcome recorder
//! read, and its events trigger both: the rollout through the root stream (deletions included, a
//! deleted Job wakes its NodeWright), the outcome recorder through a fan-out of object references
//! resolved against the store (a Job deleted since has nothing to record and is skipped).
//!
//! Model: kube's `shared_stream_controllers` example. kube's own subscriber
//! (`Writer::subscribe`) is not used: it does not carry deletions, and it stops yielding without a
//! wake-up when the object of a reference is already gone from the store.

use std::sync::Arc;

use futures::channel::mpsc;
use std::collections::HashMap;

use futures::{Stream, StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::writes::memo;
use nodewright_core::jobs::read::Recorded;
use nodewright_core::jobs::stored::StoredJob;

/// The two trigger streams of one Job watch.
pub(crate) struct JobFeed<R, O> {
    /// Every Job change (applied or deleted), for the rollout's `watches_stream`. Polling it is what
    /// drives the watch: the rollout controller owns it.
    pub rollout: R,
    /// The Jobs changed, as stored, for the outcome controller's `for_shared_stream`.
    pub outcomes: O,
}

/// Starts the Job watch (`config`: the operator's Jobs) into `writer`, whose reader is `store`;
/// `synced` turns true once the store holds the first full list.
///
/// The flag is set from the watch's own `InitDone`, not by waiting on the store: a store's ready
/// signal wakes only one of its waiters, and the outcome controller already waits on it.
pub(crate) fn job_feed(
    api: Api<StoredJob>,
    config: watcher::Config,
    writer: reflector::store::Writer<StoredJob>,
    store: Store<StoredJob>,
    synced: watch::Sender<bool>,
) -> JobFeed<
    impl Stream<Item = Result<StoredJob, watcher::Error>> + Send + 'static,
    impl Stream<Item = Arc<StoredJob>> + Send + 'static,
> {
    // Unbounded: the outcome controller moves each reference into its scheduler at once (where
    // repeats of one Job collapse), so the queue holds at most the events of one burst.
    let (tx, rx) = mpsc::unbounded::<ObjectRef<StoredJob>>();
    let send = move |job: &StoredJob| {
        // The store already holds this version: the reflector applies before it yields. A closed
        // receiver means the outcome controller stopped with the term; the rollout stops too.
        let _ = tx.unbounded_send(ObjectRef::from_obj(job));
    };
    // Per Job (by a hash of its uid), the stamp of what a rollout pass reads of it.
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let rollout = reflector::reflector(
        writer,
        // Decoded as StoredJobs: only what the controllers read is kept.
        watcher(api, config).default_backoff(),
    )
    .try_filter_map(move |event| {
        // The reflector yields an event after applying it to the store.
        let wake = match event {
            watcher::Event::InitDone => {
                synced.send_replace(true);
                None
            }
            watcher::Event::Init => None,
            watcher::Event::Apply(job) | watcher::Event::InitApply(job) => {
                send(&job);
                let stamp = rollout_stamp(&job);
                (seen.insert(memo::stamp(&job.metadata.uid), stamp) != Some(stamp)).then_some(job)
            }
            watcher::Event::Delete(job) => {
                send(&job);
                seen.remove(&memo::stamp(&job.metadata.uid));
                Some(job)
            }
        };
        std::future::ready(Ok(wake))
    });
    let outcomes = rx.filter_map(move |job| std::future::ready(store.get(&job)));
    JobFeed { rollout, outcomes }
}

/// What a rollout pass reads of a Job, as a stamp: its conditions, suspension, deletion, a
/// recorded outcome other than `complete`, and whether it carries a note the node's condition
/// names (pods not created, an image not pulled). The `complete` mark is written by the pass that
/// recorded the outcome (`absorb`), so it wakes no pass: on a fleet that was one extra pass per
/// stage.
pub(crate) fn rollout_stamp(job: &StoredJob) -> u64 {
    let conditions: Vec<(&str, &str, Option<&str>)> = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_deref()))
        .collect();
    let recorded = job
        .recorded
        .as_deref()
        .filter(|r| *r != Recorded::Complete.as_str());
    memo::stamp((
        conditions,
        job.spec.as_ref().and_then(|s| s.suspend),
        job.metadata.deletion_timestamp.is_some(),
        recorded,
        // The node's Erroring condition names these (`rollout::act_on_nodes`): a pass writes it.
        (
            job.pods_not_created.is_some(),
            job.image_pull_failing.is_some(),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::keys;
    use serde_json::json;

    fn job(conditions: serde_json::Value, recorded: Option<&str>) -> StoredJob {
        let mut annotations = serde_json::Map::new();
        if let Some(r) = recorded {
            annotations.insert(keys::STATE_RECORDED_ANNOTATION.into(), json!(r));
        }
        serde_json::from_value(json!({
            "metadata": {"name": "j", "uid": "u", "annotations": annotations},
            "spec": {"ttlSecondsAfterFinished": 600},
            "status": {"conditions": conditions}
        }))
        .expect("job")
    }

    #[test]
    fn only_the_complete_mark_wakes_no_pass() {
        let complete = json!([{"type": "Complete", "status": "True"}]);
        let running = job(json!([]), None);
        let done = job(complete.clone(), None);
        assert_ne!(
            rollout_stamp(&running),
            rollout_stamp(&done),
            "a Job finishing wakes"
        );
        assert_eq!(
            rollout_stamp(&done),
            rollout_stamp(&job(complete, Some("complete"))),
            "its complete mark does not"
        );
        let failed =
            json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]);
        assert_ne!(
            rollout_stamp(&job(failed.clone(), None)),
            rollout_stamp(&job(failed, Some("timed-out"))),
            "a timed-out mark does (the pass counts the batch failure)"
        );
    }
}
