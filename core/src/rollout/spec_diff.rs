//! What changed between the packages of two specs, for people: `kubectl nodewright history` (each
//! revision against the one before), `rollback --dry-run` (the current spec against the revision it
//! would write) and the automatic rollback's Event. One line per package: its version, image and
//! digest as `from -> to`, the other fields by name (a configMap with the keys that changed).

use std::collections::BTreeMap;
use std::fmt;

use nodewright_shared::api::{Interrupt, Package};
use serde::Serialize;

use super::history::Packages;

/// How one package differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "change")]
pub enum PackageChange {
    /// In the new spec only.
    Added {
        /// The package.
        package: String,
        /// Its version.
        version: String,
    },
    /// In the old spec only.
    Removed {
        /// The package.
        package: String,
        /// Its version there.
        version: String,
    },
    /// In both, with different fields.
    Changed {
        /// The package.
        package: String,
        /// What changed, in field order.
        fields: Vec<FieldChange>,
    },
}

/// One changed field of a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    /// The field's name in the spec (`version`, `image`, `configMap`...).
    pub field: &'static str,
    /// Its old value, for the fields shown by value (`-`: unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Its new value, for the fields shown by value (`-`: unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// What changed in a field not shown by value (the keys of a configMap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl fmt::Display for FieldChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.from, &self.to) {
            (Some(from), Some(to)) => write!(f, "{} {from} -> {to}", self.field),
            _ => match &self.detail {
                Some(detail) => write!(f, "{} changed ({detail})", self.field),
                None => write!(f, "{} changed", self.field),
            },
        }
    }
}

impl fmt::Display for PackageChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackageChange::Added { package, version } => write!(f, "{package} {version} added"),
            PackageChange::Removed { package, version } => {
                write!(f, "{package} {version} removed")
            }
            PackageChange::Changed { package, fields } => {
                // The version reads best as the package's own: `driver 1.4.0 -> 1.5.0`.
                let mut parts = Vec::new();
                for field in fields {
                    match (field.field, &field.from, &field.to) {
                        ("version", Some(from), Some(to)) => {
                            parts.insert(0, format!("{package} {from} -> {to}"));
                        }
                        _ => parts.push(field.to_string()),
                    }
                }
                if !fields.iter().any(|c| c.field == "version") {
                    parts.insert(0, package.clone());
                }
                write!(f, "{}", parts.join(", "))
            }
        }
    }
}

/// The changes from `from` to `to`, by package name.
pub fn diff(from: &Packages, to: &Packages) -> Vec<PackageChange> {
    let mut out = Vec::new();
    for (name, old) in from {
        match to.get(name) {
            None => out.push(PackageChange::Removed {
                package: name.clone(),
                version: old.version.clone(),
            }),
            Some(new) => {
                let fields = fields(old, new);
                if !fields.is_empty() {
                    out.push(PackageChange::Changed {
                        package: name.clone(),
                        fields,
                    });
                }
            }
        }
    }
    for (name, new) in to {
        if !from.contains_key(name) {
            out.push(PackageChange::Added {
                package: name.clone(),
                version: new.version.clone(),
            });
        }
    }
    out.sort_by(|a, b| name_of(a).cmp(name_of(b)));
    out
}

fn name_of(change: &PackageChange) -> &str {
    match change {
        PackageChange::Added { package, .. }
        | PackageChange::Removed { package, .. }
        | PackageChange::Changed { package, .. } => package,
    }
}

