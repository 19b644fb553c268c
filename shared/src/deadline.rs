//! Deadline arithmetic for package stages (DESIGN §4.3).
//!
//! A package's `stageTimeout` bounds one attempt of one stage. It becomes the pod's (package stages) or
//! the Job's (interrupts) `activeDeadlineSeconds`, an `int32` of whole seconds that must be positive.
//! Three cases matter:
//! - `0` means "no bound": the field is left out, so a hanging attempt hangs until someone acts.
//! - a fraction of a second still needs a bound, so seconds round *up* and are never 0.
//! - objects can reach storage without the webhook (it may be down, or bypassed), so the operator
//!   clamps to `i32::MAX` instead of wrapping; the webhook rejects what would need the clamp.

use std::time::Duration;

use crate::duration::{DurationError, GoDuration};

/// The largest `activeDeadlineSeconds` Kubernetes accepts.
pub const MAX_DEADLINE_SECONDS: i32 = i32::MAX;

/// The largest accepted `stageTimeout`, in the form users write it (`596523h14m7s`).
pub fn max_stage_timeout() -> GoDuration {
    GoDuration::from_nanos(i64::from(MAX_DEADLINE_SECONDS) * 1_000_000_000)
}

/// Why a `stageTimeout` (or `JOB_STAGE_TIMEOUT`) value is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StageTimeoutError {
    /// Not Go duration syntax.
    #[error("{0}")]
    Unparseable(#[from] DurationError),
    /// A negative duration: an attempt cannot be bounded by negative time.
    #[error(
        "{value:?} is negative: use a positive duration such as \"30m\", or \"0\" for no time bound"
    )]
    Negative {
        /// The value as written.
        value: String,
    },
    /// Its whole seconds do not fit `activeDeadlineSeconds` (int32).
    #[error(
        "{value:?} is too large: its whole seconds must fit a Kubernetes activeDeadlineSeconds (int32); \
         the largest accepted value is {max:?}"
    )]
    TooLarge {
        /// The value as written.
        value: String,
        /// The largest accepted value, formatted as a Go duration.
        max: String,
    },
}

/// Parses a stage timeout as the operator does: Go syntax, not negative. A value too large for
/// `activeDeadlineSeconds` is accepted here and clamped later by [`stage_deadline`].
pub fn parse_stage_timeout(text: &str) -> Result<Duration, StageTimeoutError> {
    let parsed = GoDuration::parse(text)?;
    parsed.to_std().ok_or_else(|| StageTimeoutError::Negative {
        value: text.to_owned(),
    })
}

/// Parses a stage timeout as the webhook does: like [`parse_stage_timeout`], and additionally rejects
/// a value whose whole seconds would not fit `activeDeadlineSeconds`, so nothing admitted needs the
/// operator's clamp.
pub fn check_stage_timeout(text: &str) -> Result<Duration, StageTimeoutError> {
    let timeout = parse_stage_timeout(text)?;
    if ceil_seconds(timeout) > u64::from(MAX_DEADLINE_SECONDS.unsigned_abs()) {
        return Err(StageTimeoutError::TooLarge {
            value: text.to_owned(),
            max: max_stage_timeout().to_string(),
        });
    }
    Ok(timeout)
}

/// The `activeDeadlineSeconds` for a stage bounded by `timeout`: `None` for zero (no bound), otherwise
/// whole seconds rounded up (so never 0), clamped to `i32::MAX`.
pub fn stage_deadline(timeout: Duration) -> Option<i32> {
    if timeout.is_zero() {
        return None;
    }
    let secs = ceil_seconds(timeout);
    Some(i32::try_from(secs).unwrap_or(MAX_DEADLINE_SECONDS))
}

