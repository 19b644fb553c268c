//! The interrupt argument (base64 of `{type, services?}`) and the commands each type runs.

use base64::Engine as _;
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterruptType {
    NodeRestart,
    ServiceRestart,
    RestartAllServices,
    NoOp,
    ScriptInterrupt,
}

impl InterruptType {
    pub fn as_str(self) -> &'static str {
        match self {
            InterruptType::NodeRestart => "node_restart",
            InterruptType::ServiceRestart => "service_restart",
            InterruptType::RestartAllServices => "restart_all_services",
            InterruptType::NoOp => "no_op",
            InterruptType::ScriptInterrupt => "script_interrupt",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Interrupt {
    #[serde(rename = "type")]
    pub kind: InterruptType,
    #[serde(default)]
    pub services: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum InterruptError {
    #[error("interrupt argument is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error(
        "interrupt argument is not the JSON {{\"type\": node_restart|service_restart|restart_all_services|no_op, \"services\": [..]}}: {0}"
    )]
    Json(#[from] serde_json::Error),
    #[error("service_restart needs at least one service")]
    NoServices,
}

/// Decodes the base64 (padded or not) JSON interrupt.
pub fn decode(b64: &str) -> Result<Interrupt, InterruptError> {
    let b64 = b64.trim();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(b64))?;
    let i: Interrupt = serde_json::from_slice(&bytes)?;
    if i.kind == InterruptType::ServiceRestart && i.services.is_empty() {
        return Err(InterruptError::NoServices);
    }
    Ok(i)
}

/// The commands, in order, each run once per resource id (upstream's lists). `no_op` and
/// `script_interrupt` have none (`no_op` only writes its flag).
pub fn commands(i: &Interrupt) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match i.kind {
        InterruptType::NodeRestart => vec![v(&["reboot"])],
        InterruptType::ServiceRestart => std::iter::once(v(&["systemctl", "daemon-reload"]))
            .chain(
                i.services
                    .iter()
                    .map(|s| v(&["systemctl", "restart", s.as_str()])),
            )
            .collect(),
        InterruptType::RestartAllServices => vec![v(&["service", "procps", "force-reload"])],
        InterruptType::NoOp | InterruptType::ScriptInterrupt => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn decodes_every_type() {
        let i = decode(&b64(
            r#"{"type":"service_restart","services":["containerd","kubelet"]}"#,
        ))
        .expect("service");
        assert_eq!(i.kind, InterruptType::ServiceRestart);
        assert_eq!(i.services, vec!["containerd", "kubelet"]);
        assert_eq!(
            commands(&i),
            vec![
                vec!["systemctl", "daemon-reload"],
                vec!["systemctl", "restart", "containerd"],
                vec!["systemctl", "restart", "kubelet"]
            ]
        );
        let i = decode(&b64(r#"{"type":"node_restart"}"#)).expect("reboot");
        assert_eq!(commands(&i), vec![vec!["reboot"]]);
        let i = decode(&b64(r#"{"type":"no_op"}"#)).expect("noop");
        assert!(commands(&i).is_empty());
        let i = decode(&b64(r#"{"type":"restart_all_services"}"#)).expect("all");
        assert_eq!(commands(&i)[0][0], "service");
        // Unpadded base64 too.
        let unpadded = b64(r#"{"type":"no_op"}"#).trim_end_matches('=').to_string();
        assert_eq!(
            decode(&unpadded).expect("unpadded").kind,
            InterruptType::NoOp
        );
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(decode("!!!"), Err(InterruptError::Base64(_))));
        assert!(matches!(
            decode(&b64(r#"{"type":"reboot"}"#)),
            Err(InterruptError::Json(_))
        ));
        assert!(matches!(decode(&b64("[]")), Err(InterruptError::Json(_))));
        assert!(matches!(
            decode(&b64(r#"{"type":"service_restart"}"#)),
            Err(InterruptError::NoServices)
        ));
    }
}
