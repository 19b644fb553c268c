//! Semantic versions exactly as Go's `golang.org/x/mod/semver` reads them.
//!
//! Upstream validates `version` and orders versions (downgrade guard) with that package, so NodeWrights
//! written for the Go operator must be accepted, rejected and ordered identically here. Its rules
//! differ from the semver crate's: a leading `v` is required (callers prepend it, as upstream does),
//! `v1` and `v1.2` are shorthands for `v1.0.0` and `v1.2.0`, shorthands take no pre-release or build
//! suffix, and build metadata is ignored when comparing.

use std::cmp::Ordering;

/// A parsed version; the parts borrow the text they were read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version<'a> {
    /// Major number, digits without leading zero.
    pub major: &'a str,
    /// Minor number (`"0"` when omitted).
    pub minor: &'a str,
    /// Patch number (`"0"` when omitted).
    pub patch: &'a str,
    /// Pre-release including its leading `-`, or empty.
    pub prerelease: &'a str,
    /// Build metadata including its leading `+`, or empty.
    pub build: &'a str,
}

/// Why a string is not a version; the wording completes "… is not a valid semantic version: …".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SemverError {
    /// No leading `v`.
    #[error("it must start with \"v\"")]
    MissingV,
    /// A number is missing or is not made of digits.
    #[error("the {0} number is missing")]
    MissingNumber(&'static str),
    /// `01`: numbers have no leading zeros.
    #[error("the {part} number {digits:?} has a leading zero")]
    LeadingZero {
        /// major, minor or patch.
        part: &'static str,
        /// The digits as written.
        digits: String,
    },
    /// `v1-rc.1`: the shorthands take no suffix.
    #[error("a pre-release or build suffix needs all three numbers MAJOR.MINOR.PATCH")]
    SuffixOnShorthand,
    /// A pre-release that is not dot-separated identifiers of `[0-9A-Za-z-]`.
    #[error(
        "the pre-release {0:?} must be dot-separated, non-empty identifiers of letters, digits and '-', numeric ones without leading zeros"
    )]
    BadPrerelease(String),
    /// Build metadata that is not dot-separated identifiers of `[0-9A-Za-z-]`.
    #[error(
        "the build metadata {0:?} must be dot-separated, non-empty identifiers of letters, digits and '-'"
    )]
    BadBuild(String),
    /// Anything else after the numbers.
    #[error("unexpected {0:?} after the version numbers")]
    Trailing(String),
}

/// Parses `v` as Go's `semver` package does (it must start with `v`).
pub fn parse(v: &str) -> Result<Version<'_>, SemverError> {
    parse_after_v(v.strip_prefix('v').ok_or(SemverError::MissingV)?)
}

/// [`parse`] of `v` followed by `rest`, without building that string.
pub fn parse_after_v(rest: &str) -> Result<Version<'_>, SemverError> {
    let (major, rest) = number(rest, "major")?;
    let (minor, rest) = match rest.strip_prefix('.') {
        Some(r) => number(r, "minor")?,
        None => return shorthand(major, "0", rest),
    };
    let (patch, mut rest) = match rest.strip_prefix('.') {
        Some(r) => number(r, "patch")?,
        None => return shorthand(major, minor, rest),
    };
    let mut prerelease = "";
    if rest.starts_with('-') {
        let (p, r) = split_prerelease(rest)?;
        prerelease = p;
        rest = r;
    }
    let mut build = "";
    if rest.starts_with('+') {
        build = check_build(rest)?;
        rest = "";
    }
    if !rest.is_empty() {
        return Err(SemverError::Trailing(rest.to_owned()));
    }
    Ok(Version {
        major,
        minor,
        patch,
        prerelease,
        build,
    })
}

/// True when Go's `semver.IsValid` accepts `v`.
pub fn is_valid(v: &str) -> bool {
    parse(v).is_ok()
}

/// Go's `semver.Compare`: an invalid version is below every valid one, two invalid ones are equal,
/// build metadata is ignored.
pub fn compare(v: &str, w: &str) -> Ordering {
    match (parse(v), parse(w)) {
        (Err(_), Err(_)) => Ordering::Equal,
        (Err(_), Ok(_)) => Ordering::Less,
        (Ok(_), Err(_)) => Ordering::Greater,
        (Ok(a), Ok(b)) => compare_int(a.major, b.major)
            .then_with(|| compare_int(a.minor, b.minor))
            .then_with(|| compare_int(a.patch, b.patch))
            .then_with(|| compare_prerelease(a.prerelease, b.prerelease)),
    }
}

