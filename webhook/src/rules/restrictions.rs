//! What the cluster's administrator allows a NodeWright to do, beyond its being valid (chart values
//! `admission.*`, docs/security.md). A NodeWright runs privileged images as root, with the host's
//! `/`, on every node it selects; these rules bound where and what:
//!
//! - no toleration of the control-plane taint unless `admission.allowControlPlaneNodes`;
//! - package `image` and `agentImageOverride` only from `admission.allowedImages` (when set);
//! - no `env[].valueFrom.secretKeyRef` to the chart's own Secrets (the webhook's CA key and
//!   serving key, pull credentials), which package pods could otherwise read through the kubelet;
//! - a warning for every package pulled by a (movable) tag rather than a digest.

use k8s_openapi::api::core::v1::Toleration;
use nodewright_shared::api::{NodeWright, Package};
use nodewright_shared::glob;

use super::findings::{Findings, Path, item, short_list};

/// Keys of the taint kubeadm and most distributions put on control-plane nodes: the current one
/// and the one used before Kubernetes 1.24, which older clusters still carry.
pub const CONTROL_PLANE_TAINT_KEYS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// The administrator's admission restrictions. [`Default`] is the chart's default: no
/// control-plane nodes, any image, no protected Secret names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restrictions {
    /// `admission.allowControlPlaneNodes` (`WEBHOOK_ALLOW_CONTROL_PLANE_NODES`): whether a
    /// NodeWright may tolerate the control-plane taint.
    pub allow_control_plane_nodes: bool,
    /// `admission.allowedImages` (`WEBHOOK_ALLOWED_IMAGES`): image-reference globs
    /// ([`nodewright_shared::glob`], checked well formed at startup); empty allows any image.
    pub allowed_images: Vec<String>,
    /// Names of Secrets in the package pods' namespace that no package may reference through
    /// `env[].valueFrom.secretKeyRef` (`WEBHOOK_PROTECTED_SECRETS`, from the chart).
    pub protected_secrets: Vec<String>,
}

/// Whether `toleration` tolerates a control-plane taint (of any value and effect: administrators
/// also use `NoExecute`): it names one of [`CONTROL_PLANE_TAINT_KEYS`], or it is a key-less
/// `Exists`, which tolerates every taint.
pub fn tolerates_control_plane(toleration: &Toleration) -> bool {
    let key = toleration.key.as_deref().unwrap_or_default();
    let exists = toleration.operator.as_deref() == Some("Exists");
    (key.is_empty() && exists) || CONTROL_PLANE_TAINT_KEYS.contains(&key)
}

