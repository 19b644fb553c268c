//! The watch of the operator's pods (their Jobs' attempts): every change triggers the outcome
//! controller (a pod event maps to its Job), and the store the live path reads keeps only the
//! attempts that failed genuinely (DESIGN §4.4), which is all it reads: the live path counts them
//! as `restarts`, and a finished Job's pods are listed live. A retained attempt that succeeded, or
//! one still running, costs nothing in memory: on a fleet those are nearly all of them.
//!
//! An attempt that succeeds is noted by its Job's uid ([`SucceededAttempts`]) and wakes the
//! rollout, which records the stage complete and starts the next one without waiting for the Job
//! controller to mark the Job Complete (the live path's success, DESIGN §4.4).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::channel::mpsc;
use futures::{Stream, TryStreamExt};
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};

use crate::jobs::outcome::{is_attempt_success, is_genuine_failure};
use crate::jobs::stored::{StoredJob, StoredPod};
use crate::writes::memo::stamp;

/// The Jobs with an attempt that succeeded, by a hash of the Job's uid (to the hash of the pod's
/// uid): a few bytes per Job, forgotten with the pod.
#[derive(Debug, Clone, Default)]
pub struct SucceededAttempts(Arc<Mutex<HashMap<u64, u64>>>);

impl SucceededAttempts {
    /// Whether the Job with this uid has an attempt that succeeded.
    pub fn contains(&self, job_uid: Option<&str>) -> bool {
        let Some(uid) = job_uid else { return false };
        self.0.lock().is_ok_and(|m| m.contains_key(&stamp(uid)))
    }

    /// Notes a pod that succeeded; returns whether it was not noted before.
    fn note(&self, pod: &StoredPod) -> bool {
        let (Some(job), Some(uid)) = (&pod.job_uid, &pod.metadata.uid) else {
            return false;
        };
        self.0
            .lock()
            .is_ok_and(|mut m| m.insert(stamp(job), stamp(uid)).is_none())
    }

    /// Forgets a deleted pod.
    fn forget(&self, pod: &StoredPod) {
        let (Some(job), Some(uid)) = (&pod.job_uid, &pod.metadata.uid) else {
            return;
        };
        if let Ok(mut m) = self.0.lock()
            && m.get(&stamp(job)) == Some(&stamp(uid))
        {
            m.remove(&stamp(job));
        }
    }
}

/// What the store does with a pod event: genuine failures are kept, every other pod is removed (a
/// pod that was kept and no longer qualifies is gone from the store too).
pub fn store_event(event: &watcher::Event<StoredPod>) -> watcher::Event<StoredPod> {
    match event {
        watcher::Event::Apply(pod) if is_genuine_failure(pod) => watcher::Event::Apply(pod.clone()),
        watcher::Event::InitApply(pod) if is_genuine_failure(pod) => {
            watcher::Event::InitApply(pod.clone())
        }
        // During a relist, a removal from the current store is harmless: the relisted store
        // replaces it at InitDone.
        watcher::Event::Apply(pod)
        | watcher::Event::InitApply(pod)
        | watcher::Event::Delete(pod) => watcher::Event::Delete(pod.clone()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Watches `api` with `config` into `writer` (genuine failures only) and `succeeded`, yielding
/// every pod applied; `wake` receives the Job of every attempt newly seen succeeded.
pub fn pod_feed(
    api: Api<StoredPod>,
    config: watcher::Config,
    mut writer: Writer<StoredPod>,
    succeeded: SucceededAttempts,
    wake: mpsc::UnboundedSender<ObjectRef<StoredJob>>,
) -> impl Stream<Item = Result<StoredPod, watcher::Error>> + Send + 'static {
    watcher(api, config)
        .default_backoff()
        .inspect_ok(move |event| {
            writer.apply_watcher_event(&store_event(event));
            match event {
                watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)
                    if is_attempt_success(pod) && succeeded.note(pod) =>
                {
                    if let (Some(job), Some(ns)) = (&pod.job, &pod.metadata.namespace) {
                        // A closed receiver: the rollout stopped with the term.
                        let _ = wake.unbounded_send(ObjectRef::new(job).within(ns));
                    }
                }
                watcher::Event::Delete(pod) => succeeded.forget(pod),
                _ => {}
            }
        })
        .applied_objects()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::reflector::ObjectRef;
    use serde_json::json;

    fn pod(name: &str, status: serde_json::Value) -> StoredPod {
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "ns"}, "status": status}),
        )
        .expect("pod")
    }

    #[test]
    fn a_succeeded_attempt_is_noted_once_and_forgotten_with_its_pod() {
        let succeeded = SucceededAttempts::default();
        let pod: StoredPod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "pod-1",
                         "labels": {crate::jobs::stored::CONTROLLER_UID_LABEL: "job-1"}},
            "status": {"phase": "Succeeded"}
        }))
        .expect("pod");
        assert!(!succeeded.contains(Some("job-1")));
        assert!(succeeded.note(&pod));
        assert!(!succeeded.note(&pod), "noted once");
        assert!(succeeded.contains(Some("job-1")));
        assert!(!succeeded.contains(Some("job-2")));
        succeeded.forget(&pod);
        assert!(!succeeded.contains(Some("job-1")));
    }

    #[test]
    fn only_genuine_failures_stay_in_the_store() {
        let (store, mut writer) = reflector::store::<StoredPod>();
        let failed = pod(
            "failed",
            json!({"phase": "Failed", "initContainerStatuses": [
                {"name": "c", "state": {"terminated": {"exitCode": 2}}}]}),
        );
        let running = pod("running", json!({"phase": "Running"}));
        let rejected = pod("rejected", json!({"phase": "Failed", "reason": "OutOfcpu"}));
        for p in [&failed, &running, &rejected] {
            writer.apply_watcher_event(&store_event(&watcher::Event::Apply(p.clone())));
        }
        let names = |s: &reflector::Store<StoredPod>| {
            let mut n: Vec<String> = s
                .state()
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            n.sort();
            n
        };
        assert_eq!(names(&store), ["failed"]);
        // A relist keeps the same: a kept pod that succeeded since leaves the store.
        writer.apply_watcher_event(&store_event(&watcher::Event::Init));
        let later = pod("failed", json!({"phase": "Succeeded"}));
        for p in [&later, &running] {
            writer.apply_watcher_event(&store_event(&watcher::Event::InitApply(p.clone())));
        }
        writer.apply_watcher_event(&store_event(&watcher::Event::InitDone));
        assert!(names(&store).is_empty());
        assert!(store.get(&ObjectRef::new("failed").within("ns")).is_none());
    }
}
