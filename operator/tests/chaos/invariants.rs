//! The test's own record of a trial, from watches independent of the operator: every version of
//! every node (node-state annotation, cordon) and every package Job of the trial. The invariants are
//! checked on it as events arrive, and at the end of the trial.
//!
//! Orders come from resourceVersions: the local control plane has one etcd, whose revision is the
//! resourceVersion of every object, so "created after it was recorded" is a comparison of two
//! revisions. A Job first seen through a live watch event carries its creation revision exactly; one
//! first seen in a (re)list after a watch broke (the apiserver restarted) only an upper bound, and
//! is then judged by its creation timestamp against the time the test saw the record instead.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};
use nodewright_shared::keys;
use nodewright_shared::node_state::{NodeState, Stage, State};

/// (node, `<package>|<version>`, stage)
type StageKey = (String, String, Stage);

/// A package Job as first seen.
struct Created {
    stage: StageKey,
    name: String,
    /// Its resourceVersion when first seen.
    rv: u64,
    /// First seen in a live event (so `rv` is its creation revision), not in a (re)list.
    live: bool,
    created: Option<SystemTime>,
}

/// What the watches saw.
#[derive(Default)]
pub struct Record {
    /// Stages each package goes through, in order (`<package>|<version>` → stages).
    sequences: BTreeMap<String, Vec<Stage>>,
    nodewright: String,
    /// Per node and package: how far its record has got (index in its sequence × 2, + 1 when that
    /// stage is complete or skipped).
    progress: BTreeMap<(String, String), usize>,
    /// Stages recorded done, with the revision and the wall time the test saw it at.
    recorded: BTreeMap<StageKey, (u64, SystemTime)>,
    /// Job UIDs seen.
    jobs: BTreeSet<String>,
    /// Every package Job: its stage, name, first revision seen, whether that was a live event (the
    /// creation revision) and its creation time. Judged in [`Record::finish`], once both watches
    /// have delivered everything, so the order the two watches' events arrived in does not matter.
    created: Vec<Created>,
    /// Jobs per stage (distinct UIDs), for the report.
    pub jobs_per_stage: BTreeMap<StageKey, usize>,
    cordoned: BTreeSet<String>,
    /// Most nodes cordoned at once.
    pub max_cordoned: usize,
    pub violations: Vec<String>,
}

fn cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// The node condition the trial's health gate waits for; the test's validator ([`validate`]) sets
/// it True on a node once the node waits at its gate.
pub const VALIDATED: &str = "ChaosValidated";

fn validated(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == VALIDATED && c.status == "True")
        })
}

fn revision(meta_rv: Option<&String>) -> u64 {
    meta_rv.and_then(|rv| rv.parse().ok()).unwrap_or(0)
}

impl Record {
    pub fn new(nodewright: &str, sequences: BTreeMap<String, Vec<Stage>>) -> Self {
        Record {
            nodewright: nodewright.to_owned(),
            sequences,
            ..Record::default()
        }
    }

    /// A node version from a live watch event.
    fn node(&mut self, node: &Node) {
        if cordoned(node) {
            self.cordoned.insert(node.name_any());
        } else if self.cordoned.remove(&node.name_any()) {
            self.released(node);
        }
        self.max_cordoned = self.max_cordoned.max(self.cordoned.len());
        self.node_state(node);
    }

    /// A complete (re)list, after a watch broke: one consistent snapshot, so the cordoned set is
    /// replaced at once (applying it node by node could count a node cordoned in the gap before
    /// one uncordoned in the gap is seen).
    fn relisted(&mut self, nodes: &[Node]) {
        for node in nodes {
            if !cordoned(node) && self.cordoned.contains(&node.name_any()) {
                self.released(node);
            }
        }
        self.cordoned = nodes
            .iter()
            .filter(|n| cordoned(n))
            .map(ResourceExt::name_any)
            .collect();
        self.max_cordoned = self.max_cordoned.max(self.cordoned.len());
        for node in nodes {
            self.node_state(node);
        }
    }

    /// A node seen uncordoned after it was cordoned: its health gate must have passed (the
    /// condition never goes back to False, so a version from a relist after the gap still tells).
    fn released(&mut self, node: &Node) {
        if !validated(node) {
            self.violations.push(format!(
                "{}: uncordoned (rv {}) before its health gate passed",
                node.name_any(),
                revision(node.metadata.resource_version.as_ref())
            ));
        }
    }

    fn node_state(&mut self, node: &Node) {
        let name = node.name_any();
        let rv = revision(node.metadata.resource_version.as_ref());
        let Some(text) = node
            .annotations()
            .get(&keys::node_state_key(&self.nodewright))
        else {
            if self.progress.keys().any(|(n, _)| *n == name) {
                self.violations.push(format!(
                    "{name}: node state removed (rv {rv}): outcomes lost"
                ));
                self.progress.retain(|(n, _), _| *n != name);
            }
            return;
        };
        let state = match NodeState::parse(text) {
            Ok(s) => s,
            Err(e) => {
                self.violations
                    .push(format!("{name}: node state malformed (rv {rv}): {e}"));
                return;
            }
        };
        let now = SystemTime::now();
        for (key, sequence) in &self.sequences {
            let Some((pkg, version)) = key.split_once('|') else {
                continue;
            };
            let at = (name.clone(), key.clone());
            let Some(r) = state.get(pkg, version) else {
                if self.progress.contains_key(&at) {
                    self.violations
                        .push(format!("{name}: record of {key} removed (rv {rv})"));
                    self.progress.remove(&at);
                }
                continue;
            };
            let Some(index) = sequence.iter().position(|s| *s == r.stage) else {
                self.violations.push(format!(
                    "{name}: {key} at stage {} outside its sequence (rv {rv})",
                    r.stage
                ));
                continue;
            };
            let done = matches!(r.state, Some(State::Complete | State::Skipped));
            let rank = index * 2 + usize::from(done);
            let before = self.progress.get(&at).copied().unwrap_or(0);
            if rank < before {
                self.violations.push(format!(
                    "{name}: {key} went back to {} {:?} (rv {rv}): a recorded outcome was lost",
                    r.stage, r.state
                ));
            }
            self.progress.insert(at, rank.max(before));
            let finished = if done { index + 1 } else { index };
            for stage in &sequence[..finished] {
                self.recorded
                    .entry((name.clone(), key.clone(), *stage))
                    .or_insert((rv, now));
            }
        }
    }

