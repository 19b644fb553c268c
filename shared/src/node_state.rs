//! Per-node package state: the `nodewright.nvidia.com/nodeState_<name>` node annotation.
//!
//! The node annotation is the source of truth for what ran on a node (the NodeWright status only
//! mirrors it), and it outlives the operator: an upstream installation's annotations must keep working,
//! and tools that read them expect upstream's exact JSON. So the shape is upstream's, byte for byte: a
//! JSON object keyed `"<package>|<version>"` (keys sorted bytewise, as Go's map encoding does), each
//! value `{name, version, image[, containerSHA], stage[, state][, restarts]}` in that field order, with
//! `containerSHA` and `restarts` left out when empty or zero.
//!
//! Parsing never panics: malformed JSON, a stage or state this version does not know, or a key that
//! does not match its entry is a typed [`NodeStateError`], which the operator surfaces as the
//! `NodeStateMalformed` condition instead of guessing.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A stage of a package on a node. Each stage runs as one Job.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum Stage {
    /// First install of the package's files and scripts.
    #[serde(rename = "apply")]
    Apply,
    /// (Re)applies configuration; follows apply and upgrade, and reruns on configMap changes.
    #[serde(rename = "config")]
    Config,
    /// The disruptive action (reboot, service restart) after config.
    #[serde(rename = "interrupt")]
    Interrupt,
    /// Runs after the interrupt completed, e.g. to verify the node came back.
    #[serde(rename = "post-interrupt")]
    PostInterrupt,
    /// Moves an installed package to a newer version.
    #[serde(rename = "upgrade")]
    Upgrade,
    /// Removes the package from the node.
    #[serde(rename = "uninstall")]
    Uninstall,
    /// The interrupt that follows an uninstall, for packages with an interrupt.
    #[serde(rename = "uninstall-interrupt")]
    UninstallInterrupt,
}

impl Stage {
    /// Every stage, in declaration order.
    pub const ALL: [Stage; 7] = [
        Stage::Apply,
        Stage::Config,
        Stage::Interrupt,
        Stage::PostInterrupt,
        Stage::Upgrade,
        Stage::Uninstall,
        Stage::UninstallInterrupt,
    ];

    /// The name used in the annotation, labels and Job names.
    pub const fn as_str(self) -> &'static str {
        match self {
            Stage::Apply => "apply",
            Stage::Config => "config",
            Stage::Interrupt => "interrupt",
            Stage::PostInterrupt => "post-interrupt",
            Stage::Upgrade => "upgrade",
            Stage::Uninstall => "uninstall",
            Stage::UninstallInterrupt => "uninstall-interrupt",
        }
    }

    /// Interrupt stages run as the merged, node-wide interrupt Job (DESIGN §4.2).
    pub const fn is_interrupt(self) -> bool {
        matches!(self, Stage::Interrupt | Stage::UninstallInterrupt)
    }
}

/// Where a stage is for one package on one node.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum State {
    /// The stage finished successfully.
    #[serde(rename = "complete")]
    Complete,
    /// The stage's Job is running.
    #[serde(rename = "in_progress")]
    InProgress,
    /// The stage was folded into another package's merged interrupt.
    #[serde(rename = "skipped")]
    Skipped,
    /// An attempt failed genuinely; retries may still be running, or the stage timed out.
    #[serde(rename = "erroring")]
    Erroring,
    /// Not determined.
    #[serde(rename = "unknown")]
    Unknown,
}

impl State {
    /// The name used in the annotation.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Complete => "complete",
            State::InProgress => "in_progress",
            State::Skipped => "skipped",
            State::Erroring => "erroring",
            State::Unknown => "unknown",
        }
    }
}

macro_rules! str_enum_impls {
    ($ty:ty, $err:ident, $all:expr) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $ty {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $all.into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| UnknownValue {
                        kind: stringify!($err),
                        value: s.to_owned(),
                    })
            }
        }
    };
}

const ALL_STATES: [State; 5] = [
    State::Complete,
    State::InProgress,
    State::Skipped,
    State::Erroring,
    State::Unknown,
];
str_enum_impls!(Stage, stage, Stage::ALL);
str_enum_impls!(State, state, ALL_STATES);

/// A stage or state name this version does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownValue {
    /// `"stage"` or `"state"`.
    pub kind: &'static str,
    /// The value found.
    pub value: String,
}

/// One package's record on one node (a value of the node-state annotation; also mirrored in the
/// NodeWright's `status.nodeState`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PackageStatus {
    /// Package name (the key of `spec.packages`).
    pub name: String,
    /// Package version that this record is about.
    pub version: String,
    /// Package image without tag.
    pub image: String,
    /// Image digest the package ran with, when the spec pinned one.
    #[serde(
        rename = "containerSHA",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub container_sha: String,
    /// The stage the package is at on this node.
    pub stage: Stage,
    /// Where that stage is. Absent in records written before a stage started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    /// Attempts that failed in the current stage (container restarts for upstream records).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl PackageStatus {
    /// The annotation key of this record: `"<name>|<version>"`.
    pub fn key(&self) -> String {
        package_key(&self.name, &self.version)
    }
}

