//! Names of the objects the operator creates (Jobs, ConfigMaps, containers) and the label values it
//! derives from user input.
//!
//! Why this module exists: every name here is derived from user-controlled strings (NodeWright,
//! package, version, node) whose combined length and character set Kubernetes does not bound the way
//! object names require. A Job name must be a DNS-1123 label of at most 63 characters (the Job
//! controller copies it into the `batch.kubernetes.io/job-name` label of its pods), and two different
//! `(nodewright, package, version, stage, node)` tuples must never produce the same name, or one stage
//! would adopt another stage's Job through an `AlreadyExists` and record the wrong outcome.
//!
//! Upstream's `safe(max, parts…)` joined the parts, hashed the *joined* string and kept 8 hex digits.
//! Two things change here:
//! - the hash covers the full tuple, length-prefixed, so `("a-b", "c")` and `("a", "b-c")` (which join
//!   to the same string) get different names, and so does anything that sanitising folds together;
//! - the suffix has [`HASH_LEN`] hex digits (48 bits) instead of 8: a fleet of thousands of nodes with
//!   tens of packages and several stages reaches 10⁵ Jobs, where 32 bits would make a collision among
//!   truncated names plausible.
//!
//! Names are deterministic on purpose: creating a stage's Job is idempotent (a second create answers
//! `AlreadyExists`), and the API server then guarantees at most one Job per stage, or per node for
//! interrupts.

use nodewright_shared::node_state::Stage;
use sha2::{Digest, Sha256};

/// The longest DNS-1123 label (Job names, container and volume names, label values).
pub const MAX_LABEL_LEN: usize = 63;
/// The longest DNS-1123 subdomain (ConfigMap names).
pub const MAX_SUBDOMAIN_LEN: usize = 253;
/// Hex digits of the hash suffix of a hashed name (48 bits).
pub const HASH_LEN: usize = 12;
/// Package names are cut to this many characters in container names (upstream's limit, also the
/// longest package name the API accepts), so `<pkg>-post-interruptcheck` still fits 63.
pub const CONTAINER_PACKAGE_PREFIX_LEN: usize = 43;

/// Name of the single init container of an interrupt Job (upstream's name).
pub const INTERRUPT_CONTAINER_NAME: &str = "interrupt";
/// Name of the main container of every Job's pod (upstream's name).
pub const PAUSE_CONTAINER_NAME: &str = "pause";

/// The Job that runs `stage` of `package` at `version` for `nodewright` on `node`.
///
/// A readable prefix (`<nw>-<pkg>-<ver>-<stage>-<node>`, sanitised and cut) followed by a hash of the
/// full tuple: at most 63 characters, a valid DNS-1123 label, and different for tuples that differ in
/// any part.
pub fn package_job_name(
    nodewright: &str,
    package: &str,
    version: &str,
    stage: Stage,
    node: &str,
) -> String {
    let parts = [nodewright, package, version, stage.as_str(), node];
    hashed_label(MAX_LABEL_LEN, "package-job", &parts, &parts)
}

/// The merged interrupt Job of `nodewright` on `node` (DESIGN §4.2: one per node).
///
/// It depends on nothing else on purpose: the API server then refuses a second interrupt Job for the
/// same node while one exists, whichever package owns the merged interrupt and whichever of the
/// interrupt stages it runs. The readable prefix is `<nw>-interrupt-<node>`.
pub fn interrupt_job_name(nodewright: &str, node: &str) -> String {
    hashed_label(
        MAX_LABEL_LEN,
        "interrupt-job",
        &[nodewright, node],
        &[nodewright, "interrupt", node],
    )
}

/// The ConfigMap holding a package's `configMap` files: a readable prefix (`<nw>-<pkg>-<ver>`,
/// sanitised) and a hash of the tuple, like the Job names. Upstream's plain `<nw>-<pkg>-<ver>`
/// ([`legacy_package_configmap_name`]) made NodeWright `a` with package `bb-cc` and NodeWright
/// `a-bb` with package `cc` share one ConfigMap: one NodeWright's package ran as root with the
/// other's files, and deleting one garbage-collected the other's.
pub fn package_configmap_name(nodewright: &str, package: &str, version: &str) -> String {
    let parts = [nodewright, package, version];
    hashed_label(MAX_SUBDOMAIN_LEN, "package-configmap", &parts, &parts)
}