    fn job(&mut self, job: &Job, live: bool) {
        let Some(uid) = job.uid() else { return };
        if !self.jobs.insert(uid) {
            return;
        }
        let labels = job.labels();
        let (Some(node), Some(package), Some(stage)) = (
            labels.get(keys::NODE_LABEL),
            labels.get(keys::PACKAGE_LABEL),
            labels
                .get(keys::STAGE_LABEL)
                .and_then(|s| s.parse::<Stage>().ok()),
        ) else {
            return;
        };
        // The label is `<package>-<version>`: find the package it names.
        let Some(key) = self
            .sequences
            .keys()
            .find(|k| k.replacen('|', "-", 1) == *package)
            .cloned()
        else {
            return;
        };
        let at = (node.clone(), key, stage);
        *self.jobs_per_stage.entry(at.clone()).or_default() += 1;
        let rv = revision(job.metadata.resource_version.as_ref());
        let created = job
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| SystemTime::from(t.0));
        self.created.push(Created {
            stage: at,
            name: job.name_any(),
            rv,
            live,
            created,
        });
    }

    /// Checks every Job against the records: none may have been created after its stage's outcome
    /// was recorded. Returns every violation of the trial.
    pub fn finish(&mut self) -> Vec<String> {
        for Created {
            stage: (node, key, stage),
            name,
            rv,
            live,
            created,
        } in &self.created
        {
            let Some(&(recorded_rv, recorded_at)) =
                self.recorded.get(&(node.clone(), key.clone(), *stage))
            else {
                continue;
            };
            let after = if *live {
                *rv > recorded_rv
            } else {
                created.is_some_and(|c| {
                    c.duration_since(recorded_at)
                        .is_ok_and(|d| d.as_secs() >= 2)
                })
            };
            if after {
                self.violations.push(format!(
                    "{node}: a second {stage} Job for {key} ({name}, rv {rv}) after its outcome was recorded (rv {recorded_rv})"
                ));
            }
        }
        self.violations.clone()
    }

    /// Nodes cordoned now.
    pub fn cordoned(&self) -> &BTreeSet<String> {
        &self.cordoned
    }
}

/// The trial's validator: every node waiting at the NodeWright `nodewright`'s health gate gets the
/// condition [`VALIDATED`] True (a strategic merge of its status), until aborted. It looks at the
/// nodes every half second (a list, not a watch: a patch a fault made fail is retried on the next
/// look, whether or not the node changes meanwhile).
pub fn validate(client: &kube::Client, nodewright: &str) -> tokio::task::JoinHandle<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mark = keys::gates_key(nodewright);
    tokio::spawn(async move {
        loop {
            let waiting: Vec<String> = nodes
                .list(&Default::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|n| n.annotations().contains_key(&mark) && !validated(n))
                .map(|n| n.name_any())
                .collect();
            for name in waiting {
                let now = k8s_openapi::jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%SZ")
                    .to_string();
                let patch = serde_json::json!({"status": {"conditions": [{
                    "type": VALIDATED, "status": "True", "reason": "Validated",
                    "message": "the chaos test's validator", "lastTransitionTime": now,
                    "lastHeartbeatTime": now
                }]}});
                let _ = nodes
                    .patch_status(
                        &name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Strategic(patch),
                    )
                    .await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    })
}

/// Watches nodes and the trial's Jobs into `record` until aborted.
pub fn watch(
    client: &kube::Client,
    namespace: &str,
    record: Arc<Mutex<Record>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let on_nodes = {
        let record = record.clone();
        tokio::spawn(async move {
            let mut stream = watcher(nodes, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut relist: Vec<Node> = Vec::new();
            while let Some(event) = stream.next().await {
                let Ok(mut r) = record.lock() else { break };
                match event {
                    Ok(Event::Apply(n)) => r.node(&n),
                    Ok(Event::Init) => relist.clear(),
                    Ok(Event::InitApply(n)) => relist.push(n),
                    Ok(Event::InitDone) => r.relisted(&std::mem::take(&mut relist)),
                    _ => {}
                }
            }
        })
    };
    let config = watcher::Config::default().labels(keys::NAME_LABEL);
    let on_jobs = tokio::spawn(async move {
        let mut stream = watcher(jobs, config).default_backoff().boxed();
        while let Some(event) = stream.next().await {
            let (job, live) = match event {
                Ok(Event::Apply(j)) => (j, true),
                Ok(Event::InitApply(j)) => (j, false),
                _ => continue,
            };
            if let Ok(mut r) = record.lock() {
                r.job(&job, live);
            }
        }
    });
    vec![on_nodes, on_jobs]
}