/// The node-state key of a package version: `"<name>|<version>"`, as in upstream and in `dependsOn`.
pub fn package_key(name: &str, version: &str) -> String {
    format!("{name}|{version}")
}

/// Why a node-state annotation could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NodeStateError {
    /// Not a JSON object of objects with the expected fields.
    #[error("node state is not valid JSON of the expected shape: {0}")]
    Json(#[from] serde_json::Error),
    /// A stage or state this version does not know.
    #[error("node state entry {key:?}: {source}")]
    UnknownValue {
        /// The entry's key.
        key: String,
        /// What was unknown.
        #[source]
        source: UnknownValue,
    },
    /// The key is not `"<name>|<version>"` of its own record.
    #[error(
        "node state entry {key:?} describes {expected:?}: keys must be \"<name>|<version>\" of their entry"
    )]
    KeyMismatch {
        /// The key found.
        key: String,
        /// The key its record implies.
        expected: String,
    },
}

/// All package records of one NodeWright on one node, keyed `"<name>|<version>"` and kept sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct NodeState(pub BTreeMap<String, PackageStatus>);

/// The wire form, with stage and state as plain strings, so that an unknown value becomes a typed
/// error naming the entry rather than a serde message.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPackageStatus {
    name: String,
    version: String,
    #[serde(default)]
    image: String,
    #[serde(rename = "containerSHA", default)]
    container_sha: String,
    stage: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    restarts: i32,
}

impl NodeState {
    /// Parses the annotation value.
    pub fn parse(text: &str) -> Result<Self, NodeStateError> {
        let raw: BTreeMap<String, RawPackageStatus> = serde_json::from_str(text)?;
        let mut out = BTreeMap::new();
        for (key, r) in raw {
            let unknown = |source| NodeStateError::UnknownValue {
                key: key.clone(),
                source,
            };
            let stage = r.stage.parse::<Stage>().map_err(unknown)?;
            let state = if r.state.is_empty() {
                None
            } else {
                Some(r.state.parse::<State>().map_err(unknown)?)
            };
            let status = PackageStatus {
                name: r.name,
                version: r.version,
                image: r.image,
                container_sha: r.container_sha,
                stage,
                state,
                restarts: r.restarts,
            };
            let expected = status.key();
            if expected != key {
                return Err(NodeStateError::KeyMismatch { key, expected });
            }
            out.insert(key, status);
        }
        Ok(NodeState(out))
    }

    /// The annotation value: compact JSON in upstream's key and field order.
    pub fn to_annotation(&self) -> String {
        // Serializing plain strings, integers and maps cannot fail; fall back to an empty object
        // rather than panic if that ever changes.
        serde_json::to_string(&self.0).unwrap_or_else(|_| "{}".to_owned())
    }

    /// The record of a package version.
    pub fn get(&self, name: &str, version: &str) -> Option<&PackageStatus> {
        self.0.get(&package_key(name, version))
    }

    /// Inserts or replaces a record under its own key.
    pub fn upsert(&mut self, status: PackageStatus) {
        self.0.insert(status.key(), status);
    }

    /// Removes a record ("absent means uninstalled").
    pub fn remove(&mut self, name: &str, version: &str) -> Option<PackageStatus> {
        self.0.remove(&package_key(name, version))
    }

