//! `history NAME [--revision N]`: the revisions the operator keeps of a NodeWright
//! (`status.revisions`), what each changed, where the current spec stands, and the last automatic
//! rollback. Read-only: anyone who can read the NodeWright can run it.

use kube::ResourceExt;
use nodewright_core::rollout::history::{self, Packages};
use nodewright_core::rollout::spec_diff::{self, PackageChange};
use nodewright_shared::api::{AutomaticRollback, NodeWright, Revision};
use serde::Serialize;

use crate::args::HistoryArgs;
use crate::cluster;
use crate::context::Ctx;
use crate::error::{CliError, Result};
use crate::output::{Render, Table, print};

/// One revision as listed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Its number.
    pub revision: i64,
    /// When it was recorded (RFC 3339).
    pub recorded: String,
    /// The generation it was recorded at.
    pub generation: i64,
    /// `name:version` of its packages.
    pub packages: String,
    /// What it changed against the revision before it (empty for the oldest kept).
    pub changes: Vec<PackageChange>,
    /// Whether it is the current spec.
    pub current: bool,
}

/// `history`'s result.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct History {
    nodewright: String,
    /// The generation of the current spec.
    generation: i64,
    /// The revision the current spec is; absent when it has not completed on a node yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    current_revision: Option<i64>,
    /// When the current spec is not a revision: what it changes against the newest one.
    #[serde(skip_serializing_if = "Option::is_none")]
    current_changes: Option<Vec<PackageChange>>,
    /// Oldest first.
    revisions: Vec<Entry>,
    /// The last automatic rollback.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_automatic_rollback: Option<AutomaticRollback>,
}

/// `history --revision N`'s result.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct OneRevision {
    nodewright: String,
    #[serde(flatten)]
    entry: Entry,
    /// What rolling back to it changes (from the current spec).
    rollback_changes: Vec<PackageChange>,
    /// Its packages, as a rollback writes them.
    spec: Packages,
}

/// The listing of `revisions` (oldest first) against the current spec `packages`.
pub fn entries(revisions: &[Revision], packages: &Packages) -> Vec<Entry> {
    let mut previous: Option<&Packages> = None;
    revisions
        .iter()
        .map(|r| {
            let changes = previous.map_or_else(Vec::new, |p| spec_diff::diff(p, &r.packages));
            previous = Some(&r.packages);
            Entry {
                revision: r.revision,
                recorded: r.recorded.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                generation: r.generation,
                packages: history::package_list(&r.packages),
                changes,
                current: &r.packages == packages,
            }
        })
        .collect()
}

/// The changes of an entry in a cell.
fn changes_cell(entry: &Entry, first: bool) -> String {
    if first && entry.changes.is_empty() {
        "(oldest kept)".to_owned()
    } else {
        spec_diff::summary(&entry.changes)
    }
}

/// How the last automatic rollback ended, in one line.
pub fn rollback_line(r: &AutomaticRollback) -> String {
    let from = r.from_revision.map_or_else(
        || "a spec that was no revision".to_owned(),
        |n| format!("revision {n}"),
    );
    let to = r
        .to_revision
        .map_or_else(|| "none".to_owned(), |n| format!("revision {n}"));
    let mut line = format!(
        "last automatic rollback: {} ({from}, generation {}, stopped in {}; to {to}",
        r.phase.as_str(),
        r.failed_generation,
        r.compartments.join(", ")
    );
    if let Some(g) = r.written_generation {
        line.push_str(&format!("; written as generation {g}"));
    }
    line.push_str(&format!(
        ") at {}",
        r.last_transition_time.0.strftime("%Y-%m-%dT%H:%M:%SZ")
    ));
    if let Some(m) = &r.message {
        line.push_str(&format!(": {m}"));
    }
    line
}

impl Render for History {
    fn table(&self, _wide: bool) -> String {
        let mut out = format!("NodeWright: {}\n", self.nodewright);
        if self.revisions.is_empty() {
            out.push_str(
                "No revisions yet: a spec becomes a revision once it completed on a node.\n",
            );
        } else {
            let mut t = Table::new(&["REVISION", "RECORDED", "GENERATION", "PACKAGES", "CHANGES"]);
            for (i, e) in self.revisions.iter().enumerate() {
                let mark = if e.current { " (current)" } else { "" };
                t.row(vec![
                    format!("{}{mark}", e.revision),
                    e.recorded.clone(),
                    e.generation.to_string(),
                    e.packages.clone(),
                    changes_cell(e, i == 0),
                ]);
            }
            out.push_str(&t.render());
        }
        match (&self.current_revision, &self.current_changes) {
            (Some(r), _) => out.push_str(&format!(
                "current spec: generation {}, revision {r}\n",
                self.generation
            )),
            (None, Some(changes)) => out.push_str(&format!(
                "current spec: generation {}, not a revision yet (not complete on any node): {}\n",
                self.generation,
                spec_diff::summary(changes)
            )),
            (None, None) => {}
        }
        if let Some(r) = &self.last_automatic_rollback {
            out.push_str(&rollback_line(r));
            out.push('\n');
        }
        out
    }
}

