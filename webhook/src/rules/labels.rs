//! Label key and value syntax, ported from apimachinery's `validation.IsQualifiedName` and
//! `IsValidLabelValue`.
//!
//! Selectors the webhook admits are later turned into label selectors by the operator and the
//! apiserver; a key or value they would refuse makes the NodeWright or compartment select nothing (or
//! fail at reconcile), long after `kubectl apply` said yes. Versions become label values too
//! (`<package>-<version>`). Each function returns every reason, phrased to complete "…: <reason>".

/// The longest label value, and the longest name part of a label key.
pub const MAX_LABEL_LEN: usize = 63;
/// The longest DNS subdomain (label key prefix).
pub const MAX_SUBDOMAIN_LEN: usize = 253;

/// What the name part of a key and a label value look like: `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
const NAME_SHAPE: &str =
    "letters, digits, '-', '_' and '.', starting and ending with a letter or digit";

/// Apimachinery's `qualifiedNameFmt`: alphanumerics with `-`, `_`, `.` inside.
fn is_name_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// A lowercase RFC 1123 subdomain: dot-separated labels of `[a-z0-9-]`, each starting and ending
/// with an alphanumeric.
fn is_subdomain_shaped(s: &str) -> bool {
    s.split('.').all(|label| {
        let b = label.as_bytes();
        match (b.first(), b.last()) {
            (Some(f), Some(l)) => {
                (f.is_ascii_lowercase() || f.is_ascii_digit())
                    && (l.is_ascii_lowercase() || l.is_ascii_digit())
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            }
            _ => false,
        }
    })
}

/// Why `key` is not a valid label key (`[prefix/]name`); empty when it is.
pub fn qualified_name_errors(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let mut parts = key.split('/');
    let name = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) => name,
        (Some(prefix), Some(name), None) => {
            if prefix.is_empty() {
                errors.push("the prefix before '/' must not be empty".to_owned());
            } else if prefix.len() > MAX_SUBDOMAIN_LEN {
                errors.push(format!(
                    "the prefix before '/' must be at most {MAX_SUBDOMAIN_LEN} characters"
                ));
            } else if !is_subdomain_shaped(prefix) {
                errors.push(format!(
                    "the prefix {prefix:?} must be a lowercase DNS subdomain such as example.com"
                ));
            }
            name
        }
        _ => {
            return vec![
                "a key has at most one '/', between an optional DNS subdomain prefix and the name (e.g. example.com/my-name)"
                    .to_owned(),
            ];
        }
    };
    if name.is_empty() {
        errors.push("the name part must not be empty".to_owned());
    } else {
        if name.len() > MAX_LABEL_LEN {
            errors.push(format!(
                "the name part must be at most {MAX_LABEL_LEN} characters (it has {})",
                name.len()
            ));
        }
        if !is_name_shaped(name) {
            errors.push(format!("the name part must be {NAME_SHAPE}"));
        }
    }
    errors
}

/// Why `value` is not a valid label value; empty when it is (the empty value is valid).
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > MAX_LABEL_LEN {
        errors.push(format!(
            "a label value must be at most {MAX_LABEL_LEN} characters (it has {})",
            value.len()
        ));
    }
    if !value.is_empty() && !is_name_shaped(value) {
        errors.push(format!("a label value must be empty or {NAME_SHAPE}"));
    }
    errors
}

/// Whether `{first}-{second}` is a valid label value, decided without building it: exactly when
/// [`label_value_errors`] of the joined string is empty.
pub fn joined_label_value_is_valid(first: &str, second: &str) -> bool {
    let shaped = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    first.len() + 1 + second.len() <= MAX_LABEL_LEN
        && first
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_alphanumeric)
        && second
            .as_bytes()
            .last()
            .is_some_and(u8::is_ascii_alphanumeric)
        && first.bytes().chain(second.bytes()).all(|c| shaped(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        let long_name = "a".repeat(63);
        let too_long_name = "a".repeat(64);
        let long_prefix = format!("{}.com/x", "a".repeat(249));
        let too_long_prefix = format!("{}.com/x", "a".repeat(250));
        let accepted = [
            "a",
            "A",
            "pool",
            "my.name",
            "123-abc",
            "My_Name",
            "example.com/MyName",
            "nodewright.example.com/pool",
            "kubernetes.io/hostname",
            "a-b.c/d",
            long_name.as_str(),
            long_prefix.as_str(),
        ];
        for k in accepted {
            assert_eq!(qualified_name_errors(k), Vec::<String>::new(), "{k}");
        }
        let rejected = [
            "",
            "-a",
            "a-",
            "a b",
            "a/b/c",
            "/a",
            "a/",
            "Example.com/a",
            "ex_ample.com/a",
            "-ex.com/a",
            "ex..com/a",
            "é",
            too_long_name.as_str(),
            too_long_prefix.as_str(),
        ];
        for k in rejected {
            assert!(
                !qualified_name_errors(k).is_empty(),
                "{k:?} should be rejected"
            );
        }
    }

    #[test]
    fn joined_label_values_are_judged_as_the_joined_string() {
        let long = "a".repeat(62);
        let parts = [
            "",
            "a",
            "tools",
            "1.0.0",
            "1.0.0-rc.1",
            "1.0.0+build",
            "-a",
            "a-",
            "a_b",
            "a b",
            "é",
            "A.b",
            &long,
        ];
        for first in parts {
            for second in parts {
                let joined = format!("{first}-{second}");
                assert_eq!(
                    joined_label_value_is_valid(first, second),
                    label_value_errors(&joined).is_empty(),
                    "{joined:?}"
                );
            }
        }
    }

    #[test]
    fn label_values() {
        for v in [
            "",
            "a",
            "gpu",
            "1.0.0",
            "tools-1.0.0-rc.1",
            "A_b.c-D",
            &"a".repeat(63),
        ] {
            assert_eq!(label_value_errors(v), Vec::<String>::new(), "{v}");
        }
        for v in [
            "-a",
            "a-",
            "1.0.0+build",
            "a b",
            "a/b",
            "é",
            &"a".repeat(64),
        ] {
            assert!(
                !label_value_errors(v).is_empty(),
                "{v:?} should be rejected"
            );
        }
        // Both problems are reported.
        assert_eq!(label_value_errors(&format!("{}+", "a".repeat(63))).len(), 2);
    }
}