/// The end of a `vMAJOR` or `vMAJOR.MINOR` shorthand: nothing may follow.
fn shorthand<'a>(
    major: &'a str,
    minor: &'a str,
    rest: &'a str,
) -> Result<Version<'a>, SemverError> {
    if rest.is_empty() {
        Ok(Version {
            major,
            minor,
            patch: "0",
            prerelease: "",
            build: "",
        })
    } else if rest.starts_with(['-', '+']) {
        Err(SemverError::SuffixOnShorthand)
    } else {
        Err(SemverError::Trailing(rest.to_owned()))
    }
}

/// Leading digits without a leading zero (Go's `parseInt`).
fn number<'a>(v: &'a str, part: &'static str) -> Result<(&'a str, &'a str), SemverError> {
    let end = v.bytes().take_while(u8::is_ascii_digit).count();
    if end == 0 {
        return Err(SemverError::MissingNumber(part));
    }
    let (digits, rest) = v.split_at(end);
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(SemverError::LeadingZero {
            part,
            digits: digits.to_owned(),
        });
    }
    Ok((digits, rest))
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// A numeric identifier with a leading zero (`01`); `0` alone is fine.
fn is_bad_num(ident: &str) -> bool {
    ident.len() > 1 && ident.bytes().all(|c| c.is_ascii_digit()) && ident.starts_with('0')
}

fn is_num(ident: &str) -> bool {
    ident.bytes().all(|c| c.is_ascii_digit())
}

/// Splits `-pre.release` off the front, up to a `+` (Go's `parsePrerelease`).
fn split_prerelease(v: &str) -> Result<(&str, &str), SemverError> {
    let end = v.find('+').unwrap_or(v.len());
    let (pre, rest) = v.split_at(end);
    let body = &pre[1..];
    let ok = body
        .split('.')
        .all(|ident| !ident.is_empty() && ident.bytes().all(is_ident_char) && !is_bad_num(ident));
    if ok {
        Ok((pre, rest))
    } else {
        Err(SemverError::BadPrerelease(pre.to_owned()))
    }
}

/// Checks `+build.meta`, which runs to the end (Go's `parseBuild`).
fn check_build(v: &str) -> Result<&str, SemverError> {
    let body = &v[1..];
    let ok = body
        .split('.')
        .all(|ident| !ident.is_empty() && ident.bytes().all(is_ident_char));
    if ok {
        Ok(v)
    } else {
        Err(SemverError::BadBuild(v.to_owned()))
    }
}

/// Numbers of any length, without leading zeros: longer is larger, else compare digit by digit.
fn compare_int(x: &str, y: &str) -> Ordering {
    x.len().cmp(&y.len()).then_with(|| x.cmp(y))
}

