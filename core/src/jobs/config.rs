//! What the Job builders need from the operator's configuration (upstream-operator.md §1.1), already
//! validated: the builders never read the environment, so a test states every input.

use std::fmt;

use k8s_openapi::api::core::v1::Toleration;
use nodewright_shared::defaults::OperatorDefaults;

/// Upstream's host directory for package copies, flags and history. Kept so flags written by an
/// earlier installation stay valid (DESIGN §4.1).
pub const DEFAULT_COPY_DIR_ROOT: &str = "/var/lib/skyhook";
/// Upstream's host directory for agent logs (DESIGN §4.1).
pub const DEFAULT_AGENT_LOG_ROOT: &str = "/var/log/skyhook";
/// The main container image of every operator pod.
pub const DEFAULT_PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// The agent image running the stage, check and interrupt containers: upstream's agent release
/// v6.4.1, pinned by digest (the one upstream's chart pins). A tag can move; a digest cannot, so a
/// moved tag never runs new code as root on every node, and every node of a rollout runs the same
/// agent. The chart sets the same reference (`operator.agent.image`).
pub const DEFAULT_AGENT_IMAGE: &str = "nvcr.io/nvidia/skyhook/agent:v6.4.1@sha256:dedf73c19455444e2663671368eaf3fcd657ea1417f0d8738c6133ed738b9c52";
/// Upstream's pull policy of the package and agent containers: a moved tag is always re-pulled.
pub const DEFAULT_PACKAGE_IMAGE_PULL_POLICY: &str = "Always";

/// The default runtime-required taint, kubectl syntax (upstream's, renamed).
pub const DEFAULT_RUNTIME_REQUIRED_TAINT: &str =
    "nodewright.nvidia.com=runtime-required:NoSchedule";

/// Operator settings every Job depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobConfig {
    /// Namespace of every Job (the operator's namespace).
    pub namespace: String,
    /// `AGENT_IMAGE`: the agent, unless a package sets `agentImageOverride`.
    pub agent_image: String,
    /// `PAUSE_IMAGE`: the main container of every pod.
    pub pause_image: String,
    /// `COPY_DIR_ROOT`: host directory under which packages are copied (`/var/lib/skyhook`).
    pub copy_dir_root: String,
    /// `AGENT_LOG_ROOT`: host directory of agent logs (`/var/log/skyhook`).
    pub agent_log_root: String,
    /// `IMAGE_PULL_SECRET`: the one `imagePullSecrets` entry of every pod, when set.
    pub image_pull_secret: Option<String>,
    /// `PACKAGE_SERVICE_ACCOUNT`: the ServiceAccount of every package and interrupt pod, when set.
    /// The chart creates one bound to no role, so a package that finds a way to a token still holds
    /// no rights; unset, the pods run as the namespace's `default` ServiceAccount (no token is
    /// mounted either way).
    pub service_account: Option<String>,
    /// `PACKAGE_IMAGE_PULL_POLICY`: `imagePullPolicy` of the package and agent containers
    /// (`Always`, as upstream; `IfNotPresent` or `Never` for nodes whose images are preloaded,
    /// such as air-gapped fleets, where an `Always` pull can only fail).
    pub image_pull_policy: String,
    /// `RUNTIME_REQUIRED_TAINT`: every pod tolerates it.
    pub runtime_required_taint: RuntimeTaint,
    /// `JOB_STAGE_TIMEOUT`, `JOB_BACKOFF_LIMIT` and the TTLs.
    pub defaults: OperatorDefaults,
}

/// A taint as written for kubectl: `key[=value]:Effect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeTaint {
    /// Taint key.
    pub key: String,
    /// Taint value; `None` for `key:Effect`.
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// Why a `RUNTIME_REQUIRED_TAINT` value is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "RUNTIME_REQUIRED_TAINT={value:?} is invalid: {reason} (expected key[=value]:Effect with Effect \
     one of NoSchedule, PreferNoSchedule, NoExecute, e.g. {DEFAULT_RUNTIME_REQUIRED_TAINT:?})"
)]
pub struct TaintParseError {
    /// The value as configured.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl RuntimeTaint {
    /// Whether `taint` is this one as Kubernetes' `MatchTaint` sees it: same key and effect, any value.
    pub fn matches(&self, taint: &k8s_openapi::api::core::v1::Taint) -> bool {
        taint.key == self.key && taint.effect == self.effect
    }

    /// Parses kubectl taint syntax. A removal (`key-`) is rejected: the operator needs a taint to
    /// tolerate, not one to delete.
    pub fn parse(text: &str) -> Result<Self, TaintParseError> {
        let err = |reason| TaintParseError {
            value: text.to_owned(),
            reason,
        };
        let text_trimmed = text.trim();
        if text_trimmed.ends_with('-') {
            return Err(err("a taint removal (trailing '-') is not a taint"));
        }
        let (key_value, effect) = text_trimmed
            .rsplit_once(':')
            .ok_or_else(|| err("missing ':Effect'"))?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(err("unknown effect"));
        }
        let (key, value) = match key_value.split_once('=') {
            Some((key, value)) => (key, Some(value.to_owned())),
            None => (key_value, None),
        };
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(err("the key is empty or contains whitespace"));
        }
        Ok(RuntimeTaint {
            key: key.to_owned(),
            value,
            effect: effect.to_owned(),
        })
    }

    /// The toleration every operator pod carries: `Equal` on key, value and effect (upstream's).
    pub fn toleration(&self) -> Toleration {
        Toleration {
            key: Some(self.key.clone()),
            operator: Some("Equal".to_owned()),
            value: self.value.clone(),
            effect: Some(self.effect.clone()),
            toleration_seconds: None,
        }
    }
}

impl fmt::Display for RuntimeTaint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{}={}:{}", self.key, value, self.effect),
            None => write!(f, "{}:{}", self.key, self.effect),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_default() {
        let taint = RuntimeTaint::parse(DEFAULT_RUNTIME_REQUIRED_TAINT);
        assert_eq!(
            taint,
            Ok(RuntimeTaint {
                key: "nodewright.nvidia.com".into(),
                value: Some("runtime-required".into()),
                effect: "NoSchedule".into(),
            })
        );
        assert_eq!(
            taint.map(|t| t.to_string()).as_deref(),
            Ok(DEFAULT_RUNTIME_REQUIRED_TAINT)
        );
    }

    #[test]
    fn parses_key_only() {
        let taint = RuntimeTaint::parse("example.com/wait:NoExecute");
        assert_eq!(
            taint.map(|t| t.toleration()),
            Ok(Toleration {
                key: Some("example.com/wait".into()),
                operator: Some("Equal".into()),
                value: None,
                effect: Some("NoExecute".into()),
                toleration_seconds: None,
            })
        );
    }

    #[test]
    fn rejects_bad_taints() {
        for bad in [
            "",
            "key",
            "key=value",
            "key:Sometimes",
            ":NoSchedule",
            "key:NoSchedule-",
        ] {
            let err = RuntimeTaint::parse(bad);
            assert!(err.is_err(), "{bad:?} parsed");
            let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(msg.contains("RUNTIME_REQUIRED_TAINT"), "{msg}");
        }
    }
}
