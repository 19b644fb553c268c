//! The environment variables the agent reads (agent contract 4.4).

use std::collections::BTreeMap;

pub const RESOURCE_ID: &str = "SKYHOOK_RESOURCE_ID";
pub const DATA_DIR: &str = "SKYHOOK_DATA_DIR";
pub const ROOT_DIR: &str = "SKYHOOK_ROOT_DIR";
pub const LOG_DIR: &str = "SKYHOOK_LOG_DIR";
pub const WRITE_LOGS: &str = "SKYHOOK_AGENT_WRITE_LOGS";
pub const COPY_RESOLV: &str = "COPY_RESOLV";
pub const ALWAYS_RUN_STEP: &str = "OVERLAY_ALWAYS_RUN_STEP";
/// Only with this set to `1` does a `node_restart` interrupt really run `reboot`.
pub const ALLOW_REBOOT: &str = "NODEWRIGHT_AGENT_ALLOW_REBOOT";

/// `SKYHOOK_RESOURCE_ID` = `<skyhook>-<uid>-<generation>_<package>_<version>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceId {
    pub raw: String,
    pub skyhook: String,
    pub package: String,
    pub version: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    #[error(
        "{RESOURCE_ID} is not set; the operator sets it to <nodewright>-<uid>-<generation>_<package>_<version>"
    )]
    MissingResourceId,
    #[error(
        "{RESOURCE_ID}={0:?} must have exactly 3 non-empty parts separated by '_' (<nodewright>-<uid>-<generation>_<package>_<version>)"
    )]
    BadResourceId(String),
    #[error("{name}={value:?} must be an absolute path")]
    NotAbsolute { name: &'static str, value: String },
}

impl ResourceId {
    pub fn parse(raw: &str) -> Result<ResourceId, EnvError> {
        let parts: Vec<&str> = raw.split('_').collect();
        match parts.as_slice() {
            [s, p, v] if !s.is_empty() && !p.is_empty() && !v.is_empty() => Ok(ResourceId {
                raw: raw.to_string(),
                skyhook: s.to_string(),
                package: p.to_string(),
                version: v.to_string(),
            }),
            _ => Err(EnvError::BadResourceId(raw.to_string())),
        }
    }
}

/// The agent's settings from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentEnv {
    pub resource_id: ResourceId,
    /// Legacy copy source when `R+C` does not exist.
    pub data_dir: String,
    /// Host path of flags, history and interrupt flags.
    pub root_dir: String,
    /// Host path of the step logs.
    pub log_dir: String,
    pub write_logs: bool,
    pub copy_resolv: bool,
    pub always_run_step: bool,
    pub allow_reboot: bool,
}

fn flag(env: &BTreeMap<String, String>, name: &str, default: bool) -> bool {
    match env.get(name) {
        None => default,
        Some(v) => matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes"),
    }
}

fn path(
    env: &BTreeMap<String, String>,
    name: &'static str,
    default: &str,
) -> Result<String, EnvError> {
    let value = env.get(name).map(String::as_str).unwrap_or(default);
    if !value.starts_with('/') {
        return Err(EnvError::NotAbsolute {
            name,
            value: value.to_string(),
        });
    }
    Ok(value.trim_end_matches('/').to_string())
}

impl AgentEnv {
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<AgentEnv, EnvError> {
        let raw = env.get(RESOURCE_ID).ok_or(EnvError::MissingResourceId)?;
        Ok(AgentEnv {
            resource_id: ResourceId::parse(raw)?,
            data_dir: path(env, DATA_DIR, "/skyhook-package")?,
            root_dir: path(env, ROOT_DIR, "/etc/skyhook")?,
            log_dir: path(env, LOG_DIR, "/var/log/skyhook")?,
            write_logs: flag(env, WRITE_LOGS, true),
            copy_resolv: flag(env, COPY_RESOLV, true),
            always_run_step: flag(env, ALWAYS_RUN_STEP, false),
            allow_reboot: env.get(ALLOW_REBOOT).map(String::as_str) == Some("1"),
        })
    }
}

/// An environment map from pairs, for the crate's tests.
#[cfg(test)]
pub(crate) fn env_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::env_map as env;
    use super::*;

    #[test]
    fn resource_id_has_three_parts() {
        let id = ResourceId::parse("nw-1234-abcd-2_shellscript_1.0.0").expect("valid");
        assert_eq!(id.skyhook, "nw-1234-abcd-2");
        assert_eq!(id.package, "shellscript");
        assert_eq!(id.version, "1.0.0");
        for bad in ["", "a", "a_b", "a_b_c_d", "a__c", "_b_c", "a_b_"] {
            assert_eq!(
                ResourceId::parse(bad),
                Err(EnvError::BadResourceId(bad.to_string())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(
            AgentEnv::from_env(&env(&[])),
            Err(EnvError::MissingResourceId)
        );
        let e = AgentEnv::from_env(&env(&[(RESOURCE_ID, "a_b_c")])).expect("defaults");
        assert_eq!(e.root_dir, "/etc/skyhook");
        assert_eq!(e.log_dir, "/var/log/skyhook");
        assert_eq!(e.data_dir, "/skyhook-package");
        assert!(e.write_logs && e.copy_resolv && !e.always_run_step && !e.allow_reboot);

        let e = AgentEnv::from_env(&env(&[
            (RESOURCE_ID, "a_b_c"),
            (ROOT_DIR, "/var/lib/skyhook/nw/"),
            (LOG_DIR, "/var/log/skyhook/nw"),
            (WRITE_LOGS, "false"),
            (COPY_RESOLV, "False"),
            (ALWAYS_RUN_STEP, "true"),
            (ALLOW_REBOOT, "1"),
        ]))
        .expect("overrides");
        assert_eq!(e.root_dir, "/var/lib/skyhook/nw");
        assert!(!e.write_logs && !e.copy_resolv && e.always_run_step && e.allow_reboot);

        assert!(matches!(
            AgentEnv::from_env(&env(&[(RESOURCE_ID, "a_b_c"), (LOG_DIR, "rel")])),
            Err(EnvError::NotAbsolute { .. })
        ));
    }
}
