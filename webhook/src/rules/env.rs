//! Names of a package's environment variables (`spec.packages.<key>.env[i].name`), checked as the
//! cluster's kube-apiserver checks them in the pods of the package's Jobs.
//!
//! The rule depends on the Kubernetes minor: up to 1.31 a name must match
//! `[-._a-zA-Z][-._a-zA-Z0-9]*`; from 1.32 on (feature gate `RelaxedEnvironmentVariableValidation`,
//! beta and on by default in 1.32, GA in 1.34) any printable ASCII but `=` is accepted. A name the
//! apiserver refuses is admitted by the CRD (an `EnvVar` has no pattern) and then fails every Job
//! the operator creates for the package, so the webhook refuses it up front, with the rule of the
//! cluster it runs against (read from the apiserver's `/version`, see [`EnvNames::for_server`]).

use nodewright_shared::api::Package;

use super::findings::{Findings, Path, item};

/// Checks the names of the package at `spec.packages.<key>` against `rule`.
pub(crate) fn check(key: &str, package: &Package, rule: EnvNames, f: &mut Findings) {
    if package.env.is_empty() {
        return;
    }
    let packages = Path::Root("spec.packages");
    let env = packages.child(key);
    let env = env.child("env").render();
    for (i, var) in package.env.iter().enumerate() {
        if let Some(e) = rule.error(&var.name) {
            f.error(format!("{}.name", item(&env, i)), e);
        }
    }
}

/// Which environment variable names the cluster's apiserver accepts in a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EnvNames {
    /// Kubernetes 1.31 (and a server whose version is not known yet: every supported minor accepts
    /// these names): letters, digits, `_`, `-`, `.`, not starting with a digit.
    #[default]
    Strict,
    /// Kubernetes 1.32 and newer: printable ASCII except `=`.
    Relaxed,
}

/// The first minor whose apiserver accepts the relaxed names by default.
pub const RELAXED_SINCE_MINOR: u32 = 32;

impl EnvNames {
    /// The rule of a kube-apiserver that reports `major`.`minor` in `/version` (`minor` may carry a
    /// provider suffix such as `31+`). `None` when the version is not one to reason about (not 1.x,
    /// or no number).
    pub fn for_server(major: &str, minor: &str) -> Option<EnvNames> {
        let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
        let minor: u32 = digits.parse().ok()?;
        (major.trim() == "1").then_some(if minor >= RELAXED_SINCE_MINOR {
            EnvNames::Relaxed
        } else {
            EnvNames::Strict
        })
    }

    /// Why the apiserver would refuse `name`, or `None` when it accepts it.
    pub fn error(self, name: &str) -> Option<String> {
        if name.is_empty() {
            return Some(
                "an environment variable needs a name: set name, or remove the entry".to_owned(),
            );
        }
        if name.contains('=') {
            return Some(format!(
                "environment variable name {name:?} contains '=', which Kubernetes refuses in every pod: rename it (e.g. {:?})",
                suggestion(name)
            ));
        }
        match self {
            EnvNames::Relaxed => (!name.chars().all(|c| (' '..='~').contains(&c))).then(|| {
                format!(
                    "environment variable name {name:?} is not printable ASCII, which Kubernetes refuses in every pod: rename it (e.g. {:?})",
                    suggestion(name)
                )
            }),
            EnvNames::Strict => (!is_strict_name(name)).then(|| {
                format!(
                    "environment variable name {name:?} is refused by this cluster's Kubernetes (before 1.{RELAXED_SINCE_MINOR}, names are letters, digits, '_', '-' and '.', not starting with a digit), so every Job of the package would fail to be created: rename it (e.g. {:?})",
                    suggestion(name)
                )
            }),
        }
    }
}

/// `[-._a-zA-Z][-._a-zA-Z0-9]*`, the rule of Kubernetes before 1.32.
fn is_strict_name(name: &str) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    name.chars().next().is_some_and(|c| !c.is_ascii_digit()) && name.chars().all(allowed)
}

