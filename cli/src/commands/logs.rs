//! `package logs`: the logs of a package's stages, from the pods its stage Jobs kept (the kubelet
//! serves a terminated container's log while its pod exists), and, when those pods are gone or hold
//! no log, the `nodewright.nvidia.com/last-logs` snapshot the operator kept on the Job.

use std::collections::BTreeSet;
use std::io::Write;

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;
use kube::api::{Api, LogParams};
use nodewright_core::jobs::PackageAnnotation;
use nodewright_core::jobs::read::{node_of, package_of};
use nodewright_core::jobs::stored::StoredJob;
use nodewright_core::naming::{
    INTERRUPT_CONTAINER_NAME, PAUSE_CONTAINER_NAME, check_container_name, init_container_name,
    stage_container_name,
};
use nodewright_shared::keys;
use nodewright_shared::node_state::Stage;
use serde::Serialize;

use crate::args::{Format, PackageLogsArgs, StageArg};
use crate::cluster;
use crate::context::Ctx;
use crate::error::{CliError, Result};
use crate::output::{Render, print};
use crate::patterns::NodePatterns;

/// One log shown.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogEntry {
    /// Where it comes from: `pod` (a retained attempt) or `last-logs` (the Job's snapshot).
    pub source: &'static str,
    /// The Job.
    pub job: Option<String>,
    /// The pod (for `pod`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The container (for `pod`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The container's state (Running, Completed, Exit: N, a waiting reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The node.
    pub node: Option<String>,
    /// The stage.
    pub stage: Option<Stage>,
    /// The log text.
    pub log: Option<String>,
    /// Why there is no log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl LogEntry {
    fn header(&self) -> String {
        let node = self.node.as_deref().unwrap_or("-");
        let stage = self.stage.map_or_else(|| "-".to_owned(), |s| s.to_string());
        match self.source {
            "pod" => format!(
                "==> Pod: {}, Container: {} [{}], Node: {node}, Stage: {stage} <==",
                self.pod.as_deref().unwrap_or("-"),
                self.container.as_deref().unwrap_or("-"),
                self.state.as_deref().unwrap_or("-"),
            ),
            _ => format!(
                "==> Job: {} (last-logs snapshot), Node: {node}, Stage: {stage} <==",
                self.job.as_deref().unwrap_or("-"),
            ),
        }
    }
}

/// The entries, for -o json|yaml (and the text otherwise).
#[derive(Debug, Serialize)]
#[serde(transparent)]
struct Logs(Vec<LogEntry>);

impl Render for Logs {
    fn table(&self, _wide: bool) -> String {
        let mut out = String::new();
        for e in &self.0 {
            out.push_str(&e.header());
            out.push('\n');
            match (&e.log, &e.error) {
                (Some(log), _) => {
                    out.push_str(log);
                    if !log.ends_with('\n') {
                        out.push('\n');
                    }
                }
                (None, Some(error)) => out.push_str(&format!("(no log: {error})\n")),
                (None, None) => {}
            }
        }
        out
    }
}

/// The package annotation on a pod.
fn pod_package(pod: &Pod) -> Option<PackageAnnotation> {
    pod.annotations()
        .get(keys::PACKAGE_ANNOTATION)
        .and_then(|a| PackageAnnotation::parse(a).ok())
}

/// The Job that owns a pod.
fn pod_job(pod: &Pod) -> Option<String> {
    pod.owner_references()
        .iter()
        .find(|o| o.kind == "Job")
        .map(|o| o.name.clone())
}

/// A container's state as a word.
fn container_state(status: &ContainerStatus) -> String {
    let Some(state) = status.state.as_ref() else {
        return "Unknown".into();
    };
    if state.running.is_some() {
        return "Running".into();
    }
    if let Some(t) = &state.terminated {
        return if t.exit_code == 0 {
            "Completed".into()
        } else {
            format!("Exit: {}", t.exit_code)
        };
    }
    state
        .waiting
        .as_ref()
        .and_then(|w| w.reason.clone())
        .unwrap_or_else(|| "Waiting".into())
}

