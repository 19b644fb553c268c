//! Kubernetes resource quantities (`500m`, `0.5`, `1.5Gi`, `2e3`), read as apimachinery's
//! `ParseQuantity` reads them and compared exactly.
//!
//! The resource rules compare limits with requests written in any mix of notations (`0.5` vs `500m`,
//! `1Gi` vs `1000Mi`), so floating point is out of the question. A value is kept as an exact decimal
//! (digits × 10^exponent) after the same normalisation Kubernetes applies: binary suffixes multiplied
//! out, magnitudes rounded *up* to the nanounit, and binary-suffixed values capped at 2^63-1. Two
//! quantities therefore compare here as they compare in the apiserver.

use std::cmp::Ordering;
use std::fmt;
use std::sync::LazyLock;

/// An exact quantity: `(-1)^negative × digits × 10^exp`, digits most significant first, without
/// leading or trailing zeros. Zero has no digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Amount {
    negative: bool,
    digits: Vec<u8>,
    exp: i64,
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not `<sign?><digits>[.<digits>]<suffix>`.
    #[error(
        "{0:?} is not a quantity: write a number with an optional suffix, such as 500m, 0.5, 2, 256Mi or 1Gi"
    )]
    Format(String),
    /// A suffix Kubernetes does not know (`1gb`, `1KB`).
    #[error(
        "{text:?} has an unknown suffix {suffix:?}: use one of m, k, M, G, T, P, E (powers of 1000), Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024), or an exponent such as e3"
    )]
    Suffix {
        /// The whole text.
        text: String,
        /// The suffix as written.
        suffix: String,
    },
}

/// How the suffix scales the number.
enum Scale {
    /// × 10^n (`m`, `k`, `M`…, `e3`).
    Decimal(i32),
    /// × 2^n (`Ki`, `Mi`…); these values are capped at 2^63-1.
    Binary(u32),
}

impl Amount {
    /// Zero.
    pub const ZERO: Amount = Amount {
        negative: false,
        digits: Vec::new(),
        exp: 0,
    };

    /// Parses a quantity as `resource.ParseQuantity` does.
    pub fn parse(text: &str) -> Result<Amount, QuantityError> {
        let format = || QuantityError::Format(text.to_owned());
        if text.is_empty() {
            return Err(format());
        }
        let (positive, num, denom, suffix) = scan(text.as_bytes()).ok_or_else(format)?;
        let scale = interpret(suffix).ok_or_else(|| QuantityError::Suffix {
            text: text.to_owned(),
            // The suffix is a tail of the text cut at an ASCII byte, so it is valid UTF-8.
            suffix: String::from_utf8_lossy(suffix).into_owned(),
        })?;
        // Room for a binary suffix's factor (at most 2^60, 19 digits), multiplied in place.
        let mut digits: Vec<u8> = Vec::with_capacity(num.len() + denom.len() + 20);
        digits.extend(num.iter().chain(denom).map(|d| d - b'0'));
        let denom_len = i64::try_from(denom.len()).map_err(|_| format())?;
        let mut amount = Amount {
            negative: !positive,
            digits,
            exp: -denom_len,
        };
        match scale {
            Scale::Decimal(e) => amount.exp += i64::from(e),
            Scale::Binary(e) => multiply(&mut amount.digits, 1u64 << e),
        }
        amount.normalize();
        amount.round_up_to_nano();
        if matches!(scale, Scale::Binary(_))
            && amount.magnitude_cmp(&MAX_INT64) == Ordering::Greater
        {
            amount.digits = MAX_INT64.digits.clone();
            amount.exp = 0;
        }
        Ok(amount)
    }

    /// True for zero.
    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// True for a value above zero.
    pub fn is_positive(&self) -> bool {
        !self.is_zero() && !self.negative
    }

    /// Strips leading and trailing zeros (keeping the value), and makes zero canonical.
    fn normalize(&mut self) {
        let lead = self.digits.iter().take_while(|&&d| d == 0).count();
        self.digits.drain(..lead);
        while self.digits.last() == Some(&0) {
            self.digits.pop();
            self.exp += 1;
        }
        if self.digits.is_empty() {
            *self = Amount::ZERO;
        }
    }

    /// Kubernetes keeps nine decimal places and rounds the magnitude up, so that asking for a tiny
    /// amount still gets some.
    fn round_up_to_nano(&mut self) {
        const NANO: i64 = -9;
        if self.is_zero() || self.exp >= NANO {
            return;
        }
        // Digits below 10^-9; after normalize() the last one is non-zero, so rounding always bumps.
        let drop = usize::try_from(NANO - self.exp).unwrap_or(usize::MAX);
        if drop >= self.digits.len() {
            self.digits = vec![1];
        } else {
            self.digits.truncate(self.digits.len() - drop);
            increment(&mut self.digits);
        }
        self.exp = NANO;
        self.normalize();
    }

