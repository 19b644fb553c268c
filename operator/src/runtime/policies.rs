//! The DeploymentPolicy watch of a term: it fills the store passes read policies from (without
//! managed fields) and yields every policy touched, deleted ones included, so the NodeWrights
//! naming it are woken and "policy missing" shows at once. (A deletion missed while the watch was
//! down is only seen at the NodeWright's next resync: a relist emits no deletes.)

use futures::Stream;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, reflector::reflector, watcher};
use nodewright_shared::api::DeploymentPolicy;

/// Watches every DeploymentPolicy into `writer`'s store; yields each one touched.
pub fn policy_feed(
    client: kube::Client,
    writer: Writer<DeploymentPolicy>,
) -> impl Stream<Item = Result<DeploymentPolicy, watcher::Error>> + Send {
    reflector(
        writer,
        watcher(
            Api::<DeploymentPolicy>::all(client),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(|p| p.metadata.managed_fields = None),
    )
    .touched_objects()
}
