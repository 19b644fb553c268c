//! Rules for one entry of `spec.packages` (key K): name, version, image, configInterrupts, resources,
//! uninstall, stageTimeout and gracefulShutdown. Dependencies between packages are in `graph`.

use std::borrow::Cow;
use std::sync::LazyLock;

use nodewright_shared::api::{PACKAGE_NAME_PATTERN, Package};
use nodewright_shared::deadline::check_stage_timeout;
use nodewright_shared::duration::GoDuration;
use nodewright_shared::glob;
use regex::Regex;

use super::findings::{Findings, Path, short_list};
use super::labels::{joined_label_value_is_valid, label_value_errors};
use super::{image, resources, semver};

/// The package-name pattern, compiled once. Compiling a constant cannot fail at runtime in a way
/// input could influence; a test pins that it compiles.
static PACKAGE_NAME: LazyLock<Result<Regex, regex::Error>> =
    LazyLock::new(|| Regex::new(PACKAGE_NAME_PATTERN));

/// Whether `key` matches [`PACKAGE_NAME_PATTERN`].
fn is_package_name(key: &str) -> bool {
    PACKAGE_NAME.as_ref().is_ok_and(|re| re.is_match(key))
}

/// The version as Go's semver package needs it: upstream prepends `v` unless the version starts
/// with one, so `1.2.3` and `v1.2.3` are both accepted.
pub fn semver_text(version: &str) -> Cow<'_, str> {
    if version.starts_with('v') {
        Cow::Borrowed(version)
    } else {
        Cow::Owned(format!("v{version}"))
    }
}

/// Checks the package at `spec.packages.<key>`.
pub fn check(key: &str, package: &Package, f: &mut Findings) {
    let packages = Path::Root("spec.packages");
    let path = packages.child(key);
    let at = |field: &str| path.child(field).render();

    if let Some(name) = &package.name
        && name != key
    {
        f.error(
            at("name"),
            format!(
                "name {name:?} differs from the package key {key:?}: leave name unset (it is filled from the key) or set it to {key:?}"
            ),
        );
    }
    if !is_package_name(key) {
        f.error(
            &path,
            format!(
                "package name {key:?} is not valid: use 2 to 43 lowercase letters, digits or '-', starting and ending with a letter (pattern {PACKAGE_NAME_PATTERN})"
            ),
        );
    }
    check_version(key, &package.version, &path.child("version"), f);
    for e in image::image_errors(&package.image, &package.version) {
        f.error(at("image"), e);
    }
    check_config_interrupts(package, &path.child("configInterrupts"), f);
    if let Some(r) = &package.resources {
        resources::check(r, &path.child("resources"), f);
    }
    if let Some(u) = &package.uninstall
        && u.apply
        && !u.enabled
    {
        f.error(
            &path.child("uninstall").child("apply"),
            "uninstall.apply requires uninstall.enabled to be true: set uninstall.enabled: true (the package must ship uninstall scripts), or remove uninstall.apply",
        );
    }
    if let Some(t) = &package.stage_timeout
        && let Err(e) = check_stage_timeout(t)
    {
        f.error(at("stageTimeout"), e.to_string());
    }
    if let Some(g) = &package.graceful_shutdown {
        match GoDuration::parse(g) {
            Err(e) => f.error(at("gracefulShutdown"), e.to_string()),
            Ok(d) if d.is_negative() => f.error(
                at("gracefulShutdown"),
                format!("{g:?} is negative: use a positive duration such as \"30s\", or \"0\" to stop the pods at once"),
            ),
            Ok(_) => {}
        }
    }
}

/// `version` is a semantic version (it is the image tag and is ordered for downgrades) and, as
/// `<K>-<version>`, a valid label value (Jobs and pods are labelled with it).
fn check_version(key: &str, version: &str, path: &Path<'_>, f: &mut Findings) {
    if version.is_empty() {
        f.error(
            path,
            "version is empty: set the package version, a semantic version such as 1.2.3 (it is also the image tag)",
        );
        return;
    }
    // `semver::parse(&semver_text(version))`, without building the v-prefixed text.
    if let Err(e) = semver::parse_after_v(version.strip_prefix('v').unwrap_or(version)) {
        f.error(
            path,
            format!(
                "version {version:?} is not a valid semantic version ({e}): use MAJOR[.MINOR[.PATCH]] with an optional -PRERELEASE, such as 1.2.3 or 1.2.3-rc.1 (it is also the image tag)"
            ),
        );
        // The label-value check would only repeat the problem in other words.
        return;
    }
    if joined_label_value_is_valid(key, version) {
        return;
    }
    let label = format!("{key}-{version}");
    let problems = label_value_errors(&label);
    if !problems.is_empty() {
        let fix = if version.contains('+') {
            "drop the +build metadata (label values cannot contain '+')"
        } else {
            "shorten the version or the package name"
        };
        f.error(
            path,
            format!(
                "version {version:?} cannot be used in the label value {label:?} that marks this package's Jobs ({}): {fix}",
                problems.join("; ")
            ),
        );
    }
}

