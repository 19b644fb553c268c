//! config.json, schema `v1` (agent contract 4.2), and its load-time rules.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::cli::Mode;

/// One step of a mode.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Step {
    pub name: String,
    /// Relative to `skyhook_dir`.
    pub path: String,
    pub arguments: Vec<String>,
    /// Exit codes that count as success.
    pub returncodes: Vec<i32>,
    /// Ignored: every step runs chrooted on the host.
    pub on_host: bool,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Inverted, as upstream: `true` = always run; `false` = a success flag suppresses re-runs.
    pub idempotence: bool,
    /// Given `[previous, current]` versions as its arguments; upgrade modes only.
    pub upgrade_step: bool,
}

#[derive(Debug, Deserialize)]
struct RawConfig {
    schema_version: String,
    package_name: String,
    package_version: String,
    expected_config_files: Vec<String>,
    modes: BTreeMap<String, Vec<Step>>,
}

/// A validated config.json.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub package_name: String,
    pub package_version: String,
    pub expected_config_files: Vec<String>,
    pub modes: BTreeMap<Mode, Vec<Step>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "config.json is not valid JSON of schema v1 (required: schema_version, package_name, package_version, expected_config_files, modes; steps: name, path, arguments, returncodes, on_host, idempotence, upgrade_step): {0}"
    )]
    Json(#[from] serde_json::Error),
    #[error("schema_version must be \"v1\", got {0:?}")]
    SchemaVersion(String),
    #[error("package_name must not be empty")]
    EmptyPackageName,
    #[error("package_version {0:?} is not a semantic version (MAJOR.MINOR.PATCH[-pre][+build])")]
    Version(String),
    #[error(
        "modes.{0}: not a step mode (valid: apply, apply-check, config, config-check, post-interrupt, post-interrupt-check, upgrade, upgrade-check, uninstall, uninstall-check)"
    )]
    UnknownMode(String),
    #[error("modes.{mode}: step name {name:?} must match [A-Za-z0-9_.-]+")]
    StepName { mode: Mode, name: String },
    #[error("modes.{mode}: step {name:?} has an empty path")]
    EmptyPath { mode: Mode, name: String },
    #[error("modes.{mode}: step {name:?} needs at least one return code")]
    NoReturnCodes { mode: Mode, name: String },
    #[error(
        "modes.{mode}: step {name:?} is an upgrade_step, allowed only in upgrade and upgrade-check"
    )]
    UpgradeStepOutsideUpgrade { mode: Mode, name: String },
    #[error(
        "modes.{mode}: upgrade_step {name:?} must have no arguments (it is given [previous, current] versions)"
    )]
    UpgradeStepArguments { mode: Mode, name: String },
    #[error("config.json has no steps at all")]
    NoSteps,
    #[error("config.json has no non-check mode")]
    NoNonCheckMode,
    #[error("mode {mode} has steps, so its check mode {check} needs steps too")]
    MissingCheck { mode: Mode, check: Mode },
    #[error("modes.{mode}: step {name:?}: file {path} does not exist")]
    MissingStepFile {
        mode: Mode,
        name: String,
        path: String,
    },
}

fn valid_step_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