/// The name earlier operators gave a package ConfigMap (`<nw>-<pkg>-<ver>` when a valid
/// subdomain): only looked for on upgrade, to carry its content over and delete it once no
/// unfinished Job mounts it.
pub fn legacy_package_configmap_name(nodewright: &str, package: &str, version: &str) -> String {
    format!("{nodewright}-{package}-{version}")
}

/// The per-node metadata ConfigMap of `nodewright` on `node`: a readable prefix
/// (`<nw>-<node>-metadata`, sanitised) and a hash of the pair, so node names `a.b` and `a-b`, or
/// NodeWright `a` on node `b-c` and NodeWright `a-b` on node `c`, never share one (upstream's
/// `<nw>-<node>-metadata` with dots as dashes did: [`legacy_node_metadata_configmap_name`]).
pub fn node_metadata_configmap_name(nodewright: &str, node: &str) -> String {
    hashed_label(
        MAX_SUBDOMAIN_LEN,
        "node-metadata-configmap",
        &[nodewright, node],
        &[nodewright, node, "metadata"],
    )
}

/// The name earlier operators gave a node-metadata ConfigMap, deleted on upgrade once no unfinished
/// Job mounts it.
pub fn legacy_node_metadata_configmap_name(nodewright: &str, node: &str) -> String {
    format!("{nodewright}-{node}-metadata").replace('.', "-")
}

/// The package copy container: `<pkg[:43]>-init`.
pub fn init_container_name(package: &str) -> String {
    container_name(package, "init")
}

/// The stage container: `<pkg[:43]>-<stage>`.
pub fn stage_container_name(package: &str, stage: Stage) -> String {
    container_name(package, stage.as_str())
}

/// The check container: `<pkg[:43]>-<stage>check` (upstream spelling, no dash before `check`).
pub fn check_container_name(package: &str, stage: Stage) -> String {
    container_name(package, &format!("{}check", stage.as_str()))
}

/// `<pkg[:43]>-<suffix>`; for every package stage this fits 63 characters. Should a caller pass
/// something longer (an interrupt stage, which has no package containers), the name is hashed rather
/// than made invalid.
fn container_name(package: &str, suffix: &str) -> String {
    let name = format!(
        "{}-{suffix}",
        truncate_chars(package, CONTAINER_PACKAGE_PREFIX_LEN)
    );
    if is_dns_label(&name) {
        return name;
    }
    hashed_label(
        MAX_LABEL_LEN,
        "container",
        &[package, suffix],
        &[package, suffix],
    )
}

/// `value` itself when it is a valid label value (at most 63 characters of `[A-Za-z0-9._-]`, starting
/// and ending with an alphanumeric, or empty); otherwise a sanitised prefix and a hash of it. Used for
/// the `/package` (`<pkg>-<ver>`) and `/node` labels, whose raw values can be too long (node names are
/// subdomains up to 253 characters) or carry `+`. Selecting by such a label must use this same
/// function; the exact values are in the Job's package annotation and `nodeName`.
pub fn label_value(value: &str) -> String {
    if is_label_value(value) {
        return value.to_owned();
    }
    hashed_label(MAX_LABEL_LEN, "label-value", &[value], &[value])
}

/// The node annotation `nodewright.nvidia.com/autoTaint_<taintKey>` that marks a node the operator
/// tainted itself (upstream's key). A taint key may contain `/` or be long, which would make that an
/// invalid annotation key; then the part after the prefix is `autoTaint_` and a sanitised, hashed
/// rendering of the taint key, still one fixed key per taint key.
pub fn auto_taint_annotation(taint_key: &str) -> String {
    const WORD: &str = "autoTaint_";
    let plain = format!("{WORD}{taint_key}");
    let name = if is_label_value(&plain) {
        plain
    } else {
        format!(
            "{WORD}{}",
            hashed_label(
                MAX_LABEL_LEN - WORD.len(),
                "auto-taint",
                &[taint_key],
                &[taint_key]
            )
        )
    };
    format!("{}{name}", nodewright_shared::keys::PREFIX)
}