impl Render for OneRevision {
    fn table(&self, _wide: bool) -> String {
        let e = &self.entry;
        let mut out = format!(
            "NodeWright {} revision {}{}: recorded {}, generation {}, {}\n",
            self.nodewright,
            e.revision,
            if e.current { " (current)" } else { "" },
            e.recorded,
            e.generation,
            e.packages
        );
        if !e.changes.is_empty() {
            out.push_str(&format!(
                "changed against the revision before: {}\n",
                spec_diff::summary(&e.changes)
            ));
        }
        if !e.current {
            out.push_str(&format!(
                "rolling back to it changes: {}\n",
                spec_diff::summary(&self.rollback_changes)
            ));
        }
        out.push_str("packages:\n");
        let yaml = yaml_serde::to_string(&self.spec).unwrap_or_default();
        for line in yaml.lines() {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// The revisions of `nw`, oldest first.
fn revisions(nw: &NodeWright) -> Vec<Revision> {
    let mut list = nw
        .status
        .as_ref()
        .map(|s| s.revisions.clone())
        .unwrap_or_default();
    list.sort_by_key(|r| r.revision);
    list
}

/// Runs `history`.
pub async fn run(ctx: &Ctx, args: &HistoryArgs) -> Result<()> {
    let nw = cluster::nodewright(ctx, &args.name).await?;
    let name = nw.name_any();
    let list = revisions(&nw);
    let packages = &nw.spec.packages;
    let mut listed = entries(&list, packages);
    if let Some(wanted) = args.revision {
        let position = listed
            .iter()
            .position(|e| e.revision == wanted)
            .ok_or_else(|| {
                CliError::NotFound(format!(
                    "NodeWright {name} has no revision {wanted} (revisions: {})",
                    if list.is_empty() {
                        "none yet".to_owned()
                    } else {
                        list.iter()
                            .map(|r| r.revision.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ))
            })?;
        let entry = listed.remove(position);
        let spec = list[position].packages.clone();
        return print(
            ctx.format(),
            &OneRevision {
                nodewright: name,
                rollback_changes: spec_diff::diff(packages, &spec),
                entry,
                spec,
            },
        );
    }
    let current_revision = history::matching(&list, packages).map(|r| r.revision);
    let current_changes = match (current_revision, list.last()) {
        (None, Some(newest)) => Some(spec_diff::diff(&newest.packages, packages)),
        _ => None,
    };
    print(
        ctx.format(),
        &History {
            nodewright: name,
            generation: nw.metadata.generation.unwrap_or_default(),
            current_revision,
            current_changes,
            revisions: listed,
            last_automatic_rollback: nw.status.as_ref().and_then(|s| s.rollback.clone()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use nodewright_shared::api::Package;
    use std::collections::BTreeMap;

    fn revision(n: i64, version: &str) -> Revision {
        Revision {
            revision: n,
            recorded: Time(Timestamp::from_second(1_800_000_000 + n).expect("time")),
            generation: n,
            packages: BTreeMap::from([(
                "tuned".to_owned(),
                Package {
                    version: version.into(),
                    image: "ghcr.io/example/tuned".into(),
                    ..Package::default()
                },
            )]),
        }
    }

    #[test]
    fn each_revision_says_what_it_changed_and_which_is_current() {
        let list = [revision(1, "1.0.0"), revision(2, "1.1.0")];
        let listed = entries(&list, &list[1].packages);
        let history = History {
            nodewright: "demo".into(),
            generation: 2,
            current_revision: Some(2),
            current_changes: None,
            revisions: listed,
            last_automatic_rollback: None,
        };
        assert_eq!(
            history.table(false),
            "NodeWright: demo\n\
             REVISION      RECORDED               GENERATION   PACKAGES      CHANGES\n\
             1             2027-01-15T08:00:01Z   1            tuned:1.0.0   (oldest kept)\n\
             2 (current)   2027-01-15T08:00:02Z   2            tuned:1.1.0   tuned 1.0.0 -> 1.1.0\n\
             current spec: generation 2, revision 2\n"
        );
    }
}