/// A name every supported minor accepts, derived from `name`: other characters become `_`, and a
/// leading digit gets a `_` in front.
fn suggestion(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::EnvVar;

    use super::super::testing::{nodewright, package};
    use super::*;
    use crate::cache::StaticView;
    use crate::rules::{Restrictions, validate_nodewright};

    /// The verdict on a NodeWright whose package `pkg` has these environment variable names, from a
    /// webhook whose apiserver has `rule`.
    fn verdict(names: &[&str], rule: EnvNames) -> crate::rules::findings::Verdict {
        let mut p = package("1.0.0");
        p.env = names
            .iter()
            .map(|n| EnvVar {
                name: (*n).to_owned(),
                value: Some("1".to_owned()),
                ..EnvVar::default()
            })
            .collect();
        let view = StaticView {
            env_names: rule,
            ..StaticView::default()
        };
        validate_nodewright(
            &nodewright("env", [("pkg", p)]),
            None,
            &view,
            &Restrictions::default(),
        )
    }

    #[test]
    fn a_nodewright_is_refused_naming_each_env_entry_the_apiserver_would_refuse() {
        let v = verdict(&["OK", "MY VAR", "A=B"], EnvNames::Strict);
        let paths: Vec<&str> = v.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.packages.pkg.env[1].name",
                "spec.packages.pkg.env[2].name"
            ],
            "{v:?}"
        );
        let v = verdict(&["OK", "MY VAR", "A=B"], EnvNames::Relaxed);
        assert_eq!(v.errors.len(), 1, "{v:?}");
        assert_eq!(v.errors[0].path, "spec.packages.pkg.env[2].name", "{v:?}");
        assert!(
            verdict(&["MY VAR", "1ABC"], EnvNames::Relaxed)
                .errors
                .is_empty()
        );
    }

    #[test]
    fn the_server_version_picks_the_rule() {
        assert_eq!(EnvNames::for_server("1", "31"), Some(EnvNames::Strict));
        assert_eq!(EnvNames::for_server("1", "31+"), Some(EnvNames::Strict));
        assert_eq!(EnvNames::for_server("1", "32"), Some(EnvNames::Relaxed));
        assert_eq!(EnvNames::for_server("1", "37"), Some(EnvNames::Relaxed));
        assert_eq!(EnvNames::for_server("1", ""), None);
        assert_eq!(EnvNames::for_server("2", "0"), None);
        assert_eq!(EnvNames::default(), EnvNames::Strict);
    }

    #[test]
    fn strict_names_are_what_1_31_accepts() {
        for ok in [
            "MY_VAR",
            "my.env-name",
            "_X1",
            ".hidden",
            "-dash",
            "MyEnvName1",
        ] {
            assert_eq!(EnvNames::Strict.error(ok), None, "{ok}");
        }
        for bad in ["1ABC", "MY VAR", "a:b", "ü", "x/y"] {
            let e = EnvNames::Strict.error(bad).expect(bad);
            assert!(e.contains("before 1.32") && e.contains("rename it"), "{e}");
        }
        assert!(
            EnvNames::Strict
                .error("1 A")
                .is_some_and(|e| e.contains("\"_1_A\""))
        );
    }

    #[test]
    fn relaxed_names_are_printable_ascii_without_equals() {
        for ok in ["MY VAR", "1ABC", "a:b", "x/y", "~!@#"] {
            assert_eq!(EnvNames::Relaxed.error(ok), None, "{ok}");
        }
        assert!(
            EnvNames::Relaxed
                .error("ü")
                .is_some_and(|e| e.contains("printable ASCII"))
        );
        assert!(
            EnvNames::Relaxed
                .error("tab\there")
                .is_some_and(|e| e.contains("printable ASCII"))
        );
    }

    #[test]
    fn equals_and_empty_names_are_refused_everywhere() {
        for rule in [EnvNames::Strict, EnvNames::Relaxed] {
            assert!(
                rule.error("A=B")
                    .is_some_and(|e| e.contains("'='") && e.contains("\"A_B\""))
            );
            assert!(rule.error("").is_some_and(|e| e.contains("needs a name")));
        }
    }
}
