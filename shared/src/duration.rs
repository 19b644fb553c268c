//! Go duration syntax (`time.ParseDuration` / `Duration.String`), reproduced exactly.
//!
//! Users write `stageTimeout: 1h30m` and `gracefulShutdown: 30s` the way they would for the upstream Go
//! operator, and the environment variables `JOB_STAGE_TIMEOUT`, `JOB_TTL_*` use the same syntax. Both
//! services must accept and reject exactly the strings Go accepts and rejects, so this is a port of Go's
//! algorithm (including its overflow checks and float rounding of fractions), not an approximation.

use std::fmt;
use std::str::FromStr;

/// A signed duration with nanosecond precision, the range of Go's `time.Duration` (an `i64` of
/// nanoseconds, roughly ±292 years).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration(i64);

/// Why a string is not a Go duration. Every variant carries the original text so a message can quote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Empty, or not of the form `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`.
    #[error("invalid duration {0:?}: expected a Go duration such as \"45s\", \"1h30m\" or \"0\"")]
    Invalid(String),
    /// A number without a unit, e.g. `"30"`.
    #[error("missing unit in duration {0:?}: add one of ns, us, ms, s, m, h (e.g. \"30s\")")]
    MissingUnit(String),
    /// A unit Go does not know, e.g. `"3d"`.
    #[error("unknown unit {unit:?} in duration {text:?}: use one of ns, us, ms, s, m, h")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole text.
        text: String,
    },
    /// The value does not fit a Go duration (about 292 years).
    #[error("duration {0:?} overflows: the largest Go duration is 2562047h47m16.854775807s")]
    Overflow(String),
}

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
/// `1 << 63`: the magnitude of `i64::MIN`, the largest magnitude Go's parser tolerates mid-way.
const LIMIT: u64 = 1 << 63;

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => NANOSECOND,
        // U+00B5 micro sign and U+03BC Greek small letter mu, as Go accepts both.
        "us" | "\u{b5}s" | "\u{3bc}s" => MICROSECOND,
        "ms" => MILLISECOND,
        "s" => SECOND,
        "m" => MINUTE,
        "h" => HOUR,
        _ => return None,
    })
}

impl GoDuration {
    /// Zero: "no time bound" wherever this product uses a duration as a timeout.
    pub const ZERO: GoDuration = GoDuration(0);
    /// The largest Go duration.
    pub const MAX: GoDuration = GoDuration(i64::MAX);
    /// The smallest (most negative) Go duration.
    pub const MIN: GoDuration = GoDuration(i64::MIN);

    /// A duration of `nanos` nanoseconds.
    pub const fn from_nanos(nanos: i64) -> Self {
        GoDuration(nanos)
    }

    /// A duration of whole seconds, or `None` when it does not fit.
    pub const fn from_secs(secs: i64) -> Option<Self> {
        match secs.checked_mul(SECOND as i64) {
            Some(n) => Some(GoDuration(n)),
            None => None,
        }
    }