/// Every `configInterrupts` key names a `configMap` key, or is a `*` glob matching at least one.
fn check_config_interrupts(package: &Package, path: &Path<'_>, f: &mut Findings) {
    let mut unmatched = package
        .config_interrupts
        .keys()
        .filter(|pattern| !package.config_map.contains_key(*pattern))
        .peekable();
    if unmatched.peek().is_none() {
        return;
    }
    let keys: Vec<&str> = package.config_map.keys().map(String::as_str).collect();
    let available = if keys.is_empty() {
        "configMap has no keys".to_owned()
    } else {
        format!("configMap keys: {}", short_list(&keys, 10))
    };
    for pattern in unmatched {
        let at = path.child(pattern);
        if pattern.contains('*') {
            // As upstream: only patterns with a '*' are globs; a malformed one matches nothing.
            let mut malformed = None;
            let mut matched = false;
            for key in &keys {
                match glob::matches(pattern, key) {
                    Ok(true) => {
                        matched = true;
                        break;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        malformed = Some(e);
                        break;
                    }
                }
            }
            if matched {
                continue;
            }
            let why = match malformed {
                Some(e) => format!(" (the pattern is malformed: {e})"),
                None => String::new(),
            };
            f.error(
                &at,
                format!(
                    "config interrupt glob {pattern:?} does not match any configMap keys{why}: fix the pattern or add a matching key to configMap ({available})"
                ),
            );
        } else {
            f.error(
                &at,
                format!(
                    "config interrupt for key that doesn't exist: {pattern} doesn't exist as a configmap key: use one of the configMap keys, or a glob with '*' ({available})"
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{Interrupt, InterruptType, Uninstall};

    fn base() -> Package {
        Package {
            version: "1.0.0".to_owned(),
            image: "ghcr.io/example/tools".to_owned(),
            ..Package::default()
        }
    }

    fn lines(key: &str, p: &Package) -> Vec<String> {
        let mut f = Findings::default();
        check(key, p, &mut f);
        f.finish().errors.iter().map(ToString::to_string).collect()
    }

    fn assert_ok(key: &str, p: &Package) {
        assert_eq!(lines(key, p), Vec::<String>::new(), "{key}: {p:?}");
    }

    fn assert_err(key: &str, p: &Package, want: &str) {
        let got = lines(key, p);
        assert!(
            got.iter().any(|l| l.contains(want)),
            "{want:?} not in {got:?}"
        );
    }

    /// The CRD's version rule (CEL, checked by the apiserver even when this webhook is not asked)
    /// accepts exactly the versions these rules accept, for a short key.
    #[test]
    fn the_crds_version_rule_is_this_check() {
        let pattern =
            regex::Regex::new(nodewright_shared::api::PACKAGE_VERSION_PATTERN).expect("compiles");
        let crd = |v: &str| pattern.is_match(v) && !v.ends_with('-');
        let versions = [
            "1",
            "1.2",
            "1.2.3",
            "v1",
            "v1.2",
            "v1.2.3",
            "0.0.0",
            "10.20.30",
            "1.2.3-rc.1",
            "1.2.3-0",
            "1.2.3-alpha-1",
            "1.2.3-x.7.z.92",
            "1.2.3-0a",
            "v2.0.0-rc-1",
            "1.2.3-a-",
            "",
            "v",
            "01",
            "1.02",
            "1.2.03",
            "1.2.3-01",
            "1.2-rc",
            "1-rc",
            "1.2.3+build",
            "1.2.3-rc+b",
            "1.2.3.4",
            "1..2",
            "1.2.",
            ".1",
            "1 2",
            "1.2.3 ",
            "1.2/3",
            "../1",
            "1.2.3-rc..1",
            "1.2.3-",
            "1.2.3-_x",
            "V1.2.3",
            "1.2.3-ä",
            "vv1",
            "1.2.3-rc/1",
        ];
        for v in versions {
            let p = Package {
                version: v.to_owned(),
                ..base()
            };
            let webhook = !lines("tools", &p).iter().any(|l| l.contains(".version:"));
            assert_eq!(crd(v), webhook, "{v:?}: CRD {} webhook {}", crd(v), webhook);
        }
    }

    #[test]
    fn the_name_pattern_compiles() {
        assert!(PACKAGE_NAME.is_ok());
    }

    #[test]
    fn names() {
        assert_ok("tools", &base());
        assert_ok("ab", &base());
        assert_ok(&format!("a{}z", "-".repeat(41)), &base());
        assert_ok(
            "tools",
            &Package {
                name: Some("tools".into()),
                ..base()
            },
        );
        assert_err(
            "tools",
            &Package {
                name: Some("other".into()),
                ..base()
            },
            "spec.packages.tools.name: name \"other\" differs from the package key \"tools\"",
        );
        for bad in [
            "Bad_Name",
            "a",
            "1ab",
            "ab-",
            "ab1",
            &format!("a{}z", "b".repeat(42)),
            "ab\nab",
        ] {
            assert_err(bad, &base(), "is not valid: use 2 to 43 lowercase letters");
        }
    }

    #[test]
    fn versions() {
        for v in [
            "1",
            "1.2",
            "1.2.3",
            "v1.2.3",
            "1.2.3-rc.1",
            "0.0.0-20240706",
        ] {
            assert_ok(
                "tools",
                &Package {
                    version: v.into(),
                    ..base()
                },
            );
        }
        let cases = [
            ("", "spec.packages.tools.version: version is empty"),
            ("01.2.3", "leading zero"),
            (
                "2024/07/06",
                "version \"2024/07/06\" is not a valid semantic version",
            ),
            ("1-rc.1", "needs all three numbers"),
            ("V1.2.3", "is not a valid semantic version"),
            ("latest", "is not a valid semantic version"),
            (
                "1.0.0+build.7",
                "cannot be used in the label value \"tools-1.0.0+build.7\"",
            ),
            ("1.0.0+build.7", "drop the +build metadata"),
        ];
        for (v, want) in cases {
            assert_err(
                "tools",
                &Package {
                    version: v.into(),
                    ..base()
                },
                want,
            );
        }
        // Valid semver, but too long for a label value with the package name in front.
        let long = format!("1.0.0-{}", "a".repeat(55));
        assert_err(
            "tools",
            &Package {
                version: long,
                ..base()
            },
            "at most 63 characters",
        );
        // Not-semver is reported once, not again as a label problem.
        assert_eq!(
            lines(
                "tools",
                &Package {
                    version: "2024/07/06".into(),
                    ..base()
                }
            )
            .len(),
            1
        );
    }

    #[test]
    fn images() {
        assert_ok(
            "tools",
            &Package {
                image: "registry:5000/tools".into(),
                ..base()
            },
        );
        assert_err(
            "tools",
            &Package {
                image: "ghcr.io/t:1.0.0".into(),
                ..base()
            },
            "spec.packages.tools.image: image \"ghcr.io/t:1.0.0\" carries the tag",
        );
        assert_err(
            "tools",
            &Package {
                image: "ghcr.io/t@sha256:00".into(),
                ..base()
            },
            "containerSHA",
        );
        assert_err(
            "tools",
            &Package {
                image: String::new(),
                ..base()
            },
            "image is empty",
        );
    }

    #[test]
    fn config_interrupts() {
        let interrupt = Interrupt {
            kind: InterruptType::Noop,
            services: vec![],
        };
        let with = |keys: &[&str], patterns: &[&str]| Package {
            config_map: keys
                .iter()
                .map(|k| ((*k).to_owned(), "x".to_owned()))
                .collect(),
            config_interrupts: patterns
                .iter()
                .map(|p| ((*p).to_owned(), interrupt.clone()))
                .collect(),
            ..base()
        };
        assert_ok("tools", &with(&["a.conf"], &["a.conf"]));
        assert_ok("tools", &with(&["a.conf", "b.txt"], &["*.conf"]));
        assert_ok("tools", &with(&["a.conf"], &["*"]));
        assert_ok("tools", &with(&["profile-a.conf"], &["profile-?.*"]));
        assert_err(
            "tools",
            &with(&["a.conf"], &["*.toml"]),
            "spec.packages.tools.configInterrupts[*.toml]: config interrupt glob \"*.toml\" does not match any configMap keys",
        );
        assert_err(
            "tools",
            &with(&["a.conf"], &["b.conf"]),
            "config interrupt for key that doesn't exist: b.conf doesn't exist as a configmap key",
        );
        assert_err(
            "tools",
            &with(&["a.conf"], &["b.conf"]),
            "(configMap keys: a.conf)",
        );
        assert_err("tools", &with(&[], &["b.conf"]), "configMap has no keys");
        // Without '*' a pattern is a literal key, as upstream.
        assert_err(
            "tools",
            &with(&["a.conf"], &["?.conf"]),
            "doesn't exist as a configmap",
        );
        assert_err(
            "tools",
            &with(&["a.conf"], &["[*.conf"]),
            "the pattern is malformed",
        );
    }

    /// `[!a]` is the class {`!`, `a`} (Go's `filepath.Match`), not "anything but `a`": admission
    /// accepts `[!a]*` exactly for the keys the operator will select it for (its config_updates
    /// tests), and `^` is the negation.
    #[test]
    fn a_bang_class_glob_is_validated_as_the_operator_matches_it() {
        let interrupt = Interrupt {
            kind: InterruptType::Noop,
            services: vec![],
        };
        let with = |key: &str, pattern: &str| Package {
            config_map: [(key.to_owned(), "x".to_owned())].into(),
            config_interrupts: [(pattern.to_owned(), interrupt.clone())].into(),
            ..base()
        };
        assert_ok("tools", &with("!x", "[!a]*"));
        assert_ok("tools", &with("ax", "[!a]*"));
        assert_err(
            "tools",
            &with("bx", "[!a]*"),
            "config interrupt glob \"[!a]*\" does not match any configMap keys: fix the pattern",
        );
        assert_ok("tools", &with("bx", "[^a]*"));
        assert_err(
            "tools",
            &with("ax", "[^a]*"),
            "config interrupt glob \"[^a]*\" does not match any configMap keys",
        );
        // `]` right after `[` is malformed in Go, so this matches nothing (not even "]x").
        assert_err("tools", &with("]x", "[]a]*"), "the pattern is malformed");
    }

    #[test]
    fn uninstall() {
        for (enabled, apply) in [(false, false), (true, false), (true, true)] {
            assert_ok(
                "tools",
                &Package {
                    uninstall: Some(Uninstall { enabled, apply }),
                    ..base()
                },
            );
        }
        assert_err(
            "tools",
            &Package {
                uninstall: Some(Uninstall {
                    enabled: false,
                    apply: true,
                }),
                ..base()
            },
            "spec.packages.tools.uninstall.apply: uninstall.apply requires uninstall.enabled to be true",
        );
    }

    #[test]
    fn stage_timeouts() {
        for t in ["0", "45s", "1h30m", "596523h14m7s", "300ms"] {
            assert_ok(
                "tools",
                &Package {
                    stage_timeout: Some(t.into()),
                    ..base()
                },
            );
        }
        let cases = [
            (
                "600000h",
                "spec.packages.tools.stageTimeout: \"600000h\" is too large",
            ),
            ("600000h", "the largest accepted value is \"596523h14m7s\""),
            (
                "-5m",
                "spec.packages.tools.stageTimeout: \"-5m\" is negative",
            ),
            ("2d", "spec.packages.tools.stageTimeout: unknown unit \"d\""),
            (
                "soon",
                "spec.packages.tools.stageTimeout: invalid duration \"soon\"",
            ),
            ("30", "missing unit"),
        ];
        for (t, want) in cases {
            assert_err(
                "tools",
                &Package {
                    stage_timeout: Some(t.into()),
                    ..base()
                },
                want,
            );
        }
    }

    #[test]
    fn graceful_shutdown() {
        for g in ["0", "30s", "1m30s"] {
            assert_ok(
                "tools",
                &Package {
                    graceful_shutdown: Some(g.into()),
                    ..base()
                },
            );
        }
        assert_err(
            "tools",
            &Package {
                graceful_shutdown: Some("thirty seconds".into()),
                ..base()
            },
            "spec.packages.tools.gracefulShutdown: invalid duration",
        );
        assert_err(
            "tools",
            &Package {
                graceful_shutdown: Some("-5s".into()),
                ..base()
            },
            "spec.packages.tools.gracefulShutdown: \"-5s\" is negative",
        );
    }
}
