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
use futures::{Stream, StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::jobs::stored::StoredJob;

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
    let rollout = reflector::reflector(
        writer,
        // Decoded as StoredJobs: only what the controllers read is kept.
        watcher(api, config).default_backoff(),
    )
    .inspect_ok(move |event| {
        // The reflector yields an event after applying it to the store.
        if matches!(event, watcher::Event::InitDone) {
            synced.send_replace(true);
        }
    })
    .touched_objects()
    .inspect_ok(move |job| {
        // The store already holds this version: the reflector applies before it yields. A closed
        // receiver means the outcome controller stopped with the term; the rollout stops too.
        let _ = tx.unbounded_send(ObjectRef::from_obj(job));
    });
    let outcomes = rx.filter_map(move |job| std::future::ready(store.get(&job)));
    JobFeed { rollout, outcomes }
}
