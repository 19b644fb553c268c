//! Every metric family the two services export, read from their registries as built at startup
//! (`Metrics::new()` of each), with the label names each service declares. The registry is the
//! source: a metric added, renamed or removed in the code changes this list, and with it the
//! generated reference and what the dashboard and alert lints accept.

use std::collections::{BTreeMap, BTreeSet};

/// Which service exports a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Service {
    /// `nodewright-operator` (its admin server's `/metrics`).
    Operator,
    /// `nodewright-webhook` (its metrics port).
    Webhook,
}

impl Service {
    /// Display name.
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Operator => "operator",
            Service::Webhook => "webhook",
        }
    }
}

/// One metric family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// Who exports it.
    pub service: Service,
    /// Family name (as in `# TYPE`).
    pub name: String,
    /// `counter`, `gauge` or `histogram`.
    pub kind: String,
    /// `# HELP`.
    pub help: String,
    /// Label names (without a histogram's `le`).
    pub labels: Vec<&'static str>,
}

impl Family {
    /// The sample names Prometheus stores for the family.
    pub fn series_names(&self) -> Vec<String> {
        match self.kind.as_str() {
            "counter" => vec![format!("{}_total", self.name)],
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|s| format!("{}{s}", self.name))
                .collect(),
            _ => vec![self.name.clone()],
        }
    }
}

/// The families of one OpenMetrics exposition: name to (type, help).
pub fn descriptors(exposition: &str) -> BTreeMap<String, (String, String)> {
    let mut out: BTreeMap<String, (String, String)> = BTreeMap::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ') {
                out.entry(name.to_owned()).or_default().0 = kind.to_owned();
            }
        } else if let Some(rest) = line.strip_prefix("# HELP ")
            && let Some((name, help)) = rest.split_once(' ')
        {
            out.entry(name.to_owned()).or_default().1 = help.trim_end_matches('.').to_owned();
        }
    }
    out
}

/// The label names of each family's first series in an exposition (a histogram's `le` left out),
/// by family name.
pub fn sample_labels(exposition: &str) -> BTreeMap<String, Vec<&str>> {
    let families = descriptors(exposition);
    let mut out: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let series = &line[..name_end];
        let family = ["_total", "_bucket", "_sum", "_count", ""]
            .iter()
            .find_map(|suffix| {
                series
                    .strip_suffix(suffix)
                    .filter(|f| families.contains_key(*f))
            });
        let Some(family) = family else { continue };
        if out.contains_key(family) {
            continue;
        }
        let labels = line[name_end..]
            .strip_prefix('{')
            .and_then(|rest| rest.split_once('}'))
            .map(|(inner, _)| {
                inner
                    .split(',')
                    .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
                    .filter(|k| *k != "le")
                    .collect()
            })
            .unwrap_or_default();
        out.insert(family.to_owned(), labels);
    }
    out
}

/// Why the registries and the declared labels disagree.
#[derive(Debug, thiserror::Error)]
#[error("the metric registries and their label catalogues disagree:\n  {}", .0.join("\n  "))]
pub struct CatalogueError(pub Vec<String>);

fn service_families(
    service: Service,
    exposition: &str,
    labels: Vec<(String, Vec<&'static str>)>,
    problems: &mut Vec<String>,
) -> Vec<Family> {
    let declared: BTreeMap<String, Vec<&'static str>> = labels.into_iter().collect();
    let described = descriptors(exposition);
    for name in declared.keys() {
        if !described.contains_key(name) {
            problems.push(format!(
                "{}: catalogue() names {name}, which the registry does not export",
                service.as_str()
            ));
        }
    }
    let seen = sample_labels(exposition);
    described
        .into_iter()
        .map(|(name, (kind, help))| {
            if let (Some(want), Some(got)) = (declared.get(&name), seen.get(&name)) {
                let want: Vec<&str> = want.to_vec();
                if &want != got {
                    problems.push(format!(
                        "{}: {name} carries labels {got:?}, catalogue() says {want:?}",
                        service.as_str()
                    ));
                }
            }
            let labels = declared.get(&name).cloned().unwrap_or_else(|| {
                problems.push(format!(
                    "{}: {name} is exported but missing from catalogue() (declare its labels)",
                    service.as_str()
                ));
                Vec::new()
            });
            Family {
                service,
                name,
                kind,
                help,
                labels,
            }
        })
        .collect()
}

/// Every family of both services, operator first, each sorted by name.
pub fn families() -> Result<Vec<Family>, CatalogueError> {
    let mut problems = Vec::new();
    let operator = nodewright_operator::metrics::Metrics::exemplified().encode();
    let webhook = nodewright_webhook::metrics::Metrics::exemplified().encode();
    let mut all = service_families(
        Service::Operator,
        &operator,
        nodewright_operator::metrics::catalogue(),
        &mut problems,
    );
    all.extend(service_families(
        Service::Webhook,
        &webhook,
        nodewright_webhook::metrics::Metrics::catalogue(),
        &mut problems,
    ));
    if problems.is_empty() {
        Ok(all)
    } else {
        Err(CatalogueError(problems))
    }
}

/// Every series name either service exports (`nodewright_reconcile_total`,
/// `nodewright_stage_duration_seconds_bucket`, `process_open_fds`...).
pub fn series_names(families: &[Family]) -> BTreeSet<String> {
    families.iter().flat_map(Family::series_names).collect()
}
