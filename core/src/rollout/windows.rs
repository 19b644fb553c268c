//! A NodeWright's maintenance-window schedule, from its DeploymentPolicy's `spec.windows`
//! ([`nodewright_shared::window`]): outside every window the pass admits no new node (nodes already
//! admitted finish their stages), and the status says when the next window opens.

use k8s_openapi::jiff::Timestamp;
use nodewright_shared::api::DeploymentPolicy;
use nodewright_shared::window::{self, WindowState, Windows};

/// When new nodes may start.
#[derive(Debug, Clone, Default)]
pub enum Schedule {
    /// No policy, or a policy without windows.
    #[default]
    Always,
    /// The policy's windows.
    Windows(Windows),
    /// The policy's windows do not parse (admission was bypassed): nothing new starts until they
    /// are fixed, the safe reading of a schedule nobody can evaluate.
    Invalid(String),
}

impl Schedule {
    /// The schedule of `policy` (none: always).
    pub fn of(policy: Option<&DeploymentPolicy>) -> Self {
        let Some(policy) = policy.filter(|p| !p.spec.windows.is_empty()) else {
            return Schedule::Always;
        };
        match window::parse(&policy.spec.windows) {
            Ok(w) => Schedule::Windows(w),
            Err(problems) => Schedule::Invalid(
                problems
                    .iter()
                    .map(|p| format!("spec.{p}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        }
    }

    /// Where `now` stands.
    pub fn state(&self, now: Timestamp) -> WindowState {
        match self {
            Schedule::Always => WindowState::Always,
            Schedule::Windows(w) => w.state(now),
            Schedule::Invalid(_) => WindowState::Closed { opens: None },
        }
    }

    /// The `status.waitingFor` text while closed at `now`.
    pub fn waiting(&self, now: Timestamp) -> Option<String> {
        match self {
            Schedule::Invalid(problems) => Some(format!(
                "{} (the DeploymentPolicy's windows are invalid: {problems})",
                window::WAITING
            )),
            _ => self.state(now).waiting(),
        }
    }

    /// One line per window (`kubectl nodewright plan`); empty when always open.
    pub fn describe(&self) -> Vec<String> {
        match self {
            Schedule::Always => Vec::new(),
            Schedule::Windows(w) => w.describe(),
            Schedule::Invalid(problems) => vec![format!("invalid: {problems}")],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_shared::api::{DeploymentPolicySpec, MaintenanceWindow};

    fn policy(windows: Vec<MaintenanceWindow>) -> DeploymentPolicy {
        DeploymentPolicy::new(
            "p",
            DeploymentPolicySpec {
                windows,
                ..DeploymentPolicySpec::default()
            },
        )
    }

    fn window(start: &str, end: &str, zone: &str) -> MaintenanceWindow {
        MaintenanceWindow {
            days: Vec::new(),
            start: start.into(),
            end: end.into(),
            time_zone: Some(zone.into()),
        }
    }

    #[test]
    fn no_policy_or_no_window_is_always_open() {
        let now: Timestamp = "2026-12-03T12:00:00Z".parse().expect("time");
        assert!(Schedule::of(None).state(now).is_open());
        assert!(Schedule::of(Some(&policy(vec![]))).state(now).is_open());
        assert_eq!(Schedule::of(None).waiting(now), None);
    }

    #[test]
    fn an_invalid_schedule_starts_nothing_and_says_why() {
        let now: Timestamp = "2026-12-03T12:00:00Z".parse().expect("time");
        let s = Schedule::of(Some(&policy(vec![window(
            "22:00",
            "04:00",
            "Nowhere/City",
        )])));
        assert!(!s.state(now).is_open());
        let text = s.waiting(now).expect("waiting");
        assert!(
            text.contains("spec.windows[0].timeZone: \"Nowhere/City\" is not an IANA time zone"),
            "{text}"
        );
    }

    #[test]
    fn a_closed_window_says_when_it_opens() {
        let now: Timestamp = "2026-12-03T12:00:00Z".parse().expect("time");
        let s = Schedule::of(Some(&policy(vec![window(
            "22:00",
            "04:00",
            "Europe/Berlin",
        )])));
        assert_eq!(
            s.waiting(now).as_deref(),
            Some("waiting for window (opens 2026-12-03T22:00+01:00)")
        );
        assert_eq!(
            s.describe(),
            vec!["every day 22:00-04:00 (next day) Europe/Berlin"]
        );
    }
}
