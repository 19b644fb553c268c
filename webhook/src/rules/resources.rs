//! `packages.<K>.resources`: all four quantities or none, limits at least requests, all positive.
//!
//! The override replaces the namespace LimitRange for the stage containers, so half an override
//! (a CPU request without a memory limit) would leave the Job to whatever the namespace says, and a
//! limit below its request makes the Job's pods unschedulable: both are refused before any Job exists.
//! As upstream, an override whose values are all zero means "no override".

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use nodewright_shared::api::PackageResources;

use super::findings::{Findings, Path};
use super::quantity::Amount;

/// One of the four fields, parsed.
struct Field<'a> {
    name: &'static str,
    text: Option<&'a str>,
    /// `None` when unset or unparseable (the latter already reported).
    amount: Option<Amount>,
}

impl Field<'_> {
    fn is_nonzero(&self) -> bool {
        self.amount.as_ref().is_some_and(|a| !a.is_zero())
    }
}

/// Parses one field, reporting it when it is not a quantity.
fn field<'a>(
    name: &'static str,
    quantity: &'a Option<Quantity>,
    path: &Path<'_>,
    f: &mut Findings,
) -> Field<'a> {
    let text = quantity.as_ref().map(|q| q.0.as_str());
    let amount = text.and_then(|t| match Amount::parse(t) {
        Ok(a) => Some(a),
        Err(e) => {
            f.error(&path.child(name), e.to_string());
            None
        }
    });
    Field { name, text, amount }
}

/// Checks `resources` of the package at `path` (`spec.packages.K.resources`).
pub fn check(resources: &PackageResources, path: &Path<'_>, f: &mut Findings) {
    let cpu_request = field("cpuRequest", &resources.cpu_request, path, f);
    let cpu_limit = field("cpuLimit", &resources.cpu_limit, path, f);
    let memory_request = field("memoryRequest", &resources.memory_request, path, f);
    let memory_limit = field("memoryLimit", &resources.memory_limit, path, f);
    let all = [&cpu_request, &cpu_limit, &memory_request, &memory_limit];

    // All zero (or unset): no override, as upstream.
    if !all.iter().any(|q| q.is_nonzero()) {
        return;
    }
    let missing: Vec<&str> = all
        .iter()
        .filter(|q| q.text.is_none())
        .map(|q| q.name)
        .collect();
    if !missing.is_empty() {
        f.error(
            path,
            format!(
                "if any resource override is set, all of cpuRequest, cpuLimit, memoryRequest, memoryLimit must be set: add {} (or remove resources to use the namespace defaults)",
                missing.join(", ")
            ),
        );
    }
    for (request, limit) in [(&cpu_request, &cpu_limit), (&memory_request, &memory_limit)] {
        if let (Some(r), Some(l), Some(rt), Some(lt)) =
            (&request.amount, &limit.amount, request.text, limit.text)
            && l < r
        {
            f.error(
                &path.child(limit.name),
                format!(
                    "{} ({lt}) must be >= {} ({rt}): raise {} or lower {}",
                    limit.name, request.name, limit.name, request.name
                ),
            );
        }
    }
    let not_positive: Vec<String> = all
        .iter()
        .filter(|q| q.amount.as_ref().is_some_and(|a| !a.is_positive()))
        .map(|q| format!("{} is {}", q.name, q.text.unwrap_or_default()))
        .collect();
    if !not_positive.is_empty() {
        f.error(
            path,
            format!(
                "all resource values must be positive ({}): use values above zero, e.g. cpuRequest: 100m, memoryRequest: 64Mi",
                not_positive.join(", ")
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(
        cr: Option<&str>,
        cl: Option<&str>,
        mr: Option<&str>,
        ml: Option<&str>,
    ) -> PackageResources {
        let q = |s: Option<&str>| s.map(|s| Quantity(s.to_owned()));
        PackageResources {
            cpu_request: q(cr),
            cpu_limit: q(cl),
            memory_request: q(mr),
            memory_limit: q(ml),
        }
    }

    fn lines(r: &PackageResources) -> Vec<String> {
        let mut f = Findings::default();
        check(r, &Path::Root("spec.packages.tools.resources"), &mut f);
        f.finish().errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn accepted_resources() {
        let cases = [
            res(None, None, None, None),
            res(Some("0"), None, None, None),
            res(Some("0"), Some("0"), Some("0"), Some("0")),
            res(Some("250m"), Some("1"), Some("256Mi"), Some("512Mi")),
            res(Some("0.5"), Some("500m"), Some("1Gi"), Some("1024Mi")),
            res(Some("1"), Some("1"), Some("1000Mi"), Some("1Gi")),
        ];
        for r in cases {
            assert_eq!(lines(&r), Vec::<String>::new(), "{r:?}");
        }
    }

    #[test]
    fn rejected_resources() {
        let p = "spec.packages.tools.resources";
        let cases = [
            (
                res(Some("100m"), None, None, None),
                format!(
                    "{p}: if any resource override is set, all of cpuRequest, cpuLimit, memoryRequest, memoryLimit must be set: add cpuLimit, memoryRequest, memoryLimit"
                ),
            ),
            (
                res(Some("500m"), Some("100m"), Some("64Mi"), Some("128Mi")),
                format!("{p}.cpuLimit: cpuLimit (100m) must be >= cpuRequest (500m)"),
            ),
            (
                res(Some("1"), Some("1"), Some("1Gi"), Some("1000Mi")),
                format!("{p}.memoryLimit: memoryLimit (1000Mi) must be >= memoryRequest (1Gi)"),
            ),
            (
                res(Some("0"), Some("0"), Some("64Mi"), Some("128Mi")),
                format!(
                    "{p}: all resource values must be positive (cpuRequest is 0, cpuLimit is 0)"
                ),
            ),
            (
                res(Some("-1"), Some("1"), Some("64Mi"), Some("128Mi")),
                format!("{p}: all resource values must be positive (cpuRequest is -1)"),
            ),
            (
                res(Some("lots"), Some("1"), Some("64Mi"), Some("128Mi")),
                format!("{p}.cpuRequest: \"lots\" is not a quantity"),
            ),
            (
                res(Some("1"), Some("1"), Some("64MB"), Some("128Mi")),
                format!("{p}.memoryRequest: \"64MB\" is not a quantity"),
            ),
        ];
        for (r, want) in cases {
            let got = lines(&r);
            assert!(
                got.iter().any(|l| l.starts_with(&want)),
                "{want:?} not in {got:?}"
            );
        }
    }

    #[test]
    fn every_resource_problem_together() {
        // Partial, limit below request, and not positive, all at once.
        let got = lines(&res(Some("-1"), Some("-2"), Some("64Mi"), None));
        assert_eq!(got.len(), 3, "{got:?}");
    }
}