/// Whether a container ever started (running, terminated, or restarted).
fn started(status: &ContainerStatus) -> bool {
    status
        .state
        .as_ref()
        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        || status
            .last_state
            .as_ref()
            .is_some_and(|s| s.terminated.is_some())
}

/// The containers of `pod` to show: with a stage, that stage's container and its check (the
/// interrupt container for an interrupt); without, every stage container that started (not the
/// copy container, not the pause container).
fn containers(pod: &Pod, package: &str, stage: Option<Stage>) -> Vec<ContainerStatus> {
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    let all: Vec<&ContainerStatus> = status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten()
        .collect();
    let wanted: Option<BTreeSet<String>> = stage.map(|s| {
        if s.is_interrupt() {
            BTreeSet::from([INTERRUPT_CONTAINER_NAME.to_owned()])
        } else {
            BTreeSet::from([
                stage_container_name(package, s),
                check_container_name(package, s),
            ])
        }
    });
    let copy = init_container_name(package);
    all.into_iter()
        .filter(|c| match &wanted {
            Some(w) => w.contains(&c.name),
            None => c.name != copy && c.name != PAUSE_CONTAINER_NAME && started(c),
        })
        .cloned()
        .collect()
}

/// Runs `package logs`: the package's pods and Jobs chosen by the arguments, a log per retained
/// container ([`pod_entries`]), then the snapshot of each Job none of whose pods gave one.
pub async fn run(ctx: &Ctx, args: &PackageLogsArgs) -> Result<()> {
    if args.follow && matches!(ctx.format(), Format::Json | Format::Yaml) {
        return Err(CliError::Usage(
            "--follow streams raw logs: it cannot be combined with -o json or -o yaml".into(),
        ));
    }
    let name = &args.nodewright;
    let patterns = NodePatterns::parse(&args.node.iter().cloned().collect::<Vec<_>>())?;
    if !patterns.is_empty() {
        patterns.select(&cluster::nodes(ctx).await?)?;
    }
    let nw = cluster::nodewright_opt(ctx, name).await?;
    let stage = args.stage.map(StageArg::stage);
    let wanted =
        |a: &PackageAnnotation| a.name == args.package && stage.is_none_or(|s| s == a.stage);
    let mut pods: Vec<Pod> = cluster::pods(ctx, name)
        .await?
        .into_iter()
        .filter(|p| pod_package(p).is_some_and(|a| wanted(&a)))
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| patterns.matches(n))
        })
        .collect();
    // Newest first: the attempt that matters now leads.
    pods.sort_by_key(|p| std::cmp::Reverse(p.creation_timestamp()));
    // Each Job with its stored form, which the operator's readers take.
    let jobs: Vec<(Job, StoredJob)> = cluster::jobs(ctx, Some(name))
        .await?
        .into_iter()
        .map(|j| {
            let stored = StoredJob::of(&j);
            (j, stored)
        })
        .filter(|(_, j)| package_of(j).is_some_and(|a| wanted(&a)))
        .filter(|(_, j)| node_of(j).is_some_and(|n| patterns.matches(n)))
        .collect();
    if nw.is_none() && pods.is_empty() && jobs.is_empty() {
        return Err(CliError::NodeWrightNotFound(name.clone()));
    }
    if let Some(nw) = &nw
        && !nw.spec.packages.contains_key(&args.package)
        && pods.is_empty()
        && jobs.is_empty()
    {
        super::package::spec_package(nw, &args.package)?;
    }

    let package_namespace = cluster::package_namespace(ctx).await?;
    let api: Api<Pod> = Api::namespaced(ctx.client().await?.clone(), &package_namespace);
    let (mut entries, logged_jobs) = pod_entries(ctx, &api, args, stage, &pods).await;
    entries.extend(snapshot_entries(&jobs, &logged_jobs));
    if entries.is_empty() && (!args.follow || pods.is_empty()) {
        return Err(CliError::NotFound(format!(
            "no logs of package {} of NodeWright {name}{}{}: no stage pod or Job of it remains in \
             namespace {} (succeeded Jobs and their pods are deleted after JOB_TTL_SUCCEEDED)",
            args.package,
            args.node
                .as_deref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default(),
            stage.map(|s| format!(" at stage {s}")).unwrap_or_default(),
            package_namespace
        )));
    }
    print(ctx.format(), &Logs(entries))
}