/// `<pkg>-<ver>`, the `/package` label value (through [`label_value`]).
pub fn package_label_value(package: &str, version: &str) -> String {
    label_value(&format!("{package}-{version}"))
}

/// A DNS-1123 label: 1–63 characters of `[a-z0-9-]`, starting and ending with an alphanumeric.
pub fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_LABEL_LEN
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated DNS-1123 labels.
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_SUBDOMAIN_LEN && name.split('.').all(is_dns_label_any_len)
}

/// A Kubernetes label value: empty, or at most 63 characters of `[A-Za-z0-9._-]` starting and ending
/// with an alphanumeric.
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.is_empty()
        || (bytes.len() <= MAX_LABEL_LEN
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
            && bytes.last().is_some_and(u8::is_ascii_alphanumeric))
}

fn is_dns_label_any_len(label: &str) -> bool {
    let bytes = label.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// `<readable prefix>-<hash>`, at most `max` characters, a valid DNS-1123 label (hence also a valid
/// subdomain). The hash covers `kind` and every part of `hashed`, each length-prefixed, so no two
/// distinct tuples share an input; `readable` only feeds the prefix.
fn hashed_label(max: usize, kind: &str, hashed: &[&str], readable: &[&str]) -> String {
    let hash = tuple_hash(kind, hashed);
    let budget = max.saturating_sub(HASH_LEN + 1);
    let prefix = sanitize_label(&readable.join("-"));
    let prefix = prefix
        .get(..budget.min(prefix.len()))
        .unwrap_or_default()
        .trim_end_matches('-');
    if prefix.is_empty() {
        hash
    } else {
        format!("{prefix}-{hash}")
    }
}

/// The first [`HASH_LEN`] hex digits of SHA-256 over `kind` and `parts`, each preceded by its length.
fn tuple_hash(kind: &str, parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in std::iter::once(kind).chain(parts.iter().copied()) {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hex(&hasher.finalize())
        .get(..HASH_LEN)
        .unwrap_or_default()
        .to_owned()
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut out, b| {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// Lower-cases, turns every character outside `[a-z0-9]` into `-`, collapses runs of `-` and drops
/// leading ones: a readable, label-safe rendering (the hash suffix keeps it unique).
fn sanitize_label(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
    }
    out
}

/// At most `max` characters of `text`, never splitting a character.
fn truncate_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((end, _)) => text.get(..end).unwrap_or(text),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PACKAGE_STAGES: [Stage; 5] = [
        Stage::Apply,
        Stage::Config,
        Stage::PostInterrupt,
        Stage::Upgrade,
        Stage::Uninstall,
    ];

    #[test]
    fn auto_taint_annotation_is_upstreams_key_or_a_valid_hashed_one() {
        assert_eq!(
            auto_taint_annotation("nodewright.nvidia.com"),
            "nodewright.nvidia.com/autoTaint_nodewright.nvidia.com"
        );
        for key in ["example.com/runtime", &"k".repeat(80)] {
            let a = auto_taint_annotation(key);
            let name = a.strip_prefix("nodewright.nvidia.com/").expect("prefix");
            assert!(name.starts_with("autoTaint_"), "{a}");
            assert!(is_label_value(name), "{a}");
            assert_eq!(a, auto_taint_annotation(key), "deterministic");
        }
        assert_ne!(
            auto_taint_annotation("example.com/a"),
            auto_taint_annotation("example.com-a")
        );
    }

    #[test]
    fn short_job_name_is_readable_and_hashed() {
        let name = package_job_name("gpu", "dax", "1.2.3", Stage::Apply, "node-1");
        assert!(name.starts_with("gpu-dax-1-2-3-apply-node-1-"), "{name}");
        assert_eq!(name.len(), "gpu-dax-1-2-3-apply-node-1-".len() + HASH_LEN);
        assert!(is_dns_label(&name));
    }

    #[test]
    fn long_job_name_is_cut_to_63() {
        let nw = "n".repeat(53);
        let pkg = "p".repeat(43);
        let node = format!("{}.example.internal", "x".repeat(200));
        let name = package_job_name(&nw, &pkg, "1.0.0-rc.1+build.7", Stage::PostInterrupt, &node);
        assert_eq!(name.len(), 63);
        assert!(is_dns_label(&name), "{name}");
        // The readable prefix takes what the hash leaves: 63 - 12 - 1 = 50 characters.
        assert_eq!(name.get(..50), nw.get(..50));
        assert_eq!(name.as_bytes()[50], b'-');
    }

    #[test]
    fn job_names_are_deterministic() {
        let a = package_job_name("nw", "pkg", "1.0.0", Stage::Config, "n1");
        let b = package_job_name("nw", "pkg", "1.0.0", Stage::Config, "n1");
        assert_eq!(a, b);
        assert_eq!(
            interrupt_job_name("nw", "node.a"),
            interrupt_job_name("nw", "node.a")
        );
    }

    #[test]
    fn joining_ambiguities_do_not_collide() {
        // Same joined string, different tuples.
        let a = package_job_name("a-b", "c", "1", Stage::Apply, "n");
        let b = package_job_name("a", "b-c", "1", Stage::Apply, "n");
        assert_ne!(a, b);
        // Dots and dashes sanitise to the same prefix.
        let c = package_job_name("nw", "pkg", "1.0", Stage::Apply, "n");
        let d = package_job_name("nw", "pkg", "1-0", Stage::Apply, "n");
        assert_ne!(c, d);
        // Upper and lower case.
        let e = package_job_name("nw", "pkg", "1.0.0-RC1", Stage::Apply, "n");
        let f = package_job_name("nw", "pkg", "1.0.0-rc1", Stage::Apply, "n");
        assert_ne!(e, f);
    }

    #[test]
    fn every_stage_gets_its_own_job() {
        let names: std::collections::BTreeSet<String> = Stage::ALL
            .iter()
            .map(|s| package_job_name("nw", "pkg", "1", *s, "n"))
            .collect();
        assert_eq!(names.len(), Stage::ALL.len());
    }

    #[test]
    fn interrupt_job_name_is_per_node() {
        let a = interrupt_job_name("nw", "node-1");
        assert!(a.starts_with("nw-interrupt-node-1-"), "{a}");
        assert!(is_dns_label(&a));
        assert_ne!(a, interrupt_job_name("nw", "node-2"));
        assert_ne!(a, interrupt_job_name("nw2", "node-1"));
        let long = interrupt_job_name(&"n".repeat(53), &"x".repeat(253));
        assert_eq!(long.len(), 63);
        assert!(is_dns_label(&long));
    }

    #[test]
    fn configmap_names_are_readable_and_hashed() {
        let cm = package_configmap_name("gpu", "dax", "1.2.3");
        assert!(cm.starts_with("gpu-dax-1-2-3-"), "{cm}");
        assert_eq!(cm.len(), "gpu-dax-1-2-3-".len() + HASH_LEN);
        assert_eq!(cm, package_configmap_name("gpu", "dax", "1.2.3"));
        let meta = node_metadata_configmap_name("gpu", "ip-10-0-0-1.ec2.internal");
        assert!(
            meta.starts_with("gpu-ip-10-0-0-1-ec2-internal-metadata-"),
            "{meta}"
        );
        assert_eq!(
            legacy_package_configmap_name("gpu", "dax", "1.2.3"),
            "gpu-dax-1.2.3"
        );
        assert_eq!(
            legacy_node_metadata_configmap_name("gpu", "ip-10-0-0-1.ec2.internal"),
            "gpu-ip-10-0-0-1-ec2-internal-metadata"
        );
    }

    #[test]
    fn colliding_upstream_names_get_their_own_configmaps() {
        // Upstream named both `a-bb-cc-1.0`.
        assert_eq!(
            legacy_package_configmap_name("a", "bb-cc", "1.0"),
            legacy_package_configmap_name("a-bb", "cc", "1.0")
        );
        assert_ne!(
            package_configmap_name("a", "bb-cc", "1.0"),
            package_configmap_name("a-bb", "cc", "1.0")
        );
        // Upstream named both `a-b-c-metadata`.
        assert_eq!(
            legacy_node_metadata_configmap_name("a", "b-c"),
            legacy_node_metadata_configmap_name("a-b", "c")
        );
        assert_ne!(
            node_metadata_configmap_name("a", "b-c"),
            node_metadata_configmap_name("a-b", "c")
        );
        assert_ne!(
            node_metadata_configmap_name("a", "b.c"),
            node_metadata_configmap_name("a", "b-c")
        );
        // A new name is never an old one, so an old ConfigMap is never reused.
        assert_ne!(
            package_configmap_name("a", "bb-cc", "1.0"),
            legacy_package_configmap_name("a", "bb-cc", "1.0")
        );
    }

    #[test]
    fn configmap_names_are_made_dns_safe() {
        let upper = package_configmap_name("gpu", "dax", "1.2.3-RC1");
        assert!(is_dns_subdomain(&upper), "{upper}");
        assert!(upper.starts_with("gpu-dax-1-2-3-rc1-"), "{upper}");
        assert_ne!(upper, package_configmap_name("gpu", "dax", "1.2.3-rc1"));
        let plus = package_configmap_name("gpu", "dax", "1.2.3+build");
        assert!(is_dns_subdomain(&plus), "{plus}");
        let long = package_configmap_name(&"n".repeat(200), "dax", &"1".repeat(63));
        assert!(long.len() <= MAX_SUBDOMAIN_LEN && is_dns_subdomain(&long));
        let long = node_metadata_configmap_name(&"n".repeat(53), &"x.".repeat(120));
        assert!(is_dns_subdomain(&long), "{long}");
    }

    #[test]
    fn container_names_follow_upstream() {
        assert_eq!(init_container_name("dax"), "dax-init");
        assert_eq!(stage_container_name("dax", Stage::Apply), "dax-apply");
        assert_eq!(
            check_container_name("dax", Stage::PostInterrupt),
            "dax-post-interruptcheck"
        );
        let long = "a".repeat(50);
        assert_eq!(
            init_container_name(&long),
            format!("{}-init", "a".repeat(43))
        );
    }

    #[test]
    fn container_names_fit_for_the_longest_package_and_every_package_stage() {
        let pkg = format!("a{}z", "-".repeat(41));
        for stage in PACKAGE_STAGES {
            for name in [
                init_container_name(&pkg),
                stage_container_name(&pkg, stage),
                check_container_name(&pkg, stage),
            ] {
                assert!(is_dns_label(&name), "{name}");
            }
        }
        assert_eq!(
            check_container_name(&"p".repeat(43), Stage::PostInterrupt).len(),
            63
        );
        // An interrupt stage would not fit; it is hashed rather than made invalid.
        let odd = check_container_name(&"p".repeat(43), Stage::UninstallInterrupt);
        assert!(is_dns_label(&odd), "{odd}");
    }

    #[test]
    fn label_values_pass_through_or_are_hashed() {
        assert_eq!(label_value("node-1.example"), "node-1.example");
        assert_eq!(package_label_value("dax", "1.2.3"), "dax-1.2.3");
        let long = label_value(&"x".repeat(64));
        assert!(is_label_value(&long) && long.len() <= 63, "{long}");
        let plus = package_label_value("dax", "1.0.0+build");
        assert!(is_label_value(&plus), "{plus}");
        assert_ne!(plus, package_label_value("dax", "1.0.0-build"));
    }

    #[test]
    fn validators() {
        assert!(is_dns_label("a"));
        assert!(is_dns_label("0abc-9"));
        assert!(!is_dns_label(""));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label("a-"));
        assert!(!is_dns_label("A"));
        assert!(!is_dns_label("a.b"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain(".a"));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        assert!(is_label_value(""));
        assert!(is_label_value("A_b.c-D"));
        assert!(!is_label_value("_a"));
        assert!(!is_label_value("a+b"));
    }

    fn arb_part() -> impl Strategy<Value = String> {
        // Mostly plausible input, plus arbitrary unicode to exercise sanitising.
        prop_oneof![
            "[a-z0-9][-a-z0-9.]{0,80}",
            "[A-Za-z0-9+_.~-]{0,100}",
            ".{0,70}",
        ]
    }

    fn arb_stage() -> impl Strategy<Value = Stage> {
        proptest::sample::select(Stage::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn job_names_are_always_valid_labels(
            nw in arb_part(), pkg in arb_part(), ver in arb_part(), stage in arb_stage(), node in arb_part()
        ) {
            let name = package_job_name(&nw, &pkg, &ver, stage, &node);
            prop_assert!(is_dns_label(&name), "{}", name);
            prop_assert_eq!(&name, &package_job_name(&nw, &pkg, &ver, stage, &node));
            let interrupt = interrupt_job_name(&nw, &node);
            prop_assert!(is_dns_label(&interrupt), "{}", interrupt);
        }

        #[test]
        fn job_names_differ_when_any_part_differs(
            a in proptest::collection::vec(arb_part(), 4),
            b in proptest::collection::vec(arb_part(), 4),
            sa in arb_stage(), sb in arb_stage(),
        ) {
            prop_assume!(a != b || sa != sb);
            let na = package_job_name(&a[0], &a[1], &a[2], sa, &a[3]);
            let nb = package_job_name(&b[0], &b[1], &b[2], sb, &b[3]);
            prop_assert_ne!(na, nb);
        }

        #[test]
        fn one_changed_part_changes_the_name(
            parts in proptest::collection::vec(arb_part(), 4),
            which in 0usize..4,
            other in arb_part(),
        ) {
            let mut changed = parts.clone();
            prop_assume!(changed[which] != other);
            changed[which] = other;
            let before = package_job_name(&parts[0], &parts[1], &parts[2], Stage::Apply, &parts[3]);
            let after = package_job_name(&changed[0], &changed[1], &changed[2], Stage::Apply, &changed[3]);
            prop_assert_ne!(before, after);
        }

        #[test]
        fn configmap_names_are_always_valid(nw in arb_part(), pkg in arb_part(), ver in arb_part(), node in arb_part()) {
            let cm = package_configmap_name(&nw, &pkg, &ver);
            prop_assert!(is_dns_subdomain(&cm), "{}", cm);
            let meta = node_metadata_configmap_name(&nw, &node);
            prop_assert!(is_dns_subdomain(&meta), "{}", meta);
        }

        #[test]
        fn configmap_names_differ_when_any_part_differs(
            a in proptest::collection::vec(arb_part(), 3),
            b in proptest::collection::vec(arb_part(), 3),
        ) {
            prop_assume!(a != b);
            prop_assert_ne!(
                package_configmap_name(&a[0], &a[1], &a[2]),
                package_configmap_name(&b[0], &b[1], &b[2])
            );
            prop_assume!(a[..2] != b[..2]);
            prop_assert_ne!(
                node_metadata_configmap_name(&a[0], &a[1]),
                node_metadata_configmap_name(&b[0], &b[1])
            );
        }

        #[test]
        fn label_values_are_always_valid(value in arb_part()) {
            let v = label_value(&value);
            prop_assert!(is_label_value(&v), "{}", v);
        }

        #[test]
        fn container_names_are_valid_for_api_package_names(pkg in "[a-z][-a-z0-9]{0,41}[a-z]", stage in arb_stage()) {
            prop_assume!(!stage.is_interrupt());
            prop_assert!(is_dns_label(&init_container_name(&pkg)));
            prop_assert!(is_dns_label(&stage_container_name(&pkg, stage)));
            prop_assert!(is_dns_label(&check_container_name(&pkg, stage)));
        }
    }
}
