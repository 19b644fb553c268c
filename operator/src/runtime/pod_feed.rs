//! The watch of the operator's pods (their Jobs' attempts): every change triggers the outcome
//! controller (a pod event maps to its Job), and the store the live path reads keeps only the
//! attempts that failed genuinely (DESIGN §4.4), which it counts as `restarts`, and the live ones
//! waiting on an image the kubelet cannot pull, which it surfaces (`outcomes::image_pull`); a
//! finished Job's pods are listed live. A retained attempt that succeeded, or one running, costs
//! nothing in memory: on a fleet those are nearly all of them.

use futures::{Stream, TryStreamExt};
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};

use nodewright_core::jobs::classify::{image_pull_wait, is_genuine_failure};
use nodewright_core::jobs::stored::StoredPod;

/// Whether the store keeps `pod`: a genuine failure, or a live attempt waiting on an image.
fn kept(pod: &StoredPod) -> bool {
    is_genuine_failure(pod) || image_pull_wait(pod).is_some()
}

/// What the store does with a pod event: the pods it keeps ([`kept`]) are kept, every other pod is
/// removed (a pod that was kept and no longer qualifies is gone from the store too).
pub fn store_event(event: &watcher::Event<StoredPod>) -> watcher::Event<StoredPod> {
    match event {
        watcher::Event::Apply(pod) if kept(pod) => watcher::Event::Apply(pod.clone()),
        watcher::Event::InitApply(pod) if kept(pod) => watcher::Event::InitApply(pod.clone()),
        // During a relist, a removal from the current store is harmless: the relisted store
        // replaces it at InitDone.
        watcher::Event::Apply(pod)
        | watcher::Event::InitApply(pod)
        | watcher::Event::Delete(pod) => watcher::Event::Delete(pod.clone()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Watches `api` with `config` into `writer` (genuine failures only), yielding every pod applied.
pub fn pod_feed(
    api: Api<StoredPod>,
    config: watcher::Config,
    mut writer: Writer<StoredPod>,
) -> impl Stream<Item = Result<StoredPod, watcher::Error>> + Send + 'static {
    watcher(api, config)
        .default_backoff()
        .inspect_ok(move |event| writer.apply_watcher_event(&store_event(event)))
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
    fn only_genuine_failures_and_image_pull_waits_stay_in_the_store() {
        let (store, mut writer) = reflector::store::<StoredPod>();
        let failed = pod(
            "failed",
            json!({"phase": "Failed", "initContainerStatuses": [
                {"name": "c", "state": {"terminated": {"exitCode": 2}}}]}),
        );
        let running = pod("running", json!({"phase": "Running"}));
        let rejected = pod("rejected", json!({"phase": "Failed", "reason": "OutOfcpu"}));
        let pulling = pod(
            "pulling",
            json!({"phase": "Pending", "containerStatuses": [
                {"name": "c", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}),
        );
        for p in [&failed, &running, &rejected, &pulling] {
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
        assert_eq!(names(&store), ["failed", "pulling"]);
        // A relist keeps the same: a kept pod that succeeded since leaves the store.
        writer.apply_watcher_event(&store_event(&watcher::Event::Init));
        let later = pod("failed", json!({"phase": "Succeeded"}));
        let pulled = pod("pulling", json!({"phase": "Running"}));
        for p in [&later, &running, &pulled] {
            writer.apply_watcher_event(&store_event(&watcher::Event::InitApply(p.clone())));
        }
        writer.apply_watcher_event(&store_event(&watcher::Event::InitDone));
        assert!(names(&store).is_empty());
        assert!(store.get(&ObjectRef::new("failed").within("ns")).is_none());
    }
}