/// A log entry per container of `pods` to show (a followed container is streamed instead), and the
/// Jobs whose pods gave a log (their snapshot is not needed).
async fn pod_entries(
    ctx: &Ctx,
    api: &Api<Pod>,
    args: &PackageLogsArgs,
    stage: Option<Stage>,
    pods: &[Pod],
) -> (Vec<LogEntry>, BTreeSet<String>) {
    let tail = (args.tail >= 0).then_some(args.tail);
    let text = matches!(ctx.format(), Format::Table | Format::Wide);
    let mut entries = Vec::new();
    let mut logged_jobs: BTreeSet<String> = BTreeSet::new();
    for pod in pods {
        let annotation = pod_package(pod);
        let pod_name = pod.name_any();
        for c in containers(pod, &args.package, stage) {
            let mut entry = LogEntry {
                source: "pod",
                job: pod_job(pod),
                pod: Some(pod_name.clone()),
                container: Some(c.name.clone()),
                state: Some(container_state(&c)),
                node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                stage: annotation.as_ref().map(|a| a.stage),
                log: None,
                error: None,
            };
            let params = LogParams {
                container: Some(c.name.clone()),
                tail_lines: tail,
                ..LogParams::default()
            };
            // Follow the containers of pods still running (a kubelet ends the stream of a
            // container that has terminated).
            let pod_running = matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Running" | "Pending")
            );
            if args.follow && pod_running && text {
                println!("{}", entry.header());
                match follow(api, &pod_name, params).await {
                    Ok(()) => {
                        if let Some(j) = &entry.job {
                            logged_jobs.insert(j.clone());
                        }
                    }
                    Err(e) => println!("(no log: {e})"),
                }
                continue;
            }
            match api.logs(&pod_name, &params).await {
                Ok(log) => {
                    if let Some(j) = &entry.job {
                        logged_jobs.insert(j.clone());
                    }
                    entry.log = Some(log);
                }
                Err(e) => {
                    entry.error = Some(match ctx.api_error("reading the log")(e) {
                        CliError::Api { message, .. } => message,
                        other => other.to_string(),
                    });
                }
            }
            entries.push(entry);
        }
    }
    (entries, logged_jobs)
}

/// The `last-logs` snapshot of each of `jobs` not in `logged_jobs` that has one.
fn snapshot_entries(jobs: &[(Job, StoredJob)], logged_jobs: &BTreeSet<String>) -> Vec<LogEntry> {
    jobs.iter()
        .filter(|(job, _)| !logged_jobs.contains(&job.name_any()))
        .filter_map(|(job, stored)| {
            let snapshot = job.annotations().get(keys::LAST_LOGS_ANNOTATION)?;
            Some(LogEntry {
                source: "last-logs",
                job: Some(job.name_any()),
                pod: None,
                container: None,
                state: None,
                node: node_of(stored).map(str::to_owned),
                stage: package_of(stored).map(|a| a.stage),
                log: Some(snapshot.clone()),
                error: None,
            })
        })
        .collect()
}

/// Streams a running container's log to stdout until it ends.
async fn follow(api: &Api<Pod>, pod: &str, mut params: LogParams) -> Result<(), String> {
    params.follow = true;
    let stream = api
        .log_stream(pod, &params)
        .await
        .map_err(|e| e.to_string())?;
    let mut lines = stream.lines();
    let mut out = std::io::stdout();
    while let Some(line) = lines.try_next().await.map_err(|e| e.to_string())? {
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
    }
    Ok(())
}