/// Semver precedence of pre-releases; no pre-release ranks above any pre-release.
fn compare_prerelease(x: &str, y: &str) -> Ordering {
    if x == y {
        return Ordering::Equal;
    }
    if x.is_empty() {
        return Ordering::Greater;
    }
    if y.is_empty() {
        return Ordering::Less;
    }
    // Both start with '-'; identifiers are dot-separated.
    let mut xs = x[1..].split('.');
    let mut ys = y[1..].split('.');
    loop {
        match (xs.next(), ys.next()) {
            (Some(dx), Some(dy)) => {
                if dx == dy {
                    continue;
                }
                let (nx, ny) = (is_num(dx), is_num(dy));
                return match (nx, ny) {
                    (true, false) => Ordering::Less,
                    (false, true) => Ordering::Greater,
                    (true, true) => compare_int(dx, dy),
                    (false, false) => dx.cmp(dy),
                };
            }
            // The one with more identifiers ranks higher.
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (None, None) => return Ordering::Equal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn validity_matches_go() {
        let accepted = [
            "v1",
            "v1.2",
            "v1.2.3",
            "v0.0.0",
            "v10.20.30",
            "v1.2.3-rc.1",
            "v1.2.3-0",
            "v1.2.3-alpha-beta.0a",
            "v1.2.3-01a",
            "v1.2.3+build.7",
            "v1.2.3+001",
            "v1.2.3-rc.1+build.7",
            "v123456789012345678901234567890.0.0",
        ];
        for v in accepted {
            assert!(is_valid(v), "{v} should be valid");
        }
        let rejected = [
            "",
            "v",
            "1.2.3",
            "V1.2.3",
            "v01.2.3",
            "v1.02.3",
            "v1.2.03",
            "v1.",
            "v1.2.",
            "v1.2.3.4",
            "v1-rc.1",
            "v1.2+build",
            "v1.2.3-",
            "v1.2.3-rc..1",
            "v1.2.3-01",
            "v1.2.3-rc_1",
            "v1.2.3+",
            "v1.2.3+a..b",
            "v1.2.3+a_b",
            "v2024/07/06",
            "v1.2.3 ",
        ];
        for v in rejected {
            assert!(!is_valid(v), "{v} should be invalid");
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(parse("1.2.3"), Err(SemverError::MissingV));
        assert_eq!(
            parse("v01.2.3"),
            Err(SemverError::LeadingZero {
                part: "major",
                digits: "01".into()
            })
        );
        assert_eq!(parse("v1-rc"), Err(SemverError::SuffixOnShorthand));
        assert_eq!(
            parse("v2024/07/06"),
            Err(SemverError::Trailing("/07/06".into()))
        );
        assert_eq!(parse("v1."), Err(SemverError::MissingNumber("minor")));
    }

    #[test]
    fn shorthands_fill_zeros() {
        let v = parse("v1").ok();
        assert_eq!(
            v.map(|v| (v.major, v.minor, v.patch)),
            Some(("1", "0", "0"))
        );
        let v = parse("v1.2.3-rc.1+b").ok();
        assert_eq!(v.map(|v| (v.prerelease, v.build)), Some(("-rc.1", "+b")));
    }

    #[test]
    fn ordering_matches_go() {
        use Ordering::*;
        let cases = [
            ("v1", "v1.0.0", Equal),
            ("v1.2", "v1.2.0", Equal),
            ("v1.2.3", "v1.2.4", Less),
            ("v1.10.0", "v1.9.0", Greater),
            ("v2.0.0", "v10.0.0", Less),
            ("v1.0.0-rc.1", "v1.0.0", Less),
            ("v1.0.0-alpha", "v1.0.0-alpha.1", Less),
            ("v1.0.0-alpha.1", "v1.0.0-alpha.beta", Less),
            ("v1.0.0-beta.2", "v1.0.0-beta.11", Less),
            ("v1.0.0-rc.1", "v1.0.0-beta.11", Greater),
            ("v1.0.0+a", "v1.0.0+b", Equal),
            ("bad", "v0.0.0", Less),
            ("v0.0.0", "bad", Greater),
            ("bad", "worse", Equal),
        ];
        for (a, b, want) in cases {
            assert_eq!(compare(a, b), want, "{a} vs {b}");
            assert_eq!(compare(b, a), want.reverse(), "{b} vs {a}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = parse(&s);
            let _ = compare(&s, "v1.0.0");
        }

        #[test]
        fn generated_versions_are_valid_and_ordered(
            a in 0u64..1000, b in 0u64..1000, c in 0u64..1000,
            d in 0u64..1000, e in 0u64..1000, f in 0u64..1000,
            pre in proptest::option::of("[a-z][a-z0-9]{0,5}(\\.[1-9][0-9]{0,3}){0,2}"),
        ) {
            let x = format!("v{a}.{b}.{c}");
            let y = format!("v{d}.{e}.{f}");
            prop_assert!(is_valid(&x));
            prop_assert_eq!(compare(&x, &y), (a, b, c).cmp(&(d, e, f)));
            if let Some(pre) = pre {
                let p = format!("{x}-{pre}");
                prop_assert!(is_valid(&p));
                prop_assert_eq!(compare(&p, &x), Ordering::Less);
                let built = format!("{p}+build.{a}");
                prop_assert_eq!(compare(&built, &p), Ordering::Equal);
            }
        }

        #[test]
        fn comparison_is_antisymmetric(x in "v[0-9]{1,2}(\\.[0-9]{1,2}){0,2}(-[a-z0-9.]{1,6})?",
                                       y in "v[0-9]{1,2}(\\.[0-9]{1,2}){0,2}(-[a-z0-9.]{1,6})?") {
            prop_assert_eq!(compare(&x, &y), compare(&y, &x).reverse());
            prop_assert_eq!(compare(&x, &x), Ordering::Equal);
        }
    }
}
