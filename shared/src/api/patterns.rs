//! The shapes of package names and versions, as regular expressions: shared by the CRD's CEL rules
//! ([`super::cel`]), the package schema and the webhook, so all three accept the same strings. A
//! module of their own so that the CEL rules and the package type each depend on them, not on
//! each other.

/// The pattern every package name (the key of `spec.packages`) must match: 2 to 43 characters of
/// lowercase letters, digits and `-`, starting and ending with a letter. Container names are derived
/// from it, so the limit is upstream's.
pub const PACKAGE_NAME_PATTERN: &str = "^[a-z][-a-z0-9]{0,41}[a-z]$";

/// The shape of a package version as the webhook accepts it, as a regular expression (for CEL): a
/// semantic version in Go's grammar (optional `v`, `MAJOR[.MINOR[.PATCH]]`, a `-PRERELEASE` only after
/// PATCH, no leading zeros) without `+BUILD` (the version is part of label values, where `+` is not
/// allowed). The CRD adds "does not end in `-`" (label values end alphanumeric). So no space, `/` or
/// `..` reaches the host paths and labels built from it even when the webhook is not asked.
pub const PACKAGE_VERSION_PATTERN: &str = r"^v?(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*)(-(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(\.(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?)?)?$";