    /// The signed number of nanoseconds.
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// True for a negative duration.
    pub const fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// The duration as a `std::time::Duration`, or `None` when it is negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0)
            .ok()
            .map(std::time::Duration::from_nanos)
    }

    /// Parses Go duration syntax exactly as `time.ParseDuration` does.
    pub fn parse(text: &str) -> Result<Self, DurationError> {
        let invalid = || DurationError::Invalid(text.to_owned());
        let overflow = || DurationError::Overflow(text.to_owned());
        let mut s = text;
        let mut neg = false;
        if let Some(rest) = s.strip_prefix('-') {
            neg = true;
            s = rest;
        } else if let Some(rest) = s.strip_prefix('+') {
            s = rest;
        }
        if s == "0" {
            return Ok(GoDuration(0));
        }
        if s.is_empty() {
            return Err(invalid());
        }
        let mut total: u64 = 0;
        while !s.is_empty() {
            let first = s.as_bytes()[0];
            if !(first == b'.' || first.is_ascii_digit()) {
                return Err(invalid());
            }
            // Integer part.
            let before = s.len();
            let (int_part, rest) = leading_int(s).ok_or_else(invalid)?;
            s = rest;
            let had_int = before != s.len();
            // Fraction part.
            let mut frac: u64 = 0;
            let mut scale: f64 = 1.0;
            let mut had_frac = false;
            if let Some(rest) = s.strip_prefix('.') {
                let before = rest.len();
                let (f, sc, rest) = leading_fraction(rest);
                frac = f;
                scale = sc;
                had_frac = before != rest.len();
                s = rest;
            }
            if !had_int && !had_frac {
                return Err(invalid());
            }
            // Unit: everything up to the next digit or '.'.
            let unit_len = s
                .find(|c: char| c == '.' || c.is_ascii_digit())
                .unwrap_or(s.len());
            if unit_len == 0 {
                return Err(DurationError::MissingUnit(text.to_owned()));
            }
            let (unit, rest) = s.split_at(unit_len);
            s = rest;
            let unit_ns = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit {
                unit: unit.to_owned(),
                text: text.to_owned(),
            })?;
            if int_part > LIMIT / unit_ns {
                return Err(overflow());
            }
            let mut v = int_part * unit_ns;
            if frac > 0 {
                // Go: v += uint64(float64(f) * (float64(unit) / scale)); float-to-uint truncates.
                let add = (frac as f64) * (unit_ns as f64 / scale);
                v = v.checked_add(add as u64).ok_or_else(overflow)?;
                if v > LIMIT {
                    return Err(overflow());
                }
            }
            total = total.checked_add(v).ok_or_else(overflow)?;
            if total > LIMIT {
                return Err(overflow());
            }
        }
        if neg {
            // total <= 1<<63, so the negation always fits (1<<63 is exactly i64::MIN).
            return Ok(GoDuration(0i64.wrapping_sub_unsigned(total)));
        }
        i64::try_from(total).map(GoDuration).map_err(|_| overflow())
    }
}

/// Consumes leading decimal digits; `None` on overflow past `1 << 63` (Go's `errLeadingInt`).
fn leading_int(s: &str) -> Option<(u64, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let mut x: u64 = 0;
    for c in s.as_bytes()[..digits].iter() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(c - b'0');
        if x > LIMIT {
            return None;
        }
    }
    Some((x, &s[digits..]))
}

/// Consumes leading fraction digits, keeping as many as fit and ignoring the rest, as Go does.
fn leading_fraction(s: &str) -> (u64, f64, &str) {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let mut x: u64 = 0;
    let mut scale = 1.0;
    let mut overflow = false;
    for c in s.as_bytes()[..digits].iter() {
        if overflow {
            continue;
        }
        if x > (LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let y = x * 10 + u64::from(c - b'0');
        if y > LIMIT {
            overflow = true;
            continue;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale, &s[digits..])
}

impl FromStr for GoDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GoDuration::parse(s)
    }
}