/// A toleration as a user wrote it, for messages: `{key: "", operator: Exists}`.
fn describe(t: &Toleration) -> String {
    let mut parts = vec![format!("key: {:?}", t.key.as_deref().unwrap_or_default())];
    for (name, value) in [
        ("operator", &t.operator),
        ("value", &t.value),
        ("effect", &t.effect),
    ] {
        if let Some(v) = value {
            parts.push(format!("{name}: {v}"));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

/// The forms of an image reference a pattern is matched against: as written and fully qualified
/// (`ubuntu` is `docker.io/library/ubuntu`), each with and without its tag and digest. A pattern
/// without a tag (`ghcr.io/acme/*`) so allows every tag of the repositories it matches, one with
/// a tag (`ghcr.io/acme/agent:v6.*`) only those tags.
fn reference_forms(reference: &str) -> Vec<String> {
    let repository = repository_of(reference);
    let mut forms = vec![reference.to_owned(), repository.to_owned()];
    let qualified = qualify(reference);
    if qualified != reference {
        forms.push(repository_of(&qualified).to_owned());
        forms.push(qualified);
    }
    forms
}

/// The reference without `:tag` and `@digest` (a `:` before the last `/` is a registry port).
fn repository_of(reference: &str) -> &str {
    let name = reference.split_once('@').map_or(reference, |(n, _)| n);
    let last = name.rfind('/').map_or(0, |i| i + 1);
    match name[last..].find(':') {
        Some(i) => &name[..last + i],
        None => name,
    }
}

/// The reference with its registry spelled out, as container runtimes resolve it: a first path
/// component without `.` or `:` (and not `localhost`) is not a registry, so the registry is
/// `docker.io`, and a single-component name lives under `library/`.
fn qualify(reference: &str) -> String {
    match reference.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => {
            reference.to_owned()
        }
        Some(_) => format!("docker.io/{reference}"),
        None => format!("docker.io/library/{reference}"),
    }
}

/// Whether one of `patterns` matches a form of `reference`. A pattern that does not parse matches
/// nothing (startup refuses malformed patterns, so none reaches here).
pub fn image_allowed(patterns: &[String], reference: &str) -> bool {
    patterns.is_empty()
        || reference_forms(reference).iter().any(|form| {
            patterns
                .iter()
                .any(|p| glob::matches(p, form).unwrap_or(false))
        })
}

/// What the NodeWright's package pods pull for `package`: `image@containerSHA` when a digest is
/// pinned, else `image:version` (the operator's `package_image_ref`).
fn pulled(package: &Package) -> String {
    match package.container_sha.as_deref().filter(|s| !s.is_empty()) {
        Some(sha) => format!("{}@{sha}", package.image),
        None => format!("{}:{}", package.image, package.version),
    }
}

/// Checks the NodeWright against the administrator's restrictions.
pub(crate) fn check(nw: &NodeWright, r: &Restrictions, f: &mut Findings) {
    if !r.allow_control_plane_nodes {
        for (i, t) in nw.spec.additional_tolerations.iter().enumerate() {
            if tolerates_control_plane(t) {
                let how = if t.key.as_deref().unwrap_or_default().is_empty() {
                    "tolerates every taint, so also"
                } else {
                    "tolerates"
                };
                f.error(
                    item("spec.additionalTolerations", i),
                    format!(
                        "toleration {} {how} the control-plane taint {}: the package pods (privileged, root on the host) would run on control-plane nodes, which this cluster does not allow (chart value admission.allowControlPlaneNodes is false); tolerate only the taints of the nodes you mean (e.g. key: nvidia.com/gpu, operator: Exists), or have the administrator set admission.allowControlPlaneNodes=true",
                        describe(t),
                        CONTROL_PLANE_TAINT_KEYS[0],
                    ),
                );
            }
        }
    }
    let packages = Path::Root("spec.packages");
    for (key, package) in &nw.spec.packages {
        let path = packages.child(key);
        let sha = package.container_sha.as_deref().filter(|s| !s.is_empty());
        if !r.allowed_images.is_empty() && !package.image.trim().is_empty() {
            let reference = pulled(package);
            if !image_allowed(&r.allowed_images, &reference) {
                f.error(
                    &path.child("image"),
                    format!(
                        "image {reference:?} of package {key:?} is not allowed in this cluster: the chart value admission.allowedImages allows only {}; use an image from there, or have the administrator add it",
                        short_list(&r.allowed_images, 10)
                    ),
                );
            }
        }
        if let Some(agent) = package
            .agent_image_override
            .as_deref()
            .filter(|a| !a.is_empty())
            && !image_allowed(&r.allowed_images, agent)
        {
            f.error(
                &path.child("agentImageOverride"),
                format!(
                    "agentImageOverride {agent:?} of package {key:?} is not allowed in this cluster: the chart value admission.allowedImages allows only {}; use an agent image from there, remove agentImageOverride (the operator's agent image is used), or have the administrator add it",
                    short_list(&r.allowed_images, 10)
                ),
            );
        }
        if sha.is_none() && !package.image.trim().is_empty() {
            // Short: the apiserver may truncate a warning past 256 characters.
            f.warn(format!(
                "spec.packages.{key}: no containerSHA: {}:{} is pulled by a tag, which can be moved (nodes would run other code as root); pin it with containerSHA: sha256:<digest>",
                package.image, package.version
            ));
        }
        for (i, env) in package.env.iter().enumerate() {
            let secret = env
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
                .map(|s| s.name.as_str());
            if let Some(name) = secret
                && r.protected_secrets.iter().any(|p| p == name)
            {
                f.error(
                    format!(
                        "{}.valueFrom.secretKeyRef.name",
                        item(&path.child("env").render(), i)
                    ),
                    format!(
                        "env {:?} of package {key:?} reads the Secret {name:?}, one of NodeWright's own ({}): package pods run in NodeWright's namespace, where the kubelet would hand them its keys; give the package a Secret of its own (docs/security.md)",
                        env.name,
                        short_list(&r.protected_secrets, 10)
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, SecretKeySelector};

    use super::super::testing::{nodewright, package};
    use super::*;

    fn toleration(key: Option<&str>, operator: Option<&str>, effect: Option<&str>) -> Toleration {
        Toleration {
            key: key.map(str::to_owned),
            operator: operator.map(str::to_owned),
            effect: effect.map(str::to_owned),
            ..Toleration::default()
        }
    }

    fn verdict(nw: &NodeWright, r: &Restrictions) -> super::super::findings::Verdict {
        let mut f = Findings::default();
        check(nw, r, &mut f);
        f.finish()
    }

    fn pinned(image: &str) -> Package {
        Package {
            image: image.to_owned(),
            container_sha: Some("sha256:0123".to_owned()),
            ..package("1.0.0")
        }
    }

    fn tagged(version: &str) -> Package {
        Package {
            container_sha: None,
            ..package(version)
        }
    }

    #[test]
    fn control_plane_tolerations_are_denied_unless_allowed() {
        let denied = [
            toleration(None, Some("Exists"), None),
            toleration(Some(""), Some("Exists"), Some("NoSchedule")),
            toleration(
                Some("node-role.kubernetes.io/control-plane"),
                Some("Exists"),
                None,
            ),
            toleration(
                Some("node-role.kubernetes.io/control-plane"),
                None,
                Some("NoSchedule"),
            ),
            toleration(Some("node-role.kubernetes.io/master"), Some("Exists"), None),
        ];
        let allowed = [
            toleration(Some("nvidia.com/gpu"), Some("Exists"), Some("NoSchedule")),
            toleration(Some("dedicated"), Some("Equal"), None),
            // Invalid for a pod (an empty key needs Exists), and tolerates nothing.
            toleration(None, Some("Equal"), None),
        ];
        for t in &denied {
            assert!(tolerates_control_plane(t), "{t:?}");
        }
        for t in &allowed {
            assert!(!tolerates_control_plane(t), "{t:?}");
        }
        let mut nw = nodewright("nw", [("a", pinned("ghcr.io/x/a"))]);
        nw.spec.additional_tolerations = allowed.iter().chain(&denied).cloned().collect();
        let v = verdict(&nw, &Restrictions::default());
        let paths: Vec<&str> = v.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            (3..8)
                .map(|i| format!("spec.additionalTolerations[{i}]"))
                .collect::<Vec<_>>()
        );
        let keyless = &v.errors[0].message;
        assert!(
            keyless.starts_with("toleration {key: \"\", operator: Exists} tolerates every taint, so also the control-plane taint node-role.kubernetes.io/control-plane")
                && keyless.contains("admission.allowControlPlaneNodes is false"),
            "{keyless}"
        );
        assert!(
            v.errors[2]
                .message
                .contains("{key: \"node-role.kubernetes.io/control-plane\", operator: Exists}"),
            "{}",
            v.errors[2].message
        );
        let open = Restrictions {
            allow_control_plane_nodes: true,
            ..Restrictions::default()
        };
        assert!(verdict(&nw, &open).is_allowed());
    }

    #[test]
    fn reference_forms_qualify_and_strip_tag_and_digest() {
        assert_eq!(
            reference_forms("ubuntu:22.04"),
            [
                "ubuntu:22.04",
                "ubuntu",
                "docker.io/library/ubuntu",
                "docker.io/library/ubuntu:22.04"
            ]
        );
        assert_eq!(
            reference_forms("registry:5000/a/b@sha256:01"),
            ["registry:5000/a/b@sha256:01", "registry:5000/a/b"]
        );
        assert_eq!(
            reference_forms("acme/tool:1"),
            [
                "acme/tool:1",
                "acme/tool",
                "docker.io/acme/tool",
                "docker.io/acme/tool:1"
            ]
        );
        assert_eq!(repository_of("localhost:5000/x"), "localhost:5000/x");
    }

    #[test]
    fn allowed_images_are_globs_over_the_reference() {
        let patterns = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let acme = patterns(&["ghcr.io/acme/*", "docker.io/library/*"]);
        for ok in [
            "ghcr.io/acme/tool:1.0.0",
            "ghcr.io/acme/tool@sha256:0123",
            "ubuntu:22.04",
            "docker.io/library/busybox:1",
        ] {
            assert!(image_allowed(&acme, ok), "{ok}");
        }
        for refused in [
            "ghcr.io/acmeevil/tool:1",
            "ghcr.io/acme/sub/tool:1",
            "evil.io/ghcr.io/acme/tool:1",
            "acme/tool:1",
        ] {
            assert!(!image_allowed(&acme, refused), "{refused}");
        }
        let tags = patterns(&["ghcr.io/acme/agent:v6.*"]);
        assert!(image_allowed(&tags, "ghcr.io/acme/agent:v6.4.1"));
        assert!(!image_allowed(&tags, "ghcr.io/acme/agent:latest"));
        assert!(image_allowed(&[], "anything:at-all"));
    }

    #[test]
    fn images_outside_the_allowed_list_are_denied_naming_package_and_list() {
        let r = Restrictions {
            allowed_images: vec!["ghcr.io/acme/*".to_owned()],
            ..Restrictions::default()
        };
        let nw = nodewright(
            "nw",
            [
                ("good", pinned("ghcr.io/acme/good")),
                (
                    "bad",
                    Package {
                        agent_image_override: Some("docker.io/evil/agent:1".to_owned()),
                        ..pinned("quay.io/other/bad")
                    },
                ),
                (
                    "agent-ok",
                    Package {
                        agent_image_override: Some("ghcr.io/acme/agent:v1".to_owned()),
                        ..pinned("ghcr.io/acme/x")
                    },
                ),
            ],
        );
        let v = verdict(&nw, &r);
        assert_eq!(
            v.message(),
            "spec.packages.bad.agentImageOverride: agentImageOverride \"docker.io/evil/agent:1\" of package \"bad\" is not allowed in this cluster: the chart value admission.allowedImages allows only ghcr.io/acme/*; use an agent image from there, remove agentImageOverride (the operator's agent image is used), or have the administrator add it\n\
             spec.packages.bad.image: image \"quay.io/other/bad@sha256:0123\" of package \"bad\" is not allowed in this cluster: the chart value admission.allowedImages allows only ghcr.io/acme/*; use an image from there, or have the administrator add it"
        );
        // Empty list: any image.
        assert!(verdict(&nw, &Restrictions::default()).is_allowed());
    }

    #[test]
    fn packages_without_a_digest_get_a_mutable_tag_warning() {
        let nw = nodewright(
            "nw",
            [
                ("pinned", pinned("ghcr.io/x/pinned")),
                ("tagged", tagged("1.2.0")),
                (
                    "empty-sha",
                    Package {
                        container_sha: Some(String::new()),
                        ..tagged("2.0.0")
                    },
                ),
            ],
        );
        let v = verdict(&nw, &Restrictions::default());
        assert!(v.is_allowed());
        assert_eq!(v.warnings.len(), 2, "{:?}", v.warnings);
        assert!(
            v.warnings[0].starts_with(
                "spec.packages.empty-sha: no containerSHA: ghcr.io/example/pkg:2.0.0 is pulled by a tag, which can be moved"
            ),
            "{:?}",
            v.warnings
        );
        assert!(v.warnings[1].starts_with("spec.packages.tagged: no containerSHA"));
    }

    #[test]
    fn secret_references_to_nodewrights_own_secrets_are_denied() {
        let env = |name: &str, secret: &str| EnvVar {
            name: name.to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.to_owned(),
                    key: "tls.key".to_owned(),
                    optional: None,
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        };
        let nw = nodewright(
            "nw",
            [(
                "pkg",
                Package {
                    env: vec![
                        env("MINE", "pkg-credentials"),
                        env("STOLEN", "nw-nodewright-webhook-ca"),
                    ],
                    ..pinned("ghcr.io/x/pkg")
                },
            )],
        );
        assert!(verdict(&nw, &Restrictions::default()).is_allowed());
        let r = Restrictions {
            protected_secrets: vec![
                "nw-nodewright-webhook-ca".to_owned(),
                "nw-nodewright-webhook-tls".to_owned(),
            ],
            ..Restrictions::default()
        };
        let v = verdict(&nw, &r);
        assert_eq!(v.errors.len(), 1, "{v:?}");
        assert_eq!(
            v.errors[0].path,
            "spec.packages.pkg.env[1].valueFrom.secretKeyRef.name"
        );
        assert!(
            v.errors[0].message.starts_with(
                "env \"STOLEN\" of package \"pkg\" reads the Secret \"nw-nodewright-webhook-ca\", one of NodeWright's own (nw-nodewright-webhook-ca, nw-nodewright-webhook-tls)"
            ),
            "{}",
            v.errors[0].message
        );
    }
}
