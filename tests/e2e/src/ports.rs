//! The local control plane's ports are kwokctl's: each `kwokctl create cluster` takes the highest
//! free ports below 32767 (it probes by listening), and tests/controlplane/up.sh serialises those
//! creations on one lock file in the cache. A test that stops a component of its cluster frees that
//! component's port until it is started again, and a cluster created meanwhile by another test
//! process on the machine (tests/run-all.sh runs the oldest minor's suites beside the newest's)
//! takes exactly that port: the restarted component then fails with "address already in use".
//! Holding the same lock while components may be down keeps other clusters from being created then.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

/// The lock up.sh holds while kwokctl picks ports and starts a cluster's processes.
fn creation_lock_path() -> PathBuf {
    crate::cache_root().join("kwok").join(".create.lock")
}

/// Held: no cluster is being created on this machine (by any process using the same cache), and
/// none will be until it is dropped.
#[derive(Debug)]
pub struct CreationLock {
    // The lock is the open file's: closing it (on drop) releases it.
    _file: File,
}

/// Waits until no cluster is being created and keeps others from being created until the
/// returned guard is dropped. Never hold it while creating or deleting a cluster of one's own
/// (up.sh and down.sh would wait for it).
pub async fn hold_cluster_creation() -> std::io::Result<CreationLock> {
    let path = creation_lock_path();
    tokio::task::spawn_blocking(move || {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        // flock(2), as up.sh's `flock` takes it.
        file.lock()?;
        Ok(CreationLock { _file: file })
    })
    .await
    .map_err(std::io::Error::other)?
}