impl Config {
    /// Parses and validates the JSON text (everything but the step files' existence).
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = serde_json::from_str(text)?;
        if raw.schema_version != "v1" {
            return Err(ConfigError::SchemaVersion(raw.schema_version));
        }
        if raw.package_name.trim().is_empty() {
            return Err(ConfigError::EmptyPackageName);
        }
        // semver::Version is strict SemVer 2.0 (no leading "v", no leading zeros, three parts).
        if semver::Version::parse(&raw.package_version).is_err() {
            return Err(ConfigError::Version(raw.package_version));
        }
        let mut modes = BTreeMap::new();
        for (key, steps) in raw.modes {
            let mode = Mode::parse(&key)
                .filter(|m| *m != Mode::Interrupt)
                .ok_or_else(|| ConfigError::UnknownMode(key.clone()))?;
            for s in &steps {
                let name = s.name.clone();
                if !valid_step_name(&s.name) {
                    return Err(ConfigError::StepName { mode, name });
                }
                if s.path.trim().is_empty() {
                    return Err(ConfigError::EmptyPath { mode, name });
                }
                if s.returncodes.is_empty() {
                    return Err(ConfigError::NoReturnCodes { mode, name });
                }
                if s.upgrade_step && !mode.is_upgrade() {
                    return Err(ConfigError::UpgradeStepOutsideUpgrade { mode, name });
                }
                if s.upgrade_step && !s.arguments.is_empty() {
                    return Err(ConfigError::UpgradeStepArguments { mode, name });
                }
            }
            modes.insert(mode, steps);
        }
        if modes.values().all(Vec::is_empty) {
            return Err(ConfigError::NoSteps);
        }
        if !modes.keys().any(|m| !m.is_check()) {
            return Err(ConfigError::NoNonCheckMode);
        }
        for (mode, steps) in &modes {
            if let Some(check) = mode.check_mode()
                && !steps.is_empty()
                && modes.get(&check).is_none_or(Vec::is_empty)
            {
                return Err(ConfigError::MissingCheck { mode: *mode, check });
            }
        }
        Ok(Config {
            package_name: raw.package_name,
            package_version: raw.package_version,
            expected_config_files: raw.expected_config_files,
            modes,
        })
    }

    /// Every step's file exists under `skyhook_dir`.
    pub fn check_step_files(&self, skyhook_dir: &Path) -> Result<(), ConfigError> {
        for (mode, steps) in &self.modes {
            for s in steps {
                let p = skyhook_dir.join(s.path.trim_start_matches('/'));
                if !p.is_file() {
                    return Err(ConfigError::MissingStepFile {
                        mode: *mode,
                        name: s.name.clone(),
                        path: p.display().to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The steps of a mode (none when the mode is absent).
    pub fn steps(&self, mode: Mode) -> &[Step] {
        self.modes.get(&mode).map(Vec::as_slice).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn step(name: &str, args: &[&str]) -> Value {
        json!({"name": name, "path": "run.sh", "arguments": args, "returncodes": [0],
               "on_host": true, "idempotence": true, "upgrade_step": false})
    }

    fn base() -> Value {
        json!({
            "schema_version": "v1",
            "package_name": "shellscript",
            "package_version": "1.0.0",
            "expected_config_files": [],
            "modes": {"apply": [step("apply", &["apply"])], "apply-check": [step("apply_check", &["apply_check"])]}
        })
    }

    fn parse(v: &Value) -> Result<Config, ConfigError> {
        Config::parse(&v.to_string())
    }

    #[test]
    fn valid_config_parses() {
        let c = parse(&base()).expect("valid");
        assert_eq!(c.package_name, "shellscript");
        assert_eq!(c.steps(Mode::Apply).len(), 1);
        assert_eq!(c.steps(Mode::Config).len(), 0);
        assert_eq!(c.steps(Mode::Apply)[0].arguments, vec!["apply"]);
    }

    #[test]
    fn required_keys_and_values() {
        let mut v = base();
        v.as_object_mut()
            .expect("object")
            .remove("expected_config_files");
        assert!(matches!(parse(&v), Err(ConfigError::Json(_))));

        let mut v = base();
        v["modes"]["apply"][0]
            .as_object_mut()
            .expect("object")
            .remove("idempotence");
        assert!(matches!(parse(&v), Err(ConfigError::Json(_))));

        let mut v = base();
        v["schema_version"] = json!("v2");
        assert!(matches!(parse(&v), Err(ConfigError::SchemaVersion(_))));

        for bad in ["1.0", "v1.0.0", "01.0.0", "1.0.0.0", ""] {
            let mut v = base();
            v["package_version"] = json!(bad);
            assert!(matches!(parse(&v), Err(ConfigError::Version(_))), "{bad}");
        }

        let mut v = base();
        v["modes"]["interrupt"] = json!([]);
        assert!(matches!(parse(&v), Err(ConfigError::UnknownMode(_))));

        let mut v = base();
        v["modes"]["apply"][0]["name"] = json!("has space");
        assert!(matches!(parse(&v), Err(ConfigError::StepName { .. })));

        let mut v = base();
        v["modes"]["apply"][0]["returncodes"] = json!([]);
        assert!(matches!(parse(&v), Err(ConfigError::NoReturnCodes { .. })));
    }

    #[test]
    fn load_time_rules() {
        let mut v = base();
        v["modes"] = json!({"apply": [], "apply-check": []});
        assert!(matches!(parse(&v), Err(ConfigError::NoSteps)));

        let mut v = base();
        v["modes"] = json!({"apply-check": [step("c", &[])]});
        assert!(matches!(parse(&v), Err(ConfigError::NoNonCheckMode)));

        let mut v = base();
        v["modes"]["config"] = json!([step("config", &[])]);
        assert!(matches!(
            parse(&v),
            Err(ConfigError::MissingCheck {
                mode: Mode::Config,
                check: Mode::ConfigCheck
            })
        ));

        let mut v = base();
        v["modes"]["apply"][0]["upgrade_step"] = json!(true);
        assert!(matches!(
            parse(&v),
            Err(ConfigError::UpgradeStepOutsideUpgrade { .. })
        ));

        let mut v = base();
        let mut up = step("up", &["x"]);
        up["upgrade_step"] = json!(true);
        v["modes"]["upgrade"] = json!([up]);
        v["modes"]["upgrade-check"] = json!([step("upc", &[])]);
        assert!(matches!(
            parse(&v),
            Err(ConfigError::UpgradeStepArguments { .. })
        ));
    }

    #[test]
    fn step_files_must_exist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = parse(&base()).expect("valid");
        assert!(matches!(
            c.check_step_files(dir.path()),
            Err(ConfigError::MissingStepFile { .. })
        ));
        std::fs::write(dir.path().join("run.sh"), "#!/bin/sh\n").expect("write");
        c.check_step_files(dir.path()).expect("present");
    }
}