impl fmt::Display for GoDuration {
    /// Formats as Go's `Duration.String`: `1h0m0s`, `1.5s`, `300ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.0 < 0;
        let mut u = self.0.unsigned_abs();
        // Built right to left, like Go.
        let mut out: Vec<u8> = Vec::with_capacity(32);
        if u < SECOND {
            out.push(b's');
            let prec;
            if u == 0 {
                return f.write_str("0s");
            } else if u < MICROSECOND {
                prec = 0;
                out.push(b'n');
            } else if u < MILLISECOND {
                prec = 3;
                // "µ" (U+00B5) is two bytes; pushed reversed.
                out.extend_from_slice(&[0xb5, 0xc2]);
            } else {
                prec = 6;
                out.push(b'm');
            }
            u = push_frac(&mut out, u, prec);
            push_int(&mut out, u);
        } else {
            out.push(b's');
            u = push_frac(&mut out, u, 9);
            push_int(&mut out, u % 60);
            u /= 60;
            if u > 0 {
                out.push(b'm');
                push_int(&mut out, u % 60);
                u /= 60;
                if u > 0 {
                    out.push(b'h');
                    push_int(&mut out, u);
                }
            }
        }
        if neg {
            out.push(b'-');
        }
        out.reverse();
        // Only ASCII and a whole "µ" were pushed, so this is valid UTF-8.
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

/// Pushes (reversed) the fraction of `v / 10^prec`, omitting trailing zeros and the point when the
/// fraction is zero; returns `v / 10^prec`.
fn push_frac(out: &mut Vec<u8>, mut v: u64, prec: u32) -> u64 {
    let mut printed = false;
    for _ in 0..prec {
        let digit = (v % 10) as u8;
        printed = printed || digit != 0;
        if printed {
            out.push(b'0' + digit);
        }
        v /= 10;
    }
    if printed {
        out.push(b'.');
    }
    v
}

/// Pushes (reversed) the decimal digits of `v`.
fn push_int(out: &mut Vec<u8>, mut v: u64) {
    if v == 0 {
        out.push(b'0');
        return;
    }
    while v > 0 {
        out.push(b'0' + (v % 10) as u8);
        v /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Result<i64, DurationError> {
        GoDuration::parse(s).map(GoDuration::as_nanos)
    }

    /// Cases from Go's own `time` package tests (parseDurationTests).
    #[test]
    fn accepts_what_go_accepts() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("5s", 5 * SECOND as i64),
            ("30s", 30 * SECOND as i64),
            ("1478s", 1478 * SECOND as i64),
            ("-5s", -5 * SECOND as i64),
            ("+5s", 5 * SECOND as i64),
            ("-0", 0),
            ("+0", 0),
            ("5.0s", 5 * SECOND as i64),
            ("5.6s", 5 * SECOND as i64 + 600 * MILLISECOND as i64),
            ("5.s", 5 * SECOND as i64),
            (".5s", 500 * MILLISECOND as i64),
            ("1.0s", SECOND as i64),
            ("1.00s", SECOND as i64),
            ("1.004s", SECOND as i64 + 4 * MILLISECOND as i64),
            ("1.0040s", SECOND as i64 + 4 * MILLISECOND as i64),
            ("100.00100s", 100 * SECOND as i64 + MILLISECOND as i64),
            ("10ns", 10),
            ("11us", 11 * MICROSECOND as i64),
            ("12\u{b5}s", 12 * MICROSECOND as i64),
            ("12\u{3bc}s", 12 * MICROSECOND as i64),
            ("13ms", 13 * MILLISECOND as i64),
            ("14s", 14 * SECOND as i64),
            ("15m", 15 * MINUTE as i64),
            ("16h", 16 * HOUR as i64),
            ("3h30m", (3 * HOUR + 30 * MINUTE) as i64),
            (
                "10.5s4m",
                (4 * MINUTE + 10 * SECOND + 500 * MILLISECOND) as i64,
            ),
            (
                "-2m3.4s",
                -((2 * MINUTE + 3 * SECOND + 400 * MILLISECOND) as i64),
            ),
            (
                "1h2m3s4ms5us6ns",
                (HOUR + 2 * MINUTE + 3 * SECOND + 4 * MILLISECOND + 5 * MICROSECOND + 6) as i64,
            ),
            (
                "39h9m14.425s",
                (39 * HOUR + 9 * MINUTE + 14 * SECOND + 425 * MILLISECOND) as i64,
            ),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 20 * MINUTE as i64),
            ("9007199254740993ns", (1i64 << 53) + 1),
            ("9223372036854775807ns", i64::MAX),
            ("9223372036854775.807us", i64::MAX),
            ("9223372036s854ms775us807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("-9223372036854775.808us", i64::MIN),
            ("-9223372036s854ms775us808ns", i64::MIN),
            ("-2562047h47m16.854775808s", i64::MIN),
            ("0.100000000000000000000h", 6 * MINUTE as i64),
            (
                "0.830103483285477580700h",
                (49 * MINUTE + 48 * SECOND + 372_539_827) as i64,
            ),
            ("1.5h", (HOUR + 30 * MINUTE) as i64),
            ("2h45m", (2 * HOUR + 45 * MINUTE) as i64),
            ("1h0m0s", HOUR as i64),
            ("300ms", 300 * MILLISECOND as i64),
        ];
        for (text, want) in cases {
            assert_eq!(p(text), Ok(*want), "parsing {text:?}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        for text in [
            "",
            "3",
            "-",
            "s",
            ".",
            "-.",
            ".s",
            "+.s",
            "1d",
            "\u{85}\u{85}",
            "\u{ffff}",
            "9223372036854775810ns",
            "9223372036854775808ns",
            "-9223372036854775809ns",
            "9223372036854ms775us808ns",
            "3000000h",
            "1h-5m",
            "1.5.5s",
            "1 h",
            " 1h",
            "1h ",
            "1H",
        ] {
            assert!(p(text).is_err(), "{text:?} should be rejected");
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(p("30"), Err(DurationError::MissingUnit("30".into())));
        assert_eq!(
            p("3d"),
            Err(DurationError::UnknownUnit {
                unit: "d".into(),
                text: "3d".into()
            })
        );
        assert_eq!(
            p("3000000h"),
            Err(DurationError::Overflow("3000000h".into()))
        );
        assert_eq!(p("abc"), Err(DurationError::Invalid("abc".into())));
        let msg = p("3d").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.contains("\"d\"") && msg.contains("ns, us, ms, s, m, h"),
            "{msg}"
        );
    }

    /// Cases from Go's durationTests.
    #[test]
    fn formats_like_go() {
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (1100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (3_300_000_000, "3.3s"),
            ((4 * MINUTE + 5 * SECOND) as i64, "4m5s"),
            ((4 * MINUTE + 5001 * MILLISECOND) as i64, "4m5.001s"),
            (
                (5 * HOUR + 6 * MINUTE + 7001 * MILLISECOND) as i64,
                "5h6m7.001s",
            ),
            ((8 * MINUTE) as i64 + 1, "8m0.000000001s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
            (HOUR as i64, "1h0m0s"),
            (-(HOUR as i64), "-1h0m0s"),
            (300 * MILLISECOND as i64, "300ms"),
        ];
        for (nanos, want) in cases {
            assert_eq!(GoDuration::from_nanos(*nanos).to_string(), *want);
        }
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(n in any::<i64>()) {
            let d = GoDuration::from_nanos(n);
            prop_assert_eq!(GoDuration::parse(&d.to_string()), Ok(d));
        }

        #[test]
        fn whole_units_round_trip(h in 0i64..2_000_000, m in 0i64..60, s in 0i64..60) {
            let text = format!("{h}h{m}m{s}s");
            let want = h * HOUR as i64 + m * MINUTE as i64 + s * SECOND as i64;
            prop_assert_eq!(p(&text), Ok(want));
        }

        #[test]
        fn parse_is_monotonic_in_the_number(a in 0u32..2_000_000, b in 0u32..2_000_000, unit in "(ns|us|ms|s|m|h)") {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let dl = GoDuration::parse(&format!("{lo}{unit}"));
            let dh = GoDuration::parse(&format!("{hi}{unit}"));
            prop_assert!(dl.is_ok() && dh.is_ok());
            prop_assert!(dl.ok() <= dh.ok());
        }

        #[test]
        fn never_panics_on_arbitrary_text(text in ".{0,40}") {
            let _ = GoDuration::parse(&text);
        }

        #[test]
        fn sign_negates(n in 0i64..i64::MAX) {
            let d = GoDuration::from_nanos(n);
            prop_assert_eq!(GoDuration::parse(&format!("-{d}")), Ok(GoDuration::from_nanos(-n)));
        }
    }
}