    /// Compares magnitudes, ignoring signs.
    fn magnitude_cmp(&self, other: &Amount) -> Ordering {
        match (self.is_zero(), other.is_zero()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            (false, false) => {}
        }
        // The power of ten just above the most significant digit decides first.
        let order = |a: &Amount| {
            a.exp
                .saturating_add(i64::try_from(a.digits.len()).unwrap_or(i64::MAX))
        };
        order(self)
            .cmp(&order(other))
            // Same order: digit by digit; a missing digit is a zero, and trailing zeros were stripped.
            .then_with(|| self.digits.cmp(&other.digits))
    }

    fn sign(&self) -> i8 {
        if self.is_zero() {
            0
        } else if self.negative {
            -1
        } else {
            1
        }
    }
}

impl Ord for Amount {
    fn cmp(&self, other: &Self) -> Ordering {
        self.sign().cmp(&other.sign()).then_with(|| {
            let m = self.magnitude_cmp(other);
            if self.negative { m.reverse() } else { m }
        })
    }
}

impl PartialOrd for Amount {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Amount {
    /// Exponent notation that parses back to the same amount (`5e-1`, `1536`, `0`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            return f.write_str("0");
        }
        if self.negative {
            f.write_str("-")?;
        }
        for d in &self.digits {
            write!(f, "{d}")?;
        }
        if self.exp != 0 {
            write!(f, "e{}", self.exp)?;
        }
        Ok(())
    }
}

/// 2^63-1, the cap of binary-suffixed quantities (every `Mi`/`Gi` value is compared with it).
static MAX_INT64: LazyLock<Amount> = LazyLock::new(max_int64);

fn max_int64() -> Amount {
    let mut a = Amount {
        negative: false,
        digits: i64::MAX.to_string().bytes().map(|d| d - b'0').collect(),
        exp: 0,
    };
    a.normalize();
    a
}

/// Adds one unit in the last place.
fn increment(digits: &mut Vec<u8>) {
    for d in digits.iter_mut().rev() {
        if *d == 9 {
            *d = 0;
        } else {
            *d += 1;
            return;
        }
    }
    digits.insert(0, 1);
}

/// Multiplies a decimal digit string by `factor`, in place.
fn multiply(digits: &mut Vec<u8>, factor: u64) {
    let mut carry: u128 = 0;
    for d in digits.iter_mut().rev() {
        let v = u128::from(*d) * u128::from(factor) + carry;
        *d = (v % 10) as u8;
        carry = v / 10;
    }
    // What is left of the carry becomes the leading digits (at most 39 of them).
    let mut leading = [0u8; 40];
    let mut n = 0;
    while carry > 0 {
        leading[n] = (carry % 10) as u8;
        carry /= 10;
        n += 1;
    }
    digits.splice(0..0, leading[..n].iter().rev().copied());
}

fn is_suffix_char(c: u8) -> bool {
    b"eEinumkKMGTP".contains(&c)
}

/// The pieces of a quantity: whether it is positive, the numerator digits (leading zeros dropped,
/// `"0"` when none), the denominator digits and the suffix.
type Pieces<'a> = (bool, &'a [u8], &'a [u8], &'a [u8]);

