//! The `nodewright.nvidia.com/package` annotation on every Job and its pods: which package, version,
//! NodeWright and stage the Job runs. The outcome paths (Job watch, Pod watch) read it to know which
//! node-state entry to write, without looking up the NodeWright (which may be gone).

use nodewright_shared::node_state::Stage;
use serde::{Deserialize, Serialize};

/// The annotation's JSON, fields in upstream's order: `{"name","version","nodewright","stage","image"
/// [,"containerSHA"]}`.
///
/// The owner field is `nodewright` where upstream wrote `skyhook`: DESIGN §2 renames `skyhook` to
/// `nodewright` wherever the word is part of a key, and nothing outside the operator reads this
/// annotation (the agent takes everything from its arguments and environment), so there is no
/// compatibility to keep. Reading still accepts `skyhook`, so a pod annotated by upstream parses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageAnnotation {
    /// Package name.
    pub name: String,
    /// Package version.
    pub version: String,
    /// Owning NodeWright.
    #[serde(alias = "skyhook")]
    pub nodewright: String,
    /// The stage the Job runs.
    pub stage: Stage,
    /// Package image without tag or digest (as recorded in node state).
    pub image: String,
    /// Image digest, when the package pins one.
    #[serde(
        rename = "containerSHA",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub container_sha: Option<String>,
}

impl PackageAnnotation {
    /// The annotation value.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// Parses an annotation value.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_order_is_upstreams() {
        let a = PackageAnnotation {
            name: "dax".into(),
            version: "1.2.3".into(),
            nodewright: "gpu".into(),
            stage: Stage::PostInterrupt,
            image: "ghcr.io/x/dax".into(),
            container_sha: None,
        };
        assert_eq!(
            a.to_json().ok().as_deref(),
            Some(
                r#"{"name":"dax","version":"1.2.3","nodewright":"gpu","stage":"post-interrupt","image":"ghcr.io/x/dax"}"#
            )
        );
        let with_sha = PackageAnnotation {
            container_sha: Some("sha256:abc".into()),
            ..a.clone()
        };
        assert_eq!(
            with_sha.to_json().ok().as_deref(),
            Some(
                r#"{"name":"dax","version":"1.2.3","nodewright":"gpu","stage":"post-interrupt","image":"ghcr.io/x/dax","containerSHA":"sha256:abc"}"#
            )
        );
        assert_eq!(
            with_sha
                .to_json()
                .ok()
                .and_then(|j| PackageAnnotation::parse(&j).ok()),
            Some(with_sha)
        );
    }

    #[test]
    fn reads_upstream_annotations() {
        let upstream = r#"{"name":"dax","version":"1.2.3","skyhook":"gpu","stage":"apply","image":"img","invalid":true}"#;
        let parsed = PackageAnnotation::parse(upstream).ok();
        assert_eq!(
            parsed.map(|a| (a.nodewright, a.stage)),
            Some(("gpu".into(), Stage::Apply))
        );
    }
}
