//! A reflector store's first list as a flag any number of tasks can read and wait on.
//!
//! kube's `Store::wait_until_ready` keeps its ready signal as one oneshot receiver behind a mutex,
//! and a oneshot receiver remembers only the waker of the last task that polled it: of several
//! tasks waiting at once, the others are never woken and wait for good. The webhook's node flag and
//! a second waiter on the same store (the docs' harness waiting for the node watch) did exactly
//! that, and the webhook then gave no blast-radius warning for the rest of its life. So each store
//! gets one waiter, which fans the news out through a watch channel.

use std::hash::Hash;

use kube::runtime::reflector::{Lookup, Store};
use tokio::sync::watch;

/// Turns true once `store` has listed. Never turns true when the store's writer goes away first
/// (the sender is then dropped, and [`wait`] answers false).
pub fn flag<K>(store: Store<K>) -> watch::Receiver<bool>
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        if store.wait_until_ready().await.is_ok() {
            let _ = tx.send(true);
        }
    });
    rx
}

/// Waits until `flag` is true: true once the store has listed, false when it never will.
pub async fn wait(flag: &watch::Receiver<bool>) -> bool {
    flag.clone().wait_for(|listed| *listed).await.is_ok()
}

/// Whether the store behind `flag` has listed, without waiting.
pub fn is_listed(flag: &watch::Receiver<bool>) -> bool {
    *flag.borrow()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::{reflector, watcher};
    use std::time::Duration;

    /// The clock is paused: once every task is idle, tokio moves it to the next timer, so a
    /// waiter that is never woken ends as a timeout at once instead of a hung test, and a woken
    /// one finishes before any time passes.
    #[tokio::test(start_paused = true)]
    async fn every_waiter_sees_the_store_listed() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let flag = flag(store);
        assert!(!is_listed(&flag));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let flag = flag.clone();
                tokio::spawn(async move { wait(&flag).await })
            })
            .collect();
        // Every waiter polls (and parks) before the store lists.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        for waiter in waiters {
            let woken = tokio::time::timeout(Duration::from_secs(3600), waiter).await;
            assert!(
                matches!(woken, Ok(Ok(true))),
                "a waiter was not woken: {woken:?}"
            );
        }
        assert!(is_listed(&flag));
        // A late waiter returns at once.
        assert!(wait(&flag).await);
    }

    /// The same waiters on the store's own signal: only the last to poll is woken (why [`flag`]
    /// exists). Should kube fix that, this test fails and the fan-out can go.
    #[tokio::test(start_paused = true)]
    async fn the_stores_own_signal_wakes_only_one_of_several_waiters() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.wait_until_ready().await.is_ok() })
            })
            .collect();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let mut woken = 0;
        for waiter in waiters {
            if let Ok(Ok(true)) = tokio::time::timeout(Duration::from_secs(3600), waiter).await {
                woken += 1;
            }
        }
        assert_eq!(woken, 1);
    }

    #[tokio::test]
    async fn a_store_whose_writer_goes_away_never_lists() {
        let (store, writer) = reflector::store::<ConfigMap>();
        let flag = flag(store);
        drop(writer);
        assert!(!wait(&flag).await);
    }
}