/// apimachinery's `parseQuantityString`: sign, numerator (leading zeros dropped), optional
/// `.denominator`, then a suffix of suffix letters, an optional sign and digits. `None` is
/// `ErrFormatWrong`.
fn scan(s: &[u8]) -> Option<Pieces<'_>> {
    let end = s.len();
    let mut pos = 0;
    let mut positive = true;
    match s.first() {
        Some(b'-') => {
            positive = false;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    // Leading zeros; all zeros (or nothing after the sign) is zero.
    while pos < end && s[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Some((positive, b"0", b"", b""));
    }
    let digits_end =
        |from: usize| from + s[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let i = digits_end(pos);
    let num: &[u8] = if i == pos { b"0" } else { &s[pos..i] };
    pos = i;
    if pos >= end {
        return Some((positive, num, b"", b""));
    }
    let mut denom: &[u8] = b"";
    if s[pos] == b'.' {
        pos += 1;
        let i = digits_end(pos);
        denom = &s[pos..i];
        pos = i;
        if pos >= end {
            return Some((positive, num, denom, b""));
        }
    }
    let suffix_start = pos;
    while pos < end && is_suffix_char(s[pos]) {
        pos += 1;
    }
    if pos < end && (s[pos] == b'-' || s[pos] == b'+') {
        pos += 1;
    }
    if digits_end(pos) != end {
        return None;
    }
    Some((positive, num, denom, &s[suffix_start..]))
}

/// apimachinery's suffix table, then `e<int>`/`E<int>` exponents. `None` is `ErrSuffix`.
fn interpret(suffix: &[u8]) -> Option<Scale> {
    Some(match suffix {
        b"n" => Scale::Decimal(-9),
        b"u" => Scale::Decimal(-6),
        b"m" => Scale::Decimal(-3),
        b"" => Scale::Decimal(0),
        b"k" => Scale::Decimal(3),
        b"M" => Scale::Decimal(6),
        b"G" => Scale::Decimal(9),
        b"T" => Scale::Decimal(12),
        b"P" => Scale::Decimal(15),
        b"E" => Scale::Decimal(18),
        b"Ki" => Scale::Binary(10),
        b"Mi" => Scale::Binary(20),
        b"Gi" => Scale::Binary(30),
        b"Ti" => Scale::Binary(40),
        b"Pi" => Scale::Binary(50),
        b"Ei" => Scale::Binary(60),
        [b'e' | b'E', rest @ ..] if !rest.is_empty() => {
            let parsed: i64 = std::str::from_utf8(rest).ok()?.parse().ok()?;
            // Go converts the int64 to int32 by truncation; so do we, to agree on absurd exponents.
            Scale::Decimal(parsed as i32)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(s: &str) -> Amount {
        match Amount::parse(s) {
            Ok(a) => a,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn notations_compare_exactly() {
        use Ordering::*;
        let cases = [
            ("0.5", "500m", Equal),
            (".5", "500m", Equal),
            ("1", "1000m", Equal),
            ("1.", "1", Equal),
            ("1Gi", "1000Mi", Greater),
            ("1Gi", "1024Mi", Equal),
            ("1Ki", "1024", Equal),
            ("1k", "1000", Equal),
            ("1e3", "1k", Equal),
            ("1E3", "1k", Equal),
            ("1e-3", "1m", Equal),
            ("1.5Gi", "1536Mi", Equal),
            ("100m", "500m", Less),
            ("2", "1999m", Greater),
            ("1M", "1Mi", Less),
            ("-1", "0", Less),
            ("-2", "-1", Less),
            ("+1", "1", Equal),
            ("007", "7", Equal),
            ("1n", "1e-9", Equal),
            ("1u", "1000n", Equal),
            ("1e30", "1e29", Greater),
            ("1P", "1e15", Equal),
            ("1E", "1e18", Equal),
        ];
        for (a, b, want) in cases {
            assert_eq!(q(a).cmp(&q(b)), want, "{a} vs {b}");
            assert_eq!(q(b).cmp(&q(a)), want.reverse(), "{b} vs {a}");
        }
    }

    #[test]
    fn rounds_up_to_the_nanounit_and_caps_binary() {
        assert_eq!(q("0.1n"), q("1n"));
        assert_eq!(q("1.0000000001"), q("1.000000001"));
        assert_eq!(q("-0.1n"), q("-1n"));
        assert_eq!(q("1e-2147483648"), q("1n"));
        assert_eq!(q("16Ei"), q("9223372036854775807"));
        assert_eq!(q("-16Ei"), q("-9223372036854775807"));
        // Decimal suffixes are not capped.
        assert_eq!(q("16E").cmp(&q("9223372036854775807")), Ordering::Greater);
    }

    #[test]
    fn zero_and_sign() {
        for z in ["0", "0.0", "-0", "+0", "0m", "0Gi", "000", ".", "+", "-"] {
            assert!(q(z).is_zero(), "{z}");
            assert!(!q(z).is_positive(), "{z}");
        }
        assert!(q("1n").is_positive());
        assert!(!q("-1").is_positive());
    }

    #[test]
    fn rejects_what_kubernetes_rejects() {
        for bad in ["", " 1", "1 ", "abc", "1.2.3", "1Mx", "1e5.5", "1gb", "1KB"] {
            assert!(
                matches!(Amount::parse(bad), Err(QuantityError::Format(_))),
                "{bad:?}: {:?}",
                Amount::parse(bad)
            );
        }
        for bad in ["1ki", "1M5", "1eE5", "1mi", "1+1", "+-1", "1e", "1-", "--1"] {
            assert!(
                matches!(Amount::parse(bad), Err(QuantityError::Suffix { .. })),
                "{bad:?}: {:?}",
                Amount::parse(bad)
            );
        }
        let msg = Amount::parse("1ki")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("\"ki\"") && msg.contains("Ki"), "{msg}");
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = Amount::parse(&s);
        }

        #[test]
        fn never_panics_on_quantity_shaped_garbage(s in "[-+]?[0-9.]{0,30}[eEinumkKMGTP]{0,3}[-+]?[0-9]{0,12}") {
            let _ = Amount::parse(&s);
        }

        #[test]
        fn display_round_trips(mantissa in any::<i64>(), exp in -20i32..30) {
            let a = q(&format!("{mantissa}e{exp}"));
            prop_assert_eq!(q(&a.to_string()), a);
        }

        #[test]
        fn milli_units_order_like_integers(a in any::<i64>(), b in any::<i64>()) {
            let (x, y) = (q(&format!("{a}m")), q(&format!("{b}m")));
            prop_assert_eq!(x.cmp(&y), a.cmp(&b));
            // The same value written as a decimal fraction is equal.
            let frac = |v: i64| {
                let sign = if v < 0 { "-" } else { "" };
                let m = v.unsigned_abs();
                format!("{sign}{}.{:03}", m / 1000, m % 1000)
            };
            prop_assert_eq!(q(&frac(a)), x);
        }

        #[test]
        fn binary_suffixes_multiply(n in 0u32..1_000_000) {
            prop_assert_eq!(q(&format!("{n}Ki")), q(&(u64::from(n) * 1024).to_string()));
            prop_assert_eq!(q(&format!("{n}Mi")), q(&(u64::from(n) << 20).to_string()));
        }
    }
}