    /// Every record, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = &PackageStatus> {
        self.0.values()
    }

    /// True when no package has a record.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromStr for NodeState {
    type Err = NodeStateError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NodeState::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The exact string upstream's e2e suite asserts (interrupt-grouping scenario).
    const UPSTREAM: &str = r#"{"dax|1.2.3":{"name":"dax","version":"1.2.3","image":"ghcr.io/nvidia/skyhook/agentless","stage":"post-interrupt","state":"complete"}}"#;

    #[test]
    fn reads_and_writes_upstreams_exact_string() {
        let state = NodeState::parse(UPSTREAM).expect("upstream string parses");
        let dax = state.get("dax", "1.2.3").expect("dax entry");
        assert_eq!(dax.stage, Stage::PostInterrupt);
        assert_eq!(dax.state, Some(State::Complete));
        assert_eq!(dax.restarts, 0);
        assert_eq!(state.to_annotation(), UPSTREAM);
    }

    #[test]
    fn field_order_and_omissions_match_upstream() {
        let mut state = NodeState::default();
        state.upsert(PackageStatus {
            name: "b".into(),
            version: "2.0.0".into(),
            image: "img/b".into(),
            container_sha: "sha256:abc".into(),
            stage: Stage::Apply,
            state: Some(State::Erroring),
            restarts: 3,
        });
        state.upsert(PackageStatus {
            name: "a".into(),
            version: "1.0.0".into(),
            image: "img/a".into(),
            container_sha: String::new(),
            stage: Stage::Config,
            state: None,
            restarts: 0,
        });
        assert_eq!(
            state.to_annotation(),
            r#"{"a|1.0.0":{"name":"a","version":"1.0.0","image":"img/a","stage":"config"},"b|2.0.0":{"name":"b","version":"2.0.0","image":"img/b","containerSHA":"sha256:abc","stage":"apply","state":"erroring","restarts":3}}"#
        );
    }

    #[test]
    fn malformed_input_is_a_typed_error() {
        assert!(matches!(
            NodeState::parse("not json"),
            Err(NodeStateError::Json(_))
        ));
        assert!(matches!(
            NodeState::parse("[]"),
            Err(NodeStateError::Json(_))
        ));
        assert!(matches!(
            NodeState::parse(r#"{"a|1":{"name":"a"}}"#),
            Err(NodeStateError::Json(_))
        ));
        let err =
            NodeState::parse(r#"{"a|1":{"name":"a","version":"1","image":"i","stage":"reboot"}}"#);
        match err {
            Err(NodeStateError::UnknownValue { key, source }) => {
                assert_eq!(key, "a|1");
                assert_eq!(source.kind, "stage");
                assert_eq!(source.value, "reboot");
            }
            other => panic!("expected unknown stage, got {other:?}"),
        }
        let err = NodeState::parse(
            r#"{"a|1":{"name":"a","version":"1","image":"i","stage":"apply","state":"done"}}"#,
        );
        assert!(
            matches!(&err, Err(NodeStateError::UnknownValue { source, .. }) if source.kind == "state"),
            "{err:?}"
        );
        let err =
            NodeState::parse(r#"{"a|2":{"name":"a","version":"1","image":"i","stage":"apply"}}"#);
        assert!(
            matches!(&err, Err(NodeStateError::KeyMismatch { key, expected }) if key == "a|2" && expected == "a|1"),
            "{err:?}"
        );
    }

    #[test]
    fn empty_object_is_an_empty_state() {
        let state = NodeState::parse("{}").expect("empty state");
        assert!(state.is_empty());
        assert_eq!(state.to_annotation(), "{}");
    }

    #[test]
    fn unknown_fields_are_tolerated() {
        let state = NodeState::parse(
            r#"{"a|1":{"name":"a","version":"1","image":"i","stage":"apply","state":"complete","future":true}}"#,
        )
        .expect("extra fields ignored");
        assert_eq!(
            state.get("a", "1").map(|s| s.state),
            Some(Some(State::Complete))
        );
    }

    fn arb_status() -> impl Strategy<Value = PackageStatus> {
        (
            "[a-z][-a-z0-9]{0,10}[a-z]",
            "[0-9]{1,2}\\.[0-9]{1,2}\\.[0-9]{1,2}",
            "[a-z./-]{0,20}",
            prop_oneof![Just(String::new()), "sha256:[0-9a-f]{8}"],
            proptest::sample::select(Stage::ALL.to_vec()),
            proptest::option::of(proptest::sample::select(ALL_STATES.to_vec())),
            0i32..100,
        )
            .prop_map(
                |(name, version, image, container_sha, stage, state, restarts)| PackageStatus {
                    name,
                    version,
                    image,
                    container_sha,
                    stage,
                    state,
                    restarts,
                },
            )
    }

    proptest! {
        #[test]
        fn round_trips(entries in proptest::collection::vec(arb_status(), 0..6)) {
            let mut state = NodeState::default();
            for e in entries {
                state.upsert(e);
            }
            let text = state.to_annotation();
            let back = NodeState::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&back, &state);
            prop_assert_eq!(back.to_annotation(), text);
        }

        #[test]
        fn never_panics(text in ".{0,80}") {
            let _ = NodeState::parse(&text);
        }

        #[test]
        fn stage_and_state_names_round_trip(stage in proptest::sample::select(Stage::ALL.to_vec()), state in proptest::sample::select(ALL_STATES.to_vec())) {
            prop_assert_eq!(stage.as_str().parse::<Stage>(), Ok(stage));
            prop_assert_eq!(state.as_str().parse::<State>(), Ok(state));
            prop_assert_eq!(serde_json::to_value(stage).ok(), Some(serde_json::Value::from(stage.as_str())));
            prop_assert_eq!(serde_json::to_value(state).ok(), Some(serde_json::Value::from(state.as_str())));
        }
    }
}