fn ceil_seconds(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn zero_means_no_bound() {
        assert_eq!(stage_deadline(Duration::ZERO), None);
        assert_eq!(parse_stage_timeout("0").map(stage_deadline), Ok(None));
    }

    #[test]
    fn rounds_up_and_is_never_zero() {
        assert_eq!(stage_deadline(Duration::from_nanos(1)), Some(1));
        assert_eq!(stage_deadline(Duration::from_millis(300)), Some(1));
        assert_eq!(stage_deadline(Duration::from_millis(1500)), Some(2));
        assert_eq!(stage_deadline(Duration::from_secs(45)), Some(45));
        assert_eq!(
            parse_stage_timeout("1h30m").map(stage_deadline),
            Ok(Some(5400))
        );
    }

    #[test]
    fn clamp_boundary_at_i32_max() {
        let max = Duration::from_secs(i32::MAX as u64);
        assert_eq!(stage_deadline(max), Some(i32::MAX));
        // One nanosecond past rounds up past int32 and is clamped, never wrapped.
        assert_eq!(
            stage_deadline(max + Duration::from_nanos(1)),
            Some(i32::MAX)
        );
        assert_eq!(stage_deadline(max + Duration::from_secs(1)), Some(i32::MAX));
        assert_eq!(stage_deadline(Duration::MAX), Some(i32::MAX));
    }

    #[test]
    fn webhook_accepts_up_to_the_max_and_names_it() {
        assert_eq!(max_stage_timeout().to_string(), "596523h14m7s");
        assert_eq!(
            check_stage_timeout("596523h14m7s"),
            Ok(Duration::from_secs(i32::MAX as u64))
        );
        assert_eq!(
            check_stage_timeout("596523h14m8s"),
            Err(StageTimeoutError::TooLarge {
                value: "596523h14m8s".into(),
                max: "596523h14m7s".into()
            })
        );
        // Half a second past the max rounds up past int32.
        assert!(matches!(
            check_stage_timeout("596523h14m7.5s"),
            Err(StageTimeoutError::TooLarge { .. })
        ));
        // The operator path accepts it and clamps.
        assert_eq!(
            parse_stage_timeout("596523h14m8s").map(stage_deadline),
            Ok(Some(i32::MAX))
        );
    }

    #[test]
    fn negative_and_garbage_are_errors() {
        assert_eq!(
            parse_stage_timeout("-5m"),
            Err(StageTimeoutError::Negative {
                value: "-5m".into()
            })
        );
        assert!(matches!(
            parse_stage_timeout("soon"),
            Err(StageTimeoutError::Unparseable(_))
        ));
        assert!(matches!(
            parse_stage_timeout("9999999999h"),
            Err(StageTimeoutError::Unparseable(DurationError::Overflow(_)))
        ));
        let msg = check_stage_timeout("999999h")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            msg.contains("999999h") && msg.contains("596523h14m7s"),
            "{msg}"
        );
    }

    proptest! {
        #[test]
        fn deadline_is_monotonic(a in any::<u64>(), b in any::<u64>()) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let dl = stage_deadline(Duration::from_nanos(lo));
            let dh = stage_deadline(Duration::from_nanos(hi));
            prop_assert!(dl.unwrap_or(0) <= dh.unwrap_or(0));
        }

        #[test]
        fn deadline_covers_the_timeout(nanos in 1u64..(i32::MAX as u64) * 1_000_000_000) {
            let d = Duration::from_nanos(nanos);
            let secs = stage_deadline(d);
            prop_assert!(secs.is_some());
            let secs = secs.unwrap_or(0);
            prop_assert!(secs >= 1);
            // Never shorter than asked, and less than a second longer.
            prop_assert!(Duration::from_secs(secs as u64) >= d);
            prop_assert!(Duration::from_secs(secs as u64) < d + Duration::from_secs(1));
        }

        #[test]
        fn webhook_and_operator_agree_below_the_max(secs in 0u64..=(i32::MAX as u64)) {
            let text = GoDuration::from_secs(secs as i64).map(|d| d.to_string()).unwrap_or_default();
            prop_assert_eq!(check_stage_timeout(&text), parse_stage_timeout(&text));
        }

        #[test]
        fn everything_past_the_max_is_rejected_by_the_webhook(secs in (i32::MAX as u64 + 1)..9_000_000_000u64) {
            let text = format!("{secs}s");
            let is_too_large = matches!(check_stage_timeout(&text), Err(StageTimeoutError::TooLarge { .. }));
            prop_assert!(is_too_large);
            prop_assert_eq!(parse_stage_timeout(&text).map(stage_deadline), Ok(Some(i32::MAX)));
        }
    }
}