/// The changes in one line: `driver 1.4.0 -> 1.5.0; tools 1.0.0 added` (`no package changed`).
pub fn summary(changes: &[PackageChange]) -> String {
    if changes.is_empty() {
        return "no package changed".to_owned();
    }
    changes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// An optional value as shown (`-`: unset).
fn shown(value: Option<&str>) -> String {
    value.filter(|v| !v.is_empty()).unwrap_or("-").to_owned()
}

fn by_value(field: &'static str, from: Option<&str>, to: Option<&str>) -> Option<FieldChange> {
    (from != to).then(|| FieldChange {
        field,
        from: Some(shown(from)),
        to: Some(shown(to)),
        detail: None,
    })
}

fn changed<T: PartialEq>(field: &'static str, from: &T, to: &T) -> Option<FieldChange> {
    (from != to).then_some(FieldChange {
        field,
        from: None,
        to: None,
        detail: None,
    })
}

fn interrupt(i: Option<&Interrupt>) -> Option<String> {
    i.map(|i| {
        let kind = serde_json::to_value(i.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        if i.services.is_empty() {
            kind
        } else {
            format!("{kind}[{}]", i.services.join(","))
        }
    })
}

/// The configMap keys added, removed or changed, named (sorted).
fn config_keys(from: &BTreeMap<String, String>, to: &BTreeMap<String, String>) -> Option<String> {
    let mut keys: Vec<&str> = from
        .iter()
        .filter(|(k, v)| to.get(*k) != Some(*v))
        .map(|(k, _)| k.as_str())
        .chain(
            to.keys()
                .filter(|k| !from.contains_key(*k))
                .map(String::as_str),
        )
        .collect();
    keys.sort_unstable();
    keys.dedup();
    (!keys.is_empty()).then(|| format!("keys {}", keys.join(", ")))
}

fn fields(old: &Package, new: &Package) -> Vec<FieldChange> {
    let uninstall = |p: &Package| {
        p.uninstall
            .as_ref()
            .map(|u| format!("enabled={},apply={}", u.enabled, u.apply))
    };
    let mut out: Vec<FieldChange> = [
        by_value("version", Some(&old.version), Some(&new.version)),
        by_value("image", Some(&old.image), Some(&new.image)),
        by_value(
            "containerSHA",
            old.container_sha.as_deref(),
            new.container_sha.as_deref(),
        ),
        by_value(
            "agentImageOverride",
            old.agent_image_override.as_deref(),
            new.agent_image_override.as_deref(),
        ),
        by_value(
            "interrupt",
            interrupt(old.interrupt.as_ref()).as_deref(),
            interrupt(new.interrupt.as_ref()).as_deref(),
        ),
        by_value(
            "uninstall",
            uninstall(old).as_deref(),
            uninstall(new).as_deref(),
        ),
        by_value(
            "stageTimeout",
            old.stage_timeout.as_deref(),
            new.stage_timeout.as_deref(),
        ),
        by_value(
            "gracefulShutdown",
            old.graceful_shutdown.as_deref(),
            new.graceful_shutdown.as_deref(),
        ),
        changed("dependsOn", &old.depends_on, &new.depends_on),
        changed(
            "configInterrupts",
            &old.config_interrupts,
            &new.config_interrupts,
        ),
        changed("env", &old.env, &new.env),
        changed("resources", &old.resources, &new.resources),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(keys) = config_keys(&old.config_map, &new.config_map) {
        out.push(FieldChange {
            field: "configMap",
            from: None,
            to: None,
            detail: Some(keys),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{InterruptType, Uninstall};

    fn package(version: &str) -> Package {
        Package {
            version: version.into(),
            image: "ghcr.io/example/driver".into(),
            ..Package::default()
        }
    }

    #[test]
    fn versions_images_and_other_fields_are_named() {
        let from: Packages = BTreeMap::from([
            ("driver".to_owned(), package("1.4.0")),
            ("old".to_owned(), package("0.1.0")),
            (
                "tuned".to_owned(),
                Package {
                    config_map: BTreeMap::from([
                        ("a.conf".to_owned(), "1".to_owned()),
                        ("b.conf".to_owned(), "1".to_owned()),
                    ]),
                    ..package("2.0.0")
                },
            ),
        ]);
        let to: Packages = BTreeMap::from([
            (
                "driver".to_owned(),
                Package {
                    image: "registry.local/driver".into(),
                    interrupt: Some(Interrupt {
                        kind: InterruptType::Reboot,
                        services: Vec::new(),
                    }),
                    ..package("1.5.0")
                },
            ),
            ("new".to_owned(), package("3.0.0")),
            (
                "tuned".to_owned(),
                Package {
                    config_map: BTreeMap::from([
                        ("a.conf".to_owned(), "2".to_owned()),
                        ("c.conf".to_owned(), "1".to_owned()),
                    ]),
                    uninstall: Some(Uninstall {
                        enabled: true,
                        apply: false,
                    }),
                    ..package("2.0.0")
                },
            ),
        ]);
        let changes = diff(&from, &to);
        let lines: Vec<String> = changes.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "driver 1.4.0 -> 1.5.0, image ghcr.io/example/driver -> registry.local/driver, interrupt - -> reboot",
                "new 3.0.0 added",
                "old 0.1.0 removed",
                "tuned, uninstall - -> enabled=true,apply=false, configMap changed (keys a.conf, b.conf, c.conf)",
            ]
        );
        // Back again: the mirror image.
        assert_eq!(
            summary(&diff(&to, &from)),
            "driver 1.5.0 -> 1.4.0, image registry.local/driver -> ghcr.io/example/driver, interrupt reboot -> -; new 3.0.0 removed; old 0.1.0 added; tuned, uninstall enabled=true,apply=false -> -, configMap changed (keys a.conf, b.conf, c.conf)"
        );
        assert!(diff(&from, &from).is_empty());
        assert_eq!(summary(&[]), "no package changed");
        // The structured form names the fields for scripts.
        let json = serde_json::to_value(&changes[0]).expect("JSON");
        assert_eq!(json["change"], "changed");
        assert_eq!(json["fields"][0]["field"], "version");
        assert_eq!(json["fields"][0]["to"], "1.5.0");
    }

    #[test]
    fn fields_shown_by_name_only_say_they_changed() {
        let from: Packages = BTreeMap::from([("driver".to_owned(), package("1.0.0"))]);
        let mut to = from.clone();
        if let Some(p) = to.get_mut("driver") {
            p.depends_on = BTreeMap::from([("base".to_owned(), "1.0.0".to_owned())]);
            p.stage_timeout = Some("30m".into());
        }
        assert_eq!(
            summary(&diff(&from, &to)),
            "driver, stageTimeout - -> 30m, dependsOn changed"
        );
    }
}
